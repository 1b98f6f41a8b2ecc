/* gs_prepare.c — the DRA plugin's dra/v1 DRAPlugin service:
 * NodePrepareResources reads each claim from the API server, asks the agent
 * for the allocation of its consumed memory on its GPU (the agent client's
 * one claim call) and writes its CDI spec; NodeUnprepareResources releases
 * it and removes the spec.  Each claim of a call succeeds or fails alone,
 * and a failed one leaves nothing made.  See gs_dractx.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dra_v1.pb-c.h"
#include "gs_cdi.h"
#include "gs_claim.h"
#include "gs_ctrspec.h"
#include "gs_dractx.h"
#include "gs_k8sname.h"
#include "gs_log.h"

typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim Claim;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest PrepReq;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse PrepResp;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse__ClaimsEntry PrepEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourceResponse PrepOne;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Device Device;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest UnprepReq;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse UnprepResp;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse__ClaimsEntry UnprepEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourceResponse UnprepOne;

static bool claim_ok(const Claim *c, char *err, size_t errlen)
{
        if (!c->uid || !gs_k8s_uid_ok(c->uid) || !c->namespace_ || !gs_k8s_label_ok(c->namespace_) || !c->name ||
            !gs_k8s_subdomain_ok(c->name)) {
                snprintf(err, errlen, "claim '%.64s/%.64s' (UID '%.40s'): not a claim namespace, name and UID",
                         c->namespace_ ? c->namespace_ : "", c->name ? c->name : "", c->uid ? c->uid : "");
                return false;
        }
        return true;
}

struct prep_out {
        char request[64], pool[254], device[64], share_id[64], cdi_id[128];
};

/* Reads the claim from the API server. */
static int fetch_claim(struct gs_dractx *d, const Claim *c, struct gs_claim_info *ci, char *err, size_t errlen)
{
        char path[600], *body = NULL;
        size_t len = 0;
        long code = 0;
        int r;

        snprintf(path, sizeof(path), "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s", c->namespace_,
                 c->name);
        r = gs_kapi_request(&d->kapi, "GET", path, NULL, NULL, GS_CLAIM_MAX_BYTES, &code, &body, &len, err, errlen);
        if (r < 0)
                return r;
        if (code == 404) {
                snprintf(err, errlen, "ResourceClaim %s/%s not found", c->namespace_, c->name);
                r = -ENOENT;
        } else if (code != 200) {
                snprintf(err, errlen, "cannot read ResourceClaim %s/%s: HTTP %ld%s", c->namespace_, c->name, code,
                         code == 401 || code == 403 ? " (RBAC: get resourceclaims)" : "");
                r = -EIO;
        } else {
                r = gs_claim_parse(body, len, d->o->driver, ci, err, errlen);
        }
        free(body);
        return r;
}

/* Under d->m.mu: waits up to wait_ms for the agent to be up (a restart,
 * an upgrade), as the device plugin's Allocate and a hooked process do. */
static void wait_agent(struct gs_dractx *d, const Claim *c, int wait_ms)
{
        int64_t until = gs_mono_ms() + wait_ms;

        if (!d->m.agent_up && wait_ms > 0)
                log_info("claim %s/%s: the gshare agent is away: waiting up to %d ms for it", c->namespace_, c->name,
                         wait_ms);

        while (!d->m.agent_up && !d->m.stopping) {
                int64_t left = until - gs_mono_ms();
                if (left <= 0)
                        break;
                gs_mirror_wait(&d->m, d->m.gen, left > 1000 ? 1000 : (int)left);
        }
}

static int prepare_one(struct gs_dractx *d, const Claim *c, struct prep_out *out, int wait_ms, char *err, size_t errlen)
{
        struct gs_claim_info *ci = calloc(1, sizeof(*ci));
        const struct gs_claim_result *res;
        const Gshare__Ctl__V1__Allocation *al;
        struct gs_agentcli_claim cl;
        struct gs_agentcli_err e;
        GsCtlReply *rep = NULL;
        struct gs_ctrspec spec;
        char uuid[GS_UUID_STR_LEN + 1] = "";
        uint64_t unit = 0, units;
        int r;

        if (!ci) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        r = fetch_claim(d, c, ci, err, errlen);
        if (r < 0)
                goto out;
        r = -EINVAL;
        if (strcmp(ci->uid, c->uid) != 0) {
                snprintf(err, errlen, "ResourceClaim %s/%s has UID %.40s, not %s (deleted and made again?)",
                         c->namespace_, c->name, ci->uid, c->uid);
                goto out;
        }
        if (!ci->allocated || ci->nresults == 0) {
                snprintf(err, errlen, "ResourceClaim %s/%s has no device of %s allocated", c->namespace_, c->name,
                         d->o->driver);
                goto out;
        }
        if (ci->nresults > 1) {
                snprintf(err, errlen, "ResourceClaim %s/%s has %zu devices of %s; one per claim is supported",
                         c->namespace_, c->name, ci->nresults, d->o->driver);
                goto out;
        }
        res = &ci->results[0];
        if (strcmp(res->pool, d->o->node) != 0) {
                snprintf(err, errlen, "ResourceClaim %s/%s: device %s is of pool %.100s, not of this node (%.100s)",
                         c->namespace_, c->name, res->device, res->pool, d->o->node);
                goto out;
        }
        pthread_mutex_lock(&d->m.mu);
        wait_agent(d, c, wait_ms);
        for (size_t i = 0; i < d->m.ngpus; i++) {
                char name[32];
                snprintf(name, sizeof(name), "gpu-%u", d->m.gpus[i].index);
                if (strcmp(name, res->device) == 0) {
                        snprintf(uuid, sizeof(uuid), "%s", d->m.gpus[i].uuid);
                        unit = d->m.gpus[i].unit_bytes;
                }
        }
        pthread_mutex_unlock(&d->m.mu);
        if (!uuid[0] || !unit) {
                snprintf(err, errlen,
                         "ResourceClaim %s/%s: device %s is not a GPU of this node (gone, or the agent not reachable)",
                         c->namespace_, c->name, res->device);
                r = -ENODEV;
                goto out;
        }
        if (res->memory == 0) {
                snprintf(err, errlen, "ResourceClaim %s/%s: no consumedCapacity.memory on device %s", c->namespace_,
                         c->name, res->device);
                goto out;
        }
        units = (res->memory + unit - 1) / unit;
        if (units > GS_MAX_UNITS_PER_GPU) {
                snprintf(err, errlen, "ResourceClaim %s/%s asks for %llu bytes, more than any GPU has", c->namespace_,
                         c->name, (unsigned long long)res->memory);
                goto out;
        }
        cl = (struct gs_agentcli_claim){ .uid = c->uid,
                                         .namespace_ = c->namespace_,
                                         .name = c->name,
                                         .gpu_uuid = uuid,
                                         .units = (uint32_t)units,
                                         .burst = ci->burst,
                                         .compute_class = ci->compute_class,
                                         .compute_cap = gs_claim_compute_cap(ci, res),
                                         .compute_weight = ci->compute_weight,
                                         .wait_ms = wait_ms };
        r = gs_agentcli_create_claim_allocation(&d->cli, &cl, &rep, &e);
        if (r < 0) {
                if (e.transport)
                        snprintf(err, errlen, "%s", e.msg);
                else
                        snprintf(err, errlen, "ResourceClaim %s/%s: %.400s", c->namespace_, c->name, e.msg);
                goto out;
        }
        al = rep->create_allocation->allocation;
        r = gs_ctrspec_build(&d->o->cfg, al, &spec, err, errlen);
        if (r == 0 && d->o->cfg.device_nodes)
                gs_mirror_add_devices(&d->m, &spec, d->o->nvidia_proc, al);
        if (r == 0)
                r = gs_cdi_write(d->o->cdi_dir, GS_CDI_KIND, c->uid, &spec, err, errlen);
        if (r < 0) {
                /* Nothing half-made: an allocation this call made goes again. */
                if (rep->create_allocation->created && gs_agentcli_release(&d->cli, NULL, c->uid, &e) < 0)
                        log_warn("claim %s: could not release its allocation after a failed prepare: %s", c->uid,
                                 e.msg);
                goto out;
        }
        snprintf(out->request, sizeof(out->request), "%s", res->request);
        snprintf(out->pool, sizeof(out->pool), "%s", res->pool);
        snprintf(out->device, sizeof(out->device), "%s", res->device);
        snprintf(out->share_id, sizeof(out->share_id), "%s", res->share_id);
        snprintf(out->cdi_id, sizeof(out->cdi_id), "%s=%s", GS_CDI_KIND, c->uid);
        log_info("claim %s/%s (%s) prepared: %llu units of GPU %s (%s), allocation %s%s", c->namespace_, c->name,
                 c->uid, (unsigned long long)units, uuid, res->device, al->id,
                 rep->create_allocation->created ? "" : " (existing)");
out:
        gs_ctl_reply_free(rep);
        free(ci);
        return r;
}

/* The reply to a call of n claims, one block of size bytes, zeroed; or
 * NULL with *code and msg. */
static void *reply_new(size_t n, size_t size, char *msg, size_t msglen, grpc_status_code *code)
{
        void *p;

        if (n > GS_DRA_MAX_CLAIMS) {
                snprintf(msg, msglen, "%zu claims in one call; at most %d", n, GS_DRA_MAX_CLAIMS);
                *code = GRPC_STATUS_INVALID_ARGUMENT;
                return NULL;
        }
        p = calloc(1, size);
        if (!p) {
                snprintf(msg, msglen, "out of memory");
                *code = GRPC_STATUS_RESOURCE_EXHAUSTED;
        }
        return p;
}

struct prep_reply {
        PrepResp resp; /* first: the gRPC layer frees this pointer */
        PrepEntry *entp[GS_DRA_MAX_CLAIMS];
        PrepEntry ent[GS_DRA_MAX_CLAIMS];
        PrepOne one[GS_DRA_MAX_CLAIMS];
        Device *devp[GS_DRA_MAX_CLAIMS];
        Device dev[GS_DRA_MAX_CLAIMS];
        char *reqp[GS_DRA_MAX_CLAIMS];
        char *cdip[GS_DRA_MAX_CLAIMS];
        struct prep_out out[GS_DRA_MAX_CLAIMS];
        char key[GS_DRA_MAX_CLAIMS][40];
        char err[GS_DRA_MAX_CLAIMS][512];
};

static grpc_status_code prepare(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *msg_in,
                                ProtobufCMessage **ret, char *msg, size_t msglen)
{
        const PrepReq *req = (const void *)msg_in;
        struct gs_dractx *d = ctx;
        struct prep_reply *p;
        grpc_status_code code;
        /* An agent restarting is waited for (agentWait) within the
         * kubelet's deadline, less the agent's own timeout: a failed
         * prepare is retried by the kubelet only after a back-off. */
        int64_t left = gs_grpc_call_deadline_left_ms(call), wait = d->o->cfg.agent_wait_ms;

        if (left >= 0)
                wait = left > d->o->agent_timeout_ms ? (left - d->o->agent_timeout_ms) / 2 : 0;
        if (wait > (int64_t)d->o->cfg.agent_wait_ms)
                wait = (int64_t)d->o->cfg.agent_wait_ms;

        p = reply_new(req->n_claims, sizeof(*p), msg, msglen, &code);
        if (!p)
                return code;
        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__init(&p->resp);
        p->resp.claims = p->entp;
        for (size_t i = 0; i < req->n_claims; i++) {
                const Claim *c = req->claims[i];
                PrepEntry *e = &p->ent[i];
                PrepOne *o = &p->one[i];

                k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__claims_entry__init(e);
                k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resource_response__init(o);
                snprintf(p->key[i], sizeof(p->key[i]), "%s", c->uid ? c->uid : "");
                e->key = p->key[i];
                e->value = o;
                p->entp[p->resp.n_claims++] = e;
                if (!claim_ok(c, p->err[i], sizeof(p->err[i])) ||
                    prepare_one(d, c, &p->out[i], (int)wait, p->err[i], sizeof(p->err[i])) < 0) {
                        log_warn("NodePrepareResources: %s", p->err[i]);
                        o->error = p->err[i];
                        continue;
                }
                k8s__io__kubelet__pkg__apis__dra__v1__device__init(&p->dev[i]);
                p->reqp[i] = p->out[i].request;
                p->cdip[i] = p->out[i].cdi_id;
                p->dev[i].request_names = &p->reqp[i];
                p->dev[i].n_request_names = p->out[i].request[0] ? 1 : 0;
                p->dev[i].pool_name = p->out[i].pool;
                p->dev[i].device_name = p->out[i].device;
                p->dev[i].cdi_device_ids = &p->cdip[i];
                p->dev[i].n_cdi_device_ids = 1;
                p->dev[i].share_id = p->out[i].share_id;
                p->devp[i] = &p->dev[i];
                o->devices = &p->devp[i];
                o->n_devices = 1;
        }
        *ret = &p->resp.base;
        return GRPC_STATUS_OK;
}

static int unprepare_one(struct gs_dractx *d, const Claim *c, char *err, size_t errlen)
{
        struct gs_agentcli_err e;
        int r = gs_agentcli_release(&d->cli, NULL, c->uid, &e);

        if (r < 0) {
                if (e.transport)
                        snprintf(err, errlen, "%s", e.msg);
                else
                        snprintf(err, errlen, "claim %s/%s: %.400s", c->namespace_, c->name, e.msg);
                return r;
        }
        /* After the release: a spec left behind by a failure here is
         * harmless, the next unprepare removes it. */
        r = gs_cdi_remove(d->o->cdi_dir, GS_CDI_KIND, c->uid);
        if (r < 0) {
                snprintf(err, errlen, "claim %s/%s: cannot remove its CDI spec: %s", c->namespace_, c->name,
                         strerror(-r));
                return r;
        }
        log_info("claim %s/%s (%s) unprepared", c->namespace_, c->name, c->uid);
        return 0;
}

struct unprep_reply {
        UnprepResp resp;
        UnprepEntry *entp[GS_DRA_MAX_CLAIMS];
        UnprepEntry ent[GS_DRA_MAX_CLAIMS];
        UnprepOne one[GS_DRA_MAX_CLAIMS];
        char key[GS_DRA_MAX_CLAIMS][40];
        char err[GS_DRA_MAX_CLAIMS][512];
};

static grpc_status_code unprepare(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *msg_in,
                                  ProtobufCMessage **ret, char *msg, size_t msglen)
{
        const UnprepReq *req = (const void *)msg_in;
        struct gs_dractx *d = ctx;
        struct unprep_reply *p;
        grpc_status_code code;
        (void)call;

        p = reply_new(req->n_claims, sizeof(*p), msg, msglen, &code);
        if (!p)
                return code;
        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__init(&p->resp);
        p->resp.claims = p->entp;
        for (size_t i = 0; i < req->n_claims; i++) {
                const Claim *c = req->claims[i];

                k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__claims_entry__init(&p->ent[i]);
                k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resource_response__init(&p->one[i]);
                snprintf(p->key[i], sizeof(p->key[i]), "%s", c->uid ? c->uid : "");
                p->ent[i].key = p->key[i];
                p->ent[i].value = &p->one[i];
                p->entp[p->resp.n_claims++] = &p->ent[i];
                if (!claim_ok(c, p->err[i], sizeof(p->err[i])) ||
                    unprepare_one(d, c, p->err[i], sizeof(p->err[i])) < 0) {
                        log_warn("NodeUnprepareResources: %s", p->err[i]);
                        p->one[i].error = p->err[i];
                }
        }
        *ret = &p->resp.base;
        return GRPC_STATUS_OK;
}

void gs_dra_free_reply(void *ctx, ProtobufCMessage *m)
{
        (void)ctx;
        free(m);
}

const struct gs_grpc_method gs_dra_methods[] = {
        { "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
          &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__descriptor, prepare, gs_dra_free_reply,
          NULL },
        { "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources",
          &k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__descriptor, unprepare,
          gs_dra_free_reply, NULL },
        /* v1beta1 (kubelets 1.32, 1.33): the same messages but for
         * Device.share_id, which such a kubelet skips as unknown. */
        { "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources",
          &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__descriptor, prepare, gs_dra_free_reply,
          NULL },
        { "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources",
          &k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__descriptor, unprepare,
          gs_dra_free_reply, NULL },
};

const size_t gs_dra_nmethods = GS_ARRAY_SIZE(gs_dra_methods);
