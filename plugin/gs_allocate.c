/* gs_allocate.c — the DevicePlugin service's Allocate: every container
 * request checked against the mirror before anything is made, then one
 * CreateAllocation each, answered with the container spec (gs_ctrspec.h);
 * what this call made is released again if a later request fails.  See
 * gs_dp.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gs_ctrspec.h"
#include "gs_dp.h"
#include "gs_log.h"

/* A failed exchange with the agent (gs_agentcli.h) as a gRPC code. */
static grpc_status_code agent_code(const struct gs_agentcli_err *e)
{
        if (e->transport)
                return e->transport == -ETIMEDOUT ? GRPC_STATUS_DEADLINE_EXCEEDED : GRPC_STATUS_UNAVAILABLE;
        switch (-e->agent) {
        case EINVAL:
        case ENOENT:
        case EEXIST:
        case E2BIG: return GRPC_STATUS_INVALID_ARGUMENT;
        case EBUSY: return GRPC_STATUS_FAILED_PRECONDITION;
        case ENOSPC:
        case ENOMEM: return GRPC_STATUS_RESOURCE_EXHAUSTED;
        case EIO:
        case ENODEV:
        case EAGAIN: return GRPC_STATUS_UNAVAILABLE;
        case ETIMEDOUT: return GRPC_STATUS_DEADLINE_EXCEEDED;
        default: return GRPC_STATUS_INTERNAL;
        }
}

/* Validates one container request; pre: mu held. */
static grpc_status_code check_request(struct gs_dp *p, const V1beta1__ContainerAllocateRequest *cr, char *msg, size_t n)
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
static grpc_status_code fill_response(struct gs_dp *p, const Gshare__Ctl__V1__Allocation *al,
                                      V1beta1__ContainerAllocateResponse *c, struct gs_arena *a, char *msg, size_t n)
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
        if (cfg->device_nodes)
                gs_mirror_add_devices(&p->m, &spec, p->o->nvidia_proc, al);
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

static void release(struct gs_dp *p, const char *id)
{
        struct gs_agentcli_err e;

        if (gs_agentcli_release(&p->cli, id, NULL, &e) < 0)
                log_warn("could not release allocation %s after a failed Allocate: %s", id, e.msg);
        else
                log_info("released allocation %s (its Allocate call failed)", id);
}

grpc_status_code gs_dp_allocate(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req,
                                ProtobufCMessage **ret, char *msg, size_t msglen)
{
        struct gs_dp *p = ctx;
        const V1beta1__AllocateRequest *r = (const V1beta1__AllocateRequest *)req;
        struct gs_dp_reply *o = gs_dp_reply_new();
        V1beta1__AllocateResponse *resp;
        grpc_status_code code = GRPC_STATUS_OK;
        char m[GS_GRPC_MSG_MAX - 40] = "";
        char **created = NULL;
        size_t ncreated = 0, i = 0;

        if (!o || !(created = calloc(r->n_container_requests + 1, sizeof(char *)))) {
                gs_dp_reply_free(NULL, o ? &o->m.base : NULL);
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
        resp->container_responses = gs_arena_array(&o->arena, r->n_container_requests, sizeof(void *));
        if (!resp->container_responses) {
                code = GRPC_STATUS_RESOURCE_EXHAUSTED;
                goto out;
        }
        for (i = 0; i < r->n_container_requests; i++) {
                const V1beta1__ContainerAllocateRequest *cr = r->container_requests[i];
                struct gs_agentcli_err e;
                GsCtlReply *rep = NULL;
                V1beta1__ContainerAllocateResponse *c;
                int64_t left = gs_grpc_call_deadline_left_ms(call);
                int timeout = p->o->agent_timeout_ms;
                /* An agent restarting (a crash, an upgrade) is waited for,
                 * as a hooked process waits (agentWait), within the
                 * kubelet's deadline: a failed Allocate rejects the pod for
                 * good (UnexpectedAdmissionError). */
                int64_t wait = p->o->cfg.agent_wait_ms;

                if (left >= 0 && left < timeout)
                        timeout = (int)left;
                if (left >= 0 && left - timeout < wait)
                        wait = left > timeout ? left - timeout : 0;
                /* take_over: the kubelet gives out only IDs no container
                 * holds, so an allocation still holding one is a gone pod's. */
                if (gs_agentcli_create_allocation(&p->cli, cr->devices_ids, cr->n_devices_ids, true, timeout, (int)wait,
                                                  &rep, &e) < 0) {
                        code = agent_code(&e);
                        snprintf(m, sizeof(m), "%s%.440s", e.agent ? "agent: " : "", e.msg);
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
                                log_info("Allocate: %zu units -> allocation %s%s", cr->n_devices_ids, al->id,
                                         rep->create_allocation->created ? "" : " (existing)");
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
                gs_dp_reply_free(NULL, &o->m.base);
        } else {
                *ret = &o->m.base;
        }
        for (size_t k = 0; k < ncreated; k++)
                free(created[k]);
        free(created);
        return code;
}
