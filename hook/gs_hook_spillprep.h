/* gs_hook_spillprep.h — host memory prepared ahead of the mover's moves
 * (common/gs_wire.h item 8, GS_FEAT_SPILL_PREP; docs/burst.md "Giving it
 * back"): what the agent sends with GS_OP_SPILL_PREP before any owner
 * asks is imported and mapped, with access, at a chunk of a scratch range
 * of its own (GS_PREP_MAX chunks of VA per GPU, reserved on first use)
 * and kept by its id until a move names it (GS_SOCK_MOVE_PREP): the
 * batch then only copies into it and remaps, the driver's import and
 * mapping done already.  Everything here is under gs_conn.mu, on the
 * hook's thread (the mover). */
#ifndef GS_HOOK_SPILLPREP_H
#define GS_HOOK_SPILLPREP_H

#include <stdint.h>

#include "gs_hook.h"

/* pre: gs_conn.mu held, connection UP, GS_FEAT_SPILL_PREP; dev is GPU
 * gi's device.  Asks GS_OP_SPILL_PREP for gi until the agent sends
 * nothing more (a bounded number of rounds) and prepares what it sends;
 * lets all of it go when the agent says it is not needed.  A memory that
 * cannot be prepared is let go (a move naming it fails at its slot). */
void gs_spill_prep_serve(const struct gs_cu *cu, uint32_t gi, CUdevice dev);
/* pre: gs_conn.mu held.  Prepared memory id on GPU gi: its handle and its
 * scratch address.  0, or -ENOENT. */
int gs_spill_prep_find(uint32_t gi, uint32_t id, CUmemGenericAllocationHandle *ret_h, CUdeviceptr *ret_va);
/* pre: gs_conn.mu held.  id's memory on gi unmapped from the scratch and
 * its handle released (a move named it: a slot that moved maps it). */
void gs_spill_prep_forget(const struct gs_cu *cu, uint32_t gi, uint32_t id);
/* pre: gs_conn.mu held.  All of it let go: a new connection (another
 * agent, or the same taking it back). */
void gs_spill_prep_drop_all(const struct gs_cu *cu);
/* A fork child: nothing of it is the child's (no release). */
void gs_spill_prep_child(void);
/* pre: gs_conn.mu held.  How many are prepared on GPU gi. */
uint32_t gs_spill_prep_count(uint32_t gi);

#endif
