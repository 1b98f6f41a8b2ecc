/* gs_pool_validate.c — the allocator's whole-structure check
 * (gs_pool_validate): every process's buddy, slab and chunk bookkeeping and
 * every counter against what it counts; in debug builds (GS_ALLOC_DEBUG),
 * run after every mutation. */
#include "gs_pool_int.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef GS_ALLOC_DEBUG
/* Debug builds check the whole pool after every mutation (or every Nth,
 * with GS_ALLOC_VALIDATE_EVERY=N for long randomized runs). */
void gs_pool_debug_validate(struct gs_pool *pool, const char *op)
{
        char why[256] = "";

        if (++pool->dbg_count % pool->dbg_every)
                return;
        if (gs_pool_validate(pool, why, sizeof(why)) < 0) {
                fprintf(stderr, "gs_pool: invariant broken after %s: %s\n", op, why);
                abort();
        }
}
#endif

#define FAIL(...)                                           \
        do {                                                \
                if (why && whylen)                          \
                        snprintf(why, whylen, __VA_ARGS__); \
                return -EUCLEAN;                            \
        } while (0)

static int validate_proc(const struct gs_pool *pool, const struct gs_pproc *p, char *why, size_t whylen)
{
        const struct gs_gsm *g = &pool->gsm;
        uint64_t cb = pool->chunk_bytes, nblocks = 0, req = 0, bytes = 0;
        uint32_t whole = 0, inbuddy = 0, legacy = 0;
        int r;

        r = gs_buddy_validate(&p->buddy, why, whylen);
        if (r == 0)
                r = gs_slab_validate(&p->slab, why, whylen);
        if (r < 0)
                return r;
        for (uint32_t id = p->g.held.head; id != GS_GSM_NONE; id = g->chunks[id].next) {
                const struct gs_gsm_chunk *c = &g->chunks[id];
                const struct gs_blk *x = c->user;
                uint64_t base = (uint64_t)c->slot * cb;

                if (x == &gs_pool_legacy_mark) {
                        legacy++;
                        continue;
                }
                if (x) {
                        if (x->kind != GS_BLK_WHOLE || base < x->off || base - x->off >= x->size ||
                            gs_buddy_find(&p->buddy, x->off) != x)
                                FAIL("chunk %u at slot %u: bad coalesced block", id, c->slot);
                        whole++;
                        continue;
                }
                x = gs_buddy_find(&p->buddy, base);
                if (!x || x->kind == GS_BLK_WHOLE)
                        FAIL("chunk %u at slot %u is in no buddy tree", id, c->slot);
                inbuddy++;
        }
        if (legacy != p->leg.nchunks)
                FAIL("process: %u legacy chunks, counter %u", legacy, p->leg.nchunks);
        for (size_t i = 0; i < p->leg.n; i++)
                if (p->leg.blk[i].req) {
                        nblocks++;
                        req += p->leg.blk[i].req;
                        bytes += gs_align_up(p->leg.blk[i].req, GS_MIN_ALIGN);
                }
        if (whole != p->whole_chunks || inbuddy != p->buddy.nchunks)
                FAIL("process: %u coalesced chunks (counter %u), %u buddy chunks (buddy %llu)", whole, p->whole_chunks,
                     inbuddy, (unsigned long long)p->buddy.nchunks);
        for (size_t i = 0; i < p->buddy.tab_cap; i++) {
                const struct gs_blk *x = p->buddy.tab[i].blk;
                if (!x || x->kind == GS_BLK_FREE || x->kind == GS_BLK_SLAB || x->kind == GS_BLK_LEGACY)
                        continue;
                if (x->kind == GS_BLK_TAIL) {
                        const struct gs_blk *w = x->owner;
                        if (!w || w->kind != GS_BLK_WHOLE || w->owner != x || x->off != w->off + w->size)
                                FAIL("tail %#llx not after its coalesced block", (unsigned long long)x->off);
                        bytes += x->size;
                        continue;
                }
                if (x->kind == GS_BLK_WHOLE && x->owner && ((const struct gs_blk *)x->owner)->owner != x)
                        FAIL("coalesced block %#llx: tail does not point back", (unsigned long long)x->off);
                if (x->off + x->size > (uint64_t)p->g.nslots * cb)
                        FAIL("block %#llx past the virtual range", (unsigned long long)x->off);
                if (x->kind == GS_BLK_WHOLE)
                        for (uint64_t s = x->off / cb; s < (x->off + x->size) / cb; s++) {
                                uint32_t id = gs_gsm_slot_chunk(&p->g, (uint32_t)s);
                                if (id == GS_GSM_NONE || g->chunks[id].user != x)
                                        FAIL("coalesced block %#llx: slot %llu not its chunk",
                                             (unsigned long long)x->off, (unsigned long long)s);
                        }
                nblocks++;
                req += x->req;
                bytes += x->size;
        }
        uint64_t sn, sreq, sbytes;
        gs_slab_usage(&p->slab, &sn, &sreq, &sbytes);
        nblocks += sn;
        req += sreq;
        bytes += sbytes;
        if (nblocks != p->nblocks || req != p->bytes_requested || bytes != p->bytes_in_blocks)
                FAIL("process: %llu blocks %llu/%llu B, counters %llu blocks %llu/%llu B", (unsigned long long)nblocks,
                     (unsigned long long)req, (unsigned long long)bytes, (unsigned long long)p->nblocks,
                     (unsigned long long)p->bytes_requested, (unsigned long long)p->bytes_in_blocks);
        return 0;
}

int gs_pool_validate(const struct gs_pool *pool, char *why, size_t whylen)
{
        int r = gs_gsm_validate(&pool->gsm, why, whylen);

        if (r < 0)
                return r;
        for (struct gs_gsm_alloc *ga = pool->gsm.allocs; ga; ga = ga->next) {
                const struct gs_palloc *a = palloc_of(ga);
                uint64_t nblocks = 0, req = 0, bytes = 0;

                if (a->pool != pool)
                        FAIL("allocation of another pool");
                for (struct gs_gsm_proc *gp = ga->procs; gp; gp = gp->next) {
                        const struct gs_pproc *p = pproc_of(gp);
                        if (p->a != a)
                                FAIL("process of another allocation");
                        r = validate_proc(pool, p, why, whylen);
                        if (r < 0)
                                return r;
                        nblocks += p->nblocks;
                        req += p->bytes_requested;
                        bytes += p->bytes_in_blocks;
                }
                if (nblocks != a->nblocks || req != a->bytes_requested || bytes != a->bytes_in_blocks)
                        FAIL("allocation: processes hold %llu blocks %llu/%llu B, counters %llu %llu/%llu",
                             (unsigned long long)nblocks, (unsigned long long)req, (unsigned long long)bytes,
                             (unsigned long long)a->nblocks, (unsigned long long)a->bytes_requested,
                             (unsigned long long)a->bytes_in_blocks);
        }
        return 0;
}
