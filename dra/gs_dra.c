/* gs_dra.c — see gs_dra.h. */
#include "gs_dra.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "dra_v1.pb-c.h"
#include "gs_cdi.h"
#include "gs_claim.h"
#include "gs_ctl.h"
#include "gs_ctrspec.h"
#include "gs_grpc.h"
#include "gs_kapi.h"
#include "gs_log.h"
#include "gs_slice.h"
#include "pluginregistration_v1.pb-c.h"

#define MAX_GPUS 64
#define RECONNECT_MS 500
#define REPUBLISH_MIN_MS 1000
#define REPUBLISH_MAX_MS 30000
/* How often the plugin checks that its slice still exists. */
#define SLICE_CHECK_MS 5000

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

struct dra {
        const struct gs_dra_opts *o;
        struct gs_kapi kapi;
        char driver_version[64];
        char endpoint[PATH_MAX];      /* <plugin_dir>/dra.sock */
        char reg_socket[PATH_MAX];    /* <registry_dir>/<driver>-reg.sock */
        atomic_bool stop;
        atomic_bool check_slice;     /* check at the watcher's next tick */
        pthread_t watcher;
        /* The agent's GPUs, as its last Watch message gave them. */
        pthread_mutex_t mu;
        struct gs_slice_gpu gpus[MAX_GPUS];
        bool healthy[MAX_GPUS];
        size_t ngpus;
        /* The watcher's: what was last published, and when to retry. */
        struct gs_slice_gpu published[MAX_GPUS];
        size_t npublished;
        bool is_published;
        uint64_t generation;
        bool dirty;                  /* to publish */
        int64_t retry_at, check_at;  /* CLOCK_MONOTONIC ms */
        int backoff;
};

static void nap_ms(int ms)
{
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

        nanosleep(&ts, NULL);
}

/* ---- the agent's GPUs and the ResourceSlice ---- */

static void take_gpus(struct dra *d, const Gshare__Ctl__V1__ListGpusReply *l)
{
        pthread_mutex_lock(&d->mu);
        d->ngpus = 0;
        for (size_t i = 0; i < l->n_gpus && d->ngpus < MAX_GPUS; i++) {
                const Gshare__Ctl__V1__Gpu *g = l->gpus[i];
                struct gs_slice_gpu *s = &d->gpus[d->ngpus];

                memset(s, 0, sizeof(*s));
                s->index = g->index;
                snprintf(s->uuid, sizeof(s->uuid), "%s", g->uuid);
                snprintf(s->name, sizeof(s->name), "%s", g->name);
                s->numa_node = g->numa_node;
                snprintf(s->pci, sizeof(s->pci), "%s", g->pci_bus_id);
                s->total_bytes = g->total_bytes;
                s->unit_bytes = g->unit_bytes;
                s->capacity_bytes = (uint64_t)g->units_total * g->unit_bytes;
                d->healthy[d->ngpus] = g->healthy;
                d->ngpus++;
        }
        pthread_mutex_unlock(&d->mu);
}

/* Publishes the healthy GPUs if they differ from what was published.
 * Returns 0 when nothing is left to do. */
static int publish(struct dra *d)
{
        struct gs_slice_gpu now[MAX_GPUS];
        size_t n = 0;
        char err[512];
        int r;

        pthread_mutex_lock(&d->mu);
        for (size_t i = 0; i < d->ngpus; i++)
                if (d->healthy[i])
                        now[n++] = d->gpus[i];
        pthread_mutex_unlock(&d->mu);
        if (d->is_published && n == d->npublished && memcmp(now, d->published, n * sizeof(now[0])) == 0)
                return 0;
        if (!d->kapi.base[0])
                return 0;
        r = gs_slice_publish(&d->kapi, d->o->driver, d->o->node, d->generation + 1, now, n, d->driver_version,
                             err, sizeof(err));
        if (r < 0) {
                log_warn("ResourceSlice not published: %s", err);
                return r;
        }
        d->generation++;
        memcpy(d->published, now, n * sizeof(now[0]));
        d->npublished = n;
        d->is_published = true;
        log_info("ResourceSlice %s-%s published: %zu GPUs, pool generation %llu", d->o->node, d->o->driver, n,
                 (unsigned long long)d->generation);
        return 0;
}

/* The watcher's periodic work: the slice published when it is due, and
 * its existence checked every SLICE_CHECK_MS (and at once after a
 * registration): the kubelet deletes the node's ResourceSlices when it
 * starts, and a driver's when it stays unregistered for 30 s. */
static void tick(struct dra *d)
{
        int64_t now = gs_mono_ms();
        char err[512];

        if (d->kapi.base[0] && d->is_published && (atomic_exchange(&d->check_slice, false) || now >= d->check_at)) {
                int r = gs_slice_exists(&d->kapi, d->o->driver, d->o->node, err, sizeof(err));

                d->check_at = now + SLICE_CHECK_MS;
                if (r == 0) {
                        log_warn("ResourceSlice %s-%s is gone (deleted by the kubelet?); publishing it again",
                                 d->o->node, d->o->driver);
                        d->is_published = false;
                        d->dirty = true;
                        d->retry_at = 0;
                } else if (r < 0) {
                        log_debug("cannot check the ResourceSlice: %s", err);
                }
        }
        if (d->dirty && now >= d->retry_at) {
                if (publish(d) == 0) {
                        d->dirty = false;
                        d->backoff = REPUBLISH_MIN_MS;
                        d->check_at = now + SLICE_CHECK_MS;
                } else {
                        d->retry_at = now + d->backoff;
                        d->backoff = d->backoff * 2 > REPUBLISH_MAX_MS ? REPUBLISH_MAX_MS : d->backoff * 2;
                }
        }
}

/* Follows the agent's Watch stream, keeping the GPU table and the slice
 * current; reconnects every RECONNECT_MS while the agent is away (the
 * slice then stays as it was: an agent restart must not withdraw the
 * devices running pods hold). */
static void *watcher_main(void *arg)
{
        struct dra *d = arg;
        bool warned = false;

        d->backoff = REPUBLISH_MIN_MS;
        while (!atomic_load(&d->stop)) {
                GsCtlRequest req = GSHARE__CTL__V1__REQUEST__INIT;
                Gshare__Ctl__V1__WatchRequest w = GSHARE__CTL__V1__WATCH_REQUEST__INIT;
                int fd = gs_ctl_connect(d->o->cfg.agent_socket);

                req.op_case = GSHARE__CTL__V1__REQUEST__OP_WATCH;
                req.watch = &w;
                if (fd < 0 || gs_ctl_send(fd, &req.base, d->o->agent_timeout_ms) < 0) {
                        if (!warned)
                                log_warn("gshare agent at %s is unreachable; retrying every %d ms",
                                         d->o->cfg.agent_socket, RECONNECT_MS);
                        warned = true;
                        if (fd >= 0)
                                close(fd);
                        tick(d);
                        nap_ms(RECONNECT_MS);
                        continue;
                }
                while (!atomic_load(&d->stop)) {
                        GsCtlReply *rep = NULL;
                        int r = gs_ctl_recv_reply(fd, 250, &rep);

                        if (r == 0 && rep->body_case == GSHARE__CTL__V1__REPLY__BODY_LIST_GPUS) {
                                if (warned)
                                        log_info("gshare agent at %s is back", d->o->cfg.agent_socket);
                                warned = false;
                                take_gpus(d, rep->list_gpus);
                                d->dirty = true;
                                d->retry_at = 0;
                        }
                        gs_ctl_reply_free(rep);
                        if (r < 0 && r != -ETIMEDOUT)
                                break;
                        tick(d);
                }
                close(fd);
                if (!atomic_load(&d->stop)) {
                        log_warn("lost the gshare agent's Watch stream; reconnecting");
                        warned = true;
                }
        }
        return NULL;
}

/* ---- registration ---- */

static grpc_status_code get_info(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req,
                                 ProtobufCMessage **ret, char *msg, size_t msglen)
{
        struct dra *d = ctx;
        Pluginregistration__PluginInfo *info = calloc(1, sizeof(*info) + 2 * sizeof(char *));
        (void)call;
        (void)req;

        if (!info) {
                snprintf(msg, msglen, "out of memory");
                return GRPC_STATUS_RESOURCE_EXHAUSTED;
        }
        pluginregistration__plugin_info__init(info);
        info->type = (char *)"DRAPlugin";
        info->name = (char *)d->o->driver;
        info->endpoint = d->endpoint;
        info->supported_versions = (char **)(info + 1);
        info->supported_versions[0] = (char *)GS_DRA_SERVICE;
        info->supported_versions[1] = (char *)GS_DRA_SERVICE_BETA;
        info->n_supported_versions = 2;
        log_info("kubelet asked for the plugin's info");
        *ret = &info->base;
        return GRPC_STATUS_OK;
}

static void free_plain(void *ctx, ProtobufCMessage *m)
{
        (void)ctx;
        free(m);
}

static grpc_status_code notify_status(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req,
                                      ProtobufCMessage **ret, char *msg, size_t msglen)
{
        const Pluginregistration__RegistrationStatus *st = (const void *)req;
        Pluginregistration__RegistrationStatusResponse *r = calloc(1, sizeof(*r));
        struct dra *d = ctx;
        (void)call;

        if (!r) {
                snprintf(msg, msglen, "out of memory");
                return GRPC_STATUS_RESOURCE_EXHAUSTED;
        }
        pluginregistration__registration_status_response__init(r);
        if (st->plugin_registered)
                log_info("registered %s with the kubelet (%s)", d->o->driver, GS_DRA_SERVICE);
        else
                log_error("the kubelet refused %s: %.300s", d->o->driver, st->error ? st->error : "");
        /* A kubelet that just started deletes the node's slices. */
        atomic_store(&d->check_slice, true);
        *ret = &r->base;
        return GRPC_STATUS_OK;
}

/* ---- prepare and unprepare ---- */

static bool claim_ok(const Claim *c, char *err, size_t errlen)
{
        size_t nu = c->uid ? strlen(c->uid) : 0, nn = c->name ? strlen(c->name) : 0;
        size_t ns = c->namespace_ ? strlen(c->namespace_) : 0;
        const char *dns = "abcdefghijklmnopqrstuvwxyz0123456789-.";

        if (nu == 0 || nu > 36 || strspn(c->uid, "0123456789abcdefABCDEF-") != nu || ns == 0 || ns > 63 ||
            strspn(c->namespace_, dns) != ns || nn == 0 || nn > 253 || strspn(c->name, dns) != nn) {
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
static int fetch_claim(struct dra *d, const Claim *c, struct gs_claim_info *ci, char *err, size_t errlen)
{
        char path[600], *body = NULL;
        size_t len = 0;
        long code = 0;
        int r;

        snprintf(path, sizeof(path), "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s", c->namespace_,
                 c->name);
        r = gs_kapi_request(&d->kapi, "GET", path, NULL, NULL, GS_CLAIM_MAX_BYTES, &code, &body, &len, err,
                            errlen);
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

static int prepare_one(struct dra *d, const Claim *c, struct prep_out *out, char *err, size_t errlen)
{
        struct gs_claim_info *ci = calloc(1, sizeof(*ci));
        const struct gs_claim_result *res;
        GsCtlRequest req = GSHARE__CTL__V1__REQUEST__INIT;
        Gshare__Ctl__V1__CreateClaimAllocationRequest cr = GSHARE__CTL__V1__CREATE_CLAIM_ALLOCATION_REQUEST__INIT;
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
        pthread_mutex_lock(&d->mu);
        for (size_t i = 0; i < d->ngpus; i++) {
                char name[32];
                snprintf(name, sizeof(name), "gpu-%u", d->gpus[i].index);
                if (strcmp(name, res->device) == 0) {
                        snprintf(uuid, sizeof(uuid), "%s", d->gpus[i].uuid);
                        unit = d->gpus[i].unit_bytes;
                }
        }
        pthread_mutex_unlock(&d->mu);
        if (!uuid[0] || !unit) {
                snprintf(err, errlen, "ResourceClaim %s/%s: device %s is not a GPU of this node (gone, or the agent not reachable)",
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
        req.op_case = GSHARE__CTL__V1__REQUEST__OP_CREATE_CLAIM_ALLOCATION;
        req.create_claim_allocation = &cr;
        cr.claim_uid = c->uid;
        cr.claim_namespace = c->namespace_;
        cr.claim_name = c->name;
        cr.gpu_uuid = uuid;
        cr.units = (uint32_t)units;
        r = gs_ctl_call(d->o->cfg.agent_socket, &req, d->o->agent_timeout_ms, &rep);
        if (r < 0) {
                snprintf(err, errlen, "cannot reach the gshare agent at %.200s: %s", d->o->cfg.agent_socket,
                         strerror(-r));
                goto out;
        }
        if (rep->error || rep->body_case != GSHARE__CTL__V1__REPLY__BODY_CREATE_ALLOCATION ||
            !rep->create_allocation->allocation) {
                snprintf(err, errlen, "ResourceClaim %s/%s: %s", c->namespace_, c->name,
                         rep->message && rep->message[0] ? rep->message : "the agent gave no allocation");
                r = rep->error ? rep->error : -EIO;
                goto out;
        }
        r = gs_ctrspec_build(&d->o->cfg, rep->create_allocation->allocation, &spec, err, errlen);
        if (r == 0 && d->o->cfg.device_nodes) {
                char pci[32] = "";
                const char *pcis[1] = { pci };

                pthread_mutex_lock(&d->mu);
                for (size_t i = 0; i < d->ngpus; i++)
                        if (strcasecmp(d->gpus[i].uuid, uuid) == 0)
                                snprintf(pci, sizeof(pci), "%s", d->gpus[i].pci);
                pthread_mutex_unlock(&d->mu);
                gs_ctrspec_add_devices(&spec, d->o->nvidia_proc, pcis, 1);
        }
        if (r == 0)
                r = gs_cdi_write(d->o->cdi_dir, GS_CDI_KIND, c->uid, &spec, err, errlen);
        if (r < 0) {
                /* Nothing half-made: an allocation this call made goes again. */
                if (rep->create_allocation->created) {
                        GsCtlRequest rq = GSHARE__CTL__V1__REQUEST__INIT;
                        Gshare__Ctl__V1__ReleaseAllocationRequest rel = GSHARE__CTL__V1__RELEASE_ALLOCATION_REQUEST__INIT;
                        GsCtlReply *rr = NULL;
                        rq.op_case = GSHARE__CTL__V1__REQUEST__OP_RELEASE_ALLOCATION;
                        rq.release_allocation = &rel;
                        rel.claim_uid = c->uid;
                        if (gs_ctl_call(d->o->cfg.agent_socket, &rq, d->o->agent_timeout_ms, &rr) < 0 || rr->error)
                                log_warn("claim %s: could not release its allocation after a failed prepare", c->uid);
                        gs_ctl_reply_free(rr);
                }
                goto out;
        }
        snprintf(out->request, sizeof(out->request), "%s", res->request);
        snprintf(out->pool, sizeof(out->pool), "%s", res->pool);
        snprintf(out->device, sizeof(out->device), "%s", res->device);
        snprintf(out->share_id, sizeof(out->share_id), "%s", res->share_id);
        snprintf(out->cdi_id, sizeof(out->cdi_id), "%s=%s", GS_CDI_KIND, c->uid);
        log_info("claim %s/%s (%s) prepared: %llu units of GPU %s (%s), allocation %s%s", c->namespace_, c->name,
                 c->uid, (unsigned long long)units, uuid, res->device, rep->create_allocation->allocation->id,
                 rep->create_allocation->created ? "" : " (existing)");
out:
        gs_ctl_reply_free(rep);
        free(ci);
        return r;
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
        struct dra *d = ctx;
        struct prep_reply *p;
        (void)call;

        if (req->n_claims > GS_DRA_MAX_CLAIMS) {
                snprintf(msg, msglen, "%zu claims in one call; at most %d", req->n_claims, GS_DRA_MAX_CLAIMS);
                return GRPC_STATUS_INVALID_ARGUMENT;
        }
        p = calloc(1, sizeof(*p));
        if (!p) {
                snprintf(msg, msglen, "out of memory");
                return GRPC_STATUS_RESOURCE_EXHAUSTED;
        }
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
                    prepare_one(d, c, &p->out[i], p->err[i], sizeof(p->err[i])) < 0) {
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

static int unprepare_one(struct dra *d, const Claim *c, char *err, size_t errlen)
{
        GsCtlRequest req = GSHARE__CTL__V1__REQUEST__INIT;
        Gshare__Ctl__V1__ReleaseAllocationRequest rel = GSHARE__CTL__V1__RELEASE_ALLOCATION_REQUEST__INIT;
        GsCtlReply *rep = NULL;
        int r;

        req.op_case = GSHARE__CTL__V1__REQUEST__OP_RELEASE_ALLOCATION;
        req.release_allocation = &rel;
        rel.claim_uid = c->uid;
        r = gs_ctl_call(d->o->cfg.agent_socket, &req, d->o->agent_timeout_ms, &rep);
        if (r < 0) {
                snprintf(err, errlen, "cannot reach the gshare agent at %.200s: %s", d->o->cfg.agent_socket,
                         strerror(-r));
                return r;
        }
        if (rep->error) {
                snprintf(err, errlen, "claim %s/%s: %s", c->namespace_, c->name, rep->message);
                r = rep->error;
        }
        gs_ctl_reply_free(rep);
        if (r < 0)
                return r;
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
        struct dra *d = ctx;
        struct unprep_reply *p;
        (void)call;

        if (req->n_claims > GS_DRA_MAX_CLAIMS) {
                snprintf(msg, msglen, "%zu claims in one call; at most %d", req->n_claims, GS_DRA_MAX_CLAIMS);
                return GRPC_STATUS_INVALID_ARGUMENT;
        }
        p = calloc(1, sizeof(*p));
        if (!p) {
                snprintf(msg, msglen, "out of memory");
                return GRPC_STATUS_RESOURCE_EXHAUSTED;
        }
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

/* ---- run ---- */

/* Sockets named <prefix>[-<uid>]<suffix> in dir that nothing serves any
 * more (an instance that died): removed, so that the kubelet does not keep
 * probing them.  Live ones (another instance's) are left alone. */
static void remove_stale(const char *dir, const char *prefix, const char *suffix)
{
        DIR *dh = opendir(dir);
        struct dirent *e;
        size_t pl = strlen(prefix), sl = strlen(suffix);

        if (!dh)
                return;
        while ((e = readdir(dh))) {
                size_t n = strlen(e->d_name);
                char path[PATH_MAX];
                struct sockaddr_un sa = { .sun_family = AF_UNIX };
                struct stat st;
                int fd;

                if (n < pl + sl || strncmp(e->d_name, prefix, pl) || strcmp(e->d_name + n - sl, suffix) ||
                    (n > pl + sl && e->d_name[pl] != '-'))
                        continue;
                if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(sa.sun_path) ||
                    lstat(path, &st) < 0 || !S_ISSOCK(st.st_mode))
                        continue;
                strcpy(sa.sun_path, path);
                /* Non-blocking: a live listener with a full backlog says
                 * EAGAIN and is left alone. */
                fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                if (fd < 0)
                        continue;
                if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno == ECONNREFUSED) {
                        log_info("removing %s: nothing serves it", path);
                        (void)unlink(path);
                }
                close(fd);
        }
        closedir(dh);
}

static int mkdirs(const char *path)
{
        char p[PATH_MAX];

        snprintf(p, sizeof(p), "%s", path);
        for (char *s = p + 1; *s; s++)
                if (*s == '/') {
                        *s = '\0';
                        if (mkdir(p, 0755) < 0 && errno != EEXIST)
                                return gs_neg_errno();
                        *s = '/';
                }
        return mkdir(p, 0750) < 0 && errno != EEXIST ? gs_neg_errno() : 0;
}

int gs_dra_run(const struct gs_dra_opts *o)
{
        static const struct gs_grpc_method dra_methods[] = {
                { "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
                  &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__descriptor, prepare,
                  free_plain, NULL },
                { "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources",
                  &k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__descriptor, unprepare,
                  free_plain, NULL },
                /* v1beta1 (kubelets 1.32, 1.33): the same messages but for
                 * Device.share_id, which such a kubelet skips as unknown. */
                { "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources",
                  &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__descriptor, prepare,
                  free_plain, NULL },
                { "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources",
                  &k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__descriptor, unprepare,
                  free_plain, NULL },
        };
        static const struct gs_grpc_method reg_methods[] = {
                { "/pluginregistration.Registration/GetInfo", &pluginregistration__info_request__descriptor, get_info,
                  free_plain, NULL },
                { "/pluginregistration.Registration/NotifyRegistrationStatus",
                  &pluginregistration__registration_status__descriptor, notify_status, free_plain, NULL },
        };
        struct gs_grpc_server *dsrv = NULL, *rsrv = NULL;
        struct dra *d = calloc(1, sizeof(*d));
        char err[512], vfile[PATH_MAX + 16];
        sigset_t mask;
        int r, sig;

        if (!d)
                return -ENOMEM;
        d->o = o;
        pthread_mutex_init(&d->mu, NULL);
        /* Seeded from the clock: a restarted plugin's pool is newer. */
        d->generation = (uint64_t)time(NULL);
        r = gs_kapi_init(&d->kapi, &o->cfg, "gshare-dra-plugin", err, sizeof(err));
        if (r < 0) {
                log_error("%s", err);
                goto out;
        }
        if (!d->kapi.base[0])
                log_warn("no API server (apiServer, KUBERNETES_SERVICE_HOST): no ResourceSlice, no claim can be prepared");
        snprintf(vfile, sizeof(vfile), "%s/version", o->nvidia_proc);
        gs_slice_driver_version(vfile, d->driver_version, sizeof(d->driver_version));
        /* Per pod with $POD_UID (the chart sets it): an upgrade's new pod
         * serves beside the old one, and the kubelet (1.33 and later) moves
         * to the newer registration without a gap, each instance removing
         * only its own sockets. */
        const char *uid = getenv("POD_UID");
        char sfx[80] = "";
        if (uid && *uid && strlen(uid) <= 64 && strspn(uid, "0123456789abcdef-") == strlen(uid))
                snprintf(sfx, sizeof(sfx), "-%s", uid);
        else if (uid && *uid)
                log_warn("POD_UID '%.64s' is not a pod UID: sockets without it (no rolling update beside another "
                         "instance)", uid);
        if (snprintf(d->endpoint, sizeof(d->endpoint), "%s/dra%s.sock", o->plugin_dir, sfx) >= (int)sizeof(d->endpoint) ||
            snprintf(d->reg_socket, sizeof(d->reg_socket), "%s/%s%s-reg.sock", o->registry_dir, o->driver, sfx) >=
                    (int)sizeof(d->reg_socket)) {
                log_error("socket paths too long");
                r = -ENAMETOOLONG;
                goto out;
        }
        if ((r = mkdirs(o->plugin_dir)) < 0 || (r = mkdirs(o->registry_dir)) < 0) {
                log_error("cannot create %s or %s: %s", o->plugin_dir, o->registry_dir, strerror(-r));
                goto out;
        }
        remove_stale(o->registry_dir, o->driver, "-reg.sock");
        remove_stale(o->plugin_dir, "dra", ".sock");
        r = pthread_create(&d->watcher, NULL, watcher_main, d);
        if (r) {
                log_error("cannot start a thread: %s", strerror(r));
                r = -r;
                goto out;
        }
        /* The plugin's socket first: the kubelet calls it as soon as it
         * sees the registration socket. */
        r = gs_grpc_server_start(d->endpoint, dra_methods, GS_ARRAY_SIZE(dra_methods), d, &dsrv);
        if (r == 0)
                r = gs_grpc_server_start(d->reg_socket, reg_methods, GS_ARRAY_SIZE(reg_methods), d, &rsrv);
        if (r < 0) {
                log_error("cannot serve %s / %s: %s", d->endpoint, d->reg_socket, strerror(-r));
        } else {
                log_info("driver %s, node %s, agent %s, CDI %s, serving %s, registration %s%s%s", o->driver, o->node,
                         o->cfg.agent_socket, o->cdi_dir, d->endpoint, d->reg_socket,
                         d->driver_version[0] ? ", NVIDIA driver " : "", d->driver_version);
                sigemptyset(&mask);
                sigaddset(&mask, SIGTERM);
                sigaddset(&mask, SIGINT);
                while (sigwait(&mask, &sig) != 0)
                        ;
                log_info("signal %d: stopping", sig);
        }
        /* Registration first, so the kubelet stops calling. */
        gs_grpc_server_stop(rsrv);
        (void)unlink(d->reg_socket);
        gs_grpc_server_stop(dsrv);
        (void)unlink(d->endpoint);
        atomic_store(&d->stop, true);
        pthread_join(d->watcher, NULL);
out:
        pthread_mutex_destroy(&d->mu);
        free(d);
        return r;
}
