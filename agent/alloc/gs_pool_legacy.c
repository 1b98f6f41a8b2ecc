/* gs_pool_legacy.c — after an agent restart, the chunks a process already
 * holds and its live blocks there (gs_pool.h "legacy"): adopted opaque,
 * claimed as the process maps them, joined to its buddy once its block
 * list is complete, shed when nothing stands on them, freed and looked up
 * as any block. */
#include "gs_pool_int.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The user pointer of a legacy chunk (never dereferenced as a block). */
struct gs_blk gs_pool_legacy_mark;

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

uint32_t gs_pproc_legacy_shed_fill(struct gs_pproc *p, uint32_t keep, void (*fn)(void *ctx, uint32_t chunk), void *ctx)
{
        const struct gs_gsm_chunk *cs = p->a->pool->gsm.chunks;
        uint32_t n = 0;

        for (uint32_t id = p->g.held.head; id != GS_GSM_NONE && p->leg.nchunks > keep;) {
                uint32_t next = cs[id].next, slot = cs[id].slot;
                /* Never claimed: no legacy block lies over it. */
                if (cs[id].user == &gs_pool_legacy_mark && !p->leg.claimed[slot]) {
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
        p->a->pool->gsm.chunks[chunk].user = &gs_pool_legacy_mark;
        p->leg.nchunks++;
        *ret_chunk = chunk;
        DEBUG_VALIDATE(p->a->pool, "adopt");
        return 0;
}

int gs_pproc_adopt_spare(struct gs_pproc *p, uint32_t slot, uint32_t spare)
{
        int r = legacy_slots_grow(&p->leg, slot + 1);

        if (r == 0)
                r = gs_gsm_adopt_spare(&p->g, slot, spare);
        if (r < 0)
                return r;
        p->a->pool->gsm.chunks[spare].user = &gs_pool_legacy_mark;
        p->leg.nchunks++;
        DEBUG_VALIDATE(p->a->pool, "adopt_spare");
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
        if (size == 0 || off % GS_MIN_ALIGN || off / cb >= p->g.nslots || size > (uint64_t)p->g.nslots * cb - off)
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
struct legacy_blk *gs_pproc_legacy_find(const struct legacy *l, uint64_t off, bool containing)
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

int gs_pproc_legacy_free(struct gs_pproc *p, uint64_t off, struct gs_release *ret_release)
{
        struct legacy *l = &p->leg;
        uint64_t cb = p->a->pool->chunk_bytes, empty = UINT64_MAX;
        struct legacy_blk *b = gs_pproc_legacy_find(l, off, false);
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
