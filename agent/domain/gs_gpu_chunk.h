/* gs_gpu_chunk.h — a GPU's chunk records (part of struct gs_gpu,
 * gs_gpu.h): per chunk of the pool, its memory (handle, exported fd, the
 * agent's mapping), what that memory is (one state), whom it went to.
 * The records are g->chunks[0..g->nchunks), with g->memid_next and
 * g->chunks_made_at_start; the functions here are gs_gpu_chunk.c's (as are
 * gs_gpu.h's device memory and room) and run under g->lock (asserted)
 * unless said otherwise.  A grant's scrub, gs_gpu_chunk_grant, is the
 * scrubbing part's (gs_gpu_scrubber.h). */
#ifndef GS_GPU_CHUNK_H
#define GS_GPU_CHUNK_H

#include <stdbool.h>
#include <stdint.h>

#include "gs_cuda.h"
#include "gs_pool.h"

struct gs_gpu;
struct gs_allocation;

/* Chunks without memory made per usage scan at most (gs_gpu_retry_pending). */
#define GS_GPU_REMAKE_PER_SCAN 4u

/* What a chunk record's memory is, and what must happen to it before it
 * is granted.  Whether it has memory at all is its fd (>= 0); the states
 * are exclusive and each says which:
 *
 *   GS_CHUNK_OURS       made by this agent (fd >= 0), or without memory
 *                       for no process's sake (fd -1: a restart's start,
 *                       a handover, dropped for room): made when needed,
 *                       or filled with a free chunk's (gs_gpu_chunk_fill).
 *   GS_CHUNK_INHERITED  fd >= 0: made by an earlier agent and handed over
 *                       (gs_handover.h); fd is that agent's export,
 *                       handle 0 until the agent needs one.
 *   GS_CHUNK_RECYCLE    fd >= 0: inherited, and a process may still reach
 *                       it through a kept fd: its memory is dropped and
 *                       made anew before anyone gets it.
 *   GS_CHUNK_KEPT       fd -1: taken by a set of its allocation (gs_vmm,
 *                       gs_outside: its memory dropped for a process's
 *                       VMM allocations or contexts), or given back by one
 *                       without memory because the driver had no room: a
 *                       process of the allocation may still hold what
 *                       stands for it.  Never takes another chunk's
 *                       (gs_gpu_chunk_fill): it is made anew or not at all.
 *   GS_CHUNK_PENDING    fd -1: retired from the pool until its memory can
 *                       be re-created (counted in chunks_pending): a
 *                       process may still hold the old memory.  Like KEPT,
 *                       never filled; it may have been KEPT before.
 *
 * Transitions (all under the GPU's lock): dropped (gs_chunk_drop),
 * INHERITED and RECYCLE become OURS; made (gs_chunk_make), KEPT becomes
 * OURS; INHERITED becomes RECYCLE when the processes are adopted
 * (gs_gpu_inherit_settle); OURS becomes KEPT when a set takes it or gives
 * it back without memory (gs_chunkset); OURS or KEPT become PENDING when
 * recycling finds no room (gs_gpu_chunk_recycle, a spill's settling too:
 * charged to the borrower from then on) or a restart holds
 * chunks back (gs_proc_adopt), PENDING becomes OURS once re-created and
 * back in the pool (gs_gpu_retry_pending).  The records trade memory
 * (gs_gpu_chunk_swap, _fill): the state goes with it.
 *
 * One flag stays apart, because it is not what the memory is but a job
 * running on it: scrubbing (the scrubber's batch in flight may still
 * write it), on a chunk with memory in state OURS or INHERITED. */
enum gs_chunk_state {
        GS_CHUNK_OURS = 0,
        GS_CHUNK_INHERITED,
        GS_CHUNK_RECYCLE,
        GS_CHUNK_KEPT,
        GS_CHUNK_PENDING,
};

struct gs_chunk {
        CUmemGenericAllocationHandle handle;
        int fd; /* exported once; -1 without memory */
        enum gs_chunk_state state;
        /* Its fd went to a process of this allocation (NULL: to none, or
         * the allocation is gone).  Main thread writes it at grant time
         * under the GPU's lock. */
        struct gs_allocation *owner;
        /* Names this memory (not the chunk id: records trade memory);
         * 0 without memory.  An upgrade sends each fd once (gs_handover.h). */
        uint64_t memid;
        /* Under the GPU's lock: the id of the last process granted this
         * memory (it may have written it), 0 if none since it was made or
         * scrubbed.  Another process gets it only scrubbed (gs_gpu.h). */
        uint64_t writer;
        /* The agent's own mapping of this memory, for scrubbing: made
         * with it (or on first need, inherited), gone with it; 0: none. */
        CUdeviceptr va;
        /* Under the lock: in the scrubber's batch in flight (its memset
         * may still run): granted to nobody, dropped by nobody, until the
         * batch is done (gs_gpu_scrubber.c gs_gpu_batch_wait). */
        bool scrubbing;
};

/* Whether c's memory is an earlier agent's (INHERITED or RECYCLE). */
static inline bool gs_chunk_inherited(const struct gs_chunk *c)
{
        return c->state == GS_CHUNK_INHERITED || c->state == GS_CHUNK_RECYCLE;
}

/* A chunk without memory takes the memory of a chunk on the system free
 * list (which then has none, made again once the driver has room).  Only
 * for a chunk whose memory is known to be free in the driver and was made
 * into the pool's other chunks (a restart: the old agent's VMM fillers,
 * never exported), or chunks that went without memory for no process's
 * sake (a restart's start, a handover): never for one marked kept, whose
 * process may still hold its memory (taking another's would let it past
 * its quota).  Whether chunk has memory now.  Under g->lock. */
bool gs_gpu_chunk_fill(struct gs_gpu *g, uint32_t chunk);
/* Releases a pool chunk's memory (its fd becomes -1); the chunk stays in the
 * pool's books.  gs_gpu_chunk_remake creates and exports it again (no-op if
 * it has memory).  Both under g->lock with g->ctx current. */
void gs_gpu_chunk_drop(struct gs_gpu *g, uint32_t chunk);
int gs_gpu_chunk_remake(struct gs_gpu *g, uint32_t chunk, char *err, size_t errlen) GS_WUR;
/* Re-creates pending chunks (recycled while their old memory was still
 * held) where the driver has room now, and puts them back in the pool.
 * Under g->lock. */
void gs_gpu_retry_pending(struct gs_gpu *g);
/* a is going: its chunks owe it nothing.  Under g->lock. */
void gs_gpu_forget_owner(struct gs_gpu *g, const struct gs_allocation *a);
/* Under g->lock: the n chunks of gr just granted to process proc of
 * allocation owner, made ready to send: re-created if their memory was
 * given to the driver (-ENOMEM if the driver has no room for one: nothing
 * handed out, err says why), owned by owner, scrubbed if another process
 * may have written them (gs_gpu_chunk_grant).  Their fds in fds[0..n); -1
 * for one that could not be scrubbed (logged; it must not be sent). */
int gs_gpu_chunks_hand_out(struct gs_gpu *g, const struct gs_grant *gr, uint32_t n, struct gs_allocation *owner,
                           uint64_t proc, int *fds, char *err, size_t errlen) GS_WUR;
/* chunk was just placed for a process that already maps its memory (an
 * agent restart): it must have no memory of its own, so it trades its
 * memory with a chunk that has none and is held by nobody.  Under
 * g->lock.  0, or -ENOENT if no such chunk is left (it keeps its memory;
 * the process is charged twice for it until it lets go). */
int gs_gpu_chunk_orphan(struct gs_gpu *g, uint32_t chunk);
/* Chunks a and b trade their memory (records).  Under g->lock. */
void gs_gpu_chunk_swap(struct gs_gpu *g, uint32_t a, uint32_t b);
/* Chunks p holds whose memory the agent does not have: a process maps
 * them from before a restart (the driver counts such memory to the
 * process that maps it, so usage scans subtract them).  Under g->lock. */
uint32_t gs_gpu_orphans_of(struct gs_gpu *g, const struct gs_pproc *p);

#endif
