/* gs_gpu.c — see gs_gpu.h. */
#include "gs_gpu.h"

#include "gs_allocs.h"

#include <ctype.h>
#include <errno.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

int gs_gpu_mem_make(struct gs_gpu *g, uint64_t size, bool export_fd,
                    CUmemGenericAllocationHandle *ret_h, int *ret_fd, char *err, size_t errlen)
{
        const struct gs_cuda *cu = &g->agent->cu;
        CUmemAllocationProp prop;
        CUmemGenericAllocationHandle h;
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
                r = gs_gpu_scrub(g, h, size, err, errlen);
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
        return 0;
fail:
        gs_closep(&fd);
        (void)cu->mem_release(h);
        return r;
}

void gs_gpu_mem_drop(struct gs_gpu *g, CUmemGenericAllocationHandle h, int *fd)
{
        gs_closep(fd);
        (void)g->agent->cu.mem_release(h);
}

int gs_gpu_scrub(struct gs_gpu *g, CUmemGenericAllocationHandle h, uint64_t size, char *err,
                 size_t errlen)
{
        const struct gs_cuda *cu = &g->agent->cu;
        CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)g->dev },
                                .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        CUdeviceptr va = 0;
        bool mapped = false;
        int r;

        if (size == 0 || size % 4)
                return 0;
        r = gs_cuda_check(cu, cu->ctx_set_current(g->ctx), "scrub: cuCtxSetCurrent", err, errlen);
        if (r == 0)
                r = gs_cuda_check(cu, cu->mem_address_reserve(&va, size, 0, 0, 0),
                                  "scrub: cuMemAddressReserve", err, errlen);
        if (r < 0)
                return r;
        r = gs_cuda_check(cu, cu->mem_map(va, size, 0, h, 0), "scrub: cuMemMap", err, errlen);
        mapped = r == 0;
        if (r == 0)
                r = gs_cuda_check(cu, cu->mem_set_access(va, size, &acc, 1), "scrub: cuMemSetAccess",
                                  err, errlen);
        if (r == 0)
                r = gs_cuda_check(cu, cu->memset_d32(va, 0, size / 4), "scrub: cuMemsetD32", err,
                                  errlen);
        /* The memset is asynchronous to us: done before anyone may map it. */
        if (r == 0)
                r = gs_cuda_check(cu, cu->ctx_synchronize(), "scrub: cuCtxSynchronize", err, errlen);
        if (mapped)
                (void)cu->mem_unmap(va, size);
        (void)cu->mem_address_free(va, size);
        return r;
}

static int chunk_handle(struct gs_gpu *g, struct gs_chunk *c, char *err, size_t errlen);

int gs_gpu_chunk_grant(struct gs_gpu *g, uint32_t chunk, uint64_t proc, char *err, size_t errlen)
{
        struct gs_chunk *c;
        int r;

        if (chunk >= g->nchunks || g->chunks[chunk].fd < 0) {
                snprintf(err, errlen, "chunk %u has no memory", chunk);
                return -EINVAL;
        }
        c = &g->chunks[chunk];
        if (c->writer != 0 && c->writer != proc) {
                r = chunk_handle(g, c, err, errlen);
                if (r < 0)
                        return r;
                r = gs_gpu_scrub(g, c->handle, g->chunk_bytes, err, errlen);
                if (r < 0)
                        return r;
        }
        c->writer = proc;
        return 0;
}

/* Creates and exports one chunk.  Returns 0 or a negative errno (err set). */
static int chunk_make(struct gs_gpu *g, struct gs_chunk *ret, char *err, size_t errlen)
{
        ret->writer = 0; /* scrubbed by gs_gpu_mem_make */
        int r = gs_gpu_mem_make(g, g->chunk_bytes, true, &ret->handle, &ret->fd, err, errlen);
        ret->memid = r == 0 ? ++g->memid_next : 0;
        if (r == 0)
                ret->kept = false;
        return r;
}

static void chunk_drop(struct gs_gpu *g, struct gs_chunk *c)
{
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
        return 0;
}

void gs_gpu_close(struct gs_gpu *g)
{
        if (!g || !g->agent)
                return;
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
        for (uint32_t i = 0; i < n; i++) {
                uint32_t c = gr[i].chunk;
                char why[200];

                fds[i] = c < g->nchunks ? g->chunks[c].fd : -1;
                /* Its fd goes to a process of owner: its memory is the
                 * allocation's until it is gone. */
                if (c < g->nchunks)
                        g->chunks[c].owner = owner;
                /* It may hold another process's data. */
                if (fds[i] >= 0 && gs_gpu_chunk_grant(g, c, proc, why, sizeof(why)) < 0) {
                        log_warn("GPU %u: chunk %u not granted: %s", g->index, c, why);
                        fds[i] = -1;
                }
        }
        return 0;
}
