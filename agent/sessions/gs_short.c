/* gs_short.c — a request short of memory: give-back, take-back of lent
 * memory, the last resort (see gs_short.h). */
#include "gs_short.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gs_agent.h"
#include "gs_allocs.h"
#include "gs_gpu.h"
#include "gs_log.h"
#include "gs_proc.h"
#include "gs_ring.h"
#include "gs_wire.h"

uint32_t gs_short_ask_give_back(struct gs_allocation *a, uint32_t i)
{
        uint32_t n = 0;

        for (struct gs_proc *p = a->procs; p; p = p->next) {
                struct gs_pproc_stats st;
                if (p->state != GS_PROC_ACTIVE || i >= p->ngpus || !p->gpus[i].pp || !p->shm)
                        continue;
                gs_pproc_stats(p->gpus[i].pp, &st);
                if (st.chunks_empty == 0)
                        continue;
                __atomic_add_fetch(&p->shm->give_back, 1, __ATOMIC_RELEASE);
                gs_proc_notify(p);
                n++;
        }
        return n;
}

uint32_t gs_short_ask_borrowers(struct gs_agent *ag)
{
        uint32_t lent = 0;

        for (struct gs_allocation *a = ag->node.allocs; a; a = a->next)
                for (uint32_t i = 0; i < a->nparts; i++) {
                        struct gs_gpu *g = &ag->node.gpus[a->parts[i].gpu];
                        struct gs_palloc_stats st;
                        gs_gpu_lock(g);
                        gs_palloc_stats(a->parts[i].pa, &st);
                        if (st.chunks_borrowed) {
                                lent += st.chunks_borrowed;
                                (void)gs_short_ask_give_back(a, i);
                        }
                        gs_gpu_unlock(g);
                }
        return lent;
}

/* Main thread: the parts a short request marked give_back_wanted have
 * their other processes asked (gs_short_ask_give_back); the count is left
 * in others_asked for the request. */
static void give_back(struct gs_agent *ag)
{
        for (struct gs_allocation *a = ag->node.allocs; a; a = a->next)
                for (uint32_t i = 0; i < a->nparts; i++) {
                        struct gs_gpu *g = &ag->node.gpus[a->parts[i].gpu];
                        gs_gpu_lock(g);
                        if (a->parts[i].give_back_wanted) {
                                a->parts[i].give_back_wanted = false;
                                a->parts[i].others_asked = gs_short_ask_give_back(a, i);
                        }
                        gs_gpu_unlock(g);
                }
}

/* A worker: a request of p on its GPU gi for bytes failed for want of
 * memory: if its allocation is owed chunks there (lent to borrowers), the
 * owed ones it needs are wanted back (the kick wakes the movers).
 * Whether so. */
static bool want_back(struct gs_proc *p, uint32_t gi, uint64_t bytes)
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
                g->moves.st.take_back_asks++;
                asked = true;
                gs_gpu_spill_kick(g); /* host memory ahead (gs_gpu_spill_prepare_pick) */
        }
        gs_gpu_unlock(g);
        return asked;
}

/* A worker holding no GPU lock, after marking its part: asks for the kick
 * and waits (at most ms) until one begun after the mark has run: whether
 * it did.  Kicks run often (every batch with a change): one under way may
 * have passed the part before the mark, and its end must not count.  Read
 * after the mark, started is s: kick s may be under way, kick s+1 begins
 * later and takes the part's GPU lock after the mark (seq_cst on both
 * sides), so done reaching s+1 means the part was seen. */
static bool await_kick(struct gs_agent *ag, int ms)
{
        unsigned started = __atomic_load_n(&ag->shortmem.started, __ATOMIC_SEQ_CST);

        gs_loop_async_send(ag->node.loop, &ag->shortmem.async);
        return gs_agent_await(ag, &ag->shortmem.kicks, started, 1, ms);
}

/* The allocation's other processes are asked for their wholly free chunks
 * (the kick does it: the main loop owns the process list); this one's hook
 * gives back its own (GS_OP_GIVE_BACK) and tries once more, and waits and
 * tries again while others_asked says more may come.  returned: a process
 * that gave chunks back between the failure and the kick has none left to
 * be asked for, but what it gave is there to take (under load, the answer
 * to an earlier kick often lands just then). */
int gs_short_request(struct gs_proc *p, const struct gs_ring_msg *req, struct gs_ring_msg *rep, int r,
                     uint32_t returned)
{
        struct gs_part *part = &p->alloc->parts[req->gpu];
        struct gs_gpu *g = p->gpus[req->gpu].g;
        bool ask;

        if (r < 0 || rep->status != -ENOMEM)
                return r;
        /* Its own chunks are lent: taken back from the borrowers
         * (docs/burst.md "Giving it back"), which takes longer. */
        bool taking_back = want_back(p, req->gpu, req->op == GS_OP_CTX ? g->ctx_expect_bytes : req->arg[0]);
        /* One give-back at a time per part (it walks the part's processes
         * only): a process failing in a loop waits for each. */
        gs_gpu_lock(g);
        ask = !part->give_back_wanted;
        part->give_back_wanted = true;
        gs_gpu_unlock(g);
        /* Not kicked yet (the main loop busy, or another request's ask
         * pending): the others may be asked in a moment; the hook's
         * patience is bounded anyway. */
        bool kicked = ask && await_kick(p->agent, GS_GIVE_BACK_WAIT_MS);
        gs_gpu_lock(g);
        rep->others_asked = kicked ? part->others_asked : 1;
        if (!rep->others_asked && gs_palloc_returned(part->pa) != returned)
                rep->others_asked = 1; /* memory came back meanwhile: try again */
        if (taking_back)
                rep->others_asked |= GS_OTHERS_MOVING;
        gs_gpu_unlock(g);
        return r;
}

static void ring_mover(struct gs_proc *p)
{
        __atomic_add_fetch(&p->shm->spill, 1, __ATOMIC_RELEASE);
        gs_futex_wake(&p->shm->spill);
        gs_proc_notify(p);
}

/* The last resort (reclaimKillAfter): an owner waited that long for lent
 * memory that could not be spilled (spillMax used up, or its borrower's
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
        snprintf(msg, sizeof(msg),
                 "gshare killed process %d (%s) of allocation %s: it held memory lent to it on GPU "
                 "%s that its owner has waited for longer than reclaimKillAfter (%u ms), with no host memory left to "
                 "move it to (spillMax)%s",
                 (int)big->pid, big->comm, a->id, g->uuid, ag->node.cfg.reclaim_kill_after_ms,
                 r == 0 ? "" : "; the kill failed");
        log_warn("allocation %s (pod %s/%s): %s", a->id, a->pod_namespace[0] ? a->pod_namespace : "?",
                 a->pod_name[0] ? a->pod_name : "?", msg);
        gs_agent_event(ag, a, 1, "GPUMemoryReclaimKill", msg);
}

/* Main thread: the movers of processes that hold what is wanted back (take
 * back), or hold spilled chunks while the GPU has chunks to lend (move
 * back), are woken; an owner that waited past reclaimKillAfter gets the
 * last resort. */
static void take_back(struct gs_agent *ag)
{
        for (uint32_t gi = 0; gi < ag->node.ngpus; gi++) {
                struct gs_gpu *g = &ag->node.gpus[gi];
                bool out, back, prep;

                if (!g->moves.nspare || !g->pool)
                        continue;
                gs_gpu_lock(g);
                out = g->moves.spill_want > g->moves.moving_out;
                back = !g->moves.spill_want && gs_mono_ms() - g->moves.last_want_ms >= g->moves.move_back_quiet_ms &&
                       gs_gpu_spilled(g) && gs_pool_lendable(g->pool);
                /* Host memory to prepare in borrowers, or prepared to let go. */
                prep = gs_gpu_spill_ready(g) != 0;
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
                if (!out && !back && !prep)
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
                                        bool has = (out || back) &&
                                                   gs_pproc_move_slots(p->gpus[i].pp, back && !out, &slot, 1) != 0;
                                        /* A hook that never asked is woken
                                         * once to find out whether it can. */
                                        if (!has && prep &&
                                            (__atomic_load_n(&p->prep_asked, __ATOMIC_RELAXED) || !p->prep_rung) &&
                                            gs_gpu_spill_prep_due(g, p->gpus[i].pp, p->id)) {
                                                has = true;
                                                p->prep_rung = true;
                                        }
                                        gs_gpu_unlock(g);
                                        if (has)
                                                ring_mover(p);
                                }
                        }
        }
}

/* The kick (main thread, once after a batch): give-back asks, then the
 * movers, then the workers that wait for it are told. */
static void kick(void *data)
{
        struct gs_agent *ag = data;

        __atomic_add_fetch(&ag->shortmem.started, 1, __ATOMIC_SEQ_CST);
        give_back(ag);
        take_back(ag);
        gs_agent_count(ag, &ag->shortmem.kicks);
}

void gs_short_kick(struct gs_agent *ag)
{
        gs_loop_post(ag->node.loop, &ag->shortmem.post, kick, ag);
}

/* A worker's ask (the async source): the kick after this batch. */
static void on_ask(void *data)
{
        gs_short_kick(data);
}

void gs_short_wire(struct gs_agent *ag)
{
        gs_loop_async_add(ag->node.loop, &ag->shortmem.async, on_ask, ag);
}
