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
#include "gs_arena.h"
#include "gs_ctl.h"
#include "gs_ctrspec.h"
#include "gs_devid.h"
#include "gs_grpc.h"
#include "gs_wire.h"
#include "gs_log.h"
#include "gs_mirror.h"
#include "gs_policy.h"

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

struct plugin {
        const struct gs_plugin_opts *o;
        char sock_path[PATH_MAX];
        char kubelet_sock[PATH_MAX];

        struct gs_mirror m;    /* the agent's GPUs, and the stop flag */
        struct gs_grpc_server *server;
        ino_t server_ino;
        unsigned serial;   /* names of private sockets */
        /* A newer instance (an upgrade's new pod, beside us until we are
         * stopped) serves our path: we neither serve nor register again. */
        bool standby;
        /* ListAndWatch streams open, and when the last one ended (atomics):
         * a kubelet that dropped us (it may disconnect the newer of two
         * instances of a resource when the older's stream ends) opens
         * none; we register again. */
        int lw_active;
        int64_t lw_ended_ms;
};

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
        struct gs_arena arena;
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
        gs_arena_free(&o->arena);
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

/* ---- ListAndWatch ---- */

/* No stream this long after the last one ended: the kubelet dropped us. */
#define LW_GONE_MS 1000

/* Builds the device list; pre: mu held. */
static V1beta1__ListAndWatchResponse *build_list(struct plugin *p, struct gs_arena *a)
{
        V1beta1__ListAndWatchResponse *r = gs_arena_alloc(a, sizeof(*r));
        size_t total = 0, k = 0;

        if (!r)
                return NULL;
        v1beta1__list_and_watch_response__init(r);
        for (size_t i = 0; i < p->m.ngpus; i++)
                total += p->m.gpus[i].units;
        r->devices = gs_arena_alloc(a, total * sizeof(*r->devices));
        if (!r->devices)
                return NULL;
        for (size_t i = 0; i < p->m.ngpus; i++) {
                const struct gs_mirror_gpu *g = &p->m.gpus[i];
                V1beta1__Device *devs = gs_arena_alloc(a, g->units * sizeof(*devs));
                V1beta1__TopologyInfo *topo = NULL;
                char *ids = gs_arena_alloc(a, (size_t)g->units * (GS_DEVID_MAX + 1));

                if (!devs || !ids)
                        return NULL;
                if (g->numa >= 0) {
                        V1beta1__NUMANode *node = gs_arena_alloc(a, sizeof(*node));
                        V1beta1__NUMANode **nodes = gs_arena_alloc(a, sizeof(*nodes));
                        topo = gs_arena_alloc(a, sizeof(*topo));
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
                        devs[u].health = (char *)(p->m.agent_up && g->healthy && !g->unhealthy[u]
                                                          ? HEALTHY : UNHEALTHY);
                        devs[u].topology = topo;
                        r->devices[k++] = &devs[u];
                }
        }
        r->n_devices = k;
        return r;
}

static grpc_status_code list_and_watch_loop(struct plugin *p, struct gs_grpc_call *call, char *msg, size_t msglen,
                                            uint64_t *pseen, bool *pfirst);

static grpc_status_code list_and_watch(void *ctx, struct gs_grpc_call *call,
                                       const ProtobufCMessage *req, char *msg, size_t msglen)
{
        struct plugin *p = ctx;
        uint64_t seen = 0;
        bool first = true;

        grpc_status_code st;

        (void)req;
        __atomic_add_fetch(&p->lw_active, 1, __ATOMIC_SEQ_CST);
        st = list_and_watch_loop(p, call, msg, msglen, &seen, &first);
        __atomic_store_n(&p->lw_ended_ms, gs_mono_ms(), __ATOMIC_SEQ_CST);
        __atomic_sub_fetch(&p->lw_active, 1, __ATOMIC_SEQ_CST);
        return st;
}

static grpc_status_code list_and_watch_loop(struct plugin *p, struct gs_grpc_call *call, char *msg, size_t msglen,
                                            uint64_t *pseen, bool *pfirst)
{
        uint64_t seen = *pseen;
        bool first = *pfirst;

        for (;;) {
                struct gs_arena a = { 0 };
                V1beta1__ListAndWatchResponse *r = NULL;
                int err;

                pthread_mutex_lock(&p->m.mu);
                if (!p->m.stopping && !first && p->m.gen == seen) {
                        struct timespec ts;
                        clock_gettime(CLOCK_REALTIME, &ts);
                        ts.tv_nsec += 100 * 1000000L; /* also how soon a cancel is seen */
                        if (ts.tv_nsec >= 1000000000L) {
                                ts.tv_sec++;
                                ts.tv_nsec -= 1000000000L;
                        }
                        pthread_cond_timedwait(&p->m.cv, &p->m.mu, &ts);
                }
                if (p->m.stopping) {
                        pthread_mutex_unlock(&p->m.mu);
                        return GRPC_STATUS_OK;
                }
                if (first || p->m.gen != seen) {
                        r = build_list(p, &a);
                        seen = p->m.gen;
                        first = false;
                }
                pthread_mutex_unlock(&p->m.mu);
                if (r) {
                        err = gs_grpc_call_send(call, &r->base, STREAM_SEND_TIMEOUT_MS);
                        log_debug("ListAndWatch: sent %zu devices", r->n_devices);
                        gs_arena_free(&a);
                        if (err < 0)
                                return GRPC_STATUS_CANCELLED;
                } else if (a.n) {
                        gs_arena_free(&a);
                        snprintf(msg, msglen, "out of memory building the device list");
                        return GRPC_STATUS_RESOURCE_EXHAUSTED;
                }
                if (gs_grpc_call_wait_closed(call, 0))
                        return GRPC_STATUS_CANCELLED;
        }
}

/* ---- GetPreferredAllocation ---- */

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
        resp->container_responses = gs_arena_alloc(&o->arena, r->n_container_requests * sizeof(void *));
        if (!resp->container_responses) {
                owned_free(NULL, &o->m.base);
                return GRPC_STATUS_RESOURCE_EXHAUSTED;
        }
        pthread_mutex_lock(&p->m.mu);
        for (size_t i = 0; i < r->n_container_requests && code == GRPC_STATUS_OK; i++) {
                const V1beta1__ContainerPreferredAllocationRequest *cr = r->container_requests[i];
                V1beta1__ContainerPreferredAllocationResponse *c = gs_arena_alloc(&o->arena, sizeof(*c));
                size_t size = cr->allocation_size > 0 ? (size_t)cr->allocation_size : 0;
                const char **ids = gs_arena_alloc(&o->arena, (size + 1) * sizeof(char *));
                char m[GS_GRPC_MSG_MAX - 40];

                if (!c || !ids) {
                        code = GRPC_STATUS_RESOURCE_EXHAUSTED;
                        break;
                }
                code = gs_policy_prefer(&p->m, p->o->cfg.resource_name, cr, ids, m, sizeof(m));
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
        pthread_mutex_unlock(&p->m.mu);
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
        const struct gs_mirror_gpu *gpus[GS_MAX_GPUS_PER_ALLOC];
        size_t ngpu = 0;
        uint32_t big = gs_mirror_largest(&p->m);

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
                const struct gs_mirror_gpu *g;
                uint32_t unit;
                size_t k;

                if (gs_mirror_check_id(&p->m, cr->devices_ids[i], p->o->cfg.resource_name, &g, &unit, msg, n) < 0)
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
static V1beta1__ContainerAllocateResponse__EnvsEntry *env(struct gs_arena *a, const char *k, const char *v)
{
        V1beta1__ContainerAllocateResponse__EnvsEntry *e = gs_arena_alloc(a, sizeof(*e));

        if (!e)
                return NULL;
        v1beta1__container_allocate_response__envs_entry__init(e);
        e->key = gs_arena_printf(a, "%s", k);
        e->value = gs_arena_printf(a, "%s", v);
        return e->key && e->value ? e : NULL;
}

static V1beta1__Mount *mount(struct gs_arena *a, const char *host, const char *ctr, bool ro)
{
        V1beta1__Mount *m = gs_arena_alloc(a, sizeof(*m));

        if (!m)
                return NULL;
        v1beta1__mount__init(m);
        m->host_path = gs_arena_printf(a, "%s", host);
        m->container_path = gs_arena_printf(a, "%s", ctr);
        m->read_only = ro;
        return m->host_path && m->container_path ? m : NULL;
}

static V1beta1__DeviceSpec *devspec(struct gs_arena *a, const char *path)
{
        V1beta1__DeviceSpec *d = gs_arena_alloc(a, sizeof(*d));

        if (!d)
                return NULL;
        v1beta1__device_spec__init(d);
        d->host_path = gs_arena_printf(a, "%s", path);
        d->container_path = d->host_path;
        d->permissions = (char *)"rw";
        return d->host_path ? d : NULL;
}

/* The container's envs, mounts (gs_ctrspec.h, as the DRA plugin's CDI
 * specs) and device nodes for the agent's allocation. */
static grpc_status_code fill_response(struct plugin *p, const Gshare__Ctl__V1__Allocation *al,
                                      V1beta1__ContainerAllocateResponse *c, struct gs_arena *a,
                                      char *msg, size_t n)
{
        const struct gs_config *cfg = &p->o->cfg;
        struct gs_ctrspec spec;
        size_t ne = 0, nm = 0, nd = 0;

        if (gs_ctrspec_build(cfg, al, &spec, msg, n) < 0)
                return GRPC_STATUS_INTERNAL;
        c->envs = gs_arena_alloc(a, spec.nenv * sizeof(*c->envs));
        c->mounts = gs_arena_alloc(a, spec.nmounts * sizeof(*c->mounts));
        c->devices = gs_arena_alloc(a, (3 + GS_MAX_GPUS_PER_ALLOC) * sizeof(*c->devices));
        if (!c->envs || !c->mounts || !c->devices)
                goto oom;
        for (size_t i = 0; i < spec.nenv; i++)
                if (!(c->envs[ne++] = env(a, spec.env[i].name, spec.env[i].value)))
                        goto oom;
        for (size_t i = 0; i < spec.nmounts; i++)
                if (!(c->mounts[nm++] = mount(a, spec.mounts[i].host, spec.mounts[i].ctr, spec.mounts[i].ro)))
                        goto oom;
        if (cfg->device_nodes) {
                char pci[GS_MAX_GPUS_PER_ALLOC][32] = { { 0 } };
                const char *pcis[GS_MAX_GPUS_PER_ALLOC];

                pthread_mutex_lock(&p->m.mu);
                for (size_t i = 0; i < al->n_parts; i++) {
                        const struct gs_mirror_gpu *g = gs_mirror_find(&p->m, al->parts[i]->gpu_uuid);
                        if (g)
                                snprintf(pci[i], sizeof(pci[i]), "%s", g->pci);
                        pcis[i] = pci[i];
                }
                pthread_mutex_unlock(&p->m.mu);
                gs_ctrspec_add_devices(&spec, p->o->nvidia_proc, pcis, al->n_parts);
        }
        for (size_t i = 0; i < spec.ndevs; i++)
                if (!(c->devices[nd++] = devspec(a, spec.devs[i])))
                        goto oom;
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
        pthread_mutex_lock(&p->m.mu);
        for (i = 0; i < r->n_container_requests && code == GRPC_STATUS_OK; i++)
                code = check_request(p, r->container_requests[i], m, sizeof(m));
        pthread_mutex_unlock(&p->m.mu);
        if (code != GRPC_STATUS_OK) {
                snprintf(msg, msglen, "container request %zu: %s", i - 1, m);
                goto out;
        }
        resp->container_responses = gs_arena_alloc(&o->arena, r->n_container_requests * sizeof(void *));
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
                        c = gs_arena_alloc(&o->arena, sizeof(*c));
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
static bool accepts(const char *path)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        bool ok;
        int fd;

        if (strlen(path) >= sizeof(sa.sun_path))
                return true; /* let Register report the problem */
        strcpy(sa.sun_path, path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return true;
        /* EAGAIN: listening, its backlog full for a moment. */
        ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno == EAGAIN;
        close(fd);
        return ok;
}

static bool kubelet_accepts(const struct plugin *p)
{
        return accepts(p->kubelet_sock);
}

/* Another live instance's socket is at our path: a newer one renamed it
 * there (an upgrade with maxSurge), and the kubelet talks to it. */
static bool newer_serves(const struct plugin *p)
{
        struct stat st;

        return p->server && stat(p->sock_path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino != p->server_ino &&
               accepts(p->sock_path);
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

        pthread_mutex_lock(&p->m.mu);
        ng = p->m.ngpus;
        for (size_t i = 0; i < p->m.ngpus && strlen(units) < sizeof(units) - 32; i++) {
                size_t l = strlen(units);
                snprintf(units + l, sizeof(units) - l, "%s%u", i ? "+" : "", p->m.gpus[i].units);
        }
        pthread_mutex_unlock(&p->m.mu);
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
        /* Give the agent a moment, so the first list is complete. */
        r = gs_mirror_start(&p->m, o->cfg.agent_socket, o->agent_timeout_ms, 2000);
        if (r < 0)
                goto out;
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
                if (p->standby) {
                        continue;
                } else if (!need_register && p->server && __atomic_load_n(&p->lw_active, __ATOMIC_SEQ_CST) == 0 &&
                           __atomic_load_n(&p->lw_ended_ms, __ATOMIC_SEQ_CST) &&
                           gs_mono_ms() - __atomic_load_n(&p->lw_ended_ms, __ATOMIC_SEQ_CST) > LW_GONE_MS) {
                        log_info("the kubelet closed our ListAndWatch and opened none for %d ms: registering again",
                                 LW_GONE_MS);
                        __atomic_store_n(&p->lw_ended_ms, 0, __ATOMIC_SEQ_CST);
                        need_register = true;
                        next_try = 0;
                        continue;
                } else if (!kubelet_new && !our_socket_ok(p) && newer_serves(p)) {
                        /* Serving again would take the path back from it, and
                         * it would take it back from us, until we stop. */
                        log_info("another instance serves %s now (an upgrade): standing by until stopped",
                                 p->sock_path);
                        gs_grpc_server_stop(p->server);
                        p->server = NULL;
                        p->standby = true;
                        need_register = false;
                        continue;
                } else if (kubelet_new) {
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
        gs_mirror_shutdown(&p->m);
        gs_grpc_server_stop(p->server);
        if (p->server) {
                struct stat st;
                /* Remove our socket, but not one a newer instance serves. */
                if (stat(p->sock_path, &st) == 0 && st.st_ino == p->server_ino)
                        unlink(p->sock_path);
                p->server = NULL;
        }
out:
        gs_mirror_free(&p->m);
        gs_closep(&sfd);
        gs_closep(&ifd);
        return r;
}
