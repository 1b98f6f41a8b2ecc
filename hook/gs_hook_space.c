/* gs_hook_space.c — the process's address space for gshare memory: one
 * reserved virtual range per GPU of the allocation (slot * chunk), the
 * chunks the agent grants imported and mapped at their slots, access for
 * the device and its peers.  See gs_hook_space.h. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gs_hook_space.h"

static void (*g_on_reserved)(void);

void gs_space_set_on_reserved(void (*fn)(void))
{
        g_on_reserved = fn;
}

/* pre: gs_conn.mu held.  The gs_conn.gpus index of the current context's device, or a
 * negative errno (-ENODEV: the device is not in the allocation). */
int gs_space_dev_gpu(const struct gs_cu *cu, CUdevice dev)
{
        CUuuid u;

        if (dev < 0 || dev >= GS_MAX_DEVICES)
                return -ENODEV;
        if (gs_conn.devmap[dev] == -2) {
                gs_conn.devmap[dev] = -1;
                if (cu->device_get_uuid_v2 && cu->device_get_uuid_v2(&u, dev) == CUDA_SUCCESS)
                        for (uint32_t i = 0; i < gs_conn.ngpus; i++)
                                if (!memcmp(gs_conn.gpus[i].uuid, u.bytes, 16))
                                        gs_conn.devmap[dev] = (int)i;
        }
        return gs_conn.devmap[dev] >= 0 ? gs_conn.devmap[dev] : -ENODEV;
}

/* pre: gs_conn.mu held.  The same for the current context's device. */
int gs_space_cur_gpu(const struct gs_cu *cu, CUdevice *ret_dev)
{
        CUdevice dev = -1;

        if (!cu->ctx_get_device || cu->ctx_get_device(&dev) != CUDA_SUCCESS)
                return -EBADR; /* no current context */
        *ret_dev = dev;
        return gs_space_dev_gpu(cu, dev);
}

/* pre: gs_conn.mu held.  Reserves the GPU's range on first use. */
int gs_space_reserve(const struct gs_cu *cu, struct gs_hook_gpu *g)
{
        CUdeviceptr va = 0;
        CUresult r;

        if (g->va_base)
                return 0;
        if (!cu->mem_address_reserve)
                return -EOPNOTSUPP;
        g->mapped = calloc(g->max_slots, 1);
        if (!g->mapped)
                return -ENOMEM;
        r = cu->mem_address_reserve(&va, (size_t)g->chunk * g->max_slots, g->chunk, 0, 0);
        if (r != CUDA_SUCCESS || !va) {
                free(g->mapped);
                g->mapped = NULL;
                return -ENOMEM;
        }
        g->va_base = va;
        /* The process will hold chunks: its thread answers the agent's
         * give-back requests without waiting for its next call. */
        if (g_on_reserved)
                g_on_reserved();
        return 0;
}

uint64_t gs_space_devices(const struct gs_cu *cu)
{
        uint64_t devs = 0;
        int count = 0;

        if (cu->device_get_count && cu->device_get_count(&count) == CUDA_SUCCESS)
                for (CUdevice d = 0; d < count && d < GS_MAX_DEVICES; d++)
                        if (gs_space_dev_gpu(cu, d) >= 0)
                                devs |= UINT64_C(1) << d;
        return devs;
}

/* pre: gs_conn.mu held.  Natively cuMemFree waits for the device: work
 * still queued may use a chunk about to go (its other blocks were freed
 * before, their kernels maybe not done).  The context current on this
 * thread; on a thread without one (the hook's) every context that may run
 * work on the allocation's GPUs.  0, or -EBUSY: some cannot be. */
static int gs_space_sync(const struct gs_cu *cu)
{
        CUdevice dev;

        if (cu->ctx_get_device && cu->ctx_get_device(&dev) == CUDA_SUCCESS) {
                if (cu->ctx_synchronize)
                        (void)cu->ctx_synchronize();
                return 0;
        }
        return gs_ctx_sync_devices(cu, gs_space_devices(cu));
}

/* Read-write access to [at, at+size) for dev, whose memory it is, and for
 * every other device of this allocation that can reach dev's memory (peer
 * access: cudaMemcpyPeer, t.to("cuda:1"), a kernel on one GPU reading the
 * other's memory work on gshare memory as natively).  Devices outside the
 * allocation get nothing.  One call may span several mappings, which is
 * what makes a k-chunk grant cheap.  pre: gs_conn.mu held. */
int gs_space_access(const struct gs_cu *cu, CUdeviceptr at, size_t size, CUdevice dev)
{
        CUmemAccessDesc acc[GS_MAX_GPUS_PER_ALLOC];
        size_t n = 0;
        int count = 0;

        acc[n++] = (CUmemAccessDesc){ { CU_MEM_LOCATION_TYPE_DEVICE, dev }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        if (gs_conn.ngpus > 1 && cu->device_get_count && cu->device_can_access_peer &&
            cu->device_get_count(&count) == CUDA_SUCCESS)
                for (CUdevice d = 0; d < count && d < GS_MAX_DEVICES && n < GS_ARRAY_SIZE(acc); d++) {
                        int can = 0;
                        if (d == dev || gs_space_dev_gpu(cu, d) < 0 ||
                            cu->device_can_access_peer(&can, d, dev) != CUDA_SUCCESS || !can)
                                continue;
                        acc[n++] = (CUmemAccessDesc){ { CU_MEM_LOCATION_TYPE_DEVICE, d },
                                                      CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
                }
        return cu->mem_set_access(at, size, acc, n) == CUDA_SUCCESS ? 0 : -EIO;
}

/* Imports fd and maps it at `at`; access is set too unless the caller sets
 * it for a larger range afterwards (access = 0).  Closes fd. */
static int gs_map_fd_access(const struct gs_cu *cu, CUdeviceptr at, size_t size, CUdevice dev, int fd, int access)
{
        CUmemGenericAllocationHandle h;
        int r = -EIO;

        if (!cu->mem_import_from_shareable_handle || !cu->mem_map || !cu->mem_set_access || !cu->mem_release ||
            !cu->mem_unmap)
                goto out;
        if (cu->mem_import_from_shareable_handle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) !=
            CUDA_SUCCESS)
                goto out;
        if (cu->mem_map(at, size, 0, h, 0) != CUDA_SUCCESS) {
                (void)cu->mem_release(h);
                goto out;
        }
        /* The mapping keeps the memory; our handle is not needed. */
        (void)cu->mem_release(h);
        if (access && gs_space_access(cu, at, size, dev) < 0) {
                (void)cu->mem_unmap(at, size);
                goto out;
        }
        r = 0;
out:
        close(fd);
        return r;
}

int gs_space_map_fd(const struct gs_cu *cu, CUdeviceptr at, size_t size, CUdevice dev, int fd)
{
        return gs_map_fd_access(cu, at, size, dev, fd, 1);
}

/* pre: gs_conn.mu held.  Imports and maps one granted chunk at its slot, without
 * access (gs_take_grants sets it per run of slots).  Closes fd. */
static int gs_map_grant(const struct gs_cu *cu, struct gs_hook_gpu *g, CUdevice dev, uint32_t slot, int fd)
{
        int r = gs_map_fd_access(cu, g->va_base + (CUdeviceptr)slot * g->chunk, g->chunk, dev, fd, 0);

        if (r == 0)
                g->mapped[slot] = GS_MAPPED_DEVICE;
        return r;
}

/* pre: gs_conn.mu held.  Access for the slots mapped by one grant, one call per run
 * of consecutive slots (a coalesced block is one run).  On failure every
 * slot of the grant is unmapped again. */
static int gs_grant_access(const struct gs_cu *cu, struct gs_hook_gpu *g, CUdevice dev, const uint32_t *slots,
                           uint32_t n)
{
        uint32_t i = 0;

        while (i < n) {
                uint32_t j = i + 1;
                while (j < n && slots[j] == slots[j - 1] + 1)
                        j++;
                if (gs_space_access(cu, g->va_base + (CUdeviceptr)slots[i] * g->chunk, (size_t)(j - i) * g->chunk,
                                    dev) < 0) {
                        for (uint32_t k = 0; k < n; k++) {
                                (void)cu->mem_unmap(g->va_base + (CUdeviceptr)slots[k] * g->chunk, g->chunk);
                                g->mapped[slots[k]] = 0;
                        }
                        return -EIO;
                }
                i = j;
        }
        return 0;
}

/* pre: gs_conn.mu held.  Reads and maps the k grants that precede an ALLOC reply.
 * Every fd received is closed, whatever happens. */
int gs_space_take_grants(const struct gs_cu *cu, uint32_t gi, CUdevice dev, uint64_t seq, uint64_t k, const char **why)
{
        struct gs_hook_gpu *g = &gs_conn.gpus[gi];
        uint32_t slots[64], nslots = 0;
        int r = 0;

        for (uint64_t i = 0; i < k; i++) {
                struct gs_sock_grant gr;
                int fd;
                ssize_t n = gs_conn_recv_fd(&gr, sizeof(gr), &fd);

                if (n < 0) {
                        *why = "a promised chunk grant did not arrive";
                        return -EPROTO;
                }
                if (r < 0) {
                        gs_closep(&fd);
                        continue;
                }
                if (!gs_msg_hdr_ok(&gr.h, GS_SOCK_GRANT, sizeof(gr), n) || fd < 0 || gr.seq != seq || gr.gpu != gi ||
                    gr.slot >= g->max_slots || gr.chunk_bytes != g->chunk || g->mapped[gr.slot]) {
                        gs_closep(&fd);
                        *why = "malformed chunk grant";
                        r = -EPROTO;
                        continue;
                }
                if (gs_map_grant(cu, g, dev, gr.slot, fd) < 0) {
                        *why = "cannot map a granted chunk";
                        r = -EIO;
                        continue;
                }
                slots[nslots++] = gr.slot;
                if (nslots == GS_ARRAY_SIZE(slots) && gs_grant_access(cu, g, dev, slots, nslots) < 0) {
                        *why = "cannot set access to granted chunks";
                        r = -EIO;
                }
                if (nslots == GS_ARRAY_SIZE(slots))
                        nslots = 0;
        }
        /* Also after a failure: what is mapped is usable, as the agent
         * counts it held. */
        if (nslots && gs_grant_access(cu, g, dev, slots, nslots) < 0 && r == 0) {
                *why = "cannot set access to granted chunks";
                r = -EIO;
        }
        return r;
}

/* pre: gs_conn.mu held.  The GPU whose range holds ptr, or -1. */
int gs_space_owner(CUdeviceptr ptr)
{
        for (uint32_t i = 0; i < gs_conn.ngpus; i++) {
                struct gs_hook_gpu *g = &gs_conn.gpus[i];
                if (g->va_base && ptr >= g->va_base && ptr - g->va_base < (uint64_t)g->chunk * g->max_slots)
                        return (int)i;
        }
        return -1;
}

/* pre: gs_conn.mu held. */
int gs_space_gpu_err(int gi, CUdevice dev)
{
        if (gi == -EBADR)
                return -EBADR;
        gs_hook_say_once(GS_ONCE_DEVICE,
                         "CUDA device %d is not part of this container's gshare allocation; "
                         "memory allocation on it is refused",
                         dev);
        return -ENOMEM;
}

int gs_space_release(const struct gs_cu *cu, int gi, uint64_t first, uint64_t count)
{
        struct gs_hook_gpu *g = &gs_conn.gpus[gi];
        struct gs_ring_msg rel;

        /* Only a release pays this, not every free. */
        if (gs_space_sync(cu) < 0)
                return -EBUSY; /* kept: nothing unmapped, nothing released */
        for (uint64_t s = first; s < first + count; s++) {
                if (!g->mapped[s])
                        continue;
                if (cu->mem_unmap && cu->mem_unmap(g->va_base + s * g->chunk, g->chunk) == CUDA_SUCCESS) {
                        g->mapped[s] = 0;
                } else {
                        /* Still mapped here: the chunk must not go back. */
                        gs_conn_lost("cannot unmap a released chunk");
                        return -EIO;
                }
        }
        if (gs_conn_call(GS_OP_RELEASE, (uint32_t)gi, first, count, &rel) == 0 && rel.status != 0)
                gs_hook_debug("the agent refused RELEASE of slots %llu+%llu: %d", (unsigned long long)first,
                              (unsigned long long)count, rel.status);
        return 0;
}

uint32_t gs_space_give_back(const struct gs_cu *cu, int gi)
{
        struct gs_hook_gpu *g = &gs_conn.gpus[gi];
        struct gs_ring_msg rep;
        uint32_t n = 0;

        if (!(gs_conn.features & GS_FEAT_GIVEBACK) || !g->mapped)
                return 0;
        /* Each round gives back at least one chunk: bounded by the slots. */
        for (uint32_t round = 0; round <= g->max_slots; round++) {
                if (gs_conn.state != GS_CONN_UP || gs_conn_call(GS_OP_GIVE_BACK, (uint32_t)gi, 0, 0, &rep) < 0 ||
                    rep.status != 0 || rep.arg[1] == 0)
                        break;
                uint64_t first = rep.arg[0], count = rep.arg[1];
                if (first >= g->max_slots || count > g->max_slots - first) {
                        gs_conn_lost("the agent asked to give back slots outside our range");
                        break;
                }
                /* Never memory the application still uses. */
                if (gs_blocks_meet(&g->blocks, first * g->chunk, (first + count) * g->chunk)) {
                        gs_conn_lost("the agent asked to give back a chunk holding a live block");
                        break;
                }
                if (gs_space_release(cu, gi, first, count) < 0)
                        break;
                n += (uint32_t)count;
        }
        return n;
}

bool gs_space_wait_for_others(uint32_t *waited_ms, uint32_t others_asked)
{
        uint32_t patience = others_asked & GS_OTHERS_MOVING ? GS_MOVE_PATIENCE_MS : GS_GIVE_BACK_PATIENCE_MS;
        uint32_t step = *waited_ms < 2 ? 1 : *waited_ms / 2;
        struct timespec ts;

        if (*waited_ms >= patience)
                return false;
        uint32_t most = others_asked & GS_OTHERS_MOVING ? GS_WAIT_STEP_MOVING_MS : GS_WAIT_STEP_MAX_MS;
        if (step > most)
                step = most;
        if (step > patience - *waited_ms)
                step = patience - *waited_ms;
        ts.tv_sec = 0;
        ts.tv_nsec = (long)step * 1000000L;
        pthread_mutex_unlock(&gs_conn.mu);
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&gs_conn.mu);
        *waited_ms += step;
        return gs_conn.state == GS_CONN_UP;
}

void gs_space_give_back_if_asked(const struct gs_cu *cu)
{
        uint32_t v;

        if (!(gs_conn.features & GS_FEAT_GIVEBACK) || gs_conn.state != GS_CONN_UP || !gs_conn.shm)
                return;
        v = __atomic_load_n(&gs_conn.shm->give_back, __ATOMIC_ACQUIRE);
        if (v == gs_conn.give_back_seen)
                return;
        gs_conn.give_back_seen = v;
        for (uint32_t i = 0; i < gs_conn.ngpus; i++)
                (void)gs_space_give_back(cu, (int)i);
}
