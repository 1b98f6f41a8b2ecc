/* gs_gpu_chunk.c — a GPU's chunk records and their device memory
 * (gs_gpu_chunk.h; gs_gpu.h for the memory itself): memory made zeroed and
 * exported, room in the driver, a chunk's memory made, dropped,
 * re-created or taken from a free chunk, recycled when it comes back to
 * the system list, pending until the driver has room, chunks trading
 * memory (a restart), chunks made ready to hand out. */
#include "gs_gpu_int.h"

#include "gs_allocs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#include "gs_log.h"
#include "gs_logrep.h"

void gs_gpu_chunk_prop(const struct gs_gpu *g, CUmemAllocationProp *prop)
{
        memset(prop, 0, sizeof(*prop));
        prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop->location.id = (int)g->dev;
}

/* The driver's free bytes, and what of them is kept free. */
static int room_figures(struct gs_gpu *g, size_t *free_b, uint64_t *need, char *err, size_t errlen)
{
        size_t total_b = 0;

        *free_b = 0;
        *need = g->reserve_bytes + g->ctx_promised;
        if (g->node->cu.mem_get_info(free_b, &total_b) != CUDA_SUCCESS) {
                snprintf(err, errlen, "cuMemGetInfo failed");
                return -EIO;
        }
        return 0;
}

uint64_t gs_gpu_room_left(struct gs_gpu *g)
{
        gs_gpu_assert_locked(g);
        size_t free_b;
        uint64_t need;
        char err[64];

        if (room_figures(g, &free_b, &need, err, sizeof(err)) < 0 || free_b <= need)
                return 0;
        return free_b - need;
}

int gs_gpu_room(struct gs_gpu *g, uint64_t bytes, char *err, size_t errlen)
{
        gs_gpu_assert_locked(g);
        size_t free_b;
        uint64_t need;
        int r = room_figures(g, &free_b, &need, err, errlen);

        if (r < 0)
                return r;
        if (free_b >= bytes && free_b - bytes >= need)
                return 0;
        snprintf(err, errlen,
                 "no room in the driver for %llu MiB: %llu MiB free, %llu MiB kept free "
                 "(reserve and contexts being created)",
                 (unsigned long long)(bytes >> 20), (unsigned long long)(free_b >> 20),
                 (unsigned long long)(need >> 20));
        return -ENOSPC;
}

int gs_gpu_mem_export(struct gs_gpu *g, CUmemGenericAllocationHandle h, int *ret_fd, char *err, size_t errlen)
{
        int fd = -1;
        int r = gs_cuda_check(&g->node->cu, g->node->cu.mem_export(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                              "cuMemExportToShareableHandle", err, errlen);

        if (r < 0)
                return r;
        /* The driver's fd must not leak into anything the agent might exec. */
        if (fd < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
                r = fd < 0 ? -EBADF : gs_neg_errno();
                snprintf(err, errlen, "exported fd unusable: %s", strerror(-r));
                gs_closep(&fd);
                return r;
        }
        *ret_fd = fd;
        return 0;
}

/* Creates size bytes of memory, zeroed, exported if export_fd.  ret_va
 * non-NULL (a chunk): the agent's mapping that zeroed it stays, in
 * *ret_va, for later scrubs; else none is left. */
static int mem_make(struct gs_gpu *g, uint64_t size, bool export_fd, CUmemGenericAllocationHandle *ret_h, int *ret_fd,
                    CUdeviceptr *ret_va, char *err, size_t errlen)
{
        const struct gs_cuda *cu = &g->node->cu;
        CUmemAllocationProp prop;
        CUmemGenericAllocationHandle h;
        CUdeviceptr va = 0;
        int fd = -1, r;

        if (!gs_gpu_makes_memory(g)) {
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
        gs_gpu_chunk_prop(g, &prop);
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
                                r = gs_gpu_map_new(g, h, size, &va, err, errlen);
                        if (r == 0)
                                r = gs_gpu_scrub_queue(g, va, size, err, errlen);
                        if (r == 0)
                                r = gs_gpu_scrub_sync(g, err, errlen);
                } else {
                        r = gs_gpu_scrub(g, h, size, err, errlen);
                }
                if (r < 0)
                        goto fail;
                r = gs_gpu_mem_export(g, h, &fd, err, errlen);
                if (r < 0)
                        goto fail;
        }
        *ret_h = h;
        *ret_fd = fd;
        if (ret_va)
                *ret_va = va;
        return 0;
fail:
        gs_closep(&fd);
        if (va)
                gs_gpu_unmap_va(g, va, size);
        (void)cu->mem_release(h);
        return r;
}

int gs_gpu_mem_make(struct gs_gpu *g, uint64_t size, bool export_fd, CUmemGenericAllocationHandle *ret_h, int *ret_fd,
                    char *err, size_t errlen)
{
        gs_gpu_assert_locked(g);
        return mem_make(g, size, export_fd, ret_h, ret_fd, NULL, err, errlen);
}

void gs_gpu_mem_drop(struct gs_gpu *g, CUmemGenericAllocationHandle h, int *fd)
{
        gs_closep(fd);
        (void)g->node->cu.mem_release(h);
}

/* Creates and exports one chunk, mapped for the agent.  Returns 0 or a
 * negative errno (err set). */
int gs_chunk_make(struct gs_gpu *g, struct gs_chunk *ret, char *err, size_t errlen)
{
        gs_gpu_assert_locked(g);
        ret->writer = 0; /* zeroed by mem_make */
        ret->va = 0;
        ret->scrubbing = false;
        int r = mem_make(g, g->chunk_bytes, true, &ret->handle, &ret->fd, &ret->va, err, errlen);
        ret->memid = r == 0 ? ++g->memid_next : 0;
        if (r == 0 && ret->state == GS_CHUNK_KEPT)
                ret->state = GS_CHUNK_OURS;
        return r;
}

void gs_chunk_drop(struct gs_gpu *g, struct gs_chunk *c)
{
        gs_gpu_assert_locked(g);
        gs_chunk_unmap(g, c);
        if (c->fd >= 0 && c->handle)
                gs_gpu_mem_drop(g, c->handle, &c->fd);
        else
                gs_closep(&c->fd);
        c->handle = 0;
        if (gs_chunk_inherited(c))
                c->state = GS_CHUNK_OURS;
        c->memid = 0;
}

void gs_gpu_chunk_drop(struct gs_gpu *g, uint32_t chunk)
{
        gs_gpu_assert_locked(g);
        if (chunk < g->nchunks)
                gs_chunk_drop(g, &g->chunks[chunk]);
}

bool gs_gpu_chunk_fill(struct gs_gpu *g, uint32_t chunk)
{
        gs_gpu_assert_locked(g);
        if (chunk >= g->nchunks)
                return false;
        if (g->chunks[chunk].fd >= 0)
                return true;
        /* Its memory may be held by a process of the allocation: granted
         * to one (owner), or behind its VMM allocations (kept). */
        if (g->chunks[chunk].state == GS_CHUNK_KEPT || g->chunks[chunk].state == GS_CHUNK_PENDING ||
            g->chunks[chunk].owner)
                return false;
        for (uint32_t d = 0; d < g->nchunks; d++) {
                struct gs_chunk *c = &g->chunks[d];
                if (c->fd < 0 || c->state == GS_CHUNK_PENDING || c->state == GS_CHUNK_RECYCLE ||
                    !gs_pool_chunk_in_sys(g->pool, d))
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
        gs_gpu_assert_locked(g);
        struct gs_chunk *c;
        int r;

        if (chunk >= g->nchunks) {
                snprintf(err, errlen, "no chunk %u", chunk);
                return -EINVAL;
        }
        c = &g->chunks[chunk];
        if (c->fd >= 0)
                return 0;
        r = gs_chunk_make(g, c, err, errlen);
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
        gs_gpu_assert_locked(g);
        char err[256];

        /* Free chunks without memory (after a restart, or given back
         * without it) are made as soon as the driver has room: memory left
         * free would be a bypassing process's for the taking.  A bounded
         * number per scan: the workers wait for the lock meanwhile. */
        uint32_t budget = GS_GPU_REMAKE_PER_SCAN;
        for (uint32_t i = 0; i < g->nchunks && budget; i++) {
                struct gs_chunk *c = &g->chunks[i];
                if ((c->fd >= 0 && c->state != GS_CHUNK_RECYCLE) || c->state == GS_CHUNK_PENDING ||
                    gs_pool_chunk_held(g->pool, i))
                        continue;
                if (c->state == GS_CHUNK_RECYCLE)
                        gs_chunk_drop(g, c);
                budget--;
                if (gs_chunk_make(g, c, err, sizeof(err)) < 0) {
                        c->fd = -1;
                        break;
                }
        }
        if (!g->chunks_pending)
                return;
        for (uint32_t i = 0; i < g->nchunks && g->chunks_pending; i++) {
                struct gs_chunk *c = &g->chunks[i];

                if (c->state != GS_CHUNK_PENDING || gs_chunk_make(g, c, err, sizeof(err)) < 0)
                        continue;
                if (gs_pool_unretire_chunk(g->pool, i) < 0) {
                        log_error("GPU %u: pending chunk %u not back in the pool", g->index, i);
                        continue;
                }
                owner_debt(g, c, -1);
                c->owner = NULL;
                c->state = GS_CHUNK_OURS;
                g->chunks_pending--;
                log_info("GPU %u: chunk %u re-created, back in the pool", g->index, i);
        }
}

void gs_gpu_forget_owner(struct gs_gpu *g, const struct gs_allocation *a)
{
        gs_gpu_assert_locked(g);
        for (uint32_t i = 0; i < g->nchunks; i++)
                if (g->chunks[i].owner == a)
                        g->chunks[i].owner = NULL;
}

void gs_gpu_chunk_swap(struct gs_gpu *g, uint32_t a, uint32_t b)
{
        gs_gpu_assert_locked(g);
        struct gs_chunk t;

        if (a >= g->nchunks || b >= g->nchunks || a == b)
                return;
        t = g->chunks[a];
        g->chunks[a] = g->chunks[b];
        g->chunks[b] = t;
}

int gs_gpu_chunk_orphan(struct gs_gpu *g, uint32_t chunk)
{
        gs_gpu_assert_locked(g);
        if (chunk >= g->nchunks || g->chunks[chunk].fd < 0)
                return 0;
        for (uint32_t d = 0; d < g->nchunks; d++) {
                struct gs_chunk *c = &g->chunks[d];
                if (c->fd >= 0 || c->state == GS_CHUNK_PENDING || c->state == GS_CHUNK_KEPT ||
                    gs_pool_chunk_held(g->pool, d))
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

        return chunk < g->nchunks && (g->chunks[chunk].fd < 0 || gs_chunk_inherited(&g->chunks[chunk]));
}

uint32_t gs_gpu_orphans_of(struct gs_gpu *g, const struct gs_pproc *p)
{
        gs_gpu_assert_locked(g);
        return p ? gs_pproc_count_held(p, no_memory, g) : 0;
}

/* gs_pool_return_fn; runs under g->lock, inside an allocator call. */
int gs_gpu_chunk_recycle(void *ctx, uint32_t chunk)
{
        struct gs_gpu *g = ctx;
        gs_gpu_assert_locked(g);
        struct gs_chunk *c;
        char err[256];
        int r;

        if (chunk >= g->nchunks)
                return -EINVAL;
        c = &g->chunks[chunk];
        /* Old memory first: on a full GPU there is no room for both.  If a
         * process still holds the old memory through a kept fd, the driver
         * has no room for the new (gs_gpu_room): the chunk is pending,
         * retired until it can be re-created (gs_gpu_retry_pending), and
         * charged to the allocation whose process may hold it. */
        gs_chunk_drop(g, c);
        r = gs_chunk_make(g, c, err, sizeof(err));
        if (r < 0) {
                c->fd = -1;
                c->state = GS_CHUNK_PENDING;
                g->chunks_pending++;
                owner_debt(g, c, 1);
                log_info("GPU %u: chunk %u not re-created yet, retried later: %s", g->index, chunk, err);
                return -EAGAIN;
        }
        c->owner = NULL;
        log_debug("GPU %u: chunk %u recycled", g->index, chunk);
        return 0;
}

int gs_gpu_chunks_hand_out(struct gs_gpu *g, const struct gs_grant *gr, uint32_t n, struct gs_allocation *owner,
                           uint64_t proc, int *fds, char *err, size_t errlen)
{
        gs_gpu_assert_locked(g);
        /* A chunk whose memory was given back to the driver (gs_vmm,
         * gs_outside) is re-created now, if the driver has room for it. */
        for (uint32_t i = 0; i < n; i++) {
                uint32_t c = gr[i].chunk;
                char why[200];

                if (c < g->nchunks && g->chunks[c].state == GS_CHUNK_RECYCLE)
                        gs_chunk_drop(g, &g->chunks[c]);
                if (c < g->nchunks && g->chunks[c].fd < 0) {
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
                if (fds[i] >= 0 && gs_gpu_grant_prepare(g, &g->chunks[c], proc, &queued, why, sizeof(why)) < 0) {
                        log_warn_rep((uint64_t)g->index << 32 | c, "GPU %u: chunk %u not granted: %s", g->index, c,
                                     why);
                        fds[i] = -1;
                }
        }
        char why[200] = "";
        int r = queued ? gs_gpu_grant_wait(g, why, sizeof(why)) : 0;
        for (uint32_t i = 0; i < n; i++) {
                struct gs_chunk *k = fds[i] >= 0 ? &g->chunks[gr[i].chunk] : NULL;
                if (!k)
                        continue;
                /* Queued above unless its last writer was none or proc. */
                if (r < 0 && k->writer != 0 && k->writer != proc) {
                        log_warn_rep((uint64_t)g->index << 32 | gr[i].chunk, "GPU %u: chunk %u not granted: %s",
                                     g->index, gr[i].chunk, why);
                        g->scrub.st.failures++;
                        fds[i] = -1;
                        continue;
                }
                k->writer = proc;
        }
        return 0;
}

void gs_gpu_check_lending(struct gs_gpu *g)
{
        gs_gpu_assert_locked(g);
        struct gs_pool_stats st;

        gs_pool_stats(g->pool, &st);
        if (g->moves.nspare)
                gs_gpu_spillrec_debts(g);
        if (st.chunks_borrowed != g->last_borrowed) {
                g->last_borrowed = st.chunks_borrowed;
                gs_node_poke(g->node);
        }
}
