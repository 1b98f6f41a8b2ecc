/* gs_serve_move.h — the agent's side of moves (gs_serve_move.c). */
#ifndef GS_SERVE_MOVE_H
#define GS_SERVE_MOVE_H

#include <stdbool.h>

#include "gs_proc.h"

/* Whether a's processes get GS_FEAT_SPILL: a GPU of it has spares
 * (spillMax) and it may borrow there. */
bool gs_move_feature(const struct gs_agent *ag, const struct gs_allocation *a);
/* GS_OP_SPILL and GS_OP_SPILL_DONE (a worker, the process's turn). */
int gs_serve_spill(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req, struct gs_ring_msg *rep);
int gs_serve_spill_done(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req,
                        struct gs_ring_msg *rep);
/* A request of p on its GPU gi for bytes failed for want of memory: if
 * its allocation is owed chunks there, the owed ones it needs are wanted
 * back (the main thread asks the movers, gs_move_kick).  Whether so. */
bool gs_move_want(struct gs_proc *p, uint32_t gi, uint64_t bytes);
/* Main thread: the movers of processes that hold what is wanted back, or
 * hold spilled chunks while the GPU has chunks to lend, are woken. */
void gs_move_kick(struct gs_agent *ag);

#endif
