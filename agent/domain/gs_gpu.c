/* gs_gpu.c — one GPU of the node (gs_gpu.h): its identity and primary
 * context, opening its pool of chunks and closing it all, the units it
 * offers and what of them is lent.  The chunks' memory: gs_gpu_chunk.c;
 * scrubbing: gs_gpu_scrub.c and gs_gpu_scrubber.c; restarts and upgrades:
 * gs_gpu_restart.c. */
#include "gs_gpu_int.h"

#include <ctype.h>
#include <errno.h>
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
        if (snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/numa_node", sysfs, id) >= (int)sizeof(path))
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
        const struct gs_cuda *cu = &g->node->cu;
        CUmemAllocationProp prop;
        CUuuid uuid;
        size_t free_b = 0, total_b = 0, gran = 0;
        char why[256];
        int r;

        g->index = (uint32_t)ordinal;
        g->restart.ledger.fd = -1;
        g->spillrec.rec.fd = -1; /* not open (0 would be a descriptor to close) */
        g->numa_node = -1;
        g->chunk_bytes = cfg->chunk_bytes;
        g->unit_bytes = cfg->unit_bytes;
        g->reserve_bytes = cfg->reserve_bytes;
        gs_gpu_lock_init(g);
        r = gs_cuda_check(cu, cu->device_get(&g->dev, ordinal), "cuDeviceGet", err, errlen);
        if (r < 0)
                return r;
        r = gs_cuda_check(cu, cu->device_get_name(g->name, (int)sizeof(g->name), g->dev), "cuDeviceGetName", err,
                          errlen);
        if (r == 0)
                r = gs_cuda_check(cu, cu->device_get_uuid(&uuid, g->dev), "cuDeviceGetUuid", err, errlen);
        if (r == 0)
                r = gs_cuda_check(cu, cu->device_get_pci_bus_id(g->pci_bus_id, (int)sizeof(g->pci_bus_id), g->dev),
                                  "cuDeviceGetPCIBusId", err, errlen);
        if (r == 0)
                r = gs_cuda_check(cu, cu->device_total_mem(&total_b, g->dev), "cuDeviceTotalMem", err, errlen);
        if (r < 0)
                return r;
        g->name[sizeof(g->name) - 1] = '\0';
        g->pci_bus_id[sizeof(g->pci_bus_id) - 1] = '\0';
        memcpy(g->uuid_raw, uuid.bytes, 16);
        gs_uuid_format(g->uuid_raw, g->uuid);
        g->numa_node = gs_gpu_numa_node("/sys", g->pci_bus_id);
        g->total_bytes = total_b;
        g->healthy = true;

        r = gs_cuda_check(cu, cu->primary_ctx_retain(&g->ctx, g->dev), "cuDevicePrimaryCtxRetain", err, errlen);
        if (r < 0) {
                g->ctx = NULL;
                set_unhealthy(g, err);
                return 0;
        }
        r = gs_cuda_check(cu, cu->ctx_set_current(g->ctx), "cuCtxSetCurrent", why, sizeof(why));
        if (r == 0)
                r = gs_cuda_check(cu, cu->mem_get_info(&free_b, &total_b), "cuMemGetInfo", why, sizeof(why));
        if (r == 0) {
                gs_gpu_chunk_prop(g, &prop);
                r = gs_cuda_check(cu, cu->mem_get_granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                                  "cuMemGetAllocationGranularity", why, sizeof(why));
        }
        if (r < 0) {
                set_unhealthy(g, why);
                return 0;
        }
        /* The size a context is charged at (gs_outside.h): configured, or
         * this very context as NVML sees it, before any chunk exists
         * (without NVML: 0, contexts come out of the reserve). */
        g->ctx_expect_bytes =
                cfg->context_bytes ? cfg->context_bytes : gs_nvml_pid_bytes(&g->node->nvml, g->uuid, getpid());
        if (gran && g->chunk_bytes % gran) {
                snprintf(why, sizeof(why), "chunk size %llu is not a multiple of the VMM granularity %zu",
                         (unsigned long long)g->chunk_bytes, gran);
                set_unhealthy(g, why);
                return 0;
        }
        (void)gs_gpu_scrub_setup(g);
        g->ctx_ready = true;
        return 0;
}

/* gs_gpu_open_pool under g->lock (nobody else uses g yet; the calls on
 * the chunks say they need it). */
static int open_pool(struct gs_gpu *g, const struct gs_config *cfg, const struct gs_gpu_inherit *inh, char *err,
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
                r = gs_gpu_open_inherited(g, cfg, inh, err, errlen);
                if (r < 0)
                        return r;
                goto pool;
        }
        r = gs_cuda_check(&g->node->cu, g->node->cu.mem_get_info(&free_b, &total_b), "cuMemGetInfo", why, sizeof(why));
        if (r < 0) {
                set_unhealthy(g, why);
                return 0;
        }
        want = free_b > g->reserve_bytes ? (free_b - g->reserve_bytes) / g->chunk_bytes : 0;
        before = gs_gpu_read_ledger(g, cfg);
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
                snprintf(why, sizeof(why), "%zu bytes free, not more than the reserve %llu plus one chunk", free_b,
                         (unsigned long long)g->reserve_bytes);
                set_unhealthy(g, why);
                return 0;
        }
        g->chunks = calloc(want, sizeof(*g->chunks));
        if (!g->chunks) {
                snprintf(err, errlen, "out of memory for %llu chunks", (unsigned long long)want);
                return -ENOMEM;
        }
        for (g->nchunks = 0; g->nchunks < want; g->nchunks++) {
                if (before && !gs_gpu_room_at_start(g)) {
                        r = -ENOSPC;
                        snprintf(why, sizeof(why), "no room for more now");
                } else {
                        r = gs_chunk_make(g, &g->chunks[g->nchunks], why, sizeof(why));
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
        g->moves.move_back_quiet_ms = cfg->move_back_quiet_ms;
        /* A restarted agent cannot know when an owner last asked: as if
         * just now, so that spilled data does not move back at once onto
         * what an owner was taking back (docs/burst.md "Agent restarts"). */
        g->moves.last_want_ms = gs_mono_ms();
        r = gs_gpu_spill_init(g, cfg->spill_max_bytes, err, errlen);
        if (r < 0)
                return r;
        g->pool = gs_pool_new(g->nchunks + g->moves.nspare, g->chunk_bytes);
        if (!g->pool) {
                snprintf(err, errlen, "cannot create the pool of %u chunks of %llu bytes", g->nchunks,
                         (unsigned long long)g->chunk_bytes);
                return -ENOMEM;
        }
        if (gs_pool_set_spares(g->pool, g->moves.nspare) < 0) {
                snprintf(err, errlen, "cannot set %u spare records", g->moves.nspare);
                return -EINVAL;
        }
        gs_pool_set_return_fn(g->pool, gs_gpu_chunk_recycle, g);
        gs_pool_set_hold_fn(g->pool, gs_gpu_chunk_hold, g);
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

int gs_gpu_open_pool(struct gs_gpu *g, const struct gs_config *cfg, const struct gs_gpu_inherit *inh, char *err,
                     size_t errlen)
{
        gs_gpu_lock(g);
        int r = open_pool(g, cfg, inh, err, errlen);
        gs_gpu_unlock(g);
        if (r == 0 && g->pool)
                gs_gpu_scrub_start(g);
        return r;
}

void gs_gpu_close(struct gs_gpu *g)
{
        if (!g || !g->node)
                return;
        const struct gs_gpu_scrub_stats *st = &g->scrub.st;
        gs_gpu_scrub_stop(g);
        if (st->grants || st->scrubbed_bg)
                log_info("GPU %u: scrubs: %llu chunks granted: %llu clean, %llu back to their writer, %llu zeroed on "
                         "the request path, %llu waited for the scrubber; %llu zeroed in %llu batches in the "
                         "background; %llu failed",
                         g->index, (unsigned long long)st->grants, (unsigned long long)st->grants_clean,
                         (unsigned long long)st->grants_same, (unsigned long long)st->grants_scrubbed_sync,
                         (unsigned long long)st->grants_waited, (unsigned long long)st->scrubbed_bg,
                         (unsigned long long)st->batches_bg, (unsigned long long)st->failures);
        gs_ledger_close(&g->restart.ledger);
        gs_gpu_spillrec_close(g);
        free(g->restart.held_before);
        g->restart.held_before = NULL;
        gs_gpu_lock(g); /* makes g->ctx current */
        gs_pool_free(g->pool);
        gs_gpu_spill_fini(g);
        g->pool = NULL;
        for (uint32_t i = 0; g->chunks && i < g->nchunks; i++)
                gs_chunk_drop(g, &g->chunks[i]);
        gs_gpu_unlock(g);
        free(g->chunks);
        g->chunks = NULL;
        free(g->unit_owner);
        g->unit_owner = NULL;
        if (g->scrub.sync_ev)
                (void)g->node->cu.event_destroy(g->scrub.sync_ev);
        if (g->scrub.ev)
                (void)g->node->cu.event_destroy(g->scrub.ev);
        if (g->scrub.stream)
                (void)g->node->cu.stream_destroy(g->scrub.stream);
        g->scrub.sync_ev = g->scrub.ev = NULL;
        g->scrub.stream = NULL;
        if (g->ctx)
                (void)g->node->cu.primary_ctx_release(g->dev);
        g->ctx = NULL;
        gs_gpu_lock_destroy(g);
}

uint32_t gs_gpu_units_lent(struct gs_gpu *g)
{
        struct gs_pool_stats st;

        if (!g->pool)
                return 0;
        gs_gpu_lock(g);
        gs_pool_stats(g->pool, &st);
        gs_gpu_unlock(g);
        return (uint32_t)(((uint64_t)st.chunks_borrowed * g->chunk_bytes + g->unit_bytes - 1) / g->unit_bytes);
}

uint32_t gs_gpu_units_allocated(const struct gs_gpu *g)
{
        uint32_t n = 0;

        for (uint32_t u = 0; u < g->units_total; u++)
                n += g->unit_owner[u] != NULL;
        return n;
}
