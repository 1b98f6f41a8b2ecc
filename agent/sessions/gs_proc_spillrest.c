/* gs_proc_spillrest.c — spilled data across agent restarts and upgrades
 * (docs/burst.md "Agent restarts"): the previous agent's spill record
 * (gs_gpu_spillrec.c) makes the processes' ghosts hold spares where their
 * data is in host memory, marks the slots that were in a move, and lends
 * the allocations that were owed chunks first again; a reclaiming process
 * says which of the marked slots its mover did move to host memory. */
#include "gs_proc_int.h"

#include <stdio.h>
#include <string.h>

#include "gs_gpu.h"
#include "gs_log.h"

struct pa_ctx {
        struct gs_agent *ag;
        uint32_t gpu;
};

static struct gs_palloc *pa_of(void *ctx, uint64_t num)
{
        struct pa_ctx *c = ctx;
        uint32_t pi;
        struct gs_allocation *a = gs_proc_alloc_by_num(c->ag, num, c->gpu, &pi);

        return a ? a->parts[pi].pa : NULL;
}

void gs_proc_adopt_debts(struct gs_agent *ag, struct gs_gpu *g)
{
        struct pa_ctx c = { ag, g->index };

        gs_gpu_lock(g);
        gs_gpu_spillrec_debts_adopt(g, pa_of, &c);
        gs_gpu_unlock(g);
}

bool gs_proc_spill_entry_as_device(const struct gs_gpu *g, uint32_t i, struct gs_ledger_ent *ret)
{
        if (i >= g->spillrec.nbefore || g->spillrec.before[i].kind != GS_LEDGER_UNSPILLING)
                return false;
        *ret = g->spillrec.before[i];
        ret->kind = GS_LEDGER_SLOT;
        return true;
}

/* The ghost's GPU record for entry e (its process alive; *q the ghost),
 * or NULL. */
static struct gs_proc_gpu *ghost_gpu(struct gs_agent *ag, struct gs_gpu *g, const struct gs_ledger_ent *e,
                                     struct gs_proc **qp)
{
        uint32_t pi;
        struct gs_allocation *a = gs_proc_alloc_by_num(ag, e->alloc, g->index, &pi);
        struct gs_proc *q = a ? gs_proc_ghost(ag, a, e) : NULL;

        *qp = q;
        return q && pi < q->ngpus && q->gpus[pi].pp ? &q->gpus[pi] : NULL;
}

void gs_proc_adopt_spilled(struct gs_agent *ag, struct gs_gpu *g)
{
        uint32_t host = 0, marked = 0, lost = 0, held = 0;

        for (uint32_t i = 0; i < g->spillrec.nbefore; i++) {
                const struct gs_ledger_ent *e = &g->spillrec.before[i];
                struct gs_proc_gpu *pg;
                struct gs_proc *q;

                if (e->kind != GS_LEDGER_SLOT && e->kind != GS_LEDGER_SPILLING && e->kind != GS_LEDGER_UNSPILLING)
                        continue;
                if (!(pg = ghost_gpu(ag, g, e, &q)))
                        continue;
                if (e->kind != GS_LEDGER_SLOT) {
                        if (pg->nmaybe_host < GS_MOVE_MAX && e->slot < pg->nslots)
                                pg->maybe_host[pg->nmaybe_host++] = e->slot;
                        marked++;
                        continue;
                }
                gs_gpu_lock(g);
                uint32_t spare = gs_gpu_spare_record_free(g);
                int r = spare == UINT32_MAX ? -ENOSPC : gs_pproc_adopt_spare(pg->pp, e->slot, spare);
                gs_gpu_unlock(g);
                if (r == 0) {
                        host++;
                        continue;
                }
                /* Claimed at its reclaim as device memory (charged more,
                 * never less). */
                lost++;
                log_warn("GPU %u: slot %u of process %d was in host memory; not adopted as such: %s", g->index, e->slot,
                         (int)e->pid, r == -ENOSPC ? "no spare record (spillMax)" : strerror(-r));
        }
        /* Host memory a live process kept (GS_LEDGER_HELD): still charged,
         * once, on spares the slots above did not take. */
        for (uint32_t i = 0; i < g->spillrec.nbefore; i++) {
                const struct gs_ledger_ent *e = &g->spillrec.before[i];
                struct gs_proc *q;
                if (e->kind != GS_LEDGER_HELD || !ghost_gpu(ag, g, e, &q))
                        continue;
                struct gs_ledger_tag t = {
                        .pid = e->pid, .kind = GS_LEDGER_HELD, .start = e->start, .alloc = e->alloc
                };
                gs_gpu_lock(g);
                int r = gs_gpu_spill_hold_adopted(g, q->id, &t, e->slot);
                gs_gpu_unlock(g);
                if (r < 0)
                        log_warn("GPU %u: host memory process %d kept from a move is not charged again: no spare "
                                 "record (spillMax)",
                                 g->index, (int)e->pid);
                else
                        held++;
        }
        gs_gpu_lock(g);
        gs_pool_adopted(g->pool);
        gs_gpu_check_lending(g);
        gs_gpu_unlock(g);
        if (host || marked || held)
                log_info("GPU %u: %u chunks of processes' data in host memory from before the restart, %u in a "
                         "move then (device memory unless their process says otherwise), %u kept unmoved",
                         g->index, host, marked, held);
        (void)lost;
}

void gs_proc_reclaim_host(struct gs_proc *p, struct gs_proc_gpu *pg, const uint64_t *slots, uint32_t n)
{
        struct gs_gpu *g = pg->g;
        uint32_t done = 0;

        gs_gpu_lock(g);
        for (uint32_t k = 0; k < n; k++) {
                uint32_t i, slot, chunk, spare;
                for (i = 0; i < pg->nmaybe_host && pg->maybe_host[i] != slots[k]; i++)
                        ;
                if (i == pg->nmaybe_host)
                        continue; /* not in a move: the agent's record stands */
                slot = pg->maybe_host[i];
                pg->maybe_host[i] = pg->maybe_host[--pg->nmaybe_host];
                chunk = gs_pproc_slot_chunk(pg->pp, slot);
                if (chunk >= g->nchunks)
                        continue; /* a spare already, or nothing */
                spare = gs_gpu_spare_record_free(g);
                if (spare == UINT32_MAX || gs_pool_make_borrowed(g->pool, chunk) < 0 ||
                    gs_pool_exchange(g->pool, chunk, spare) < 0) {
                        log_warn("GPU %u: slot %u of process %d is in host memory, charged as device memory: no "
                                 "spare record or borrowed chunk for it",
                                 g->index, slot, p->pid);
                        continue;
                }
                done++;
        }
        gs_gpu_check_lending(g);
        gs_gpu_unlock(g);
        if (done)
                log_info("GPU %u: process %d says %u slots in a move when the agent stopped are in host memory: "
                         "charged so",
                         g->index, p->pid, done);
}
