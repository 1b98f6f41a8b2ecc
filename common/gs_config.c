/* gs_config.c — see gs_config.h.
 *
 * The file is loaded with libyaml's document API: the root must be a mapping
 * of scalar keys; every value is a scalar except `devices`, which may also be
 * a sequence of scalars.  Values are parsed into a copy of the caller's
 * config, which is committed only if the whole file is good. */
#include "gs_config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <yaml.h>

#include "gs_devid.h"
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
        c->pod_watch = GS_POD_WATCH_AUTO;
        snprintf(c->api_token_file, sizeof(c->api_token_file),
                 "/var/run/secrets/kubernetes.io/serviceaccount/token");
        snprintf(c->api_ca_file, sizeof(c->api_ca_file),
                 "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt");
}

static const struct {
        const char *suffix;
        unsigned shift;
} size_suffixes[] = { { "Ti", 40 }, { "Gi", 30 }, { "Mi", 20 }, { "Ki", 10 } };

int gs_parse_size(const char *s, uint64_t *ret_bytes)
{
        uint64_t v = 0;
        const char *p = s;
        unsigned shift = 0;

        if (!s || *s < '0' || *s > '9')
                return -EINVAL;
        for (; *p >= '0' && *p <= '9'; p++) {
                unsigned d = (unsigned)(*p - '0');
                if (v > (UINT64_MAX - d) / 10)
                        return -ERANGE;
                v = v * 10 + d;
        }
        if (*p) {
                size_t i;
                for (i = 0; i < GS_ARRAY_SIZE(size_suffixes); i++)
                        if (strcmp(p, size_suffixes[i].suffix) == 0)
                                break;
                if (i == GS_ARRAY_SIZE(size_suffixes))
                        return -EINVAL;
                shift = size_suffixes[i].shift;
        }
        if (shift && v > (UINT64_MAX >> shift))
                return -ERANGE;
        *ret_bytes = v << shift;
        return 0;
}

#define DURATION_MAX_MS (24ull * 3600 * 1000)

int gs_parse_duration_ms(const char *s, uint32_t *ret_ms)
{
        static const struct {
                const char *unit;
                uint64_t ms;
        } units[] = { { "ms", 1 }, { "s", 1000 }, { "m", 60 * 1000 }, { "h", 3600 * 1000 }, { "", 1000 } };
        uint64_t whole = 0, frac = 0, frac_div = 1;
        const char *p = s;
        size_t i;

        if (!s || *s < '0' || *s > '9')
                return -EINVAL;
        for (; *p >= '0' && *p <= '9'; p++) {
                whole = whole * 10 + (uint64_t)(*p - '0');
                if (whole > DURATION_MAX_MS)
                        return -ERANGE;
        }
        if (*p == '.') {
                p++;
                if (*p < '0' || *p > '9')
                        return -EINVAL;
                /* Digits past the ninth cannot matter at millisecond resolution. */
                for (; *p >= '0' && *p <= '9'; p++)
                        if (frac_div < 1000000000ull) {
                                frac = frac * 10 + (uint64_t)(*p - '0');
                                frac_div *= 10;
                        }
        }
        for (i = 0; i < GS_ARRAY_SIZE(units); i++)
                if (strcmp(p, units[i].unit) == 0)
                        break;
        if (i == GS_ARRAY_SIZE(units))
                return -EINVAL;
        if (whole > DURATION_MAX_MS / units[i].ms)
                return -ERANGE;
        whole = whole * units[i].ms + (frac * units[i].ms + frac_div / 2) / frac_div;
        if (whole > DURATION_MAX_MS)
                return -ERANGE;
        *ret_ms = (uint32_t)whole;
        return 0;
}

void gs_format_size(uint64_t bytes, char *buf, size_t n)
{
        if (bytes == 0) {
                snprintf(buf, n, "0");
                return;
        }
        for (size_t i = 0; i < GS_ARRAY_SIZE(size_suffixes); i++) {
                uint64_t unit = UINT64_C(1) << size_suffixes[i].shift;
                if (bytes % unit == 0) {
                        snprintf(buf, n, "%llu%s", (unsigned long long)(bytes / unit),
                                 size_suffixes[i].suffix);
                        return;
                }
        }
        snprintf(buf, n, "%llu", (unsigned long long)bytes);
}

/* ---- parsing one file ---- */

struct ctx {
        const char *path;
        yaml_document_t *doc;
        char *err;
        size_t errlen;
};

static int GS_PRINTF(4, 5) fail_at(struct ctx *x, const yaml_node_t *n, const char *key,
                                    const char *fmt, ...)
{
        char msg[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (key)
                snprintf(x->err, x->errlen, "%s:%zu: %s: %s", x->path,
                         (size_t)n->start_mark.line + 1, key, msg);
        else
                snprintf(x->err, x->errlen, "%s:%zu: %s", x->path,
                         (size_t)n->start_mark.line + 1, msg);
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

static int set_string(struct ctx *x, const yaml_node_t *v, const char *key, char *dst,
                      size_t cap, int allow_empty)
{
        const char *s = NULL;
        int r = want_scalar(x, v, key, &s);

        if (r < 0)
                return r;
        if (!allow_empty && !*s)
                return fail_at(x, v, key, "must not be empty");
        if (strlen(s) >= cap)
                return fail_at(x, v, key, "too long (%zu characters, at most %zu)", strlen(s),
                               cap - 1);
        memcpy(dst, s, strlen(s) + 1);
        return 0;
}

static int set_path(struct ctx *x, const yaml_node_t *v, const char *key, char *dst, size_t cap)
{
        const char *s = NULL;
        int r = want_scalar(x, v, key, &s);

        if (r < 0)
                return r;
        if (s[0] != '/')
                return fail_at(x, v, key, "must be an absolute path, got '%s'", s);
        return set_string(x, v, key, dst, cap, 0);
}

/* A socket path must also fit sockaddr_un. */
static int set_socket_path(struct ctx *x, const yaml_node_t *v, const char *key, char *dst,
                           size_t cap)
{
        struct sockaddr_un sa;
        const char *s = NULL;
        int r = want_scalar(x, v, key, &s);

        if (r < 0)
                return r;
        if (strlen(s) >= sizeof(sa.sun_path))
                return fail_at(x, v, key, "socket path too long (%zu characters, at most %zu)",
                               strlen(s), sizeof(sa.sun_path) - 1);
        return set_path(x, v, key, dst, cap);
}

static int set_size(struct ctx *x, const yaml_node_t *v, const char *key, uint64_t *dst,
                    int allow_zero)
{
        const char *s = NULL;
        uint64_t b;
        int r = want_scalar(x, v, key, &s);

        if (r < 0)
                return r;
        r = gs_parse_size(s, &b);
        if (r == -ERANGE)
                return fail_at(x, v, key, "size '%s' is too large", s);
        if (r < 0)
                return fail_at(x, v, key,
                               "not a size: '%s' (a byte count, or a number with Ki, Mi, Gi or Ti)",
                               s);
        if (!allow_zero && b == 0)
                return fail_at(x, v, key, "must not be 0");
        *dst = b;
        return 0;
}

/* "domain/name": a DNS subdomain, a slash, and a name of [A-Za-z0-9._-]. */
static int valid_resource_name(const char *s)
{
        const char *slash = strchr(s, '/');
        size_t dl;

        if (!slash || slash == s || strchr(slash + 1, '/') || !slash[1])
                return 0;
        dl = (size_t)(slash - s);
        if (dl > 253 || strlen(slash + 1) > 63)
                return 0;
        for (const char *p = s; p < slash; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '.' ||
                      *p == '-'))
                        return 0;
        for (const char *p = slash + 1; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                      (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '_'))
                        return 0;
        return 1;
}

static int valid_device(const char *s)
{
        uint8_t raw[16];
        char *end;
        unsigned long v;

        if (gs_uuid_parse(s, raw) == 0)
                return 1;
        if (*s < '0' || *s > '9' || (s[0] == '0' && s[1]))
                return 0;
        errno = 0;
        v = strtoul(s, &end, 10);
        return errno == 0 && *end == '\0' && v < 1024;
}

static int add_device(struct ctx *x, struct gs_config *c, const yaml_node_t *v)
{
        const char *s = NULL;
        int r = want_scalar(x, v, "devices", &s);

        if (r < 0)
                return r;
        if (!valid_device(s))
                return fail_at(x, v, "devices",
                               "'%s' is neither a GPU UUID (GPU-xxxxxxxx-...) nor an index", s);
        for (unsigned i = 0; i < c->ndevices; i++)
                if (strcasecmp(c->devices[i], s) == 0)
                        return fail_at(x, v, "devices", "'%s' listed twice", s);
        if (c->ndevices >= GS_CONFIG_MAX_DEVICES)
                return fail_at(x, v, "devices", "more than %d entries", GS_CONFIG_MAX_DEVICES);
        snprintf(c->devices[c->ndevices++], sizeof(c->devices[0]), "%s", s);
        return 0;
}

static int set_devices(struct ctx *x, struct gs_config *c, const yaml_node_t *v)
{
        int r;

        c->ndevices = 0;
        if (v->type == YAML_SCALAR_NODE) {
                if (strcmp(scalar(v), "all") == 0)
                        return 0;
                return fail_at(x, v, "devices", "expected 'all' or a list, got '%s'", scalar(v));
        }
        if (v->type != YAML_SEQUENCE_NODE)
                return fail_at(x, v, "devices", "expected 'all' or a list, got a mapping");
        for (yaml_node_item_t *it = v->data.sequence.items.start;
             it < v->data.sequence.items.top; it++) {
                r = add_device(x, c, yaml_document_get_node(x->doc, *it));
                if (r < 0)
                        return r;
        }
        if (c->ndevices == 0)
                return fail_at(x, v, "devices", "an empty list selects no GPU; use 'all' or name some");
        return 0;
}

static int set_duration(struct ctx *x, const yaml_node_t *v, const char *key, uint32_t *dst)
{
        const char *s = NULL;
        int r = want_scalar(x, v, key, &s);

        if (r < 0)
                return r;
        r = gs_parse_duration_ms(s, dst);
        if (r == -ERANGE)
                return fail_at(x, v, key, "duration '%s' is too long (at most 24h)", s);
        if (r < 0)
                return fail_at(x, v, key,
                               "not a duration: '%s' (a number with ms, s, m or h, e.g. 10s)", s);
        return 0;
}

/* A count in 1..GS_CONFIG_MAX_BLOCKS, plain decimal. */
static int set_block_cap(struct ctx *x, const yaml_node_t *v, const char *key, uint64_t *dst)
{
        const char *s = NULL;
        uint64_t n = 0;
        int r = want_scalar(x, v, key, &s);

        if (r < 0)
                return r;
        if (!*s)
                return fail_at(x, v, key, "expected a number of blocks, got ''");
        for (const char *p = s; *p; p++)
                if (*p < '0' || *p > '9')
                        return fail_at(x, v, key, "expected a number of blocks, got '%s'", s);
        /* stops once past the limit: no overflow */
        for (const char *p = s; *p && n <= GS_CONFIG_MAX_BLOCKS; p++)
                n = n * 10 + (uint64_t)(*p - '0');
        if (n == 0 || n > GS_CONFIG_MAX_BLOCKS)
                return fail_at(x, v, key, "must be 1 to %llu, got %s", (unsigned long long)GS_CONFIG_MAX_BLOCKS, s);
        *dst = n;
        return 0;
}

/* A whole number in [1, max]. */
static int set_count(struct ctx *x, const yaml_node_t *v, const char *key, uint32_t max, uint32_t *dst)
{
        const char *s = NULL;
        unsigned long long n;
        char *end;
        int r = want_scalar(x, v, key, &s);

        if (r < 0)
                return r;
        errno = 0;
        n = strtoull(s, &end, 10);
        if (errno || end == s || *end || s[0] == '-' || n < 1 || n > max)
                return fail_at(x, v, key, "expected a whole number from 1 to %u, got '%s'", max, s);
        *dst = (uint32_t)n;
        return 0;
}

static int set_bool(struct ctx *x, const yaml_node_t *v, const char *key, int *dst)
{
        static const char *const yes[] = { "true", "yes", "on" }, *const no[] = { "false", "no", "off" };
        const char *s = NULL;
        int r = want_scalar(x, v, key, &s);

        if (r < 0)
                return r;
        for (size_t i = 0; i < GS_ARRAY_SIZE(yes); i++) {
                if (strcasecmp(s, yes[i]) == 0) {
                        *dst = 1;
                        return 0;
                }
                if (strcasecmp(s, no[i]) == 0) {
                        *dst = 0;
                        return 0;
                }
        }
        return fail_at(x, v, key, "expected true or false, got '%s'", s);
}

static int set_metrics(struct ctx *x, const yaml_node_t *v, struct gs_config *c)
{
        const char *s = NULL, *colon;
        char *end, host[64];
        unsigned long port;
        size_t hlen;
        struct in6_addr a6;     /* room for either family */
        bool ok = false;
        int r = want_scalar(x, v, "metricsAddress", &s);

        if (r < 0)
                return r;
        if (*s) {
                colon = strrchr(s, ':');
                if (!colon || colon[1] < '0' || colon[1] > '9')
                        return fail_at(x, v, "metricsAddress",
                                       "expected host:port (e.g. 0.0.0.0:9400), got '%s'", s);
                errno = 0;
                port = strtoul(colon + 1, &end, 10);
                if (errno || *end || port == 0 || port > 65535)
                        return fail_at(x, v, "metricsAddress", "bad port in '%s'", s);
                /* Literals only: the agent does no name lookups. */
                hlen = (size_t)(colon - s);
                if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']' && hlen - 2 < sizeof(host)) {
                        memcpy(host, s + 1, hlen - 2);
                        host[hlen - 2] = '\0';
                        ok = inet_pton(AF_INET6, host, &a6) == 1;
                } else if (hlen < sizeof(host)) {
                        memcpy(host, s, hlen);
                        host[hlen] = '\0';
                        ok = inet_pton(AF_INET, host, &a6) == 1;
                }
                if (!ok)
                        return fail_at(x, v, "metricsAddress",
                                       "host must be an IPv4 address or a bracketed IPv6 address "
                                       "(e.g. 0.0.0.0:9400, [::]:9400), got '%s'", s);
        }
        return set_string(x, v, "metricsAddress", c->metrics_address, sizeof(c->metrics_address), 1);
}

/* An absolute path, or "" for none. */
static int set_opt_path(struct ctx *x, const yaml_node_t *v, const char *key, char *dst, size_t cap)
{
        const char *s = NULL;
        int r = want_scalar(x, v, key, &s);

        if (r < 0)
                return r;
        if (!*s) {
                dst[0] = '\0';
                return 0;
        }
        return set_path(x, v, key, dst, cap);
}

static int set_api_server(struct ctx *x, const yaml_node_t *v, struct gs_config *c)
{
        const char *s = NULL;
        int r = want_scalar(x, v, "apiServer", &s);

        if (r < 0)
                return r;
        if (*s && strncmp(s, "https://", 8) != 0 && strncmp(s, "http://", 7) != 0)
                return fail_at(x, v, "apiServer", "expected an http:// or https:// URL, got '%s'", s);
        for (const char *p = s; *p; p++)
                if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f || *p == '?' || *p == '#')
                        return fail_at(x, v, "apiServer",
                                       "expected a plain URL (no spaces, query or fragment), got '%s'", s);
        return set_string(x, v, "apiServer", c->api_server, sizeof(c->api_server), 1);
}

static int set_node_name(struct ctx *x, const yaml_node_t *v, struct gs_config *c)
{
        const char *s = NULL;
        int r = want_scalar(x, v, "nodeName", &s);

        if (r < 0)
                return r;
        for (const char *p = s; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '.' || *p == '-'))
                        return fail_at(x, v, "nodeName", "not a node name (a DNS subdomain): '%s'", s);
        return set_string(x, v, "nodeName", c->node_name, sizeof(c->node_name), 1);
}

static int set_key(struct ctx *x, struct gs_config *c, const char *key, const yaml_node_t *v)
{
        const char *s = NULL;
        int r;

        if (strcmp(key, "resourceName") == 0) {
                r = want_scalar(x, v, key, &s);
                if (r < 0)
                        return r;
                if (!valid_resource_name(s))
                        return fail_at(x, v, key,
                                       "expected domain/name (e.g. gshare.io/gpumem), got '%s'", s);
                return set_string(x, v, key, c->resource_name, sizeof(c->resource_name), 0);
        }
        if (strcmp(key, "unitSize") == 0)
                return set_size(x, v, key, &c->unit_bytes, 0);
        if (strcmp(key, "chunkSize") == 0) {
                uint64_t b;
                char buf[32];
                r = set_size(x, v, key, &b, 0);
                if (r < 0)
                        return r;
                gs_format_size(b, buf, sizeof(buf));
                if (!gs_is_pow2(b))
                        return fail_at(x, v, key, "must be a power of two, got %s", buf);
                if (b < 2 * GS_MiB)
                        return fail_at(x, v, key, "must be a multiple of 2Mi (the VMM granularity), got %s", buf);
                c->chunk_bytes = b;
                return 0;
        }
        if (strcmp(key, "reserve") == 0)
                return set_size(x, v, key, &c->reserve_bytes, 1);
        if (strcmp(key, "balloonCap") == 0)
                return set_size(x, v, key, &c->balloon_cap_bytes, 1);
        if (strcmp(key, "maxBlocksPerProcess") == 0)
                return set_block_cap(x, v, key, &c->max_blocks_per_process);
        if (strcmp(key, "maxBlocksPerAllocation") == 0)
                return set_block_cap(x, v, key, &c->max_blocks_per_allocation);
        if (strcmp(key, "devices") == 0)
                return set_devices(x, c, v);
        if (strcmp(key, "agentSocket") == 0)
                return set_socket_path(x, v, key, c->agent_socket, sizeof(c->agent_socket));
        if (strcmp(key, "socketRoot") == 0)
                return set_path(x, v, key, c->socket_root, sizeof(c->socket_root));
        if (strcmp(key, "stateDir") == 0)
                return set_path(x, v, key, c->state_dir, sizeof(c->state_dir));
        if (strcmp(key, "readyFile") == 0)
                return set_path(x, v, key, c->ready_file, sizeof(c->ready_file));
        if (strcmp(key, "kubeletDir") == 0)
                return set_path(x, v, key, c->kubelet_dir, sizeof(c->kubelet_dir));
        if (strcmp(key, "hookPath") == 0)
                return set_path(x, v, key, c->hook_path, sizeof(c->hook_path));
        if (strcmp(key, "preloadPath") == 0)
                return set_path(x, v, key, c->preload_path, sizeof(c->preload_path));
        if (strcmp(key, "inject") == 0) {
                r = want_scalar(x, v, key, &s);
                if (r < 0)
                        return r;
                if (strcmp(s, "preload") == 0)
                        c->inject = GS_INJECT_PRELOAD;
                else if (strcmp(s, "env") == 0)
                        c->inject = GS_INJECT_ENV;
                else
                        return fail_at(x, v, key, "expected preload or env, got '%s'", s);
                return 0;
        }
        if (strcmp(key, "deviceNodes") == 0)
                return set_bool(x, v, key, &c->device_nodes);
        if (strcmp(key, "cudaLibrary") == 0)
                return set_string(x, v, key, c->cuda_library, sizeof(c->cuda_library), 0);
        if (strcmp(key, "nvmlLibrary") == 0)
                return set_string(x, v, key, c->nvml_library, sizeof(c->nvml_library), 0);
        if (strcmp(key, "contextSize") == 0) {
                r = want_scalar(x, v, key, &s);
                if (r < 0)
                        return r;
                if (strcmp(s, "auto") == 0) {
                        c->context_bytes = 0;
                        return 0;
                }
                r = set_size(x, v, key, &c->context_bytes, 1);
                if (r == 0 && c->context_bytes > 64 * GS_GiB)
                        return fail_at(x, v, key, "must be auto or at most 64Gi, got '%s'", s);
                return r;
        }
        if (strcmp(key, "usageInterval") == 0)
                return set_duration(x, v, key, &c->usage_interval_ms);
        if (strcmp(key, "agentWait") == 0) {
                r = set_duration(x, v, key, &c->agent_wait_ms);
                if (r == 0 && c->agent_wait_ms > 3600000)
                        return fail_at(x, v, key, "must be at most 1h");
                return r;
        }
        if (strcmp(key, "overQuota") == 0) {
                r = want_scalar(x, v, key, &s);
                if (r < 0)
                        return r;
                if (strcmp(s, "kill") == 0)
                        c->over_quota = GS_OVER_QUOTA_KILL;
                else if (strcmp(s, "report") == 0)
                        c->over_quota = GS_OVER_QUOTA_REPORT;
                else
                        return fail_at(x, v, key, "expected kill or report, got '%s'", s);
                return 0;
        }
        if (strcmp(key, "overQuotaBound") == 0)
                return set_size(x, v, key, &c->over_quota_bound_bytes, 1);
        if (strcmp(key, "overQuotaGrace") == 0) {
                r = set_duration(x, v, key, &c->over_quota_grace_ms);
                if (r == 0 && c->over_quota_grace_ms > 3600000)
                        return fail_at(x, v, key, "must be at most 1h");
                return r;
        }
        if (strcmp(key, "metricsAddress") == 0)
                return set_metrics(x, v, c);
        if (strcmp(key, "podResourcesSocket") == 0)
                return set_socket_path(x, v, key, c->pod_resources_socket,
                                       sizeof(c->pod_resources_socket));
        if (strcmp(key, "reconcileInterval") == 0)
                return set_duration(x, v, key, &c->reconcile_interval_ms);
        if (strcmp(key, "reclaimGrace") == 0)
                return set_duration(x, v, key, &c->reclaim_grace_ms);
        if (strcmp(key, "workerThreads") == 0)
                return set_count(x, v, key, GS_CONFIG_MAX_WORKERS, &c->worker_threads);
        if (strcmp(key, "maxConnections") == 0)
                return set_count(x, v, key, GS_CONFIG_MAX_CONNS, &c->max_conns);
        if (strcmp(key, "maxConnectionsPerAllocation") == 0)
                return set_count(x, v, key, GS_CONFIG_MAX_CONNS, &c->max_conns_per_alloc);
        if (strcmp(key, "maxConnectionsPerProcess") == 0)
                return set_count(x, v, key, GS_CONFIG_MAX_CONNS, &c->max_conns_per_proc);
        if (strcmp(key, "podWatch") == 0) {
                r = want_scalar(x, v, key, &s);
                if (r < 0)
                        return r;
                if (strcmp(s, "auto") == 0)
                        c->pod_watch = GS_POD_WATCH_AUTO;
                else if (strcmp(s, "on") == 0 || strcmp(s, "true") == 0)
                        c->pod_watch = GS_POD_WATCH_ON;
                else if (strcmp(s, "off") == 0 || strcmp(s, "false") == 0)
                        c->pod_watch = GS_POD_WATCH_OFF;
                else
                        return fail_at(x, v, key, "expected auto, on or off, got '%s'", s);
                return 0;
        }
        if (strcmp(key, "apiServer") == 0)
                return set_api_server(x, v, c);
        if (strcmp(key, "apiTokenFile") == 0)
                return set_opt_path(x, v, key, c->api_token_file, sizeof(c->api_token_file));
        if (strcmp(key, "apiCaFile") == 0)
                return set_opt_path(x, v, key, c->api_ca_file, sizeof(c->api_ca_file));
        if (strcmp(key, "nodeName") == 0)
                return set_node_name(x, v, c);
        if (strcmp(key, "logLevel") == 0) {
                r = want_scalar(x, v, key, &s);
                if (r < 0)
                        return r;
                r = gs_log_parse_level(s);
                if (r < 0)
                        return fail_at(x, v, key, "expected error, warn, info or debug, got '%s'", s);
                c->log_level = r;
                return 0;
        }
        return fail_at(x, v, key, "unknown key");
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
        for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
             p++) {
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
                        snprintf(err, errlen, "%s: larger than %u bytes, not a gshare config",
                                 path, CONFIG_MAX_BYTES);
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
                snprintf(err, errlen, "%s:%zu: %s%s%s", path,
                         (size_t)parser.problem_mark.line + 1,
                         parser.problem ? parser.problem : "YAML syntax error",
                         parser.context ? " " : "", parser.context ? parser.context : "");
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
        if (!valid_resource_name(c->resource_name)) {
                snprintf(err, errlen, "resourceName: expected domain/name, got '%s'", c->resource_name);
                return -EINVAL;
        }
        if (c->kubelet_dir[0] != '/' || c->agent_socket[0] != '/') {
                snprintf(err, errlen, "kubeletDir and agentSocket must be absolute paths");
                return -EINVAL;
        }
        return 0;
}
