/* gs_buddy.c — per-process buddy allocator over whole chunks (gs_buddy.h). */
#include "gs_buddy.h"

#include <stdbool.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_RECS 256u

struct gs_buddy_arena {
        struct gs_buddy_arena *next;
        struct gs_blk recs[ARENA_RECS];
};

static inline uint64_t hash_key(uint64_t key, size_t cap)
{
        /* Fibonacci hashing: the multiply carries the low bits (the slot
         * tag included) into the high bits we keep. */
        return (key * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - __builtin_ctzll(cap));
}

static inline unsigned ceil_log2(uint64_t x)
{
        return x <= 1 ? 0 : 64u - (unsigned)__builtin_clzll(x - 1);
}

/* ---- records ---- */

struct gs_blk *gs_buddy_rec_get(struct gs_buddy *b)
{
        struct gs_blk *r = b->rec_free;

        b->rec_free = r->next;
        b->rec_nfree--;
        memset(r, 0, sizeof(*r));
        return r;
}

void gs_buddy_rec_put(struct gs_buddy *b, struct gs_blk *blk)
{
        blk->kind = 0;
        blk->next = b->rec_free;
        b->rec_free = blk;
        b->rec_nfree++;
}

static int rec_reserve(struct gs_buddy *b, size_t n)
{
        while (b->rec_nfree < n) {
                struct gs_buddy_arena *a = malloc(sizeof(*a));

                if (!a)
                        return -ENOMEM;
                a->next = b->arenas;
                b->arenas = a;
                for (unsigned i = ARENA_RECS; i-- > 0;)
                        gs_buddy_rec_put(b, &a->recs[i]);
        }
        return 0;
}

/* ---- hash: linear probing, backward-shift deletion, load <= 1/2 ---- */

struct gs_blk *gs_buddy_find(const struct gs_buddy *b, uint64_t key)
{
        size_t mask = b->tab_cap - 1;

        for (size_t i = hash_key(key, b->tab_cap);; i = (i + 1) & mask) {
                const struct gs_buddy_ent *e = &b->tab[i];

                if (!e->blk)
                        return NULL;
                if (e->key == key)
                        return e->blk;
        }
}

static void tab_put(struct gs_buddy_ent *tab, size_t cap, uint64_t key, struct gs_blk *blk)
{
        size_t i = hash_key(key, cap);

        while (tab[i].blk)
                i = (i + 1) & (cap - 1);
        tab[i].key = key;
        tab[i].blk = blk;
}

void gs_buddy_insert(struct gs_buddy *b, uint64_t key, struct gs_blk *blk)
{
        tab_put(b->tab, b->tab_cap, key, blk);
        b->tab_n++;
}

void gs_buddy_remove(struct gs_buddy *b, uint64_t key)
{
        size_t mask = b->tab_cap - 1;
        size_t i = hash_key(key, b->tab_cap);

        while (b->tab[i].key != key || !b->tab[i].blk)
                i = (i + 1) & mask;
        /* Shift later members of the cluster back so no probe sequence
         * crosses the hole (no tombstones to accumulate). */
        for (size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
                if (!b->tab[j].blk)
                        break;
                size_t home = hash_key(b->tab[j].key, b->tab_cap);
                /* j's entry may move to i if i lies cyclically in [home, j). */
                if (((j - home) & mask) >= ((j - i) & mask)) {
                        b->tab[i] = b->tab[j];
                        i = j;
                }
        }
        b->tab[i].blk = NULL;
        b->tab[i].key = 0;
        b->tab_n--;
}

static int tab_reserve(struct gs_buddy *b, size_t n)
{
        size_t cap = b->tab_cap;

        while ((b->tab_n + n) * 2 > cap)
                cap *= 2;
        if (cap == b->tab_cap)
                return 0;
        struct gs_buddy_ent *t = calloc(cap, sizeof(*t));
        if (!t)
                return -ENOMEM;
        for (size_t i = 0; i < b->tab_cap; i++)
                if (b->tab[i].blk)
                        tab_put(t, cap, b->tab[i].key, b->tab[i].blk);
        free(b->tab);
        b->tab = t;
        b->tab_cap = cap;
        return 0;
}

int gs_buddy_reserve(struct gs_buddy *b, size_t nrec)
{
        int r = rec_reserve(b, nrec);

        if (r < 0)
                return r;
        return tab_reserve(b, nrec);
}

/* ---- per-chunk fill ---- */

static inline uint64_t *fill_of(const struct gs_buddy *b, uint64_t off)
{
        return &b->fill[off >> b->chunk_shift];
}

int gs_buddy_reserve_chunks(struct gs_buddy *b, uint64_t end)
{
        size_t need = (size_t)((end + (UINT64_C(1) << b->chunk_shift) - 1) >> b->chunk_shift);

        if (need <= b->fill_cap)
                return 0;
        size_t cap = b->fill_cap ? b->fill_cap : 16;
        while (cap < need)
                cap *= 2;
        uint64_t *f = realloc(b->fill, cap * sizeof(*f));
        if (!f)
                return -ENOMEM;
        memset(f + b->fill_cap, 0, (cap - b->fill_cap) * sizeof(*f));
        b->fill = f;
        b->fill_cap = cap;
        return 0;
}

/* ---- free lists ---- */

static void fl_push(struct gs_buddy *b, struct gs_blk *r)
{
        struct gs_blk **h = &b->free_head[r->order];

        r->prev = NULL;
        r->next = *h;
        if (*h)
                (*h)->prev = r;
        *h = r;
        b->nonempty |= UINT64_C(1) << r->order;
}

static void fl_unlink(struct gs_buddy *b, struct gs_blk *r)
{
        if (r->prev)
                r->prev->next = r->next;
        else
                b->free_head[r->order] = r->next;
        if (r->next)
                r->next->prev = r->prev;
        if (!b->free_head[r->order])
                b->nonempty &= ~(UINT64_C(1) << r->order);
        r->prev = r->next = NULL;
}

/* A new free block: record, hash, free list.  pre: reserved. */
static void free_block_add(struct gs_buddy *b, struct gs_blk *r, uint64_t off, unsigned order)
{
        r->off = off;
        r->size = UINT64_C(1) << order;
        r->kind = GS_BLK_FREE;
        r->order = (uint8_t)order;
        gs_buddy_insert(b, off, r);
        fl_push(b, r);
        if (order == b->chunk_shift)
                b->nchunks_empty++;
}

/* ---- public ---- */

int gs_buddy_init(struct gs_buddy *b, unsigned chunk_shift)
{
        memset(b, 0, sizeof(*b));
        if (chunk_shift < GS_BUDDY_MIN_SHIFT + 8 || chunk_shift > GS_BUDDY_MAX_SHIFT)
                return -EINVAL;
        b->chunk_shift = chunk_shift;
        b->tab_cap = 64;
        b->tab = calloc(b->tab_cap, sizeof(*b->tab));
        if (!b->tab)
                return -ENOMEM;
        return 0;
}

void gs_buddy_fini(struct gs_buddy *b)
{
        struct gs_buddy_arena *a = b->arenas;

        while (a) {
                struct gs_buddy_arena *n = a->next;
                free(a);
                a = n;
        }
        free(b->tab);
        free(b->fill);
        memset(b, 0, sizeof(*b));
}

int gs_buddy_add_chunk(struct gs_buddy *b, uint64_t base)
{
        int r = gs_buddy_reserve(b, 1);

        if (r == 0)
                r = gs_buddy_reserve_chunks(b, base + 1);
        if (r < 0)
                return r;
        free_block_add(b, gs_buddy_rec_get(b), base, b->chunk_shift);
        b->nchunks++;
        return 0;
}

size_t gs_buddy_pieces(uint64_t start, uint64_t end, void (*fn)(void *ctx, uint64_t off, unsigned order), void *ctx)
{
        size_t n = 0;

        while (start < end) {
                unsigned o = start ? (unsigned)__builtin_ctzll(start) : 63u;
                while (o > GS_BUDDY_MIN_SHIFT && (o >= 63u || start + (UINT64_C(1) << o) > end))
                        o--;
                if (fn)
                        fn(ctx, start, o);
                start += UINT64_C(1) << o;
                n++;
        }
        return n;
}

struct used_ctx {
        struct gs_buddy *b;
        bool used;
};

static void add_piece(void *ctx, uint64_t off, unsigned order)
{
        struct used_ctx *u = ctx;
        struct gs_buddy *b = u->b;
        struct gs_blk *r = gs_buddy_rec_get(b);

        if (!u->used) {
                free_block_add(b, r, off, order);
                return;
        }
        r->off = off;
        r->size = UINT64_C(1) << order;
        r->kind = GS_BLK_LEGACY;
        r->order = (uint8_t)order;
        r->req = r->size;
        r->owner = NULL;
        gs_buddy_insert(b, off, r);
        b->bytes_used += r->size;
        *fill_of(b, off) += r->size;
}

int gs_buddy_add_chunk_used(struct gs_buddy *b, uint64_t base, const uint64_t *rg, size_t n)
{
        uint64_t end = base + (UINT64_C(1) << b->chunk_shift), pos = base;
        size_t need = 0;
        int r;

        for (size_t i = 0; i < n; i++) {
                need += gs_buddy_pieces(pos, rg[2 * i], NULL, NULL) +
                        gs_buddy_pieces(rg[2 * i], rg[2 * i + 1], NULL, NULL);
                pos = rg[2 * i + 1];
        }
        need += gs_buddy_pieces(pos, end, NULL, NULL);
        r = gs_buddy_reserve(b, need);
        if (r == 0)
                r = gs_buddy_reserve_chunks(b, base + 1);
        if (r < 0)
                return r;
        struct used_ctx u = { b, false };
        pos = base;
        for (size_t i = 0; i < n; i++) {
                u.used = false;
                gs_buddy_pieces(pos, rg[2 * i], add_piece, &u);
                u.used = true;
                gs_buddy_pieces(rg[2 * i], rg[2 * i + 1], add_piece, &u);
                pos = rg[2 * i + 1];
        }
        u.used = false;
        gs_buddy_pieces(pos, end, add_piece, &u);
        b->nchunks++;
        return 0;
}

struct free_ctx {
        struct gs_buddy *b;
        int r;
        uint64_t empty;
};

static void check_piece(void *ctx, uint64_t off, unsigned order)
{
        struct free_ctx *f = ctx;
        const struct gs_blk *x = gs_buddy_find(f->b, off);

        if (!x || x->kind != GS_BLK_LEGACY || x->size != UINT64_C(1) << order)
                f->r = -ENOENT;
}

static void free_piece(void *ctx, uint64_t off, unsigned order)
{
        struct free_ctx *f = ctx;
        uint64_t e = UINT64_MAX;

        (void)order;
        if (gs_buddy_free(f->b, gs_buddy_find(f->b, off), &e) < 0)
                abort(); /* reserved by the caller */
        if (e != UINT64_MAX && f->empty == UINT64_MAX)
                f->empty = e;
}

int gs_buddy_free_pieces(struct gs_buddy *b, uint64_t start, uint64_t end, uint64_t *ret_empty_base)
{
        struct free_ctx f = { b, 0, UINT64_MAX };
        size_t n = gs_buddy_pieces(start, end, check_piece, &f);

        if (f.r < 0)
                return f.r;
        f.r = gs_buddy_reserve(b, n * GS_BUDDY_OP_RECS);
        if (f.r < 0)
                return f.r;
        gs_buddy_pieces(start, end, free_piece, &f);
        *ret_empty_base = f.empty;
        return 0;
}

int gs_buddy_chunk_is_free(const struct gs_buddy *b, uint64_t base)
{
        const struct gs_blk *r = gs_buddy_find(b, base);

        return r && r->kind == GS_BLK_FREE && r->order == b->chunk_shift;
}

int gs_buddy_remove_chunk(struct gs_buddy *b, uint64_t base)
{
        struct gs_blk *r = gs_buddy_find(b, base);

        if (!r || r->kind != GS_BLK_FREE || r->order != b->chunk_shift)
                return -EBUSY;
        fl_unlink(b, r);
        gs_buddy_remove(b, base);
        gs_buddy_rec_put(b, r);
        b->nchunks--;
        b->nchunks_empty--;
        return 0;
}

/* Cuts the free block blk (order j, already off its free list) down to an
 * exact block of rs bytes at its start.  pre: records reserved. */
static void carve(struct gs_buddy *b, struct gs_blk *blk, unsigned j, uint64_t rs, uint64_t req, enum gs_blk_kind kind)
{
        unsigned o = ceil_log2(rs);

        if (j == b->chunk_shift)
                b->nchunks_empty--;
        /* Split down to order o: the upper halves go to the free lists. */
        while (j > o) {
                j--;
                free_block_add(b, gs_buddy_rec_get(b), blk->off + (UINT64_C(1) << j), j);
        }
        /* Give the tail [off + rs, off + 2^o) back, smallest piece first:
         * 2^o - rs has the same lowest set bit as rs, so each piece starts
         * aligned to its own size. */
        uint64_t pos = blk->off + rs, rem = (UINT64_C(1) << o) - rs;
        while (rem) {
                unsigned bit = (unsigned)__builtin_ctzll(rem);
                free_block_add(b, gs_buddy_rec_get(b), pos, bit);
                pos += UINT64_C(1) << bit;
                rem &= rem - 1;
        }
        blk->kind = (uint8_t)kind;
        blk->order = (uint8_t)o;
        blk->size = rs;
        /* no longer on a free list: the links' space holds req and owner */
        blk->req = req;
        blk->owner = NULL;
        b->bytes_used += rs;
        *fill_of(b, blk->off) += rs;
}

int gs_buddy_alloc(struct gs_buddy *b, uint64_t size, uint64_t req, enum gs_blk_kind kind, struct gs_blk **ret)
{
        if (size == 0 || size > (UINT64_C(1) << b->chunk_shift))
                return -EINVAL;
        uint64_t rs = gs_align_up(size, GS_MIN_ALIGN);
        uint64_t avail = b->nonempty & ~((UINT64_C(1) << ceil_log2(rs)) - 1);
        if (!avail)
                return -ENOSPC;
        int r = gs_buddy_reserve(b, GS_BUDDY_OP_RECS);
        if (r < 0)
                return r;
        /* Best fit: the smallest order that has a free block; of its
         * first few blocks, the one in the fullest chunk. */
        unsigned j = (unsigned)__builtin_ctzll(avail);
        struct gs_blk *blk = b->free_head[j];
        if (j < b->chunk_shift) {
                uint64_t best = *fill_of(b, blk->off);
                struct gs_blk *x = blk->next;
                for (unsigned n = 1; x && n < GS_BUDDY_SCAN; n++, x = x->next)
                        if (*fill_of(b, x->off) > best) {
                                best = *fill_of(b, x->off);
                                blk = x;
                        }
        }
        fl_unlink(b, blk);
        carve(b, blk, j, rs, req, kind);
        *ret = blk;
        return 0;
}

int gs_buddy_alloc_at(struct gs_buddy *b, uint64_t base, uint64_t size, enum gs_blk_kind kind, struct gs_blk **ret)
{
        if (size == 0 || size > (UINT64_C(1) << b->chunk_shift))
                return -EINVAL;
        if (!gs_buddy_chunk_is_free(b, base))
                return -EBUSY;
        int r = gs_buddy_reserve(b, GS_BUDDY_OP_RECS);
        if (r < 0)
                return r;
        struct gs_blk *blk = gs_buddy_find(b, base);
        fl_unlink(b, blk);
        carve(b, blk, b->chunk_shift, gs_align_up(size, GS_MIN_ALIGN), 0, kind);
        *ret = blk;
        return 0;
}

int gs_buddy_free(struct gs_buddy *b, struct gs_blk *blk, uint64_t *ret_empty_base)
{
        int r = gs_buddy_reserve(b, GS_BUDDY_OP_RECS);

        if (r < 0)
                return r;
        uint64_t off = blk->off, rs = blk->size;
        uint64_t empty = UINT64_MAX;

        b->bytes_used -= rs;
        *fill_of(b, off) -= rs;
        gs_buddy_remove(b, off);
        gs_buddy_rec_put(b, blk);
        /* The block is the binary decomposition of rs, largest piece first;
         * free each piece and merge it upwards with free buddies. */
        uint64_t pos = off;
        while (rs) {
                unsigned bit = 63u - (unsigned)__builtin_clzll(rs);
                uint64_t p = pos;
                unsigned ord = bit;

                pos += UINT64_C(1) << bit;
                rs &= ~(UINT64_C(1) << bit);
                while (ord < b->chunk_shift) {
                        uint64_t bo = p ^ (UINT64_C(1) << ord);
                        struct gs_blk *bd = gs_buddy_find(b, bo);

                        if (!bd || bd->kind != GS_BLK_FREE || bd->order != ord)
                                break;
                        fl_unlink(b, bd);
                        gs_buddy_remove(b, bo);
                        gs_buddy_rec_put(b, bd);
                        p &= ~(UINT64_C(1) << ord);
                        ord++;
                }
                free_block_add(b, gs_buddy_rec_get(b), p, ord);
                if (ord == b->chunk_shift)
                        empty = p;
        }
        *ret_empty_base = empty;
        return 0;
}

struct gs_blk *gs_buddy_find_containing(const struct gs_buddy *b, uint64_t off)
{
        /* A block of size s starts at a multiple of the power of two at or
         * above s, so try each aligned start from the smallest up. */
        for (unsigned o = GS_BUDDY_MIN_SHIFT; o <= b->chunk_shift; o++) {
                uint64_t base = off & ~((UINT64_C(1) << o) - 1);
                struct gs_blk *r = gs_buddy_find(b, base);

                if (r && r->kind != GS_BLK_WHOLE && off - base < r->size)
                        return r;
        }
        return NULL;
}

/* ---- validation ---- */

static int cmp_off(const void *x, const void *y)
{
        const struct gs_blk *a = *(struct gs_blk *const *)x, *c = *(struct gs_blk *const *)y;

        return a->off < c->off ? -1 : a->off > c->off;
}

#define FAIL(...)                                                     \
        do {                                                          \
                if (why && whylen)                                    \
                        snprintf(why, whylen, "buddy: " __VA_ARGS__); \
                r = -EUCLEAN;                                         \
                goto out;                                             \
        } while (0)

int gs_buddy_validate(const struct gs_buddy *b, char *why, size_t whylen)
{
        const uint64_t top = UINT64_C(1) << b->chunk_shift;
        struct gs_blk **v = NULL;
        size_t nv = 0, n = 0, nfree_rec = 0, nfree_list = 0;
        uint64_t used = 0, nempty = 0, nchunks = 0;
        int r = 0;

        if (!gs_is_pow2(b->tab_cap) || b->tab_n * 2 > b->tab_cap)
                FAIL("hash load %zu/%zu", b->tab_n, b->tab_cap);
        v = malloc((b->tab_n + 1) * sizeof(*v));
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < b->tab_cap; i++) {
                const struct gs_buddy_ent *e = &b->tab[i];
                struct gs_blk *x = e->blk;

                if (!x)
                        continue;
                n++;
                if (gs_buddy_find(b, e->key) != x)
                        FAIL("key %#llx unreachable by probing", (unsigned long long)e->key);
                if (e->key != x->off)
                        FAIL("key %#llx for block at %#llx", (unsigned long long)e->key, (unsigned long long)x->off);
                if (x->off % GS_MIN_ALIGN || x->size == 0 || x->size % GS_MIN_ALIGN)
                        FAIL("block %#llx+%#llx misaligned", (unsigned long long)x->off, (unsigned long long)x->size);
                switch (x->kind) {
                case GS_BLK_FREE:
                        nfree_rec++;
                        if (x->order < GS_BUDDY_MIN_SHIFT || x->order > b->chunk_shift ||
                            x->size != UINT64_C(1) << x->order || x->off & (x->size - 1))
                                FAIL("free block %#llx order %u bad", (unsigned long long)x->off, x->order);
                        if (x->order == b->chunk_shift) {
                                nempty++;
                        } else {
                                const struct gs_blk *bd = gs_buddy_find(b, x->off ^ x->size);
                                if (bd && bd->kind == GS_BLK_FREE && bd->order == x->order)
                                        FAIL("free buddies %#llx and %#llx not merged", (unsigned long long)x->off,
                                             (unsigned long long)bd->off);
                        }
                        break;
                case GS_BLK_LEGACY:
                        if (x->size > top || x->size != UINT64_C(1) << x->order || x->off & (x->size - 1))
                                FAIL("legacy piece %#llx+%#llx misaligned", (unsigned long long)x->off,
                                     (unsigned long long)x->size);
                        used += x->size;
                        break;
                case GS_BLK_USED:
                case GS_BLK_SLAB:
                case GS_BLK_TAIL: {
                        uint64_t al = UINT64_C(1) << ceil_log2(x->size);
                        if (x->size > top || x->off & (al - 1))
                                FAIL("block %#llx+%#llx not aligned to %#llx", (unsigned long long)x->off,
                                     (unsigned long long)x->size, (unsigned long long)al);
                        if (x->kind == GS_BLK_USED && (x->req == 0 || x->req > x->size))
                                FAIL("block %#llx req %llu size %llu", (unsigned long long)x->off,
                                     (unsigned long long)x->req, (unsigned long long)x->size);
                        if (x->kind != GS_BLK_USED && !x->owner)
                                FAIL("block %#llx without owner", (unsigned long long)x->off);
                        used += x->size;
                        break;
                }
                case GS_BLK_WHOLE:
                        if (x->off & (top - 1) || x->size & (top - 1) || !x->size)
                                FAIL("coalesced block %#llx+%#llx not whole chunks", (unsigned long long)x->off,
                                     (unsigned long long)x->size);
                        break;
                default: FAIL("record %#llx of kind %u", (unsigned long long)x->off, x->kind);
                }
                v[nv++] = x;
        }
        if (n != b->tab_n)
                FAIL("hash holds %zu entries, counter says %zu", n, b->tab_n);
        for (unsigned o = 0; o <= GS_BUDDY_MAX_SHIFT; o++) {
                const struct gs_blk *prev = NULL;
                int bit = !!(b->nonempty & (UINT64_C(1) << o));

                if (bit != !!b->free_head[o])
                        FAIL("order %u: mask bit %d, list %s", o, bit, b->free_head[o] ? "non-empty" : "empty");
                for (const struct gs_blk *x = b->free_head[o]; x; prev = x, x = x->next) {
                        if (x->kind != GS_BLK_FREE || x->order != o || x->prev != prev)
                                FAIL("free list %u broken at %#llx", o, (unsigned long long)x->off);
                        if (gs_buddy_find(b, x->off) != x)
                                FAIL("free block %#llx not in the hash", (unsigned long long)x->off);
                        if (++nfree_list > nfree_rec)
                                FAIL("free list %u longer than the free records", o);
                }
        }
        if (nfree_list != nfree_rec)
                FAIL("%zu free records, %zu on free lists", nfree_rec, nfree_list);
        /* Tiling: sorted by offset, the blocks of each chunk must cover it
         * exactly; coalesced blocks only must not overlap anything. */
        qsort(v, nv, sizeof(*v), cmp_off);
        uint64_t end = 0, pos = 0, chunk = UINT64_MAX, cused = 0, fills = 0;
        for (size_t i = 0; i <= nv; i++) {
                const struct gs_blk *x = i < nv ? v[i] : NULL;

                if (x && i && x->off < end)
                        FAIL("blocks overlap at %#llx", (unsigned long long)x->off);
                if (x && x->kind == GS_BLK_WHOLE) {
                        end = x->off + x->size;
                        continue;
                }
                if (!x || x->off / top != chunk) {
                        if (chunk != UINT64_MAX && pos != (chunk + 1) * top)
                                FAIL("chunk %#llx not tiled (ends at %#llx)", (unsigned long long)(chunk * top),
                                     (unsigned long long)pos);
                        if (chunk != UINT64_MAX && (chunk >= b->fill_cap || b->fill[chunk] != cused))
                                FAIL("chunk %#llx: %llu B used, fill says %llu", (unsigned long long)(chunk * top),
                                     (unsigned long long)cused,
                                     (unsigned long long)(chunk < b->fill_cap ? b->fill[chunk] : 0));
                        if (!x)
                                break;
                        chunk = x->off / top;
                        pos = chunk * top;
                        cused = 0;
                        nchunks++;
                }
                end = x->off + x->size;
                if (x->off != pos)
                        FAIL("hole at %#llx in chunk %#llx", (unsigned long long)pos,
                             (unsigned long long)(chunk * top));
                pos += x->size;
                cused += x->kind == GS_BLK_FREE ? 0 : x->size;
        }
        for (size_t i = 0; i < b->fill_cap; i++)
                fills += b->fill[i];
        if (fills != b->bytes_used)
                FAIL("per-chunk fill sums to %llu, %llu B used", (unsigned long long)fills,
                     (unsigned long long)b->bytes_used);
        if (nchunks != b->nchunks || nempty != b->nchunks_empty || used != b->bytes_used)
                FAIL("counters: chunks %llu/%llu empty %llu/%llu used %llu/%llu", (unsigned long long)nchunks,
                     (unsigned long long)b->nchunks, (unsigned long long)nempty, (unsigned long long)b->nchunks_empty,
                     (unsigned long long)used, (unsigned long long)b->bytes_used);
out:
        free(v);
        return r;
}
