/* gs_hook_mem.c — the application's device memory through the agent:
 * blocks allocated, freed, their ranges; what the device has (meminfo,
 * total, for NVML by UUID); its contexts charged before they exist.
 * Every function returns 0 or a negative errno (gs_hook_api.c turns them
 * into the driver's codes). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "gs_hook_space.h"

int gs_hook_mem_alloc(CUdeviceptr *ret_ptr, size_t size)
{
        const struct gs_cu *cu;
        struct gs_ring_msg rep;
        struct gs_hook_gpu *g;
        const char *why = NULL;
        CUdevice dev = -1;
        int res;
        int gi;

        if (!ret_ptr || size == 0)
                return -EINVAL;
        pthread_mutex_lock(&gs_conn.mu);
        cu = gs_conn_ready();
        if (!cu) {
                res = -ENOMEM;
                goto out;
        }
        gi = gs_space_cur_gpu(cu, &dev);
        if (gi < 0) {
                res = gs_space_gpu_err(gi, dev);
                goto out;
        }
        g = &gs_conn.gpus[gi];
        if (size > (uint64_t)g->chunk * g->max_slots) {
                res = -ENOMEM;
                goto out;
        }
        res = gs_space_reserve(cu, g);
        if (res != 0)
                goto out;
        gs_space_give_back_if_asked(cu);
        bool retried = false;
        uint32_t waited = 0;
again:
        if (gs_conn_call(GS_OP_ALLOC, (uint32_t)gi, size, 0, &rep) < 0) {
                res = -ENOMEM;
                goto out;
        }
        if (rep.arg[1] > GS_MAX_GRANTS_PER_REPLY || rep.arg[1] > g->max_slots) {
                gs_conn_lost("too many chunk grants in one reply");
                res = -ENOMEM;
                goto out;
        }
        if (gs_space_take_grants(cu, (uint32_t)gi, dev, rep.seq, rep.arg[1], &why) < 0) {
                gs_conn_lost(why);
                res = -ENOMEM;
                goto out;
        }
        if (rep.status == -ENOMEM && !retried && gs_space_give_back(cu, gi) > 0) {
                /* Chunks of ours without a live block were in the way
                 * (cached for reuse, or freed): they are the allocation's
                 * again, for this request too. */
                retried = true;
                goto again;
        }
        if (rep.status == -ENOMEM && rep.others_asked && gs_space_wait_for_others(&waited, rep.others_asked))
                goto again;
        if (rep.status != 0) {
                res = gs_conn_status(rep.status);
                goto out;
        }
        /* The block must lie in chunks we have mapped. */
        uint64_t off = rep.arg[0], span = (uint64_t)g->chunk * g->max_slots;
        if (off % GS_MIN_ALIGN || off >= span || size > span - off) {
                gs_conn_lost("the agent returned an offset outside our range");
                res = -ENOMEM;
                goto out;
        }
        for (uint64_t s = off / g->chunk; s <= (off + size - 1) / g->chunk; s++)
                if (!g->mapped[s]) {
                        gs_conn_lost("the agent returned an offset in an unmapped chunk");
                        res = -ENOMEM;
                        goto out;
                }
        *ret_ptr = g->va_base + off;
        gs_blocks_add(&g->blocks, off, size);
        res = 0;
out:
        pthread_mutex_unlock(&gs_conn.mu);
        return res;
}

int gs_hook_mem_owns(CUdeviceptr ptr)
{
        int r;

        pthread_mutex_lock(&gs_conn.mu);
        r = gs_space_owner(ptr) >= 0;
        pthread_mutex_unlock(&gs_conn.mu);
        return r;
}

int gs_hook_mem_free(CUdeviceptr ptr)
{
        const struct gs_cu *cu = gs_cu_get();
        struct gs_ring_msg rep;
        struct gs_hook_gpu *g;
        int res;
        int gi;

        pthread_mutex_lock(&gs_conn.mu);
        gi = gs_space_owner(ptr);
        if (gi < 0) {
                res = -EINVAL;
                goto out;
        }
        g = &gs_conn.gpus[gi];
        /* Gone from what a reclaim reports, whatever happens next. */
        (void)gs_blocks_del(&g->blocks, ptr - g->va_base);
        /* Its handle dies with it, here and in any later agent. */
        gs_hook_ipc_forget((uint32_t)gi, ptr - g->va_base);
        if (gs_conn.state != GS_CONN_UP || !cu) {
                /* No agent now: a free never waits for one.  A new agent
                 * learns it from the reclaim (the block is not in it); a
                 * lost one for good gets the memory back at exit. */
                res = 0;
                goto out;
        }
        if (gs_conn_call(GS_OP_FREE, (uint32_t)gi, ptr - g->va_base, 0, &rep) < 0) {
                res = 0;
                goto out;
        }
        res = gs_conn_status(rep.status);
        if (res != 0 || rep.arg[1] == 0)
                goto out;
        uint64_t first = rep.arg[0], count = rep.arg[1];
        if (first >= g->max_slots || count > g->max_slots - first) {
                gs_conn_lost("the agent asked to release slots outside our range");
                goto out;
        }
        (void)gs_space_release(cu, gi, first, count);
out:
        if (cu)
                gs_space_give_back_if_asked(cu);
        pthread_mutex_unlock(&gs_conn.mu);
        return res;
}

int gs_hook_mem_range(CUdeviceptr ptr, CUdeviceptr *ret_base, size_t *ret_size)
{
        struct gs_ring_msg rep;
        int res;
        int gi;

        pthread_mutex_lock(&gs_conn.mu);
        gi = gs_space_owner(ptr);
        if (gi < 0 || !gs_conn_up()) {
                res = -ENOENT;
                goto out;
        }
        if (gs_conn_call(GS_OP_RANGE, (uint32_t)gi, ptr - gs_conn.gpus[gi].va_base, 0, &rep) < 0) {
                res = -ENOENT;
                goto out;
        }
        if (rep.status != 0) {
                res = -ENOENT;
                goto out;
        }
        uint64_t span = (uint64_t)gs_conn.gpus[gi].chunk * gs_conn.gpus[gi].max_slots;
        if (rep.arg[0] >= span || rep.arg[1] > span - rep.arg[0]) {
                gs_conn_lost("the agent returned a range outside our range");
                res = -ENOENT;
                goto out;
        }
        if (ret_base)
                *ret_base = gs_conn.gpus[gi].va_base + rep.arg[0];
        if (ret_size)
                *ret_size = rep.arg[1];
        res = 0;
out:
        pthread_mutex_unlock(&gs_conn.mu);
        return res;
}

int gs_hook_mem_info(size_t *ret_free, size_t *ret_total)
{
        const struct gs_cu *cu;
        struct gs_ring_msg rep;
        CUdevice dev = -1;
        int res = -ENOMEM;
        int gi;

        if (!ret_free || !ret_total)
                return -EINVAL;
        pthread_mutex_lock(&gs_conn.mu);
        cu = gs_conn_ready();
        if (!cu)
                goto out;
        gi = gs_space_cur_gpu(cu, &dev);
        if (gi == -EBADR) {
                res = -EBADR;
                goto out;
        }
        if (gi < 0) {
                /* Not ours: nothing can be allocated there. */
                *ret_free = 0;
                *ret_total = 0;
                res = 0;
                goto out;
        }
        gs_space_give_back_if_asked(cu);
        if (gs_conn_call(GS_OP_MEMINFO, (uint32_t)gi, 0, 0, &rep) < 0 || rep.status != 0)
                goto out;
        *ret_total = rep.arg[1];
        *ret_free = rep.arg[0] > rep.arg[1] ? rep.arg[1] : rep.arg[0];
        res = 0;
out:
        pthread_mutex_unlock(&gs_conn.mu);
        return res;
}

int gs_hook_mem_ctx(CUdevice dev)
{
        const struct gs_cu *cu;
        struct gs_ring_msg rep;
        int res = -ENOMEM;
        int gi;

        pthread_mutex_lock(&gs_conn.mu);
        cu = gs_conn_ready();
        if (!cu) {
                /* No agent: memory calls fail closed (and say so); the
                 * context itself is no way around that, and a process
                 * that wanted one could bypass the hook anyway. */
                res = 0;
                goto out;
        }
        gi = gs_space_dev_gpu(cu, dev);
        if (gi < 0 || gs_conn.gpus[gi].ctx_charged) {
                /* Not ours (memory calls on it are refused), or done. */
                res = 0;
                goto out;
        }
        if (gs_conn_call(GS_OP_CTX, (uint32_t)gi, 0, 0, &rep) < 0)
                goto out;
        if (rep.status == -ENOMEM && gs_space_give_back(cu, gi) > 0 &&
            gs_conn_call(GS_OP_CTX, (uint32_t)gi, 0, 0, &rep) < 0)
                goto out;
        /* Chunks asked of the pod's other processes, or taken back from
         * borrowers (docs/burst.md): worth waiting for, as an allocation. */
        for (uint32_t waited = 0;
             rep.status == -ENOMEM && rep.others_asked && gs_space_wait_for_others(&waited, rep.others_asked);)
                if (gs_conn_call(GS_OP_CTX, (uint32_t)gi, 0, 0, &rep) < 0)
                        goto out;
        if (rep.status == 0) {
                gs_conn.gpus[gi].ctx_charged = 1;
                res = 0;
                goto out;
        }
        gs_hook_say_once(GS_ONCE_CTX,
                         "no room for a CUDA context on device %d: gshare allocation %016llx "
                         "uses %llu of %llu MiB (%llu MiB of it outside the pool: contexts, modules); "
                         "CUDA_ERROR_OUT_OF_MEMORY",
                         dev, (unsigned long long)rep.arg[3], (unsigned long long)(rep.arg[1] >> 20),
                         (unsigned long long)(rep.arg[0] >> 20), (unsigned long long)(rep.arg[2] >> 20));
        res = rep.status == -ENOMEM ? -ENOMEM : gs_conn_status(rep.status);
out:
        pthread_mutex_unlock(&gs_conn.mu);
        return res;
}

void gs_hook_mem_ctx_done(CUdevice dev)
{
        const struct gs_cu *cu;
        struct gs_ring_msg rep;
        int gi;

        pthread_mutex_lock(&gs_conn.mu);
        cu = gs_conn.state == GS_CONN_UP ? gs_cu_get() : NULL;
        gi = cu ? gs_space_dev_gpu(cu, dev) : -ENODEV;
        if (gi >= 0 && gs_conn.gpus[gi].ctx_charged && !gs_conn.gpus[gi].ctx_done) {
                gs_conn.gpus[gi].ctx_done = 1;
                (void)!gs_conn_call(GS_OP_CTX_DONE, (uint32_t)gi, 0, 0, &rep);
        }
        pthread_mutex_unlock(&gs_conn.mu);
}

int gs_hook_mem_total(CUdevice dev, size_t *ret_bytes)
{
        const struct gs_cu *cu;
        CUuuid u;
        int res = -ENOMEM;

        if (!ret_bytes)
                return -EINVAL;
        pthread_mutex_lock(&gs_conn.mu);
        cu = gs_conn_ready();
        if (!cu)
                goto out;
        if (!cu->device_get_uuid_v2 || cu->device_get_uuid_v2(&u, dev) != CUDA_SUCCESS) {
                res = -ENODEV;
                goto out;
        }
        *ret_bytes = 0;
        for (uint32_t i = 0; i < gs_conn.ngpus; i++)
                if (!memcmp(gs_conn.gpus[i].uuid, u.bytes, 16))
                        *ret_bytes = gs_conn.gpus[i].quota;
        res = 0;
out:
        pthread_mutex_unlock(&gs_conn.mu);
        return res;
}

/* For NVML (no CUDA context, maybe no cuInit): the device is named by its
 * UUID, and registration may happen here. */
int gs_hook_mem_info_uuid(const uint8_t uuid[16], uint64_t *ret_obtainable, uint64_t *ret_quota)
{
        struct gs_ring_msg rep;
        uint32_t gi;
        int r = -ENOTCONN;

        pthread_mutex_lock(&gs_conn.mu);
        if (!gs_conn_up())
                goto out;
        for (gi = 0; gi < gs_conn.ngpus && memcmp(gs_conn.gpus[gi].uuid, uuid, 16); gi++)
                ;
        if (gi == gs_conn.ngpus) {
                r = -ENODEV;
                goto out;
        }
        if (gs_conn_call(GS_OP_MEMINFO, gi, 0, 0, &rep) < 0)
                goto out; /* the connection is gone */
        if (rep.status != 0) {
                r = -EIO;
                goto out;
        }
        *ret_quota = rep.arg[1];
        *ret_obtainable = rep.arg[0] > rep.arg[1] ? rep.arg[1] : rep.arg[0];
        r = 0;
out:
        pthread_mutex_unlock(&gs_conn.mu);
        return r;
}
