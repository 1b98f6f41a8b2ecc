/* gs_hook_ipc.c — CUDA IPC on gshare memory, brokered by the agent
 * (agent/domain/gs_ipc.h): handles that name one block, and the table of blocks
 * of other processes opened here, each mapped in a range of its own.
 * Guarded by gs_conn.mu. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gs_hook_space.h"

/* Blocks of other processes opened with cuIpcOpenMemHandle. */
struct gs_ipc_ent {
        uint64_t token[2];
        CUdeviceptr va;        /* our reservation: nchunks * chunk */
        uint32_t nchunks, refs;
        uint64_t chunk;
        CUdeviceptr ptr;       /* the block, as handed to the application */
        uint64_t size;
};
static struct gs_ipc_ent *g_ipc;
static size_t g_nipc, g_capipc;
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;

/* A fork child: the parent's opened blocks are the parent's to close. */
static void gs_ipc_fork_child(void)
{
        free(g_ipc);
        g_ipc = NULL;
        g_nipc = g_capipc = 0;
}

static void gs_ipc_fork_register(void) { (void)pthread_atfork(NULL, NULL, gs_ipc_fork_child); }

int gs_hook_ipc_is_ours(const CUipcMemHandle *h)
{
        return memcmp(h->reserved, GS_IPC_MAGIC, 8) == 0;
}

int gs_hook_ipc_get(CUipcMemHandle *h, CUdeviceptr dptr)
{
        struct gs_ipc_handle ih;
        struct gs_ring_msg rep;
        int res;
        int gi;

        if (!h)
                return -EINVAL;
        pthread_mutex_lock(&gs_conn.mu);
        gi = gs_space_owner(dptr);
        if (gi < 0) {
                res = -EINVAL;
                goto out;
        }
        if (!gs_conn_up() || gs_conn_call(GS_OP_IPC_EXPORT, (uint32_t)gi, dptr - gs_conn.gpus[gi].va_base, 0, &rep) < 0) {
                res = -EOPNOTSUPP;
                goto out;
        }
        /* An agent that does not know the op answers -EPROTO. */
        res = rep.status == -EPROTO ? -EOPNOTSUPP : gs_conn_status(rep.status);
        if (res != 0)
                goto out;
        memset(&ih, 0, sizeof(ih));
        memcpy(ih.magic, GS_IPC_MAGIC, sizeof(ih.magic));
        ih.token[0] = rep.arg[0];
        ih.token[1] = rep.arg[1];
        ih.size = rep.arg[2];
        memcpy(h->reserved, &ih, sizeof(ih));
out:
        pthread_mutex_unlock(&gs_conn.mu);
        return res;
}

/* pre: gs_conn.mu held.  Unmaps the first n chunks of e's range and frees it. */
static void gs_ipc_unmap(const struct gs_cu *cu, const struct gs_ipc_ent *e, uint32_t n)
{
        for (uint32_t i = 0; i < n; i++)
                if (cu->mem_unmap)
                        (void)cu->mem_unmap(e->va + (CUdeviceptr)i * e->chunk, e->chunk);
        if (cu->mem_address_free)
                (void)cu->mem_address_free(e->va, (size_t)e->nchunks * e->chunk);
}

/* pre: gs_conn.mu held.  Receives the k IPC grants of reply rep and maps them in
 * a new range of *e (nchunks, chunk set).  Every fd is closed. */
static int gs_take_ipc_grants(const struct gs_cu *cu, uint32_t gi, CUdevice dev, const struct gs_ring_msg *rep,
                              struct gs_ipc_ent *e, const char **why)
{
        uint32_t mapped = 0;
        int r = 0;

        *why = "cannot map an opened IPC block";
        if (!cu->mem_address_reserve || !cu->mem_address_free ||
            cu->mem_address_reserve(&e->va, (size_t)e->nchunks * e->chunk, e->chunk, 0, 0) != CUDA_SUCCESS)
                e->va = 0;
        for (uint32_t i = 0; i < e->nchunks; i++) {
                struct gs_sock_grant gr;
                int fd;
                ssize_t n = gs_conn_recv_fd(&gr, sizeof(gr), &fd);

                if (n < 0) {
                        *why = "a promised IPC grant did not arrive";
                        r = -EPROTO;
                        break;
                }
                if (!gs_conn_hdr_ok(&gr.h, GS_SOCK_IPC_GRANT, sizeof(gr), n) || fd < 0 || gr.seq != rep->seq ||
                    gr.gpu != gi || gr.slot != i || gr.chunk_bytes != e->chunk) {
                        *why = "malformed IPC grant";
                        r = -EPROTO;
                } else if (r == 0 && e->va) {
                        r = gs_space_map_fd(cu, e->va + (CUdeviceptr)i * e->chunk, e->chunk, dev, fd);
                        fd = -1; /* closed */
                        mapped += r == 0;
                } else if (r == 0) {
                        r = -EIO;
                }
                gs_closep(&fd);
                if (r == -EPROTO)
                        break;
        }
        if (r < 0 && e->va) {
                gs_ipc_unmap(cu, e, mapped);
                e->va = 0;
        }
        return r;
}

int gs_hook_ipc_open(CUdeviceptr *ret_ptr, const CUipcMemHandle *h)
{
        const struct gs_cu *cu;
        struct gs_ipc_handle ih;
        struct gs_ring_msg rep;
        struct gs_ipc_ent e = { 0 };
        const char *why = NULL;
        CUdevice dev = -1;
        int res;
        int gi, r;

        if (!ret_ptr)
                return -EINVAL;
        memcpy(&ih, h->reserved, sizeof(ih));
        pthread_once(&g_fork_once, gs_ipc_fork_register);
        pthread_mutex_lock(&gs_conn.mu);
        for (size_t i = 0; i < g_nipc; i++)
                if (g_ipc[i].token[0] == ih.token[0] && g_ipc[i].token[1] == ih.token[1]) {
                        g_ipc[i].refs++;
                        *ret_ptr = g_ipc[i].ptr;
                        res = 0;
                        goto out;
                }
        cu = gs_conn_ready();
        if (!cu) {
                res = -EINVAL;
                goto out;
        }
        gi = gs_space_cur_gpu(cu, &dev);
        if (gi < 0) {
                res = gi == -EBADR ? -EBADR : -ENODEV;
                goto out;
        }
        if (g_nipc == g_capipc) {
                size_t cap = g_capipc ? 2 * g_capipc : 16;
                struct gs_ipc_ent *t = realloc(g_ipc, cap * sizeof(*t));
                if (!t) {
                        res = -ENOMEM;
                        goto out;
                }
                g_ipc = t;
                g_capipc = cap;
        }
        if (gs_conn_call(GS_OP_IPC_OPEN, (uint32_t)gi, ih.token[0], ih.token[1], &rep) < 0) {
                res = -EINVAL;
                goto out;
        }
        /* The grants come before the reply whatever it says; bound them. */
        if (rep.arg[1] > GS_MAX_GRANTS_PER_REPLY || rep.arg[1] > gs_conn.gpus[gi].max_slots ||
            (rep.status != 0 && rep.arg[1] != 0) ||
            (rep.status == 0 && (rep.arg[1] == 0 || rep.arg[0] >= gs_conn.gpus[gi].chunk || rep.arg[2] == 0 ||
                                 rep.arg[2] > rep.arg[1] * gs_conn.gpus[gi].chunk - rep.arg[0]))) {
                gs_conn_lost("malformed reply to IPC_OPEN");
                res = -EINVAL;
                goto out;
        }
        if (rep.status != 0) {
                /* Unknown token, our own, or another GPU's. */
                res = rep.status == -ENOMEM ? -ENOMEM : -EINVAL;
                goto out;
        }
        e.token[0] = ih.token[0];
        e.token[1] = ih.token[1];
        e.nchunks = (uint32_t)rep.arg[1];
        e.chunk = gs_conn.gpus[gi].chunk;
        e.refs = 1;
        e.size = rep.arg[2];
        r = gs_take_ipc_grants(cu, (uint32_t)gi, dev, &rep, &e, &why);
        if (r == -EPROTO) {
                gs_conn_lost(why);
                res = -EINVAL;
                goto out;
        }
        if (r < 0) {
                gs_hook_debug("%s", why);
                res = -ENOMEM;
                goto out;
        }
        e.ptr = e.va + rep.arg[0];
        g_ipc[g_nipc++] = e;
        *ret_ptr = e.ptr;
        res = 0;
out:
        pthread_mutex_unlock(&gs_conn.mu);
        return res;
}

int gs_hook_ipc_close(CUdeviceptr dptr)
{
        const struct gs_cu *cu = gs_cu_get();
        int res = -ENOENT;

        pthread_mutex_lock(&gs_conn.mu);
        for (size_t i = 0; i < g_nipc; i++) {
                struct gs_ipc_ent *e = &g_ipc[i];
                if (e->ptr != dptr)
                        continue;
                if (--e->refs == 0) {
                        if (cu)
                                gs_ipc_unmap(cu, e, e->nchunks);
                        *e = g_ipc[--g_nipc];
                }
                res = 0;
                break;
        }
        pthread_mutex_unlock(&gs_conn.mu);
        return res;
}

int gs_hook_ipc_range(CUdeviceptr ptr, CUdeviceptr *ret_base, size_t *ret_size)
{
        int res = -ENOENT;

        pthread_mutex_lock(&gs_conn.mu);
        for (size_t i = 0; i < g_nipc; i++)
                if (ptr >= g_ipc[i].ptr && ptr - g_ipc[i].ptr < g_ipc[i].size) {
                        if (ret_base)
                                *ret_base = g_ipc[i].ptr;
                        if (ret_size)
                                *ret_size = g_ipc[i].size;
                        res = 0;
                        break;
                }
        pthread_mutex_unlock(&gs_conn.mu);
        return res;
}

