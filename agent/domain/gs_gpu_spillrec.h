/* gs_gpu_spillrec.h — a GPU's spill record (part of struct gs_gpu,
 * g->spillrec.rec; gs_gpu_spillrec.c; docs/burst.md "Agent restarts"):
 * spilled slots, moves in flight and debts, for a restarted agent.
 * Every field and function under g->lock unless said otherwise. */
#ifndef GS_GPU_SPILLREC_H
#define GS_GPU_SPILLREC_H

#include <stdbool.h>
#include <stdint.h>

#include "gs_ledger.h"
#include "gs_pool.h"

struct gs_gpu;

/* The part: one entry per spare, then ndebt for the allocations owed
 * chunks; on while this agent writes it (open, not paused by a
 * handover).  before: the previous agent's entries (nbefore) until the
 * processes are restored. */
struct gs_gpu_spillrec {
        struct gs_ledger rec;
        bool on;
        uint32_t ndebt;
        struct gs_ledger_ent *before;
        uint32_t nbefore;
};

/* The previous agent's record (g->spillrec.rec.before) says, per process slot,
 * whether its data was in host memory (GS_LEDGER_SLOT) or in a move
 * (GS_LEDGER_SPILLING, GS_LEDGER_UNSPILLING), and which allocations were
 * owed how many chunks (GS_LEDGER_OWED, alloc and count in slot).
 * gs_gpu_spillrec_done frees it once the processes are restored. */
void gs_gpu_spillrec_done(struct gs_gpu *g);
/* Under g->lock, before anything is adopted: each allocation owed chunks
 * before lends its own first again (gs_palloc_lent_before); tag_of gives
 * the allocation's part on g with that number, or NULL. */
void gs_gpu_spillrec_debts_adopt(struct gs_gpu *g, struct gs_palloc *(*pa_of)(void *ctx, uint64_t alloc), void *ctx);

#endif
