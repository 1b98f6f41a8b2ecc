/* gs_pool_blocks.c — a process's blocks (gs_pool.h): requests up to a
 * chunk from the slab or the buddy, larger ones as coalesced chunks, frees
 * with their release hints, the runs of empty chunks a process can give
 * back, and lookups. */
#include "gs_pool_int.h"

#include <stdbool.h>
#include <stdlib.h>

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

static int malloc_whole(struct gs_pproc *p, uint64_t size, uint64_t *ret_off, struct gs_grant *ret_grants,
                        uint32_t max_grants, uint32_t *ret_ngrants)
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

int gs_pproc_malloc(struct gs_pproc *p, uint64_t size, uint64_t *ret_off, struct gs_grant *ret_grants,
                    uint32_t max_grants, uint32_t *ret_ngrants)
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
                if (gs_gsm_take(&p->g, slot, &chunk) < 0 || gs_buddy_add_chunk(&p->buddy, (uint64_t)slot * cb) < 0)
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
                return gs_pproc_legacy_free(p, off, ret_release);
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
        case GS_BLK_USED: r = gs_buddy_free(&p->buddy, x, &empty); break;
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
        default: return -ENOENT;
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
        const struct legacy_blk *lb = p->leg.nlive ? gs_pproc_legacy_find(&p->leg, off, true) : NULL;
        if (lb) {
                *ret_base = lb->off;
                *ret_size = lb->req;
                return 0;
        }
        if (x == &gs_pool_legacy_mark)
                return -ENOENT;
        if (!x) {
                x = gs_buddy_find_containing(&p->buddy, off);
                if (x && x->kind == GS_BLK_TAIL)
                        x = x->owner;
                if (x && x->kind == GS_BLK_LEGACY)
                        return -ENOENT; /* past its block's end (gs_pproc_legacy_find had it) */
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
