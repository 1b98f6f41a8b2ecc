/* gs_pool.c — the allocator as the agent sees it (gs_pool.h): the GSM
 * chunk level, a buddy and a slab cache per process, coalesced requests,
 * release hints and accounting. */
#include "gs_pool.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gs_buddy.h"
#include "gs_gsm.h"
#include "gs_slab.h"

#define container_of(p, T, m) ((T *)((char *)(p) - offsetof(T, m)))

/* Largest chunk accepted: keeps nslots * chunk_bytes within 64 bits. */
#define MAX_CHUNK_SHIFT 40u

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
};

/* A live block an agent restart found (gs_pool.h "legacy"). */
struct legacy_blk {
        uint64_t off, req; /* req 0: freed */
};

struct legacy {
        struct legacy_blk *blk; /* sorted by off once sealed */
        size_t n, cap, nlive;
        uint8_t *claimed;       /* per slot: the process maps it */
        uint32_t slots_cap;     /* entries of count and claimed */
        uint32_t nchunks;       /* legacy chunks held */
        bool sealed, exact;
};

/* The user pointer of a legacy chunk (never dereferenced as a block). */
static struct gs_blk legacy_mark;

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
 * with GS_ALLOC_VALIDATE_EVERY=N for long randomized runs). */
static void debug_validate(struct gs_pool *pool, const char *op)
{
        char why[256] = "";

        if (++pool->dbg_count % pool->dbg_every)
                return;
        if (gs_pool_validate(pool, why, sizeof(why)) < 0) {
                fprintf(stderr, "gs_pool: invariant broken after %s: %s\n", op, why);
                abort();
        }
}
#define DEBUG_VALIDATE(pool, op) debug_validate(pool, op)
#else
#define DEBUG_VALIDATE(pool, op) ((void)(pool))
#endif

static inline struct gs_pproc *pproc_of(struct gs_gsm_proc *g) { return container_of(g, struct gs_pproc, g); }
static inline struct gs_palloc *palloc_of(struct gs_gsm_alloc *g) { return container_of(g, struct gs_palloc, g); }

/* ---- pool ---- */

struct gs_pool *gs_pool_new(uint32_t nchunks, uint64_t chunk_bytes)
{
        struct gs_pool *pool;

        if (!gs_is_pow2(chunk_bytes) || chunk_bytes < 64 * GS_KiB ||
            chunk_bytes > (UINT64_C(1) << MAX_CHUNK_SHIFT) || nchunks == 0)
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

void gs_pool_set_hold_fn(struct gs_pool *pool, void (*fn)(void *ctx, uint32_t chunk, const void *tag,
                                                          uint32_t slot, int held), void *ctx)
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
        ret->nchunks = gs_gsm_usable(&pool->gsm);
        ret->chunks_free = pool->gsm.sys.count;
        ret->chunks_reserved = pool->gsm.reserved;
        ret->chunks_borrowed = pool->gsm.borrowed;
        ret->nallocs = pool->gsm.nallocs;
}

/* ---- allocations ---- */

int gs_palloc_new(struct gs_pool *pool, uint32_t quota_chunks, uint32_t balloon_cap_chunks,
                  struct gs_palloc **ret)
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

void gs_palloc_stats(const struct gs_palloc *a, struct gs_palloc_stats *ret)
{
        memset(ret, 0, sizeof(*ret));
        ret->quota_chunks = a->g.quota;
        ret->balloon_cap_chunks = a->g.cap;
        ret->chunks_free = a->g.own.count;
        ret->chunks_held = a->g.held;
        ret->chunks_borrowed = a->g.borrowed.count;
        ret->nprocs = a->g.nprocs;
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
        ret->bytes_obtainable = p->buddy.nchunks * cb - p->buddy.bytes_used +
                                (uint64_t)gs_gsm_alloc_obtainable(&p->a->g) * cb;
}

static void account(struct gs_pproc *p, int sign, uint64_t req, uint64_t size)
{
        p->nblocks += (uint64_t)(int64_t)sign;
        p->a->nblocks += (uint64_t)(int64_t)sign;
        p->bytes_requested += (uint64_t)(int64_t)sign * req;
        p->bytes_in_blocks += (uint64_t)(int64_t)sign * size;
        p->a->bytes_requested += (uint64_t)(int64_t)sign * req;
        p->a->bytes_in_blocks += (uint64_t)(int64_t)sign * size;
}

/* Coalescing: k chunks at k consecutive slots.  As the buddy does inside a
 * chunk, only what the request needs is taken: the last chunk joins the
 * buddy with the request's tail carved at its base (a GS_BLK_TAIL block),
 * so a 300 MiB request holds 256 MiB + 44 MiB, not 512 MiB, and the rest
 * of that chunk serves other requests. */
/* k consecutive slots of p holding cached empty chunks (wholly free in the
 * buddy, under no whole block): a coalesced request reuses them without
 * new grants.  The lowest such run into *ret_first. */
static bool cached_run(const struct gs_pproc *p, uint32_t k, uint32_t *ret_first)
{
        const struct gs_pool *pool = p->a->pool;
        uint64_t cb = pool->chunk_bytes;
        uint32_t run = 0;

        if (p->buddy.nchunks_empty < k)
                return false;
        for (uint32_t s = 0; s < p->g.slots_cap; s++) {
                uint32_t c = gs_gsm_slot_chunk(&p->g, s);
                if (c == GS_GSM_NONE || pool->gsm.chunks[c].user ||
                    !gs_buddy_chunk_is_free(&p->buddy, (uint64_t)s * cb)) {
                        run = 0;
                        continue;
                }
                if (++run == k) {
                        *ret_first = s + 1 - k;
                        return true;
                }
        }
        return false;
}

uint32_t gs_pproc_empty_run(const struct gs_pproc *p, uint32_t max, uint32_t *ret_first)
{
        const struct gs_pool *pool = p->a->pool;
        uint64_t cb = pool->chunk_bytes;
        uint32_t run = 0;

        if (p->buddy.nchunks_empty == 0 || max == 0)
                return 0;
        for (uint32_t s = 0; s < p->g.slots_cap; s++) {
                uint32_t c = gs_gsm_slot_chunk(&p->g, s);
                if (c != GS_GSM_NONE && !pool->gsm.chunks[c].user &&
                    gs_buddy_chunk_is_free(&p->buddy, (uint64_t)s * cb)) {
                        if (run++ == 0)
                                *ret_first = s;
                        if (run == max)
                                return run;
                } else if (run) {
                        return run;
                }
        }
        return run;
}

static int malloc_whole(struct gs_pproc *p, uint64_t size, uint64_t *ret_off,
                        struct gs_grant *ret_grants, uint32_t max_grants, uint32_t *ret_ngrants)
{
        struct gs_pool *pool = p->a->pool;
        uint64_t cb = pool->chunk_bytes;
        uint32_t k = (uint32_t)((size + cb - 1) / cb), first;
        uint64_t tail = gs_align_up(size - (uint64_t)(k - 1) * cb, GS_MIN_ALIGN);
        uint32_t nfull = tail < cb ? k - 1 : k;
        int r;

        bool reuse = cached_run(p, k, &first);

        if (!reuse) {
                if (gs_gsm_alloc_obtainable(&p->a->g) < k)
                        return -ENOMEM;
                r = gs_gsm_find_slots(&p->g, k, &first);
                if (r < 0)
                        return r;
                if (k > max_grants)
                        return -E2BIG;
        }
        r = gs_buddy_reserve(&p->buddy, GS_BUDDY_OP_RECS + 2);
        if (r == 0)
                r = gs_buddy_reserve_chunks(&p->buddy, (uint64_t)(first + k) * cb);
        if (r < 0)
                return r;
        /* Nothing below can fail. */
        if (reuse)
                for (uint32_t i = 0; i < k; i++)
                        if (gs_buddy_remove_chunk(&p->buddy, (uint64_t)(first + i) * cb) < 0)
                                abort(); /* cached_run checked it is wholly free */
        struct gs_blk *x = gs_buddy_rec_get(&p->buddy);
        x->kind = GS_BLK_WHOLE;
        x->off = (uint64_t)first * cb;
        x->size = (uint64_t)nfull * cb;
        x->req = size;
        gs_buddy_insert(&p->buddy, x->off, x);
        for (uint32_t i = 0; i < k; i++) {
                uint32_t chunk;
                if (reuse) {
                        chunk = gs_gsm_slot_chunk(&p->g, first + i);
                } else {
                        if (gs_gsm_take(&p->g, first + i, &chunk) < 0)
                                abort(); /* obtainable said k: cannot happen */
                        ret_grants[i].chunk = chunk;
                        ret_grants[i].slot = first + i;
                }
                if (i < nfull)
                        pool->gsm.chunks[chunk].user = x;
        }
        if (nfull < k) {
                uint64_t base = (uint64_t)(first + nfull) * cb;
                struct gs_blk *t;
                if (gs_buddy_add_chunk(&p->buddy, base) < 0 ||
                    gs_buddy_alloc_at(&p->buddy, base, tail, GS_BLK_TAIL, &t) < 0)
                        abort(); /* reserved above */
                t->owner = x;
                x->owner = t;
        } else {
                tail = 0;
        }
        p->whole_chunks += nfull;
        account(p, 1, size, x->size + tail);
        *ret_off = x->off;
        *ret_ngrants = reuse ? 0 : k;
        return 0;
}

int gs_pproc_malloc(struct gs_pproc *p, uint64_t size, uint64_t *ret_off,
                    struct gs_grant *ret_grants, uint32_t max_grants, uint32_t *ret_ngrants)
{
        struct gs_pool *pool = p->a->pool;
        uint64_t cb = pool->chunk_bytes;
        uint32_t ngrants = 0;
        uint64_t off = 0, bsize;
        struct gs_blk *x = NULL;
        int r;

        if (size == 0 || size > (uint64_t)gs_gsm_usable(&pool->gsm) * cb)
                return -EINVAL;
        /* The agent's memory per process and allocation is bounded by its
         * live blocks: past the cap a request is out of memory, as past
         * the quota. */
        if (p->nblocks >= pool->max_proc_blocks || p->a->nblocks >= pool->max_alloc_blocks)
                return -ENOMEM;
        if (size > cb) {
                r = malloc_whole(p, size, ret_off, ret_grants, max_grants, ret_ngrants);
                if (r == 0)
                        DEBUG_VALIDATE(pool, "malloc");
                return r;
        }
        int use_slab = gs_slab_wants(&p->slab, size);
        for (;;) {
                if (use_slab)
                        r = gs_slab_alloc(&p->slab, size, &off);
                else if ((r = gs_buddy_alloc(&p->buddy, size, size, GS_BLK_USED, &x)) == 0)
                        off = x->off;
                if (r != -ENOSPC || ngrants)
                        break;
                /* No room in the chunks held: one more chunk.  Check and
                 * reserve everything first, so that once the chunk is taken
                 * the retry cannot fail. */
                uint32_t slot, chunk;
                if (gs_gsm_alloc_obtainable(&p->a->g) == 0)
                        return -ENOMEM;
                r = gs_gsm_find_slots(&p->g, 1, &slot);
                if (r < 0)
                        return r;
                if (max_grants < 1)
                        return -E2BIG;
                r = gs_buddy_reserve(&p->buddy, GS_BUDDY_OP_RECS + 2);
                if (r == 0)
                        r = gs_buddy_reserve_chunks(&p->buddy, (uint64_t)(slot + 1) * cb);
                if (r == 0 && use_slab)
                        r = gs_slab_reserve(&p->slab);
                if (r < 0)
                        return r;
                if (gs_gsm_take(&p->g, slot, &chunk) < 0 ||
                    gs_buddy_add_chunk(&p->buddy, (uint64_t)slot * cb) < 0)
                        abort(); /* checked and reserved above */
                ret_grants[0].chunk = chunk;
                ret_grants[0].slot = slot;
                ngrants = 1;
        }
        if (r < 0) {
                /* A wholly free chunk fits any request up to chunk_bytes, and
                 * everything was reserved: only a broken invariant gets here. */
                if (ngrants)
                        abort();
                return r;
        }
        bsize = gs_align_up(size, GS_MIN_ALIGN); /* slot or buddy block */
        gs_slab_note(&p->slab, size);
        account(p, 1, size, bsize);
        *ret_off = off;
        *ret_ngrants = ngrants;
        DEBUG_VALIDATE(pool, "malloc");
        return 0;
}


/* ---- legacy chunks (gs_pool.h) ---- */

static bool is_legacy(const struct gs_pproc *p, uint32_t slot)
{
        uint32_t c = gs_gsm_slot_chunk(&p->g, slot);

        return c != GS_GSM_NONE && p->a->pool->gsm.chunks[c].user == &legacy_mark;
}

static int legacy_slots_grow(struct legacy *l, uint32_t need)
{
        if (need <= l->slots_cap)
                return 0;
        uint32_t cap = l->slots_cap ? l->slots_cap : 16;
        while (cap < need)
                cap *= 2;
        uint8_t *m = realloc(l->claimed, cap);
        if (!m)
                return -ENOMEM;
        l->claimed = m;
        memset(m + l->slots_cap, 0, cap - l->slots_cap);
        l->slots_cap = cap;
        return 0;
}

uint32_t gs_pproc_legacy_chunks(const struct gs_pproc *p)
{
        return p->leg.nchunks;
}

uint32_t gs_pproc_legacy_shed(struct gs_pproc *p, uint32_t keep)
{
        return gs_pproc_legacy_shed_fill(p, keep, NULL, NULL);
}

uint32_t gs_pproc_legacy_shed_fill(struct gs_pproc *p, uint32_t keep, void (*fn)(void *ctx, uint32_t chunk),
                                   void *ctx)
{
        const struct gs_gsm_chunk *cs = p->a->pool->gsm.chunks;
        uint32_t n = 0;

        for (uint32_t id = p->g.held.head; id != GS_GSM_NONE && p->leg.nchunks > keep;) {
                uint32_t next = cs[id].next, slot = cs[id].slot;
                /* Never claimed: no legacy block lies over it. */
                if (cs[id].user == &legacy_mark && !p->leg.claimed[slot]) {
                        gs_gsm_put(&p->g, slot);
                        p->leg.nchunks--;
                        n++;
                        if (fn)
                                fn(ctx, id);
                }
                id = next;
        }
        if (n)
                DEBUG_VALIDATE(p->a->pool, "legacy_shed");
        return n;
}

static int adopt(struct gs_pproc *p, uint32_t slot, bool force, uint32_t *ret_chunk)
{
        uint32_t chunk;
        int r;

        if (slot >= p->g.nslots || gs_gsm_slot_chunk(&p->g, slot) != GS_GSM_NONE)
                return -EBUSY;
        if (!force && gs_gsm_alloc_obtainable(&p->a->g) == 0)
                return -ENOMEM;
        r = legacy_slots_grow(&p->leg, slot + 1);
        if (r < 0)
                return r;
        r = gs_gsm_take_at(&p->g, slot, &chunk);
        if (r < 0)
                return r;
        p->a->pool->gsm.chunks[chunk].user = &legacy_mark;
        p->leg.nchunks++;
        *ret_chunk = chunk;
        DEBUG_VALIDATE(p->a->pool, "adopt");
        return 0;
}

int gs_pproc_adopt(struct gs_pproc *p, uint32_t slot, uint32_t *ret_chunk)
{
        return adopt(p, slot, true, ret_chunk);
}

int gs_pproc_adopt_capped(struct gs_pproc *p, uint32_t slot, uint32_t *ret_chunk)
{
        return adopt(p, slot, false, ret_chunk);
}

int gs_pproc_legacy_claim(struct gs_pproc *p, uint32_t slot, uint32_t *ret_chunk)
{
        int r;

        *ret_chunk = UINT32_MAX;
        if (p->leg.sealed)
                return -EALREADY;
        if (slot >= p->g.nslots)
                return -EBUSY;
        if (gs_gsm_slot_chunk(&p->g, slot) == GS_GSM_NONE) {
                r = adopt(p, slot, false, ret_chunk);
                if (r < 0)
                        return r;
        } else if (!is_legacy(p, slot)) {
                return -EBUSY;
        }
        p->leg.claimed[slot] = 1;
        return 0;
}

int gs_pproc_legacy_block(struct gs_pproc *p, uint64_t off, uint64_t size)
{
        struct gs_pool *pool = p->a->pool;
        uint64_t cb = pool->chunk_bytes;
        struct legacy *l = &p->leg;

        if (l->sealed)
                return -EALREADY;
        if (size == 0 || off % GS_MIN_ALIGN || off / cb >= p->g.nslots ||
            size > (uint64_t)p->g.nslots * cb - off)
                return -EINVAL;
        for (uint64_t s = off / cb; s <= (off + size - 1) / cb; s++)
                if (s >= l->slots_cap || !l->claimed[s] || !is_legacy(p, (uint32_t)s))
                        return -EINVAL;
        if (p->nblocks >= pool->max_proc_blocks || p->a->nblocks >= pool->max_alloc_blocks)
                return -ENOMEM;
        if (l->n == l->cap) {
                size_t cap = l->cap ? 2 * l->cap : 64;
                struct legacy_blk *b = realloc(l->blk, cap * sizeof(*b));
                if (!b)
                        return -ENOMEM;
                l->blk = b;
                l->cap = cap;
        }
        l->blk[l->n++] = (struct legacy_blk){ off, size };
        l->nlive++;
        account(p, 1, size, gs_align_up(size, GS_MIN_ALIGN));
        return 0;
}

static int blk_cmp(const void *a, const void *b)
{
        const struct legacy_blk *x = a, *y = b;

        return x->off < y->off ? -1 : x->off > y->off;
}

int gs_pproc_legacy_seal(struct gs_pproc *p, bool complete)
{
        struct legacy *l = &p->leg;
        uint64_t cb = p->a->pool->chunk_bytes;
        int r = 0;

        if (l->sealed)
                return -EALREADY;
        l->sealed = true;
        if (l->n > 1)
                qsort(l->blk, l->n, sizeof(*l->blk), blk_cmp);
        l->exact = complete;
        for (size_t i = 0; l->exact && i + 1 < l->n; i++)
                if (l->blk[i].req > l->blk[i + 1].off - l->blk[i].off) {
                        l->exact = false;
                        r = -EINVAL;
                }
        if (!l->exact)
                return r;
        /* Each claimed chunk joins the buddy with its blocks in place, as
         * aligned pieces: its free space serves new requests at once. */
        uint64_t *rg = NULL;
        size_t cap = 0, i0 = 0;
        for (uint32_t s = 0; s < l->slots_cap && r == 0; s++) {
                if (!l->claimed[s] || !is_legacy(p, s))
                        continue;
                uint64_t base = (uint64_t)s * cb, end = base + cb;
                size_t n = 0;
                while (i0 < l->n && l->blk[i0].off + gs_align_up(l->blk[i0].req, GS_MIN_ALIGN) <= base)
                        i0++;
                for (size_t i = i0; i < l->n && l->blk[i].off < end; i++) {
                        uint64_t a = l->blk[i].off, z = a + gs_align_up(l->blk[i].req, GS_MIN_ALIGN);
                        if (n + 1 > cap) {
                                size_t nc = cap ? 2 * cap : 64;
                                uint64_t *t = realloc(rg, 2 * nc * sizeof(*t));
                                if (!t) {
                                        r = -ENOMEM;
                                        break;
                                }
                                rg = t;
                                cap = nc;
                        }
                        rg[2 * n] = a < base ? base : a;
                        rg[2 * n + 1] = z > end ? end : z;
                        n++;
                }
                if (r == 0)
                        r = gs_buddy_add_chunk_used(&p->buddy, base, rg, n);
                if (r == 0) {
                        p->a->pool->gsm.chunks[gs_gsm_slot_chunk(&p->g, s)].user = NULL;
                        p->leg.nchunks--;
                        l->claimed[s] = 0;
                }
        }
        free(rg);
        if (r < 0) {
                /* The chunks not done stay opaque; frees of their blocks
                 * only count. */
                l->exact = false;
                for (uint32_t s = 0; s < l->slots_cap; s++)
                        l->claimed[s] = 0;
                return r;
        }
        DEBUG_VALIDATE(p->a->pool, "legacy_seal");
        return 0;
}

/* The legacy block starting at off (live), or NULL. */
static struct legacy_blk *legacy_find(const struct legacy *l, uint64_t off, bool containing)
{
        size_t lo = 0, hi = l->n;

        if (!l->sealed || !l->n)
                return NULL;
        /* The last block starting at or below off. */
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (l->blk[mid].off <= off)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        for (size_t i = lo; i-- > 0;) {
                struct legacy_blk *b = &l->blk[i];
                if (!containing)
                        return b->off == off && b->req ? b : NULL;
                if (b->req && off - b->off < b->req)
                        return b;
                if (l->exact)
                        return NULL; /* no overlaps: an earlier one ends before */
        }
        return NULL;
}

static int freed(struct gs_pproc *p, uint64_t req, uint64_t size, uint64_t empty, struct gs_release rel,
                 struct gs_release *ret_release);

static int legacy_free(struct gs_pproc *p, uint64_t off, struct gs_release *ret_release)
{
        struct legacy *l = &p->leg;
        uint64_t cb = p->a->pool->chunk_bytes, empty = UINT64_MAX;
        struct legacy_blk *b = legacy_find(l, off, false);
        struct gs_release rel = { 0, 0 };

        if (!b)
                return -ENOENT;
        uint64_t req = b->req, end = off + gs_align_up(req, GS_MIN_ALIGN);
        if (l->exact) {
                /* Its pieces, chunk by chunk: all there, or nothing freed. */
                size_t pieces = 0;
                for (uint64_t a = off; a < end; a = (a / cb + 1) * cb) {
                        uint64_t z = (a / cb + 1) * cb < end ? (a / cb + 1) * cb : end;
                        const struct gs_blk *x = gs_buddy_find(&p->buddy, a);
                        if (!x || x->kind != GS_BLK_LEGACY)
                                return -ENOENT;
                        pieces += gs_buddy_pieces(a, z, NULL, NULL);
                }
                int r = gs_buddy_reserve(&p->buddy, pieces * GS_BUDDY_OP_RECS);
                if (r < 0)
                        return r;
                for (uint64_t a = off; a < end; a = (a / cb + 1) * cb) {
                        uint64_t z = (a / cb + 1) * cb < end ? (a / cb + 1) * cb : end, e;
                        if (gs_buddy_free_pieces(&p->buddy, a, z, &e) < 0)
                                abort(); /* checked and reserved above */
                        if (e != UINT64_MAX && empty == UINT64_MAX)
                                empty = e;
                }
        }
        b->req = 0;
        l->nlive--;
        return freed(p, req, gs_align_up(req, GS_MIN_ALIGN), empty, rel, ret_release);
}

/* The end of every successful free: a chunk the free emptied is handed
 * back if another empty one is cached; the counters. */
static int freed(struct gs_pproc *p, uint64_t req, uint64_t size, uint64_t empty, struct gs_release rel,
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

int gs_pproc_free(struct gs_pproc *p, uint64_t off, struct gs_release *ret_release)
{
        struct gs_pool *pool = p->a->pool;
        uint64_t cb = pool->chunk_bytes;
        struct gs_release rel = { 0, 0 };
        uint64_t empty = UINT64_MAX;
        struct gs_blk *x;
        int r;

        if (off % GS_MIN_ALIGN || off / cb >= p->g.nslots)
                return -ENOENT;
        x = gs_buddy_find(&p->buddy, off);
        if ((x && x->kind == GS_BLK_LEGACY) || (!x && p->leg.nlive && is_legacy(p, (uint32_t)(off / cb))))
                return legacy_free(p, off, ret_release);
        if (!x || x->kind == GS_BLK_SLAB) {
                /* A slot: in the slab block at off (slot 0), or inside one. */
                struct gs_slab *s = x ? x->owner : gs_slab_find(&p->slab, off);
                unsigned i;
                if (!s || gs_slab_slot(s, off, &i) < 0 || gs_slab_slot_off(s, i) != off)
                        return -ENOENT;
                uint64_t req = gs_slab_slot_req(s, i), size = s->slot;
                r = gs_slab_free(&p->slab, s, i, &empty);
                if (r < 0)
                        return r;
                return freed(p, req, size, empty, rel, ret_release);
        }
        uint64_t req = x->req, size = x->size;
        switch (x->kind) {
        case GS_BLK_USED:
                r = gs_buddy_free(&p->buddy, x, &empty);
                break;
        case GS_BLK_WHOLE: {
                uint32_t first = (uint32_t)(off / cb), k = (uint32_t)(x->size / cb);
                struct gs_blk *t = x->owner;
                uint64_t tail_empty = UINT64_MAX;
                r = gs_buddy_reserve(&p->buddy, k + GS_BUDDY_OP_RECS);
                if (r == 0)
                        r = gs_buddy_reserve_chunks(&p->buddy, off + x->size);
                if (r < 0)
                        return r;
                size += t ? t->size : 0;
                gs_buddy_remove(&p->buddy, off);
                gs_buddy_rec_put(&p->buddy, x);
                /* The chunks stay with the process as empty buddy chunks;
                 * it is told to give back all but one cached empty chunk. */
                for (uint32_t i = 0; i < k; i++) {
                        uint32_t chunk = gs_gsm_slot_chunk(&p->g, first + i);
                        pool->gsm.chunks[chunk].user = NULL;
                        if (gs_buddy_add_chunk(&p->buddy, (uint64_t)(first + i) * cb) < 0)
                                abort(); /* reserved above */
                }
                if (t && gs_buddy_free(&p->buddy, t, &tail_empty) < 0)
                        abort(); /* reserved above */
                p->whole_chunks -= k;
                uint64_t newly = k + (tail_empty != UINT64_MAX);
                uint64_t extra = p->buddy.nchunks_empty - 1;
                /* While the allocation still has as many free chunks for
                 * its other processes, the process keeps the block's chunks
                 * cached: a block of the same size again (a framework's
                 * cache, a loop) needs no new grants (cached_run).  Under
                 * pressure they go back at once, all but one. */
                rel.first_slot = first;
                rel.count = p->a->g.own.count >= newly ? 0 : (uint32_t)(extra < newly ? extra : newly);
                break;
        }
        default:
                return -ENOENT;
        }
        if (r < 0)
                return r;
        return freed(p, req, size, empty, rel, ret_release);
}

int gs_pproc_release(struct gs_pproc *p, uint32_t first_slot, uint32_t count)
{
        struct gs_pool *pool = p->a->pool;
        uint64_t cb = pool->chunk_bytes;

        if (count == 0)
                return -EINVAL;
        if (first_slot >= p->g.nslots || count > p->g.nslots - first_slot)
                return -ENOENT;
        for (uint32_t s = first_slot; s < first_slot + count; s++) {
                uint32_t chunk = gs_gsm_slot_chunk(&p->g, s);
                if (chunk == GS_GSM_NONE)
                        return -ENOENT;
                if (pool->gsm.chunks[chunk].user || !gs_buddy_chunk_is_free(&p->buddy, (uint64_t)s * cb))
                        return -EBUSY;
        }
        for (uint32_t s = first_slot; s < first_slot + count; s++) {
                if (gs_buddy_remove_chunk(&p->buddy, (uint64_t)s * cb) < 0)
                        abort(); /* checked above */
                gs_gsm_put(&p->g, s);
        }
        DEBUG_VALIDATE(pool, "release");
        return 0;
}

uint32_t gs_pproc_slot_chunk(const struct gs_pproc *p, uint32_t slot)
{
        return slot < p->g.nslots ? gs_gsm_slot_chunk(&p->g, slot) : UINT32_MAX;
}

int gs_pproc_range(const struct gs_pproc *p, uint64_t off, uint64_t *ret_base, uint64_t *ret_size)
{
        const struct gs_pool *pool = p->a->pool;
        uint64_t cb = pool->chunk_bytes;
        uint64_t slot = off / cb;

        if (slot >= p->g.nslots)
                return -ENOENT;
        uint32_t chunk = gs_gsm_slot_chunk(&p->g, (uint32_t)slot);
        if (chunk == GS_GSM_NONE)
                return -ENOENT;
        const struct gs_blk *x = pool->gsm.chunks[chunk].user;
        uint64_t base, req;
        const struct legacy_blk *lb = p->leg.nlive ? legacy_find(&p->leg, off, true) : NULL;
        if (lb) {
                *ret_base = lb->off;
                *ret_size = lb->req;
                return 0;
        }
        if (x == &legacy_mark)
                return -ENOENT;
        if (!x) {
                x = gs_buddy_find_containing(&p->buddy, off);
                if (x && x->kind == GS_BLK_TAIL)
                        x = x->owner;
                if (x && x->kind == GS_BLK_LEGACY)
                        return -ENOENT; /* past its block's end (legacy_find had it) */
        }
        if (x && x->kind == GS_BLK_SLAB) {
                const struct gs_slab *s = x->owner;
                unsigned i;
                if (gs_slab_slot(s, off, &i) < 0)
                        return -ENOENT;
                base = gs_slab_slot_off(s, i);
                req = gs_slab_slot_req(s, i);
        } else if (x && x->kind != GS_BLK_FREE) {
                base = x->off;
                req = x->req;
        } else {
                return -ENOENT;
        }
        if (off - base >= req)
                return -ENOENT;
        *ret_base = base;
        *ret_size = req;
        return 0;
}

/* ---- validation ---- */

#define FAIL(...)                                                         \
        do {                                                              \
                if (why && whylen)                                        \
                        snprintf(why, whylen, __VA_ARGS__);               \
                return -EUCLEAN;                                          \
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

                if (x == &legacy_mark) {
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
                FAIL("process: %u coalesced chunks (counter %u), %u buddy chunks (buddy %llu)", whole,
                     p->whole_chunks, inbuddy, (unsigned long long)p->buddy.nchunks);
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
                if (x->kind == GS_BLK_WHOLE && x->owner &&
                    ((const struct gs_blk *)x->owner)->owner != x)
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
                FAIL("process: %llu blocks %llu/%llu B, counters %llu blocks %llu/%llu B",
                     (unsigned long long)nblocks, (unsigned long long)req, (unsigned long long)bytes,
                     (unsigned long long)p->nblocks, (unsigned long long)p->bytes_requested,
                     (unsigned long long)p->bytes_in_blocks);
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
                             (unsigned long long)a->nblocks,
                             (unsigned long long)a->bytes_requested,
                             (unsigned long long)a->bytes_in_blocks);
        }
        return 0;
}
