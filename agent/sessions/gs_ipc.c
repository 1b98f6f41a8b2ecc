/* gs_ipc.c — see gs_ipc.h. */
#include "gs_ipc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "gs_gpu.h"
#include "gs_proc.h"
#include "gs_wire.h"

struct gs_ipc_export {
        uint64_t token[2];
        struct gs_proc *p;
        uint32_t gpu;
        bool pending; /* reclaimed, its block not checked yet */
        uint64_t off, size;
};

uint32_t gs_ipc_count(const struct gs_proc *p)
{
        return __atomic_load_n(&p->nexports, __ATOMIC_ACQUIRE);
}

static void drop_at(struct gs_ipc_table *t, uint32_t i)
{
        __atomic_sub_fetch(&t->v[i].p->nexports, 1, __ATOMIC_RELEASE);
        t->v[i] = t->v[--t->n];
}

static uint64_t chunk_bytes(const struct gs_proc *p, uint32_t gpu)
{
        return p->gpus[gpu].g->chunk_bytes;
}

/* pre: t->lock.  The memory p maps at slot on gpu, from its reclaim: its
 * index or -1. */
static int64_t mem_at(const struct gs_ipc_table *t, const struct gs_proc *p, uint32_t gpu, uint64_t slot)
{
        for (uint32_t i = 0; i < t->nmem; i++)
                if (t->mem[i].p == p && t->mem[i].gpu == gpu && t->mem[i].slot == slot)
                        return i;
        return -1;
}

/* pre: t->lock.  Whether an export of p on gpu (pending ones too when
 * pending) has slot under its block. */
static bool covered(const struct gs_ipc_table *t, const struct gs_proc *p, uint32_t gpu, uint32_t slot, bool pending)
{
        uint64_t cb = chunk_bytes(p, gpu);

        for (uint32_t i = 0; i < t->n; i++) {
                const struct gs_ipc_export *e = &t->v[i];
                if (e->p == p && e->gpu == gpu && (pending || !e->pending) && e->size && e->off / cb <= slot &&
                    slot <= (e->off + e->size - 1) / cb)
                        return true;
        }
        return false;
}

/* pre: t->lock.  Closes the memory of p (on gpu; every GPU when gpu is
 * UINT32_MAX) that no export of p covers any more. */
static void mem_prune(struct gs_ipc_table *t, const struct gs_proc *p, uint32_t gpu)
{
        for (uint32_t i = 0; i < t->nmem;) {
                struct gs_ipc_mem *m = &t->mem[i];
                if (m->p == p && (gpu == UINT32_MAX || m->gpu == gpu) && !covered(t, p, m->gpu, m->slot, false)) {
                        gs_closep(&m->fd);
                        *m = t->mem[--t->nmem];
                } else {
                        i++;
                }
        }
}

/* pre: t->lock.  Room for one more export. */
static int room(struct gs_ipc_table *t, const struct gs_proc *p)
{
        if (t->n >= GS_IPC_MAX_EXPORTS || gs_ipc_count(p) >= GS_IPC_MAX_EXPORTS_PER_PROC)
                return -ENOSPC;
        if (t->n == t->cap) {
                uint32_t cap = t->cap ? 2 * t->cap : 16;
                struct gs_ipc_export *v = realloc(t->v, (size_t)cap * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                t->v = v;
                t->cap = cap;
        }
        return 0;
}

static int new_token(uint64_t tok[2])
{
        uint8_t *b = (uint8_t *)tok;
        size_t got = 0;

        while (got < 2 * sizeof(uint64_t)) {
                ssize_t n = getrandom(b + got, 2 * sizeof(uint64_t) - got, 0);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return gs_neg_errno();
                }
                got += (size_t)n;
        }
        return 0;
}

int gs_ipc_export(struct gs_ipc_table *t, struct gs_proc *p, uint32_t gpu, uint64_t off, uint64_t size,
                  uint64_t ret_token[2])
{
        uint64_t tok[2];
        int r = 0;

        pthread_mutex_lock(&t->lock);
        for (uint32_t i = 0; i < t->n; i++)
                if (t->v[i].p == p && t->v[i].gpu == gpu && t->v[i].off == off) {
                        memcpy(ret_token, t->v[i].token, sizeof(tok));
                        goto out;
                }
        r = room(t, p);
        if (r < 0)
                goto out;
        r = new_token(tok);
        if (r < 0)
                goto out;
        t->v[t->n++] = (struct gs_ipc_export){ { tok[0], tok[1] }, p, gpu, false, off, size };
        __atomic_add_fetch(&p->nexports, 1, __ATOMIC_RELEASE);
        memcpy(ret_token, tok, sizeof(tok));
out:
        pthread_mutex_unlock(&t->lock);
        return r;
}

void gs_ipc_unexport(struct gs_ipc_table *t, struct gs_proc *p, uint32_t gpu, uint64_t off)
{
        pthread_mutex_lock(&t->lock);
        for (uint32_t i = 0; i < t->n; i++)
                if (t->v[i].p == p && t->v[i].gpu == gpu && t->v[i].off == off) {
                        drop_at(t, i);
                        break;
                }
        if (t->nmem)
                mem_prune(t, p, gpu);
        pthread_mutex_unlock(&t->lock);
}

void gs_ipc_unexport_all(struct gs_ipc_table *t, struct gs_proc *p)
{
        pthread_mutex_lock(&t->lock);
        for (uint32_t i = 0; i < t->n;)
                if (t->v[i].p == p)
                        drop_at(t, i);
                else
                        i++;
        if (t->nmem)
                mem_prune(t, p, UINT32_MAX);
        pthread_mutex_unlock(&t->lock);
}

void gs_ipc_open_done(struct gs_ipc_open *o)
{
        for (uint32_t i = 0; o->fds && i < o->nchunks; i++)
                gs_closep(&o->fds[i]);
        free(o->fds);
        o->fds = NULL;
        o->nchunks = 0;
}

/* pre: t->lock.  Duplicates of the fds under e's block into *ret: the
 * memory its process reclaimed where there is (the chunk's own may be
 * other memory after a restart), else the chunk's. */
static int collect(const struct gs_ipc_table *t, const struct gs_ipc_export *e, struct gs_ipc_open *ret)
{
        struct gs_gpu *g = e->p->gpus[e->gpu].g;
        uint64_t cb = g->chunk_bytes, first = e->off / cb, last = (e->off + e->size - 1) / cb;
        int r = 0;

        memset(ret, 0, sizeof(*ret));
        ret->off_in_chunk = e->off % cb;
        ret->size = e->size;
        ret->fds = malloc((size_t)(last - first + 1) * sizeof(int));
        if (!ret->fds)
                return -ENOMEM;
        gs_gpu_lock(g);
        for (uint64_t s = first; s <= last; s++) {
                int64_t m = t->nmem ? mem_at(t, e->p, e->gpu, s) : -1;
                uint32_t c = gs_pproc_slot_chunk(e->p->gpus[e->gpu].pp, (uint32_t)s);
                int fd = m >= 0 ? t->mem[m].fd : c < g->nchunks ? g->chunks[c].fd : -1;
                if (fd < 0) {
                        r = -EIO;
                        break;
                }
                /* A duplicate: the chunk may be recycled (its fd closed)
                 * once we let go of the locks, before the fd is sent. */
                fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
                if (fd < 0) {
                        r = gs_neg_errno();
                        break;
                }
                ret->fds[ret->nchunks++] = fd;
        }
        gs_gpu_unlock(g);
        if (r < 0)
                gs_ipc_open_done(ret);
        return r;
}

int gs_ipc_open(struct gs_ipc_table *t, const struct gs_proc *q, uint32_t gpu, const uint64_t token[2],
                struct gs_ipc_open *ret)
{
        const struct gs_ipc_export *e = NULL;
        int r;

        memset(ret, 0, sizeof(*ret));
        pthread_mutex_lock(&t->lock);
        /* Compare every entry in full: no early exit on a partial match. */
        for (uint32_t i = 0; i < t->n; i++)
                if (((t->v[i].token[0] ^ token[0]) | (t->v[i].token[1] ^ token[1])) == 0 && !t->v[i].pending)
                        e = &t->v[i];
        if (!e)
                r = -ENOENT;
        else if (e->p == q || e->gpu != gpu || gpu >= e->p->ngpus)
                r = -EINVAL;
        else
                /* The exporter's block is live while its export is in the
                 * table (FREE and exit drop the export first, under
                 * t->lock). */
                r = collect(t, e, ret);
        pthread_mutex_unlock(&t->lock);
        return r;
}

int gs_ipc_export_fds(struct gs_ipc_table *t, const struct gs_proc *p, uint32_t gpu, uint64_t off,
                      struct gs_ipc_open *ret)
{
        int r = -ENOENT;

        memset(ret, 0, sizeof(*ret));
        pthread_mutex_lock(&t->lock);
        for (uint32_t i = 0; i < t->n; i++)
                if (t->v[i].p == p && t->v[i].gpu == gpu && t->v[i].off == off && !t->v[i].pending) {
                        r = collect(t, &t->v[i], ret);
                        break;
                }
        pthread_mutex_unlock(&t->lock);
        return r;
}

int gs_ipc_reclaim_export(struct gs_ipc_table *t, struct gs_proc *p, uint32_t gpu, const uint64_t token[2],
                          uint64_t off)
{
        int r = 0;

        pthread_mutex_lock(&t->lock);
        for (uint32_t i = 0; i < t->n; i++) {
                const struct gs_ipc_export *e = &t->v[i];
                bool same_tok = ((e->token[0] ^ token[0]) | (e->token[1] ^ token[1])) == 0;
                if (same_tok && e->p == p && e->gpu == gpu && e->off == off)
                        goto out; /* said twice */
                /* A token names one block; a block has one token. */
                if (same_tok || (e->p == p && e->gpu == gpu && e->off == off)) {
                        r = -EEXIST;
                        goto out;
                }
        }
        r = room(t, p);
        if (r < 0)
                goto out;
        t->v[t->n++] = (struct gs_ipc_export){ { token[0], token[1] }, p, gpu, true, off, 0 };
        __atomic_add_fetch(&p->nexports, 1, __ATOMIC_RELEASE);
out:
        pthread_mutex_unlock(&t->lock);
        return r;
}

int gs_ipc_reclaim_fd(struct gs_ipc_table *t, struct gs_proc *p, uint32_t gpu, uint32_t slot, int fd)
{
        struct gs_proc_gpu *pg = &p->gpus[gpu];
        bool held;
        int r = 0;

        if (slot >= pg->nslots) {
                close(fd);
                return -EINVAL;
        }
        pthread_mutex_lock(&t->lock);
        gs_gpu_lock(pg->g);
        held = pg->pp && gs_pproc_slot_chunk(pg->pp, slot) != UINT32_MAX;
        gs_gpu_unlock(pg->g);
        /* One per slot it holds: bounded by its chunks. */
        if (!held || mem_at(t, p, gpu, slot) >= 0) {
                r = -EINVAL;
                goto out;
        }
        if (t->nmem == t->capmem) {
                uint32_t cap = t->capmem ? 2 * t->capmem : 16;
                struct gs_ipc_mem *m = realloc(t->mem, (size_t)cap * sizeof(*m));
                if (!m) {
                        r = -ENOMEM;
                        goto out;
                }
                t->mem = m;
                t->capmem = cap;
        }
        t->mem[t->nmem++] = (struct gs_ipc_mem){ p, gpu, slot, fd };
        fd = -1;
out:
        pthread_mutex_unlock(&t->lock);
        if (fd >= 0)
                close(fd);
        return r;
}

/* pre: t->lock.  Whether every slot under e's block came with an fd. */
static bool all_mem(const struct gs_ipc_table *t, const struct gs_ipc_export *e)
{
        uint64_t cb = chunk_bytes(e->p, e->gpu);

        for (uint64_t s = e->off / cb; s <= (e->off + e->size - 1) / cb; s++)
                if (mem_at(t, e->p, e->gpu, s) < 0)
                        return false;
        return true;
}

uint32_t gs_ipc_reclaim_end(struct gs_ipc_table *t, struct gs_proc *p)
{
        uint32_t n = 0;

        pthread_mutex_lock(&t->lock);
        for (uint32_t i = 0; i < t->n;) {
                struct gs_ipc_export *e = &t->v[i];
                struct gs_proc_gpu *pg = &p->gpus[e->gpu < p->ngpus ? e->gpu : 0];
                uint64_t base = 0, size = 0;
                int r = -ENOENT;

                if (e->p != p || !e->pending) {
                        i++;
                        continue;
                }
                /* A live block of p must start there, as at the export:
                 * a freed one is gone from the hook's list and from its
                 * blocks, and never resurrects. */
                gs_gpu_lock(pg->g);
                if (pg->pp)
                        r = gs_pproc_range(pg->pp, e->off, &base, &size);
                gs_gpu_unlock(pg->g);
                if (r == 0 && base == e->off && size) {
                        e->size = size;
                        if (all_mem(t, e)) {
                                e->pending = false;
                                n++;
                                i++;
                                continue;
                        }
                }
                drop_at(t, i);
        }
        mem_prune(t, p, UINT32_MAX);
        pthread_mutex_unlock(&t->lock);
        return n;
}
