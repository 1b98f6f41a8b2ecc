/* gs_vmm.c — see gs_vmm.h. */
#include "gs_vmm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gs_gpu.h"
#include "gs_log.h"
#include "gs_wire.h"

struct gs_vmm_backing {
        struct gs_vmm_backing *next;
        uint64_t off;                  /* the block in s->pp */
        uint64_t bytes;                /* nchunks * chunk_bytes */
        uint64_t used;                 /* handed out; not reused until all released */
        uint32_t nchunks;
        uint32_t nlive;                /* live VMM allocations in it */
        bool has_filler;
        CUmemGenericAllocationHandle filler;
        uint32_t chunks[];             /* pool chunk ids */
};

struct gs_vmm {
        struct gs_vmm *next;
        uint64_t id, size;
        CUmemGenericAllocationHandle h;
        int fd;
        struct gs_vmm_backing *b;
};

static void filler_drop(struct gs_gpu *g, struct gs_vmm_backing *b)
{
        int nofd = -1;

        if (b->has_filler)
                gs_gpu_mem_drop(g, b->filler, &nofd);
        b->has_filler = false;
}

/* Fills the unused rest of b so the driver has nothing free there. */
static int filler_make(struct gs_gpu *g, struct gs_vmm_backing *b, char *err, size_t errlen)
{
        int nofd = -1, r;

        if (b->used >= b->bytes)
                return 0;
        r = gs_gpu_mem_make(g, b->bytes - b->used, false, &b->filler, &nofd, err, errlen);
        b->has_filler = r == 0;
        return r;
}

/* Re-creates b's chunks and gives its block back.  0, or a negative errno
 * with b kept (some chunk could not be re-created). */
static int backing_free(struct gs_gpu *g, struct gs_vmm_set *s, struct gs_vmm_backing *b)
{
        char err[256];
        int r, ret = 0;

        filler_drop(g, b);
        for (uint32_t i = 0; i < b->nchunks; i++) {
                r = gs_gpu_chunk_remake(g, b->chunks[i], err, sizeof(err));
                if (r < 0 && ret == 0) {
                        log_warn("GPU %u: chunk %u behind VMM allocations not re-created yet: %s",
                                 g->index, b->chunks[i], err);
                        ret = r;
                }
        }
        if (ret < 0)
                return ret;
        if (gs_pproc_free(s->pp, b->off, NULL) < 0 ||
            gs_pproc_release(s->pp, (uint32_t)(b->off / g->chunk_bytes), b->nchunks) < 0)
                log_error("GPU %u: VMM backing at %llu not given back to the allocator", g->index,
                          (unsigned long long)b->off);
        for (struct gs_vmm_backing **pb = &s->backings; *pb; pb = &(*pb)->next)
                if (*pb == b) {
                        *pb = b->next;
                        break;
                }
        free(b);
        return 0;
}

/* A new backing of at least size bytes, memory made for size from it. */
static int backing_new(struct gs_gpu *g, struct gs_vmm_set *s, uint64_t size,
                       struct gs_vmm_backing **ret_b, struct gs_vmm *v, char *err, size_t errlen)
{
        uint64_t k = (size + g->chunk_bytes - 1) / g->chunk_bytes, off = 0;
        struct gs_vmm_backing *b;
        struct gs_grant *gr;
        uint32_t n = 0;
        int r;

        if (!s->pp) {
                r = gs_pproc_new(s->pa, s->nslots, &s->pp);
                if (r < 0)
                        return r;
        }
        if (k > s->nslots)
                return -ENOMEM;
        b = calloc(1, sizeof(*b) + k * sizeof(b->chunks[0]));
        gr = calloc(k, sizeof(*gr));
        if (!b || !gr) {
                r = -ENOMEM;
                goto fail;
        }
        r = gs_pproc_malloc(s->pp, k * g->chunk_bytes, &off, gr, (uint32_t)k, &n);
        if (r < 0) {
                r = (r == -ENOSPC || r == -E2BIG) ? -ENOMEM : r;
                goto fail;
        }
        if (n != k) { /* the set's pproc never keeps an empty chunk: cannot happen */
                snprintf(err, errlen, "backing of %llu chunks came with %u new ones",
                         (unsigned long long)k, n);
                r = -EIO;
                goto undo;
        }
        b->off = off;
        b->nchunks = (uint32_t)k;
        b->bytes = k * g->chunk_bytes;
        for (uint32_t i = 0; i < n; i++)
                b->chunks[i] = gr[i].chunk;
        /* Old memory out and new memory in, in one step under the lock. */
        for (uint32_t i = 0; i < n; i++)
                gs_gpu_chunk_drop(g, b->chunks[i]);
        r = gs_gpu_mem_make(g, size, true, &v->h, &v->fd, err, errlen);
        if (r == 0) {
                b->used = size;
                r = filler_make(g, b, err, errlen);
                if (r < 0)
                        gs_gpu_mem_drop(g, v->h, &v->fd);
        }
        if (r < 0) {
                b->used = 0;
                char e2[256];
                for (uint32_t i = 0; i < n; i++)
                        if (gs_gpu_chunk_remake(g, b->chunks[i], e2, sizeof(e2)) < 0)
                                log_warn("GPU %u: chunk %u not re-created after a failed VMM create: %s",
                                         g->index, b->chunks[i], e2);
                goto undo;
        }
        b->next = s->backings;
        s->backings = b;
        *ret_b = b;
        free(gr);
        return 0;
undo:
        if (gs_pproc_free(s->pp, off, NULL) < 0 ||
            gs_pproc_release(s->pp, (uint32_t)(off / g->chunk_bytes), n) < 0)
                log_error("GPU %u: VMM backing at %llu not given back", g->index, (unsigned long long)off);
fail:
        free(gr);
        free(b);
        return r;
}

/* Memory for size from b's filler. */
static int backing_draw(struct gs_gpu *g, struct gs_vmm_backing *b, uint64_t size, struct gs_vmm *v,
                        char *err, size_t errlen)
{
        char e2[256];
        int r;

        filler_drop(g, b);
        r = gs_gpu_mem_make(g, size, true, &v->h, &v->fd, err, errlen);
        if (r == 0) {
                b->used += size;
                r = filler_make(g, b, err, errlen);
                if (r == 0)
                        return 0;
                gs_gpu_mem_drop(g, v->h, &v->fd);
                b->used -= size;
        }
        if (filler_make(g, b, e2, sizeof(e2)) < 0)
                log_warn("GPU %u: VMM filler not restored: %s", g->index, e2);
        return r;
}

int gs_vmm_create(struct gs_gpu *g, struct gs_vmm_set *s, uint64_t size, uint64_t *ret_id,
                  int *ret_fd)
{
        struct gs_vmm_backing *b;
        struct gs_vmm *v;
        char err[256] = "";
        int r = -ENOMEM;

        if (size == 0 || size % GS_VMM_ALIGN || size > (uint64_t)s->nslots * g->chunk_bytes)
                return size && size % GS_VMM_ALIGN == 0 ? -ENOMEM : -EINVAL;
        if (s->count >= GS_VMM_MAX_PER_PROC)
                return -ENOMEM;
        v = calloc(1, sizeof(*v));
        if (!v)
                return -ENOMEM;
        v->fd = -1;
        (void)g->agent->cu.ctx_set_current(g->ctx);
        for (b = s->backings; b; b = b->next)
                if (b->nlive > 0 && b->bytes - b->used >= size)
                        break;
        if (b)
                r = backing_draw(g, b, size, v, err, sizeof(err));
        else
                r = backing_new(g, s, size, &b, v, err, sizeof(err));
        if (r < 0) {
                if (err[0])
                        log_warn("GPU %u: VMM allocation of %llu bytes failed: %s", g->index,
                                 (unsigned long long)size, err);
                free(v);
                return r;
        }
        v->id = ++s->next_id;
        v->size = size;
        v->b = b;
        b->nlive++;
        v->next = s->list;
        s->list = v;
        s->count++;
        *ret_id = v->id;
        *ret_fd = v->fd;
        return 0;
}

int gs_vmm_release(struct gs_gpu *g, struct gs_vmm_set *s, uint64_t id)
{
        struct gs_vmm **pv, *v;
        struct gs_vmm_backing *b;

        for (pv = &s->list; *pv && (*pv)->id != id; pv = &(*pv)->next)
                ;
        v = *pv;
        if (!v)
                return -ENOENT;
        *pv = v->next;
        s->count--;
        b = v->b;
        (void)g->agent->cu.ctx_set_current(g->ctx);
        gs_gpu_mem_drop(g, v->h, &v->fd);
        free(v);
        if (--b->nlive == 0)
                (void)backing_free(g, s, b); /* kept on failure: retried at exit */
        return 0;
}

void gs_vmm_clear(struct gs_gpu *g, struct gs_vmm_set *s)
{
        (void)g->agent->cu.ctx_set_current(g->ctx);
        while (s->list) {
                struct gs_vmm *v = s->list;
                s->list = v->next;
                gs_gpu_mem_drop(g, v->h, &v->fd);
                v->b->nlive--;
                free(v);
        }
        s->count = 0;
        while (s->backings) {
                struct gs_vmm_backing *b = s->backings;
                if (backing_free(g, s, b) == 0)
                        continue;
                /* The process is gone, so this is unexpected: the chunks
                 * without memory are retired once they reach the system
                 * list (the pool's recycle callback fails for them). */
                log_error("GPU %u: %u chunk(s) behind VMM allocations could not be re-created",
                          g->index, b->nchunks);
                s->backings = b->next;
                free(b);
        }
        gs_pproc_del(s->pp);
        s->pp = NULL;
}

void gs_vmm_stats(const struct gs_vmm_set *s, struct gs_pproc_stats *st)
{
        struct gs_pproc_stats v;

        if (!s->pp)
                return;
        gs_pproc_stats(s->pp, &v);
        st->chunks_held += v.chunks_held;
        st->bytes_requested += v.bytes_requested;
        st->bytes_in_blocks += v.bytes_in_blocks;
}
