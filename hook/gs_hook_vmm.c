/* gs_hook_vmm.c — the application's own VMM allocations (cuMemCreate of
 * device memory): made by the agent within the quota, imported here; the
 * table of their handles, whose fds cuMemExportToShareableHandle hands out
 * again (an imported handle cannot be exported).  Guarded by gs_conn.mu. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "gs_hook_space.h"

/* The application's VMM handles that the agent made: handle -> id. */
struct gs_vmm_ent {
        CUmemGenericAllocationHandle h;
        uint64_t id;
        uint64_t size;
        uint32_t gpu;
        int fd; /* the agent's fd, kept: an imported handle cannot be
                          exported again, so cuMemExportToShareableHandle
                          hands out duplicates of this */
};
static struct gs_vmm_ent *g_vmm;
static size_t g_nvmm, g_capvmm;
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;

/* A fork child: the parent's VMM allocations are the parent's to release. */
static void gs_vmm_fork_child(void)
{
        for (size_t i = 0; i < g_nvmm; i++)
                close(g_vmm[i].fd);
        free(g_vmm);
        g_vmm = NULL;
        g_nvmm = g_capvmm = 0;
}

static size_t gs_hook_vmm_list(uint32_t gpu, size_t from, uint64_t *pairs, size_t max_pairs, size_t *ret_next);

static void gs_vmm_fork_register(void)
{
        (void)pthread_atfork(NULL, NULL, gs_vmm_fork_child);
}

/* pre: gs_conn.mu held.  Reads the VMM_GRANT that precedes a VMM_CREATE reply and
 * imports its fd into *ret_h; on success the fd is *ret_fd, else closed. */
static int gs_take_vmm_grant(const struct gs_cu *cu, uint32_t gi, const struct gs_ring_msg *rep, uint64_t size,
                             CUmemGenericAllocationHandle *ret_h, int *ret_fd, const char **why)
{
        struct gs_sock_vmm_grant gr;
        int fd, r = 0;
        ssize_t n = gs_conn_recv_fd(&gr, sizeof(gr), &fd);

        if (n < 0) {
                *why = "a promised VMM grant did not arrive";
                return -EPROTO;
        }
        if (!gs_msg_hdr_ok(&gr.h, GS_SOCK_VMM_GRANT, sizeof(gr), n) || fd < 0 || gr.seq != rep->seq || gr.gpu != gi ||
            gr.id != rep->arg[0] || gr.size != size || gr.reserved) {
                *why = "malformed VMM grant";
                r = -EPROTO;
        } else if (!cu->mem_import_from_shareable_handle ||
                   cu->mem_import_from_shareable_handle(ret_h, (void *)(intptr_t)fd,
                                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS) {
                *why = "cannot import a VMM allocation";
                r = -EIO;
        }
        if (r == 0)
                *ret_fd = fd;
        else
                gs_closep(&fd);
        return r;
}

int gs_hook_vmm_create(CUmemGenericAllocationHandle *ret_h, size_t size, CUdevice dev)
{
        const struct gs_cu *cu;
        struct gs_ring_msg rep;
        CUmemGenericAllocationHandle h;
        const char *why = NULL;
        int res;
        int gi, fd = -1;

        pthread_once(&g_fork_once, gs_vmm_fork_register);
        pthread_mutex_lock(&gs_conn.mu);
        cu = gs_conn_ready();
        if (!cu) {
                res = -ENOMEM;
                goto out;
        }
        gi = gs_space_dev_gpu(cu, dev);
        if (gi < 0) {
                res = gs_space_gpu_err(gi, dev);
                goto out;
        }
        /* Short of memory: our chunks without a live block (cuMemAlloc's,
         * freed or cached) go back to the allocation, and this path gets
         * them; or other processes were asked for theirs: a moment later. */
        bool gave = false;
        uint32_t waited = 0;
        gs_space_give_back_if_asked(cu);
        for (;;) {
                /* Again each time: the wait lets other threads in. */
                if (g_nvmm == g_capvmm) {
                        size_t cap = g_capvmm ? 2 * g_capvmm : 64;
                        struct gs_vmm_ent *t = realloc(g_vmm, cap * sizeof(*t));
                        if (!t) {
                                res = -ENOMEM;
                                goto out;
                        }
                        g_vmm = t;
                        g_capvmm = cap;
                }
                if (gs_conn_call(GS_OP_VMM_CREATE, (uint32_t)gi, size, 0, &rep) < 0) {
                        res = -ENOMEM;
                        goto out;
                }
                if (rep.status != -ENOMEM)
                        break;
                if (!gave && gs_space_give_back(cu, gi) > 0) {
                        gave = true;
                        continue;
                }
                if (!rep.others_asked || !gs_space_wait_for_others(&waited, rep.others_asked))
                        break;
        }
        if (rep.status != 0 || rep.arg[1] == 0) {
                res = rep.status == 0 ? -EIO : gs_conn_status(rep.status);
                if (rep.status == 0 || rep.arg[1] != 0)
                        gs_conn_lost("VMM reply without exactly one grant");
                goto out;
        }
        if (rep.arg[1] != 1 || gs_take_vmm_grant(cu, (uint32_t)gi, &rep, size, &h, &fd, &why) < 0) {
                /* The agent frees the allocation when we go. */
                gs_conn_lost(why ? why : "VMM reply with more than one grant");
                res = -ENOMEM;
                goto out;
        }
        g_vmm[g_nvmm++] = (struct gs_vmm_ent){ h, rep.arg[0], size, (uint32_t)gi, fd };
        gs_conn_set_vmm_lister(gs_hook_vmm_list); /* reported if the agent restarts */
        *ret_h = h;
        res = 0;
out:
        pthread_mutex_unlock(&gs_conn.mu);
        return res;
}

void gs_hook_vmm_released(CUmemGenericAllocationHandle h)
{
        struct gs_ring_msg rep;
        struct gs_vmm_ent e;
        size_t i;

        pthread_mutex_lock(&gs_conn.mu);
        for (i = 0; i < g_nvmm && g_vmm[i].h != h; i++)
                ;
        if (i == g_nvmm)
                goto out;
        e = g_vmm[i];
        g_vmm[i] = g_vmm[--g_nvmm];
        close(e.fd);
        if (gs_conn.state == GS_CONN_UP && gs_conn_call(GS_OP_VMM_RELEASE, e.gpu, e.id, 0, &rep) == 0 &&
            rep.status != 0)
                gs_hook_debug("the agent refused VMM_RELEASE of %llu: %d", (unsigned long long)e.id, rep.status);
out:
        pthread_mutex_unlock(&gs_conn.mu);
}

int gs_hook_vmm_export(CUmemGenericAllocationHandle h, int *ret_fd)
{
        int r = -ENOENT;

        pthread_mutex_lock(&gs_conn.mu);
        for (size_t i = 0; i < g_nvmm; i++)
                if (g_vmm[i].h == h) {
                        int fd = fcntl(g_vmm[i].fd, F_DUPFD_CLOEXEC, 0);
                        r = fd < 0 ? gs_neg_errno() : 0;
                        if (fd >= 0)
                                *ret_fd = fd;
                        break;
                }
        pthread_mutex_unlock(&gs_conn.mu);
        return r;
}

/* gs_conn_vmm_list_fn: for a reclaim (pre: gs_conn.mu held). */
static size_t gs_hook_vmm_list(uint32_t gpu, size_t from, uint64_t *pairs, size_t max_pairs, size_t *ret_next)
{
        size_t n = 0, i;

        for (i = from; i < g_nvmm && n < max_pairs; i++)
                if (g_vmm[i].gpu == gpu) {
                        pairs[2 * n] = g_vmm[i].id;
                        pairs[2 * n + 1] = g_vmm[i].size;
                        n++;
                }
        *ret_next = i;
        return n;
}
