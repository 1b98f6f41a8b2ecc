/* gs_gpu_scrub.c — zeroing memory (gs_gpu.h "Scrubbing"): the agent's
 * mappings of memory and of its chunks, memsets on the scrub stream and
 * the waits for them, the background scrubber's batch in flight as the
 * rest of the GPU sees it (done, waited for), and a chunk zeroed before a
 * grant to a process other than its last writer.  The scrubber thread
 * that fills the batches: gs_gpu_scrubber.c. */
#include "gs_gpu_int.h"

#include <errno.h>
#include <stdio.h>

#include "gs_gsm.h"
#include "gs_log.h"

/* Queues the zeroing of [va, va + size) on the scrub stream (without
 * one: on the legacy stream, waited for by gs_gpu_scrub_sync). */
int gs_gpu_scrub_queue(struct gs_gpu *g, CUdeviceptr va, uint64_t size, char *err, size_t errlen)
{
        gs_gpu_assert_locked(g);
        const struct gs_cuda *cu = &g->node->cu;

        if (!g->scrub.stream)
                return gs_cuda_check(cu, cu->memset_d32(va, 0, size / 4), "scrub: cuMemsetD32", err, errlen);
        return gs_cuda_check(cu, cu->memset_d32_async(va, 0, size / 4, g->scrub.stream), "scrub: cuMemsetD32Async", err,
                             errlen);
}

/* Waits, under g->lock, for everything queued on the scrub stream so far.
 * The event blocks the thread: a spinning wait is what cost the agent its
 * CPU (cuCtxSynchronize under the default scheduling). */
int gs_gpu_scrub_sync(struct gs_gpu *g, char *err, size_t errlen)
{
        gs_gpu_assert_locked(g);
        const struct gs_cuda *cu = &g->node->cu;
        int r;

        if (!g->scrub.stream)
                return gs_cuda_check(cu, cu->ctx_synchronize(), "scrub: cuCtxSynchronize", err, errlen);
        r = gs_cuda_check(cu, cu->event_record(g->scrub.sync_ev, g->scrub.stream), "scrub: cuEventRecord", err, errlen);
        if (r == 0)
                r = gs_cuda_check(cu, cu->event_synchronize(g->scrub.sync_ev), "scrub: cuEventSynchronize", err,
                                  errlen);
        return r;
}

/* Maps size bytes of h at a fresh address of the agent's, read-write on g. */
int gs_gpu_map_new(struct gs_gpu *g, CUmemGenericAllocationHandle h, uint64_t size, CUdeviceptr *ret_va, char *err,
                   size_t errlen)
{
        gs_gpu_assert_locked(g);
        const struct gs_cuda *cu = &g->node->cu;
        CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)g->dev },
                                .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        CUdeviceptr va = 0;
        int r;

        r = gs_cuda_check(cu, cu->mem_address_reserve(&va, size, 0, 0, 0), "scrub: cuMemAddressReserve", err, errlen);
        if (r < 0)
                return r;
        r = gs_cuda_check(cu, cu->mem_map(va, size, 0, h, 0), "scrub: cuMemMap", err, errlen);
        if (r < 0) {
                (void)cu->mem_address_free(va, size);
                return r;
        }
        r = gs_cuda_check(cu, cu->mem_set_access(va, size, &acc, 1), "scrub: cuMemSetAccess", err, errlen);
        if (r < 0) {
                (void)cu->mem_unmap(va, size);
                (void)cu->mem_address_free(va, size);
                return r;
        }
        *ret_va = va;
        return 0;
}

void gs_gpu_unmap_va(struct gs_gpu *g, CUdeviceptr va, uint64_t size)
{
        gs_gpu_assert_locked(g);
        (void)g->node->cu.mem_unmap(va, size);
        (void)g->node->cu.mem_address_free(va, size);
}

int gs_gpu_scrub(struct gs_gpu *g, CUmemGenericAllocationHandle h, uint64_t size, char *err, size_t errlen)
{
        gs_gpu_assert_locked(g);
        CUdeviceptr va = 0;
        int r;

        if (size == 0 || size % 4)
                return 0;
        r = gs_cuda_check(&g->node->cu, g->node->cu.ctx_set_current(g->ctx), "scrub: cuCtxSetCurrent", err, errlen);
        if (r == 0)
                r = gs_gpu_map_new(g, h, size, &va, err, errlen);
        if (r < 0)
                return r;
        r = gs_gpu_scrub_queue(g, va, size, err, errlen);
        /* Done before anyone may map it, and before the mapping goes. */
        if (r == 0)
                r = gs_gpu_scrub_sync(g, err, errlen);
        gs_gpu_unmap_va(g, va, size);
        return r;
}

/* An inherited chunk's handle, imported from its fd on first need. */
int gs_chunk_handle(struct gs_gpu *g, struct gs_chunk *c, char *err, size_t errlen)
{
        gs_gpu_assert_locked(g);
        if (c->handle)
                return 0;
        return gs_cuda_check(
                &g->node->cu,
                g->node->cu.mem_import(&c->handle, (void *)(intptr_t)c->fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                "cuMemImportFromShareableHandle", err, errlen);
}

/* The agent's mapping of c's memory, made on first need (an inherited
 * chunk's, or after a failure). */
int gs_chunk_map(struct gs_gpu *g, struct gs_chunk *c, char *err, size_t errlen)
{
        gs_gpu_assert_locked(g);
        int r;

        if (c->va)
                return 0;
        r = gs_chunk_handle(g, c, err, errlen);
        return r < 0 ? r : gs_gpu_map_new(g, c->handle, g->chunk_bytes, &c->va, err, errlen);
}

/* The record now holding the memory mapped at va (at hint unless it
 * traded it), or UINT32_MAX. */
static uint32_t chunk_of_va(const struct gs_gpu *g, uint32_t hint, CUdeviceptr va)
{
        if (hint < g->nchunks && g->chunks[hint].va == va)
                return hint;
        for (uint32_t i = 0; i < g->nchunks; i++)
                if (g->chunks[i].va == va)
                        return i;
        return UINT32_MAX;
}

/* Under g->lock: the scrubber's batch in flight completed (ok) or failed;
 * either thread that saw it end says so, once.  Its chunks hold no
 * process's data now: clean for the pool (to the head of their free
 * list).  A record may have traded its memory meanwhile: the memory is
 * found by its mapping, which lives at least as long as the batch. */
void gs_gpu_batch_done(struct gs_gpu *g, bool ok, const char *why)
{
        gs_gpu_assert_locked(g);
        for (uint32_t i = 0; i < g->scrub.nbatch; i++) {
                uint32_t id = chunk_of_va(g, g->scrub.batch[i].chunk, g->scrub.batch[i].va);
                if (id == UINT32_MAX || !g->chunks[id].scrubbing)
                        continue;
                g->chunks[id].scrubbing = false;
                if (!ok)
                        continue;
                g->chunks[id].writer = 0;
                g->scrub.st.scrubbed_bg++;
                if (g->scrub.gsm)
                        gs_gsm_clean(g->scrub.gsm, id);
        }
        if (!ok && g->scrub.nbatch) {
                g->scrub.st.failures += g->scrub.nbatch;
                g->scrub.retry_ms = gs_mono_ms() + GS_GPU_SCRUB_RETRY_MS;
                uint32_t nf = ++g->scrub.batch_failures;
                if (!(nf & (nf - 1))) /* said at 1, 2, 4, ... failed batches */
                        log_warn("GPU %u: %u chunks not scrubbed in the background (zeroed when granted; %u "
                                 "failed batches): %s",
                                 g->index, g->scrub.nbatch, g->scrub.batch_failures, why);
        }
        g->scrub.nbatch = 0;
}

/* Under g->lock: waits for the scrubber's batch in flight, if any.  The
 * lock is kept: nothing changes under the caller (the scrubber records
 * no new batch without it). */
void gs_gpu_batch_wait(struct gs_gpu *g)
{
        gs_gpu_assert_locked(g);
        char why[200];
        int r;

        if (!g->scrub.nbatch)
                return;
        r = gs_cuda_check(&g->node->cu, g->node->cu.event_synchronize(g->scrub.ev), "scrub: cuEventSynchronize", why,
                          sizeof(why));
        gs_gpu_batch_done(g, r == 0, why);
}

void gs_chunk_unmap(struct gs_gpu *g, struct gs_chunk *c)
{
        gs_gpu_assert_locked(g);
        if (c->scrubbing)
                gs_gpu_batch_wait(g); /* its memset must not outlive the mapping */
        if (c->va)
                gs_gpu_unmap_va(g, c->va, g->chunk_bytes);
        c->va = 0;
        c->scrubbing = false;
}

/* Under g->lock, before chunk c goes to process proc: its memory holds no
 * other process's data once what it queued (*queued) is waited for.
 * The batch in flight is waited for if c is in it. */
int gs_gpu_grant_prepare(struct gs_gpu *g, struct gs_chunk *c, uint64_t proc, bool *queued, char *err, size_t errlen)
{
        gs_gpu_assert_locked(g);
        int r;

        g->scrub.st.grants++;
        if (c->scrubbing) {
                gs_gpu_batch_wait(g);
                if (c->writer == 0) {
                        g->scrub.st.grants_waited++;
                        return 0;
                }
        }
        if (c->writer == 0) {
                g->scrub.st.grants_clean++;
                return 0;
        }
        if (c->writer == proc) {
                g->scrub.st.grants_same++;
                return 0;
        }
        r = gs_cuda_check(&g->node->cu, g->node->cu.ctx_set_current(g->ctx), "scrub: cuCtxSetCurrent", err, errlen);
        if (r == 0)
                r = gs_chunk_map(g, c, err, errlen);
        if (r == 0)
                r = gs_gpu_scrub_queue(g, c->va, g->chunk_bytes, err, errlen);
        if (r < 0) {
                g->scrub.st.failures++;
                return r;
        }
        g->scrub.st.grants_scrubbed_sync++;
        *queued = true;
        return 0;
}

/* What gs_gpu_grant_prepare queued is done (the batch before it on the stream
 * too). */
int gs_gpu_grant_wait(struct gs_gpu *g, char *err, size_t errlen)
{
        gs_gpu_assert_locked(g);
        int r = gs_gpu_scrub_sync(g, err, errlen);

        if (r == 0 && g->scrub.nbatch && g->scrub.stream)
                gs_gpu_batch_done(g, true, NULL); /* ahead on the same stream */
        return r;
}

int gs_gpu_chunk_grant(struct gs_gpu *g, uint32_t chunk, uint64_t proc, char *err, size_t errlen)
{
        gs_gpu_assert_locked(g);
        struct gs_chunk *c;
        bool queued = false;
        int r;

        if (chunk >= g->nchunks || g->chunks[chunk].fd < 0) {
                snprintf(err, errlen, "chunk %u has no memory", chunk);
                return -EINVAL;
        }
        c = &g->chunks[chunk];
        r = gs_gpu_grant_prepare(g, c, proc, &queued, err, errlen);
        if (r == 0 && queued)
                r = gs_gpu_grant_wait(g, err, errlen);
        if (r < 0)
                return r;
        c->writer = proc;
        return 0;
}

void gs_gpu_scrub_stats(struct gs_gpu *g, struct gs_gpu_scrub_stats *ret)
{
        gs_gpu_lock(g);
        *ret = g->scrub.st;
        gs_gpu_unlock(g);
}

/* gs_gsm's kick, under g->lock: a dirty chunk came back to a free list or
 * a clean one left it. */
void gs_gpu_scrub_kick(void *ctx)
{
        struct gs_gpu *g = ctx;
        gs_gpu_assert_locked(g);

        if (!g->scrub.kicked) {
                g->scrub.kicked = true;
                pthread_cond_signal(&g->scrub.cond);
        }
}
