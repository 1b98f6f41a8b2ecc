/* gs_pool_move.c — moves of a process's data between device and host
 * memory, at the allocator's level (gs_pool.h "Moves"): spare records,
 * lending idle owners' chunks, exchanges, reservations for a move back. */
#include "gs_pool_int.h"

int gs_pool_set_spares(struct gs_pool *pool, uint32_t nspare)
{
        struct gs_gsm *g = &pool->gsm;

        if (nspare >= g->nchunks || g->nreal != g->nchunks || g->nallocs)
                return -EINVAL;
        g->nreal = g->nchunks - nspare;
        for (uint32_t i = g->nreal; i < g->nchunks; i++) {
                int r = gs_gsm_retire(g, i);
                if (r < 0)
                        return r;
        }
        g->lend_owned = nspare != 0;
        DEBUG_VALIDATE(pool, "spares");
        return 0;
}

uint32_t gs_pool_lendable(const struct gs_pool *pool)
{
        return gs_gsm_lendable(&pool->gsm);
}

uint32_t gs_pool_owed(const struct gs_pool *pool)
{
        return pool->gsm.owed;
}

int gs_pool_exchange(struct gs_pool *pool, uint32_t held, uint32_t spare)
{
        int r = gs_gsm_exchange(&pool->gsm, held, spare);

        if (r == 0)
                DEBUG_VALIDATE(pool, "exchange");
        return r;
}

int gs_pool_reserve(struct gs_pool *pool, uint32_t *ret_chunk)
{
        int r = gs_gsm_reserve(&pool->gsm, ret_chunk);

        if (r == 0)
                DEBUG_VALIDATE(pool, "reserve");
        return r;
}

void gs_palloc_want(struct gs_palloc *a, uint32_t n)
{
        gs_gsm_want(&a->g, n);
}

uint32_t gs_palloc_owed(const struct gs_palloc *a)
{
        return a->g.owed;
}

uint32_t gs_pproc_move_slots(const struct gs_pproc *p, bool spares, uint32_t *slots, uint32_t max)
{
        const struct gs_gsm *g = &p->a->pool->gsm;
        uint32_t n = 0;

        for (uint32_t id = p->g.held.head; id != GS_GSM_NONE && n < max; id = g->chunks[id].next) {
                const struct gs_gsm_chunk *c = &g->chunks[id];
                if (spares ? id >= g->nreal : id < g->nreal && c->borrowed && c->user != &gs_pool_legacy_mark)
                        slots[n++] = c->slot;
        }
        return n;
}

void gs_palloc_set_tag(struct gs_palloc *a, uint64_t tag)
{
        a->tag = tag;
}

void gs_pool_debts(const struct gs_pool *pool, void (*fn)(void *ctx, uint64_t tag, uint32_t owed), void *ctx)
{
        for (const struct gs_gsm_alloc *a = pool->gsm.allocs; a; a = a->next)
                if (a->owed)
                        fn(ctx, palloc_of((struct gs_gsm_alloc *)a)->tag, a->owed);
}

void gs_palloc_lent_before(struct gs_palloc *a, uint32_t n)
{
        gs_gsm_alloc_lent_before(&a->g, n);
}

void gs_pool_adopted(struct gs_pool *pool)
{
        gs_gsm_adopted(&pool->gsm);
}

int gs_pool_make_borrowed(struct gs_pool *pool, uint32_t chunk)
{
        int r = gs_gsm_make_borrowed(&pool->gsm, chunk);

        if (r == 0)
                DEBUG_VALIDATE(pool, "make_borrowed");
        return r;
}

uint32_t gs_pool_spare_free(const struct gs_pool *pool)
{
        const struct gs_gsm *g = &pool->gsm;

        for (uint32_t i = g->nreal; i < g->nchunks; i++)
                if (g->chunks[i].state == GS_GSM_RETIRED)
                        return i;
        return UINT32_MAX;
}

const void *gs_pproc_tag(const struct gs_pproc *p)
{
        return p->g.tag;
}
