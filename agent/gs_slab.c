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

void gs_slab_init(struct gs_slab_cache *sc, struct gs_buddy *buddy)
{
        memset(sc, 0, sizeof(*sc));
        sc->buddy = buddy;
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
        uint64_t want = (uint64_t)slot * GS_SLAB_MIN_SLOTS;
        uint64_t bytes = UINT64_C(1) << (64 - __builtin_clzll(want - 1));

        return bytes > (UINT64_C(1) << chunk_shift) ? UINT64_C(1) << chunk_shift : bytes;
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

/* A new slab for class cls, from the buddy.  pre: records reserved. */
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

int gs_slab_alloc(struct gs_slab_cache *sc, uint64_t size, struct gs_blk **ret)
{
        if (size == 0 || size > GS_SLAB_MAX)
                return -EINVAL;
        unsigned cls = size_cls(size);
        struct gs_slab_class *c = &sc->cls[cls];
        /* Reserve first: a new slab and the slot's record must not fail
         * half way. */
        int r = gs_buddy_reserve(sc->buddy, GS_BUDDY_OP_RECS + 1);
        if (r < 0)
                return r;
        if (!c->partial) {
                r = slab_new(sc, cls);
                if (r < 0)
                        return r;
        }
        struct gs_slab *s = c->partial;
        unsigned w = s->freemask[0] ? 0 : 1;
        unsigned i = w * 64 + (unsigned)__builtin_ctzll(s->freemask[w]);
        s->freemask[w] &= ~(UINT64_C(1) << (i % 64));
        if (--s->nfree == 0) {
                slab_unlink(&c->partial, s);
                slab_push(&c->full, s);
        }
        struct gs_blk *x = gs_buddy_rec_get(sc->buddy);
        x->off = s->base + (uint64_t)i * s->slot;
        x->size = s->slot;
        x->req = size;
        x->owner = s;
        x->kind = GS_BLK_SLOT;
        gs_buddy_insert(sc->buddy, x->off | GS_BLK_KEY_SLOT, x);
        sc->slots_used++;
        *ret = x;
        return 0;
}

int gs_slab_free(struct gs_slab_cache *sc, struct gs_blk *x, uint64_t *ret_empty_base)
{
        struct gs_slab *s = x->owner;
        struct gs_slab_class *c = &sc->cls[s->cls];
        unsigned i = (unsigned)((x->off - s->base) / s->slot);
        int r;

        if (s->nfree + 1 == s->nslots) {
                /* The slab empties: its block goes back to the buddy, which
                 * must not fail after the slot is gone. */
                r = gs_buddy_reserve(sc->buddy, GS_BUDDY_OP_RECS);
                if (r < 0)
                        return r;
        }
        gs_buddy_remove(sc->buddy, x->off | GS_BLK_KEY_SLOT);
        gs_buddy_rec_put(sc->buddy, x);
        sc->slots_used--;
        s->freemask[i / 64] |= UINT64_C(1) << (i % 64);
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

#define FAIL(...)                                                     \
        do {                                                          \
                if (why && whylen)                                    \
                        snprintf(why, whylen, "slab: " __VA_ARGS__);  \
                return -EUCLEAN;                                      \
        } while (0)

static int check_slab(const struct gs_slab_cache *sc, const struct gs_slab *s, unsigned cls,
                      char *why, size_t whylen)
{
        unsigned nbits = 0;

        if (s->cls != cls || s->slot != (cls + 1) * GS_MIN_ALIGN)
                FAIL("slab %#llx in class %u has slot %u", (unsigned long long)s->base, cls, s->slot);
        if (!s->blk || s->blk->kind != GS_BLK_SLAB || s->blk->owner != s || s->blk->off != s->base ||
            gs_buddy_find(sc->buddy, s->base) != s->blk)
                FAIL("slab %#llx and its buddy block disagree", (unsigned long long)s->base);
        if (s->blk->size != gs_slab_block_bytes(s->slot, sc->buddy->chunk_shift) ||
            s->nslots != s->blk->size / s->slot || s->nslots > GS_SLAB_MAX_SLOTS)
                FAIL("slab %#llx: %u slots of %u in %llu B", (unsigned long long)s->base, s->nslots,
                     s->slot, (unsigned long long)s->blk->size);
        for (unsigned w = 0; w < GS_SLAB_MAX_SLOTS / 64; w++)
                nbits += (unsigned)__builtin_popcountll(s->freemask[w]);
        if (nbits != s->nfree || s->nfree >= s->nslots)
                FAIL("slab %#llx: %u free bits, nfree %u of %u", (unsigned long long)s->base, nbits,
                     s->nfree, s->nslots);
        for (unsigned i = s->nslots; i < GS_SLAB_MAX_SLOTS; i++)
                if (s->freemask[i / 64] & (UINT64_C(1) << (i % 64)))
                        FAIL("slab %#llx: bit %u past its slots", (unsigned long long)s->base, i);
        return 0;
}

int gs_slab_validate(const struct gs_slab_cache *sc, char *why, size_t whylen)
{
        uint64_t nslabs = 0, used = 0, nslot_recs = 0, nslab_blks = 0;
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
                                        FAIL("slab %#llx with %u free on the %s list",
                                             (unsigned long long)s->base, s->nfree,
                                             l ? "full" : "partial");
                                used += s->nslots - s->nfree;
                        }
                }
                if (n != k->nslabs)
                        FAIL("class %u: %u slabs listed, counter %u", c, n, k->nslabs);
                nslabs += n;
        }
        if (nslabs != sc->nslabs || used != sc->slots_used)
                FAIL("counters: slabs %llu/%llu slots %llu/%llu", (unsigned long long)nslabs,
                     (unsigned long long)sc->nslabs, (unsigned long long)used,
                     (unsigned long long)sc->slots_used);
        const struct gs_buddy *b = sc->buddy;
        for (size_t i = 0; i < b->tab_cap; i++) {
                const struct gs_blk *x = b->tab[i].blk;
                if (!x)
                        continue;
                if (x->kind == GS_BLK_SLAB) {
                        nslab_blks++;
                        continue;
                }
                if (x->kind != GS_BLK_SLOT)
                        continue;
                nslot_recs++;
                const struct gs_slab *s = x->owner;
                /* the owner must be a live slab: its block says so */
                if (!s || gs_buddy_find(b, s->base) != s->blk || s->blk->owner != s)
                        FAIL("slot %#llx of no slab", (unsigned long long)x->off);
                uint64_t d = x->off - s->base;
                if (x->off < s->base || d % s->slot || d / s->slot >= s->nslots || x->size != s->slot ||
                    x->req == 0 || x->req > x->size)
                        FAIL("slot %#llx does not fit slab %#llx", (unsigned long long)x->off,
                             (unsigned long long)s->base);
                unsigned k = (unsigned)(d / s->slot);
                if (s->freemask[k / 64] & (UINT64_C(1) << (k % 64)))
                        FAIL("slot %#llx live but marked free", (unsigned long long)x->off);
        }
        if (nslot_recs != used || nslab_blks != nslabs)
                FAIL("%llu slot records for %llu used slots, %llu slab blocks for %llu slabs",
                     (unsigned long long)nslot_recs, (unsigned long long)used,
                     (unsigned long long)nslab_blks, (unsigned long long)nslabs);
        return 0;
}
