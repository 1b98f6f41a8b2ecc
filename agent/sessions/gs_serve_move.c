/* gs_serve_move.c — the agent's side of moves (gs_wire.h item 8;
 * docs/burst.md "Giving it back"): a process's mover asks what to move
 * (GS_OP_SPILL) and says what it moved (GS_OP_SPILL_DONE); owners short of
 * memory that is lent make the agent ask the borrowers' movers; chunks
 * come back to the GPU when it has some to lend again.  The GPU's books
 * are gs_gpu_spill.c's. */
#include "gs_serve_move.h"

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

bool gs_move_feature(const struct gs_agent *ag, const struct gs_allocation *a)
{
        for (uint32_t i = 0; i < a->nparts; i++) {
                const struct gs_part *part = &a->parts[i];
                if (ag->node.gpus[part->gpu].moves.nspare &&
                    (ag->node.cfg.burst_max_bytes || gs_part_burst(part) > part->quota_chunks))
                        return true;
        }
        return false;
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
        n = gs_ipc_count(p) ? 0 : gs_gpu_move_plan(g, pg->pp, GS_MOVE_TO_HOST, pg->move, GS_MOVE_MAX, p->alloc,
                                                    p->id, err, sizeof(err));
        if (n == 0) {
                dir = GS_MOVE_TO_DEVICE;
                n = gs_gpu_move_plan(g, pg->pp, GS_MOVE_TO_DEVICE, pg->move, GS_MOVE_MAX, p->alloc, p->id, err,
                                     sizeof(err));
        }
        if (n > 0) {
                pg->nmove = (uint32_t)n;
                pg->move_dir = dir;
                pg->move_plan_ns = gs_mono_ns() - t0;
                pg->move_start_ns = gs_mono_ns();
        }
        gs_gpu_unlock(g);
        if (err[0])
                log_warn_rep((uint64_t)g->index << 32 | (uint32_t)p->pid, "GPU %u: process %d (%s): %s", g->index, p->pid,
                             p->comm, err);
        for (int i = 0; i < n; i++) {
                int r = gs_sockmsg_send_grant(p->sock, GS_SOCK_MOVE, req, pg->move[i].slot, g->chunk_bytes,
                                              pg->move[i].fd, &p->stop);
                if (r < 0)
                        return r; /* the connection ends; the moves are undone with the process */
        }
        rep->arg[0] = (uint64_t)n;
        rep->arg[1] = dir;
        return 0;
}

int gs_serve_spill_done(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req,
                        struct gs_ring_msg *rep)
{
        struct gs_gpu *g = pg->g;
        uint64_t moved = req->arg[0];

        if (!pg->nmove || req->arg[1] != pg->move_dir || moved > pg->nmove) {
                rep->status = -EPROTO;
                return 0;
        }
        uint64_t t1 = gs_mono_ns(), n = pg->nmove;
        gs_gpu_lock(g);
        gs_gpu_move_end(g, (enum gs_move_dir)pg->move_dir, pg->move, pg->nmove, (uint32_t)moved, p->alloc, p->id);
        g->moves.st.moves++;
        g->moves.st.move_ns += t1 - pg->move_start_ns + pg->move_plan_ns;
        pg->nmove = 0;
        uint32_t held = gs_gpu_spill_held(g);
        gs_gpu_unlock(g);
        if (pg->move_dir == GS_MOVE_TO_HOST && moved < n)
                log_warn_rep((uint64_t)g->index << 32 | (uint32_t)p->pid, "GPU %u: process %d (%s) did not move %llu "
                             "chunks to the host memory it was sent: it keeps it, charged to spillMax until it exits "
                             "(%u of %u spares held so)", g->index, p->pid, p->comm,
                             (unsigned long long)(n - moved), held, g->moves.nspare);
        log_info("GPU %u: process %d (%s) moved %llu of %llu chunks %s: %.1f ms to prepare, %.1f ms in the process, "
                 "%.1f ms to settle", g->index, p->pid, p->comm, (unsigned long long)moved, (unsigned long long)n,
                 pg->move_dir == GS_MOVE_TO_HOST ? "to host memory" : "back to the GPU", pg->move_plan_ns / 1e6,
                 (t1 - pg->move_start_ns) / 1e6, (gs_mono_ns() - t1) / 1e6);
        gs_agent_poke(p->agent);
        return 0;
}

bool gs_move_want(struct gs_proc *p, uint32_t gi, uint64_t bytes)
{
        struct gs_part *part = &p->alloc->parts[gi];
        struct gs_gpu *g = p->gpus[gi].g;
        bool asked = false;

        if (!g->moves.nspare)
                return false; /* nothing is ever lent out of a quota */
        gs_gpu_lock(g);
        uint32_t owed = gs_palloc_owed(part->pa);
        if (owed) {
                /* What the request needs, and at least a batch: an owner
                 * that asks wants more soon (its next blocks). */
                uint32_t need = (uint32_t)((bytes + g->chunk_bytes - 1) / g->chunk_bytes);
                if (need < GS_MOVE_MAX)
                        need = GS_MOVE_MAX;
                if (need > owed)
                        need = owed;
                gs_palloc_want(part->pa, need);
                uint32_t total = gs_pool_owed(g->pool);
                g->moves.last_want_ms = gs_mono_ms();
                if (!g->moves.spill_want)
                        g->moves.spill_want_ms = g->moves.last_want_ms;
                if (g->moves.spill_want < need)
                        g->moves.spill_want = need;
                if (g->moves.spill_want > total)
                        g->moves.spill_want = total;
                g->moves.st.reclaim_asks++;
                asked = true;
                gs_gpu_spill_kick(g); /* host memory ahead (gs_gpu_spill_prepare_pick) */
        }
        gs_gpu_unlock(g);
        return asked;
}

static void ring_mover(struct gs_proc *p)
{
        __atomic_add_fetch(&p->shm->spill, 1, __ATOMIC_RELEASE);
        gs_futex_wake(&p->shm->spill);
        gs_proc_notify(p);
}

/* The last resort (reclaimKillAfter): an owner waited that long for lent
 * memory that could not be moved (spillMax used up, or its borrower's
 * mover does not answer): the process holding the most borrowed chunks on
 * GPU gi is killed; what it held goes to whom it is owed. */
static void kill_borrower(struct gs_agent *ag, uint32_t gi)
{
        struct gs_gpu *g = &ag->node.gpus[gi];
        struct gs_proc *big = NULL;
        uint32_t most = 0;

        for (struct gs_allocation *a = ag->node.allocs; a; a = a->next)
                for (uint32_t i = 0; i < a->nparts; i++) {
                        if (a->parts[i].gpu != gi)
                                continue;
                        for (struct gs_proc *p = a->procs; p; p = p->next) {
                                uint32_t slots[GS_MOVE_MAX];
                                if (i >= p->ngpus || !p->gpus[i].pp || p->pidfd < 0)
                                        continue;
                                gs_gpu_lock(g);
                                uint32_t n = gs_pproc_move_slots(p->gpus[i].pp, false, slots, GS_MOVE_MAX);
                                gs_gpu_unlock(g);
                                if (n > most) {
                                        most = n;
                                        big = p;
                                }
                        }
                }
        if (!big)
                return;
        int r = (int)syscall(SYS_pidfd_send_signal, big->pidfd, SIGKILL, NULL, 0);
        struct gs_allocation *a = big->alloc;
        char msg[400];
        snprintf(msg, sizeof(msg), "gshare killed process %d (%s) of allocation %s: it held memory lent to it on GPU "
                 "%s that its owner has waited for longer than reclaimKillAfter (%u ms), with no host memory left to "
                 "move it to (spillMax)%s", (int)big->pid, big->comm, a->id, g->uuid, ag->node.cfg.reclaim_kill_after_ms,
                 r == 0 ? "" : "; the kill failed");
        log_warn("allocation %s (pod %s/%s): %s", a->id, a->pod_namespace[0] ? a->pod_namespace : "?",
                 a->pod_name[0] ? a->pod_name : "?", msg);
        gs_agent_event(ag, a, 1, "GPUMemoryReclaimKill", msg);
}

/* Main thread. */
void gs_move_kick(struct gs_agent *ag)
{
        for (uint32_t gi = 0; gi < ag->node.ngpus; gi++) {
                struct gs_gpu *g = &ag->node.gpus[gi];
                bool out, back;

                if (!g->moves.nspare || !g->pool)
                        continue;
                gs_gpu_lock(g);
                out = g->moves.spill_want > g->moves.moving_out;
                back = !g->moves.spill_want && gs_mono_ms() - g->moves.last_want_ms >= g->moves.move_back_quiet_ms &&
                       gs_gpu_spilled(g) && gs_pool_lendable(g->pool);
                if (g->moves.spill_want && !gs_pool_owed(g->pool))
                        g->moves.spill_want = 0; /* repaid meanwhile (given back, exits) */
                if (!g->moves.spill_want)
                        g->moves.spill_want_ms = 0;
                bool kill = out && ag->node.cfg.reclaim_kill_after_ms && g->moves.spill_want_ms &&
                            gs_mono_ms() - g->moves.spill_want_ms >= (int64_t)ag->node.cfg.reclaim_kill_after_ms;
                if (kill)
                        g->moves.spill_want_ms = gs_mono_ms(); /* one a period */
                gs_gpu_unlock(g);
                if (kill)
                        kill_borrower(ag, gi);
                if (!out && !back)
                        continue;
                for (struct gs_allocation *a = ag->node.allocs; a; a = a->next)
                        for (uint32_t i = 0; i < a->nparts; i++) {
                                if (a->parts[i].gpu != gi)
                                        continue;
                                for (struct gs_proc *p = a->procs; p; p = p->next) {
                                        if (p->state != GS_PROC_ACTIVE || !p->shm || !p->move_feature ||
                                            i >= p->ngpus || !p->gpus[i].pp)
                                                continue;
                                        gs_gpu_lock(g);
                                        uint32_t slot;
                                        bool has = gs_pproc_move_slots(p->gpus[i].pp, back && !out, &slot, 1) != 0;
                                        gs_gpu_unlock(g);
                                        if (has)
                                                ring_mover(p);
                                }
                        }
        }
}
