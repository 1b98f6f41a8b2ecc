/* gs_gpu.c — see gs_gpu.h. */
#include "gs_gpu.h"

#include "gs_allocs.h"

#include <ctype.h>
#include <errno.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gs_gsm.h"
#include "gs_log.h"

int gs_gpu_numa_node(const char *sysfs, const char *pci_bus_id)
{
        char path[PATH_MAX], id[64], buf[32];
        size_t i;
        int fd, node = -1;
        ssize_t n;

        for (i = 0; pci_bus_id[i] && i < sizeof(id) - 1; i++)
                id[i] = (char)tolower((unsigned char)pci_bus_id[i]);
        id[i] = '\0';
        if (snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/numa_node", sysfs, id) >=
            (int)sizeof(path))
                return -1;
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return -1;
        buf[n] = '\0';
        if (sscanf(buf, "%d", &node) != 1 || node < -1 || node > 4095)
                return -1;
        return node;
}

static void chunk_prop(const struct gs_gpu *g, CUmemAllocationProp *prop)
{
        memset(prop, 0, sizeof(*prop));
        prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop->location.id = (int)g->dev;
}

int gs_gpu_room(struct gs_gpu *g, uint64_t bytes, char *err, size_t errlen)
{
        const struct gs_cuda *cu = &g->agent->cu;
        size_t free_b = 0, total_b = 0;
        uint64_t need = g->reserve_bytes + g->ctx_promised;

        if (cu->mem_get_info(&free_b, &total_b) != CUDA_SUCCESS) {
                snprintf(err, errlen, "cuMemGetInfo failed");
                return -EIO;
        }
        if (free_b >= bytes && free_b - bytes >= need)
                return 0;
        snprintf(err, errlen, "no room in the driver for %llu MiB: %llu MiB free, %llu MiB kept free "
                 "(reserve and contexts being created)", (unsigned long long)(bytes >> 20),
                 (unsigned long long)(free_b >> 20), (unsigned long long)(need >> 20));
        return -ENOSPC;
}

/* ---- scrubbing (gs_gpu.h) ---- */

/* Queues the zeroing of [va, va + size) on the scrub stream (without
 * one: on the legacy stream, waited for by scrub_sync). */
static int scrub_queue(struct gs_gpu *g, CUdeviceptr va, uint64_t size, char *err, size_t errlen)
{
        const struct gs_cuda *cu = &g->agent->cu;

        if (!g->scrub_stream)
                return gs_cuda_check(cu, cu->memset_d32(va, 0, size / 4), "scrub: cuMemsetD32", err, errlen);
        return gs_cuda_check(cu, cu->memset_d32_async(va, 0, size / 4, g->scrub_stream), "scrub: cuMemsetD32Async",
                             err, errlen);
}

/* Waits, under g->lock, for everything queued on the scrub stream so far.
 * The event blocks the thread: a spinning wait is what cost the agent its
 * CPU (cuCtxSynchronize under the default scheduling). */
static int scrub_sync(struct gs_gpu *g, char *err, size_t errlen)
{
        const struct gs_cuda *cu = &g->agent->cu;
        int r;

        if (!g->scrub_stream)
                return gs_cuda_check(cu, cu->ctx_synchronize(), "scrub: cuCtxSynchronize", err, errlen);
        r = gs_cuda_check(cu, cu->event_record(g->sync_ev, g->scrub_stream), "scrub: cuEventRecord", err, errlen);
        if (r == 0)
                r = gs_cuda_check(cu, cu->event_synchronize(g->sync_ev), "scrub: cuEventSynchronize", err, errlen);
        return r;
}

/* Maps size bytes of h at a fresh address of the agent's, read-write on g. */
static int map_new(struct gs_gpu *g, CUmemGenericAllocationHandle h, uint64_t size, CUdeviceptr *ret_va,
                   char *err, size_t errlen)
{
        const struct gs_cuda *cu = &g->agent->cu;
        CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)g->dev },
                                .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        CUdeviceptr va = 0;
        int r;

        r = gs_cuda_check(cu, cu->mem_address_reserve(&va, size, 0, 0, 0), "scrub: cuMemAddressReserve", err,
                          errlen);
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

static void unmap_va(struct gs_gpu *g, CUdeviceptr va, uint64_t size)
{
        (void)g->agent->cu.mem_unmap(va, size);
        (void)g->agent->cu.mem_address_free(va, size);
}

int gs_gpu_scrub(struct gs_gpu *g, CUmemGenericAllocationHandle h, uint64_t size, char *err,
                 size_t errlen)
{
        CUdeviceptr va = 0;
        int r;

        if (size == 0 || size % 4)
                return 0;
        r = gs_cuda_check(&g->agent->cu, g->agent->cu.ctx_set_current(g->ctx), "scrub: cuCtxSetCurrent", err,
                          errlen);
        if (r == 0)
                r = map_new(g, h, size, &va, err, errlen);
        if (r < 0)
                return r;
        r = scrub_queue(g, va, size, err, errlen);
        /* Done before anyone may map it, and before the mapping goes. */
        if (r == 0)
                r = scrub_sync(g, err, errlen);
        unmap_va(g, va, size);
        return r;
}

/* Creates size bytes of memory, zeroed, exported if export_fd.  ret_va
 * non-NULL (a chunk): the agent's mapping that zeroed it stays, in
 * *ret_va, for later scrubs; else none is left. */
static int mem_make(struct gs_gpu *g, uint64_t size, bool export_fd, CUmemGenericAllocationHandle *ret_h,
                    int *ret_fd, CUdeviceptr *ret_va, char *err, size_t errlen)
{
        const struct gs_cuda *cu = &g->agent->cu;
        CUmemAllocationProp prop;
        CUmemGenericAllocationHandle h;
        CUdeviceptr va = 0;
        int fd = -1, r;

        if (g->frozen) {
                snprintf(err, errlen, "this agent handed its GPUs over: it makes no memory");
                return -ENOSPC;
        }
        /* Once the pool exists, new memory never eats into what is kept
         * free: memory the agent released comes back only once it is
         * really free (a process may hold it through a kept fd). */
        if (g->pool) {
                r = gs_gpu_room(g, size, err, errlen);
                if (r < 0)
                        return r;
        }
        chunk_prop(g, &prop);
        if (!export_fd)
                prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
        r = gs_cuda_check(cu, cu->mem_create(&h, size, &prop, 0), "cuMemCreate", err, errlen);
        if (r < 0)
                return r;
        if (export_fd) {
                /* Exported memory goes to processes: none of what it held
                 * before (the driver reuses the agent's own memory) may
                 * reach one. */
                if (ret_va) {
                        r = gs_cuda_check(cu, cu->ctx_set_current(g->ctx), "scrub: cuCtxSetCurrent", err, errlen);
                        if (r == 0)
                                r = map_new(g, h, size, &va, err, errlen);
                        if (r == 0)
                                r = scrub_queue(g, va, size, err, errlen);
                        if (r == 0)
                                r = scrub_sync(g, err, errlen);
                } else {
                        r = gs_gpu_scrub(g, h, size, err, errlen);
                }
                if (r < 0)
                        goto fail;
                r = gs_cuda_check(cu, cu->mem_export(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                                  "cuMemExportToShareableHandle", err, errlen);
                if (r < 0)
                        goto fail;
                /* The driver's fd must not leak into anything the agent might exec. */
                if (fd < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
                        r = fd < 0 ? -EBADF : gs_neg_errno();
                        snprintf(err, errlen, "exported fd unusable: %s", strerror(-r));
                        goto fail;
                }
        }
        *ret_h = h;
        *ret_fd = fd;
        if (ret_va)
                *ret_va = va;
        return 0;
fail:
        gs_closep(&fd);
        if (va)
                unmap_va(g, va, size);
        (void)cu->mem_release(h);
        return r;
}

int gs_gpu_mem_make(struct gs_gpu *g, uint64_t size, bool export_fd,
                    CUmemGenericAllocationHandle *ret_h, int *ret_fd, char *err, size_t errlen)
{
        return mem_make(g, size, export_fd, ret_h, ret_fd, NULL, err, errlen);
}

void gs_gpu_mem_drop(struct gs_gpu *g, CUmemGenericAllocationHandle h, int *fd)
{
        gs_closep(fd);
        (void)g->agent->cu.mem_release(h);
}

static int chunk_handle(struct gs_gpu *g, struct gs_chunk *c, char *err, size_t errlen);

/* The agent's mapping of c's memory, made on first need (an inherited
 * chunk's, or after a failure). */
static int chunk_map(struct gs_gpu *g, struct gs_chunk *c, char *err, size_t errlen)
{
        int r;

        if (c->va)
                return 0;
        r = chunk_handle(g, c, err, errlen);
        return r < 0 ? r : map_new(g, c->handle, g->chunk_bytes, &c->va, err, errlen);
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
static void batch_done(struct gs_gpu *g, bool ok, const char *why)
{
        for (uint32_t i = 0; i < g->nbatch; i++) {
                uint32_t id = chunk_of_va(g, g->batch[i].chunk, g->batch[i].va);
                if (id == UINT32_MAX || !g->chunks[id].scrubbing)
                        continue;
                g->chunks[id].scrubbing = false;
                if (!ok)
                        continue;
                g->chunks[id].writer = 0;
                g->scrub_st.scrubbed_bg++;
                if (g->gsm)
                        gs_gsm_clean(g->gsm, id);
        }
        if (!ok && g->nbatch) {
                g->scrub_st.failures += g->nbatch;
                g->scrub_retry_ms = gs_mono_ms() + GS_GPU_SCRUB_RETRY_MS;
                uint32_t nf = ++g->scrub_batch_failures;
                if (!(nf & (nf - 1))) /* said at 1, 2, 4, ... failed batches */
                        log_warn("GPU %u: %u chunks not scrubbed in the background (zeroed when granted; %u "
                                 "failed batches): %s", g->index, g->nbatch, g->scrub_batch_failures, why);
        }
        g->nbatch = 0;
}

/* Under g->lock: waits for the scrubber's batch in flight, if any.  The
 * lock is kept: nothing changes under the caller (the scrubber records
 * no new batch without it). */
static void batch_wait(struct gs_gpu *g)
{
        char why[200];
        int r;

        if (!g->nbatch)
                return;
        r = gs_cuda_check(&g->agent->cu, g->agent->cu.event_synchronize(g->scrub_ev), "scrub: cuEventSynchronize",
                          why, sizeof(why));
        batch_done(g, r == 0, why);
}

static void chunk_unmap(struct gs_gpu *g, struct gs_chunk *c)
{
        if (c->scrubbing)
                batch_wait(g); /* its memset must not outlive the mapping */
        if (c->va)
                unmap_va(g, c->va, g->chunk_bytes);
        c->va = 0;
        c->scrubbing = false;
}

/* Under g->lock, before chunk c goes to process proc: its memory holds no
 * other process's data once what it queued (*queued) is waited for.
 * The batch in flight is waited for if c is in it. */
static int grant_prepare(struct gs_gpu *g, struct gs_chunk *c, uint64_t proc, bool *queued, char *err,
                         size_t errlen)
{
        int r;

        g->scrub_st.grants++;
        if (c->scrubbing) {
                batch_wait(g);
                if (c->writer == 0) {
                        g->scrub_st.grants_waited++;
                        return 0;
                }
        }
        if (c->writer == 0) {
                g->scrub_st.grants_clean++;
                return 0;
        }
        if (c->writer == proc) {
                g->scrub_st.grants_same++;
                return 0;
        }
        r = gs_cuda_check(&g->agent->cu, g->agent->cu.ctx_set_current(g->ctx), "scrub: cuCtxSetCurrent", err,
                          errlen);
        if (r == 0)
                r = chunk_map(g, c, err, errlen);
        if (r == 0)
                r = scrub_queue(g, c->va, g->chunk_bytes, err, errlen);
        if (r < 0) {
                g->scrub_st.failures++;
                return r;
        }
        g->scrub_st.grants_scrubbed_sync++;
        *queued = true;
        return 0;
}

/* What grant_prepare queued is done (the batch before it on the stream
 * too). */
static int grant_wait(struct gs_gpu *g, char *err, size_t errlen)
{
        int r = scrub_sync(g, err, errlen);

        if (r == 0 && g->nbatch && g->scrub_stream)
                batch_done(g, true, NULL); /* ahead on the same stream */
        return r;
}

int gs_gpu_chunk_grant(struct gs_gpu *g, uint32_t chunk, uint64_t proc, char *err, size_t errlen)
{
        struct gs_chunk *c;
        bool queued = false;
        int r;

        if (chunk >= g->nchunks || g->chunks[chunk].fd < 0) {
                snprintf(err, errlen, "chunk %u has no memory", chunk);
                return -EINVAL;
        }
        c = &g->chunks[chunk];
        r = grant_prepare(g, c, proc, &queued, err, errlen);
        if (r == 0 && queued)
                r = grant_wait(g, err, errlen);
        if (r < 0)
                return r;
        c->writer = proc;
        return 0;
}

void gs_gpu_scrub_stats(struct gs_gpu *g, struct gs_gpu_scrub_stats *ret)
{
        pthread_mutex_lock(&g->lock);
        *ret = g->scrub_st;
        pthread_mutex_unlock(&g->lock);
}

/* Creates and exports one chunk, mapped for the agent.  Returns 0 or a
 * negative errno (err set). */
static int chunk_make(struct gs_gpu *g, struct gs_chunk *ret, char *err, size_t errlen)
{
        ret->writer = 0; /* zeroed by mem_make */
        ret->va = 0;
        ret->scrubbing = false;
        int r = mem_make(g, g->chunk_bytes, true, &ret->handle, &ret->fd, &ret->va, err, errlen);
        ret->memid = r == 0 ? ++g->memid_next : 0;
        if (r == 0)
                ret->kept = false;
        return r;
}

static void chunk_drop(struct gs_gpu *g, struct gs_chunk *c)
{
        chunk_unmap(g, c);
        if (c->fd >= 0 && c->handle)
                gs_gpu_mem_drop(g, c->handle, &c->fd);
        else
                gs_closep(&c->fd);
        c->handle = 0;
        c->inherited = false;
        c->recycle = false;
        c->memid = 0;
}

/* An inherited chunk's handle, imported from its fd on first need. */
static int chunk_handle(struct gs_gpu *g, struct gs_chunk *c, char *err, size_t errlen)
{
        if (c->handle)
                return 0;
        (void)g->agent->cu.ctx_set_current(g->ctx);
        return gs_cuda_check(&g->agent->cu,
                             g->agent->cu.mem_import(&c->handle, (void *)(intptr_t)c->fd,
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                             "cuMemImportFromShareableHandle", err, errlen);
}

void gs_gpu_chunk_drop(struct gs_gpu *g, uint32_t chunk)
{
        if (chunk < g->nchunks)
                chunk_drop(g, &g->chunks[chunk]);
}

bool gs_gpu_chunk_fill(struct gs_gpu *g, uint32_t chunk)
{
        if (chunk >= g->nchunks)
                return false;
        if (g->chunks[chunk].fd >= 0)
                return true;
        /* Its memory may be held by a process of the allocation: granted
         * to one (owner), or behind its VMM allocations (kept). */
        if (g->chunks[chunk].kept || g->chunks[chunk].owner)
                return false;
        for (uint32_t d = 0; d < g->nchunks; d++) {
                struct gs_chunk *c = &g->chunks[d];
                if (c->fd < 0 || c->pending || c->recycle || !gs_pool_chunk_in_sys(g->pool, d))
                        continue;
                struct gs_chunk t = g->chunks[chunk];
                g->chunks[chunk] = *c;
                *c = t;
                return true;
        }
        return false;
}

int gs_gpu_chunk_remake(struct gs_gpu *g, uint32_t chunk, char *err, size_t errlen)
{
        struct gs_chunk *c;
        int r;

        if (chunk >= g->nchunks) {
                snprintf(err, errlen, "no chunk %u", chunk);
                return -EINVAL;
        }
        c = &g->chunks[chunk];
        if (c->fd >= 0)
                return 0;
        r = chunk_make(g, c, err, errlen);
        if (r < 0)
                c->fd = -1;
        /* No room: a free chunk's memory serves, unless a process of the
         * allocation may hold this one's (kept). */
        if (r == -ENOSPC && gs_gpu_chunk_fill(g, chunk))
                r = 0;
        return r;
}

/* The part of c's owner on g (a live allocation), or NULL. */
static struct gs_part *owner_part(struct gs_gpu *g, const struct gs_chunk *c)
{
        struct gs_allocation *a = c->owner;

        for (uint32_t i = 0; a && i < a->nparts; i++)
                if (a->parts[i].gpu == g->index && !a->parts[i].gone)
                        return &a->parts[i];
        return NULL;
}

static void owner_debt(struct gs_gpu *g, struct gs_chunk *c, int delta)
{
        struct gs_part *part = owner_part(g, c);

        if (part)
                gs_palloc_debt(part->pa, delta);
}

void gs_gpu_retry_pending(struct gs_gpu *g)
{
        char err[256];

        /* Free chunks without memory (after a restart, or given back
         * without it) are made as soon as the driver has room: memory left
         * free would be a bypassing process's for the taking.  A bounded
         * number per scan: the workers wait for the lock meanwhile. */
        uint32_t budget = GS_GPU_REMAKE_PER_SCAN;
        for (uint32_t i = 0; i < g->nchunks && budget; i++) {
                struct gs_chunk *c = &g->chunks[i];
                if ((c->fd >= 0 && !c->recycle) || c->pending || gs_pool_chunk_held(g->pool, i))
                        continue;
                (void)g->agent->cu.ctx_set_current(g->ctx);
                if (c->recycle)
                        chunk_drop(g, c);
                budget--;
                if (chunk_make(g, c, err, sizeof(err)) < 0) {
                        c->fd = -1;
                        break;
                }
        }
        if (!g->chunks_pending)
                return;
        (void)g->agent->cu.ctx_set_current(g->ctx);
        for (uint32_t i = 0; i < g->nchunks && g->chunks_pending; i++) {
                struct gs_chunk *c = &g->chunks[i];

                if (!c->pending || chunk_make(g, c, err, sizeof(err)) < 0)
                        continue;
                if (gs_pool_unretire_chunk(g->pool, i) < 0) {
                        log_error("GPU %u: pending chunk %u not back in the pool", g->index, i);
                        continue;
                }
                owner_debt(g, c, -1);
                c->owner = NULL;
                c->pending = false;
                g->chunks_pending--;
                log_info("GPU %u: chunk %u re-created, back in the pool", g->index, i);
        }
}

void gs_gpu_forget_owner(struct gs_gpu *g, const struct gs_allocation *a)
{
        for (uint32_t i = 0; i < g->nchunks; i++)
                if (g->chunks[i].owner == a)
                        g->chunks[i].owner = NULL;
}

/* gs_pool_return_fn; runs under g->lock, inside an allocator call. */
static int chunk_recycle(void *ctx, uint32_t chunk)
{
        struct gs_gpu *g = ctx;
        struct gs_chunk *c;
        char err[256];
        int r;

        if (chunk >= g->nchunks)
                return -EINVAL;
        c = &g->chunks[chunk];
        (void)g->agent->cu.ctx_set_current(g->ctx);
        /* Old memory first: on a full GPU there is no room for both.  If a
         * process still holds the old memory through a kept fd, the driver
         * has no room for the new (gs_gpu_room): the chunk is pending,
         * retired until it can be re-created (gs_gpu_retry_pending), and
         * charged to the allocation whose process may hold it. */
        chunk_drop(g, c);
        r = chunk_make(g, c, err, sizeof(err));
        if (r < 0) {
                c->fd = -1;
                c->pending = true;
                g->chunks_pending++;
                owner_debt(g, c, 1);
                log_info("GPU %u: chunk %u not re-created yet, retried later: %s", g->index, chunk, err);
                return -EAGAIN;
        }
        c->owner = NULL;
        log_debug("GPU %u: chunk %u recycled", g->index, chunk);
        return 0;
}


/* gs_gsm_hold_fn: into the ledger (under g->lock). */
static void chunk_hold(void *ctx, uint32_t chunk, const void *tag, uint32_t slot, int held)
{
        struct gs_gpu *g = ctx;

        gs_ledger_set(&g->ledger, chunk, tag, slot, held != 0);
}

/* ---- the scrubber (gs_gpu.h "Scrubbing") ---- */

/* The pool's chunk level (gs_pool_gsm): the scrubber reads and orders its
 * free lists.  Checked against what was set through gs_pool.h; if it does
 * not match, NULL: no scrubber, every scrub on the request path. */
static struct gs_gsm *pool_gsm(struct gs_gpu *g)
{
        struct gs_gsm *m = g->pool ? gs_pool_gsm(g->pool) : NULL;

        if (!m || m->nchunks != g->nchunks || m->return_fn != chunk_recycle || m->return_ctx != g ||
            !m->chunks)
                return NULL;
        return m;
}

/* gs_gsm's kick, under g->lock: a dirty chunk came back to a free list or
 * a clean one left it. */
static void scrub_kick(void *ctx)
{
        struct gs_gpu *g = ctx;

        if (!g->scrub_kicked) {
                g->scrub_kicked = true;
                pthread_cond_signal(&g->scrub_cond);
        }
}

/* Under g->lock: queues the next batch (gs_gsm_scrub_next) on the scrub
 * stream and records scrub_ev after it; how many chunks are in it.
 * Chunks that need no zeroing (made anew since, or before their grant)
 * are only said clean. */
static uint32_t batch_fill(struct gs_gpu *g)
{
        const struct gs_cuda *cu = &g->agent->cu;
        uint32_t ids[GS_GPU_SCRUB_BATCH];
        char why[200] = "";
        bool again = true;
        int r = 0;

        if (g->scrub_paused || !g->gsm || g->frozen || g->nbatch)
                return 0;
        (void)cu->ctx_set_current(g->ctx);
        for (int round = 0; again && r == 0 && g->nbatch == 0 && round < 8; round++) {
                uint32_t n = gs_gsm_scrub_next(g->gsm, GS_GPU_SCRUB_AHEAD, ids, GS_GPU_SCRUB_BATCH);

                again = false;
                for (uint32_t i = 0; i < n; i++) {
                        struct gs_chunk *c = &g->chunks[ids[i]];
                        if (c->fd < 0 || c->recycle || c->writer == 0) {
                                gs_gsm_clean(g->gsm, ids[i]);
                                again = true;
                                continue;
                        }
                        r = chunk_map(g, c, why, sizeof(why));
                        if (r == 0)
                                r = scrub_queue(g, c->va, g->chunk_bytes, why, sizeof(why));
                        if (r < 0) {
                                /* Retried later; said at 1, 2, 4, ... failures. */
                                g->scrub_st.failures++;
                                g->scrub_retry_ms = gs_mono_ms() + GS_GPU_SCRUB_RETRY_MS;
                                if (!(g->scrub_st.failures & (g->scrub_st.failures - 1)))
                                        log_warn("GPU %u: chunk %u not scrubbed in the background (zeroed when "
                                                 "granted; %llu failures): %s", g->index, ids[i],
                                                 (unsigned long long)g->scrub_st.failures, why);
                                break;
                        }
                        c->scrubbing = true;
                        g->batch[g->nbatch++] = (struct gs_gpu_scrub_ent){ .va = c->va, .chunk = ids[i] };
                }
        }
        if (!g->nbatch)
                return 0;
        g->scrub_st.batches_bg++;
        r = gs_cuda_check(cu, cu->event_record(g->scrub_ev, g->scrub_stream), "scrub: cuEventRecord", why,
                          sizeof(why));
        if (r < 0) {
                (void)cu->ctx_synchronize(); /* no memset may outlive the batch */
                batch_done(g, false, why);
                return 0;
        }
        return g->nbatch;
}

/* The scrubber: woken by kicks, it lets releases gather, queues a batch,
 * waits for it without the lock (the workers serve on; a grant that needs
 * a chunk of the batch waits itself, batch_wait), and says its chunks are
 * clean.  It leaves only between batches. */
static void *scrubber(void *arg)
{
        struct gs_gpu *g = arg;
        const struct gs_cuda *cu = &g->agent->cu;
        bool gather = true;

        (void)cu->ctx_set_current(g->ctx);
        pthread_mutex_lock(&g->lock);
        while (!g->scrub_stop) {
                if (g->scrub_paused || !g->scrub_kicked) {
                        pthread_cond_wait(&g->scrub_cond, &g->lock);
                        gather = true;
                        continue;
                }
                int64_t now = gs_mono_ms();
                if (now < g->scrub_retry_ms) {
                        struct timespec ts;
                        clock_gettime(CLOCK_MONOTONIC, &ts);
                        int64_t ns = ts.tv_nsec + (g->scrub_retry_ms - now) * 1000000;
                        ts.tv_sec += ns / 1000000000;
                        ts.tv_nsec = ns % 1000000000;
                        (void)pthread_cond_timedwait(&g->scrub_cond, &g->lock, &ts);
                        continue;
                }
                if (gather) {
                        struct timespec ts = { 0, GS_GPU_SCRUB_GATHER_US * 1000L };
                        gather = false;
                        pthread_mutex_unlock(&g->lock);
                        nanosleep(&ts, NULL);
                        pthread_mutex_lock(&g->lock);
                        continue;
                }
                g->scrub_kicked = false;
                int64_t scrub_t0 = gs_mono_ns(); /* /metrics: gshare_scrub_duration_seconds */
                if (batch_fill(g) == 0) {
                        gather = true;
                        continue;
                }
                pthread_mutex_unlock(&g->lock);
                CUresult cr = cu->event_synchronize(g->scrub_ev);
                pthread_mutex_lock(&g->lock);
                if (g->nbatch)
                        batch_done(g, cr == CUDA_SUCCESS, "scrub: cuEventSynchronize failed");
                gs_hist_since(&g->agent->hists.scrub, scrub_t0);
                /* More may be wanted by now: look again at once. */
                g->scrub_kicked = true;
        }
        pthread_mutex_unlock(&g->lock);
        return NULL;
}

/* The scrub stream and events, once the context is current: 0, or a
 * negative errno (logged) and none of them (synchronous scrubs). */
static int scrub_setup(struct gs_gpu *g)
{
        const struct gs_cuda *cu = &g->agent->cu;
        const unsigned evf = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING;
        int least = 0, greatest = 0;
        char why[200];
        int r;

        /* The lowest priority is the numerically largest: the agent's
         * memsets yield to anything else the agent queues. */
        r = gs_cuda_check(cu, cu->ctx_get_stream_priority_range(&least, &greatest), "cuCtxGetStreamPriorityRange",
                          why, sizeof(why));
        if (r == 0)
                r = gs_cuda_check(cu, cu->stream_create_with_priority(&g->scrub_stream, CU_STREAM_NON_BLOCKING,
                                                                      least),
                                  "cuStreamCreateWithPriority", why, sizeof(why));
        if (r == 0)
                r = gs_cuda_check(cu, cu->event_create(&g->scrub_ev, evf), "cuEventCreate", why, sizeof(why));
        if (r == 0)
                r = gs_cuda_check(cu, cu->event_create(&g->sync_ev, evf), "cuEventCreate", why, sizeof(why));
        if (r < 0) {
                log_warn("GPU %u: no scrub stream (%s): chunks are zeroed when granted", g->index, why);
                if (g->sync_ev)
                        (void)cu->event_destroy(g->sync_ev);
                if (g->scrub_ev)
                        (void)cu->event_destroy(g->scrub_ev);
                if (g->scrub_stream)
                        (void)cu->stream_destroy(g->scrub_stream);
                g->sync_ev = g->scrub_ev = NULL;
                g->scrub_stream = NULL;
        }
        return r;
}

static void scrub_start(struct gs_gpu *g)
{
        pthread_condattr_t ca;
        sigset_t all, old;
        int r;

        if (!g->scrub_stream || !g->pool)
                return;
        g->gsm = pool_gsm(g);
        if (!g->gsm) {
                log_warn("GPU %u: the pool's free lists are not where expected: no scrubber, chunks are zeroed "
                         "when granted", g->index);
                return;
        }
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&g->scrub_cond, &ca);
        pthread_condattr_destroy(&ca);
        /* Signals are the main thread's (signalfd). */
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        r = pthread_create(&g->scrub_thr, NULL, scrubber, g);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r != 0) {
                log_warn("GPU %u: no scrubber thread (%s): chunks are zeroed when granted", g->index, strerror(r));
                pthread_cond_destroy(&g->scrub_cond);
                g->gsm = NULL;
                return;
        }
        char name[16];
        snprintf(name, sizeof(name), "gshare-scrub%u", g->index % 100);
        (void)pthread_setname_np(g->scrub_thr, name);
        g->scrub_started = true;
        pthread_mutex_lock(&g->lock);
        g->gsm->kick_ctx = g;
        g->gsm->kick_fn = scrub_kick;
        pthread_mutex_unlock(&g->lock);
}

/* Before the pool and the context go: the thread ends between batches. */
static void scrub_stop(struct gs_gpu *g)
{
        if (!g->scrub_started)
                return;
        pthread_mutex_lock(&g->lock);
        g->scrub_stop = true;
        pthread_cond_signal(&g->scrub_cond);
        pthread_mutex_unlock(&g->lock);
        pthread_join(g->scrub_thr, NULL);
        pthread_mutex_lock(&g->lock);
        g->gsm->kick_fn = NULL;
        g->gsm = NULL;
        pthread_mutex_unlock(&g->lock);
        pthread_cond_destroy(&g->scrub_cond);
        g->scrub_started = false;
}

/* The previous agent's ledger of this GPU, kept in g->held_before: its
 * chunk count, or 0 if there is none (or it is not usable). */
static uint32_t read_ledger(struct gs_gpu *g, const struct gs_config *cfg)
{
        char path[PATH_MAX], why[160] = "";
        uint64_t cb = 0;
        int r;

        if (gs_ledger_path(path, sizeof(path), cfg->state_dir, g->uuid) < 0)
                return 0;
        r = gs_ledger_read(path, g->uuid_raw, &g->held_before, &g->nheld_before, &cb, why, sizeof(why));
        if (r == -ENOENT)
                return 0;
        if (r == 0 && cb != g->chunk_bytes) {
                snprintf(why, sizeof(why), "chunks of %llu bytes, configured %llu", (unsigned long long)cb,
                         (unsigned long long)g->chunk_bytes);
                r = -EINVAL;
        }
        if (r < 0) {
                log_warn("GPU %u: the previous agent's ledger %s is not used: %s", g->index, path,
                         why[0] ? why : strerror(-r));
                free(g->held_before);
                g->held_before = NULL;
                g->nheld_before = 0;
                return 0;
        }
        /* The pool cannot have been larger than the GPU. */
        if ((uint64_t)g->nheld_before * g->chunk_bytes > g->total_bytes)
                return (uint32_t)(g->total_bytes / g->chunk_bytes);
        return g->nheld_before;
}

/* At a restart's start: whether the driver has one more chunk above the
 * reserve. */
static bool room_at_start(struct gs_gpu *g)
{
        size_t free_b = 0, total_b = 0;

        if (g->agent->cu.mem_get_info(&free_b, &total_b) != CUDA_SUCCESS)
                return false;
        return free_b >= g->reserve_bytes + g->chunk_bytes;
}

int gs_gpu_ledger_start(struct gs_gpu *g, const char *state_dir)
{
        char path[PATH_MAX];
        int r;

        if (!g->pool)
                return 0;
        if (mkdir(state_dir, 0700) < 0 && errno != EEXIST)
                return gs_neg_errno();
        r = gs_ledger_path(path, sizeof(path), state_dir, g->uuid);
        if (r == 0)
                r = gs_ledger_open(&g->ledger, path, g->uuid_raw, g->chunk_bytes, g->nchunks);
        if (r < 0)
                log_error("GPU %u: no ledger in %s (%s): a restarted agent will not know what processes "
                          "hold", g->index, state_dir, strerror(-r));
        return r;
}

void gs_gpu_inherit_settle(struct gs_gpu *g)
{
        uint32_t n = 0;

        /* Marked only: dropping their memory costs the driver time the
         * processes would wait for (an upgrade's gap); it is done before
         * any grant and by the next scans. */
        pthread_mutex_lock(&g->lock);
        for (uint32_t i = 0; i < g->nchunks; i++) {
                struct gs_chunk *c = &g->chunks[i];
                if (!c->inherited || c->writer == 0 || gs_pool_chunk_held(g->pool, i))
                        continue;
                c->recycle = true;
                n++;
        }
        pthread_mutex_unlock(&g->lock);
        if (n)
                log_info("GPU %u: %u handed-over chunks a process may still reach are made anew before use",
                         g->index, n);
}

void gs_gpu_ledger_commit(struct gs_gpu *g)
{
        int r;

        pthread_mutex_lock(&g->lock);
        if (g->scrub_paused && !g->frozen) {
                /* The processes are restored: the scrubber may work. */
                g->scrub_paused = false;
                if (g->scrub_started)
                        scrub_kick(g);
        }
        pthread_mutex_unlock(&g->lock);
        free(g->held_before);
        g->held_before = NULL;
        g->nheld_before = 0;
        if (g->ledger.fd < 0)
                return;
        r = gs_ledger_commit(&g->ledger);
        if (r < 0)
                log_error("GPU %u: cannot replace the ledger %s: %s", g->index, g->ledger.path, strerror(-r));
}

void gs_gpu_ledger_pause(struct gs_gpu *g, bool pause)
{
        if (!g->pool)
                return;
        pthread_mutex_lock(&g->lock);
        /* A new agent that failed after its restore replaced our file. */
        int r = pause ? 0 : gs_ledger_relink(&g->ledger);
        if (r < 0 && r != -EBADF)
                log_error("GPU %u: cannot put the ledger %s back: %s; a restarted agent will not know what "
                          "processes hold", g->index, g->ledger.path, strerror(-r));
        gs_pool_set_hold_fn(g->pool, pause ? NULL : chunk_hold, pause ? NULL : g);
        /* The new agent may grant any chunk from TAKE on: no memset of
         * ours may run then. */
        g->scrub_paused = pause;
        if (pause)
                batch_wait(g);
        else if (g->scrub_started)
                scrub_kick(g);
        pthread_mutex_unlock(&g->lock);
}

void gs_gpu_ledger_stop(struct gs_gpu *g)
{
        if (!g->pool)
                return;
        pthread_mutex_lock(&g->lock);
        gs_pool_set_hold_fn(g->pool, NULL, NULL);
        gs_ledger_close(&g->ledger);
        pthread_mutex_unlock(&g->lock);
}

void gs_gpu_chunk_swap(struct gs_gpu *g, uint32_t a, uint32_t b)
{
        struct gs_chunk t;

        if (a >= g->nchunks || b >= g->nchunks || a == b)
                return;
        t = g->chunks[a];
        g->chunks[a] = g->chunks[b];
        g->chunks[b] = t;
}

int gs_gpu_chunk_orphan(struct gs_gpu *g, uint32_t chunk)
{
        if (chunk >= g->nchunks || g->chunks[chunk].fd < 0)
                return 0;
        for (uint32_t d = 0; d < g->nchunks; d++) {
                struct gs_chunk *c = &g->chunks[d];
                if (c->fd >= 0 || c->pending || c->kept || gs_pool_chunk_held(g->pool, d))
                        continue;
                struct gs_chunk t = g->chunks[chunk];
                g->chunks[chunk] = *c;
                *c = t;
                return 0;
        }
        return -ENOENT;
}

static bool no_memory(void *ctx, uint32_t chunk)
{
        struct gs_gpu *g = ctx;

        return chunk < g->nchunks && (g->chunks[chunk].fd < 0 || g->chunks[chunk].inherited);
}

uint32_t gs_gpu_orphans_of(struct gs_gpu *g, const struct gs_pproc *p)
{
        return p ? gs_pproc_count_held(p, no_memory, g) : 0;
}

static void set_unhealthy(struct gs_gpu *g, const char *why)
{
        g->healthy = false;
        snprintf(g->health_reason, sizeof(g->health_reason), "%.159s", why);
}

int gs_gpu_open(struct gs_gpu *g, int ordinal, const struct gs_config *cfg, char *err, size_t errlen)
{
        int r = gs_gpu_open_ctx(g, ordinal, cfg, err, errlen);

        return r < 0 ? r : gs_gpu_open_pool(g, cfg, NULL, err, errlen);
}

int gs_gpu_open_ctx(struct gs_gpu *g, int ordinal, const struct gs_config *cfg, char *err, size_t errlen)
{
        const struct gs_cuda *cu = &g->agent->cu;
        CUmemAllocationProp prop;
        CUuuid uuid;
        size_t free_b = 0, total_b = 0, gran = 0;
        char why[256];
        int r;

        g->index = (uint32_t)ordinal;
        g->ledger.fd = -1;
        g->numa_node = -1;
        g->chunk_bytes = cfg->chunk_bytes;
        g->unit_bytes = cfg->unit_bytes;
        g->reserve_bytes = cfg->reserve_bytes;
        pthread_mutex_init(&g->lock, NULL);
        r = gs_cuda_check(cu, cu->device_get(&g->dev, ordinal), "cuDeviceGet", err, errlen);
        if (r < 0)
                return r;
        r = gs_cuda_check(cu, cu->device_get_name(g->name, (int)sizeof(g->name), g->dev),
                          "cuDeviceGetName", err, errlen);
        if (r == 0)
                r = gs_cuda_check(cu, cu->device_get_uuid(&uuid, g->dev), "cuDeviceGetUuid", err,
                                  errlen);
        if (r == 0)
                r = gs_cuda_check(cu, cu->device_get_pci_bus_id(g->pci_bus_id,
                                                                (int)sizeof(g->pci_bus_id), g->dev),
                                  "cuDeviceGetPCIBusId", err, errlen);
        if (r == 0)
                r = gs_cuda_check(cu, cu->device_total_mem(&total_b, g->dev), "cuDeviceTotalMem",
                                  err, errlen);
        if (r < 0)
                return r;
        g->name[sizeof(g->name) - 1] = '\0';
        g->pci_bus_id[sizeof(g->pci_bus_id) - 1] = '\0';
        memcpy(g->uuid_raw, uuid.bytes, 16);
        gs_uuid_format(g->uuid_raw, g->uuid);
        g->numa_node = gs_gpu_numa_node("/sys", g->pci_bus_id);
        g->total_bytes = total_b;
        g->healthy = true;

        r = gs_cuda_check(cu, cu->primary_ctx_retain(&g->ctx, g->dev), "cuDevicePrimaryCtxRetain",
                          err, errlen);
        if (r < 0) {
                g->ctx = NULL;
                set_unhealthy(g, err);
                return 0;
        }
        r = gs_cuda_check(cu, cu->ctx_set_current(g->ctx), "cuCtxSetCurrent", why, sizeof(why));
        if (r == 0)
                r = gs_cuda_check(cu, cu->mem_get_info(&free_b, &total_b), "cuMemGetInfo", why,
                                  sizeof(why));
        if (r == 0) {
                chunk_prop(g, &prop);
                r = gs_cuda_check(cu, cu->mem_get_granularity(&gran, &prop,
                                                              CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                                  "cuMemGetAllocationGranularity", why, sizeof(why));
        }
        if (r < 0) {
                set_unhealthy(g, why);
                return 0;
        }
        /* The size a context is charged at (gs_outside.h): configured, or
         * this very context as NVML sees it, before any chunk exists
         * (without NVML: 0, contexts come out of the reserve). */
        g->ctx_expect_bytes = cfg->context_bytes ? cfg->context_bytes
                                                 : gs_nvml_pid_bytes(&g->agent->nvml, g->uuid, getpid());
        if (gran && g->chunk_bytes % gran) {
                snprintf(why, sizeof(why), "chunk size %llu is not a multiple of the VMM granularity %zu",
                         (unsigned long long)g->chunk_bytes, gran);
                set_unhealthy(g, why);
                return 0;
        }
        (void)scrub_setup(g);
        g->ctx_ready = true;
        return 0;
}

/* The pool of an agent handed over by a previous one: its chunks as they
 * were (inh), the previous ledger for what processes hold. */
static int open_inherited(struct gs_gpu *g, const struct gs_config *cfg, const struct gs_gpu_inherit *inh,
                          char *err, size_t errlen)
{
        (void)read_ledger(g, cfg);
        g->chunks = calloc(inh->nchunks, sizeof(*g->chunks));
        if (!g->chunks) {
                snprintf(err, errlen, "out of memory for %u chunks", inh->nchunks);
                return -ENOMEM;
        }
        for (uint32_t i = 0; i < inh->nchunks; i++) {
                struct gs_chunk *c = &g->chunks[i];
                c->fd = inh->fd[i];
                c->handle = 0; /* imported when the agent itself needs it (scrub) */
                c->inherited = c->fd >= 0;
                /* Another agent's process ids: scrubbed before any grant. */
                c->writer = inh->written[i] ? UINT64_MAX : 0;
                c->memid = c->fd >= 0 ? inh->memid[i] : 0;
                if (c->memid > g->memid_next)
                        g->memid_next = c->memid;
                if (c->fd >= 0)
                        g->chunks_made_at_start++;
        }
        g->nchunks = inh->nchunks;
        /* Nothing is scrubbed in the background before the processes are
         * restored (gs_gpu_ledger_commit): until READY the old agent may
         * take its chunks back. */
        g->scrub_paused = true;
        return 0;
}

int gs_gpu_open_pool(struct gs_gpu *g, const struct gs_config *cfg, const struct gs_gpu_inherit *inh, char *err,
                     size_t errlen)
{
        size_t free_b = 0, total_b = 0;
        uint64_t want;
        uint32_t before;
        char why[256];
        int r;

        if (!g->ctx_ready)
                return 0; /* unhealthy: no pool */
        if (inh) {
                r = open_inherited(g, cfg, inh, err, errlen);
                if (r < 0)
                        return r;
                goto pool;
        }
        (void)g->agent->cu.ctx_set_current(g->ctx);
        r = gs_cuda_check(&g->agent->cu, g->agent->cu.mem_get_info(&free_b, &total_b), "cuMemGetInfo", why,
                          sizeof(why));
        if (r < 0) {
                set_unhealthy(g, why);
                return 0;
        }
        want = free_b > g->reserve_bytes ? (free_b - g->reserve_bytes) / g->chunk_bytes : 0;
        before = read_ledger(g, cfg);
        if (before > want) {
                /* Processes still map what a previous agent gave them: the
                 * pool keeps its size, chunks beyond what is free now start
                 * without memory. */
                log_info("GPU %u: the previous agent had %u chunks, %llu can be made now: the rest are held "
                         "by its processes or outside the pool, made once the memory is free",
                         g->index, before, (unsigned long long)want);
                want = before;
        }
        if (want > UINT32_MAX / 2)
                want = UINT32_MAX / 2;
        if (want == 0) {
                snprintf(why, sizeof(why), "%zu bytes free, not more than the reserve %llu plus one chunk",
                         free_b, (unsigned long long)g->reserve_bytes);
                set_unhealthy(g, why);
                return 0;
        }
        g->chunks = calloc(want, sizeof(*g->chunks));
        if (!g->chunks) {
                snprintf(err, errlen, "out of memory for %llu chunks", (unsigned long long)want);
                return -ENOMEM;
        }
        for (g->nchunks = 0; g->nchunks < want; g->nchunks++) {
                if (before && !room_at_start(g)) {
                        r = -ENOSPC;
                        snprintf(why, sizeof(why), "no room for more now");
                } else {
                        r = chunk_make(g, &g->chunks[g->nchunks], why, sizeof(why));
                }
                if (r < 0 && before) {
                        for (uint32_t i = g->nchunks; i < want; i++)
                                g->chunks[i].fd = -1;
                        g->chunks_made_at_start = g->nchunks;
                        g->nchunks = (uint32_t)want;
                        break;
                }
                if (r < 0) {
                        /* The free figure was a little optimistic: keep what we got. */
                        log_warn("GPU %u: stopped at %u of %llu chunks: %s", g->index, g->nchunks,
                                 (unsigned long long)want, why);
                        break;
                }
        }
        if (g->nchunks == want && !g->chunks_made_at_start)
                g->chunks_made_at_start = g->nchunks;
        if (g->nchunks == 0) {
                set_unhealthy(g, why);
                return 0;
        }
pool:
        g->pool = gs_pool_new(g->nchunks, g->chunk_bytes);
        if (!g->pool) {
                snprintf(err, errlen, "cannot create the pool of %u chunks of %llu bytes",
                         g->nchunks, (unsigned long long)g->chunk_bytes);
                return -ENOMEM;
        }
        gs_pool_set_return_fn(g->pool, chunk_recycle, g);
        gs_pool_set_hold_fn(g->pool, chunk_hold, g);
        if (gs_pool_set_block_caps(g->pool, cfg->max_blocks_per_process, cfg->max_blocks_per_allocation) < 0) {
                snprintf(err, errlen, "maxBlocksPerProcess and maxBlocksPerAllocation must not be 0");
                return -EINVAL;
        }
        g->units_total = (uint32_t)((uint64_t)g->nchunks * g->chunk_bytes / g->unit_bytes);
        if (g->units_total > GS_MAX_UNITS_PER_GPU)
                g->units_total = GS_MAX_UNITS_PER_GPU;
        g->unit_owner = calloc(g->units_total ? g->units_total : 1, sizeof(*g->unit_owner));
        if (!g->unit_owner) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        scrub_start(g);
        return 0;
}

void gs_gpu_close(struct gs_gpu *g)
{
        if (!g || !g->agent)
                return;
        const struct gs_gpu_scrub_stats *st = &g->scrub_st;
        scrub_stop(g);
        if (st->grants || st->scrubbed_bg)
                log_info("GPU %u: scrubs: %llu chunks granted: %llu clean, %llu back to their writer, %llu zeroed on "
                         "the request path, %llu waited for the scrubber; %llu zeroed in %llu batches in the "
                         "background; %llu failed",
                         g->index, (unsigned long long)st->grants, (unsigned long long)st->grants_clean,
                         (unsigned long long)st->grants_same, (unsigned long long)st->grants_scrubbed_sync,
                         (unsigned long long)st->grants_waited, (unsigned long long)st->scrubbed_bg,
                         (unsigned long long)st->batches_bg, (unsigned long long)st->failures);
        gs_ledger_close(&g->ledger);
        free(g->held_before);
        g->held_before = NULL;
        gs_pool_free(g->pool);
        g->pool = NULL;
        if (g->ctx)
                (void)g->agent->cu.ctx_set_current(g->ctx);
        for (uint32_t i = 0; g->chunks && i < g->nchunks; i++)
                chunk_drop(g, &g->chunks[i]);
        free(g->chunks);
        g->chunks = NULL;
        free(g->unit_owner);
        g->unit_owner = NULL;
        if (g->sync_ev)
                (void)g->agent->cu.event_destroy(g->sync_ev);
        if (g->scrub_ev)
                (void)g->agent->cu.event_destroy(g->scrub_ev);
        if (g->scrub_stream)
                (void)g->agent->cu.stream_destroy(g->scrub_stream);
        g->sync_ev = g->scrub_ev = NULL;
        g->scrub_stream = NULL;
        if (g->ctx)
                (void)g->agent->cu.primary_ctx_release(g->dev);
        g->ctx = NULL;
        pthread_mutex_destroy(&g->lock);
}

uint32_t gs_gpu_units_lent(struct gs_gpu *g)
{
        struct gs_pool_stats st;

        if (!g->pool)
                return 0;
        pthread_mutex_lock(&g->lock);
        gs_pool_stats(g->pool, &st);
        pthread_mutex_unlock(&g->lock);
        return (uint32_t)(((uint64_t)st.chunks_borrowed * g->chunk_bytes + g->unit_bytes - 1) /
                          g->unit_bytes);
}

uint32_t gs_gpu_units_allocated(const struct gs_gpu *g)
{
        uint32_t n = 0;

        for (uint32_t u = 0; u < g->units_total; u++)
                n += g->unit_owner[u] != NULL;
        return n;
}

void gs_gpu_check_lending(struct gs_gpu *g)
{
        struct gs_pool_stats st;

        gs_pool_stats(g->pool, &st);
        if (st.chunks_borrowed != g->last_borrowed) {
                g->last_borrowed = st.chunks_borrowed;
                gs_agent_poke(g->agent);
        }
}

int gs_gpu_chunks_hand_out(struct gs_gpu *g, const struct gs_grant *gr, uint32_t n,
                           struct gs_allocation *owner, uint64_t proc, int *fds, char *err,
                           size_t errlen)
{
        /* A chunk whose memory was given back to the driver (gs_vmm,
         * gs_outside) is re-created now, if the driver has room for it. */
        for (uint32_t i = 0; i < n; i++) {
                uint32_t c = gr[i].chunk;
                char why[200];

                if (c < g->nchunks && g->chunks[c].recycle)
                        chunk_drop(g, &g->chunks[c]);
                if (c < g->nchunks && g->chunks[c].fd < 0) {
                        (void)g->agent->cu.ctx_set_current(g->ctx);
                        if (gs_gpu_chunk_remake(g, c, why, sizeof(why)) < 0) {
                                snprintf(err, errlen, "chunk %u has no memory yet: %s", c, why);
                                return -ENOMEM;
                        }
                }
        }
        /* Chunks another process may have written are zeroed here, all
         * queued before one wait (the scrubber should have left few). */
        bool queued = false;
        for (uint32_t i = 0; i < n; i++) {
                uint32_t c = gr[i].chunk;
                char why[200];

                fds[i] = c < g->nchunks ? g->chunks[c].fd : -1;
                /* Its fd goes to a process of owner: its memory is the
                 * allocation's until it is gone. */
                if (c < g->nchunks)
                        g->chunks[c].owner = owner;
                if (fds[i] >= 0 && grant_prepare(g, &g->chunks[c], proc, &queued, why, sizeof(why)) < 0) {
                        log_warn("GPU %u: chunk %u not granted: %s", g->index, c, why);
                        fds[i] = -1;
                }
        }
        char why[200] = "";
        int r = queued ? grant_wait(g, why, sizeof(why)) : 0;
        for (uint32_t i = 0; i < n; i++) {
                struct gs_chunk *k = fds[i] >= 0 ? &g->chunks[gr[i].chunk] : NULL;
                if (!k)
                        continue;
                /* Queued above unless its last writer was none or proc. */
                if (r < 0 && k->writer != 0 && k->writer != proc) {
                        log_warn("GPU %u: chunk %u not granted: %s", g->index, gr[i].chunk, why);
                        g->scrub_st.failures++;
                        fds[i] = -1;
                        continue;
                }
                k->writer = proc;
        }
        return 0;
}
