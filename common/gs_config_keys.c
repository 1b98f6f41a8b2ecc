/* gs_config_keys.c — the table of configuration keys and the setter of each
 * type (see gs_config_keys.h).  Nothing here knows YAML or getopt: a value
 * arrives as text and leaves as a field of struct gs_config, or as the
 * problem, which the caller prefixes with where it came from and the key. */
#include "gs_config_keys.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>

#include "gs_devid.h"
#include "gs_k8sname.h"
#include "gs_log.h"

_Static_assert(sizeof(enum gs_inject) == sizeof(int) && sizeof(enum gs_over_quota) == sizeof(int) &&
                       sizeof(enum gs_pod_watch) == sizeof(int),
               "enum keys are stored as int");

static int GS_PRINTF(3, 4) problem(char *msg, size_t n, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, n, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

/* ---- rules of single keys ---- */

/* "domain/name": a DNS subdomain, a slash, and a name of [A-Za-z0-9._-]. */
int gs_config_valid_resource_name(const char *s)
{
        const char *slash = strchr(s, '/');
        size_t dl;

        if (!slash || slash == s || strchr(slash + 1, '/') || !slash[1])
                return 0;
        dl = (size_t)(slash - s);
        if (dl > GS_K8S_SUBDOMAIN_MAX || strlen(slash + 1) > 63)
                return 0;
        {
                char domain[GS_K8S_SUBDOMAIN_MAX + 1];
                memcpy(domain, s, dl);
                domain[dl] = '\0';
                if (!gs_k8s_subdomain_ok(domain))
                        return 0;
        }
        for (const char *p = slash + 1; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '.' ||
                      *p == '-' || *p == '_'))
                        return 0;
        return 1;
}

static int check_resource_name(const char *s, uint64_t v, char *msg, size_t n)
{
        (void)v;
        if (!gs_config_valid_resource_name(s))
                return problem(msg, n, "expected domain/name (e.g. gshare.io/gpumem), got '%s'", s);
        return 0;
}

static int check_chunk(const char *s, uint64_t b, char *msg, size_t n)
{
        char buf[32];

        (void)s;
        gs_format_size(b, buf, sizeof(buf));
        if (!gs_is_pow2(b))
                return problem(msg, n, "must be a power of two, got %s", buf);
        if (b < 2 * GS_MiB)
                return problem(msg, n, "must be a multiple of 2Mi (the VMM granularity), got %s", buf);
        return 0;
}

/* host:port, the host a literal address: the agent does no name lookups. */
static int check_metrics(const char *s, uint64_t v, char *msg, size_t n)
{
        const char *colon;
        char *end, host[64];
        unsigned long port;
        size_t hlen;
        struct in6_addr a6; /* room for either family */
        bool ok = false;

        (void)v;
        if (!*s)
                return 0;
        colon = strrchr(s, ':');
        if (!colon || colon[1] < '0' || colon[1] > '9')
                return problem(msg, n, "expected host:port (e.g. 0.0.0.0:9400), got '%s'", s);
        errno = 0;
        port = strtoul(colon + 1, &end, 10);
        if (errno || *end || port == 0 || port > 65535)
                return problem(msg, n, "bad port in '%s'", s);
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
                return problem(msg, n,
                               "host must be an IPv4 address or a bracketed IPv6 address "
                               "(e.g. 0.0.0.0:9400, [::]:9400), got '%s'",
                               s);
        return 0;
}

static int check_api_server(const char *s, uint64_t v, char *msg, size_t n)
{
        (void)v;
        if (*s && strncmp(s, "https://", 8) != 0 && strncmp(s, "http://", 7) != 0)
                return problem(msg, n, "expected an http:// or https:// URL, got '%s'", s);
        for (const char *p = s; *p; p++)
                if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f || *p == '?' || *p == '#')
                        return problem(msg, n, "expected a plain URL (no spaces, query or fragment), got '%s'", s);
        return 0;
}

static int check_node_name(const char *s, uint64_t v, char *msg, size_t n)
{
        (void)v;
        if (*s && !gs_k8s_subdomain_ok(s))
                return problem(msg, n, "not a node name (a DNS subdomain): '%s'", s);
        return 0;
}

/* ---- the table ---- */

static const struct gs_config_choice inject_words[] = { { "preload", GS_INJECT_PRELOAD },
                                                        { "env", GS_INJECT_ENV },
                                                        { NULL, 0 } };
static const struct gs_config_choice over_quota_words[] = { { "kill", GS_OVER_QUOTA_KILL },
                                                            { "report", GS_OVER_QUOTA_REPORT },
                                                            { NULL, 0 } };
static const struct gs_config_choice pod_watch_words[] = { { "auto", GS_POD_WATCH_AUTO }, { "on", GS_POD_WATCH_ON },
                                                           { "true", GS_POD_WATCH_ON },   { "off", GS_POD_WATCH_OFF },
                                                           { "false", GS_POD_WATCH_OFF }, { NULL, 0 } };

#define FIELD(f) .offset = offsetof(struct gs_config, f), .size = sizeof(((struct gs_config *)0)->f)
#define HOUR_MS (3600u * 1000)

const struct gs_config_key gs_config_keys[] = {
        { "resourceName", NULL, GS_CT_STRING, FIELD(resource_name), .check = check_resource_name },
        { "unitSize", "--unit-size", GS_CT_SIZE, FIELD(unit_bytes) },
        { "chunkSize", "--chunk-size", GS_CT_SIZE, FIELD(chunk_bytes), .check = check_chunk },
        { "reserve", "--reserve", GS_CT_SIZE, FIELD(reserve_bytes), .opts = GS_CK_ZERO_OK },
        { "balloonCap", "--balloon-cap", GS_CT_SIZE, FIELD(balloon_cap_bytes), .opts = GS_CK_ZERO_OK },
        { "burstMax", "--burst-max", GS_CT_SIZE, FIELD(burst_max_bytes), .opts = GS_CK_ZERO_OK },
        { "spillMax", "--spill-max", GS_CT_SIZE, FIELD(spill_max_bytes), .opts = GS_CK_ZERO_OK },
        { "reclaimKillAfter", "--reclaim-kill-after", GS_CT_DURATION, FIELD(reclaim_kill_after_ms), .max = HOUR_MS,
          .opts = GS_CK_ZERO_OK },
        { "moveBackQuiet", "--move-back-quiet", GS_CT_DURATION, FIELD(move_back_quiet_ms), .max = HOUR_MS,
          .opts = GS_CK_ZERO_OK },
        { "maxBlocksPerProcess", NULL, GS_CT_BLOCKS, FIELD(max_blocks_per_process), .min = 1,
          .max = GS_CONFIG_MAX_BLOCKS },
        { "maxBlocksPerAllocation", NULL, GS_CT_BLOCKS, FIELD(max_blocks_per_allocation), .min = 1,
          .max = GS_CONFIG_MAX_BLOCKS },
        { "devices", "--devices", GS_CT_DEVICES, FIELD(devices) },
        { "agentSocket", "--socket", GS_CT_SOCKET, FIELD(agent_socket) },
        { "socketRoot", "--socket-root", GS_CT_PATH, FIELD(socket_root) },
        { "stateDir", "--state-dir", GS_CT_PATH, FIELD(state_dir) },
        { "readyFile", NULL, GS_CT_PATH, FIELD(ready_file) },
        { "kubeletDir", NULL, GS_CT_PATH, FIELD(kubelet_dir) },
        { "hookPath", NULL, GS_CT_PATH, FIELD(hook_path) },
        { "preloadPath", NULL, GS_CT_PATH, FIELD(preload_path) },
        { "inject", NULL, GS_CT_ENUM, FIELD(inject), .choices = inject_words, .expected = "preload or env" },
        { "deviceNodes", NULL, GS_CT_BOOL, FIELD(device_nodes) },
        { "cudaLibrary", "--cuda-library", GS_CT_STRING, FIELD(cuda_library) },
        { "nvmlLibrary", NULL, GS_CT_STRING, FIELD(nvml_library) },
        { "contextSize", NULL, GS_CT_SIZE, FIELD(context_bytes), .opts = GS_CK_ZERO_OK | GS_CK_AUTO,
          .max = 64 * GS_GiB },
        { "usageInterval", NULL, GS_CT_DURATION, FIELD(usage_interval_ms) },
        { "agentWait", NULL, GS_CT_DURATION, FIELD(agent_wait_ms), .max = HOUR_MS },
        { "overQuota", NULL, GS_CT_ENUM, FIELD(over_quota), .choices = over_quota_words, .expected = "kill or report" },
        { "overQuotaBound", NULL, GS_CT_SIZE, FIELD(over_quota_bound_bytes), .opts = GS_CK_ZERO_OK },
        { "overQuotaGrace", NULL, GS_CT_DURATION, FIELD(over_quota_grace_ms), .max = HOUR_MS },
        { "metricsAddress", NULL, GS_CT_STRING, FIELD(metrics_address), .opts = GS_CK_EMPTY_OK,
          .check = check_metrics },
        { "podResourcesSocket", "--pod-resources-socket", GS_CT_SOCKET, FIELD(pod_resources_socket) },
        { "reconcileInterval", "--reconcile-interval", GS_CT_DURATION, FIELD(reconcile_interval_ms) },
        { "reclaimGrace", "--reclaim-grace", GS_CT_DURATION, FIELD(reclaim_grace_ms) },
        { "computeLatencyPriority", NULL, GS_CT_COUNT, FIELD(compute_latency_priority), .min = 1, .max = 2000001000 },
        { "workerThreads", NULL, GS_CT_COUNT, FIELD(worker_threads), .min = 1, .max = GS_CONFIG_MAX_WORKERS },
        { "maxConnections", NULL, GS_CT_COUNT, FIELD(max_conns), .min = 1, .max = GS_CONFIG_MAX_CONNS },
        { "maxConnectionsPerAllocation", NULL, GS_CT_COUNT, FIELD(max_conns_per_alloc), .min = 1,
          .max = GS_CONFIG_MAX_CONNS },
        { "maxConnectionsPerProcess", NULL, GS_CT_COUNT, FIELD(max_conns_per_proc), .min = 1,
          .max = GS_CONFIG_MAX_CONNS },
        { "podWatch", NULL, GS_CT_ENUM, FIELD(pod_watch), .choices = pod_watch_words, .expected = "auto, on or off" },
        { "apiServer", NULL, GS_CT_STRING, FIELD(api_server), .opts = GS_CK_EMPTY_OK, .check = check_api_server },
        { "apiTokenFile", NULL, GS_CT_PATH, FIELD(api_token_file), .opts = GS_CK_EMPTY_OK },
        { "apiCaFile", NULL, GS_CT_PATH, FIELD(api_ca_file), .opts = GS_CK_EMPTY_OK },
        { "nodeName", NULL, GS_CT_STRING, FIELD(node_name), .opts = GS_CK_EMPTY_OK, .check = check_node_name },
        { "logLevel", NULL, GS_CT_ENUM, FIELD(log_level), .parse = gs_log_parse_level,
          .expected = "error, warn, info or debug" },
};
const size_t gs_config_nkeys = GS_ARRAY_SIZE(gs_config_keys);

const struct gs_config_key *gs_config_key_find(const char *name)
{
        for (size_t i = 0; i < gs_config_nkeys; i++) {
                const struct gs_config_key *k = &gs_config_keys[i];
                if (strcmp(k->name, name) == 0 || (k->flag && strcmp(k->flag, name) == 0))
                        return k;
        }
        return NULL;
}

/* ---- one setter per type ---- */

static int set_string(const struct gs_config_key *k, char *dst, const char *s, char *msg, size_t n)
{
        size_t len = strlen(s);

        if (!(k->opts & GS_CK_EMPTY_OK) && !len)
                return problem(msg, n, "must not be empty");
        if (len >= k->size)
                return problem(msg, n, "too long (%zu characters, at most %zu)", len, k->size - 1);
        memcpy(dst, s, len + 1);
        return 0;
}

static int set_path(const struct gs_config_key *k, char *dst, const char *s, char *msg, size_t n)
{
        if (!*s && (k->opts & GS_CK_EMPTY_OK)) {
                dst[0] = '\0';
                return 0;
        }
        if (s[0] != '/')
                return problem(msg, n, "must be an absolute path, got '%s'", s);
        return set_string(k, dst, s, msg, n);
}

/* ms -> "1h", "90s", "250ms": the largest exact unit. */
static void format_duration(uint64_t ms, char *buf, size_t n)
{
        static const struct {
                const char *unit;
                uint64_t ms;
        } units[] = { { "h", 3600 * 1000 }, { "m", 60 * 1000 }, { "s", 1000 } };

        for (size_t i = 0; ms && i < GS_ARRAY_SIZE(units); i++)
                if (ms % units[i].ms == 0) {
                        snprintf(buf, n, "%llu%s", (unsigned long long)(ms / units[i].ms), units[i].unit);
                        return;
                }
        snprintf(buf, n, "%llums", (unsigned long long)ms);
}

static int set_size(const struct gs_config_key *k, uint64_t *dst, const char *s, char *msg, size_t n)
{
        char max[32];
        uint64_t b;
        int r;

        if ((k->opts & GS_CK_AUTO) && strcmp(s, "auto") == 0) {
                *dst = 0;
                return 0;
        }
        r = gs_parse_size(s, &b);
        if (r == -ERANGE)
                return problem(msg, n, "size '%s' is too large", s);
        if (r < 0)
                return problem(msg, n, "not a size: '%s' (a byte count, or a number with Ki, Mi, Gi or Ti)", s);
        if (!(k->opts & GS_CK_ZERO_OK) && b == 0)
                return problem(msg, n, "must not be 0");
        if (k->max && b > k->max) {
                gs_format_size(k->max, max, sizeof(max));
                return problem(msg, n, "must be %sat most %s, got '%s'", k->opts & GS_CK_AUTO ? "auto or " : "", max,
                               s);
        }
        if (k->check && (r = k->check(s, b, msg, n)) < 0)
                return r;
        *dst = b;
        return 0;
}

static int set_duration(const struct gs_config_key *k, uint32_t *dst, const char *s, char *msg, size_t n)
{
        char max[32];
        uint32_t ms;
        int r = gs_parse_duration_ms(s, &ms);

        if (r == -ERANGE)
                return problem(msg, n, "duration '%s' is too long (at most 24h)", s);
        if (r < 0)
                return problem(msg, n, "not a duration: '%s' (a number with ms, s, m or h, e.g. 10s)", s);
        if (k->max && ms > k->max) {
                format_duration(k->max, max, sizeof(max));
                return problem(msg, n, "must be at most %s", max);
        }
        *dst = ms;
        return 0;
}

/* A whole number in [min, max], as strtoull reads it. */
static int set_count(const struct gs_config_key *k, uint32_t *dst, const char *s, char *msg, size_t n)
{
        unsigned long long v;
        char *end;

        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno || end == s || *end || s[0] == '-' || v < k->min || v > k->max)
                return problem(msg, n, "expected a whole number from %llu to %llu, got '%s'",
                               (unsigned long long)k->min, (unsigned long long)k->max, s);
        *dst = (uint32_t)v;
        return 0;
}

/* A count of blocks in [min, max], decimal digits only. */
static int set_blocks(const struct gs_config_key *k, uint64_t *dst, const char *s, char *msg, size_t n)
{
        uint64_t v = 0;

        if (!*s)
                return problem(msg, n, "expected a number of blocks, got ''");
        for (const char *p = s; *p; p++)
                if (*p < '0' || *p > '9')
                        return problem(msg, n, "expected a number of blocks, got '%s'", s);
        /* stops once past the limit: no overflow */
        for (const char *p = s; *p && v <= k->max; p++)
                v = v * 10 + (uint64_t)(*p - '0');
        if (v < k->min || v > k->max)
                return problem(msg, n, "must be %llu to %llu, got %s", (unsigned long long)k->min,
                               (unsigned long long)k->max, s);
        *dst = v;
        return 0;
}

static int set_bool(int *dst, const char *s, char *msg, size_t n)
{
        static const char *const yes[] = { "true", "yes", "on" }, *const no[] = { "false", "no", "off" };

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
        return problem(msg, n, "expected true or false, got '%s'", s);
}

static int set_enum(const struct gs_config_key *k, int *dst, const char *s, char *msg, size_t n)
{
        int v = -1;

        if (k->parse) {
                v = k->parse(s);
        } else {
                for (const struct gs_config_choice *w = k->choices; w->word; w++)
                        if (strcmp(s, w->word) == 0) {
                                v = w->value;
                                break;
                        }
        }
        if (v < 0)
                return problem(msg, n, "expected %s, got '%s'", k->expected, s);
        *dst = v;
        return 0;
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

int gs_config_device_add(struct gs_config *c, const char *s, char *msg, size_t n)
{
        if (!valid_device(s))
                return problem(msg, n, "'%s' is neither a GPU UUID (GPU-xxxxxxxx-...) nor an index", s);
        for (unsigned i = 0; i < c->ndevices; i++)
                if (strcasecmp(c->devices[i], s) == 0)
                        return problem(msg, n, "'%s' listed twice", s);
        if (c->ndevices >= GS_CONFIG_MAX_DEVICES)
                return problem(msg, n, "more than %d entries", GS_CONFIG_MAX_DEVICES);
        snprintf(c->devices[c->ndevices++], sizeof(c->devices[0]), "%s", s);
        return 0;
}

int gs_config_key_set(const struct gs_config_key *k, struct gs_config *c, const char *s, char *msg, size_t n)
{
        if (k->type == GS_CT_DEVICES) {
                if (strcmp(s, "all") != 0)
                        return problem(msg, n, "expected 'all' or a list, got '%s'", s);
                c->ndevices = 0;
                return 0;
        }
        return gs_config_key_set_in(k, c, s, msg, n);
}

int gs_config_key_set_in(const struct gs_config_key *k, void *base, const char *s, char *msg, size_t n)
{
        void *dst = (char *)base + k->offset;
        int r;

        if (k->check && k->type != GS_CT_SIZE && (r = k->check(s, 0, msg, n)) < 0)
                return r;
        switch (k->type) {
        case GS_CT_STRING: return set_string(k, dst, s, msg, n);
        case GS_CT_SOCKET: {
                struct sockaddr_un sa;
                if (strlen(s) >= sizeof(sa.sun_path))
                        return problem(msg, n, "socket path too long (%zu characters, at most %zu)", strlen(s),
                                       sizeof(sa.sun_path) - 1);
                return set_path(k, dst, s, msg, n);
        }
        case GS_CT_PATH: return set_path(k, dst, s, msg, n);
        case GS_CT_SIZE: return set_size(k, dst, s, msg, n);
        case GS_CT_DURATION: return set_duration(k, dst, s, msg, n);
        case GS_CT_COUNT: return set_count(k, dst, s, msg, n);
        case GS_CT_BLOCKS: return set_blocks(k, dst, s, msg, n);
        case GS_CT_BOOL: return set_bool(dst, s, msg, n);
        case GS_CT_ENUM: return set_enum(k, dst, s, msg, n);
        case GS_CT_DEVICES: break; /* a struct gs_config's only: gs_config_key_set */
        }
        return problem(msg, n, "key of unknown type %d", (int)k->type);
}
