/* gs_hook_spillprep.c — host memory prepared ahead of the mover's moves
 * (see gs_hook_spillprep.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "gs_hook_conn.h"
#include "gs_hook_msg.h"
#include "gs_hook_space.h"
#include "gs_hook_spillprep.h"

/* GPU gi's prepared memories: entry j (live[j]) is id[j], handle h[j],
 * mapped at va + j * chunk. */
struct gs_prep_gpu {
        CUdeviceptr va;
        size_t size, chunk;
        uint32_t n;
        bool live[GS_PREP_MAX];
        uint32_t id[GS_PREP_MAX];
        CUmemGenericAllocationHandle h[GS_PREP_MAX];
};
static struct gs_prep_gpu g_prep[GS_MAX_GPUS_PER_ALLOC];

/* Rounds of GS_OP_SPILL_PREP per wake-up and GPU: GS_PREP_MAX in rounds
 * of 8 (what this agent sends), and one to hear "none". */
#define GS_PREP_ROUNDS ((int)(GS_PREP_MAX / 8) + 1)

static void prep_unmap(const struct gs_cu *cu, struct gs_prep_gpu *pg, uint32_t j)
{
        (void)cu->mem_unmap(pg->va + (CUdeviceptr)j * pg->chunk, pg->chunk);
        (void)cu->mem_release(pg->h[j]);
        pg->live[j] = false;
        pg->n--;
}

/* GPU gi's entries let go, and its scratch range. */
static void prep_drop_gpu(const struct gs_cu *cu, uint32_t gi)
{
        struct gs_prep_gpu *pg = &g_prep[gi];

        for (uint32_t j = 0; j < GS_PREP_MAX && pg->n; j++)
                if (pg->live[j])
                        prep_unmap(cu, pg, j);
        if (pg->va)
                (void)cu->mem_address_free(pg->va, pg->size);
        memset(pg, 0, sizeof(*pg));
}

/* The memory of fd (closed here) prepared as id: imported, mapped at a
 * free entry's scratch chunk, access set.  0 or a negative errno (then
 * nothing of it is kept). */
static int prep_one(const struct gs_cu *cu, uint32_t gi, CUdevice dev, uint32_t id, int fd)
{
        struct gs_prep_gpu *pg = &g_prep[gi];
        size_t chunk = gs_conn.gpus[gi].chunk;
        CUmemGenericAllocationHandle h;
        uint32_t j, free_j = GS_PREP_MAX;
        CUdeviceptr at;
        CUresult r;

        if (pg->chunk != chunk)
                prep_drop_gpu(cu, gi); /* another agent's chunk size: nothing of before fits */
        for (j = 0; j < GS_PREP_MAX; j++) {
                if (pg->live[j] && pg->id[j] == id)
                        break;
                if (!pg->live[j] && free_j == GS_PREP_MAX)
                        free_j = j;
        }
        if (j < GS_PREP_MAX || free_j == GS_PREP_MAX) {
                close(fd);
                return j < GS_PREP_MAX ? -EEXIST : -ENOSPC;
        }
        if (!pg->va) {
                if (cu->mem_address_reserve(&pg->va, (size_t)GS_PREP_MAX * chunk, chunk, 0, 0) != CUDA_SUCCESS) {
                        pg->va = 0;
                        close(fd);
                        return -ENOMEM;
                }
                pg->size = (size_t)GS_PREP_MAX * chunk;
                pg->chunk = chunk;
        }
        r = cu->mem_import_from_shareable_handle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        close(fd);
        if (r != CUDA_SUCCESS)
                return -EIO;
        at = pg->va + (CUdeviceptr)free_j * chunk;
        if (cu->mem_map(at, chunk, 0, h, 0) != CUDA_SUCCESS) {
                (void)cu->mem_release(h);
                return -EIO;
        }
        if (gs_space_access(cu, at, chunk, dev) < 0) {
                (void)cu->mem_unmap(at, chunk);
                (void)cu->mem_release(h);
                return -EIO;
        }
        pg->live[free_j] = true;
        pg->id[free_j] = id;
        pg->h[free_j] = h;
        pg->n++;
        return 0;
}

/* Reads the k GS_SOCK_PREP messages that preceded the reply to seq and
 * prepares each.  0, or -EPROTO with why (every fd received closed). */
static int prep_take(const struct gs_cu *cu, uint32_t gi, CUdevice dev, uint64_t seq, uint32_t k, const char **why)
{
        for (uint32_t i = 0; i < k; i++) {
                struct gs_sock_grant m;
                int fd = -1, r;
                ssize_t n = gs_conn_recv_fd(&m, sizeof(m), &fd);

                if (n < 0) {
                        *why = "promised host memory did not arrive";
                        return -EPROTO;
                }
                if (!gs_msg_hdr_ok(&m.h, GS_SOCK_PREP, sizeof(m), n) || fd < 0 || m.seq != seq || m.gpu != gi ||
                    m.chunk_bytes != gs_conn.gpus[gi].chunk || m.slot >= GS_PREP_ID_MAX) {
                        if (fd >= 0)
                                close(fd);
                        *why = "malformed host memory sent ahead";
                        return -EPROTO;
                }
                r = prep_one(cu, gi, dev, m.slot, fd);
                if (r < 0)
                        gs_hook_debug("host memory %u of GPU %u not prepared: %d", m.slot, gi, r);
        }
        return 0;
}

void gs_spill_prep_serve(const struct gs_cu *cu, uint32_t gi, CUdevice dev)
{
        if (gi >= GS_MAX_GPUS_PER_ALLOC)
                return;
        for (int round = 0; round < GS_PREP_ROUNDS; round++) {
                struct gs_ring_msg rep;
                const char *why = NULL;

                if (gs_conn.state != GS_CONN_UP || gs_conn_call(GS_OP_SPILL_PREP, gi, 0, 0, &rep) < 0)
                        return;
                if (rep.status != 0) {
                        gs_hook_debug("the agent refused GS_OP_SPILL_PREP on GPU %u: %d", gi, rep.status);
                        return;
                }
                if (rep.arg[0] > GS_MOVE_MAX) {
                        gs_conn_lost("malformed reply to GS_OP_SPILL_PREP");
                        return;
                }
                if (prep_take(cu, gi, dev, rep.seq, (uint32_t)rep.arg[0], &why) < 0) {
                        gs_conn_lost(why);
                        return;
                }
                if (rep.arg[1]) {
                        gs_hook_debug("GPU %u: the %u host memories prepared ahead are not needed", gi, g_prep[gi].n);
                        prep_drop_gpu(cu, gi);
                }
                if (rep.arg[0] == 0)
                        return;
        }
}

int gs_spill_prep_find(uint32_t gi, uint32_t id, CUmemGenericAllocationHandle *ret_h, CUdeviceptr *ret_va)
{
        struct gs_prep_gpu *pg;

        if (gi >= GS_MAX_GPUS_PER_ALLOC || (pg = &g_prep[gi])->chunk != gs_conn.gpus[gi].chunk)
                return -ENOENT;
        for (uint32_t j = 0; j < GS_PREP_MAX && pg->n; j++)
                if (pg->live[j] && pg->id[j] == id) {
                        *ret_h = pg->h[j];
                        *ret_va = pg->va + (CUdeviceptr)j * pg->chunk;
                        return 0;
                }
        return -ENOENT;
}

void gs_spill_prep_forget(const struct gs_cu *cu, uint32_t gi, uint32_t id)
{
        struct gs_prep_gpu *pg;

        if (gi >= GS_MAX_GPUS_PER_ALLOC)
                return;
        pg = &g_prep[gi];
        for (uint32_t j = 0; j < GS_PREP_MAX && pg->n; j++)
                if (pg->live[j] && pg->id[j] == id) {
                        prep_unmap(cu, pg, j);
                        return;
                }
}

void gs_spill_prep_drop_all(const struct gs_cu *cu)
{
        for (uint32_t gi = 0; gi < GS_MAX_GPUS_PER_ALLOC; gi++)
                if (g_prep[gi].n || g_prep[gi].va)
                        prep_drop_gpu(cu, gi);
}

void gs_spill_prep_child(void)
{
        memset(g_prep, 0, sizeof(g_prep));
}

uint32_t gs_spill_prep_count(uint32_t gi)
{
        return gi < GS_MAX_GPUS_PER_ALLOC ? g_prep[gi].n : 0;
}
