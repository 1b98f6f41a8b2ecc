/* gs_slab.c — equal-size slots carved from buddy blocks (gs_slab.h). */
#include "gs_slab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline unsigned size_cls(uint64_t size)
{
        return (unsigned)(gs_align_up(size, GS_MIN_ALIGN) / GS_MIN_ALIGN - 1);
}

static void slab_push(struct gs_slab **head, struct gs_slab *s)
{
        s->prev = NULL;
        s->next = *head;
        if (*head)
                (*head)->prev = s;
        *head = s;
}

static void slab_unlink(struct gs_slab **head, struct gs_slab *s)
{
        if (s->prev)
                s->prev->next = s->next;
        else
                *head = s->next;
        if (s->next)
                s->next->prev = s->prev;
        s->prev = s->next = NULL;
}

static inline unsigned ceil_log2(uint64_t x)
{
        return x <= 1 ? 0 : 64u - (unsigned)__builtin_clzll(x - 1);
}

void gs_slab_init(struct gs_slab_cache *sc, struct gs_buddy *buddy)
{
        memset(sc, 0, sizeof(*sc));
        sc->buddy = buddy;
        /* The alignments slab blocks can have, for gs_slab_find. */
        sc->lo_shift = UINT32_MAX;
        for (unsigned c = 0; c < GS_SLAB_CLASSES; c++) {
                unsigned sh = ceil_log2(gs_slab_block_bytes((c + 1) * GS_MIN_ALIGN, buddy->chunk_shift));
                sc->lo_shift = sh < sc->lo_shift ? sh : sc->lo_shift;
                sc->hi_shift = sh > sc->hi_shift ? sh : sc->hi_shift;
        }
}

void gs_slab_fini(struct gs_slab_cache *sc)
{
        for (unsigned c = 0; c < GS_SLAB_CLASSES; c++) {
                struct gs_slab *lists[2] = { sc->cls[c].partial, sc->cls[c].full };
                for (int l = 0; l < 2; l++)
                        for (struct gs_slab *s = lists[l], *n; s; s = n) {
                                n = s->next;
                                free(s);
                        }
        }
        free(sc->spare);
        memset(sc, 0, sizeof(*sc));
}

uint64_t gs_slab_block_bytes(uint32_t slot, unsigned chunk_shift)
{
        /* The buddy carves blocks exactly (no power-of-two tail), so a
         * slab is exactly its slots; keeping it near GS_SLAB_BLOCK_TARGET
         * bounds what a size class with few live slots holds idle. */
        uint64_t n = GS_SLAB_BLOCK_TARGET / slot;
        uint64_t most = (UINT64_C(1) << chunk_shift) / slot;

        n = n < GS_SLAB_MIN_SLOTS ? GS_SLAB_MIN_SLOTS : n > GS_SLAB_MAX_SLOTS ? GS_SLAB_MAX_SLOTS : n;
        return (n < most ? n : most) * slot;
}

int gs_slab_wants(const struct gs_slab_cache *sc, uint64_t size)
{
        if (size == 0 || size > GS_SLAB_MAX)
                return 0;
        return sc->cls[size_cls(size)].nreq + 1 >= GS_SLAB_THRESHOLD;
}

void gs_slab_note(struct gs_slab_cache *sc, uint64_t size)
{
        if (size == 0 || size > GS_SLAB_MAX)
                return;
        struct gs_slab_class *c = &sc->cls[size_cls(size)];
        if (c->nreq < UINT32_MAX)
                c->nreq++;
}

int gs_slab_reserve(struct gs_slab_cache *sc)
{
        if (!sc->spare)
                sc->spare = malloc(sizeof(*sc->spare));
        return sc->spare ? 0 : -ENOMEM;
}

/* A new slab for class cls, from the buddy. */
static int slab_new(struct gs_slab_cache *sc, unsigned cls)
{
        uint32_t slot = (cls + 1) * GS_MIN_ALIGN;
        uint64_t bytes = gs_slab_block_bytes(slot, sc->buddy->chunk_shift);
        struct gs_blk *blk;
        int r = gs_slab_reserve(sc);

        if (r < 0)
                return r;
        r = gs_buddy_alloc(sc->buddy, bytes, 0, GS_BLK_SLAB, &blk);
        if (r < 0)
                return r;
        struct gs_slab *s = sc->spare;
        sc->spare = NULL;
        memset(s, 0, sizeof(*s));
        s->blk = blk;
        s->base = blk->off;
        s->slot = slot;
        s->nslots = s->nfree = (uint16_t)(bytes / slot);
        s->cls = (uint16_t)cls;
        for (unsigned i = 0; i < s->nslots; i++)
                s->freemask[i / 64] |= UINT64_C(1) << (i % 64);
        blk->owner = s;
        slab_push(&sc->cls[cls].partial, s);
        sc->cls[cls].nslabs++;
        sc->nslabs++;
        return 0;
}

int gs_slab_alloc(struct gs_slab_cache *sc, uint64_t size, uint64_t *ret_off)
{
        if (size == 0 || size > GS_SLAB_MAX)
                return -EINVAL;
        unsigned cls = size_cls(size);
        struct gs_slab_class *c = &sc->cls[cls];
        if (!c->partial) {
                int r = slab_new(sc, cls);
                if (r < 0)
                        return r;
        }
        /* Nothing below can fail. */
        struct gs_slab *s = c->partial;
        unsigned w = s->freemask[0] ? 0 : 1;
        unsigned i = w * 64 + (unsigned)__builtin_ctzll(s->freemask[w]);
        s->freemask[w] &= ~(UINT64_C(1) << (i % 64));
        s->req[i] = (uint8_t)(size - (s->slot - GS_MIN_ALIGN + 1u));
        if (--s->nfree == 0) {
                slab_unlink(&c->partial, s);
                slab_push(&c->full, s);
        }
        sc->slots_used++;
        *ret_off = gs_slab_slot_off(s, i);
        return 0;
}

struct gs_slab *gs_slab_find(const struct gs_slab_cache *sc, uint64_t off)
{
        /* The slab block containing off starts at off rounded down to its
         * own alignment; try each alignment a slab block can have.  At
         * most one slab block contains off, and only it passes. */
        for (unsigned sh = sc->lo_shift; sh <= sc->hi_shift; sh++) {
                uint64_t base = off & ~((UINT64_C(1) << sh) - 1);
                const struct gs_blk *x = gs_buddy_find(sc->buddy, base);

                if (x && x->kind == GS_BLK_SLAB && off - base < x->size)
                        return x->owner;
        }
        return NULL;
}

int gs_slab_slot(const struct gs_slab *s, uint64_t off, unsigned *ret_i)
{
        uint64_t i = (off - s->base) / s->slot;

        if (i >= s->nslots || s->freemask[i / 64] & (UINT64_C(1) << (i % 64)))
                return -ENOENT;
        *ret_i = (unsigned)i;
        return 0;
}

int gs_slab_free(struct gs_slab_cache *sc, struct gs_slab *s, unsigned i, uint64_t *ret_empty_base)
{
        struct gs_slab_class *c = &sc->cls[s->cls];
        int r;

        if (s->nfree + 1 == s->nslots) {
                /* The slab empties: its block goes back to the buddy, which
                 * must not fail after the slot is gone. */
                r = gs_buddy_reserve(sc->buddy, GS_BUDDY_OP_RECS);
                if (r < 0)
                        return r;
        }
        sc->slots_used--;
        s->freemask[i / 64] |= UINT64_C(1) << (i % 64);
        s->req[i] = 0;
        if (s->nfree++ == 0) {
                slab_unlink(&c->full, s);
                slab_push(&c->partial, s);
        }
        *ret_empty_base = UINT64_MAX;
        if (s->nfree < s->nslots)
                return 0;
        slab_unlink(&c->partial, s);
        c->nslabs--;
        sc->nslabs--;
        r = gs_buddy_free(sc->buddy, s->blk, ret_empty_base);
        /* cannot fail: reserved above */
        (void)r;
        if (!sc->spare)
                sc->spare = s;
        else
                free(s);
        return 0;
}

void gs_slab_usage(const struct gs_slab_cache *sc, uint64_t *ret_slots, uint64_t *ret_req, uint64_t *ret_bytes)
{
        uint64_t n = 0, req = 0, bytes = 0;

        for (unsigned c = 0; c < GS_SLAB_CLASSES; c++)
                for (int l = 0; l < 2; l++)
                        for (const struct gs_slab *s = l ? sc->cls[c].full : sc->cls[c].partial; s; s = s->next)
                                for (unsigned i = 0; i < s->nslots; i++) {
                                        if (s->freemask[i / 64] & (UINT64_C(1) << (i % 64)))
                                                continue;
                                        n++;
                                        req += gs_slab_slot_req(s, i);
                                        bytes += s->slot;
                                }
        *ret_slots = n;
        *ret_req = req;
        *ret_bytes = bytes;
}

#define FAIL(...)                                                    \
        do {                                                         \
                if (why && whylen)                                   \
                        snprintf(why, whylen, "slab: " __VA_ARGS__); \
                return -EUCLEAN;                                     \
        } while (0)

static int check_slab(const struct gs_slab_cache *sc, const struct gs_slab *s, unsigned cls, char *why, size_t whylen)
{
        unsigned nbits = 0;

        if (s->cls != cls || s->slot != (cls + 1) * GS_MIN_ALIGN)
                FAIL("slab %#llx in class %u has slot %u", (unsigned long long)s->base, cls, s->slot);
        if (!s->blk || s->blk->kind != GS_BLK_SLAB || s->blk->owner != s || s->blk->off != s->base ||
            gs_buddy_find(sc->buddy, s->base) != s->blk)
                FAIL("slab %#llx and its buddy block disagree", (unsigned long long)s->base);
        if (s->blk->size != gs_slab_block_bytes(s->slot, sc->buddy->chunk_shift) ||
            s->nslots != s->blk->size / s->slot || s->nslots > GS_SLAB_MAX_SLOTS)
                FAIL("slab %#llx: %u slots of %u in %llu B", (unsigned long long)s->base, s->nslots, s->slot,
                     (unsigned long long)s->blk->size);
        for (unsigned w = 0; w < GS_SLAB_MAX_SLOTS / 64; w++)
                nbits += (unsigned)__builtin_popcountll(s->freemask[w]);
        if (nbits != s->nfree || s->nfree >= s->nslots)
                FAIL("slab %#llx: %u free bits, nfree %u of %u", (unsigned long long)s->base, nbits, s->nfree,
                     s->nslots);
        for (unsigned i = s->nslots; i < GS_SLAB_MAX_SLOTS; i++)
                if (s->freemask[i / 64] & (UINT64_C(1) << (i % 64)))
                        FAIL("slab %#llx: bit %u past its slots", (unsigned long long)s->base, i);
        for (unsigned i = 0; i < GS_SLAB_MAX_SLOTS; i++)
                if (s->req[i] && (i >= s->nslots || s->freemask[i / 64] & (UINT64_C(1) << (i % 64))))
                        FAIL("slab %#llx: free slot %u has a size", (unsigned long long)s->base, i);
        unsigned sh = ceil_log2(s->blk->size);
        if (sh < sc->lo_shift || sh > sc->hi_shift || gs_slab_find(sc, s->base + s->blk->size - 1) != s)
                FAIL("slab %#llx (%llu B) not found by its offsets", (unsigned long long)s->base,
                     (unsigned long long)s->blk->size);
        return 0;
}

int gs_slab_validate(const struct gs_slab_cache *sc, char *why, size_t whylen)
{
        uint64_t nslabs = 0, used = 0, nslab_blks = 0;
        int r;

        for (unsigned c = 0; c < GS_SLAB_CLASSES; c++) {
                const struct gs_slab_class *k = &sc->cls[c];
                uint32_t n = 0;

                for (int l = 0; l < 2; l++) {
                        const struct gs_slab *prev = NULL;
                        for (const struct gs_slab *s = l ? k->full : k->partial; s; prev = s, s = s->next) {
                                if (s->prev != prev || ++n > k->nslabs)
                                        FAIL("class %u list broken", c);
                                r = check_slab(sc, s, c, why, whylen);
                                if (r < 0)
                                        return r;
                                if ((s->nfree == 0) != l)
                                        FAIL("slab %#llx with %u free on the %s list", (unsigned long long)s->base,
                                             s->nfree, l ? "full" : "partial");
                                used += s->nslots - s->nfree;
                        }
                }
                if (n != k->nslabs)
                        FAIL("class %u: %u slabs listed, counter %u", c, n, k->nslabs);
                nslabs += n;
        }
        if (nslabs != sc->nslabs || used != sc->slots_used)
                FAIL("counters: slabs %llu/%llu slots %llu/%llu", (unsigned long long)nslabs,
                     (unsigned long long)sc->nslabs, (unsigned long long)used, (unsigned long long)sc->slots_used);
        const struct gs_buddy *b = sc->buddy;
        for (size_t i = 0; i < b->tab_cap; i++) {
                const struct gs_blk *x = b->tab[i].blk;
                if (x && x->kind == GS_BLK_SLAB)
                        nslab_blks++;
        }
        if (nslab_blks != nslabs)
                FAIL("%llu slab blocks for %llu slabs", (unsigned long long)nslab_blks, (unsigned long long)nslabs);
        return 0;
}
