/* gs_vmm.h — an application's own VMM allocations (its cuMemCreate calls,
 * GS_OP_VMM_CREATE / GS_OP_VMM_RELEASE in gs_wire.h).
 *
 * The driver maps only whole physical allocations, so a VMM allocation
 * cannot be a piece of a pool chunk: it must be its own allocation of the
 * requested size, created by the agent (which holds all GPU memory).
 *
 * Backing: a create that finds no room takes k whole chunks for the process
 * from its allocation (gs_pproc_malloc of k * chunk_bytes on a pproc of its
 * own, so quota and ballooning apply and the chunks count as held; the
 * chunks are never granted to the hook), releases their memory and, in the
 * same step, creates the VMM allocation of exactly `size` plus a "filler"
 * allocation of the rest, so the freed memory is never left free in the
 * driver for a bypassing process.  Later creates draw from a backing's
 * filler (release it, create the allocation and a smaller filler).  Space
 * is not reused until every allocation of a backing is released; then the
 * filler goes, the chunks are re-created and the block freed.  If that
 * fails (the process still maps the old memory) the backing is kept and
 * retried when the process exits.
 *
 * Every call runs under g->lock with g->ctx made current by the callee. */
#ifndef GS_VMM_H
#define GS_VMM_H

#include "gs_agent.h"

/* At most this many live VMM allocations per process per GPU. */
#define GS_VMM_MAX_PER_PROC 65536u

struct gs_vmm_backing;
struct gs_vmm;

struct gs_vmm_set {
        struct gs_palloc *pa;          /* the allocation part backings come from */
        uint32_t nslots;
        struct gs_pproc *pp;           /* created on first use */
        struct gs_vmm_backing *backings;
        struct gs_vmm *list;
        uint32_t count;
        uint64_t next_id;
};

/* Creates a VMM allocation of size bytes.  *ret_fd is the agent's exported
 * fd (still owned by the set: send a copy, do not close).  -EINVAL (size 0
 * or not a multiple of GS_VMM_ALIGN), -ENOMEM (quota, or too many), or the
 * driver's error. */
int gs_vmm_create(struct gs_gpu *g, struct gs_vmm_set *s, uint64_t size, uint64_t *ret_id,
                  int *ret_fd) GS_WUR;
/* The application released allocation id.  -ENOENT if there is none. */
int gs_vmm_release(struct gs_gpu *g, struct gs_vmm_set *s, uint64_t id) GS_WUR;
/* The process is gone: releases everything, re-creates the chunks, deletes
 * the set's pproc.  The set is empty afterwards. */
void gs_vmm_clear(struct gs_gpu *g, struct gs_vmm_set *s);
/* Adds the set's held chunks and requested bytes to *st (for listings). */
void gs_vmm_stats(const struct gs_vmm_set *s, struct gs_pproc_stats *st);

#endif
