/* gs_vmm.h — an application's own VMM allocations (its cuMemCreate calls,
 * GS_OP_VMM_CREATE / GS_OP_VMM_RELEASE in gs_wire.h).
 *
 * The driver maps only whole physical allocations, so a VMM allocation
 * cannot be a piece of a pool chunk: it must be its own allocation of the
 * requested size, created by the agent (which holds all GPU memory).
 *
 * A set (one process, one GPU) holds whole pool chunks taken for it from
 * its allocation (gs_pproc_malloc of chunk_bytes on a pproc of its own, so
 * quota and ballooning apply and the chunks count as held; they are never
 * granted to the hook).  Their memory is released and stands for the set's
 * bytes: T = held chunks * chunk_bytes.  Of T, L bytes are live VMM
 * allocations and the rest is covered by "fillers", allocations the agent
 * makes and never exports, so the memory is never left free in the driver
 * for a bypassing process.  Physical allocations have no address until
 * mapped, so the free bytes have no position either: any create of at most
 * T - L bytes fits, whatever was released before (no fragmentation).
 *
 *   create s   drop fillers worth >= s (taking ceil((s - free) / chunk)
 *              more chunks first if T - L < s, their memory dropped), create
 *              the allocation, a filler for the remainder
 *   release s  drop it, a filler of s in its place
 *   settle     after either: cover pending bytes if the driver has room
 *              for them; while the free bytes (not pending) reach two
 *              chunks (or all of T once nothing is live), drop a chunk's
 *              worth of fillers, re-create a pool chunk and give it back
 *
 * Released bytes (pending, below) are not free for the set: the process
 * was sent their fd and may keep it.  create and settle count only
 * T - L - pending, so what a process keeps stays charged to its allocation
 * (held, and in the ledger) until a filler takes its place or the process
 * is gone, whatever the order of creates, releases and allocations.
 *
 * The debt D = T - L - fillers is normally 0.  It is not when a filler
 * could not be made; "pending" bytes of it were released by the
 * application, which may still map them (the driver keeps mapped memory
 * alive), so a filler for them can fail while it does; the rest was
 * dropped by the agent itself and is known to be free.  Every operation
 * first tries to cover the debt again (the whole, else as much as the
 * driver has room for: pending bytes count as free only that far).  A
 * chunk that cannot be re-created stays in the set and is retried by the
 * next operation; at exit (the process is gone) a chunk still failing goes
 * back to the allocation without memory: it is re-created when next granted (serve_alloc refuses
 * the request if the driver has no room yet) or recycled, pending, when the
 * allocation is deleted; it is never lost from the pool.
 *
 * Every call runs under g->lock (gs_gpu_lock, which makes g->ctx current;
 * asserted). */
#ifndef GS_VMM_H
#define GS_VMM_H

#include "gs_node.h"
#include "gs_chunkset.h"
#include "gs_pool.h"

/* At most this many live VMM allocations per process per GPU. */
#define GS_VMM_MAX_PER_PROC 65536u
/* Fillers per set before they are merged into one. */
#define GS_VMM_MAX_FILLERS 64u

struct gs_vmm;
struct gs_vmm_filler;

/* Zeroed, then pa and nslots set, by the owner. */
struct gs_vmm_set {
        struct gs_palloc *pa; /* the allocation part chunks come from */
        uint32_t nslots;
        struct gs_chunkset cs; /* chunks held: T = cs.nheld * chunk_bytes */
        struct gs_vmm_filler *fillers;
        uint32_t nfillers;
        uint64_t live_bytes; /* L */
        uint64_t filler_bytes;
        uint64_t pending; /* of the debt: released, maybe still mapped */
        struct gs_vmm *list;
        uint32_t count;
        uint64_t next_id;
};

/* Creates a VMM allocation of size bytes.  *ret_fd is the agent's exported
 * fd (still owned by the set: send a copy, do not close).  -EINVAL (size 0
 * or not a multiple of GS_VMM_ALIGN), -ENOMEM (quota, or too many), or the
 * driver's error. */
int gs_vmm_create(struct gs_gpu *g, struct gs_vmm_set *s, uint64_t size, uint64_t *ret_id, int *ret_fd) GS_WUR;
/* The application released allocation id.  -ENOENT if there is none. */
int gs_vmm_release(struct gs_gpu *g, struct gs_vmm_set *s, uint64_t id) GS_WUR;
/* The process is gone: releases everything, re-creates the chunks, deletes
 * the set's pproc.  The set is empty afterwards (pa and nslots kept). */
void gs_vmm_clear(struct gs_gpu *g, struct gs_vmm_set *s);
/* Adds the set's held chunks and requested bytes to *st (for listings). */
void gs_vmm_stats(const struct gs_vmm_set *s, struct gs_pproc_stats *st);
/* The set's books against each other (T = L + fillers + debt, pending <=
 * debt, counts).  0 or -EUCLEAN with the reason in why. */
int gs_vmm_validate(const struct gs_gpu *g, const struct gs_vmm_set *s, char *why, size_t whylen) GS_WUR;

#endif
