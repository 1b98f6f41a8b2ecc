/* gs_plugin.c — see gs_plugin.h.
 *
 * Threads: the main loop (serve, register, watch the kubelet directory with
 * inotify, take signals); the agent watcher (keeps a ctl Watch stream open
 * and publishes the GPU table under mu, bumping gen on every change); and
 * one thread per gRPC call (gs_grpc.c), so a slow agent delays only the call
 * that waits on it. */
#include "gs_plugin.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "deviceplugin_v1beta1.pb-c.h"
#include "gs_ctl.h"
#include "gs_devid.h"
#include "gs_grpc.h"
#include "gs_wire.h"
#include "gs_log.h"

#define HEALTHY "Healthy"
#define UNHEALTHY "Unhealthy"
#define REGISTER_TIMEOUT_MS 5000
/* Until the kubelet accepts on kubelet.sock, a connect() probe every
 * PROBE_MIN_MS doubling to PROBE_MAX_MS; a Register that fails although it
 * accepts is retried from REGISTER_RETRY_MIN_MS doubling to 1 s. */
#define PROBE_MIN_MS 5
#define PROBE_MAX_MS 100
#define REGISTER_RETRY_MIN_MS 50
#define REGISTER_RETRY_MAX_MS 1000
#define STREAM_SEND_TIMEOUT_MS 10000

struct gpu {
        char uuid[GS_UUID_STR_LEN + 1];
        char pci[32];
        uint32_t index;
        int32_t numa;
        uint32_t units;        /* units_total */
        uint32_t lent;
        uint32_t draining;     /* units of gone pods still in use */
        uint64_t unit_bytes;
        bool healthy;
        uint8_t *unhealthy;    /* per unit: reported Unhealthy (lent, draining) */
};

struct plugin {
        const struct gs_plugin_opts *o;
        char sock_path[PATH_MAX];
        char kubelet_sock[PATH_MAX];

        pthread_mutex_t mu;
        pthread_cond_t cv;
        struct gpu *gpus;      /* under mu */
        size_t ngpus;
        bool agent_up, agent_seen;
        uint64_t gen;          /* bumped on every change of the above */
        bool stopping;

        pthread_t watcher;
        struct gs_grpc_server *server;
        ino_t server_ino;
        unsigned serial;   /* names of private sockets */
};

static void free_gpus(struct gpu *g, size_t n)
{
        for (size_t i = 0; g && i < n; i++)
                free(g[i].unhealthy);
        free(g);
}

/* Looks a GPU up by UUID; pre: mu held. */
static const struct gpu *find_gpu(const struct plugin *p, const char *uuid)
{
        for (size_t i = 0; i < p->ngpus; i++)
                if (strcasecmp(p->gpus[i].uuid, uuid) == 0)
                        return &p->gpus[i];
        return NULL;
}

/* ---- a tiny arena for replies built of many small pieces ---- */

struct arena {
        void **blocks;
        size_t n, cap;
};

static void *arena_alloc(struct arena *a, size_t size)
{
        void *p;

        if (a->n == a->cap) {
                size_t cap = a->cap ? a->cap * 2 : 32;
                void **b = realloc(a->blocks, cap * sizeof(*b));
                if (!b)
                        return NULL;
                a->blocks = b;
                a->cap = cap;
        }
        p = calloc(1, size ? size : 1);
        if (p)
                a->blocks[a->n++] = p;
        return p;
}

static char *arena_printf(struct arena *a, const char *fmt, ...) GS_PRINTF(2, 3);
static char *arena_printf(struct arena *a, const char *fmt, ...)
{
        va_list ap;
        int len;
        char *s;

        va_start(ap, fmt);
        len = vsnprintf(NULL, 0, fmt, ap);
        va_end(ap);
        if (len < 0)
                return NULL;
        s = arena_alloc(a, (size_t)len + 1);
        if (!s)
                return NULL;
        va_start(ap, fmt);
        vsnprintf(s, (size_t)len + 1, fmt, ap);
        va_end(ap);
        return s;
}

static void arena_free(struct arena *a)
{
        for (size_t i = 0; i < a->n; i++)
                free(a->blocks[i]);
        free(a->blocks);
        a->blocks = NULL;
        a->n = a->cap = 0;
}

/* A reply message together with the arena that holds its pieces; base first,
 * so the gRPC layer's ProtobufCMessage * is this struct. */
struct owned {
        union {
                ProtobufCMessage base;
                V1beta1__AllocateResponse alloc;
                V1beta1__PreferredAllocationResponse pref;
                V1beta1__DevicePluginOptions opts;
                V1beta1__PreStartContainerResponse prestart;
        } m;
        struct arena arena;
};

static struct owned *owned_new(void)
{
        return calloc(1, sizeof(struct owned));
}

static void owned_free(void *ctx, ProtobufCMessage *m)
{
        struct owned *o = (struct owned *)m;

        (void)ctx;
        if (!o)
                return;
        arena_free(&o->arena);
        free(o);
}

/* ---- the agent ---- */

static int agent_call(struct plugin *p, const GsCtlRequest *req, int timeout_ms, GsCtlReply **ret)
{
        return gs_ctl_call(p->o->cfg.agent_socket, req, timeout_ms, ret);
}

/* Describes a failed exchange with the agent as a gRPC status. */
static grpc_status_code agent_failure(struct plugin *p, int r, int timeout_ms, char *msg, size_t n)
{
        if (r == -ETIMEDOUT) {
                snprintf(msg, n, "gshare agent at %.200s did not answer within %d ms",
                         p->o->cfg.agent_socket, timeout_ms);
                return GRPC_STATUS_DEADLINE_EXCEEDED;
        }
        snprintf(msg, n, "cannot reach the gshare agent at %.200s: %s", p->o->cfg.agent_socket,
                 strerror(-r));
        return GRPC_STATUS_UNAVAILABLE;
}

/* The agent's own error (a negative errno in Reply.error) as a gRPC code. */
static grpc_status_code agent_error_code(int32_t e)
{
        switch (-e) {
        case EINVAL: case ENOENT: case EEXIST: case E2BIG: return GRPC_STATUS_INVALID_ARGUMENT;
        case EBUSY: return GRPC_STATUS_FAILED_PRECONDITION;
        case ENOSPC: case ENOMEM: return GRPC_STATUS_RESOURCE_EXHAUSTED;
        case EIO: case ENODEV: case EAGAIN: return GRPC_STATUS_UNAVAILABLE;
        case ETIMEDOUT: return GRPC_STATUS_DEADLINE_EXCEEDED;
        default: return GRPC_STATUS_INTERNAL;
        }
}

/* Units of GPU uuid held by allocations, as a bitmap; from ListAllocations.
 * Missing information leaves the bitmap empty (lent units are then taken
 * from the top, which is still stable). */
static void mark_allocated(struct plugin *p, struct gpu *g, size_t ng)
{
        GsCtlRequest req = GSHARE__CTL__V1__REQUEST__INIT;
        Gshare__Ctl__V1__ListAllocationsRequest la = GSHARE__CTL__V1__LIST_ALLOCATIONS_REQUEST__INIT;
        GsCtlReply *rep = NULL;
        int r;

        req.op_case = GSHARE__CTL__V1__REQUEST__OP_LIST_ALLOCATIONS;
        req.list_allocations = &la;
        r = agent_call(p, &req, p->o->agent_timeout_ms, &rep);
        if (r < 0 || rep->error || rep->body_case != GSHARE__CTL__V1__REPLY__BODY_LIST_ALLOCATIONS) {
                log_warn("cannot list allocations to choose lent units: %s",
                         r < 0 ? strerror(-r) : rep->message);
                gs_ctl_reply_free(rep);
                return;
        }
        for (size_t i = 0; i < rep->list_allocations->n_allocations; i++) {
                const Gshare__Ctl__V1__Allocation *a = rep->list_allocations->allocations[i];
                for (size_t k = 0; k < a->n_device_ids; k++) {
                        char uuid[GS_UUID_STR_LEN + 1];
                        uint32_t unit;
                        if (gs_devid_parse(a->device_ids[k], uuid, &unit) < 0)
                                continue;
                        for (size_t j = 0; j < ng; j++)
                                if (strcasecmp(g[j].uuid, uuid) == 0 && unit < g[j].units)
                                        g[j].unhealthy[unit] = 2; /* allocated */
                }
        }
        gs_ctl_reply_free(rep);
}

/* Builds our GPU table from a ListGpusReply; -EBADMSG if the agent's data is
 * not usable. */
static int gpus_from_reply(struct plugin *p, const Gshare__Ctl__V1__ListGpusReply *l,
                           struct gpu **ret, size_t *ret_n)
{
        struct gpu *g;
        bool any_lent = false;

        if (l->n_gpus > GS_PLUGIN_MAX_GPUS)
                return -EBADMSG;
        g = calloc(l->n_gpus ? l->n_gpus : 1, sizeof(*g));
        if (!g)
                return -ENOMEM;
        for (size_t i = 0; i < l->n_gpus; i++) {
                const Gshare__Ctl__V1__Gpu *s = l->gpus[i];
                uint8_t raw[16];

                if (gs_uuid_parse(s->uuid, raw) < 0 || s->units_total >= GS_MAX_UNITS_PER_GPU) {
                        log_warn("agent reported a GPU with a bad UUID '%s' or %u units; ignored",
                                 s->uuid, s->units_total);
                        free_gpus(g, l->n_gpus);
                        return -EBADMSG;
                }
                snprintf(g[i].uuid, sizeof(g[i].uuid), "%s", s->uuid);
                snprintf(g[i].pci, sizeof(g[i].pci), "%s", s->pci_bus_id);
                g[i].index = s->index;
                g[i].numa = s->numa_node;
                g[i].units = s->units_total;
                g[i].lent = s->units_lent;
                g[i].unit_bytes = s->unit_bytes;
                g[i].healthy = s->healthy;
                g[i].unhealthy = calloc(g[i].units ? g[i].units : 1, 1);
                if (!g[i].unhealthy) {
                        free_gpus(g, l->n_gpus);
                        return -ENOMEM;
                }
                if (g[i].lent)
                        any_lent = true;
                /* Held by an allocation the agent has yet to restore from
                 * its checkpoint: not free, whatever else is true. */
                for (size_t k = 0; k < s->n_units_restoring; k++)
                        if (s->units_restoring[k] < g[i].units)
                                g[i].unhealthy[s->units_restoring[k]] = 1;
        }
        if (any_lent)
                mark_allocated(p, g, l->n_gpus);
        /* Lent units: the highest-numbered units not held by an allocation,
         * so the choice is stable while allocations do not change. */
        for (size_t i = 0; i < l->n_gpus; i++) {
                uint32_t left = g[i].lent;
                for (uint32_t u = g[i].units; u-- > 0 && left > 0;)
                        if (g[i].unhealthy[u] == 0) {
                                g[i].unhealthy[u] = 1;
                                left--;
                        }
                for (uint32_t u = 0; u < g[i].units; u++)
                        if (g[i].unhealthy[u] == 2)
                                g[i].unhealthy[u] = 0;
                /* Units of a gone pod's allocation that processes still use:
                 * nothing may be scheduled onto them until they exit. */
                for (size_t k = 0; k < l->gpus[i]->n_units_draining; k++) {
                        uint32_t u = l->gpus[i]->units_draining[k];
                        if (u < g[i].units && !g[i].unhealthy[u]) {
                                g[i].unhealthy[u] = 1;
                                g[i].draining++;
                        }
                }
        }
        *ret = g;
        *ret_n = l->n_gpus;
        return 0;
}

/* Whether two GPU tables give the same device list (IDs, health, topology). */
static bool same_list(const struct gpu *a, size_t na, const struct gpu *b, size_t nb)
{
        if (na != nb)
                return false;
        for (size_t i = 0; i < na; i++)
                if (strcmp(a[i].uuid, b[i].uuid) != 0 || a[i].units != b[i].units ||
                    a[i].numa != b[i].numa || a[i].healthy != b[i].healthy ||
                    memcmp(a[i].unhealthy, b[i].unhealthy, a[i].units) != 0)
                        return false;
        return true;
}

static void publish(struct plugin *p, struct gpu *g, size_t n, bool up)
{
        bool changed;

        struct gpu *old;
        size_t nold;

        pthread_mutex_lock(&p->mu);
        if (!up && !p->agent_up && p->agent_seen) {
                pthread_mutex_unlock(&p->mu);
                return; /* already down */
        }
        if (up != p->agent_up)
                log_info("gshare agent at %s is %s", p->o->cfg.agent_socket,
                         up ? "reachable" : "unreachable: all units unhealthy");
        old = p->gpus;
        nold = p->ngpus;
        if (g) {
                for (size_t i = 0; i < n; i++) {
                        const struct gpu *prev = find_gpu(p, g[i].uuid);
                        if ((!prev && !g[i].healthy) || (prev && prev->healthy != g[i].healthy))
                                log_info("GPU %s is %s", g[i].uuid, g[i].healthy ? "healthy" : "unhealthy");
                        if (prev && prev->lent != g[i].lent)
                                log_info("GPU %s: %u units lent", g[i].uuid, g[i].lent);
                        if ((prev ? prev->draining : 0) != g[i].draining)
                                log_info("GPU %s: %u units Unhealthy while processes of gone pods still use them",
                                         g[i].uuid, g[i].draining);
                }
                changed = !same_list(old, nold, g, n);
                p->gpus = g;
                p->ngpus = n;
        } else {
                old = NULL; /* keep the last list, all Unhealthy */
                changed = true;
        }
        /* Allocation counts change on every Allocate; resend the list only
         * when what the kubelet sees changes. */
        if (changed || up != p->agent_up || !p->agent_seen) {
                p->gen++;
                pthread_cond_broadcast(&p->cv);
        }
        p->agent_up = up;
        p->agent_seen = true;
        pthread_mutex_unlock(&p->mu);
        free_gpus(old, nold);
}

static bool stopping(struct plugin *p)
{
        bool s;

        pthread_mutex_lock(&p->mu);
        s = p->stopping;
        pthread_mutex_unlock(&p->mu);
        return s;
}

/* One Watch stream, until it breaks or we stop. */
static void watch_once(struct plugin *p)
{
        GsCtlRequest req = GSHARE__CTL__V1__REQUEST__INIT;
        Gshare__Ctl__V1__WatchRequest w = GSHARE__CTL__V1__WATCH_REQUEST__INIT;
        int fd, r;

        fd = gs_ctl_connect(p->o->cfg.agent_socket);
        if (fd < 0) {
                log_debug("cannot connect to the agent at %s: %s", p->o->cfg.agent_socket, strerror(-fd));
                return;
        }
        req.op_case = GSHARE__CTL__V1__REQUEST__OP_WATCH;
        req.watch = &w;
        r = gs_ctl_send(fd, &req.base, p->o->agent_timeout_ms);
        while (r == 0 && !stopping(p)) {
                struct pollfd pf = { .fd = fd, .events = POLLIN };
                GsCtlReply *rep = NULL;
                struct gpu *g = NULL;
                size_t n = 0;

                if (poll(&pf, 1, 200) <= 0)
                        continue;
                r = gs_ctl_recv_reply(fd, p->o->agent_timeout_ms, &rep);
                if (r < 0)
                        break;
                if (rep->error) {
                        log_warn("agent refused Watch: %s", rep->message);
                        r = -EPROTO;
                } else if (rep->body_case == GSHARE__CTL__V1__REPLY__BODY_LIST_GPUS) {
                        r = gpus_from_reply(p, rep->list_gpus, &g, &n);
                        if (r == 0)
                                publish(p, g, n, true);
                }
                gs_ctl_reply_free(rep);
        }
        if (r < 0 && r != -ECONNRESET)
                log_debug("agent watch stream ended: %s", strerror(-r));
        close(fd);
}

static void *watcher(void *arg)
{
        struct plugin *p = arg;

        while (!stopping(p)) {
                watch_once(p);
                if (stopping(p))
                        break;
                publish(p, NULL, 0, false);
                for (int i = 0; i < 5 && !stopping(p); i++) /* retry every 0.5 s */
                        usleep(100 * 1000);
        }
        return NULL;
}

/* ---- ListAndWatch ---- */

/* Builds the device list; pre: mu held. */
static V1beta1__ListAndWatchResponse *build_list(struct plugin *p, struct arena *a)
{
        V1beta1__ListAndWatchResponse *r = arena_alloc(a, sizeof(*r));
        size_t total = 0, k = 0;

        if (!r)
                return NULL;
        v1beta1__list_and_watch_response__init(r);
        for (size_t i = 0; i < p->ngpus; i++)
                total += p->gpus[i].units;
        r->devices = arena_alloc(a, total * sizeof(*r->devices));
        if (!r->devices)
                return NULL;
        for (size_t i = 0; i < p->ngpus; i++) {
                const struct gpu *g = &p->gpus[i];
                V1beta1__Device *devs = arena_alloc(a, g->units * sizeof(*devs));
                V1beta1__TopologyInfo *topo = NULL;
                char *ids = arena_alloc(a, (size_t)g->units * (GS_DEVID_MAX + 1));

                if (!devs || !ids)
                        return NULL;
                if (g->numa >= 0) {
                        V1beta1__NUMANode *node = arena_alloc(a, sizeof(*node));
                        V1beta1__NUMANode **nodes = arena_alloc(a, sizeof(*nodes));
                        topo = arena_alloc(a, sizeof(*topo));
                        if (!node || !nodes || !topo)
                                return NULL;
                        v1beta1__numanode__init(node);
                        node->id = g->numa;
                        nodes[0] = node;
                        v1beta1__topology_info__init(topo);
                        topo->n_nodes = 1;
                        topo->nodes = nodes;
                }
                for (uint32_t u = 0; u < g->units; u++) {
                        char *id = ids + (size_t)u * (GS_DEVID_MAX + 1);
                        if (gs_devid_format(id, GS_DEVID_MAX + 1, g->uuid, u) < 0)
                                return NULL;
                        v1beta1__device__init(&devs[u]);
                        devs[u].id = id;
                        devs[u].health = (char *)(p->agent_up && g->healthy && !g->unhealthy[u]
                                                          ? HEALTHY : UNHEALTHY);
                        devs[u].topology = topo;
                        r->devices[k++] = &devs[u];
                }
        }
        r->n_devices = k;
        return r;
}

static grpc_status_code list_and_watch(void *ctx, struct gs_grpc_call *call,
                                       const ProtobufCMessage *req, char *msg, size_t msglen)
{
        struct plugin *p = ctx;
        uint64_t seen = 0;
        bool first = true;

        (void)req;
        for (;;) {
                struct arena a = { 0 };
                V1beta1__ListAndWatchResponse *r = NULL;
                int err;

                pthread_mutex_lock(&p->mu);
                if (!p->stopping && !first && p->gen == seen) {
                        struct timespec ts;
                        clock_gettime(CLOCK_REALTIME, &ts);
                        ts.tv_nsec += 100 * 1000000L; /* also how soon a cancel is seen */
                        if (ts.tv_nsec >= 1000000000L) {
                                ts.tv_sec++;
                                ts.tv_nsec -= 1000000000L;
                        }
                        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
                }
                if (p->stopping) {
                        pthread_mutex_unlock(&p->mu);
                        return GRPC_STATUS_OK;
                }
                if (first || p->gen != seen) {
                        r = build_list(p, &a);
                        seen = p->gen;
                        first = false;
                }
                pthread_mutex_unlock(&p->mu);
                if (r) {
                        err = gs_grpc_call_send(call, &r->base, STREAM_SEND_TIMEOUT_MS);
                        log_debug("ListAndWatch: sent %zu devices", r->n_devices);
                        arena_free(&a);
                        if (err < 0)
                                return GRPC_STATUS_CANCELLED;
                } else if (a.n) {
                        arena_free(&a);
                        snprintf(msg, msglen, "out of memory building the device list");
                        return GRPC_STATUS_RESOURCE_EXHAUSTED;
                }
                if (gs_grpc_call_wait_closed(call, 0))
                        return GRPC_STATUS_CANCELLED;
        }
}

/* ---- checking device IDs ---- */

/* Parses id and checks that it is one of ours; pre: mu held.  On failure
 * msg names the ID and the problem. */
static int check_id(struct plugin *p, const char *id, const struct gpu **ret_gpu, uint32_t *ret_unit,
                    char *msg, size_t n)
{
        char uuid[GS_UUID_STR_LEN + 1];
        const struct gpu *g;
        uint32_t unit;

        if (gs_devid_parse(id, uuid, &unit) < 0) {
                snprintf(msg, n, "device ID '%.80s' is not a gshare device ID", id);
                return -EINVAL;
        }
        g = find_gpu(p, uuid);
        if (!g || unit >= g->units) {
                snprintf(msg, n, "device ID '%s' is not a %s device of this node", id,
                         p->o->cfg.resource_name);
                return -ENOENT;
        }
        *ret_gpu = g;
        *ret_unit = unit;
        return 0;
}

static uint32_t largest_gpu(const struct plugin *p)
{
        uint32_t m = 0;

        for (size_t i = 0; i < p->ngpus; i++)
                if (p->gpus[i].units > m)
                        m = p->gpus[i].units;
        return m;
}

/* ---- GetPreferredAllocation ---- */

struct cand {
        const char *id;
        size_t gpu;     /* index into p->gpus */
        uint32_t unit;
        bool must;
        bool taken;
};

static int cand_cmp(const void *a, const void *b)
{
        const struct cand *x = a, *y = b;

        if (x->gpu != y->gpu)
                return x->gpu < y->gpu ? -1 : 1;
        return x->unit < y->unit ? -1 : x->unit > y->unit;
}

/* Chooses size IDs for one container; pre: mu held.  Writes pointers to the
 * chosen IDs (strings of the request) to out. */
static grpc_status_code prefer_one(struct plugin *p, const V1beta1__ContainerPreferredAllocationRequest *r,
                                   const char **out, char *msg, size_t n)
{
        size_t nc = 0, size, nmust = 0, ng = p->ngpus, got = 0;
        struct cand *c = NULL;
        size_t *avail = NULL;
        uint32_t big = largest_gpu(p);
        grpc_status_code code = GRPC_STATUS_OK;
        size_t best = SIZE_MAX, must_gpu = SIZE_MAX;
        bool one_gpu_must = true;

        if (r->allocation_size <= 0) {
                snprintf(msg, n, "allocation_size must be positive, got %d", r->allocation_size);
                return GRPC_STATUS_INVALID_ARGUMENT;
        }
        size = (size_t)r->allocation_size;
        if (size > big) {
                snprintf(msg, n, "a request of %zu units is larger than any GPU of this node (at most %u units)",
                         size, big);
                return GRPC_STATUS_INVALID_ARGUMENT;
        }
        c = calloc(r->n_available_deviceids + r->n_must_include_deviceids + 1, sizeof(*c));
        avail = calloc(ng + 1, sizeof(*avail));
        if (!c || !avail) {
                code = GRPC_STATUS_RESOURCE_EXHAUSTED;
                snprintf(msg, n, "out of memory");
                goto out;
        }
        /* must_include first, then the rest of available; duplicates dropped */
        for (size_t pass = 0; pass < 2; pass++) {
                size_t cnt = pass == 0 ? r->n_must_include_deviceids : r->n_available_deviceids;
                char **ids = pass == 0 ? r->must_include_deviceids : r->available_deviceids;
                for (size_t i = 0; i < cnt; i++) {
                        const struct gpu *g;
                        uint32_t unit;
                        bool dup = false;
                        if (check_id(p, ids[i], &g, &unit, msg, n) < 0) {
                                code = GRPC_STATUS_INVALID_ARGUMENT;
                                goto out;
                        }
                        for (size_t j = 0; j < nc && !dup; j++)
                                dup = c[j].gpu == (size_t)(g - p->gpus) && c[j].unit == unit;
                        if (dup)
                                continue;
                        c[nc].id = ids[i];
                        c[nc].gpu = (size_t)(g - p->gpus);
                        c[nc].unit = unit;
                        c[nc].must = pass == 0;
                        if (c[nc].must) {
                                nmust++;
                                if (must_gpu != SIZE_MAX && must_gpu != c[nc].gpu)
                                        one_gpu_must = false;
                                must_gpu = c[nc].gpu;
                        }
                        avail[c[nc].gpu]++;
                        nc++;
                }
        }
        if (nmust > size) {
                snprintf(msg, n, "must_include_deviceIDs has %zu devices, more than allocation_size %zu",
                         nmust, size);
                code = GRPC_STATUS_INVALID_ARGUMENT;
                goto out;
        }
        if (nc < size) {
                snprintf(msg, n, "allocation_size %zu is more than the %zu devices available", size, nc);
                code = GRPC_STATUS_INVALID_ARGUMENT;
                goto out;
        }
        qsort(c, nc, sizeof(*c), cand_cmp);
        /* Best fit: one GPU with the fewest available units that still fits
         * (the one holding must_include devices, if any). */
        if (nmust == 0) {
                for (size_t g = 0; g < ng; g++)
                        if (avail[g] >= size && (best == SIZE_MAX || avail[g] < avail[best]))
                                best = g;
        } else if (one_gpu_must && avail[must_gpu] >= size) {
                best = must_gpu;
        }
        for (size_t i = 0; i < nc; i++) /* must_include always */
                if (c[i].must) {
                        c[i].taken = true;
                        out[got++] = c[i].id;
                }
        if (best != SIZE_MAX) {
                for (size_t i = 0; i < nc && got < size; i++)
                        if (c[i].gpu == best && !c[i].taken) {
                                c[i].taken = true;
                                out[got++] = c[i].id;
                        }
        } else {
                /* No single GPU fits: fill from the fewest GPUs, largest
                 * availability first (GPUs of must_include devices first). */
                while (got < size) {
                        size_t g_best = SIZE_MAX, left_best = 0;
                        for (size_t g = 0; g < ng; g++) {
                                size_t left = 0;
                                bool has_must = false;
                                for (size_t i = 0; i < nc; i++)
                                        if (c[i].gpu == g) {
                                                left += !c[i].taken;
                                                has_must |= c[i].must;
                                        }
                                if (!left)
                                        continue;
                                left += has_must ? nc : 0; /* prefer */
                                if (left > left_best) {
                                        left_best = left;
                                        g_best = g;
                                }
                        }
                        if (g_best == SIZE_MAX)
                                break;
                        for (size_t i = 0; i < nc && got < size; i++)
                                if (c[i].gpu == g_best && !c[i].taken) {
                                        c[i].taken = true;
                                        out[got++] = c[i].id;
                                }
                }
        }
out:
        free(c);
        free(avail);
        return code;
}

static grpc_status_code get_preferred(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req,
                                      ProtobufCMessage **ret, char *msg, size_t msglen)
{
        struct plugin *p = ctx;
        const V1beta1__PreferredAllocationRequest *r = (const V1beta1__PreferredAllocationRequest *)req;
        struct owned *o = owned_new();
        V1beta1__PreferredAllocationResponse *resp;
        grpc_status_code code = GRPC_STATUS_OK;

        (void)call;
        if (!o)
                return GRPC_STATUS_RESOURCE_EXHAUSTED;
        resp = &o->m.pref;
        v1beta1__preferred_allocation_response__init(resp);
        resp->container_responses = arena_alloc(&o->arena, r->n_container_requests * sizeof(void *));
        if (!resp->container_responses) {
                owned_free(NULL, &o->m.base);
                return GRPC_STATUS_RESOURCE_EXHAUSTED;
        }
        pthread_mutex_lock(&p->mu);
        for (size_t i = 0; i < r->n_container_requests && code == GRPC_STATUS_OK; i++) {
                const V1beta1__ContainerPreferredAllocationRequest *cr = r->container_requests[i];
                V1beta1__ContainerPreferredAllocationResponse *c = arena_alloc(&o->arena, sizeof(*c));
                size_t size = cr->allocation_size > 0 ? (size_t)cr->allocation_size : 0;
                const char **ids = arena_alloc(&o->arena, (size + 1) * sizeof(char *));
                char m[GS_GRPC_MSG_MAX - 40];

                if (!c || !ids) {
                        code = GRPC_STATUS_RESOURCE_EXHAUSTED;
                        break;
                }
                code = prefer_one(p, cr, ids, m, sizeof(m));
                if (code != GRPC_STATUS_OK) {
                        snprintf(msg, msglen, "container request %zu: %s", i, m);
                        break;
                }
                v1beta1__container_preferred_allocation_response__init(c);
                c->n_deviceids = size;
                c->deviceids = (char **)ids;
                resp->container_responses[i] = c;
                resp->n_container_responses++;
        }
        pthread_mutex_unlock(&p->mu);
        if (code != GRPC_STATUS_OK) {
                owned_free(NULL, &o->m.base);
                return code;
        }
        *ret = &o->m.base;
        return GRPC_STATUS_OK;
}

/* ---- Allocate ---- */

/* Validates one container request; pre: mu held. */
static grpc_status_code check_request(struct plugin *p, const V1beta1__ContainerAllocateRequest *cr,
                                      char *msg, size_t n)
{
        const struct gpu *gpus[GS_MAX_GPUS_PER_ALLOC];
        size_t ngpu = 0;
        uint32_t big = largest_gpu(p);

        if (cr->n_devices_ids == 0) {
                snprintf(msg, n, "no device IDs (an empty request)");
                return GRPC_STATUS_INVALID_ARGUMENT;
        }
        if (cr->n_devices_ids > big) {
                snprintf(msg, n, "a request of %zu units is larger than any GPU of this node (at most %u units)",
                         cr->n_devices_ids, big);
                return GRPC_STATUS_INVALID_ARGUMENT;
        }
        for (size_t i = 0; i < cr->n_devices_ids; i++) {
                const struct gpu *g;
                uint32_t unit;
                size_t k;

                if (check_id(p, cr->devices_ids[i], &g, &unit, msg, n) < 0)
                        return GRPC_STATUS_INVALID_ARGUMENT;
                for (size_t j = 0; j < i; j++)
                        if (strcmp(cr->devices_ids[j], cr->devices_ids[i]) == 0) {
                                snprintf(msg, n, "device ID '%s' given twice", cr->devices_ids[i]);
                                return GRPC_STATUS_INVALID_ARGUMENT;
                        }
                for (k = 0; k < ngpu && gpus[k] != g; k++)
                        ;
                if (k == ngpu) {
                        if (ngpu == GS_MAX_GPUS_PER_ALLOC) {
                                snprintf(msg, n, "device IDs span more than %d GPUs", GS_MAX_GPUS_PER_ALLOC);
                                return GRPC_STATUS_INVALID_ARGUMENT;
                        }
                        gpus[ngpu++] = g;
                }
        }
        return GRPC_STATUS_OK;
}

/* "Device Minor: N" from <nvidia_proc>/gpus/<pci>/information; -1 if not found. */
static int device_minor(struct plugin *p, const char *pci)
{
        char path[PATH_MAX], line[256];
        FILE *f;
        int minor = -1;

        if (!*pci || strchr(pci, '/'))
                return -1;
        if (strlen(p->o->nvidia_proc) + strlen(pci) + 20 >= sizeof(path))
                return -1;
        snprintf(path, sizeof(path), "%.3000s/gpus/%.31s/information", p->o->nvidia_proc, pci);
        f = fopen(path, "re");
        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "Device Minor: %d", &minor) == 1)
                        break;
        fclose(f);
        return minor >= 0 && minor < 256 ? minor : -1;
}

static V1beta1__ContainerAllocateResponse__EnvsEntry *env(struct arena *a, const char *k, const char *v)
{
        V1beta1__ContainerAllocateResponse__EnvsEntry *e = arena_alloc(a, sizeof(*e));

        if (!e)
                return NULL;
        v1beta1__container_allocate_response__envs_entry__init(e);
        e->key = arena_printf(a, "%s", k);
        e->value = arena_printf(a, "%s", v);
        return e->key && e->value ? e : NULL;
}

static V1beta1__Mount *mount(struct arena *a, const char *host, const char *ctr, bool ro)
{
        V1beta1__Mount *m = arena_alloc(a, sizeof(*m));

        if (!m)
                return NULL;
        v1beta1__mount__init(m);
        m->host_path = arena_printf(a, "%s", host);
        m->container_path = arena_printf(a, "%s", ctr);
        m->read_only = ro;
        return m->host_path && m->container_path ? m : NULL;
}

static V1beta1__DeviceSpec *devspec(struct arena *a, const char *path)
{
        V1beta1__DeviceSpec *d = arena_alloc(a, sizeof(*d));

        if (!d)
                return NULL;
        v1beta1__device_spec__init(d);
        d->host_path = arena_printf(a, "%s", path);
        d->container_path = d->host_path;
        d->permissions = (char *)"rw";
        return d->host_path ? d : NULL;
}

/* The container's envs, mounts and devices for the agent's allocation. */
static grpc_status_code fill_response(struct plugin *p, const Gshare__Ctl__V1__Allocation *al,
                                      V1beta1__ContainerAllocateResponse *c, struct arena *a,
                                      char *msg, size_t n)
{
        const struct gs_config *cfg = &p->o->cfg;
        char limits[GS_MAX_GPUS_PER_ALLOC * 24] = "", uuids[GS_MAX_GPUS_PER_ALLOC * 48] = "";
        size_t ne = 0, nm = 0, nd = 0;

        if (al->n_parts == 0 || al->n_parts > GS_MAX_GPUS_PER_ALLOC || !al->socket_dir[0] ||
            al->socket_dir[0] != '/') {
                snprintf(msg, n, "agent returned an unusable allocation '%s' (%zu parts, socket dir '%s')",
                         al->id, al->n_parts, al->socket_dir);
                return GRPC_STATUS_INTERNAL;
        }
        for (size_t i = 0; i < al->n_parts; i++) {
                size_t l = strlen(limits), u = strlen(uuids);
                snprintf(limits + l, sizeof(limits) - l, "%s%llu", i ? "," : "",
                         (unsigned long long)al->parts[i]->quota_bytes);
                snprintf(uuids + u, sizeof(uuids) - u, "%s%.40s", i ? "," : "", al->parts[i]->gpu_uuid);
        }
        c->envs = arena_alloc(a, 6 * sizeof(*c->envs));
        c->mounts = arena_alloc(a, 3 * sizeof(*c->mounts));
        c->devices = arena_alloc(a, (3 + GS_MAX_GPUS_PER_ALLOC) * sizeof(*c->devices));
        if (!c->envs || !c->mounts || !c->devices)
                goto oom;
        if (!(c->envs[ne++] = env(a, "GSHARE_MEM_LIMIT", limits)) ||
            !(c->envs[ne++] = env(a, "GSHARE_GPU", uuids)) ||
            !(c->envs[ne++] = env(a, "GSHARE_SOCKET", GS_PLUGIN_CTR_SOCKET_DIR "/" GS_SOCKET_NAME)) ||
            !(c->envs[ne++] = env(a, "NVIDIA_VISIBLE_DEVICES", uuids)))
                goto oom;
        if (cfg->inject == GS_INJECT_ENV && !(c->envs[ne++] = env(a, "LD_PRELOAD", GS_PLUGIN_CTR_HOOK)))
                goto oom;
        if (!(c->mounts[nm++] = mount(a, cfg->hook_path, GS_PLUGIN_CTR_HOOK, true)))
                goto oom;
        if (cfg->inject == GS_INJECT_PRELOAD &&
            !(c->mounts[nm++] = mount(a, cfg->preload_path, GS_PLUGIN_CTR_PRELOAD, true)))
                goto oom;
        /* Read-only is enough: connecting to a unix socket does not write
         * the file system, and the container must not plant files there. */
        if (!(c->mounts[nm++] = mount(a, al->socket_dir, GS_PLUGIN_CTR_SOCKET_DIR, true)))
                goto oom;
        if (cfg->device_nodes) {
                static const char *const ctl[] = { "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools" };
                for (size_t i = 0; i < GS_ARRAY_SIZE(ctl); i++)
                        if (!(c->devices[nd++] = devspec(a, ctl[i])))
                                goto oom;
                for (size_t i = 0; i < al->n_parts; i++) {
                        const struct gpu *g;
                        char pci[32] = "", dev[32];
                        int minor;
                        pthread_mutex_lock(&p->mu);
                        g = find_gpu(p, al->parts[i]->gpu_uuid);
                        if (g)
                                snprintf(pci, sizeof(pci), "%s", g->pci);
                        pthread_mutex_unlock(&p->mu);
                        minor = device_minor(p, pci);
                        if (minor < 0) {
                                log_warn("no device minor for GPU %s (PCI '%s') under %s/gpus: /dev/nvidiaN not passed",
                                         al->parts[i]->gpu_uuid, pci, p->o->nvidia_proc);
                                continue;
                        }
                        snprintf(dev, sizeof(dev), "/dev/nvidia%d", minor);
                        if (!(c->devices[nd++] = devspec(a, dev)))
                                goto oom;
                }
        }
        c->n_envs = ne;
        c->n_mounts = nm;
        c->n_devices = nd;
        return GRPC_STATUS_OK;
oom:
        snprintf(msg, n, "out of memory building the response");
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
}

static void release(struct plugin *p, const char *id)
{
        GsCtlRequest req = GSHARE__CTL__V1__REQUEST__INIT;
        Gshare__Ctl__V1__ReleaseAllocationRequest rel = GSHARE__CTL__V1__RELEASE_ALLOCATION_REQUEST__INIT;
        GsCtlReply *rep = NULL;
        int r;

        req.op_case = GSHARE__CTL__V1__REQUEST__OP_RELEASE_ALLOCATION;
        req.release_allocation = &rel;
        rel.id = (char *)id;
        r = agent_call(p, &req, p->o->agent_timeout_ms, &rep);
        if (r < 0 || rep->error)
                log_warn("could not release allocation %s after a failed Allocate: %s", id,
                         r < 0 ? strerror(-r) : rep->message);
        else
                log_info("released allocation %s (its Allocate call failed)", id);
        gs_ctl_reply_free(rep);
}

static grpc_status_code allocate(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req,
                                 ProtobufCMessage **ret, char *msg, size_t msglen)
{
        struct plugin *p = ctx;
        const V1beta1__AllocateRequest *r = (const V1beta1__AllocateRequest *)req;
        struct owned *o = owned_new();
        V1beta1__AllocateResponse *resp;
        grpc_status_code code = GRPC_STATUS_OK;
        char m[GS_GRPC_MSG_MAX - 40] = "";
        char **created = NULL;
        size_t ncreated = 0, i = 0;

        if (!o || !(created = calloc(r->n_container_requests + 1, sizeof(char *)))) {
                owned_free(NULL, o ? &o->m.base : NULL);
                return GRPC_STATUS_RESOURCE_EXHAUSTED;
        }
        resp = &o->m.alloc;
        v1beta1__allocate_response__init(resp);
        if (r->n_container_requests == 0) {
                snprintf(msg, msglen, "AllocateRequest has no container requests");
                code = GRPC_STATUS_INVALID_ARGUMENT;
                goto out;
        }
        /* Check every request before creating anything. */
        pthread_mutex_lock(&p->mu);
        for (i = 0; i < r->n_container_requests && code == GRPC_STATUS_OK; i++)
                code = check_request(p, r->container_requests[i], m, sizeof(m));
        pthread_mutex_unlock(&p->mu);
        if (code != GRPC_STATUS_OK) {
                snprintf(msg, msglen, "container request %zu: %s", i - 1, m);
                goto out;
        }
        resp->container_responses = arena_alloc(&o->arena, r->n_container_requests * sizeof(void *));
        if (!resp->container_responses) {
                code = GRPC_STATUS_RESOURCE_EXHAUSTED;
                goto out;
        }
        for (i = 0; i < r->n_container_requests; i++) {
                const V1beta1__ContainerAllocateRequest *cr = r->container_requests[i];
                GsCtlRequest creq = GSHARE__CTL__V1__REQUEST__INIT;
                Gshare__Ctl__V1__CreateAllocationRequest ca = GSHARE__CTL__V1__CREATE_ALLOCATION_REQUEST__INIT;
                GsCtlReply *rep = NULL;
                V1beta1__ContainerAllocateResponse *c;
                int64_t left = gs_grpc_call_deadline_left_ms(call);
                int timeout = p->o->agent_timeout_ms;
                int err;

                if (left >= 0 && left < timeout)
                        timeout = (int)left;
                creq.op_case = GSHARE__CTL__V1__REQUEST__OP_CREATE_ALLOCATION;
                creq.create_allocation = &ca;
                ca.n_device_ids = cr->n_devices_ids;
                ca.device_ids = cr->devices_ids;
                /* The kubelet gives out only IDs no container holds: an
                 * allocation still holding one is a gone pod's. */
                ca.take_over = true;
                err = agent_call(p, &creq, timeout, &rep);
                if (err < 0) {
                        code = agent_failure(p, err, timeout, m, sizeof(m));
                } else if (rep->error) {
                        code = agent_error_code(rep->error);
                        snprintf(m, sizeof(m), "agent: %s", rep->message[0] ? rep->message : strerror(-rep->error));
                } else if (rep->body_case != GSHARE__CTL__V1__REPLY__BODY_CREATE_ALLOCATION ||
                           !rep->create_allocation->allocation) {
                        code = GRPC_STATUS_INTERNAL;
                        snprintf(m, sizeof(m), "agent answered CreateAllocation without an allocation");
                } else {
                        const Gshare__Ctl__V1__Allocation *al = rep->create_allocation->allocation;
                        if (rep->create_allocation->created)
                                created[ncreated++] = strdup(al->id);
                        c = arena_alloc(&o->arena, sizeof(*c));
                        if (!c) {
                                code = GRPC_STATUS_RESOURCE_EXHAUSTED;
                        } else {
                                v1beta1__container_allocate_response__init(c);
                                code = fill_response(p, al, c, &o->arena, m, sizeof(m));
                                resp->container_responses[resp->n_container_responses++] = c;
                        }
                        if (code == GRPC_STATUS_OK)
                                log_info("Allocate: %zu units -> allocation %s%s", cr->n_devices_ids,
                                         al->id, rep->create_allocation->created ? "" : " (existing)");
                }
                gs_ctl_reply_free(rep);
                if (code != GRPC_STATUS_OK) {
                        snprintf(msg, msglen, "container request %zu: %s", i, m);
                        break;
                }
        }
out:
        if (code != GRPC_STATUS_OK) {
                /* Leave nothing half-created: undo what this call created. */
                for (size_t k = 0; k < ncreated; k++)
                        if (created[k])
                                release(p, created[k]);
                log_warn("Allocate failed: %s", msg);
                owned_free(NULL, &o->m.base);
        } else {
                *ret = &o->m.base;
        }
        for (size_t k = 0; k < ncreated; k++)
                free(created[k]);
        free(created);
        return code;
}

/* ---- the small ones ---- */

static grpc_status_code get_options(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req,
                                    ProtobufCMessage **ret, char *msg, size_t msglen)
{
        struct owned *o = owned_new();

        (void)ctx, (void)call, (void)req, (void)msg, (void)msglen;
        if (!o)
                return GRPC_STATUS_RESOURCE_EXHAUSTED;
        v1beta1__device_plugin_options__init(&o->m.opts);
        o->m.opts.pre_start_required = false;
        o->m.opts.get_preferred_allocation_available = true;
        *ret = &o->m.base;
        return GRPC_STATUS_OK;
}

static grpc_status_code pre_start(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req,
                                  ProtobufCMessage **ret, char *msg, size_t msglen)
{
        struct owned *o = owned_new();

        (void)ctx, (void)call, (void)req, (void)msg, (void)msglen;
        if (!o)
                return GRPC_STATUS_RESOURCE_EXHAUSTED;
        v1beta1__pre_start_container_response__init(&o->m.prestart);
        *ret = &o->m.base;
        return GRPC_STATUS_OK;
}

static const struct gs_grpc_method methods[] = {
        { "/v1beta1.DevicePlugin/GetDevicePluginOptions", &v1beta1__empty__descriptor, get_options,
          owned_free, NULL },
        { "/v1beta1.DevicePlugin/ListAndWatch", &v1beta1__empty__descriptor, NULL, NULL, list_and_watch },
        { "/v1beta1.DevicePlugin/GetPreferredAllocation", &v1beta1__preferred_allocation_request__descriptor,
          get_preferred, owned_free, NULL },
        { "/v1beta1.DevicePlugin/Allocate", &v1beta1__allocate_request__descriptor, allocate, owned_free,
          NULL },
        { "/v1beta1.DevicePlugin/PreStartContainer", &v1beta1__pre_start_container_request__descriptor,
          pre_start, owned_free, NULL },
};

/* ---- serving and registering ---- */

/* Serves a fresh socket at sock_path.  The server binds a private name and
 * the socket is then renamed into place: gRPC unlinks a unix socket's path
 * when its listener is torn down (asynchronously, after the server is
 * gone), which must never hit the new socket at the public path.  The old
 * server is stopped only once the new one serves, so there is no gap. */
static int serve(struct plugin *p)
{
        struct gs_grpc_server *old = p->server, *s = NULL;
        char tmp[PATH_MAX];
        struct stat st;
        int r;

        snprintf(tmp, sizeof(tmp), "%.3000s/.%s.%d.%u", p->o->cfg.kubelet_dir, p->o->endpoint,
                 (int)getpid(), ++p->serial);
        r = gs_grpc_server_start(tmp, methods, GS_ARRAY_SIZE(methods), p, &s);
        if (r < 0) {
                log_error("cannot serve on %s: %s", tmp, strerror(-r));
                return r;
        }
        if (rename(tmp, p->sock_path) < 0 || stat(p->sock_path, &st) < 0) {
                r = gs_neg_errno();
                log_error("cannot move our socket to %s: %s", p->sock_path, strerror(-r));
                gs_grpc_server_stop(s);
                unlink(tmp);
                return r;
        }
        p->server = s;
        p->server_ino = st.st_ino;
        gs_grpc_server_stop(old);
        log_debug("serving on %s", p->sock_path);
        return 0;
}

static int do_register(struct plugin *p)
{
        V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;
        V1beta1__DevicePluginOptions opts = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
        ProtobufCMessage *rep = NULL;
        grpc_status_code st;
        char msg[GS_GRPC_MSG_MAX];
        int r;

        req.version = (char *)GS_PLUGIN_API_VERSION;
        req.endpoint = (char *)p->o->endpoint;
        req.resource_name = (char *)p->o->cfg.resource_name;
        opts.pre_start_required = false;
        opts.get_preferred_allocation_available = true;
        req.options = &opts;
        r = gs_grpc_unary_call(p->kubelet_sock, "/v1beta1.Registration/Register", &req.base,
                               &v1beta1__empty__descriptor, REGISTER_TIMEOUT_MS, &rep, &st, msg,
                               sizeof(msg));
        if (r < 0) {
                log_warn("Register with the kubelet at %s failed: %s", p->kubelet_sock,
                         msg[0] ? msg : strerror(-r));
                return r;
        }
        protobuf_c_message_free_unpacked(rep, NULL);
        log_info("registered %s with the kubelet at %s (endpoint %s)", p->o->cfg.resource_name,
                 p->kubelet_sock, p->o->endpoint);
        return 0;
}

/* Whether the kubelet accepts connections on kubelet.sock.  The kubelet
 * creates the socket file a while before it accepts on it (about 0.3 s for
 * 1.36), and a Register sent in that window is refused; a bare connect()
 * costs nothing and tells us when to send it. */
static bool kubelet_accepts(const struct plugin *p)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        bool ok;
        int fd;

        if (strlen(p->kubelet_sock) >= sizeof(sa.sun_path))
                return true; /* let Register report the problem */
        strcpy(sa.sun_path, p->kubelet_sock);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return true;
        /* EAGAIN: listening, its backlog full for a moment. */
        ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno == EAGAIN;
        close(fd);
        return ok;
}

static bool our_socket_ok(struct plugin *p)
{
        struct stat st;

        if (!p->server)
                return false;
        if (stat(p->sock_path, &st) < 0) {
                log_debug("stat %s: %m", p->sock_path);
                return false;
        }
        if (!S_ISSOCK(st.st_mode) || st.st_ino != p->server_ino) {
                log_debug("%s: inode %lu, ours %lu", p->sock_path, (unsigned long)st.st_ino,
                          (unsigned long)p->server_ino);
                return false;
        }
        return true;
}

static int watch_dir(struct plugin *p)
{
        int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);

        if (fd < 0)
                return gs_neg_errno();
        if (inotify_add_watch(fd, p->o->cfg.kubelet_dir,
                              IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE_SELF) < 0) {
                int r = gs_neg_errno();
                close(fd);
                return r;
        }
        return fd;
}

/* Reads inotify events; sets *kubelet_new when kubelet.sock appeared.  Our
 * own socket's fate is checked by inode (our_socket_ok), since serving a new
 * socket produces delete/create events of its own. */
static void read_events(int fd, bool *kubelet_new)
{
        char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
        ssize_t n;

        while ((n = read(fd, buf, sizeof(buf))) > 0) {
                for (char *q = buf; q < buf + n;) {
                        const struct inotify_event *ev = (const struct inotify_event *)q;
                        if (ev->len && strcmp(ev->name, GS_PLUGIN_KUBELET_SOCKET) == 0 &&
                            (ev->mask & (IN_CREATE | IN_MOVED_TO)))
                                *kubelet_new = true;
                        q += sizeof(*ev) + ev->len;
                }
        }
}

static void log_start(struct plugin *p)
{
        char units[256] = "";
        size_t ng;

        pthread_mutex_lock(&p->mu);
        ng = p->ngpus;
        for (size_t i = 0; i < p->ngpus && strlen(units) < sizeof(units) - 32; i++) {
                size_t l = strlen(units);
                snprintf(units + l, sizeof(units) - l, "%s%u", i ? "+" : "", p->gpus[i].units);
        }
        pthread_mutex_unlock(&p->mu);
        log_info("gshare-device-plugin: resource %s, kubelet dir %s, agent %s, %zu GPUs, units %s",
                 p->o->cfg.resource_name, p->o->cfg.kubelet_dir, p->o->cfg.agent_socket, ng,
                 ng ? units : "none (agent not reachable yet)");
}

int gs_plugin_run(const struct gs_plugin_opts *o)
{
        struct plugin pl = { .o = o };
        struct plugin *p = &pl;
        sigset_t mask;
        int ifd = -1, sfd = -1, r;
        bool need_register = true, waiting_logged = false;
        int64_t next_try = 0, delay = PROBE_MIN_MS, reg_delay = REGISTER_RETRY_MIN_MS;

        if ((size_t)snprintf(p->sock_path, sizeof(p->sock_path), "%s/%s", o->cfg.kubelet_dir, o->endpoint) >=
                    sizeof(p->sock_path) ||
            (size_t)snprintf(p->kubelet_sock, sizeof(p->kubelet_sock), "%s/%s", o->cfg.kubelet_dir,
                             GS_PLUGIN_KUBELET_SOCKET) >= sizeof(p->kubelet_sock))
                return -ENAMETOOLONG;
        pthread_mutex_init(&p->mu, NULL);
        pthread_cond_init(&p->cv, NULL);
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        ifd = watch_dir(p);
        if (sfd < 0 || ifd < 0) {
                r = sfd < 0 ? -errno : ifd;
                log_error("cannot watch the kubelet dir %s: %s", o->cfg.kubelet_dir, strerror(-r));
                goto out;
        }
        if (pthread_create(&p->watcher, NULL, watcher, p) != 0) {
                r = -EAGAIN;
                goto out;
        }
        /* Give the agent a moment, so the first list is complete. */
        pthread_mutex_lock(&p->mu);
        for (int i = 0; i < 20 && !p->agent_seen; i++) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 100 * 1000000L;
                if (ts.tv_nsec >= 1000000000L) {
                        ts.tv_sec++;
                        ts.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        }
        pthread_mutex_unlock(&p->mu);
        log_start(p);
        r = serve(p); /* before Register: the kubelet dials us at once */
        if (r < 0)
                goto stop;
        for (;;) {
                struct pollfd pf[2] = { { .fd = sfd, .events = POLLIN }, { .fd = ifd, .events = POLLIN } };
                bool kubelet_new = false;
                struct stat st;

                int timeout = 250;

                if (need_register && gs_mono_ms() >= next_try) {
                        if (stat(p->kubelet_sock, &st) < 0 || !kubelet_accepts(p)) {
                                /* Not there, or not accepting yet: probe
                                 * again soon (inotify also wakes us when
                                 * kubelet.sock is created). */
                                if (!waiting_logged)
                                        log_debug("kubelet at %s does not accept yet; probing",
                                                  p->kubelet_sock);
                                waiting_logged = true;
                                next_try = gs_mono_ms() + delay;
                                delay = delay * 2 > PROBE_MAX_MS ? PROBE_MAX_MS : delay * 2;
                        } else if (do_register(p) == 0) {
                                need_register = false;
                        } else {
                                next_try = gs_mono_ms() + reg_delay;
                                reg_delay = reg_delay * 2 > REGISTER_RETRY_MAX_MS ? REGISTER_RETRY_MAX_MS
                                                                                  : reg_delay * 2;
                        }
                }
                if (need_register) {
                        int64_t left = next_try - gs_mono_ms();
                        timeout = left < 0 ? 0 : left < timeout ? (int)left : timeout;
                }
                if (poll(pf, 2, timeout) < 0 && errno != EINTR) {
                        r = gs_neg_errno();
                        break;
                }
                if (pf[0].revents) {
                        struct signalfd_siginfo si;
                        if (read(sfd, &si, sizeof(si)) == sizeof(si))
                                log_info("signal %u: stopping", si.ssi_signo);
                        r = 0;
                        break;
                }
                if (pf[1].revents)
                        read_events(ifd, &kubelet_new);
                if (kubelet_new) {
                        log_info("kubelet socket %s (re)created: serving a fresh socket and registering again",
                                 p->kubelet_sock);
                } else if (!our_socket_ok(p)) {
                        log_info("our socket %s is gone: serving it again", p->sock_path);
                } else {
                        continue;
                }
                r = serve(p);
                if (r < 0)
                        break;
                need_register = true;
                waiting_logged = false;
                next_try = 0;
                delay = PROBE_MIN_MS;
                reg_delay = REGISTER_RETRY_MIN_MS;
        }
stop:
        pthread_mutex_lock(&p->mu);
        p->stopping = true;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        gs_grpc_server_stop(p->server);
        if (p->server) {
                struct stat st;
                /* Remove our socket, but not one a newer instance serves. */
                if (stat(p->sock_path, &st) == 0 && st.st_ino == p->server_ino)
                        unlink(p->sock_path);
                p->server = NULL;
        }
        pthread_join(p->watcher, NULL);
out:
        gs_closep(&sfd);
        gs_closep(&ifd);
        free_gpus(p->gpus, p->ngpus);
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->cv);
        return r;
}
