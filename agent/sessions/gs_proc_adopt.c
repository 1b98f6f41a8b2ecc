/* gs_proc_adopt.c — at start, the previous agent's processes adopted (gs_ledger.h):
 * each live one its ledger names gets a closed record (a ghost) holding
 * its chunks at their slots, charged until it reclaims them or exits; the
 * chunks adopted take the memory the processes map; chunks of live
 * processes of allocations that are gone wait, pending. */
#include "gs_proc_int.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gs_gpu.h"
#include "gs_log.h"

/* One chunk the previous agent's ledger says a live process holds. */
/* The chunk adopted for the entry, or UINT32_MAX. */
static uint32_t adopt_one(struct gs_agent *ag, struct gs_gpu *g, const struct gs_ledger_ent *e, uint32_t *lost,
                          struct gs_allocation **ret_owner)
{
        struct gs_allocation *a;
        struct gs_proc *q = NULL;
        uint32_t pi, chunk;
        int r = -ESRCH;

        a = gs_proc_alloc_by_num(ag, e->alloc, g->index, &pi);
        if (a)
                q = gs_proc_ghost(ag, a, e);
        else if (e->pid && gs_ledger_pid_start((pid_t)e->pid) == e->start)
                r = -ENOENT; /* alive, of an allocation gone */
        if (!q) {
                if (r == -ENOENT)
                        (*lost)++;
                return UINT32_MAX;
        }
        struct gs_proc_gpu *pg = &q->gpus[pi];
        gs_gpu_lock(g);
        if (e->kind == GS_LEDGER_VMM && !pg->vpp) {
                r = gs_pproc_new(a->parts[pi].pa, pg->nslots, &pg->vpp);
                if (r == 0)
                        gs_pproc_set_tag(pg->vpp, &pg->vtag);
        }
        struct gs_pproc *pp = e->kind == GS_LEDGER_VMM ? pg->vpp : pg->pp;
        r = pp ? gs_pproc_adopt(pp, e->slot, &chunk) : -ENOMEM;
        *ret_owner = a;
        gs_gpu_unlock(g);
        if (r < 0) {
                log_warn("GPU %u: slot %u of process %d (allocation %s) not adopted: %s", g->index, e->slot, q->pid,
                         a->id, strerror(-r));
                return UINT32_MAX;
        }
        return chunk;
}

/* Under g->lock, once every entry is adopted: each adopted chunk takes the
 * memory its process maps.  Handed over (target: the memid the old agent's
 * chunk had): exactly that memory, wherever it sits now (a permutation:
 * a chunk once given its target keeps it); after a crash (target 0): none,
 * trading its memory with a chunk that has none. */
static void place_adopted(struct gs_gpu *g, const uint32_t *chunk, const uint64_t *target,
                          struct gs_allocation *const *owner, uint32_t n)
{
        gs_gpu_assert_locked(g);
        uint32_t lacking = 0;

        for (uint32_t k = 0; k < n; k++) {
                if (!target[k] || g->chunks[chunk[k]].memid == target[k])
                        continue;
                for (uint32_t j = 0; j < g->nchunks; j++)
                        if (g->chunks[j].memid == target[k] && g->chunks[j].fd >= 0) {
                                gs_gpu_chunk_swap(g, chunk[k], j);
                                break;
                        }
        }
        for (uint32_t k = 0; k < n; k++) {
                if (target[k] && g->chunks[chunk[k]].memid == target[k])
                        continue;
                if (gs_gpu_chunk_orphan(g, chunk[k]) < 0)
                        lacking++;
        }
        /* The process maps that memory: it is its allocation's until gone
         * (never a free chunk's to take, gs_gpu_chunk_fill). */
        for (uint32_t k = 0; k < n; k++)
                g->chunks[chunk[k]].owner = owner[k];
        if (lacking)
                log_warn("GPU %u: %u chunks processes hold have no chunk without memory to stand for them", g->index,
                         lacking);
}

/* The chunks each allocation's outside set held (GS_LEDGER_OUTSIDE), its
 * again once the processes' chunks are adopted (gs_outside_adopt). */
static void adopt_outside(struct gs_agent *ag, struct gs_gpu *g)
{
        uint32_t *slots = calloc((size_t)g->restart.nheld_before + 1, sizeof(*slots));

        if (!slots) {
                log_error("GPU %u: out of memory adopting charges outside the pool", g->index);
                return;
        }
        for (struct gs_allocation *a = ag->node.allocs; a; a = a->next)
                for (uint32_t pi = 0; pi < a->nparts; pi++) {
                        struct gs_part *part = &a->parts[pi];
                        uint64_t num = gs_proc_alloc_num(a);
                        uint32_t n = 0, got;
                        if (part->gpu != g->index || part->gone || a->releasing)
                                continue;
                        for (uint32_t i = 0; i < g->restart.nheld_before; i++)
                                if (g->restart.held_before[i].kind == GS_LEDGER_OUTSIDE &&
                                    g->restart.held_before[i].alloc == num)
                                        slots[n++] = g->restart.held_before[i].slot;
                        if (!n)
                                continue;
                        gs_gpu_lock(g);
                        got = gs_outside_adopt(g, &part->out, part->pa, gs_allocs_outside_slots(&ag->node, part), slots,
                                               n);
                        gs_gpu_unlock(g);
                        log_info("GPU %u: allocation %s: %u of the %u chunks its processes' contexts and modules "
                                 "took outside the pool before the restart charged again",
                                 g->index, a->id, got, n);
                }
        free(slots);
}

void gs_proc_adopt(struct gs_agent *ag)
{
        for (uint32_t gi = 0; gi < ag->node.ngpus; gi++) {
                struct gs_gpu *g = &ag->node.gpus[gi];
                uint32_t lost = 0, made;

                if (!g->pool)
                        continue;
                (void)!gs_gpu_ledger_start(g, ag->node.cfg.state_dir);
                /* What each of the old agent's chunks held, before anything
                 * moves (handed over: its memid; after a crash: nothing). */
                size_t nent = (size_t)g->restart.nheld_before + g->spillrec.nbefore + 1;
                uint64_t *was = calloc(nent, sizeof(*was));
                uint64_t *target = calloc(nent, sizeof(*target));
                uint32_t *chunk = calloc(nent, sizeof(*chunk));
                struct gs_allocation **owner = calloc(nent, sizeof(*owner));
                uint32_t n = 0;
                if (!was || !target || !chunk || !owner) {
                        free(owner);
                        log_error("GPU %u: out of memory adopting processes", g->index);
                        free(was);
                        free(target);
                        free(chunk);
                        gs_gpu_ledger_commit(g);
                        continue;
                }
                for (uint32_t i = 0; i < g->restart.nheld_before && i < g->nchunks; i++)
                        was[i] = gs_chunk_inherited(&g->chunks[i]) ? g->chunks[i].memid : 0;
                gs_proc_adopt_debts(ag, g);
                /* Mapped chunks first: the chunks without memory stand for
                 * what processes map; VMM backing chunks counted the old
                 * agent's fillers too, which died with it. */
                for (uint32_t kind = GS_LEDGER_SLOT; kind <= GS_LEDGER_VMM; kind++)
                        for (uint32_t i = 0; i < g->restart.nheld_before; i++)
                                if (g->restart.held_before[i].kind == kind) {
                                        struct gs_allocation *a = NULL;
                                        uint32_t c = adopt_one(ag, g, &g->restart.held_before[i], &lost, &a);
                                        if (c != UINT32_MAX) {
                                                chunk[n] = c;
                                                owner[n] = a;
                                                target[n++] = was[i];
                                        }
                                }
                /* Slots a move back was taking to the GPU: device memory
                 * until the process says otherwise (gs_proc_spillrest.c). */
                for (uint32_t i = 0; i < g->spillrec.nbefore; i++) {
                        struct gs_ledger_ent e;
                        struct gs_allocation *a = NULL;
                        if (!gs_proc_spill_entry_as_device(g, i, &e))
                                continue;
                        uint32_t c = adopt_one(ag, g, &e, &lost, &a);
                        if (c != UINT32_MAX) {
                                chunk[n] = c;
                                owner[n] = a;
                                target[n++] = 0;
                        }
                }
                gs_gpu_lock(g);
                place_adopted(g, chunk, target, owner, n);
                gs_gpu_unlock(g);
                gs_proc_adopt_spilled(ag, g);
                adopt_outside(ag, g);
                free(owner);
                free(was);
                free(target);
                free(chunk);
                gs_gpu_inherit_settle(g);
                /* Live processes of allocations that are gone hold memory
                 * no allocation pays for: as many chunks without memory
                 * wait, pending, until it is free. */
                gs_gpu_lock(g);
                made = 0;
                for (uint32_t c = 0; c < g->nchunks && made < lost; c++)
                        if (g->chunks[c].fd < 0 && g->chunks[c].state != GS_CHUNK_PENDING &&
                            gs_pool_retire_chunk(g->pool, c) == 0) {
                                g->chunks[c].state = GS_CHUNK_PENDING;
                                g->chunks_pending++;
                                made++;
                        }
                gs_gpu_unlock(g);
                if (lost)
                        log_warn("GPU %u: %u chunks held by live processes of allocations that are gone: pending "
                                 "until they are free",
                                 g->index, lost);
                gs_gpu_ledger_commit(g);
        }
}
