/* gs_serve_spill.c — a process's mover served (gs_wire.h item 8;
 * docs/burst.md "Giving it back"): it asks what to move (GS_OP_SPILL) and
 * says what it moved (GS_OP_SPILL_DONE).  When movers are woken (owners
 * short of memory that is lent, or chunks coming back to the GPU) is
 * gs_short.c's; the GPU's books are gs_gpu_spill.c's. */
#include "gs_serve_spill.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gs_gpu.h"
#include "gs_ipc.h"
#include "gs_log.h"
#include "gs_logrep.h"
#include "gs_ring.h"
#include "gs_sockmsg.h"
#include "gs_util.h"

bool gs_spill_feature(const struct gs_agent *ag, const struct gs_allocation *a)
{
        for (uint32_t i = 0; i < a->nparts; i++) {
                const struct gs_part *part = &a->parts[i];
                if (ag->node.gpus[part->gpu].moves.nspare &&
                    (ag->node.cfg.burst_max_bytes || gs_part_burst(part) > part->quota_chunks))
                        return true;
        }
        return false;
}

/* The batch's n moves (pg->move) sent before the reply to req: 0, or a
 * negative errno (the connection must end). */
static int send_moves(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req, int n)
{
        struct gs_gpu *g = pg->g;

        for (int i = 0; i < n; i++) {
                /* Prepared ahead: the process has the memory, named by id. */
                const struct gs_move_ent *m = &pg->move[i];
                int r = m->prep ? gs_sockmsg_send_grant(p->sock, GS_SOCK_MOVE_PREP, req, m->slot, m->to - g->nchunks,
                                                        -1, &p->stop)
                                : gs_sockmsg_send_grant(p->sock, GS_SOCK_MOVE, req, m->slot, g->chunk_bytes, m->fd,
                                                        &p->stop);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* pre: g->lock held, n moves just planned into pg->move (direction dir,
 * the plan begun at t0; err its complaint, or empty).  They are the
 * process's batch; the lock let go, err logged and the moves sent before
 * the reply to req: n, or a negative errno (the connection must end; the
 * batch is undone with the process). */
static int batch_out(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req, int n, uint32_t dir,
                     uint64_t t0, const char *err)
{
        struct gs_gpu *g = pg->g;

        if (n > 0) {
                pg->nmove = (uint32_t)n;
                pg->move_dir = dir;
                pg->move_plan_ns = gs_mono_ns() - t0;
                pg->move_start_ns = gs_mono_ns();
        }
        gs_gpu_unlock(g);
        if (err[0])
                log_warn_rep((uint64_t)g->index << 32 | (uint32_t)p->pid, "GPU %u: process %d (%s): %s", g->index,
                             p->pid, p->comm, err);
        if (n > 0 && send_moves(p, pg, req, n) < 0)
                return -EPIPE;
        return n;
}

int gs_serve_spill(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req, struct gs_ring_msg *rep)
{
        struct gs_gpu *g = pg->g;
        uint32_t dir = GS_MOVE_TO_HOST;
        char err[256] = "";
        uint64_t t0 = gs_mono_ns();
        int n;

        if (pg->nmove) {
                /* The last batch was not answered: a protocol violation. */
                rep->status = -EPROTO;
                return 0;
        }
        gs_gpu_lock(g);
        /* A block another process opened through CUDA IPC is mapped there
         * too, from the device memory: a process exporting any is never
         * spilled (the opener would not see the moved data). */
        n = gs_ipc_count(p) ? 0
                            : gs_gpu_move_plan(g, pg->pp, GS_MOVE_TO_HOST, pg->move, GS_MOVE_MAX, p->alloc, p->id, err,
                                               sizeof(err));
        if (n == 0) {
                dir = GS_MOVE_TO_DEVICE;
                n = gs_gpu_move_plan(g, pg->pp, GS_MOVE_TO_DEVICE, pg->move, GS_MOVE_MAX, p->alloc, p->id, err,
                                     sizeof(err));
        }
        n = batch_out(p, pg, req, n, dir, t0, err);
        if (n < 0)
                return n;
        rep->arg[0] = (uint64_t)n;
        rep->arg[1] = dir;
        return 0;
}

/* The batch's phases (gs_gpu_spill.h): the agent's plan, the process's
 * own four as it says (a hostile one's words are all dropped if they sum
 * past the time the agent saw in the process), the rest of that time the
 * wire's. */
static void batch_phases(const struct gs_proc_gpu *pg, const struct gs_ring_msg *req, uint64_t in_ns,
                         uint64_t ns[GS_PHASE_N])
{
        uint64_t said = 0;

        ns[GS_PHASE_PLAN] = pg->move_plan_ns;
        ns[GS_PHASE_SYNC] = GS_MOVE_US_LO(req->arg[2]) * 1000ull;
        ns[GS_PHASE_PREPARE] = GS_MOVE_US_HI(req->arg[2]) * 1000ull;
        ns[GS_PHASE_COPY] = GS_MOVE_US_LO(req->arg[3]) * 1000ull;
        ns[GS_PHASE_REMAP] = GS_MOVE_US_HI(req->arg[3]) * 1000ull;
        for (int i = GS_PHASE_SYNC; i <= GS_PHASE_REMAP; i++)
                said += ns[i];
        if (said > in_ns) {
                for (int i = GS_PHASE_SYNC; i <= GS_PHASE_REMAP; i++)
                        ns[i] = 0;
                said = 0;
        }
        ns[GS_PHASE_WIRE] = in_ns - said;
        ns[GS_PHASE_SETTLE] = 0;
}

/* The batch e (n moves in direction dir, moved of them done, its time
 * by phase in ns, settle excepted) settled: the records exchanged and the
 * chunks made anew (gs_gpu_move_end), timed, said. */
static void settle(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_move_ent *e, uint32_t n, uint32_t moved,
                   uint32_t dir, uint64_t ns[GS_PHASE_N], bool chained)
{
        struct gs_gpu *g = pg->g;
        uint64_t t1 = gs_mono_ns(), prep = 0, in_ns = 0;

        for (uint32_t i = 0; i < n; i++)
                prep += e[i].prep;
        for (int i = GS_PHASE_SYNC; i <= GS_PHASE_WIRE; i++)
                in_ns += ns[i];
        gs_gpu_lock(g);
        gs_gpu_move_end(g, (enum gs_move_dir)dir, e, n, moved, p->alloc, p->id);
        ns[GS_PHASE_SETTLE] = gs_mono_ns() - t1;
        gs_gpu_move_timed(g, (enum gs_move_dir)dir, ns, moved);
        g->moves.st.moves++;
        for (int i = 0; i < GS_PHASE_SETTLE; i++)
                g->moves.st.move_ns += ns[i];
        uint32_t held = gs_gpu_spill_held(g);
        gs_gpu_unlock(g);
        if (dir == GS_MOVE_TO_HOST && moved < n)
                log_warn_rep((uint64_t)g->index << 32 | (uint32_t)p->pid,
                             "GPU %u: process %d (%s) did not move %u "
                             "chunks to the host memory it was sent: it keeps it, charged to spillMax until it exits "
                             "(%u of %u spares held so)",
                             g->index, p->pid, p->comm, n - moved, held, g->moves.nspare);
        log_info("GPU %u: process %d (%s) moved %u of %u chunks %s (%llu prepared ahead): %.1f ms to plan, %.1f ms "
                 "in the process (sync %.1f, prepare %.1f, copy %.1f, remap %.1f, wire %.1f), %.1f ms to settle%s",
                 g->index, p->pid, p->comm, moved, n, dir == GS_MOVE_TO_HOST ? "to host memory" : "back to the GPU",
                 (unsigned long long)prep, ns[GS_PHASE_PLAN] / 1e6, in_ns / 1e6, ns[GS_PHASE_SYNC] / 1e6,
                 ns[GS_PHASE_PREPARE] / 1e6, ns[GS_PHASE_COPY] / 1e6, ns[GS_PHASE_REMAP] / 1e6, ns[GS_PHASE_WIRE] / 1e6,
                 ns[GS_PHASE_SETTLE] / 1e6, chained ? " while the next batch moved" : "");
        gs_agent_poke(p->agent);
}

/* The batch just moved (all of it, to host memory) kept to be settled
 * after the reply (pg->settle), and the next one planned instead, its
 * moves sent: the reply's k, or a negative errno (the connection must
 * end; the kept batch is settled all the same). */
static int chain(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req,
                 const uint64_t ns[GS_PHASE_N])
{
        struct gs_gpu *g = pg->g;
        char err[256] = "";
        uint64_t t0 = gs_mono_ns();
        int n;

        memcpy(pg->settle, pg->move, pg->nmove * sizeof(pg->move[0]));
        memcpy(pg->settle_ns, ns, sizeof(pg->settle_ns));
        pg->nsettle = pg->nmove;
        pg->nmove = 0;
        gs_gpu_lock(g);
        n = gs_ipc_count(p) ? 0
                            : gs_gpu_move_plan_next(g, pg->pp, pg->settle, pg->nsettle, pg->move, GS_MOVE_MAX, p->id,
                                                    err, sizeof(err));
        return batch_out(p, pg, req, n, GS_MOVE_TO_HOST, t0, err);
}

int gs_serve_spill_done(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req,
                        struct gs_ring_msg *rep)
{
        uint64_t moved = req->arg[0], dir = req->arg[1] & ~(uint64_t)GS_MOVE_CHAIN, ns[GS_PHASE_N];
        bool chained = req->arg[1] & GS_MOVE_CHAIN;
        int n;

        if (!pg->nmove || dir != pg->move_dir || moved > pg->nmove || pg->nsettle) {
                rep->status = -EPROTO;
                return 0;
        }
        batch_phases(pg, req, gs_mono_ns() - pg->move_start_ns, ns);
        if (!chained || dir != GS_MOVE_TO_HOST || moved != pg->nmove) {
                uint32_t k = pg->nmove;

                pg->nmove = 0;
                settle(p, pg, pg->move, k, (uint32_t)moved, (uint32_t)dir, ns, false);
                return 0;
        }
        n = chain(p, pg, req, ns);
        if (n < 0)
                return n;
        rep->arg[0] = (uint64_t)n;
        rep->arg[1] = n ? GS_MOVE_TO_HOST : 0;
        return 0;
}

void gs_serve_spill_settle(struct gs_proc *p)
{
        for (uint32_t i = 0; i < p->ngpus; i++) {
                struct gs_proc_gpu *pg = &p->gpus[i];
                uint32_t n = pg->nsettle;

                if (!n)
                        continue;
                pg->nsettle = 0;
                settle(p, pg, pg->settle, n, n, GS_MOVE_TO_HOST, pg->settle_ns, pg->nmove != 0);
        }
}

/* Host memories sent ahead per GS_OP_SPILL_PREP: an owner that asks while
 * a mover imports them waits for at most this many imports (the next round
 * gets none while memory is wanted back). */
#define GS_PREP_ROUND 8u

int gs_serve_spill_prep(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req,
                        struct gs_ring_msg *rep)
{
        struct gs_gpu *g = pg->g;
        uint32_t ids[GS_MOVE_MAX], n, prepared;
        int fds[GS_MOVE_MAX], r = 0;
        bool release;

        __atomic_store_n(&p->prep_asked, true, __ATOMIC_RELAXED);
        gs_gpu_lock(g);
        n = gs_ipc_count(p) ? 0 : gs_gpu_spill_prep_plan(g, pg->pp, p->id, ids, fds, GS_PREP_ROUND, &release);
        prepared = gs_gpu_spill_prepared(g);
        gs_gpu_unlock(g);
        for (uint32_t i = 0; i < n; i++) {
                if (r == 0)
                        r = gs_sockmsg_send_grant(p->sock, GS_SOCK_PREP, req, ids[i], g->chunk_bytes, fds[i], &p->stop);
                close(fds[i]);
        }
        if (r < 0)
                return r; /* the connection ends; what was prepared goes with the process */
        if (n || release)
                log_debug("GPU %u: process %d (%s): %s (%u prepared in processes in all)", g->index, p->pid, p->comm,
                          release ? "its host memory prepared ahead is not needed any more"
                                  : "host memory prepared ahead",
                          prepared);
        rep->arg[0] = n;
        rep->arg[1] = release;
        return 0;
}
