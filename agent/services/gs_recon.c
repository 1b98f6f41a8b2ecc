/* gs_recon.c — see gs_recon.h.
 *
 * Threads: the reconciler's thread only calls the kubelet and builds
 * snapshots; it never touches the agent's structures.  The latest snapshot
 * waits in rc->pending (under rc->mu) until the main thread, woken by the
 * loop (an async source), takes it and applies it. */
#include "gs_recon.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <grpc/grpc.h>

#include "gs_allocs.h"
#include "gs_pending.h"
#include "gs_podburst.h"
#include "gs_proc_qos.h"
#include "gs_restore.h"
#include "gs_grpc.h"
#include "gs_log.h"
#include "podresources_v1.pb-c.h"

struct holder {
        char ns[64];
        char pod[254];
        char container[64];
        uint64_t burst;           /* the pod's annotation (gs_podburst.h); 0: none */
        struct gs_qos_policy qos; /* the pod's compute policy (gs_qos.h) */
        bool has_qos;             /* the API server answered for the pod */
};

struct held {
        const char *id; /* into ids_mem */
        uint32_t holder;
};

struct gs_recon_snapshot {
        bool ok; /* false: the List failed, err says why */
        char err[GS_GRPC_MSG_MAX + 128];
        struct held *held; /* sorted by id */
        size_t nheld;
        struct holder *holders;
        size_t nholders;
        char *ids_mem;
};

struct gs_recon {
        struct gs_agent *ag;
        char socket[PATH_MAX];
        char resource[256];
        uint32_t interval_ms, grace_ms;
        struct gs_loop_async snapshot_ready; /* the thread -> the main loop */
        pthread_t thread;
        bool thread_started;
        pthread_mutex_t mu;
        pthread_cond_t cv;                 /* CLOCK_MONOTONIC */
        bool stop, kick;                   /* under mu */
        struct gs_recon_snapshot *pending; /* under mu */
        struct gs_podburst *pb;            /* the thread's; NULL: no API server */
        bool burst_on;                     /* burstMax > 0: pods' bursts are applied */
        bool pb_failing;                   /* the thread's: the last lookup failed (said once) */
        int64_t pb_retry_ms;               /* the thread's: after a failed request, none before then */
        bool failing;                      /* main thread: in a streak of failed Lists */
};

/* ---- snapshots ---- */

void gs_recon_snapshot_free(struct gs_recon_snapshot *s)
{
        if (!s)
                return;
        free(s->held);
        free(s->holders);
        free(s->ids_mem);
        free(s);
}

static int cmp_held(const void *a, const void *b)
{
        return strcmp(((const struct held *)a)->id, ((const struct held *)b)->id);
}

static void copy_str(char *dst, size_t cap, const char *src)
{
        snprintf(dst, cap, "%s", src ? src : "");
}

struct counts {
        size_t ids, holders, bytes;
};

/* One pass over the reply: with s->held NULL it only counts (checking the
 * bound before anything is allocated from sizes the kubelet chose), else it
 * fills s, whose arrays are sized by the counting pass. */
static int walk(const V1__ListPodResourcesResponse *m, const char *resource, struct gs_recon_snapshot *s,
                struct counts *n, char *err, size_t errlen)
{
        for (size_t p = 0; p < m->n_pod_resources; p++) {
                const V1__PodResources *pr = m->pod_resources[p];
                for (size_t c = 0; c < pr->n_containers; c++) {
                        const V1__ContainerResources *cr = pr->containers[c];
                        bool ours = false;
                        /* The kubelet sends one ContainerDevices per NUMA node of
                         * a resource: the container holds their union. */
                        for (size_t d = 0; d < cr->n_devices; d++) {
                                const V1__ContainerDevices *cd = cr->devices[d];
                                if (!cd->resource_name || strcmp(cd->resource_name, resource) != 0)
                                        continue;
                                ours = true;
                                if (!s->held && cd->n_device_ids > GS_RECON_MAX_IDS - n->ids) {
                                        snprintf(err, errlen, "the reply lists more than %u device IDs of %s",
                                                 GS_RECON_MAX_IDS, resource);
                                        return -E2BIG;
                                }
                                for (size_t i = 0; i < cd->n_device_ids; i++) {
                                        size_t len = strlen(cd->device_ids[i]) + 1;
                                        if (s->held) {
                                                memcpy(s->ids_mem + n->bytes, cd->device_ids[i], len);
                                                s->held[n->ids].id = s->ids_mem + n->bytes;
                                                s->held[n->ids].holder = (uint32_t)n->holders;
                                        }
                                        n->ids++;
                                        n->bytes += len;
                                }
                        }
                        if (ours && s->held) {
                                struct holder *h = &s->holders[n->holders];
                                copy_str(h->ns, sizeof(h->ns), pr->namespace_);
                                copy_str(h->pod, sizeof(h->pod), pr->name);
                                copy_str(h->container, sizeof(h->container), cr->name);
                        }
                        n->holders += ours;
                }
        }
        return 0;
}

int gs_recon_snapshot_new(const ProtobufCMessage *list_reply, const char *resource, struct gs_recon_snapshot **ret,
                          char *err, size_t errlen)
{
        const V1__ListPodResourcesResponse *m = (const V1__ListPodResourcesResponse *)list_reply;
        struct gs_recon_snapshot *s = calloc(1, sizeof(*s));
        struct counts n = { 0 };
        int r = -ENOMEM;

        if (!s)
                goto fail;
        s->ok = true;
        r = walk(m, resource, s, &n, err, errlen);
        if (r < 0)
                goto fail;
        r = -ENOMEM;
        s->held = calloc(n.ids ? n.ids : 1, sizeof(*s->held));
        s->holders = calloc(n.holders ? n.holders : 1, sizeof(*s->holders));
        s->ids_mem = malloc(n.bytes ? n.bytes : 1);
        if (!s->held || !s->holders || !s->ids_mem)
                goto fail;
        s->nheld = n.ids;
        s->nholders = n.holders;
        n = (struct counts){ 0 };
        (void)walk(m, resource, s, &n, err, errlen);
        qsort(s->held, s->nheld, sizeof(*s->held), cmp_held);
        *ret = s;
        return 0;
fail:
        if (r == -ENOMEM)
                snprintf(err, errlen, "out of memory");
        gs_recon_snapshot_free(s);
        return r;
}

static const struct holder *holder_of(const struct gs_recon_snapshot *s, const char *id)
{
        struct held key = { .id = id };
        const struct held *h = bsearch(&key, s->held, s->nheld, sizeof(*s->held), cmp_held);

        return h ? &s->holders[h->holder] : NULL;
}

unsigned gs_recon_apply(struct gs_agent *ag, const struct gs_recon_snapshot *s, int64_t now_ms, uint64_t now_unix,
                        uint32_t grace_ms)
{
        struct gs_allocation *a, *next;
        unsigned released = 0;
        char err[PATH_MAX + 256];
        bool known;

        /* Unknown allocations (the checkpoint unreadable: gs_restore.h)
         * are missing information: any allocation may be a claim's, so
         * none is released; who holds what is still recorded.  The read
         * is logged once per streak and tried again at each pass. */
        known = gs_restore_known(&ag->node, err, sizeof(err)) == 0;
        if (!known)
                log_debug("reconciler: releasing nothing: %s", err);
        for (a = ag->node.allocs; a; a = next) {
                const struct holder *h = NULL;
                uint64_t age_ms;

                next = a->next; /* a may be deleted below */
                if (a->releasing)
                        continue;
                /* The owner decides.  A DRA claim's: PodResources shows no
                 * device IDs for it, and it goes by NodeUnprepareResources
                 * only.  One a kept (unparsable) checkpoint line names may
                 * be a claim's, garbled. */
                if (a->kind != GS_OWNER_DEVICES || gs_pending_kept_names(&ag->node, a->id))
                        continue;
                /* Held if any of its IDs is: a partial match is odd, but it
                 * means a pod still uses the memory, so never release it. */
                for (size_t i = 0; i < a->ndevice_ids && !h; i++)
                        h = holder_of(s, a->device_ids[i]);
                if (h) {
                        if (strcmp(a->pod_namespace, h->ns) || strcmp(a->pod_name, h->pod) ||
                            strcmp(a->container_name, h->container)) {
                                log_info("allocation %s belongs to pod %s/%s, container %s", a->id, h->ns, h->pod,
                                         h->container);
                                copy_str(a->pod_namespace, sizeof(a->pod_namespace), h->ns);
                                copy_str(a->pod_name, sizeof(a->pod_name), h->pod);
                                copy_str(a->container_name, sizeof(a->container_name), h->container);
                        }
                        a->unheld_since_ms = 0;
                        if (h->burst)
                                gs_allocs_burst_from_pod(&ag->node, a, h->burst);
                        if (h->has_qos)
                                gs_proc_qos_set(ag, a, &h->qos);
                        continue;
                }
                if (a->unheld_since_ms == 0) {
                        a->unheld_since_ms = now_ms;
                        log_debug("allocation %s: no pod holds its device IDs", a->id);
                }
                if (!known)
                        continue;
                age_ms = now_unix > a->created_unix ? (now_unix - a->created_unix) * 1000 : 0;
                if (now_ms - a->unheld_since_ms < (int64_t)grace_ms || age_ms < grace_ms)
                        continue;
                if (a->pod_name[0])
                        log_info(
                                "reclaiming allocation %s: pod %s/%s (container %s) has held none of its %zu device IDs for %lld ms",
                                a->id, a->pod_namespace, a->pod_name, a->container_name, a->ndevice_ids,
                                (long long)(now_ms - a->unheld_since_ms));
                else
                        log_info("reclaiming allocation %s: no pod has held any of its %zu device IDs (for %lld ms)",
                                 a->id, a->ndevice_ids, (long long)(now_ms - a->unheld_since_ms));
                if (gs_allocs_release(&ag->node, a, err, sizeof(err)) < 0) {
                        log_error("cannot release allocation %s: %s", a->id, err);
                        continue;
                }
                released++;
        }
        return released;
}

/* A signature of the set of draining allocations (gs_allocs_draining). */
static uint64_t draining_sig(struct gs_agent *ag)
{
        uint64_t sig = 0;

        for (struct gs_allocation *a = ag->node.allocs; a; a = a->next)
                if (gs_allocs_draining(a))
                        sig += strtoull(a->id, NULL, 16) | 1;
        return sig;
}

/* ---- the thread ---- */

/* The burst each holder's pod asks for (docs/burst.md).  A request that
 * fails (the API server down or refusing) leaves the pods without one and
 * stops the lookups for GS_RECON_PODBURST_RETRY_MS, so that an API server
 * that does not answer never holds up the List, and so the reclaim (said
 * once per streak of failures); bursts already applied stay.  A pod that is
 * gone (404) or whose value is bad concerns that pod alone. */
#define GS_RECON_PODBURST_RETRY_MS 30000
static void pod_bursts(struct gs_recon *rc, struct gs_recon_snapshot *s)
{
        char err[256];

        if (!rc->pb || gs_mono_ms() < rc->pb_retry_ms)
                return;
        for (size_t i = 0; i < s->nholders; i++) {
                struct holder *h = &s->holders[i];
                struct gs_podinfo info;
                int r = gs_podburst_pod(rc->pb, h->ns, h->pod, &info, err, sizeof(err));

                h->burst = rc->burst_on ? info.burst : 0;
                h->qos = info.qos;
                h->has_qos = r == 0 || r == -EINVAL;
                if (info.qos_err[0])
                        log_warn("reconciler: pod %s/%s: %s", h->ns, h->pod, info.qos_err);
                if (!rc->burst_on && r == -EINVAL)
                        r = 0;
                if (r == -EINVAL || (r < 0 && !rc->pb_failing))
                        log_warn("reconciler: the burst annotation of pod %s/%s: %s%s", h->ns, h->pod, err,
                                 r == -EINVAL ? "" : "; pods' annotations not read for 30 s");
                if (r == -EINVAL || r == -ENOENT)
                        continue;
                rc->pb_failing = r < 0;
                if (r < 0) {
                        rc->pb_retry_ms = gs_mono_ms() + GS_RECON_PODBURST_RETRY_MS;
                        return;
                }
        }
}

static struct gs_recon_snapshot *list_once(struct gs_recon *rc)
{
        V1__ListPodResourcesRequest req = V1__LIST_POD_RESOURCES_REQUEST__INIT;
        ProtobufCMessage *reply = NULL;
        struct gs_recon_snapshot *s = NULL;
        char msg[GS_GRPC_MSG_MAX];
        int r;

        r = gs_grpc_unary_call(rc->socket, "/v1.PodResourcesLister/List", &req.base,
                               &v1__list_pod_resources_response__descriptor, GS_RECON_LIST_TIMEOUT_MS, &reply, NULL,
                               msg, sizeof(msg));
        if (r == 0) {
                r = gs_recon_snapshot_new(reply, rc->resource, &s, msg, sizeof(msg));
                protobuf_c_message_free_unpacked(reply, NULL);
                if (r == 0) {
                        pod_bursts(rc, s);
                        return s;
                }
        }
        s = calloc(1, sizeof(*s));
        if (s)
                snprintf(s->err, sizeof(s->err), "%s (%s)", msg[0] ? msg : "no answer", strerror(-r));
        return s;
}

static void *thread_main(void *arg)
{
        struct gs_recon *rc = arg;

        /* One gRPC reference for the thread's life: each call's own
         * init/shutdown pair then nests inside it (no restart of the
         * library every interval), and the blocking shutdown at the end
         * joins gRPC's internal threads before the agent exits. */
        grpc_init();
        pthread_mutex_lock(&rc->mu);
        while (!rc->stop) {
                struct gs_recon_snapshot *s;
                struct timespec dl;

                rc->kick = false;
                pthread_mutex_unlock(&rc->mu);
                int64_t t0 = gs_mono_ns(); /* /metrics: gshare_reconcile_duration_seconds */
                s = list_once(rc);
                gs_hist_since(&rc->ag->node.hists.reconcile[GS_HIST_RECON_LIST], t0);
                pthread_mutex_lock(&rc->mu);
                if (s) {
                        gs_recon_snapshot_free(rc->pending);
                        rc->pending = s;
                        gs_loop_async_send(rc->ag->node.loop, &rc->snapshot_ready);
                }
                clock_gettime(CLOCK_MONOTONIC, &dl);
                dl.tv_sec += rc->interval_ms / 1000;
                dl.tv_nsec += (long)(rc->interval_ms % 1000) * 1000000L;
                if (dl.tv_nsec >= 1000000000L) {
                        dl.tv_sec++;
                        dl.tv_nsec -= 1000000000L;
                }
                while (!rc->stop && !rc->kick)
                        if (pthread_cond_timedwait(&rc->cv, &rc->mu, &dl) == ETIMEDOUT)
                                break;
        }
        pthread_mutex_unlock(&rc->mu);
        grpc_shutdown_blocking();
        return NULL;
}

/* ---- main thread ---- */

static void on_snapshot(void *data)
{
        struct gs_recon *rc = data;
        struct gs_recon_snapshot *s;
        unsigned n;
        uint64_t before;

        pthread_mutex_lock(&rc->mu);
        s = rc->pending;
        rc->pending = NULL;
        pthread_mutex_unlock(&rc->mu);
        if (!s)
                return;
        if (!s->ok) {
                if (!rc->failing)
                        log_warn("reconciler: PodResources List on %s failed: %s; reclaiming nothing until it answers",
                                 rc->socket, s->err);
                rc->failing = true;
                gs_recon_snapshot_free(s);
                return;
        }
        if (rc->failing)
                log_info("reconciler: PodResources on %s answers again", rc->socket);
        rc->failing = false;
        int64_t t0 = gs_mono_ns(); /* /metrics: gshare_reconcile_duration_seconds */
        before = draining_sig(rc->ag);
        n = gs_recon_apply(rc->ag, s, gs_mono_ms(), (uint64_t)time(NULL), rc->grace_ms);
        gs_hist_since(&rc->ag->node.hists.reconcile[GS_HIST_RECON_APPLY], t0);
        gs_recon_snapshot_free(s);
        /* Released allocations, or pods gone while their processes live on
         * (their units now draining): the plugin must hear of it. */
        if (n || draining_sig(rc->ag) != before)
                gs_agent_changed(rc->ag);
}

void gs_recon_kick(struct gs_recon *rc)
{
        if (!rc)
                return;
        pthread_mutex_lock(&rc->mu);
        rc->kick = true;
        pthread_cond_signal(&rc->cv);
        pthread_mutex_unlock(&rc->mu);
}

int gs_recon_start(struct gs_agent *ag, struct gs_recon **ret)
{
        const struct gs_config *c = &ag->node.cfg;
        struct gs_recon *rc;
        pthread_condattr_t ca;
        int r;

        *ret = NULL;
        if (c->reconcile_interval_ms == 0) {
                log_info("reconciler off (reconcileInterval 0): allocations are released only by gsharectl release");
                return 0;
        }
        rc = calloc(1, sizeof(*rc));
        if (!rc)
                return -ENOMEM;
        rc->ag = ag;
        snprintf(rc->socket, sizeof(rc->socket), "%s", c->pod_resources_socket);
        snprintf(rc->resource, sizeof(rc->resource), "%s", c->resource_name);
        rc->interval_ms = c->reconcile_interval_ms;
        rc->grace_ms = c->reclaim_grace_ms;
        /* Pods' bursts apply only where a burst may be granted; their
         * compute policies (docs/compute.md) wherever an API server is. */
        rc->burst_on = c->burst_max_bytes > 0;
        {
                char err[256];
                if (gs_podburst_new(c, &rc->pb, err, sizeof(err)) < 0)
                        log_warn("reconciler: pods' annotations not read: %s", err);
        }
        pthread_mutex_init(&rc->mu, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&rc->cv, &ca);
        pthread_condattr_destroy(&ca);
        gs_loop_async_add(ag->node.loop, &rc->snapshot_ready, on_snapshot, rc);
        r = -pthread_create(&rc->thread, NULL, thread_main, rc);
        if (r < 0)
                goto fail;
        rc->thread_started = true;
        log_info("reconciler: PodResources %s every %u ms, reclaim grace %u ms", rc->socket, rc->interval_ms,
                 rc->grace_ms);
        *ret = rc;
        return 0;
fail:
        gs_recon_stop(rc);
        return r;
}

void gs_recon_stop(struct gs_recon *rc)
{
        if (!rc)
                return;
        if (rc->thread_started) {
                pthread_mutex_lock(&rc->mu);
                rc->stop = true;
                pthread_cond_signal(&rc->cv);
                pthread_mutex_unlock(&rc->mu);
                pthread_join(rc->thread, NULL);
        }
        gs_loop_async_del(rc->ag->node.loop, &rc->snapshot_ready);
        gs_recon_snapshot_free(rc->pending);
        gs_podburst_free(rc->pb);
        pthread_cond_destroy(&rc->cv);
        pthread_mutex_destroy(&rc->mu);
        free(rc);
}
