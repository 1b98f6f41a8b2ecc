/* gs_pending.h — the checkpoint's lines not restored yet: a table of
 * checkpoint lines (gs_ckpt.h) that gs_restore.h could not re-create, and
 * what each holds.  Main thread only.
 *
 * A line that cannot be restored now (GPU missing or unhealthy, too few
 * free chunks, socket path blocked) stays here, and in the checkpoint: an
 * allocation leaves it only by release.  gs_restore.h retries it; meanwhile
 * its units are refused to other allocations (gs_allocs.c asks here) and
 * reported (ListGpus units_restoring) so that the plugin advertises them
 * Unhealthy.  A line that does not parse is kept verbatim, never retried,
 * and an allocation whose id it holds is never reclaimed (it may be that
 * allocation's line, garbled).
 *
 * This table calls nothing of gs_allocs.h nor gs_restore.h: they call it. */
#ifndef GS_PENDING_H
#define GS_PENDING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gs_ckpt.h"

struct gs_node;
struct gs_gpu;

struct gs_pending {
        struct gs_pending *next;
        struct gs_ckpt_rec rec; /* owned; rec.kept: a line that does not parse */
        char why[256];          /* the last reason it could not be restored */
};

/* Keeps rec (moved into the table, rec left zeroed) as a line not restored,
 * at the end (lines are written back in the order read), with why; arms
 * ag->restore_timer for a line that parses.  0 or -ENOMEM. */
int gs_pending_keep(struct gs_node *ag, struct gs_ckpt_rec *rec, const char *why) GS_WUR;
/* Takes q out of the table (q stays valid). */
void gs_pending_unlink(struct gs_node *ag, struct gs_pending *q);
/* Puts q, taken out, back at the head of the table. */
void gs_pending_push(struct gs_node *ag, struct gs_pending *q);
/* Frees q, taken out (NULL: nothing). */
void gs_pending_free(struct gs_pending *q);

/* The line holding unit of g, or NULL. */
struct gs_pending *gs_pending_holding(struct gs_node *ag, const struct gs_gpu *g, uint32_t unit);
/* The device plugin's line of exactly sorted[0..n), or NULL. */
struct gs_pending *gs_pending_of_ids(struct gs_node *ag, char *const *sorted, size_t n);
/* The line of claim uid, or NULL. */
struct gs_pending *gs_pending_of_claim(struct gs_node *ag, const char *uid);
/* The line (one that parses) of allocation id, or NULL. */
struct gs_pending *gs_pending_of_id(struct gs_node *ag, const char *id);
/* Units of g held by lines not restored yet, into ret_units[max]; returns
 * how many. */
size_t gs_pending_units(struct gs_node *ag, const struct gs_gpu *g, uint32_t *ret_units, size_t max);
/* Whether a kept (unparsable) line holds id. */
bool gs_pending_kept_names(const struct gs_node *ag, const char *id);

/* Writes every line not restored yet (gs_ckpt_put). */
void gs_pending_put_all(FILE *f, const struct gs_node *ag);
/* Frees them all (agent shutdown). */
void gs_pending_free_all(struct gs_node *ag);

#endif
