/* gs_pending.h — restoring the checkpoint (gs_ckpt.h) at start, and its
 * lines not restored yet.  Main thread only.
 *
 * At start the agent re-creates each allocation of the checkpoint.  A line
 * that cannot be restored now (GPU missing or unhealthy, too few free
 * chunks, socket path blocked) stays in the checkpoint: an allocation
 * leaves it only by release.  It is retried every GS_ALLOCS_RETRY_MS (and
 * when the same device IDs are asked for again); meanwhile its units are
 * refused to other allocations and reported (ListGpus units_restoring) so
 * that the plugin advertises them Unhealthy.  A line that does not parse
 * is kept verbatim, never retried, and an allocation whose id it holds is
 * never reclaimed (it may be that allocation's line, garbled).
 *
 * A checkpoint that exists but cannot be read whole leaves the allocations
 * unknown, never empty: an empty set would let the reconciler reclaim every
 * claim's allocation and the next save erase the file.  While unknown,
 * nothing is created or released, the reconciler releases nothing, the
 * file is not written, and every use (and a timer) reads it again; the
 * failure is logged once per streak. */
#ifndef GS_PENDING_H
#define GS_PENDING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gs_allocs.h"

struct gs_allocs_pending {
        struct gs_allocs_pending *next;
        struct gs_ckpt_rec rec;  /* owned; rec.kept: a line that does not parse */
        char why[256];           /* the last reason it could not be restored */
};

/* Reads the checkpoint (migrating v1, v2 and v2's claims file) and
 * re-creates its allocations, logging each one and each that cannot be
 * restored; then writes it as v3 and, once that is on disk, removes v2's
 * claims file.  No file is no allocations.  Returns 0, or the read's
 * negative errno (the allocations are then unknown, see above), or the
 * write's. */
int gs_allocs_restore(struct gs_agent *ag) GS_WUR;
/* 0 if the checkpoint has been read whole, else it is read again (and
 * restored): 0 or the read's negative errno with err naming the file. */
int gs_allocs_known(struct gs_agent *ag, char *err, size_t errlen) GS_WUR;

/* ag->restore_timer's callback (gs_loop.h): reads an unknown checkpoint
 * again, retries the lines not restored yet; every GS_ALLOCS_RETRY_MS while
 * there are any. */
int64_t gs_allocs_tick(void *ag, int64_t now);
/* Releases a line not restored yet, by id, by its exact set of device IDs,
 * or by its claim's UID.  0, -ENOENT (no such line), or a negative errno
 * with err. */
int gs_allocs_release_pending(struct gs_agent *ag, const char *id, const char *const *ids, size_t n,
                              const char *claim_uid, char *err, size_t errlen) GS_WUR;
/* Units of g held by lines not restored yet, into ret_units[max]; returns
 * how many. */
size_t gs_allocs_units_pending(struct gs_agent *ag, const struct gs_gpu *g, uint32_t *ret_units,
                               size_t max);
/* Whether a kept (unparsable) line holds id. */
bool gs_allocs_kept_names(const struct gs_agent *ag, const char *id);

/* ---- for gs_allocs.c ---- */

/* The line holding unit of g, or NULL. */
struct gs_allocs_pending *gs_pending_holding(struct gs_agent *ag, const struct gs_gpu *g, uint32_t unit);
/* The device plugin's line of exactly sorted[0..n), or NULL. */
struct gs_allocs_pending *gs_pending_of_ids(struct gs_agent *ag, char *const *sorted, size_t n);
/* The line of claim uid, or NULL. */
struct gs_allocs_pending *gs_pending_of_claim(struct gs_agent *ag, const char *uid);
/* Creates q's allocation now (q leaves the list), or puts q back with the
 * reason.  As gs_allocs_create. */
int gs_pending_restore(struct gs_agent *ag, struct gs_allocs_pending *q, struct gs_allocation **ret,
                       bool *ret_created, char *err, size_t errlen) GS_WUR;
/* Writes every line not restored yet (gs_ckpt_put). */
void gs_pending_put_all(FILE *f, const struct gs_agent *ag);
/* Frees them all (agent shutdown). */
void gs_pending_free_all(struct gs_agent *ag);

#endif
