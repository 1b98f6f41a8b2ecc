/* gs_outside.c — see gs_outside.h. */
#include "gs_outside.h"

#include <stdio.h>
#include <stdlib.h>

#include "gs_alloc.h"
#include "gs_gpu.h"
#include "gs_log.h"

struct gs_outside_held {
        uint64_t off;                  /* its block in o->pp */
        uint32_t chunk;                /* pool chunk id */
};

/* k more chunks, their memory released.  strict: all or nothing; else as
 * many as the quota gives.  Returns how many were taken, or a negative errno
 * (nothing taken). */
static int take(struct gs_gpu *g, struct gs_outside *o, uint32_t k, bool strict)
{
        uint32_t got = 0;
        int r = 0;

        if (o->nheld + k > o->capheld) {
                uint32_t cap = o->nheld + k > 2 * o->capheld ? o->nheld + k : 2 * o->capheld;
                struct gs_outside_held *t = realloc(o->held, (size_t)cap * sizeof(*t));
                if (!t)
                        return -ENOMEM;
                o->held = t;
                o->capheld = cap;
        }
        while (got < k) {
                struct gs_outside_held *h = &o->held[o->nheld + got];
                struct gs_grant gr;
                uint32_t n = 0;

                r = gs_pproc_malloc(o->pp, g->chunk_bytes, &h->off, &gr, 1, &n);
                if (r < 0) {
                        r = (r == -ENOSPC || r == -E2BIG) ? -ENOMEM : r;
                        break;
                }
                if (n != 1) { /* the set's pproc never keeps a chunk with room */
                        log_error("GPU %u: an outside chunk came with %u new ones", g->index, n);
                        if (gs_pproc_free(o->pp, h->off, NULL) < 0)
                                log_error("GPU %u: outside block at %llu not freed", g->index,
                                          (unsigned long long)h->off);
                        r = -EIO;
                        break;
                }
                h->chunk = gr.chunk;
                got++;
        }
        if (r < 0 && (strict || got == 0)) {
                while (got--) {
                        uint64_t off = o->held[o->nheld + got].off;
                        if (gs_pproc_free(o->pp, off, NULL) < 0 ||
                            gs_pproc_release(o->pp, (uint32_t)(off / g->chunk_bytes), 1) < 0)
                                log_error("GPU %u: outside block at %llu not given back", g->index,
                                          (unsigned long long)off);
                }
                return r;
        }
        for (uint32_t i = 0; i < got; i++)
                gs_gpu_chunk_drop(g, o->held[o->nheld + i].chunk);
        o->nheld += got;
        g->outside_held += (uint64_t)got * g->chunk_bytes;
        return (int)got;
}

/* The last held chunk goes back to the allocation with fresh memory, if
 * the driver has room for it.  0, or -EAGAIN (it stays). */
static int give_last(struct gs_gpu *g, struct gs_outside *o, bool force)
{
        struct gs_outside_held h = o->held[o->nheld - 1];
        char err[256];
        int r;

        r = gs_gpu_chunk_remake(g, h.chunk, err, sizeof(err));
        if (r < 0) {
                if (!force) {
                        log_debug("GPU %u: outside chunk %u not re-created yet: %s", g->index,
                                  h.chunk, err);
                        return -EAGAIN;
                }
                /* Going anyway: it is re-created when next granted. */
                log_warn("GPU %u: chunk %u back without memory (re-created when granted): %s",
                         g->index, h.chunk, err);
        }
        if (gs_pproc_free(o->pp, h.off, NULL) < 0 ||
            gs_pproc_release(o->pp, (uint32_t)(h.off / g->chunk_bytes), 1) < 0)
                log_error("GPU %u: outside chunk %u at %llu not given back to the allocator",
                          g->index, h.chunk, (unsigned long long)h.off);
        o->nheld--;
        g->outside_held -= g->chunk_bytes;
        return 0;
}

static uint32_t target(const struct gs_gpu *g, uint64_t charged)
{
        uint64_t n = (charged + g->chunk_bytes - 1) / g->chunk_bytes;

        return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

void gs_outside_settle(struct gs_gpu *g, struct gs_outside *o)
{
        uint32_t want = target(g, o->charged);

        if (o->nheld <= want)
                return;
        (void)g->agent->cu.ctx_set_current(g->ctx);
        while (o->nheld > want && give_last(g, o, false) == 0)
                ;
}

int gs_outside_charge(struct gs_gpu *g, struct gs_outside *o, struct gs_palloc *pa, uint32_t nslots,
                      uint64_t *slot, uint64_t bytes, bool strict)
{
        uint64_t charged = o->charged - *slot + bytes;
        uint32_t want = target(g, charged);
        bool up = bytes > *slot;
        int r;

        (void)g->agent->cu.ctx_set_current(g->ctx);
        if (want > o->nheld) {
                if (want > nslots) {
                        if (strict)
                                return -ENOMEM;
                        want = nslots;
                }
                if (!o->pp) {
                        r = gs_pproc_new(pa, nslots, &o->pp);
                        if (r < 0)
                                return r;
                }
                r = take(g, o, want - o->nheld, strict);
                if (r < 0 && strict)
                        return r;
        }
        o->charged = charged;
        *slot = bytes;
        gs_outside_settle(g, o);
        if (up && o->nheld < target(g, charged)) {
                o->over_quota++;
                return -EDQUOT;
        }
        return 0;
}

void gs_outside_clear(struct gs_gpu *g, struct gs_outside *o)
{
        if (o->nheld)
                (void)g->agent->cu.ctx_set_current(g->ctx);
        while (o->nheld)
                (void)give_last(g, o, true);
        free(o->held);
        o->held = NULL;
        o->capheld = 0;
        gs_pproc_del(o->pp);
        o->pp = NULL;
        o->charged = 0;
}
