/* gs_dpsvc.c — the v1beta1.DevicePlugin service: ListAndWatch (the device
 * list from the mirror, sent again on every change), GetPreferredAllocation
 * (gs_policy), the options, PreStartContainer, and the method table
 * (Allocate is gs_allocate.c).  See gs_dp.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "gs_devid.h"
#include "gs_dp.h"
#include "gs_log.h"
#include "gs_policy.h"

#define HEALTHY "Healthy"
#define UNHEALTHY "Unhealthy"
#define STREAM_SEND_TIMEOUT_MS 10000

/* ---- ListAndWatch ---- */

/* Builds the device list; pre: mu held. */
static V1beta1__ListAndWatchResponse *build_list(struct gs_dp *p, struct gs_arena *a)
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
                        devs[u].health =
                                (char *)(p->m.agent_up && g->healthy && !g->unhealthy[u] ? HEALTHY : UNHEALTHY);
                        devs[u].topology = topo;
                        r->devices[k++] = &devs[u];
                }
        }
        r->n_devices = k;
        return r;
}

/* Sends the list, and again whenever it changes, until the call ends. */
static grpc_status_code list_and_watch_loop(struct gs_dp *p, struct gs_grpc_call *call, char *msg, size_t msglen)
{
        uint64_t seen = 0;
        bool first = true;

        for (;;) {
                struct gs_arena a = { 0 };
                V1beta1__ListAndWatchResponse *r = NULL;

                pthread_mutex_lock(&p->m.mu);
                if (!first)
                        gs_mirror_wait(&p->m, seen, 100); /* also how soon a cancel is seen */
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
                        int err = gs_grpc_call_send(call, &r->base, STREAM_SEND_TIMEOUT_MS);

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

/* Counts the open streams for the main loop (a kubelet that dropped us
 * opens none). */
static grpc_status_code list_and_watch(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req, char *msg,
                                       size_t msglen)
{
        struct gs_dp *p = ctx;
        grpc_status_code st;

        (void)req;
        __atomic_add_fetch(&p->lw_active, 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&p->lw_opened, 1, __ATOMIC_SEQ_CST);
        st = list_and_watch_loop(p, call, msg, msglen);
        __atomic_store_n(&p->lw_ended_ms, gs_mono_ms(), __ATOMIC_SEQ_CST);
        __atomic_sub_fetch(&p->lw_active, 1, __ATOMIC_SEQ_CST);
        return st;
}

/* ---- GetPreferredAllocation ---- */

static grpc_status_code get_preferred(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req,
                                      ProtobufCMessage **ret, char *msg, size_t msglen)
{
        struct gs_dp *p = ctx;
        const V1beta1__PreferredAllocationRequest *r = (const V1beta1__PreferredAllocationRequest *)req;
        struct gs_dp_reply *o = gs_dp_reply_new();
        V1beta1__PreferredAllocationResponse *resp;
        grpc_status_code code = GRPC_STATUS_OK;

        (void)call;
        if (!o)
                return GRPC_STATUS_RESOURCE_EXHAUSTED;
        resp = &o->m.pref;
        v1beta1__preferred_allocation_response__init(resp);
        resp->container_responses = gs_arena_array(&o->arena, r->n_container_requests, sizeof(void *));
        if (!resp->container_responses) {
                gs_dp_reply_free(NULL, &o->m.base);
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
                gs_dp_reply_free(NULL, &o->m.base);
                return code;
        }
        *ret = &o->m.base;
        return GRPC_STATUS_OK;
}

/* ---- the small ones ---- */

static grpc_status_code get_options(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req,
                                    ProtobufCMessage **ret, char *msg, size_t msglen)
{
        struct gs_dp_reply *o = gs_dp_reply_new();

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
        struct gs_dp_reply *o = gs_dp_reply_new();

        (void)ctx, (void)call, (void)req, (void)msg, (void)msglen;
        if (!o)
                return GRPC_STATUS_RESOURCE_EXHAUSTED;
        v1beta1__pre_start_container_response__init(&o->m.prestart);
        *ret = &o->m.base;
        return GRPC_STATUS_OK;
}

const struct gs_grpc_method gs_dp_methods[] = {
        { "/v1beta1.DevicePlugin/GetDevicePluginOptions", &v1beta1__empty__descriptor, get_options, gs_dp_reply_free,
          NULL },
        { "/v1beta1.DevicePlugin/ListAndWatch", &v1beta1__empty__descriptor, NULL, NULL, list_and_watch },
        { "/v1beta1.DevicePlugin/GetPreferredAllocation", &v1beta1__preferred_allocation_request__descriptor,
          get_preferred, gs_dp_reply_free, NULL },
        { "/v1beta1.DevicePlugin/Allocate", &v1beta1__allocate_request__descriptor, gs_dp_allocate, gs_dp_reply_free,
          NULL },
        { "/v1beta1.DevicePlugin/PreStartContainer", &v1beta1__pre_start_container_request__descriptor, pre_start,
          gs_dp_reply_free, NULL },
};

const size_t gs_dp_nmethods = GS_ARRAY_SIZE(gs_dp_methods);
