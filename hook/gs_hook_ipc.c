/* gs_hook_ipc.c — CUDA IPC on gshare memory, brokered by the agent
 * (agent/domain/gs_ipc.h): handles that name one block, and the table of blocks
 * of other processes opened here, each mapped in a range of its own; our
 * own exports, with an fd of the memory under each (GS_FEAT_IPC_KEEP),
 * handed to a new agent in a reclaim so that they resolve across its
 * restarts and upgrades.  Guarded by gs_conn.mu. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gs_hook_space.h"

/* Blocks of other processes opened with cuIpcOpenMemHandle. */
struct gs_ipc_ent {
        uint64_t token[2];
        CUdeviceptr va; /* our reservation: nchunks * chunk */
        uint32_t nchunks, refs;
        uint64_t chunk;
        CUdeviceptr ptr; /* the block, as handed to the application */
        uint64_t size;
};
static struct gs_ipc_ent *g_ipc;
static size_t g_nipc, g_capipc;
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;

/* Our blocks exported, for a new agent (at most GS_IPC_MAX_EXPORTS_PER_PROC). */
struct gs_ipc_exp {
        uint64_t token[2];
        uint64_t off, size;
        uint32_t gpu;
};
static struct gs_ipc_exp *g_exp;
static size_t g_nexp, g_capexp;
/* Per GPU and slot: the fd of the memory mapped there (a kill -9 leaves
 * the next agent none), kept while refs exports cover the slot. */
struct gs_ipc_keep {
        int fd;
        uint32_t refs;
};
static struct gs_ipc_keep *g_keep[GS_MAX_GPUS_PER_ALLOC];

/* A fork child: the parent's opened blocks are the parent's to close, its
 * exports the parent's. */
static void gs_ipc_fork_child(void)
{
        free(g_ipc);
        g_ipc = NULL;
        g_nipc = g_capipc = 0;
        free(g_exp);
        g_exp = NULL;
        g_nexp = g_capexp = 0;
        for (uint32_t gi = 0; gi < GS_MAX_GPUS_PER_ALLOC; gi++) {
                for (uint32_t s = 0; g_keep[gi] && s < gs_conn.gpus[gi].max_slots; s++)
                        gs_closep(&g_keep[gi][s].fd);
                free(g_keep[gi]);
                g_keep[gi] = NULL;
        }
}

static void gs_ipc_fork_register(void)
{
        (void)pthread_atfork(NULL, NULL, gs_ipc_fork_child);
}

static uint32_t first_slot(const struct gs_ipc_exp *x)
{
        return (uint32_t)(x->off / gs_conn.gpus[x->gpu].chunk);
}
static uint32_t last_slot(const struct gs_ipc_exp *x)
{
        return (uint32_t)((x->off + x->size - 1) / gs_conn.gpus[x->gpu].chunk);
}

/* pre: gs_conn.mu held.  One export fewer covers n slots of GPU gi from first. */
static void unkeep_slots(uint32_t gi, uint32_t first, uint32_t n)
{
        for (uint32_t s = first; g_keep[gi] && s < first + n; s++) {
                struct gs_ipc_keep *k = &g_keep[gi][s];
                if (k->refs && --k->refs == 0)
                        gs_closep(&k->fd);
        }
}

static void unkeep(const struct gs_ipc_exp *x)
{
        unkeep_slots(x->gpu, first_slot(x), last_slot(x) - first_slot(x) + 1);
}

/* pre: gs_conn.mu held.  Forgets export i (its block is freed, moved, or
 * no agent knows it). */
static void exp_drop(size_t i)
{
        unkeep(&g_exp[i]);
        g_exp[i] = g_exp[--g_nexp];
}

void gs_hook_ipc_forget(uint32_t gi, uint64_t off)
{
        for (size_t i = 0; i < g_nexp; i++)
                if (g_exp[i].gpu == gi && g_exp[i].off == off) {
                        exp_drop(i);
                        return;
                }
}

void gs_hook_ipc_moved(uint32_t gi, uint32_t slot)
{
        /* The agent moves no exporter's memory: an export there was gone. */
        for (size_t i = 0; i < g_nexp;)
                if (g_exp[i].gpu == gi && first_slot(&g_exp[i]) <= slot && slot <= last_slot(&g_exp[i]))
                        exp_drop(i);
                else
                        i++;
}

/* gs_conn_ipc_reclaim_fn: our exports on gpu and the memory under them,
 * for a new agent; all forgotten if it cannot take them. */
static int gs_ipc_reclaim(uint32_t gpu, struct gs_sock_reclaim *m)
{
        uint32_t k = 0;
        int r = 0;

        if (!(gs_conn.features & GS_FEAT_IPC_KEEP)) {
                for (size_t i = 0; i < g_nexp;)
                        if (g_exp[i].gpu == gpu)
                                exp_drop(i);
                        else
                                i++;
                return 0;
        }
        for (size_t i = 0; i < g_nexp && r == 0; i++) {
                if (g_exp[i].gpu != gpu)
                        continue;
                m->item[k++] = g_exp[i].token[0];
                m->item[k++] = g_exp[i].token[1];
                m->item[k++] = g_exp[i].off;
                if (k + 3 > GS_RECLAIM_MAX_ITEMS) {
                        r = gs_conn_reclaim_send(m, gpu, GS_RECLAIM_IPC, k, 0, -1);
                        k = 0;
                }
        }
        if (r == 0 && k)
                r = gs_conn_reclaim_send(m, gpu, GS_RECLAIM_IPC, k, 0, -1);
        for (uint32_t s = 0; r == 0 && g_keep[gpu] && s < gs_conn.gpus[gpu].max_slots; s++)
                if (g_keep[gpu][s].fd >= 0) {
                        m->item[0] = s;
                        r = gs_conn_reclaim_send(m, gpu, GS_RECLAIM_IPC_FD, 1, 0, g_keep[gpu][s].fd);
                }
        return r;
}

/* pre: gs_conn.mu held.  Takes the GS_IPC_EXPORT_KEEP grants of reply rep
 * (block at base, size bytes on GPU gi) and records the export.  -EPROTO
 * (the connection must go) or 0 (recorded, or not for want of memory). */
static int gs_ipc_keep(uint32_t gi, const struct gs_ring_msg *rep, uint64_t base, uint64_t size)
{
        struct gs_hook_gpu *g = &gs_conn.gpus[gi];
        struct gs_ipc_exp x = { { rep->arg[0], rep->arg[1] }, base, size, gi };
        uint32_t n = last_slot(&x) - first_slot(&x) + 1, i;
        int r = 0;

        if (!g_keep[gi]) {
                g_keep[gi] = malloc(g->max_slots * sizeof(*g_keep[gi]));
                for (uint32_t s = 0; g_keep[gi] && s < g->max_slots; s++)
                        g_keep[gi][s] = (struct gs_ipc_keep){ -1, 0 };
        }
        for (i = 0; i < n; i++) {
                struct gs_sock_grant gr;
                int fd;
                ssize_t got = gs_conn_recv_fd(&gr, sizeof(gr), &fd);

                if (got < 0 || !gs_msg_hdr_ok(&gr.h, GS_SOCK_IPC_GRANT, sizeof(gr), got) || fd < 0 ||
                    gr.seq != rep->seq || gr.gpu != gi || gr.slot != i || gr.chunk_bytes != g->chunk) {
                        gs_closep(&fd);
                        r = -EPROTO;
                        break;
                }
                struct gs_ipc_keep *k = g_keep[gi] ? &g_keep[gi][first_slot(&x) + i] : NULL;
                if (k && k->fd < 0) {
                        k->fd = fd; /* the same memory as any we keep there */
                        fd = -1;
                }
                if (k)
                        k->refs++;
                gs_closep(&fd);
        }
        if (r == 0 && g_keep[gi] && g_nexp == g_capexp && g_nexp < GS_IPC_MAX_EXPORTS_PER_PROC) {
                size_t cap = g_capexp ? 2 * g_capexp : 16;
                struct gs_ipc_exp *t = realloc(g_exp, cap * sizeof(*t));
                if (t) {
                        g_exp = t;
                        g_capexp = cap;
                }
        }
        if (r == 0 && g_keep[gi] && g_nexp < g_capexp) {
                g_exp[g_nexp++] = x;
                gs_conn_set_ipc_reclaimer(gs_ipc_reclaim);
                return 0;
        }
        /* Not kept: the handle works until this agent goes. */
        unkeep_slots(gi, first_slot(&x), i);
        return r;
}

/* pre: gs_conn.mu held.  Our export holding off on GPU gi, or NULL. */
static struct gs_ipc_exp *exp_at(uint32_t gi, uint64_t off)
{
        for (size_t i = 0; i < g_nexp; i++)
                if (g_exp[i].gpu == gi && off >= g_exp[i].off && off - g_exp[i].off < g_exp[i].size)
                        return &g_exp[i];
        return NULL;
}

int gs_hook_ipc_is_ours(const CUipcMemHandle *h)
{
        return memcmp(h->reserved, GS_IPC_MAGIC, 8) == 0;
}

int gs_hook_ipc_get(CUipcMemHandle *h, CUdeviceptr dptr)
{
        struct gs_ipc_handle ih;
        struct gs_ring_msg rep;
        struct gs_ipc_exp *x;
        uint64_t off, keep;
        int res;
        int gi;

        if (!h)
                return -EINVAL;
        pthread_once(&g_fork_once, gs_ipc_fork_register);
        pthread_mutex_lock(&gs_conn.mu);
        gi = gs_space_owner(dptr);
        if (gi < 0) {
                res = -EINVAL;
                goto out;
        }
        if (!gs_conn_up()) {
                res = -EOPNOTSUPP;
                goto out;
        }
        off = dptr - gs_conn.gpus[gi].va_base;
        /* Asked once per block to keep its memory: the same token after. */
        x = exp_at((uint32_t)gi, off);
        keep = !x && (gs_conn.features & GS_FEAT_IPC_KEEP) && g_nexp < GS_IPC_MAX_EXPORTS_PER_PROC ? GS_IPC_EXPORT_KEEP
                                                                                                   : 0;
        if (gs_conn_call(GS_OP_IPC_EXPORT, (uint32_t)gi, off, keep, &rep) < 0) {
                res = -EOPNOTSUPP;
                goto out;
        }
        /* An agent that does not know the op answers -EPROTO. */
        res = rep.status == -EPROTO ? -EOPNOTSUPP : gs_conn_status(rep.status);
        if (res != 0)
                goto out;
        uint64_t range = (uint64_t)gs_conn.gpus[gi].max_slots * gs_conn.gpus[gi].chunk;
        if (rep.arg[2] == 0 || rep.arg[3] > off || rep.arg[3] >= range || rep.arg[2] > range - rep.arg[3] ||
            (keep && gs_ipc_keep((uint32_t)gi, &rep, rep.arg[3], rep.arg[2]) < 0)) {
                gs_conn_lost("malformed reply to IPC_EXPORT");
                res = -EINVAL;
                goto out;
        }
        if (x) {
                /* A new agent that did not take it back made a new one. */
                x->token[0] = rep.arg[0];
                x->token[1] = rep.arg[1];
        }
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
                if (!gs_msg_hdr_ok(&gr.h, GS_SOCK_IPC_GRANT, sizeof(gr), n) || fd < 0 || gr.seq != rep->seq ||
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
