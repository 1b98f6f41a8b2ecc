/* gs_gpu_scrubber.h — a GPU's scrubbing (part of struct gs_gpu, g->scrub):
 * zeroing memory between processes (gs_gpu_scrub.c) and the background
 * scrubber thread (gs_gpu_scrubber.c).  Every field and function under
 * g->lock (asserted) unless said otherwise. */
#ifndef GS_GPU_SCRUBBER_H
#define GS_GPU_SCRUBBER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "gs_cuda.h"

struct gs_gpu;
struct gs_gsm;

/* The scrubber's batch in flight: a chunk's memory by its mapping (the
 * records may trade memory meanwhile, gs_gpu_chunk_swap). */
struct gs_gpu_scrub_ent {
        CUdeviceptr va;
        uint32_t chunk; /* where it was when queued */
};

/* What scrubbing did since the GPU was opened (gs_gpu_scrub_stats).  The
 * grants_* figures count chunks sent to processes, by what their
 * memory needed first. */
struct gs_gpu_scrub_stats {
        uint64_t grants;
        uint64_t grants_clean;         /* nothing: zeroed before, or fresh */
        uint64_t grants_same;          /* nothing: back to its last writer */
        uint64_t grants_scrubbed_sync; /* zeroed on the request path */
        uint64_t grants_waited;        /* waited for the scrubber's batch */
        uint64_t scrubbed_bg;          /* chunks the scrubber zeroed */
        uint64_t batches_bg;           /* its batches: one wait, one GPU switch each */
        uint64_t failures;             /* scrubs that failed (logged) */
};

/* Each allocation keeps this many free chunks zeroed ahead of a hand-off
 * from one of its processes to another (gs_gsm_scrub_next). */
#define GS_GPU_SCRUB_AHEAD 8u
/* At most this many chunks per batch of the scrubber. */
#define GS_GPU_SCRUB_BATCH 16u
/* Woken, the scrubber lets a burst of releases gather this long: one
 * batch for them, one switch of the GPU to the agent's context. */
#define GS_GPU_SCRUB_GATHER_US 1000
/* After a failed scrub it tries again this much later. */
#define GS_GPU_SCRUB_RETRY_MS 1000

/* The part.  Made with the context; without stream (NULL) every scrub is
 * synchronous on the request path and there is no scrubber. */
struct gs_gpu_scrubber {
        CUstream stream;    /* lowest priority, non-blocking */
        CUevent ev;         /* the scrubber's batch */
        CUevent sync_ev;    /* a scrub under the lock */
        struct gs_gsm *gsm; /* the pool's chunk level, NULL if unknown */
        /* The thread: thr and started written by the main thread only,
         * before it starts and after it ended (gs_gpu_scrub_start, _stop). */
        pthread_t thr;
        bool started;
        /* The rest under the lock. */
        bool stop;
        bool kicked;         /* there may be work: cond signalled */
        pthread_cond_t cond; /* waited on with gs_gpu_cond_wait */
        int64_t retry_ms;    /* after a failure: not before (gs_mono_ms) */
        uint32_t nbatch;     /* chunks in the batch in flight */
        uint32_t batch_failures;
        struct gs_gpu_scrub_ent batch[GS_GPU_SCRUB_BATCH];
        struct gs_gpu_scrub_stats st;
};

/* Scrubbing.  Natively the driver scrubs memory between processes; here
 * all GPU memory belongs to one process, the agent, so the agent scrubs:
 * memory granted to a process holds no other process's data.
 *
 * Every exported allocation is zeroed when gs_gpu_mem_make creates it (the
 * driver may hand the agent back memory a process of another allocation
 * used).  A chunk's memory is granted to a process other than its last
 * writer only zeroed, and only once that zeroing completed.  Most of that
 * is off the request path: the agent keeps each chunk mapped in its own
 * address space for the memory's life, and a scrubber thread per GPU
 * zeroes chunks that processes gave back to their allocation's free list,
 * in batches (one memset each on a lowest-priority stream, one wait for
 * the lot), a few ahead of need (GS_GPU_SCRUB_AHEAD, gs_gsm_scrub_next);
 * the free list hands a process its own chunks back first, then zeroed
 * ones (gs_gsm.h).  A grant that still finds a chunk another process
 * wrote zeroes it there and then (grants_scrubbed_sync); one that finds
 * it in the batch in flight waits for the batch.
 *
 * gs_gpu_scrub zeroes size bytes of allocation h through a mapping of its
 * own (reserve, map, access, cuMemsetD32, wait, unmap, free): no mapping
 * outlives the call (for memory that is not a chunk).  Under g->lock; it
 * makes g->ctx current.  0 or a negative errno with the reason in err. */
int gs_gpu_scrub(struct gs_gpu *g, CUmemGenericAllocationHandle h, uint64_t size, char *err, size_t errlen) GS_WUR;
/* Before chunk is granted to process proc (its id, not 0): zeroed if
 * another process may have written it.  Under g->lock. */
int gs_gpu_chunk_grant(struct gs_gpu *g, uint32_t chunk, uint64_t proc, char *err, size_t errlen) GS_WUR;
/* A copy of the scrubbing figures.  Takes g->lock. */
void gs_gpu_scrub_stats(struct gs_gpu *g, struct gs_gpu_scrub_stats *ret);

#endif
