/* gs_outside.c — see gs_outside.h. */
#include "gs_outside.h"

#include <stdio.h>
#include <stdlib.h>

#include "gs_chunkset.h"
#include "gs_gpu.h"
#include "gs_log.h"

/* k more chunks into the set, their memory released.  Returns how many
 * were taken, or a negative errno (nothing taken). */
static int take(struct gs_gpu *g, struct gs_outside *o, struct gs_palloc *pa, uint32_t nslots, uint32_t k, bool strict)
{
        int r = gs_chunkset_take(g, &o->cs, pa, nslots, k, strict);

        if (r > 0)
                g->outside_held += (uint64_t)r * g->chunk_bytes;
        return r;
}

/* The last held chunk goes back to the allocation with fresh memory, if
 * the driver has room for it (force: anyway, re-created when next
 * granted).  0, or -EAGAIN (it stays). */
static int give_last(struct gs_gpu *g, struct gs_outside *o, bool force)
{
        uint32_t chunk = o->cs.held[o->cs.nheld - 1].chunk;
        char err[256];
        int r = gs_chunkset_give(g, &o->cs, o->cs.nheld - 1, force, err, sizeof(err));

        if (r < 0) {
                log_debug("GPU %u: outside chunk %u not re-created yet: %s", g->index, chunk, err);
                return -EAGAIN;
        }
        if (r > 0)
                log_warn("GPU %u: chunk %u back without memory (re-created when granted): %s", g->index, chunk, err);
        g->outside_held -= g->chunk_bytes;
        log_debug("GPU %u: outside chunk %u given back (charged %llu, adopted %llu)", g->index, chunk,
                  (unsigned long long)o->charged, (unsigned long long)o->adopted);
        return 0;
}

static uint32_t target(const struct gs_gpu *g, uint64_t charged)
{
        uint64_t n = (charged + g->chunk_bytes - 1) / g->chunk_bytes;

        return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* What the set must cover: the charges, or while the processes' own are
 * not known again after a restart, what the previous agent's set held if
 * that is more. */
static uint64_t covered(const struct gs_outside *o, uint64_t charged)
{
        return charged > o->adopted ? charged : o->adopted;
}

/* short_bytes and short_since_ms from the charges and the chunks held. */
static void update_short(struct gs_gpu *g, struct gs_outside *o)
{
        uint64_t held = (uint64_t)o->cs.nheld * g->chunk_bytes, c = covered(o, o->charged);

        o->short_bytes = o->cs.nheld < target(g, c) ? c - held : 0;
        if (!o->short_bytes)
                o->short_since_ms = 0;
        else if (!o->short_since_ms)
                o->short_since_ms = gs_mono_ms();
}

void gs_outside_cover(struct gs_gpu *g, struct gs_outside *o, struct gs_palloc *pa, uint32_t nslots)
{
        gs_gpu_assert_locked(g);
        uint32_t want = target(g, covered(o, o->charged));

        if (!o->short_bytes)
                return;
        if (want > nslots)
                want = nslots;
        if (want > o->cs.nheld) {
                (void)g->node->cu.ctx_set_current(g->ctx);
                (void)take(g, o, pa, nslots, want - o->cs.nheld, false);
        }
        update_short(g, o);
}

void gs_outside_settle(struct gs_gpu *g, struct gs_outside *o)
{
        gs_gpu_assert_locked(g);
        uint32_t want = target(g, covered(o, o->charged));

        if (o->cs.nheld <= want)
                return;
        (void)g->node->cu.ctx_set_current(g->ctx);
        while (o->cs.nheld > want && give_last(g, o, false) == 0)
                ;
}

int gs_outside_charge(struct gs_gpu *g, struct gs_outside *o, struct gs_palloc *pa, uint32_t nslots, uint64_t *slot,
                      uint64_t bytes, bool strict)
{
        gs_gpu_assert_locked(g);
        uint64_t charged = o->charged - *slot + bytes;
        uint32_t want = target(g, covered(o, charged));
        bool up = bytes > *slot;
        int r;

        (void)g->node->cu.ctx_set_current(g->ctx);
        if (want > o->cs.nheld) {
                if (want > nslots) {
                        if (strict)
                                return -ENOMEM;
                        want = nslots;
                }
                r = take(g, o, pa, nslots, want - o->cs.nheld, strict);
                if (r < 0 && strict)
                        return r;
        }
        o->charged = charged;
        *slot = bytes;
        gs_outside_settle(g, o);
        update_short(g, o);
        if (o->short_bytes) {
                o->over_quota += up;
                return -EDQUOT;
        }
        return 0;
}

void gs_outside_init(struct gs_outside *o, uint64_t alloc)
{
        o->tag = (struct gs_ledger_tag){ .kind = GS_LEDGER_OUTSIDE, .alloc = alloc };
        o->cs.tag = &o->tag;
}

uint32_t gs_outside_adopt(struct gs_gpu *g, struct gs_outside *o, struct gs_palloc *pa, uint32_t nslots,
                          const uint32_t *slots, uint32_t n)
{
        gs_gpu_assert_locked(g);
        int r = gs_chunkset_adopt(g, &o->cs, pa, nslots, slots, n);

        if (r <= 0)
                return 0;
        g->outside_held += (uint64_t)r * g->chunk_bytes;
        o->adopted = (uint64_t)r * g->chunk_bytes;
        update_short(g, o);
        return (uint32_t)r;
}

void gs_outside_adopted_done(struct gs_gpu *g, struct gs_outside *o)
{
        gs_gpu_assert_locked(g);
        if (!o->adopted)
                return;
        o->adopted = 0;
        gs_outside_settle(g, o);
        update_short(g, o);
}

void gs_outside_clear(struct gs_gpu *g, struct gs_outside *o)
{
        gs_gpu_assert_locked(g);
        if (o->cs.nheld)
                (void)g->node->cu.ctx_set_current(g->ctx);
        while (o->cs.nheld)
                (void)give_last(g, o, true);
        gs_chunkset_fini(&o->cs);
        o->charged = 0;
        o->adopted = 0;
        o->short_bytes = 0;
        o->short_since_ms = 0;
}
