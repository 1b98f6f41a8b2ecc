/* gs_gsm_validate.c — the chunk level's lists, states, owners, slot maps
 * and counters checked against each other (gs_gsm.h). */
#include "gs_gsm.h"

#include <stdio.h>

static uint32_t *lprev(struct gs_gsm_chunk *c, int which)
{
        return gs_gsm_lprev(c, which);
}
static uint32_t *lnext(struct gs_gsm_chunk *c, int which)
{
        return gs_gsm_lnext(c, which);
}

/* ---- validation ---- */

#define FAIL(...)                                                   \
        do {                                                        \
                if (why && whylen)                                  \
                        snprintf(why, whylen, "gsm: " __VA_ARGS__); \
                return -EUCLEAN;                                    \
        } while (0)

/* Walks a list checking links, state and length; returns its length or
 * UINT32_MAX on a broken link. */
static uint32_t walk(const struct gs_gsm *g, const struct gs_gsm_list *l, int which)
{
        uint32_t n = 0, prev = GS_GSM_NONE;

        for (uint32_t id = l->head; id != GS_GSM_NONE;) {
                if (id >= g->nchunks || n++ > g->nchunks)
                        return UINT32_MAX;
                struct gs_gsm_chunk *c = &g->chunks[id];
                if (*lprev(c, which) != prev)
                        return UINT32_MAX;
                prev = id;
                id = *lnext(c, which);
        }
        return prev == l->tail ? n : UINT32_MAX;
}

int gs_gsm_validate(const struct gs_gsm *g, char *why, size_t whylen)
{
        uint32_t nstate[GS_GSM_HELD + 1] = { 0 }, nborrowed = 0;
        uint32_t reserved = 0, borrowed = 0, nallocs = 0, own = 0, held = 0, owed = 0, nspilled = 0;

        for (uint32_t i = 0; i < g->nchunks; i++) {
                const struct gs_gsm_chunk *c = &g->chunks[i];
                if (c->state < GS_GSM_SYS || c->state > GS_GSM_HELD)
                        FAIL("chunk %u in state %u", i, c->state);
                nstate[c->state]++;
                nborrowed += c->borrowed;
                if (i >= g->nreal && c->state != GS_GSM_RETIRED && !(c->state == GS_GSM_HELD && c->borrowed))
                        FAIL("spare %u in state %u, borrowed %u", i, c->state, c->borrowed);
                nspilled += i >= g->nreal && c->state == GS_GSM_HELD;
                if (c->borrowed && c->state != GS_GSM_HELD)
                        FAIL("chunk %u borrowed but not held", i);
                if ((c->state == GS_GSM_SYS || c->state == GS_GSM_RETIRED) &&
                    (c->alloc || c->proc || c->granted || c->dirty))
                        FAIL("free chunk %u still owned or dirty", i);
                if (c->last && (c->state != GS_GSM_OWN || !c->dirty))
                        FAIL("chunk %u in state %u (dirty %u) has a last holder", i, c->state, c->dirty);
        }
        if (walk(g, &g->sys, 0) != g->sys.count || nstate[GS_GSM_SYS] != g->sys.count)
                FAIL("system list: %u on it, %u in state", g->sys.count, nstate[GS_GSM_SYS]);
        for (uint32_t id = g->sys.head; id != GS_GSM_NONE; id = g->chunks[id].next)
                if (g->chunks[id].state != GS_GSM_SYS)
                        FAIL("chunk %u on the system list in state %u", id, g->chunks[id].state);
        if (nstate[GS_GSM_RETIRED] != g->nretired)
                FAIL("%u retired, counter %u", nstate[GS_GSM_RETIRED], g->nretired);
        for (const struct gs_gsm_alloc *a = g->allocs; a; a = a->next) {
                uint32_t nprocs = 0, aheld = 0;

                if (++nallocs > g->nallocs || a->gsm != g || (a->next && a->next->prev != a))
                        FAIL("allocation list broken");
                reserved += a->quota;
                borrowed += a->borrowed.count;
                own += a->own.count;
                if (walk(g, &a->own, 0) != a->own.count || walk(g, &a->borrowed, 1) != a->borrowed.count)
                        FAIL("allocation lists broken");
                uint32_t withlast = 0, inmine = 0;
                bool dirty_seen = false;
                for (uint32_t id = a->own.head; id != GS_GSM_NONE; id = g->chunks[id].next) {
                        const struct gs_gsm_chunk *c = &g->chunks[id];
                        if (c->state != GS_GSM_OWN || c->alloc != a)
                                FAIL("chunk %u on a free list not its allocation's", id);
                        if (dirty_seen && !c->dirty)
                                FAIL("clean chunk %u after a dirty one on a free list", id);
                        dirty_seen |= c->dirty != 0;
                        withlast += c->last != NULL;
                }
                for (uint32_t id = a->borrowed.head; id != GS_GSM_NONE; id = g->chunks[id].bnext)
                        if (!g->chunks[id].borrowed || g->chunks[id].alloc != a)
                                FAIL("chunk %u on a borrowed list but not borrowed by it", id);
                if (a->borrowed.count > a->cap + a->over)
                        FAIL("allocation borrowed %u over its cap %u", a->borrowed.count, a->cap);
                if (a->own.count + a->held + a->owed != a->quota + a->borrowed.count)
                        FAIL("allocation: free %u + held %u + owed %u != quota %u + borrowed %u", a->own.count, a->held,
                             a->owed, a->quota, a->borrowed.count);
                owed += a->owed;
                uint32_t aspilled = 0;
                for (uint32_t id = a->borrowed.head; id != GS_GSM_NONE && id < g->nchunks; id = g->chunks[id].bnext)
                        aspilled += id >= g->nreal;
                if (aspilled != a->spilled)
                        FAIL("allocation holds %u spares, counter %u", aspilled, a->spilled);
                if (a->wants > a->owed)
                        FAIL("allocation wants %u of the %u chunks it is owed", a->wants, a->owed);
                for (const struct gs_gsm_proc *p = a->procs; p; p = p->next) {
                        uint32_t inmap = 0;

                        if (++nprocs > a->nprocs || p->alloc != a || (p->next && p->next->prev != p))
                                FAIL("process list broken");
                        if (walk(g, &p->held, 0) != p->held.count)
                                FAIL("process held list broken");
                        if (walk(g, &p->mine, 1) != p->mine.count)
                                FAIL("process's list of dirty chunks broken");
                        inmine += p->mine.count;
                        for (uint32_t id = p->mine.head; id != GS_GSM_NONE; id = g->chunks[id].bnext) {
                                const struct gs_gsm_chunk *c = &g->chunks[id];
                                if (c->state != GS_GSM_OWN || c->alloc != a || c->last != p || !c->dirty)
                                        FAIL("chunk %u on a process's dirty list: state %u, not its", id, c->state);
                        }
                        aheld += p->held.count;
                        for (uint32_t id = p->held.head; id != GS_GSM_NONE; id = g->chunks[id].next) {
                                const struct gs_gsm_chunk *c = &g->chunks[id];
                                if (c->state != GS_GSM_HELD || c->proc != p || c->alloc != a || c->slot >= p->nslots ||
                                    gs_gsm_slot_chunk(p, c->slot) != id)
                                        FAIL("held chunk %u (slot %u) inconsistent", id, c->slot);
                        }
                        for (uint32_t s = 0; s < p->slots_cap; s++) {
                                if (p->slots[s] == GS_GSM_NONE)
                                        continue;
                                inmap++;
                                if (p->slots[s] >= g->nchunks || g->chunks[p->slots[s]].proc != p)
                                        FAIL("slot %u maps chunk %u not held", s, p->slots[s]);
                        }
                        if (inmap != p->held.count)
                                FAIL("slot map has %u chunks, held list %u", inmap, p->held.count);
                        for (uint32_t s = 0; s < p->lo_free && s < p->nslots; s++)
                                if (gs_gsm_slot_chunk(p, s) == GS_GSM_NONE)
                                        FAIL("slot %u free below lo_free %u", s, p->lo_free);
                }
                if (inmine != withlast)
                        FAIL("allocation: %u dirty chunks on processes' lists, %u with a last holder", inmine,
                             withlast);
                if (nprocs != a->nprocs || aheld != a->held)
                        FAIL("allocation: %u procs holding %u, counters %u/%u", nprocs, aheld, a->nprocs, a->held);
                held += aheld;
        }
        if (nallocs != g->nallocs || reserved != g->reserved || borrowed != g->borrowed || borrowed != nborrowed)
                FAIL("pool counters: allocs %u/%u reserved %u/%u borrowed %u/%u/%u", nallocs, g->nallocs, reserved,
                     g->reserved, borrowed, g->borrowed, nborrowed);
        if (own != nstate[GS_GSM_OWN] || held != nstate[GS_GSM_HELD])
                FAIL("own %u/%u held %u/%u", own, nstate[GS_GSM_OWN], held, nstate[GS_GSM_HELD]);
        if (owed != g->owed)
                FAIL("owed %u, counter %u", owed, g->owed);
        if (nspilled != g->spilled)
                FAIL("%u spares held, counter %u", nspilled, g->spilled);
        if (g->owed && g->sys.count)
                FAIL("%u chunks on the system list while %u are owed", g->sys.count, g->owed);
        /* Owed chunks are reserved and, out on loan, borrowed: once each. */
        if (g->sys.count + g->reserved - g->owed + g->borrowed != gs_gsm_usable(g))
                FAIL("free %u + reserved %u - owed %u + borrowed %u != usable %u", g->sys.count, g->reserved, g->owed,
                     g->borrowed, gs_gsm_usable(g));
        return 0;
}
