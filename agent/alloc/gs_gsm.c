/* gs_gsm.c — chunks, the system list, allocations' and processes' lists
 * (gs_gsm.h). */
#include "gs_gsm.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- index lists: prev/next (which == 0) or bprev/bnext (which == 1) ---- */

static uint32_t *lprev(struct gs_gsm_chunk *c, int which)
{
        return gs_gsm_lprev(c, which);
}
static uint32_t *lnext(struct gs_gsm_chunk *c, int which)
{
        return gs_gsm_lnext(c, which);
}

static void list_push(struct gs_gsm_chunk *cs, struct gs_gsm_list *l, uint32_t id, int which)
{
        *lprev(&cs[id], which) = GS_GSM_NONE;
        *lnext(&cs[id], which) = l->head;
        if (l->head != GS_GSM_NONE)
                *lprev(&cs[l->head], which) = id;
        else
                l->tail = id;
        l->head = id;
        l->count++;
}

static void list_push_tail(struct gs_gsm_chunk *cs, struct gs_gsm_list *l, uint32_t id, int which)
{
        *lnext(&cs[id], which) = GS_GSM_NONE;
        *lprev(&cs[id], which) = l->tail;
        if (l->tail != GS_GSM_NONE)
                *lnext(&cs[l->tail], which) = id;
        else
                l->head = id;
        l->tail = id;
        l->count++;
}

static void list_unlink(struct gs_gsm_chunk *cs, struct gs_gsm_list *l, uint32_t id, int which)
{
        uint32_t p = *lprev(&cs[id], which), n = *lnext(&cs[id], which);

        if (p != GS_GSM_NONE)
                *lnext(&cs[p], which) = n;
        else
                l->head = n;
        if (n != GS_GSM_NONE)
                *lprev(&cs[n], which) = p;
        else
                l->tail = p;
        *lprev(&cs[id], which) = *lnext(&cs[id], which) = GS_GSM_NONE;
        l->count--;
}

static uint32_t list_pop(struct gs_gsm_chunk *cs, struct gs_gsm_list *l)
{
        uint32_t id = l->head;

        list_unlink(cs, l, id, 0);
        return id;
}

static void list_init(struct gs_gsm_list *l)
{
        l->head = l->tail = GS_GSM_NONE;
        l->count = 0;
}

static void kick(struct gs_gsm *g)
{
        if (g->kick_fn)
                g->kick_fn(g->kick_ctx);
}

/* A dirty chunk on an allocation's free list leaves its last holder's. */
static void forget_last(struct gs_gsm *g, uint32_t id)
{
        struct gs_gsm_chunk *c = &g->chunks[id];

        if (c->last) {
                list_unlink(g->chunks, &c->last->mine, id, 1);
                c->last = NULL;
        }
}

/* A chunk arrives on the system list.  If a process had it, the agent
 * must recycle its memory first (the process may have kept its fd). */
static void to_sys(struct gs_gsm *g, uint32_t id)
{
        struct gs_gsm_chunk *c = &g->chunks[id];
        int r = 0;

        c->alloc = NULL;
        c->proc = NULL;
        c->user = NULL;
        c->borrowed = 0;
        c->slot = GS_GSM_NONE;
        /* Made anew by the return callback if a process had it. */
        c->dirty = 0;
        if (c->granted && g->return_fn)
                r = g->return_fn(g->return_ctx, id);
        c->granted = 0;
        if (r < 0) {
                c->state = GS_GSM_RETIRED;
                g->nretired++;
                return;
        }
        c->state = GS_GSM_SYS;
        list_push(g->chunks, &g->sys, id, 0);
}

/* Chunks on the system list go to allocations owed some: first to those
 * whose processes asked for memory they did not get (wants), then the
 * oldest first (the list has the newest at its head). */
static void repay(struct gs_gsm *g, struct gs_gsm_alloc *a)
{
        uint32_t id = list_pop(g->chunks, &g->sys);

        g->chunks[id].state = GS_GSM_OWN;
        g->chunks[id].alloc = a;
        list_push(g->chunks, &a->own, id, 0);
        a->owed--;
        g->owed--;
        if (a->wants)
                a->wants--;
        /* Memory came back to it: a request that failed a moment ago may
         * succeed now (gs_palloc_returned). */
        __atomic_add_fetch(&a->returned, 1, __ATOMIC_RELEASE);
}

static void repay_owed(struct gs_gsm *g)
{
        struct gs_gsm_alloc *a = g->allocs, *last = NULL;

        if (!g->owed || !g->sys.count || !a)
                return;
        for (; a; a = a->next) {
                last = a;
                while (a->wants && a->owed && g->sys.count)
                        repay(g, a);
        }
        for (a = last; a && g->owed && g->sys.count; a = a->prev)
                while (a->owed && g->sys.count)
                        repay(g, a);
}

/* What the system list may lend: what no allocation is owed. */
static uint32_t lendable(const struct gs_gsm *g)
{
        return g->sys.count > g->owed ? g->sys.count - g->owed : 0;
}

/* With lend_owned: the allocation other than a with the most free chunks
 * (clean ones lead its list; a dirty one is zeroed before another process
 * gets it, as any), or NULL. */
static struct gs_gsm_alloc *idle_owner(const struct gs_gsm *g, const struct gs_gsm_alloc *a)
{
        struct gs_gsm_alloc *best = NULL;

        if (!g->lend_owned)
                return NULL;
        for (struct gs_gsm_alloc *o = g->allocs; o; o = o->next)
                if (o != a && o->own.count && (!best || o->own.count > best->own.count))
                        best = o;
        return best;
}

/* A restarted agent's adoption (force) that finds the system list
 * empty: an allocation other than a owed chunks before the restart with
 * a free one, else the idle owner; NULL. */
static struct gs_gsm_alloc *adopt_owner(const struct gs_gsm *g, const struct gs_gsm_alloc *a)
{
        for (struct gs_gsm_alloc *o = g->allocs; o; o = o->next)
                if (o != a && o->lent_before && o->own.count)
                        return o;
        return idle_owner(g, a);
}

/* Free chunks of allocations other than a. */
static uint32_t idle_free(const struct gs_gsm *g, const struct gs_gsm_alloc *a)
{
        uint32_t n = 0;

        if (!g->lend_owned)
                return 0;
        for (const struct gs_gsm_alloc *o = g->allocs; o; o = o->next)
                n += o == a ? 0 : o->own.count;
        return n;
}

int gs_gsm_init(struct gs_gsm *g, uint32_t nchunks, uint64_t chunk_bytes)
{
        memset(g, 0, sizeof(*g));
        if (nchunks == 0 || nchunks == GS_GSM_NONE || !gs_is_pow2(chunk_bytes) || chunk_bytes < (UINT64_C(1) << 16) ||
            chunk_bytes > (UINT64_C(1) << 47))
                return -EINVAL;
        g->chunks = calloc(nchunks, sizeof(*g->chunks));
        if (!g->chunks)
                return -ENOMEM;
        g->nchunks = nchunks;
        g->nreal = nchunks;
        g->chunk_shift = (unsigned)__builtin_ctzll(chunk_bytes);
        list_init(&g->sys);
        /* Pushed in reverse so the list hands out chunk 0 first. */
        for (uint32_t i = nchunks; i-- > 0;) {
                g->chunks[i].state = GS_GSM_SYS;
                g->chunks[i].slot = GS_GSM_NONE;
                g->chunks[i].bprev = g->chunks[i].bnext = GS_GSM_NONE;
                list_push(g->chunks, &g->sys, i, 0);
        }
        return 0;
}

void gs_gsm_fini(struct gs_gsm *g)
{
        free(g->chunks);
        memset(g, 0, sizeof(*g));
}

int gs_gsm_retire(struct gs_gsm *g, uint32_t chunk)
{
        if (chunk >= g->nchunks)
                return -EINVAL;
        if (g->chunks[chunk].state != GS_GSM_SYS)
                return -EBUSY;
        list_unlink(g->chunks, &g->sys, chunk, 0);
        g->chunks[chunk].state = GS_GSM_RETIRED;
        g->nretired++;
        return 0;
}

int gs_gsm_unretire(struct gs_gsm *g, uint32_t chunk)
{
        if (chunk >= g->nchunks)
                return -EINVAL;
        if (g->chunks[chunk].state != GS_GSM_RETIRED)
                return -EBUSY;
        g->chunks[chunk].state = GS_GSM_SYS;
        g->chunks[chunk].granted = 0;
        g->chunks[chunk].dirty = 0;
        list_push(g->chunks, &g->sys, chunk, 0);
        g->nretired--;
        repay_owed(g);
        return 0;
}

int gs_gsm_alloc_init(struct gs_gsm *g, struct gs_gsm_alloc *a, uint32_t quota, uint32_t cap)
{
        uint32_t take_now;

        if (quota == 0)
                return -EINVAL;
        /* Lent chunks not owed to another allocation yet count: they
         * come back as their borrowers give them back. */
        if (quota > lendable(g) + (g->lend_owned && g->borrowed > g->owed ? g->borrowed - g->owed : 0))
                return -ENOSPC;
        take_now = quota < lendable(g) ? quota : lendable(g);
        memset(a, 0, sizeof(*a));
        a->gsm = g;
        a->quota = quota;
        a->cap = cap;
        a->owed = quota - take_now;
        g->owed += a->owed;
        list_init(&a->own);
        list_init(&a->borrowed);
        for (uint32_t i = 0; i < take_now; i++) {
                uint32_t id = list_pop(g->chunks, &g->sys);
                g->chunks[id].state = GS_GSM_OWN;
                g->chunks[id].alloc = a;
                list_push(g->chunks, &a->own, id, 0);
        }
        g->reserved += quota;
        a->next = g->allocs;
        if (g->allocs)
                g->allocs->prev = a;
        g->allocs = a;
        g->nallocs++;
        return 0;
}

int gs_gsm_alloc_fini(struct gs_gsm_alloc *a)
{
        struct gs_gsm *g = a->gsm;

        if (a->nprocs)
                return -EBUSY;
        while (a->own.count)
                to_sys(g, list_pop(g->chunks, &a->own));
        g->owed -= a->owed;
        g->reserved -= a->quota;
        if (a->prev)
                a->prev->next = a->next;
        else
                g->allocs = a->next;
        if (a->next)
                a->next->prev = a->prev;
        g->nallocs--;
        memset(a, 0, sizeof(*a));
        repay_owed(g);
        return 0;
}

uint32_t gs_gsm_alloc_obtainable(const struct gs_gsm_alloc *a)
{
        uint32_t out = a->borrowed.count + a->debt;
        uint32_t can_borrow = out < a->cap ? a->cap - out : 0;

        uint32_t lend = lendable(a->gsm);

        if (can_borrow > lend)
                lend += idle_free(a->gsm, a);
        if (can_borrow > lend)
                can_borrow = lend;
        return a->own.count + can_borrow;
}

int gs_gsm_proc_init(struct gs_gsm_alloc *a, struct gs_gsm_proc *p, uint32_t nslots)
{
        if (nslots == 0 || nslots > GS_GSM_MAX_SLOTS)
                return -EINVAL;
        memset(p, 0, sizeof(*p));
        p->alloc = a;
        p->nslots = nslots;
        list_init(&p->held);
        list_init(&p->mine);
        p->next = a->procs;
        if (a->procs)
                a->procs->prev = p;
        a->procs = p;
        a->nprocs++;
        return 0;
}

void gs_gsm_proc_fini(struct gs_gsm_proc *p)
{
        struct gs_gsm_alloc *a = p->alloc;

        if (!a)
                return;
        while (p->held.count)
                gs_gsm_put(p, a->gsm->chunks[p->held.head].slot);
        /* What it gave back dirty is anyone's now: zeroed before another
         * process gets it. */
        bool orphans = p->mine.count != 0;
        while (p->mine.count)
                forget_last(a->gsm, p->mine.head);
        if (orphans)
                kick(a->gsm);
        if (p->prev)
                p->prev->next = p->next;
        else
                a->procs = p->next;
        if (p->next)
                p->next->prev = p->prev;
        a->nprocs--;
        free(p->slots);
        memset(p, 0, sizeof(*p));
}

static int slots_grow(struct gs_gsm_proc *p, uint32_t need)
{
        if (need <= p->slots_cap)
                return 0;
        uint32_t cap = p->slots_cap ? p->slots_cap : 16;
        while (cap < need)
                cap *= 2;
        if (cap > p->nslots)
                cap = p->nslots;
        uint32_t *s = realloc(p->slots, (size_t)cap * sizeof(*s));
        if (!s)
                return -ENOMEM;
        for (uint32_t i = p->slots_cap; i < cap; i++)
                s[i] = GS_GSM_NONE;
        p->slots = s;
        p->slots_cap = cap;
        return 0;
}

int gs_gsm_find_slots(struct gs_gsm_proc *p, uint32_t k, uint32_t *ret_first)
{
        uint32_t run = 0, first = p->lo_free;

        if (k == 0 || k > p->nslots)
                return -ENOSPC;
        for (uint32_t s = p->lo_free; s < p->nslots; s++) {
                if (gs_gsm_slot_chunk(p, s) != GS_GSM_NONE) {
                        run = 0;
                        first = s + 1;
                        continue;
                }
                if (++run == k)
                        break;
                if (s >= p->slots_cap) {
                        /* past the stored map every slot is free */
                        run = k;
                        break;
                }
        }
        if (run < k || (uint64_t)first + k > p->nslots)
                return -ENOSPC;
        int r = slots_grow(p, first + k);
        if (r < 0)
                return r;
        *ret_first = first;
        return 0;
}

static int take(struct gs_gsm_proc *p, uint32_t slot, bool force, uint32_t *ret_chunk)
{
        struct gs_gsm_alloc *a = p->alloc;
        struct gs_gsm *g = a->gsm;
        uint32_t id;

        if (p->mine.count) {
                /* Its own data back: nothing to zero. */
                id = p->mine.head;
                forget_last(g, id);
                list_unlink(g->chunks, &a->own, id, 0);
        } else if (a->own.count) {
                /* Clean first (they lead the list), else the oldest dirty. */
                id = list_pop(g->chunks, &a->own);
                forget_last(g, id);
                if (a->own.count && g->chunks[a->own.tail].dirty)
                        kick(g); /* one clean chunk fewer: zero the next */
        } else if ((force || a->borrowed.count + a->debt < a->cap) &&
                   ((force ? g->sys.count : lendable(g)) || (force ? adopt_owner(g, a) : idle_owner(g, a)))) {
                if (a->borrowed.count + a->debt >= a->cap)
                        a->over++; /* held already: past the cap for now */
                if (force ? g->sys.count != 0 : lendable(g) != 0) {
                        id = list_pop(g->chunks, &g->sys);
                } else {
                        /* A clean chunk another allocation does not use:
                         * it is owed it from now on (gs_gsm.h); after a
                         * restart, one that was owed it before first. */
                        struct gs_gsm_alloc *o = force ? adopt_owner(g, a) : idle_owner(g, a);
                        if (o->lent_before)
                                o->lent_before--;
                        id = list_pop(g->chunks, &o->own);
                        forget_last(g, id);
                        o->owed++;
                        g->owed++;
                        kick(g);
                }
                g->chunks[id].borrowed = 1;
                list_push(g->chunks, &a->borrowed, id, 1);
                g->borrowed++;
        } else {
                return -ENOMEM;
        }
        struct gs_gsm_chunk *c = &g->chunks[id];
        c->state = GS_GSM_HELD;
        c->alloc = a;
        c->proc = p;
        c->slot = slot;
        c->granted = 1;
        c->dirty = 1;
        c->user = NULL;
        list_push(g->chunks, &p->held, id, 0);
        p->slots[slot] = id;
        if (slot == p->lo_free)
                while (p->lo_free < p->nslots && gs_gsm_slot_chunk(p, p->lo_free) != GS_GSM_NONE)
                        p->lo_free++;
        a->held++;
        if (g->hold_fn && p->tag)
                g->hold_fn(g->hold_ctx, id, p->tag, slot, 1);
        *ret_chunk = id;
        return 0;
}

int gs_gsm_take(struct gs_gsm_proc *p, uint32_t slot, uint32_t *ret_chunk)
{
        return take(p, slot, false, ret_chunk);
}

int gs_gsm_take_at(struct gs_gsm_proc *p, uint32_t slot, uint32_t *ret_chunk)
{
        if (slot >= p->nslots || gs_gsm_slot_chunk(p, slot) != GS_GSM_NONE)
                return -EBUSY;
        int r = slots_grow(p, slot + 1);
        if (r < 0)
                return r;
        r = take(p, slot, true, ret_chunk);
        return r == -ENOMEM ? -ENOSPC : r;
}

void gs_gsm_alloc_lent_before(struct gs_gsm_alloc *a, uint32_t n)
{
        a->lent_before = n;
}

void gs_gsm_adopted(struct gs_gsm *g)
{
        for (struct gs_gsm_alloc *a = g->allocs; a; a = a->next)
                a->lent_before = 0;
}

int gs_gsm_adopt_spare(struct gs_gsm_proc *p, uint32_t slot, uint32_t spare)
{
        struct gs_gsm_alloc *a = p->alloc;
        struct gs_gsm *g = a->gsm;
        int r;

        if (slot >= p->nslots || gs_gsm_slot_chunk(p, slot) != GS_GSM_NONE)
                return -EBUSY;
        if (spare < g->nreal || spare >= g->nchunks || g->chunks[spare].state != GS_GSM_RETIRED)
                return -EINVAL;
        r = slots_grow(p, slot + 1);
        if (r < 0)
                return r;
        struct gs_gsm_chunk *c = &g->chunks[spare];
        if (a->borrowed.count + a->debt >= a->cap)
                a->over++; /* held already: past the cap for now */
        g->nretired--;
        c->state = GS_GSM_HELD;
        c->alloc = a;
        c->proc = p;
        c->slot = slot;
        c->borrowed = 1;
        c->granted = 1;
        c->dirty = 1;
        c->user = NULL;
        list_push(g->chunks, &a->borrowed, spare, 1);
        g->borrowed++;
        list_push(g->chunks, &p->held, spare, 0);
        p->slots[slot] = spare;
        if (slot == p->lo_free)
                while (p->lo_free < p->nslots && gs_gsm_slot_chunk(p, p->lo_free) != GS_GSM_NONE)
                        p->lo_free++;
        a->held++;
        g->spilled++;
        a->spilled++;
        if (g->hold_fn && p->tag)
                g->hold_fn(g->hold_ctx, spare, p->tag, slot, 1);
        return 0;
}

/* The first of a's held borrowed chunks that is not a spare, or NONE. */
static uint32_t real_borrowed(const struct gs_gsm *g, const struct gs_gsm_alloc *a)
{
        for (uint32_t id = a->borrowed.head; id != GS_GSM_NONE; id = g->chunks[id].bnext)
                if (id < g->nreal)
                        return id;
        return GS_GSM_NONE;
}

/* A spare (data in host memory) came to (+1) or left (-1) a slot of a. */
static void spilled(struct gs_gsm *g, struct gs_gsm_alloc *a, int delta)
{
        g->spilled += (uint32_t)delta;
        a->spilled += (uint32_t)delta;
}

int gs_gsm_make_borrowed(struct gs_gsm *g, uint32_t held)
{
        if (held >= g->nreal || g->chunks[held].state != GS_GSM_HELD)
                return -EINVAL;
        struct gs_gsm_chunk *c = &g->chunks[held];
        if (c->borrowed)
                return 0;
        uint32_t d = real_borrowed(g, c->alloc);
        if (d == GS_GSM_NONE)
                return -ENOENT;
        list_unlink(g->chunks, &c->alloc->borrowed, d, 1);
        g->chunks[d].borrowed = 0;
        c->borrowed = 1;
        list_push(g->chunks, &c->alloc->borrowed, held, 1);
        return 0;
}

int gs_gsm_exchange(struct gs_gsm *g, uint32_t held, uint32_t spare)
{
        if (held >= g->nchunks || spare >= g->nchunks || g->chunks[held].state != GS_GSM_HELD ||
            g->chunks[spare].state != GS_GSM_RETIRED || !g->chunks[held].borrowed)
                return -EINVAL;
        struct gs_gsm_chunk *c = &g->chunks[held], *r = &g->chunks[spare];
        struct gs_gsm_proc *p = c->proc;
        struct gs_gsm_alloc *a = c->alloc;
        uint32_t slot = c->slot;

        if (g->hold_fn && p->tag)
                g->hold_fn(g->hold_ctx, held, p->tag, slot, 0);
        list_unlink(g->chunks, &p->held, held, 0);
        if (c->borrowed)
                list_unlink(g->chunks, &a->borrowed, held, 1);
        r->state = GS_GSM_HELD;
        r->alloc = a;
        r->proc = p;
        r->last = NULL;
        r->slot = slot;
        r->borrowed = c->borrowed;
        r->granted = c->granted;
        r->dirty = c->dirty;
        r->user = c->user;
        list_push(g->chunks, &p->held, spare, 0);
        if (r->borrowed)
                list_push(g->chunks, &a->borrowed, spare, 1);
        p->slots[slot] = spare;
        g->nretired--;
        if (spare >= g->nreal)
                spilled(g, a, 1);
        if (held >= g->nreal)
                spilled(g, a, -1);
        if (g->hold_fn && p->tag)
                g->hold_fn(g->hold_ctx, spare, p->tag, slot, 1);
        /* held's memory goes to the system list the way a given-back
         * chunk's does (made anew: the process had it). */
        c->granted = 1;
        to_sys(g, held);
        repay_owed(g);
        return 0;
}

int gs_gsm_reserve(struct gs_gsm *g, uint32_t *ret_chunk)
{
        struct gs_gsm_alloc *o;
        uint32_t id;

        if (lendable(g)) {
                id = g->sys.head;
                int r = gs_gsm_retire(g, id);
                if (r == 0)
                        *ret_chunk = id;
                return r;
        }
        o = idle_owner(g, NULL);
        if (!o)
                return -ENOMEM;
        /* Lent out of an idle allocation's quota: it is owed it. */
        id = list_pop(g->chunks, &o->own);
        forget_last(g, id);
        o->owed++;
        g->owed++;
        g->chunks[id].state = GS_GSM_RETIRED;
        g->chunks[id].alloc = NULL;
        g->nretired++;
        kick(g);
        *ret_chunk = id;
        return 0;
}

uint32_t gs_gsm_lendable(const struct gs_gsm *g)
{
        return lendable(g) + idle_free(g, NULL);
}

void gs_gsm_want(struct gs_gsm_alloc *a, uint32_t n)
{
        if (n > a->owed)
                n = a->owed;
        if (n > a->wants)
                a->wants = n;
}

void gs_gsm_put(struct gs_gsm_proc *p, uint32_t slot)
{
        struct gs_gsm_alloc *a = p->alloc;
        struct gs_gsm *g = a->gsm;
        uint32_t id = p->slots[slot];
        struct gs_gsm_chunk *c = &g->chunks[id];

        if (g->hold_fn && p->tag)
                g->hold_fn(g->hold_ctx, id, p->tag, slot, 0);
        list_unlink(g->chunks, &p->held, id, 0);
        p->slots[slot] = GS_GSM_NONE;
        if (slot < p->lo_free)
                p->lo_free = slot;
        if (id >= g->nreal)
                spilled(g, a, -1);
        a->held--;
        __atomic_add_fetch(&a->returned, 1, __ATOMIC_RELEASE);
        if ((c->borrowed || a->borrowed.count) && a->over)
                a->over--;
        if (c->borrowed) {
                list_unlink(g->chunks, &a->borrowed, id, 1);
                g->borrowed--;
                to_sys(g, id);
                repay_owed(g);
        } else if (real_borrowed(g, a) != GS_GSM_NONE) {
                /* Repay a loan: this chunk goes to the system list and a
                 * held borrowed one becomes the allocation's own (never a
                 * spare: it has no device memory to be own). */
                uint32_t d = real_borrowed(g, a);
                list_unlink(g->chunks, &a->borrowed, d, 1);
                g->chunks[d].borrowed = 0;
                g->borrowed--;
                to_sys(g, id);
                repay_owed(g);
        } else if (c->dirty) {
                /* Behind the clean ones, and first for p itself. */
                c->state = GS_GSM_OWN;
                c->proc = NULL;
                c->user = NULL;
                c->slot = GS_GSM_NONE;
                list_push_tail(g->chunks, &a->own, id, 0);
                c->last = p;
                list_push(g->chunks, &p->mine, id, 1);
                if (a->nprocs > 1)
                        kick(g);
        } else {
                c->state = GS_GSM_OWN;
                c->proc = NULL;
                c->user = NULL;
                c->slot = GS_GSM_NONE;
                list_push(g->chunks, &a->own, id, 0);
        }
}

void gs_gsm_clean(struct gs_gsm *g, uint32_t chunk)
{
        struct gs_gsm_chunk *c;

        if (chunk >= g->nchunks || !g->chunks[chunk].dirty || g->chunks[chunk].state != GS_GSM_OWN)
                return;
        c = &g->chunks[chunk];
        c->dirty = 0;
        forget_last(g, chunk);
        list_unlink(g->chunks, &c->alloc->own, chunk, 0);
        list_push(g->chunks, &c->alloc->own, chunk, 0);
}

uint32_t gs_gsm_scrub_next(const struct gs_gsm *g, uint32_t ahead, uint32_t *ret, uint32_t max)
{
        uint32_t n = 0;

        for (const struct gs_gsm_alloc *a = g->allocs; a && n < max; a = a->next) {
                uint32_t clean = 0, seen = 0;

                for (uint32_t id = a->own.head;
                     id != GS_GSM_NONE && n < max && clean < ahead && seen < GS_GSM_SCRUB_LOOK;
                     id = g->chunks[id].next, seen++) {
                        const struct gs_gsm_chunk *c = &g->chunks[id];
                        if (c->dirty && a->nprocs < 2 && c->last)
                                continue;
                        if (c->dirty)
                                ret[n++] = id;
                        clean++; /* or will be */
                }
        }
        return n;
}
