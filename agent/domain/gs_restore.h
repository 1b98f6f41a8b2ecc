/* gs_restore.h — restoring the checkpoint (gs_ckpt.h): at start, on the
 * retry timer, and at the door of every create and release.  Main thread
 * only.
 *
 * At start the agent re-creates each allocation of the checkpoint.  A line
 * that cannot be restored now stays in the checkpoint, in the table of
 * lines not restored yet (gs_pending.h): it is retried every
 * GS_ALLOCS_RETRY_MS, and when the same device IDs are asked for again.
 *
 * A checkpoint that exists but cannot be read whole leaves the allocations
 * unknown, never empty: an empty set would let the reconciler release every
 * claim's allocation and the next save erase the file.  While unknown,
 * nothing is created or released, the reconciler releases nothing, the
 * file is not written, and every use (and a timer) reads it again; the
 * failure is logged once per streak.  Hence every create and release goes
 * through here (gs_restore_create, gs_restore_release_claim, or
 * gs_restore_known first), above gs_allocs.h, which calls nothing here. */
#ifndef GS_RESTORE_H
#define GS_RESTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gs_allocs.h"

/* Reads the checkpoint (migrating v1, v2 and v2's claims file) and
 * re-creates its allocations, logging each one and each that cannot be
 * restored; then writes it as v3 and, once that is on disk, removes v2's
 * claims file.  No file is no allocations.  Returns 0, or the read's
 * negative errno (the allocations are then unknown, see above), or the
 * write's. */
int gs_restore_start(struct gs_node *ag) GS_WUR;
/* 0 if the checkpoint has been read whole, else it is read again (and
 * restored): 0 or the read's negative errno with err naming the file. */
int gs_restore_known(struct gs_node *ag, char *err, size_t errlen) GS_WUR;

/* ag->restore_timer's callback (gs_loop.h): reads an unknown checkpoint
 * again, retries the lines not restored yet; every GS_ALLOCS_RETRY_MS while
 * there are any. */
int64_t gs_restore_tick(void *ag, int64_t now);

/* gs_allocs_create for a new request (req->restore NULL): the
 * allocations known first (gs_restore_known); a request for exactly the
 * device IDs of a line not restored yet restores that line now.  As
 * gs_allocs_create. */
int gs_restore_create(struct gs_node *ag, const struct gs_alloc_req *req, struct gs_allocation **ret, bool *ret_created,
                      char *err, size_t errlen) GS_WUR;
/* Releases the allocation of claim uid (gs_allocs_release_claim), or its
 * line if it waits to be restored; the allocations known first.  0 also
 * when the claim has none (idempotent). */
int gs_restore_release_claim(struct gs_node *ag, const char *uid, char *err, size_t errlen) GS_WUR;
/* Releases a line not restored yet, by id, by its exact set of device IDs,
 * or by its claim's UID.  0, -ENOENT (no such line), or a negative errno
 * with err. */
int gs_restore_release_pending(struct gs_node *ag, const char *id, const char *const *ids, size_t n,
                               const char *claim_uid, char *err, size_t errlen) GS_WUR;

#endif
