/* gs_serve.c — see gs_serve.h. */
#include "gs_serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "gs_allocs.h"
#include "gs_gpu.h"
#include "gs_ipc.h"
#include "gs_log.h"
#include "gs_logrep.h"
#include "gs_proc_qos.h"
#include "gs_ring.h"
#include "gs_serve_spill.h"
#include "gs_short.h"
#include "gs_sockmsg.h"

/* Under the GPU's lock: while the allocation's memory outside the pool is
 * not covered (gs_outside.h), what it has free goes there first. */
static void cover(struct gs_proc *p, uint32_t i)
{
        gs_gpu_assert_locked(p->gpus[i].g);
        struct gs_part *part = &p->alloc->parts[i];

        if (part->out.short_bytes)
                gs_outside_cover(p->gpus[i].g, &part->out, part->pa, gs_allocs_outside_slots(&p->agent->node, part));
}

static int serve_alloc(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req,
                       struct gs_ring_msg *rep)
{
        struct gs_gpu *g = pg->g;
        uint64_t size = req->arg[0], off = 0, limit;
        uint32_t n = 0;
        int r;

        if (size == 0 || req->arg[1] != 0) {
                rep->status = -EINVAL;
                return 0;
        }
        /* Past the quota plus what may be borrowed no request can succeed:
         * the answer a driver gives for too much is out of memory. */
        limit = (uint64_t)gs_part_burst(&p->alloc->parts[req->gpu]) * pg->g->chunk_bytes;
        if (size > limit) {
                rep->status = -ENOMEM;
                return 0;
        }
        for (int attempt = 0;; attempt++) {
                gs_gpu_lock(g);
                cover(p, req->gpu);
                r = gs_pproc_malloc(pg->pp, size, &off, p->grants, p->max_grants, &n);
                if (r == 0) {
                        char err[256];

                        r = gs_gpu_chunks_hand_out(g, p->grants, n, p->alloc, p->id, p->grant_fds, err, sizeof(err));
                        if (r < 0) {
                                if (attempt == 0)
                                        log_info("GPU %u: %s", g->index, err);
                                gs_agent_want_scan(p->agent);
                                /* Undo: the block, then the new chunks' slots. */
                                if (gs_pproc_free(pg->pp, off, NULL) < 0)
                                        log_error("GPU %u: block at %llu not undone", g->index,
                                                  (unsigned long long)off);
                                for (uint32_t i = 0; i < n; i++)
                                        if (gs_pproc_release(pg->pp, p->grants[i].slot, 1) < 0)
                                                log_error("GPU %u: slot %u not undone", g->index, p->grants[i].slot);
                                n = 0;
                                r = -EAGAIN;
                        }
                        gs_gpu_check_lending(g);
                }
                gs_gpu_unlock(g);
                /* No room in the driver for a chunk's memory: just after a start or
         * a handover the memory of the agent before is still being let go
         * (a killed one's by the driver): wait for it.  Else out of memory. */
                if (r == -EAGAIN && attempt < 10 &&
                    gs_mono_ms() < __atomic_load_n(&p->agent->settle_until_ms, __ATOMIC_RELAXED)) {
                        gs_agent_wait_scan(p->agent, GS_PROC_ROOM_WAIT_MS);
                        continue;
                }
                if (r == -EAGAIN)
                        r = -ENOMEM;
                break;
        }
        if (r < 0) {
                /* Out of slots or too many chunks at once is, to the caller,
                 * out of memory too. */
                rep->status = (r == -ENOSPC || r == -E2BIG) ? -ENOMEM : r;
                return 0;
        }
        for (uint32_t i = 0; i < n; i++) {
                if (p->grant_fds[i] < 0)
                        return -EIO;
                r = gs_sockmsg_send_grant(p->sock, GS_SOCK_GRANT, req, p->grants[i].slot, g->chunk_bytes,
                                          p->grant_fds[i], &p->stop);
                if (r < 0)
                        return r; /* the process keeps the memory until it exits */
        }
        rep->arg[0] = off;
        rep->arg[1] = n;
        gs_hist_observe(&p->agent->node.hists.grant_bytes[GS_HIST_GRANT_ALLOC], &gs_hist_bytes, size);
        return 0;
}

static int serve_vmm_create(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req,
                            struct gs_ring_msg *rep)
{
        struct gs_gpu *g = pg->g;
        struct gs_sock_vmm_grant m;
        uint64_t size = req->arg[0], id = 0;
        int fd = -1, r;

        if (size == 0 || size % GS_VMM_ALIGN || req->arg[1] != 0) {
                rep->status = -EINVAL;
                return 0;
        }
        if (size > (uint64_t)gs_part_burst(&p->alloc->parts[req->gpu]) * pg->g->chunk_bytes) {
                rep->status = -ENOMEM;
                return 0;
        }
        for (int attempt = 0;; attempt++) {
                gs_gpu_lock(g);
                cover(p, req->gpu);
                r = gs_vmm_create(g, &pg->vmm, size, &id, &fd);
                if (r == 0)
                        gs_gpu_check_lending(g);
                gs_gpu_unlock(g);
                /* No room in the driver: growth since the last scan may
                 * have used the headroom; a scan charges it to its pods and
                 * gives it back.  Memory still held by a kept fd stays out
                 * of memory to the caller. */
                /* Just after a handover the old agent is still letting its
                 * memory go (its VMM fillers, its context): wait for it. */
                bool settling = gs_mono_ms() < __atomic_load_n(&p->agent->settle_until_ms, __ATOMIC_RELAXED);
                if (r != -ENOSPC || (attempt >= 1 && !(settling && attempt < 10)) ||
                    (!settling && gs_mono_ms() - pg->room_wait_ms < 1000))
                        break;
                pg->room_wait_ms = gs_mono_ms();
                gs_agent_wait_scan(p->agent, GS_PROC_ROOM_WAIT_MS);
        }
        if (r < 0) {
                rep->status = r == -ENOSPC ? -ENOMEM : r;
                return 0;
        }
        /* Only this worker touches the set while the process is served:
         * the fd stays valid until a VMM_RELEASE from this same process. */
        memset(&m, 0, sizeof(m));
        gs_sockmsg_hdr(&m.h, GS_SOCK_VMM_GRANT, sizeof(m));
        m.seq = req->seq;
        m.id = id;
        m.size = size;
        m.gpu = req->gpu;
        r = gs_sockmsg_send(p->sock, &m, sizeof(m), fd, &p->stop);
        if (r < 0)
                return r; /* the allocation is freed when the process exits */
        rep->arg[0] = id;
        rep->arg[1] = 1;
        gs_hist_observe(&p->agent->node.hists.grant_bytes[GS_HIST_GRANT_VMM], &gs_hist_bytes, size);
        return 0;
}

/* The part's outside set under the GPU's lock: what the allocation uses on
 * this GPU, and of it outside the pool. */
static void part_usage(struct gs_gpu *g, struct gs_part *part, uint64_t *ret_used, uint64_t *ret_outside)
{
        gs_gpu_assert_locked(g);
        struct gs_palloc_stats st;

        gs_palloc_stats(part->pa, &st);
        *ret_used = (uint64_t)st.chunks_held * g->chunk_bytes;
        *ret_outside = part->out.charged;
}

/* GS_OP_CTX: charge a context before the process creates it. */
static int serve_ctx(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req, struct gs_ring_msg *rep)
{
        struct gs_part *part = &p->alloc->parts[req->gpu];
        struct gs_gpu *g = pg->g;
        uint64_t want;
        int64_t t0 = gs_mono_ns();
        bool charging = false;
        int r = 0;

        gs_gpu_lock(g);
        if (!pg->ctx_expect) {
                charging = true;
                want = g->ctx_expect_bytes > pg->outside_measured ? g->ctx_expect_bytes : pg->outside_measured;
                r = gs_outside_charge(g, &part->out, part->pa, gs_allocs_outside_slots(&p->agent->node, part),
                                      &pg->outside_charge, want, true);
                if (r == 0) {
                        pg->ctx_expect = g->ctx_expect_bytes;
                        pg->ctx_promised = want;
                        g->ctx_promised += want;
                }
                gs_gpu_check_lending(g);
        }
        part_usage(g, part, &rep->arg[1], &rep->arg[2]);
        gs_gpu_unlock(g);
        if (charging)
                gs_hist_since(&p->agent->node.hists.ctx_charge, t0);
        rep->arg[0] = pg->quota_bytes;
        rep->arg[3] = strtoull(p->alloc->id, NULL, 16);
        if (r < 0) {
                /* Once per process: its hook may wait and ask again (lent
                 * memory being taken back for it). */
                if (!pg->ctx_refused_said)
                        log_info("process %d (%s) of allocation %s: no room for a CUDA context on GPU %u "
                                 "(%llu of %llu MiB in use, %llu outside the pool)",
                                 p->pid, p->comm, p->alloc->id, g->index, (unsigned long long)(rep->arg[1] >> 20),
                                 (unsigned long long)(pg->quota_bytes >> 20), (unsigned long long)(rep->arg[2] >> 20));
                pg->ctx_refused_said = true;
                rep->status = -ENOMEM;
        }
        return 0;
}

/* GS_IPC_EXPORT_KEEP: the fds of the chunks under p's exported block at
 * base, before the reply (0 with them sent, a status for the reply, or a
 * negative errno when part of them went out: the connection must go). */
static int send_export_keep(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req, uint64_t base,
                            int32_t *ret_status)
{
        struct gs_ipc_open o;
        int r = gs_ipc_export_fds(&p->alloc->ipc, p, req->gpu, base, &o);

        if (r < 0) {
                /* Without them the handle would not outlive this agent. */
                *ret_status = r == -EMFILE || r == -ENFILE ? -ENOMEM : -EIO;
                return 0;
        }
        for (uint32_t i = 0; i < o.nchunks && r == 0; i++)
                r = gs_sockmsg_send_grant(p->sock, GS_SOCK_IPC_GRANT, req, i, pg->g->chunk_bytes, o.fds[i], &p->stop);
        gs_ipc_open_done(&o);
        return r;
}

static int serve_ipc_export(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req,
                            struct gs_ring_msg *rep)
{
        uint64_t base = 0, size = 0, tok[2];
        uint32_t had = gs_ipc_count(p);
        int r;

        gs_gpu_lock(pg->g);
        r = gs_pproc_range(pg->pp, req->arg[0], &base, &size);
        gs_gpu_unlock(pg->g);
        /* Only this worker frees this process's blocks: the block stays
         * live until the export is in the table. */
        if (r == 0)
                r = gs_ipc_export(&p->alloc->ipc, p, req->gpu, base, size, tok);
        if (r < 0) {
                rep->status = r == -ENOSPC ? -ENOMEM : r;
                return 0;
        }
        if (req->arg[1] == GS_IPC_EXPORT_KEEP) {
                r = send_export_keep(p, pg, req, base, &rep->status);
                /* Refused: the hook gets no token, so no export of it
                 * stays (one made before this request does). */
                if (r == 0 && rep->status && gs_ipc_count(p) > had)
                        gs_ipc_unexport(&p->alloc->ipc, p, req->gpu, base);
                if (r < 0 || rep->status)
                        return r;
        }
        rep->arg[0] = tok[0];
        rep->arg[1] = tok[1];
        rep->arg[2] = size;
        rep->arg[3] = base;
        return 0;
}

static int serve_ipc_open(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req,
                          struct gs_ring_msg *rep)
{
        const uint64_t tok[2] = { req->arg[0], req->arg[1] };
        struct gs_ipc_open o;
        uint32_t k;
        int r;

        r = gs_ipc_open(&p->alloc->ipc, p, req->gpu, tok, &o);
        if (r < 0) {
                rep->status = r == -EMFILE || r == -ENFILE ? -ENOMEM : r;
                return 0;
        }
        for (uint32_t i = 0; i < o.nchunks && r == 0; i++)
                r = gs_sockmsg_send_grant(p->sock, GS_SOCK_IPC_GRANT, req, i, pg->g->chunk_bytes, o.fds[i], &p->stop);
        k = o.nchunks;
        gs_ipc_open_done(&o);
        if (r < 0)
                return r; /* part of the grants went out: the connection must go */
        rep->arg[0] = o.off_in_chunk;
        rep->arg[1] = k;
        rep->arg[2] = o.size;
        return 0;
}

int gs_serve_one(struct gs_proc *p, const struct gs_ring_msg *req, struct gs_ring_msg *rep)
{
        struct gs_proc_gpu *pg;
        struct gs_pproc_stats st;
        struct gs_release rel = { 0, 0 };
        uint64_t base = 0, size = 0;
        int r;

        memset(rep, 0, sizeof(*rep));
        rep->seq = req->seq;
        rep->op = req->op;
        rep->gpu = req->gpu;
        if (req->op == GS_OP_PING) {
                rep->arg[0] = req->arg[0];
                return 0;
        }
        if (req->gpu >= p->ngpus) {
                rep->status = -EINVAL;
                return 0;
        }
        pg = &p->gpus[req->gpu];
        /* For gs_short_request: read before the request is served. */
        uint32_t returned = gs_palloc_returned(p->alloc->parts[req->gpu].pa);
        switch (req->op) {
        case GS_OP_ALLOC: return gs_short_request(p, req, rep, serve_alloc(p, pg, req, rep), returned);
        case GS_OP_FREE:
                /* An exported block loses its export before it is freed. */
                if (gs_ipc_count(p))
                        gs_ipc_unexport(&p->alloc->ipc, p, req->gpu, req->arg[0]);
                gs_gpu_lock(pg->g);
                r = gs_pproc_free(pg->pp, req->arg[0], &rel);
                /* Memory is wanted (the pod's memory outside the pool not
                 * covered, or a process short): nothing stays cached. */
                if (r == 0 && rel.count == 0 &&
                    (p->alloc->parts[req->gpu].out.short_bytes || p->alloc->parts[req->gpu].give_back_wanted))
                        rel.count = gs_pproc_empty_run(pg->pp, GS_GIVE_BACK_RUN, &rel.first_slot);
                gs_gpu_unlock(pg->g);
                rep->status = r;
                rep->arg[0] = rel.first_slot;
                rep->arg[1] = rel.count;
                return 0;
        case GS_OP_MEMINFO: {
                /* Total: the quota, and for an allocation that may borrow
                 * what it borrowed and may borrow now (docs/burst.md). */
                struct gs_palloc_stats ps = { 0 };
                gs_gpu_lock(pg->g);
                gs_pproc_stats(pg->pp, &st);
                if (gs_part_burst(&p->alloc->parts[req->gpu]) > p->alloc->parts[req->gpu].quota_chunks)
                        gs_palloc_stats(p->alloc->parts[req->gpu].pa, &ps);
                gs_gpu_unlock(pg->g);
                rep->arg[0] = st.bytes_obtainable;
                rep->arg[1] =
                        pg->quota_bytes + ((uint64_t)ps.chunks_borrowed + ps.chunks_borrowable) * pg->g->chunk_bytes;
                return 0;
        }
        case GS_OP_RANGE:
                gs_gpu_lock(pg->g);
                r = gs_pproc_range(pg->pp, req->arg[0], &base, &size);
                gs_gpu_unlock(pg->g);
                rep->status = r;
                rep->arg[0] = base;
                rep->arg[1] = size;
                return 0;
        case GS_OP_RELEASE:
                if (req->arg[0] >= pg->nslots || req->arg[1] == 0 || req->arg[1] > pg->nslots - req->arg[0]) {
                        rep->status = -EINVAL;
                        return 0;
                }
                gs_gpu_lock(pg->g);
                r = gs_pproc_release(pg->pp, (uint32_t)req->arg[0], (uint32_t)req->arg[1]);
                if (r == 0) {
                        cover(p, req->gpu);
                        gs_gpu_check_lending(pg->g);
                }
                gs_gpu_unlock(pg->g);
                rep->status = r;
                return 0;
        case GS_OP_VMM_CREATE: return gs_short_request(p, req, rep, serve_vmm_create(p, pg, req, rep), returned);
        case GS_OP_IPC_EXPORT: return serve_ipc_export(p, pg, req, rep);
        case GS_OP_IPC_OPEN: return serve_ipc_open(p, pg, req, rep);
        case GS_OP_CTX: return gs_short_request(p, req, rep, serve_ctx(p, pg, req, rep), returned);
        case GS_OP_GIVE_BACK: {
                uint32_t first = 0, n;
                gs_gpu_lock(pg->g);
                n = gs_pproc_empty_run(pg->pp, GS_GIVE_BACK_RUN, &first);
                gs_gpu_unlock(pg->g);
                rep->arg[0] = n ? first : 0;
                rep->arg[1] = n;
                return 0;
        }
        case GS_OP_SPILL:
                if (!p->move_feature)
                        break;
                return gs_serve_spill(p, pg, req, rep);
        case GS_OP_SPILL_DONE:
                if (!p->move_feature)
                        break;
                return gs_serve_spill_done(p, pg, req, rep);
        case GS_OP_SPILL_PREP:
                if (!p->move_feature)
                        break;
                return gs_serve_spill_prep(p, pg, req, rep);
        case GS_OP_NOTIFY:
                /* The fd lives with the record; sending passes a reference. */
                if (p->notify_fd < 0)
                        break;
                return gs_sockmsg_send_grant(p->sock, GS_SOCK_NOTIFY, req, 0, 0, p->notify_fd, &p->stop);
        case GS_OP_QOS: return gs_serve_qos(p, pg, req, rep);
        case GS_OP_CTX_DONE:
                gs_gpu_lock(pg->g);
                pg->g->ctx_promised -= pg->ctx_promised;
                pg->ctx_promised = 0;
                gs_gpu_unlock(pg->g);
                return 0;
        case GS_OP_VMM_RELEASE:
                gs_gpu_lock(pg->g);
                r = gs_vmm_release(pg->g, &pg->vmm, req->arg[0]);
                if (r == -ENOENT)
                        r = gs_proc_legacy_vmm_release(pg, req->arg[0]);
                if (r == 0) {
                        cover(p, req->gpu);
                        gs_gpu_check_lending(pg->g);
                }
                gs_gpu_unlock(pg->g);
                rep->status = r;
                return 0;
        default: break;
        }
        rep->status = -EPROTO;
        return 0;
}

/* Publishes a reply; the honest hook keeps one request outstanding, so a
 * full reply ring means the peer stopped reading: wait a little, then give up. */
static int push_reply(struct gs_proc *p, const struct gs_ring_msg *rep)
{
        int64_t deadline = gs_mono_ms() + GS_SOCKMSG_SEND_MS;
        int r;

        while ((r = gs_ring_push(&p->shm->rep, &p->rep_head, rep)) == -EAGAIN) {
                struct timespec ts = { 0, 1000000 };
                if (gs_mono_ms() >= deadline || __atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
                        return -ETIMEDOUT;
                nanosleep(&ts, NULL);
        }
        if (r == 0)
                gs_doorbell_ring(&p->shm->hook_wake, &p->shm->hook_sleeping);
        return r;
}

bool gs_serve_has_work(const struct gs_proc *p)
{
        return gs_ring_ready(&p->shm->req, p->req_tail);
}

int gs_serve_some(struct gs_proc *p, uint32_t budget, uint32_t *ret_served)
{
        struct gs_ring_msg req, rep;
        uint32_t n = 0;
        int64_t t0 = 0, t1;
        int r = 0;

        while (n < budget && !__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
                r = gs_ring_pop(&p->shm->req, &p->req_tail, &req);
                if (r <= 0)
                        break;
                /* One clock read a request: the next one, already in the
                 * ring, starts when this one's reply is out. */
                if (!t0)
                        t0 = gs_mono_ns();
                r = gs_serve_one(p, &req, &rep);
                if (r == 0)
                        r = push_reply(p, &rep);
                /* A batch answered with the next one is settled now, while
                 * the process moves that one. */
                if (req.op == GS_OP_SPILL_DONE)
                        gs_serve_spill_settle(p);
                t1 = gs_mono_ns();
                gs_hist_observe(&p->agent->node.hists.request[req.op < GS_HIST_OPS ? req.op : 0], &gs_hist_seconds,
                                (uint64_t)(t1 > t0 ? t1 - t0 : 0));
                t0 = t1;
                if (r < 0)
                        break;
                n++;
                __atomic_add_fetch(&p->nrequests, 1, __ATOMIC_RELAXED);
        }
        *ret_served = n;
        if (r >= 0)
                return 0;
        if (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
                log_warn_rep(gs_logrep_key(p->alloc->id), "process %d (%s) of allocation %s: connection dropped: %s",
                             p->pid, p->comm, p->alloc->id, r == -EPROTO ? "corrupt ring indices" : strerror(-r));
                /* The main loop sees the hang-up and takes it from there. */
                (void)shutdown(p->sock, SHUT_RDWR);
        }
        return r;
}

enum gs_turn gs_serve_turn(void *item, uint32_t budget, const uint32_t *others_waiting)
{
        struct gs_proc *p = item;
        struct gs_shm *s = p->shm;
        uint32_t served = 0;

        __atomic_store_n(&s->agent_sleeping, 0, __ATOMIC_SEQ_CST);
        for (;;) {
                uint32_t n = 0;
                int64_t spin_until;

                if (gs_serve_some(p, budget - served, &n) < 0)
                        return GS_TURN_DEAD;
                served += n;
                if (__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
                        return GS_TURN_IDLE;
                if (served >= budget && gs_serve_has_work(p))
                        return GS_TURN_MORE;
                /* Empty: a busy process sends again within microseconds.
                 * Spin for it, unless others wait or the budget is spent. */
                spin_until = gs_mono_ns() + GS_SERVE_SPIN_NS;
                while (served < budget && !gs_serve_has_work(p) && gs_mono_ns() < spin_until &&
                       !__atomic_load_n(others_waiting, __ATOMIC_RELAXED) &&
                       !__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
                        gs_cpu_relax();
                if (served < budget && gs_serve_has_work(p))
                        continue;
                /* Going to sleep: drain the doorbell first, then say so, then
                 * look once more.  A request published after that look sees
                 * agent_sleeping (seq_cst on both sides) and writes the
                 * doorbell, which stays readable for the re-armed epoll.
                 * Every IDLE return goes this way: an earlier turn drained
                 * the doorbell, so IDLE with agent_sleeping 0 would leave a
                 * request rung once unseen (the lost wake-up of issue 19). */
                {
                        uint64_t v;
                        if (read(p->wake_fd, &v, sizeof(v)) < 0) {
                                /* EAGAIN: nothing rang */
                        }
                }
                __atomic_store_n(&s->agent_sleeping, 1, __ATOMIC_SEQ_CST);
                if (!gs_serve_has_work(p))
                        return GS_TURN_IDLE;
                __atomic_store_n(&s->agent_sleeping, 0, __ATOMIC_SEQ_CST);
                if (served >= budget)
                        return GS_TURN_MORE;
        }
}
