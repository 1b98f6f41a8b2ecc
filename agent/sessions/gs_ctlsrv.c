/* gs_ctlsrv.c — see gs_ctlsrv.h. */
#include "gs_ctlsrv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "gs_allocs.h"
#include "gs_arena.h"
#include "gs_qos.h"
#include "gs_devid.h"
#include "gs_ctl.h"
#include "gs_gpu.h"
#include "gs_log.h"
#include "gs_pending.h"
#include "gs_restore.h"
#include "gs_proc.h"
#include "gs_proc_qosrep.h"
#include "gs_sock.h"
#include "gs_short.h"
#include "gs_stream.h"

struct gs_ctlsrv {
        struct gs_agent *ag;
        struct gs_stream_srv *srv;
        char path[PATH_MAX];
};

/* ---- reply building: every piece from one arena, freed after packing ---- */

#define NEW(a, type, init)                                  \
        ({                                                  \
                type *m_ = gs_arena_alloc(a, sizeof(type)); \
                if (m_)                                     \
                        *m_ = (type)init;                   \
                m_;                                         \
        })

static Gshare__Ctl__V1__Gpu *gpu_msg(struct gs_arena *ar, struct gs_gpu *g)
{
        Gshare__Ctl__V1__Gpu *m = NEW(ar, Gshare__Ctl__V1__Gpu, GSHARE__CTL__V1__GPU__INIT);
        struct gs_pool_stats st = { 0 };

        if (!m)
                return NULL;
        if (g->pool) {
                gs_gpu_lock(g);
                gs_pool_stats(g->pool, &st);
                m->chunks_spilled = gs_gpu_spilled(g);
                m->chunks_owed = gs_pool_owed(g->pool);
                m->chunks_moving = g->moves.moving_out + g->moves.moving_back;
                m->chunks_moved_out = g->moves.st.chunks_out;
                m->chunks_moved_back = g->moves.st.chunks_back;
                gs_gpu_unlock(g);
        }
        m->index = g->index;
        m->uuid = gs_arena_str(ar, g->uuid);
        m->name = gs_arena_str(ar, g->name);
        m->numa_node = g->numa_node;
        m->total_bytes = g->total_bytes;
        m->reserve_bytes = g->reserve_bytes;
        m->chunk_bytes = g->chunk_bytes;
        m->chunks_total = st.nchunks;
        m->chunks_free = st.chunks_free;
        m->unit_bytes = g->unit_bytes;
        m->units_total = g->units_total;
        m->units_allocated = gs_gpu_units_allocated(g);
        m->units_lent = gs_gpu_units_lent(g);
        m->healthy = g->healthy;
        m->pci_bus_id = gs_arena_str(ar, g->pci_bus_id);
        m->health_reason = gs_arena_str(ar, g->healthy ? "" : g->health_reason);
        for (uint32_t u = 0; u < g->units_total; u++)
                if (g->unit_owner && g->unit_owner[u] && gs_allocs_draining(g->unit_owner[u]))
                        m->n_units_draining++;
        if (m->n_units_draining) {
                size_t k = 0;
                m->units_draining = gs_arena_alloc(ar, m->n_units_draining * sizeof(uint32_t));
                if (!m->units_draining) {
                        m->n_units_draining = 0;
                        return m;
                }
                for (uint32_t u = 0; u < g->units_total; u++)
                        if (g->unit_owner && g->unit_owner[u] && gs_allocs_draining(g->unit_owner[u]))
                                m->units_draining[k++] = u;
        }
        if (g->units_total && g->node->pending) {
                m->units_restoring = gs_arena_alloc(ar, g->units_total * sizeof(*m->units_restoring));
                if (!m->units_restoring)
                        return NULL;
                m->n_units_restoring = gs_pending_units(g->node, g, m->units_restoring, g->units_total);
        }
        return m;
}

static Gshare__Ctl__V1__ListGpusReply *gpus_msg(struct gs_arena *ar, struct gs_agent *ag)
{
        Gshare__Ctl__V1__ListGpusReply *m =
                NEW(ar, Gshare__Ctl__V1__ListGpusReply, GSHARE__CTL__V1__LIST_GPUS_REPLY__INIT);

        if (!m)
                return NULL;
        m->gpus = gs_arena_alloc(ar, ag->node.ngpus * sizeof(*m->gpus));
        if (!m->gpus)
                return NULL;
        for (uint32_t i = 0; i < ag->node.ngpus; i++)
                if (!(m->gpus[m->n_gpus++] = gpu_msg(ar, &ag->node.gpus[i])))
                        return NULL;
        m->generation = ag->generation;
        return m;
}

/* The claim fields of m, for a DRA claim's allocation.  false: out of memory. */
static bool alloc_msg_claim(struct gs_arena *ar, struct gs_allocation *a, Gshare__Ctl__V1__Allocation *m)
{
        const struct gs_claim *c = gs_allocs_claim(a);

        if (!c)
                return true;
        m->claim_uid = gs_arena_str(ar, c->uid);
        m->claim_namespace = gs_arena_str(ar, c->ns);
        m->claim_name = gs_arena_str(ar, c->name);
        return m->claim_uid && m->claim_namespace && m->claim_name;
}

/* The device IDs of m: a device plugin's own, or, for a claim's, those of
 * its units (the device plugin's mirror takes them as taken). */
static bool alloc_msg_ids(struct gs_arena *ar, struct gs_allocation *a, Gshare__Ctl__V1__Allocation *m)
{
        size_t n = a->kind == GS_OWNER_DEVICES ? a->ndevice_ids : a->nunits;

        m->device_ids = gs_arena_alloc(ar, n * sizeof(char *));
        if (!m->device_ids)
                return false;
        for (size_t i = 0; i < n; i++) {
                char id[GS_DEVID_MAX + 1];
                if (a->kind != GS_OWNER_DEVICES &&
                    gs_devid_format(id, sizeof(id), a->node->gpus[a->units[i].gpu].uuid, a->units[i].unit) < 0)
                        continue;
                m->device_ids[m->n_device_ids++] =
                        gs_arena_str(ar, a->kind == GS_OWNER_DEVICES ? a->device_ids[i] : id);
        }
        return true;
}

static Gshare__Ctl__V1__Allocation *alloc_msg(struct gs_arena *ar, struct gs_allocation *a)
{
        struct gs_agent *ag = gs_agent_of(a->node);
        Gshare__Ctl__V1__Allocation *m = NEW(ar, Gshare__Ctl__V1__Allocation, GSHARE__CTL__V1__ALLOCATION__INIT);
        size_t nproc = 0;

        if (!m)
                return NULL;
        m->id = gs_arena_str(ar, a->id);
        m->parts = gs_arena_alloc(ar, a->nparts * sizeof(*m->parts));
        m->processes = gs_arena_alloc(ar, (size_t)a->nprocs * a->nparts * sizeof(*m->processes) + 1);
        if (!m->parts || !m->processes || !alloc_msg_ids(ar, a, m))
                return NULL;
        for (uint32_t i = 0; i < a->nparts; i++) {
                struct gs_gpu *g = &ag->node.gpus[a->parts[i].gpu];
                struct gs_palloc_stats st;
                Gshare__Ctl__V1__AllocationPart *pm =
                        NEW(ar, Gshare__Ctl__V1__AllocationPart, GSHARE__CTL__V1__ALLOCATION_PART__INIT);
                if (!pm)
                        return NULL;
                gs_gpu_lock(g);
                gs_palloc_stats(a->parts[i].pa, &st);
                pm->outside_bytes = a->parts[i].out.charged;
                gs_gpu_unlock(g);
                pm->used_bytes = (uint64_t)st.chunks_held * g->chunk_bytes;
                pm->gpu_index = g->index;
                pm->gpu_uuid = gs_arena_str(ar, g->uuid);
                pm->units = a->parts[i].units;
                pm->quota_bytes = (uint64_t)a->parts[i].quota_chunks * g->chunk_bytes;
                pm->bytes_requested = st.bytes_requested;
                pm->bytes_in_chunks = ((uint64_t)st.chunks_free + st.chunks_held) * g->chunk_bytes;
                pm->chunks_quota = st.quota_chunks;
                pm->chunks_free = st.chunks_free;
                pm->chunks_borrowed = st.chunks_borrowed;
                pm->chunks_spilled = st.chunks_spilled;
                pm->chunks_owed = st.chunks_owed;
                pm->burst_bytes = (uint64_t)gs_part_burst(&a->parts[i]) * g->chunk_bytes;
                m->parts[m->n_parts++] = pm;
        }
        for (struct gs_proc *p = a->procs; p; p = p->next) {
                if (p->state == GS_PROC_HELLO)
                        continue;
                for (uint32_t i = 0; i < p->ngpus && nproc < (size_t)a->nprocs * a->nparts; i++) {
                        struct gs_pproc_stats st;
                        Gshare__Ctl__V1__Process *pm =
                                NEW(ar, Gshare__Ctl__V1__Process, GSHARE__CTL__V1__PROCESS__INIT);
                        if (!pm)
                                return NULL;
                        gs_gpu_lock(p->gpus[i].g);
                        gs_pproc_stats(p->gpus[i].pp, &st);
                        gs_vmm_stats(&p->gpus[i].vmm, &st);
                        pm->outside_bytes = p->gpus[i].outside_charge;
                        gs_gpu_unlock(p->gpus[i].g);
                        pm->id = p->id;
                        pm->pid = p->pid;
                        pm->comm = gs_arena_str(ar, p->comm);
                        pm->gpu_index = p->gpus[i].g->index;
                        pm->bytes_requested = st.bytes_requested;
                        pm->bytes_in_blocks = st.bytes_in_blocks;
                        pm->chunks_held = st.chunks_held;
                        pm->compute_duty_percent = i == 0 ? p->share_told : 0;
                        m->processes[nproc++] = pm;
                }
        }
        m->n_processes = nproc;
        m->socket_dir = gs_arena_str(ar, a->socket_dir);
        m->created_unix = a->created_unix;
        if (a->pod_name[0]) {
                m->pod_namespace = gs_arena_str(ar, a->pod_namespace);
                m->pod_name = gs_arena_str(ar, a->pod_name);
                m->container_name = gs_arena_str(ar, a->container_name);
        }
        m->compute_class = gs_arena_str(ar, gs_qos_class_name(a->qos.cls));
        m->compute_cap = a->qos.cap;
        m->compute_weight = gs_qos_weight_of(&a->qos);
        m->compute_held_launches = gs_proc_qos_report(a, GS_QR_HELD);
        m->compute_held_ns = gs_proc_qos_report(a, GS_QR_HELD_NS);
        m->compute_gpu_ns = gs_proc_qos_report(a, GS_QR_GPU_NS);
        if (!alloc_msg_claim(ar, a, m))
                return NULL;
        return m;
}

/* ---- request handlers ---- */

/* CreateAllocation, and its old form CreateClaimAllocation (c NULL, cc
 * set): one request, parsed here, to gs_restore_create. */
static void do_create(struct gs_ctlsrv *s, struct gs_arena *ar, const Gshare__Ctl__V1__CreateAllocationRequest *c,
                      const Gshare__Ctl__V1__ClaimOwner *cc, GsCtlReply *rep, char *err, size_t errlen)
{
        Gshare__Ctl__V1__CreateAllocationReply *m;
        struct gs_alloc_req req = { .kind = GS_OWNER_DEVICES };
        struct gs_allocation *a;
        bool created = false;
        int r = 0;

        if (c && c->owner_case == GSHARE__CTL__V1__CREATE_ALLOCATION_REQUEST__OWNER_CLAIM)
                cc = c->claim;
        if (cc) {
                const char *f[] = { cc->uid, cc->namespace_, cc->name, cc->gpu_uuid };
                req.kind = GS_OWNER_CLAIM;
                if (strlen(f[0]) > GS_CLAIM_UID_MAX || strlen(f[1]) > GS_CLAIM_NS_MAX ||
                    strlen(f[2]) > GS_CLAIM_NAME_MAX || strlen(f[3]) > GS_UUID_STR_LEN) {
                        snprintf(err, errlen, "claim '%.40s' (%.64s/%.64s): not a claim UID, namespace and name", f[0],
                                 f[1], f[2]);
                        r = -EINVAL;
                }
                snprintf(req.claim.uid, sizeof(req.claim.uid), "%s", f[0]);
                snprintf(req.claim.ns, sizeof(req.claim.ns), "%s", f[1]);
                snprintf(req.claim.name, sizeof(req.claim.name), "%s", f[2]);
                snprintf(req.claim.gpu_uuid, sizeof(req.claim.gpu_uuid), "%s", f[3]);
                req.claim.units = cc->units;
                if (r == 0 && c && (c->n_device_ids || c->take_over)) {
                        snprintf(err, errlen, "a claim's allocation takes no device IDs nor take_over");
                        r = -EINVAL;
                }
        } else if (c->owner_case == GSHARE__CTL__V1__CREATE_ALLOCATION_REQUEST__OWNER_DEVICES) {
                req.ids = (const char *const *)c->devices->device_ids;
                req.nids = c->devices->n_device_ids;
                if (c->n_device_ids) {
                        snprintf(err, errlen, "device IDs given twice: in device_ids and in the owner devices");
                        r = -EINVAL;
                }
        } else {
                req.ids = (const char *const *)c->device_ids;
                req.nids = c->n_device_ids;
        }
        if (c)
                req.burst_bytes = c->burst_bytes;
        if (r == 0 && c &&
            ((c->compute_class[0] && gs_qos_class_parse(c->compute_class, &req.qos.cls) < 0) || c->compute_cap > 100 ||
             c->compute_weight > GS_QOS_WEIGHT_MAX)) {
                snprintf(err, errlen,
                         "compute class '%.40s', cap %u or weight %u: a class is latency-critical, standard or "
                         "best-effort, a cap 1 to 100, a weight 1 to %u",
                         c->compute_class, c->compute_cap, c->compute_weight, GS_QOS_WEIGHT_MAX);
                r = -EINVAL;
        }
        if (c) {
                req.qos.cap = (uint8_t)(c->compute_cap <= 100 ? c->compute_cap : 0);
                req.qos.weight = (uint8_t)(c->compute_weight <= GS_QOS_WEIGHT_MAX ? c->compute_weight : 0);
        }
        if (r == 0 && c && c->take_over && req.kind == GS_OWNER_DEVICES)
                r = gs_allocs_take_over(&s->ag->node, req.ids, req.nids, err, errlen);
        if (r == 0)
                r = gs_restore_create(&s->ag->node, &req, &a, &created, err, errlen);
        if (r == -ENOSPC)
                /* Chunks lent to allocations that borrow past their quota
                 * (docs/burst.md, named in err): what their processes
                 * hold without a live block comes back for the retry. */
                (void)gs_short_ask_borrowers(s->ag);
        if (r < 0) {
                rep->error = r;
                return;
        }
        if (created) {
                if (cc)
                        log_info("allocation %s created for claim %s (%s/%s): %u units of GPU %s, socket %s", a->id,
                                 a->claim.uid, a->claim.ns, a->claim.name, a->claim.units, a->claim.gpu_uuid,
                                 a->socket_path);
                else
                        log_info("allocation %s created: %zu units, socket %s", a->id, a->nunits, a->socket_path);
                gs_agent_changed(s->ag);
        }
        m = NEW(ar, Gshare__Ctl__V1__CreateAllocationReply, GSHARE__CTL__V1__CREATE_ALLOCATION_REPLY__INIT);
        if (!m || !(m->allocation = alloc_msg(ar, a)))
                return;
        m->created = created;
        rep->body_case = GSHARE__CTL__V1__REPLY__BODY_CREATE_ALLOCATION;
        rep->create_allocation = m;
}

static void do_release(struct gs_ctlsrv *s, struct gs_arena *ar, const GsCtlRequest *req, GsCtlReply *rep, char *err,
                       size_t errlen)
{
        const Gshare__Ctl__V1__ReleaseAllocationRequest *c = req->release_allocation;
        struct gs_allocation *a = NULL;
        int r;

        if (c->claim_uid && c->claim_uid[0]) {
                r = gs_restore_release_claim(&s->ag->node, c->claim_uid, err, errlen);
                goto done;
        }
        if (c->id && c->id[0])
                a = gs_allocs_find(&s->ag->node, c->id);
        else if (c->n_device_ids)
                a = gs_allocs_find_ids(&s->ag->node, (const char *const *)c->device_ids, c->n_device_ids);
        if ((r = gs_restore_known(&s->ag->node, err, errlen)) < 0)
                goto done;
        if (!a || a->releasing) {
                /* Perhaps a checkpoint line waiting to be restored. */
                r = gs_restore_release_pending(&s->ag->node, c->id, (const char *const *)c->device_ids, c->n_device_ids,
                                               NULL, err, errlen);
                if (r == -ENOENT)
                        snprintf(err, errlen, "no allocation %s%.64s", c->id && c->id[0] ? "" : "for these device IDs",
                                 c->id ? c->id : "");
        } else {
                r = gs_allocs_release(&s->ag->node, a, err, errlen);
        }
done:
        if (r < 0) {
                rep->error = r;
                return;
        }
        gs_agent_changed(s->ag);
        rep->body_case = GSHARE__CTL__V1__REPLY__BODY_RELEASE_ALLOCATION;
        rep->release_allocation =
                NEW(ar, Gshare__Ctl__V1__ReleaseAllocationReply, GSHARE__CTL__V1__RELEASE_ALLOCATION_REPLY__INIT);
}

static void do_list_allocs(struct gs_ctlsrv *s, struct gs_arena *ar, GsCtlReply *rep)
{
        Gshare__Ctl__V1__ListAllocationsReply *m =
                NEW(ar, Gshare__Ctl__V1__ListAllocationsReply, GSHARE__CTL__V1__LIST_ALLOCATIONS_REPLY__INIT);

        if (!m || !(m->allocations = gs_arena_alloc(ar, s->ag->node.nallocs * sizeof(*m->allocations))))
                return;
        for (struct gs_allocation *a = s->ag->node.allocs; a; a = a->next)
                if (m->n_allocations < s->ag->node.nallocs && !(m->allocations[m->n_allocations++] = alloc_msg(ar, a)))
                        return;
        rep->body_case = GSHARE__CTL__V1__REPLY__BODY_LIST_ALLOCATIONS;
        rep->list_allocations = m;
}

/* ---- the protocol over gs_stream ---- */

/* gs_stream_data of a client that asked for Watch. */
static char watching_tag;

static bool watching(const struct gs_stream *c)
{
        return gs_stream_data(c) == &watching_tag;
}

/* Queues one framed message.  Returns 0, -EMSGSIZE, or -ENOBUFS (the queue
 * limit: the client is not reading). */
static int queue_msg(struct gs_stream *c, const ProtobufCMessage *msg)
{
        size_t size;
        uint8_t *p;
        int r = gs_ctl_frame_size(msg, &size);

        if (r < 0)
                return r;
        p = gs_stream_reserve(c, size);
        if (!p)
                return -ENOBUFS;
        gs_ctl_frame_pack(msg, p, size);
        return 0;
}

static void reply_error(struct gs_stream *c, int err, const char *msg)
{
        GsCtlReply rep = GSHARE__CTL__V1__REPLY__INIT;

        rep.error = err;
        rep.message = (char *)msg;
        (void)queue_msg(c, &rep.base);
        gs_stream_end(c);
}

static void handle(struct gs_ctlsrv *s, struct gs_stream *c, const uint8_t *buf, size_t len)
{
        GsCtlReply rep = GSHARE__CTL__V1__REPLY__INIT;
        struct gs_arena ar = { 0 };
        char err[512] = "";
        GsCtlRequest *req;

        req = gshare__ctl__v1__request__unpack(NULL, len, buf);
        if (!req) {
                reply_error(c, -EBADMSG, "malformed request: not a gshare.ctl.v1.Request");
                return;
        }
        switch (req->op_case) {
        case GSHARE__CTL__V1__REQUEST__OP_CREATE_ALLOCATION:
                do_create(s, &ar, req->create_allocation, NULL, &rep, err, sizeof(err));
                break;
        case GSHARE__CTL__V1__REQUEST__OP_RELEASE_ALLOCATION: do_release(s, &ar, req, &rep, err, sizeof(err)); break;
        case GSHARE__CTL__V1__REQUEST__OP_CREATE_CLAIM_ALLOCATION: {
                /* The old form: the same request, owner claim. */
                const Gshare__Ctl__V1__CreateClaimAllocationRequest *o = req->create_claim_allocation;
                Gshare__Ctl__V1__ClaimOwner cc = GSHARE__CTL__V1__CLAIM_OWNER__INIT;
                cc.uid = o->claim_uid;
                cc.gpu_uuid = o->gpu_uuid;
                cc.units = o->units;
                cc.namespace_ = o->claim_namespace;
                cc.name = o->claim_name;
                do_create(s, &ar, NULL, &cc, &rep, err, sizeof(err));
                break;
        }
        case GSHARE__CTL__V1__REQUEST__OP_LIST_GPUS:
                rep.list_gpus = gpus_msg(&ar, s->ag);
                rep.body_case = GSHARE__CTL__V1__REPLY__BODY_LIST_GPUS;
                break;
        case GSHARE__CTL__V1__REQUEST__OP_LIST_ALLOCATIONS: do_list_allocs(s, &ar, &rep); break;
        case GSHARE__CTL__V1__REQUEST__OP_WATCH:
                rep.list_gpus = gpus_msg(&ar, s->ag);
                rep.body_case = GSHARE__CTL__V1__REPLY__BODY_LIST_GPUS;
                gs_stream_set_data(c, &watching_tag);
                break;
        default:
                rep.error = -EOPNOTSUPP;
                snprintf(err, sizeof(err), "unknown request (op %d)", (int)req->op_case);
                break;
        }
        if (ar.failed) {
                rep = (GsCtlReply)GSHARE__CTL__V1__REPLY__INIT;
                rep.error = -ENOMEM;
                snprintf(err, sizeof(err), "agent out of memory building the reply");
        } else if (rep.error == 0 && rep.body_case == GSHARE__CTL__V1__REPLY__BODY__NOT_SET) {
                rep.error = -EIO;
                snprintf(err, sizeof(err), "internal error");
        }
        rep.message = err;
        if (rep.error)
                rep.body_case = GSHARE__CTL__V1__REPLY__BODY__NOT_SET;
        if (queue_msg(c, &rep.base) < 0)
                gs_stream_end(c);
        gs_arena_free(&ar);
        gshare__ctl__v1__request__free_unpacked(req, NULL);
}

static int on_data(void *ctx, struct gs_stream *c)
{
        struct gs_ctlsrv *s = ctx;
        const uint8_t *in;
        size_t have;

        /* Serve every whole frame received. */
        while (!gs_stream_ended(c) && (in = gs_stream_input(c, &have), have >= GS_CTL_HDR)) {
                uint32_t len;

                if (gs_ctl_frame_len(in, &len) < 0) {
                        reply_error(c, -EMSGSIZE, "frame length out of range");
                        break;
                }
                if (have < GS_CTL_HDR + (size_t)len)
                        break;
                if (watching(c)) {
                        /* A watch stream takes no more requests. */
                        reply_error(c, -EINVAL, "no requests after watch");
                        break;
                }
                handle(s, c, in + GS_CTL_HDR, len);
                gs_stream_consume(c, GS_CTL_HDR + (size_t)len);
        }
        return 0;
}

static const struct gs_stream_ops ctl_ops = { .on_data = on_data };

void gs_ctlsrv_broadcast(struct gs_ctlsrv *s)
{
        GsCtlReply rep = GSHARE__CTL__V1__REPLY__INIT;
        struct gs_arena ar = { 0 };
        struct gs_stream *c, *nx;

        if (!s)
                return;
        for (c = gs_stream_first(s->srv); c && !watching(c); c = gs_stream_next(c))
                ;
        if (!c)
                return;
        rep.list_gpus = gpus_msg(&ar, s->ag);
        rep.body_case = GSHARE__CTL__V1__REPLY__BODY_LIST_GPUS;
        if (!ar.failed) {
                for (c = gs_stream_first(s->srv); c; c = nx) {
                        nx = gs_stream_next(c);
                        if (!watching(c) || gs_stream_ended(c))
                                continue;
                        if (queue_msg(c, &rep.base) < 0) {
                                log_warn("control socket: a watcher is not reading; dropped");
                                gs_stream_close(c);
                        } else {
                                (void)gs_stream_flush(c);
                        }
                }
        }
        gs_arena_free(&ar);
}

int gs_ctlsrv_new(struct gs_agent *ag, const char *path, struct gs_ctlsrv **ret, char *err, size_t errlen)
{
        static const struct gs_stream_limits lim = {
                .max_conns = GS_CTLSRV_MAX_CLIENTS,
                .in_max = GS_CTL_MAX_MSG + GS_CTL_HDR,
                .out_max = GS_CTLSRV_MAX_QUEUED,
                .linger_ms = GS_CTLSRV_LINGER_MS,
        };
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct gs_ctlsrv *s;
        int fd, r;

        if (strlen(path) >= sizeof(sa.sun_path)) {
                snprintf(err, errlen, "control socket path %s is too long", path);
                return -ENAMETOOLONG;
        }
        s = calloc(1, sizeof(*s));
        if (!s) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        s->ag = ag;
        snprintf(s->path, sizeof(s->path), "%s", path);
        (void)unlink(path);
        /* Born 0600: no window in which others could connect. */
        fd = r = gs_sock_listen(path, SOCK_STREAM, 0600, 64);
        if (r < 0)
                goto fail;
        r = gs_stream_srv_new(ag->node.loop, fd, "control socket", &lim, &ctl_ops, s, &s->srv);
        if (r < 0)
                goto fail;
        *ret = s;
        return 0;
fail:
        snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(-r));
        free(s);
        return r;
}

void gs_ctlsrv_free(struct gs_ctlsrv *s)
{
        if (!s)
                return;
        gs_stream_srv_free(s->srv);
        if (gs_node_paths_ours(&s->ag->node)) /* else the path is the other agent's socket */
                (void)unlink(s->path);
        free(s);
}
