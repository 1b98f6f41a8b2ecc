/* gs_serve_spill.h — a process's mover served (gs_serve_spill.c). */
#ifndef GS_SERVE_SPILL_H
#define GS_SERVE_SPILL_H

#include <stdbool.h>

#include "gs_proc.h"

/* Whether a's processes get GS_FEAT_SPILL: a GPU of it has spares
 * (spillMax) and it may borrow there. */
bool gs_spill_feature(const struct gs_agent *ag, const struct gs_allocation *a);
/* GS_OP_SPILL and GS_OP_SPILL_DONE (a worker, the process's turn). */
int gs_serve_spill(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req, struct gs_ring_msg *rep);
int gs_serve_spill_done(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req,
                        struct gs_ring_msg *rep);
/* After the reply to a GS_OP_SPILL_DONE that chained the next batch
 * (GS_MOVE_CHAIN) is out, or failed to go: the batch it answered settled
 * (the same worker's turn, before the process may be torn down). */
void gs_serve_spill_settle(struct gs_proc *p);
/* GS_OP_SPILL_PREP (a worker, the process's turn): host memory ahead of
 * the process's moves, or word that what it prepared is not needed. */
int gs_serve_spill_prep(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req,
                        struct gs_ring_msg *rep);

#endif
