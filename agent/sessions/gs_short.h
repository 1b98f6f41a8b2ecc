/* gs_short.h — a request short of memory (docs/design.md "Short of
 * memory"): what the agent does when a process's request finds too few
 * chunks for it, in one place.
 *
 * In order of cost:
 *  1. give-back: the allocation's other processes are asked for the chunks
 *     they hold without a live block (their segment's give_back bumped,
 *     their hook's thread notified); the asking process's hook gives back
 *     its own (GS_OP_GIVE_BACK) and tries again;
 *  2. take-back: chunks of the allocation's quota lent to borrowers
 *     (docs/burst.md) are wanted back: the borrowers' movers spill them to
 *     host memory (GS_OP_SPILL, gs_serve_spill.c);
 *  3. the last resort (reclaimKillAfter): an owner that has waited that long
 *     for lent memory that cannot be spilled has the biggest borrower killed.
 * Spilled chunks come back to the GPU (a move back) when it has memory to
 * lend again.
 *
 * The entry point of the request path is gs_short_request (a worker).  The
 * main loop acts in one place, the kick (give-back asks of the marked
 * parts, the last resort when due, borrowers' movers woken), which runs
 * once after a batch in which anything asked for it: a worker's short
 * request (an async source of the loop), a change Watch clients see
 * (lending changed, a move done, a process gone: gs_agent_changed) or a
 * usage scan (gs_short_kick).  A worker that asked waits for a kick begun
 * after it asked, on the agent's done_cv, never in naps.
 *
 * The domain's books stay in the domain: a part's give_back_wanted and
 * others_asked (gs_allocs.h), the GPU's wants and spills (gs_gpu_spill.h).
 * Memory measured outside the pool past a quota (overQuota) is the usage
 * scan's (gs_usage.h), which asks for give-back through
 * gs_short_ask_give_back. */
#ifndef GS_SHORT_H
#define GS_SHORT_H

#include <stdbool.h>
#include <stdint.h>

#include "gs_loop.h"

struct gs_agent;
struct gs_allocation;
struct gs_proc;
struct gs_ring_msg;

/* How long a request short of memory waits for the main loop's kick. */
#define GS_GIVE_BACK_WAIT_MS 20

/* The agent's part (struct gs_agent's shortmem). */
struct gs_short {
        struct gs_loop_async async; /* a worker asks for the kick */
        struct gs_loop_post post;   /* the kick, once after the batch */
        unsigned started;           /* atomic: kicks begun */
        unsigned kicks;             /* atomic: kicks done (gs_agent_count) */
};

/* Main thread, after gs_agent_wire: adds the loop's source for the
 * workers' asks. */
void gs_short_wire(struct gs_agent *ag);
/* A worker: p's request req was served into rep, r what its server
 * returned; returned is gs_palloc_returned of the request's part read
 * before it was served.  When rep says out of memory (-ENOMEM), memory is
 * asked for (give-back, take-back: above) and rep->others_asked tells the
 * hook whether to wait and try again (gs_wire.h).  Returns r. */
int gs_short_request(struct gs_proc *p, const struct gs_ring_msg *req, struct gs_ring_msg *rep, int r,
                     uint32_t returned);
/* Main thread: the kick runs once after the current batch (gs_loop_post). */
void gs_short_kick(struct gs_agent *ag);
/* Main thread, under the part's GPU's lock: each served process of
 * allocation a holding a chunk with no live block on its part i has its
 * segment's give_back bumped and its hook's thread notified; the hook
 * gives them back at once (gs_wire.h, GS_FEAT_GIVEBACK).  How many were
 * asked. */
uint32_t gs_short_ask_give_back(struct gs_allocation *a, uint32_t i);
/* Main thread: every process holding borrowed chunks is asked for those
 * it holds without a live block; they go back to the system list.  For a
 * create that found too few free chunks (gs_ctlsrv).  Returns the chunks
 * lent on all GPUs (0: nothing to ask for). */
uint32_t gs_short_ask_borrowers(struct gs_agent *ag);

#endif
