/* gs_pool.c — the allocator's objects as the agent sees them (gs_pool.h):
 * a GPU's pool over the GSM chunk level, its allocation parts and their
 * processes (each with a buddy and a slab cache), their stats and the
 * agent's hooks into them.  Blocks: gs_pool_blocks.c; chunks from before a
 * restart: gs_pool_legacy.c; validation: gs_pool_validate.c. */
#include "gs_pool_int.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Largest chunk accepted: keeps nslots * chunk_bytes within 64 bits. */
#define MAX_CHUNK_SHIFT 40u

/* ---- pool ---- */

struct gs_pool *gs_pool_new(uint32_t nchunks, uint64_t chunk_bytes)
{
        struct gs_pool *pool;

        if (!gs_is_pow2(chunk_bytes) || chunk_bytes < 64 * GS_KiB || chunk_bytes > (UINT64_C(1) << MAX_CHUNK_SHIFT) ||
            nchunks == 0)
                return NULL;
        pool = calloc(1, sizeof(*pool));
        if (!pool)
                return NULL;
        if (gs_gsm_init(&pool->gsm, nchunks, chunk_bytes) < 0) {
                free(pool);
                return NULL;
        }
        pool->chunk_bytes = chunk_bytes;
        pool->max_proc_blocks = GS_POOL_MAX_PROC_BLOCKS;
        pool->max_alloc_blocks = GS_POOL_MAX_ALLOC_BLOCKS;
#ifdef GS_ALLOC_DEBUG
        const char *e = getenv("GS_ALLOC_VALIDATE_EVERY");
        pool->dbg_every = e && atol(e) > 0 ? (unsigned long)atol(e) : 1;
#endif
        return pool;
}

static void pproc_destroy(struct gs_pproc *p)
{
        gs_gsm_proc_fini(&p->g);
        free(p->leg.blk);
        free(p->leg.claimed);
        gs_slab_fini(&p->slab);
        gs_buddy_fini(&p->buddy);
        free(p);
}

void gs_pool_free(struct gs_pool *pool)
{
        if (!pool)
                return;
        /* Teardown: the chunks' memory goes with the pool, nothing to recycle. */
        pool->gsm.return_fn = NULL;
        while (pool->gsm.allocs) {
                struct gs_palloc *a = palloc_of(pool->gsm.allocs);
                while (a->g.procs)
                        pproc_destroy(pproc_of(a->g.procs));
                if (gs_gsm_alloc_fini(&a->g) < 0)
                        abort(); /* no process left: cannot happen */
                free(a);
        }
        gs_gsm_fini(&pool->gsm);
        free(pool);
}

void gs_pool_set_hold_fn(struct gs_pool *pool,
                         void (*fn)(void *ctx, uint32_t chunk, const void *tag, uint32_t slot, int held), void *ctx)
{
        pool->gsm.hold_fn = fn;
        pool->gsm.hold_ctx = ctx;
}

void gs_pproc_set_tag(struct gs_pproc *p, const void *tag)
{
        p->g.tag = tag;
}

struct gs_gsm *gs_pool_gsm(struct gs_pool *pool)
{
        return &pool->gsm;
}

bool gs_pool_chunk_in_sys(const struct gs_pool *pool, uint32_t chunk)
{
        return chunk < pool->gsm.nchunks && pool->gsm.chunks[chunk].state == GS_GSM_SYS;
}

bool gs_pool_chunk_held(const struct gs_pool *pool, uint32_t chunk)
{
        return chunk < pool->gsm.nchunks && pool->gsm.chunks[chunk].state == GS_GSM_HELD;
}

uint32_t gs_pproc_count_held(const struct gs_pproc *p, bool (*pred)(void *ctx, uint32_t chunk), void *ctx)
{
        const struct gs_gsm_chunk *cs = p->a->pool->gsm.chunks;
        uint32_t n = 0;

        for (uint32_t id = p->g.held.head; id != GS_GSM_NONE; id = cs[id].next)
                n += pred(ctx, id);
        return n;
}

void gs_pool_set_return_fn(struct gs_pool *pool, gs_pool_return_fn fn, void *ctx)
{
        pool->gsm.return_fn = fn;
        pool->gsm.return_ctx = ctx;
}

int gs_pool_set_block_caps(struct gs_pool *pool, uint64_t per_proc, uint64_t per_alloc)
{
        if (per_proc == 0 || per_alloc == 0)
                return -EINVAL;
        pool->max_proc_blocks = per_proc;
        pool->max_alloc_blocks = per_alloc;
        return 0;
}

int gs_pool_retire_chunk(struct gs_pool *pool, uint32_t chunk)
{
        int r = gs_gsm_retire(&pool->gsm, chunk);

        if (r == 0)
                DEBUG_VALIDATE(pool, "retire");
        return r;
}

int gs_pool_unretire_chunk(struct gs_pool *pool, uint32_t chunk)
{
        int r = gs_gsm_unretire(&pool->gsm, chunk);

        if (r == 0)
                DEBUG_VALIDATE(pool, "unretire");
        return r;
}

void gs_pool_stats(const struct gs_pool *pool, struct gs_pool_stats *ret)
{
        memset(ret, 0, sizeof(*ret));
        ret->chunk_bytes = pool->chunk_bytes;
        const struct gs_gsm *g = &pool->gsm;

        /* Spares hold host memory, not the GPU's; owed chunks are lent
         * out of allocations' quotas, not out of free units. */
        ret->nchunks = gs_gsm_usable(g) - g->spilled;
        ret->chunks_free = g->sys.count;
        ret->chunks_reserved = g->reserved;
        ret->chunks_borrowed = g->borrowed > g->spilled + g->owed ? g->borrowed - g->spilled - g->owed : 0;
        ret->chunks_spilled = g->spilled;
        ret->nallocs = pool->gsm.nallocs;
}

/* ---- allocations ---- */

int gs_palloc_new(struct gs_pool *pool, uint32_t quota_chunks, uint32_t balloon_cap_chunks, struct gs_palloc **ret)
{
        struct gs_palloc *a;
        int r;

        if (quota_chunks == 0)
                return -EINVAL;
        if (quota_chunks > pool->gsm.sys.count)
                return -ENOSPC;
        a = calloc(1, sizeof(*a));
        if (!a)
                return -ENOMEM;
        r = gs_gsm_alloc_init(&pool->gsm, &a->g, quota_chunks, balloon_cap_chunks);
        if (r < 0) {
                free(a);
                return r;
        }
        a->pool = pool;
        DEBUG_VALIDATE(pool, "palloc_new");
        *ret = a;
        return 0;
}

int gs_palloc_del(struct gs_palloc *a)
{
        struct gs_pool *pool = a->pool;
        int r = gs_gsm_alloc_fini(&a->g);

        if (r < 0)
                return r;
        free(a);
        DEBUG_VALIDATE(pool, "palloc_del");
        return 0;
}

void gs_palloc_debt(struct gs_palloc *a, int delta)
{
        if (delta > 0)
                a->g.debt++;
        else if (delta < 0 && a->g.debt)
                a->g.debt--;
}

void gs_palloc_raise_cap(struct gs_palloc *a, uint32_t cap)
{
        if (cap > a->g.cap)
                a->g.cap = cap;
}

uint32_t gs_palloc_returned(const struct gs_palloc *a)
{
        return __atomic_load_n(&a->g.returned, __ATOMIC_ACQUIRE);
}

void gs_palloc_stats(const struct gs_palloc *a, struct gs_palloc_stats *ret)
{
        memset(ret, 0, sizeof(*ret));
        ret->quota_chunks = a->g.quota;
        ret->balloon_cap_chunks = a->g.cap;
        ret->chunks_free = a->g.own.count;
        ret->chunks_held = a->g.held;
        ret->chunks_borrowed = a->g.borrowed.count;
        ret->chunks_borrowable = gs_gsm_alloc_obtainable(&a->g) - a->g.own.count;
        ret->nprocs = a->g.nprocs;
        ret->chunks_owed = a->g.owed;
        ret->chunks_debt = a->g.debt;
        ret->chunks_spilled = a->g.spilled;
        ret->nblocks = a->nblocks;
        ret->bytes_requested = a->bytes_requested;
        ret->bytes_in_blocks = a->bytes_in_blocks;
}

/* ---- processes ---- */

int gs_pproc_new(struct gs_palloc *a, uint32_t nslots, struct gs_pproc **ret)
{
        struct gs_pproc *p;
        int r;

        if (nslots == 0 || nslots > GS_GSM_MAX_SLOTS)
                return -EINVAL;
        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        r = gs_buddy_init(&p->buddy, a->pool->gsm.chunk_shift);
        if (r < 0)
                goto fail;
        r = gs_gsm_proc_init(&a->g, &p->g, nslots);
        if (r < 0)
                goto fail;
        gs_slab_init(&p->slab, &p->buddy);
        p->a = a;
        DEBUG_VALIDATE(a->pool, "pproc_new");
        *ret = p;
        return 0;
fail:
        gs_buddy_fini(&p->buddy);
        free(p);
        return r;
}

void gs_pproc_del(struct gs_pproc *p)
{
        if (!p)
                return;
        struct gs_palloc *a = p->a;
        a->nblocks -= p->nblocks;
        a->bytes_requested -= p->bytes_requested;
        a->bytes_in_blocks -= p->bytes_in_blocks;
        pproc_destroy(p);
        DEBUG_VALIDATE(a->pool, "pproc_del");
}

void gs_pproc_stats(const struct gs_pproc *p, struct gs_pproc_stats *ret)
{
        uint64_t cb = p->a->pool->chunk_bytes;

        memset(ret, 0, sizeof(*ret));
        ret->nslots = p->g.nslots;
        ret->chunks_held = p->g.held.count;
        ret->chunks_empty = (uint32_t)p->buddy.nchunks_empty;
        ret->nblocks = p->nblocks;
        ret->bytes_requested = p->bytes_requested;
        ret->bytes_in_blocks = p->bytes_in_blocks;
        ret->bytes_obtainable =
                p->buddy.nchunks * cb - p->buddy.bytes_used + (uint64_t)gs_gsm_alloc_obtainable(&p->a->g) * cb;
}
