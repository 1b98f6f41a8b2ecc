/* gs_config.c — the configuration's loader: the defaults, the YAML file,
 * single keys set by flags, and the checks across keys (see gs_config.h).
 * What each key accepts is the table's (gs_config_keys.c).
 *
 * The file is loaded with libyaml's document API: the root must be a mapping
 * of scalar keys; every value is a scalar except `devices`, which may also be
 * a sequence of scalars.  Values are parsed into a copy of the caller's
 * config, which is committed only if the whole file is good. */
#include "gs_config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "gs_config_keys.h"
#include "gs_log.h"

/* A config file is a few hundred bytes; refuse anything absurd. */
#define CONFIG_MAX_BYTES (1u << 20)

void gs_config_defaults(struct gs_config *c)
{
        memset(c, 0, sizeof(*c));
        snprintf(c->resource_name, sizeof(c->resource_name), "gshare.io/gpumem");
        c->unit_bytes = GS_GiB;
        c->chunk_bytes = 64 * GS_MiB;
        c->reserve_bytes = 512 * GS_MiB;
        c->balloon_cap_bytes = 0;
        c->max_blocks_per_process = UINT64_C(1) << 20;
        c->max_blocks_per_allocation = UINT64_C(1) << 22;
        c->ndevices = 0;
        snprintf(c->agent_socket, sizeof(c->agent_socket), "/run/gshare/agent.sock");
        snprintf(c->socket_root, sizeof(c->socket_root), "/run/gshare/alloc");
        snprintf(c->state_dir, sizeof(c->state_dir), "/var/lib/gshare");
        snprintf(c->kubelet_dir, sizeof(c->kubelet_dir), "/var/lib/kubelet/device-plugins");
        snprintf(c->hook_path, sizeof(c->hook_path), "/usr/local/lib/gshare/libgshare.so");
        snprintf(c->preload_path, sizeof(c->preload_path), "/usr/local/lib/gshare/ld.so.preload");
        c->inject = GS_INJECT_PRELOAD;
        c->device_nodes = 0;
        snprintf(c->cuda_library, sizeof(c->cuda_library), "libcuda.so.1");
        snprintf(c->nvml_library, sizeof(c->nvml_library), "libnvidia-ml.so.1");
        c->context_bytes = 0;
        c->usage_interval_ms = 1000;
        c->move_back_quiet_ms = 10000;
        c->agent_wait_ms = 30000;
        c->over_quota = GS_OVER_QUOTA_KILL;
        c->over_quota_bound_bytes = 256 * GS_MiB;
        c->over_quota_grace_ms = 5000;
        c->metrics_address[0] = '\0';
        c->log_level = GS_LOG_INFO;
        snprintf(c->pod_resources_socket, sizeof(c->pod_resources_socket),
                 "/var/lib/kubelet/pod-resources/kubelet.sock");
        c->reconcile_interval_ms = 10 * 1000;
        c->worker_threads = 4;
        c->max_conns = 4096;
        c->max_conns_per_alloc = 1024;
        c->max_conns_per_proc = 4;
        c->reclaim_grace_ms = 60 * 1000;
        c->compute_latency_priority = 1000000;
        c->pod_watch = GS_POD_WATCH_AUTO;
        snprintf(c->api_token_file, sizeof(c->api_token_file), "/var/run/secrets/kubernetes.io/serviceaccount/token");
        snprintf(c->api_ca_file, sizeof(c->api_ca_file), "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt");
}

/* ---- parsing one file ---- */

struct ctx {
        const char *path;
        yaml_document_t *doc;
        char *err;
        size_t errlen;
};

static int GS_PRINTF(4, 5) fail_at(struct ctx *x, const yaml_node_t *n, const char *key, const char *fmt, ...)
{
        char msg[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (key)
                snprintf(x->err, x->errlen, "%s:%zu: %s: %s", x->path, (size_t)n->start_mark.line + 1, key, msg);
        else
                snprintf(x->err, x->errlen, "%s:%zu: %s", x->path, (size_t)n->start_mark.line + 1, msg);
        return -EINVAL;
}

static const char *scalar(const yaml_node_t *n)
{
        return n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static int want_scalar(struct ctx *x, const yaml_node_t *v, const char *key, const char **ret)
{
        const char *s = scalar(v);

        if (!s)
                return fail_at(x, v, key, "expected a single value, got a %s",
                               v->type == YAML_SEQUENCE_NODE ? "list" : "mapping");
        *ret = s;
        return 0;
}

/* A list of devices, item by item: each error names the item's line. */
static int set_device_list(struct ctx *x, struct gs_config *c, const char *key, const yaml_node_t *v)
{
        char msg[512];

        c->ndevices = 0;
        for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
                const yaml_node_t *item = yaml_document_get_node(x->doc, *it);
                const char *s = NULL;
                int r = want_scalar(x, item, key, &s);

                if (r < 0)
                        return r;
                if (gs_config_device_add(c, s, msg, sizeof(msg)) < 0)
                        return fail_at(x, item, key, "%s", msg);
        }
        if (c->ndevices == 0)
                return fail_at(x, v, key, "an empty list selects no GPU; use 'all' or name some");
        return 0;
}

static int set_key(struct ctx *x, struct gs_config *c, const char *key, const yaml_node_t *v)
{
        const struct gs_config_key *k = gs_config_key_find(key);
        const char *s = NULL;
        char msg[512];
        int r;

        if (!k || strcmp(k->name, key) != 0) /* a flag's name is no YAML key */
                return fail_at(x, v, key, "unknown key");
        if (k->type == GS_CT_DEVICES && v->type == YAML_SEQUENCE_NODE)
                return set_device_list(x, c, key, v);
        if (k->type == GS_CT_DEVICES && v->type == YAML_MAPPING_NODE)
                return fail_at(x, v, key, "expected 'all' or a list, got a mapping");
        r = want_scalar(x, v, key, &s);
        if (r < 0)
                return r;
        if (gs_config_key_set(k, c, s, msg, sizeof(msg)) < 0)
                return fail_at(x, v, key, "%s", msg);
        return 0;
}

static int parse_doc(struct ctx *x, struct gs_config *c)
{
        yaml_node_t *root = yaml_document_get_root_node(x->doc);
        int r;

        if (!root) /* an empty file: nothing to change */
                return 0;
        if (root->type == YAML_SCALAR_NODE && !*scalar(root))
                return 0;
        if (root->type != YAML_MAPPING_NODE)
                return fail_at(x, root, NULL, "expected a mapping of key: value at the top level");
        for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
                yaml_node_t *k = yaml_document_get_node(x->doc, p->key);
                yaml_node_t *v = yaml_document_get_node(x->doc, p->value);
                const char *key = scalar(k);

                if (!key)
                        return fail_at(x, k, NULL, "a key must be a plain word");
                for (yaml_node_pair_t *q = root->data.mapping.pairs.start; q < p; q++) {
                        const char *prev = scalar(yaml_document_get_node(x->doc, q->key));
                        if (prev && strcmp(prev, key) == 0)
                                return fail_at(x, k, key, "given twice");
                }
                r = set_key(x, c, key, v);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int read_file(const char *path, unsigned char **ret_buf, size_t *ret_len)
{
        struct stat st;
        unsigned char *buf = NULL;
        size_t len = 0;
        int fd, r = 0;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return gs_neg_errno();
        if (fstat(fd, &st) < 0) {
                r = gs_neg_errno();
                goto out;
        }
        if (!S_ISREG(st.st_mode)) {
                r = -EINVAL;
                goto out;
        }
        if ((uint64_t)st.st_size > CONFIG_MAX_BYTES) {
                r = -EFBIG;
                goto out;
        }
        buf = malloc((size_t)st.st_size + 1);
        if (!buf) {
                r = -ENOMEM;
                goto out;
        }
        /* One byte of room more than its size: a file that grew while we
         * read is -EFBIG. */
        r = gs_read_all(fd, buf, (size_t)st.st_size + 1, &len);
        if (r < 0)
                goto out;
        *ret_buf = buf;
        *ret_len = len;
        buf = NULL;
out:
        free(buf);
        close(fd);
        return r;
}

int gs_config_load(struct gs_config *c, const char *path, char *err, size_t errlen)
{
        struct gs_config tmp = *c;
        yaml_parser_t parser;
        yaml_document_t doc;
        unsigned char *buf = NULL;
        size_t len = 0;
        struct ctx x = { .path = path, .doc = &doc, .err = err, .errlen = errlen };
        int r;

        r = read_file(path, &buf, &len);
        if (r < 0) {
                if (r == -EFBIG)
                        snprintf(err, errlen, "%s: larger than %u bytes, not a gshare config", path, CONFIG_MAX_BYTES);
                else if (r == -EINVAL)
                        snprintf(err, errlen, "%s: not a regular file", path);
                else
                        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(-r));
                return r;
        }
        if (!yaml_parser_initialize(&parser)) {
                free(buf);
                snprintf(err, errlen, "%s: out of memory", path);
                return -ENOMEM;
        }
        yaml_parser_set_input_string(&parser, buf, len);
        if (!yaml_parser_load(&parser, &doc)) {
                snprintf(err, errlen, "%s:%zu: %s%s%s", path, (size_t)parser.problem_mark.line + 1,
                         parser.problem ? parser.problem : "YAML syntax error", parser.context ? " " : "",
                         parser.context ? parser.context : "");
                yaml_parser_delete(&parser);
                free(buf);
                return -EINVAL;
        }
        r = parse_doc(&x, &tmp);
        yaml_document_delete(&doc);
        yaml_parser_delete(&parser);
        free(buf);
        if (r == 0)
                *c = tmp;
        return r;
}

/* A list of devices from a flag: "all", or items separated by commas. */
static int set_device_words(struct gs_config *c, const char *list, char *msg, size_t n)
{
        const char *p = list, *comma;
        char item[sizeof(c->devices[0])];

        c->ndevices = 0;
        if (strcmp(list, "all") == 0)
                return 0;
        for (;; p = comma + 1) {
                size_t len;

                comma = strchr(p, ',');
                len = comma ? (size_t)(comma - p) : strlen(p);
                if (len >= sizeof(item)) {
                        snprintf(msg, n, "'%.*s...' is neither a GPU UUID (GPU-xxxxxxxx-...) nor an index",
                                 (int)sizeof(item), p);
                        return -EINVAL;
                }
                memcpy(item, p, len);
                item[len] = '\0';
                if (gs_config_device_add(c, item, msg, n) < 0)
                        return -EINVAL;
                if (!comma)
                        return 0;
        }
}

int gs_config_set(struct gs_config *c, const char *name, const char *value, char *err, size_t errlen)
{
        const struct gs_config_key *k = gs_config_key_find(name);

        if (!k) {
                snprintf(err, errlen, "%s: unknown key", name);
                return -EINVAL;
        }
        return gs_config_set_key(c, k, name, value, err, errlen);
}

int gs_config_set_key(struct gs_config *c, const struct gs_config_key *k, const char *what, const char *value,
                      char *err, size_t errlen)
{
        struct gs_config *tmp;
        char msg[512];
        int r;

        /* A key's setter writes only on success, but a list of devices
         * grows item by item: work on a copy. */
        tmp = malloc(sizeof(*tmp));
        if (!tmp) {
                snprintf(err, errlen, "%s: out of memory", what);
                return -ENOMEM;
        }
        *tmp = *c;
        if (k->type == GS_CT_DEVICES)
                r = set_device_words(tmp, value, msg, sizeof(msg));
        else
                r = gs_config_key_set(k, tmp, value, msg, sizeof(msg));
        if (r < 0)
                snprintf(err, errlen, "%s: %s", what, msg);
        else
                *c = *tmp;
        free(tmp);
        return r;
}

int gs_config_validate(const struct gs_config *c, char *err, size_t errlen)
{
        char u[32], k[32];

        gs_format_size(c->unit_bytes, u, sizeof(u));
        gs_format_size(c->chunk_bytes, k, sizeof(k));
        if (!gs_is_pow2(c->chunk_bytes) || c->chunk_bytes % (2 * GS_MiB) != 0) {
                snprintf(err, errlen, "chunkSize: must be a power of two and a multiple of 2Mi, got %s", k);
                return -EINVAL;
        }
        if (c->unit_bytes == 0 || c->unit_bytes % c->chunk_bytes != 0) {
                snprintf(err, errlen, "unitSize (%s) must be a non-zero multiple of chunkSize (%s)", u, k);
                return -EINVAL;
        }
        if (c->balloon_cap_bytes % c->chunk_bytes != 0) {
                gs_format_size(c->balloon_cap_bytes, u, sizeof(u));
                snprintf(err, errlen, "balloonCap (%s) must be a multiple of chunkSize (%s)", u, k);
                return -EINVAL;
        }
        if (c->burst_max_bytes % c->chunk_bytes != 0) {
                gs_format_size(c->burst_max_bytes, u, sizeof(u));
                snprintf(err, errlen, "burstMax (%s) must be a multiple of chunkSize (%s)", u, k);
                return -EINVAL;
        }
        if (c->spill_max_bytes % c->chunk_bytes != 0) {
                gs_format_size(c->spill_max_bytes, u, sizeof(u));
                snprintf(err, errlen, "spillMax (%s) must be a multiple of chunkSize (%s)", u, k);
                return -EINVAL;
        }
        if (!gs_config_valid_resource_name(c->resource_name)) {
                snprintf(err, errlen, "resourceName: expected domain/name, got '%s'", c->resource_name);
                return -EINVAL;
        }
        if (c->kubelet_dir[0] != '/' || c->agent_socket[0] != '/') {
                snprintf(err, errlen, "kubeletDir and agentSocket must be absolute paths");
                return -EINVAL;
        }
        return 0;
}
