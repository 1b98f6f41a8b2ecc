/* gs_hook_spill.h — the mover (issue 22; common/gs_wire.h item 8): the
 * work of the hook's thread (gs_hook_thread.h) in a process whose agent
 * announced GS_FEAT_SPILL.  When the agent bumped gs_shm.spill (and
 * notified the thread), it asks GS_OP_SPILL for each GPU whose range is
 * reserved, moves the slots the agent names into the memory it sent
 * (GS_SOCK_MOVE, one fd per slot), and answers GS_OP_SPILL_DONE with how
 * many it moved, until the agent names none (at most GS_SPILL_ROUNDS
 * rounds per GPU).
 *
 * A batch's move (gs_spill_move): the launch gate closed (gs_hook_gate.h),
 * every context that may run work on the allocation's GPUs synchronized
 * (the active primary contexts, asked of the driver, never created; the
 * application's own, gs_hook_ctx.c), then, in a context of the chunks'
 * GPU, in groups of GS_SPILL_GROUP slots (a pipeline: the driver's
 * bookkeeping beside the copies, not after them): a group's new memory
 * imported and mapped at its own chunks of a scratch range (GS_MOVE_MAX
 * chunks of VA per GPU, reserved on first use), access to them in one
 * call, the group's copies issued on one stream of the mover's (made for
 * the batch) and an event recorded after them; the next group is
 * prepared while they run.  Then, group by group once its event is
 * done, per slot its old memory retained, unmapped, the new mapped at the
 * slot's address, access set once per run of consecutive slots, while
 * the later groups' copies run; then the stream synchronized and the gate
 * opened; the scratch is unmapped once the batch is answered
 * (GS_OP_SPILL_DONE sent: while the agent settles it).  Nothing is unmapped at a
 * slot before its copy is known done: a slot whose import, scratch
 * mapping or copy fails ends the batch before it (a failed wait for a
 * group: nothing of it or after it moves).  A slot that fails after its old memory was unmapped gets it
 * mapped back (if even that fails the connection is dropped:
 * gs_conn_lost); the slots before it in its run stay moved if their
 * access can be set, else get theirs back too.  What moved is a prefix.
 *
 * Lock order (no thread takes one of these while holding a later one):
 *
 *     gs_conn.mu  ->  gs_ctx_lock  ->  the gate (closed)  ->  the driver
 *
 * The mover takes them in this order.  The application's threads take
 * gs_conn.mu alone (memory calls: alloc, free, info, context charging),
 * gs_ctx_lock alone (cuCtxCreate* records after the driver's call,
 * cuCtxDestroy), or pass the gate alone (the gated wrappers of
 * gs_hook_gate.c call the driver and nothing of the hook's: no gated path
 * takes gs_conn.mu or gs_ctx_lock, so the mover, holding both while it
 * waits for the gate to drain, cannot deadlock with a wrapper).  The mover
 * calls only the real driver (gs_cu), never an interposed function.
 *
 * What it cannot see: work that waits on the host (a kernel spinning on a
 * flag an application thread sets after a memory call, cuStreamWaitValue
 * on a value a gated call would write) keeps the synchronize waiting, and
 * with it the mover and the process's memory calls, until it ends.
 * Contexts made otherwise than through cuCtxCreate* (green contexts) are
 * not synchronized. */
#ifndef GS_HOOK_SPILL_H
#define GS_HOOK_SPILL_H

#include <stdint.h>

#include "gs_hook.h"

/* Rounds of GS_OP_SPILL per GPU and wake-up, at most. */
#define GS_SPILL_ROUNDS 64

/* pre: gs_conn.mu held, a WELCOME that announced GS_FEAT_SPILL taken (a
 * first registration or a reclaim).  Arms the launch gate (the hook's
 * thread, which then serves the moves, is started by its caller,
 * gs_hook_thread.c). */
void gs_spill_start(void);
/* pre: gs_conn.mu held; the hook's thread.  If the agent bumped
 * gs_shm.spill since the last look: the rounds, for every GPU. */
void gs_spill_serve(const struct gs_cu *cu);

/* Where a batch's time went in the mover (GS_OP_SPILL_DONE's arg2, arg3),
 * each a span of its own: the gate closed and the contexts synchronized;
 * new memory imported, mapped at the scratch, access set; copies issued
 * and waited for (what the preparing and remapping beside them did not
 * hide); old memory retained, slots remapped, the scratch let go. */
struct gs_spill_times {
        uint64_t sync_ns, prepare_ns, copy_ns, remap_ns;
};

/* pre: gs_conn.mu held, GPU gi's range reserved, slots[0..k) mapped,
 * distinct, k <= GS_MOVE_MAX.  Moves slot i's data into the memory of
 * fds[i] (a POSIX fd export; or, prep not NULL and prep[i] not
 * UINT32_MAX, the memory prepared ahead with that id, gs_hook_spillprep.h,
 * let go after) and maps that at the slot instead, stopping at the first
 * failure.  Every fd is closed.  Returns how many moved (a
 * prefix); *ret_t (if not NULL): where the time went.  With the gate
 * closed around the whole batch, on this thread. */
uint32_t gs_spill_move(const struct gs_cu *cu, uint32_t gi, const uint32_t *slots, int *fds, const uint32_t *prep,
                       uint32_t k, struct gs_spill_times *ret_t);

#endif
