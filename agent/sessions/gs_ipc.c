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

struct gs_ipc_export {
        uint64_t token[2];
        struct gs_proc *p;
        uint32_t gpu;
        uint64_t off, size;
};

uint32_t gs_ipc_count(const struct gs_proc *p) { return __atomic_load_n(&p->nexports, __ATOMIC_ACQUIRE); }

static void drop_at(struct gs_ipc_table *t, uint32_t i)
{
        __atomic_sub_fetch(&t->v[i].p->nexports, 1, __ATOMIC_RELEASE);
        t->v[i] = t->v[--t->n];
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
        if (t->n >= GS_IPC_MAX_EXPORTS) {
                r = -ENOSPC;
                goto out;
        }
        if (t->n == t->cap) {
                uint32_t cap = t->cap ? 2 * t->cap : 16;
                struct gs_ipc_export *v = realloc(t->v, (size_t)cap * sizeof(*v));
                if (!v) {
                        r = -ENOMEM;
                        goto out;
                }
                t->v = v;
                t->cap = cap;
        }
        r = new_token(tok);
        if (r < 0)
                goto out;
        t->v[t->n++] = (struct gs_ipc_export){ { tok[0], tok[1] }, p, gpu, off, size };
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

int gs_ipc_open(struct gs_ipc_table *t, const struct gs_proc *q, uint32_t gpu, const uint64_t token[2],
                struct gs_ipc_open *ret)
{
        const struct gs_ipc_export *e = NULL;
        struct gs_gpu *g;
        uint64_t cb, first, last;
        int r = 0;

        memset(ret, 0, sizeof(*ret));
        pthread_mutex_lock(&t->lock);
        /* Compare every entry in full: no early exit on a partial match. */
        for (uint32_t i = 0; i < t->n; i++)
                if (((t->v[i].token[0] ^ token[0]) | (t->v[i].token[1] ^ token[1])) == 0)
                        e = &t->v[i];
        if (!e) {
                r = -ENOENT;
                goto out;
        }
        if (e->p == q || e->gpu != gpu || gpu >= e->p->ngpus) {
                r = -EINVAL;
                goto out;
        }
        /* The exporter's block is live while its export is in the table
         * (FREE and exit drop the export first, under t->lock). */
        g = e->p->gpus[gpu].g;
        cb = g->chunk_bytes;
        first = e->off / cb;
        last = (e->off + e->size - 1) / cb;
        ret->off_in_chunk = e->off % cb;
        ret->size = e->size;
        ret->fds = malloc((size_t)(last - first + 1) * sizeof(int));
        if (!ret->fds) {
                r = -ENOMEM;
                goto out;
        }
        pthread_mutex_lock(&g->lock);
        for (uint64_t s = first; s <= last; s++) {
                uint32_t c = gs_pproc_slot_chunk(e->p->gpus[gpu].pp, (uint32_t)s);
                int fd = c < g->nchunks ? g->chunks[c].fd : -1;
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
        pthread_mutex_unlock(&g->lock);
out:
        pthread_mutex_unlock(&t->lock);
        if (r < 0)
                gs_ipc_open_done(ret);
        return r;
}
