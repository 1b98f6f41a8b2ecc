/* gs_pool_int.h — internals of the allocator facade shared by its files
 * (agent/alloc/gs_pool*.c), never included elsewhere:
 *
 *   gs_pool.c           the objects: pool, allocation parts, processes,
 *                       their stats and the agent's hooks into them
 *   gs_pool_blocks.c    a process's blocks: requests (coalesced above a
 *                       chunk), frees and their release hints, give-back
 *                       runs, lookups
 *   gs_pool_legacy.c    chunks and blocks a process holds from before an
 *                       agent restart
 *   gs_pool_validate.c  gs_pool_validate, and the debug build's check
 *                       after every mutation */
#ifndef GS_POOL_INT_H
#define GS_POOL_INT_H

#include "gs_pool.h"

#include "gs_buddy.h"
#include "gs_gsm.h"
#include "gs_slab.h"

#define container_of(p, T, m) ((T *)((char *)(p)-offsetof(T, m)))

struct gs_pool {
        struct gs_gsm gsm;
        uint64_t chunk_bytes;
        uint64_t max_proc_blocks, max_alloc_blocks; /* live-block caps */
#ifdef GS_ALLOC_DEBUG
        unsigned long dbg_every, dbg_count;
#endif
};

struct gs_palloc {
        struct gs_gsm_alloc g;
        struct gs_pool *pool;
        uint64_t nblocks, bytes_requested, bytes_in_blocks;
        uint64_t tag; /* gs_palloc_set_tag */
};

/* A live block an agent restart found (gs_pool.h "legacy"). */
struct legacy_blk {
        uint64_t off, req; /* req 0: freed */
};

struct legacy {
        struct legacy_blk *blk; /* sorted by off once sealed */
        size_t n, cap, nlive;
        uint8_t *claimed;   /* per slot: the process maps it */
        uint32_t slots_cap; /* entries of count and claimed */
        uint32_t nchunks;   /* legacy chunks held */
        bool sealed, exact;
};

/* The user pointer of a legacy chunk (never dereferenced as a block). */
extern struct gs_blk gs_pool_legacy_mark;

struct gs_pproc {
        struct gs_gsm_proc g;
        struct legacy leg;
        struct gs_palloc *a;
        struct gs_buddy buddy;
        struct gs_slab_cache slab;
        uint64_t nblocks, bytes_requested, bytes_in_blocks;
        uint32_t whole_chunks; /* held chunks under coalesced blocks */
};

#ifdef GS_ALLOC_DEBUG
/* Debug builds check the whole pool after every mutation (or every Nth,
 * with GS_ALLOC_VALIDATE_EVERY=N for long randomized runs): aborts on a
 * violation (gs_pool_validate.c). */
void gs_pool_debug_validate(struct gs_pool *pool, const char *op);
#define DEBUG_VALIDATE(pool, op) gs_pool_debug_validate(pool, op)
#else
#define DEBUG_VALIDATE(pool, op) ((void)(pool))
#endif

static inline struct gs_pproc *pproc_of(struct gs_gsm_proc *g)
{
        return container_of(g, struct gs_pproc, g);
}
static inline struct gs_palloc *palloc_of(struct gs_gsm_alloc *g)
{
        return container_of(g, struct gs_palloc, g);
}

static inline void account(struct gs_pproc *p, int sign, uint64_t req, uint64_t size)
{
        p->nblocks += (uint64_t)(int64_t)sign;
        p->a->nblocks += (uint64_t)(int64_t)sign;
        p->bytes_requested += (uint64_t)(int64_t)sign * req;
        p->bytes_in_blocks += (uint64_t)(int64_t)sign * size;
        p->a->bytes_requested += (uint64_t)(int64_t)sign * req;
        p->a->bytes_in_blocks += (uint64_t)(int64_t)sign * size;
}

/* Whether slot of p holds a legacy chunk. */
static inline bool is_legacy(const struct gs_pproc *p, uint32_t slot)
{
        uint32_t c = gs_gsm_slot_chunk(&p->g, slot);

        return c != GS_GSM_NONE && p->a->pool->gsm.chunks[c].user == &gs_pool_legacy_mark;
}

/* The end of every successful free: a chunk the free emptied is handed
 * back if another empty one is cached; the counters. */
static inline int freed(struct gs_pproc *p, uint64_t req, uint64_t size, uint64_t empty, struct gs_release rel,
                        struct gs_release *ret_release)
{
        if (empty != UINT64_MAX && p->buddy.nchunks_empty >= 2) {
                rel.first_slot = (uint32_t)(empty / p->a->pool->chunk_bytes);
                rel.count = 1;
        }
        account(p, -1, req, size);
        if (ret_release)
                *ret_release = rel;
        DEBUG_VALIDATE(p->a->pool, "free");
        return 0;
}

/* gs_pool_legacy.c: the live legacy block starting at off (containing
 * it, if containing), or NULL; the legacy block at off freed as
 * gs_pproc_free frees (-ENOENT if there is none). */
struct legacy_blk *gs_pproc_legacy_find(const struct legacy *l, uint64_t off, bool containing);
int gs_pproc_legacy_free(struct gs_pproc *p, uint64_t off, struct gs_release *ret_release);

#endif
