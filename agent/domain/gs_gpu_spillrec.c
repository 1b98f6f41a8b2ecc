/* gs_gpu_spillrec.c — what a restarted agent must know of a GPU's moves
 * (docs/burst.md "Agent restarts"): which process slots map host memory,
 * which are in a move, and which allocations are owed how many chunks.
 *
 * The ledger (gs_ledger.h) names only chunks with device memory.  Beside
 * it, <stateDir>/spilled-<GPU UUID> has the same layout: one entry per
 * spare record (entry i for record nchunks + i), GS_LEDGER_SLOT while a
 * process maps host memory at the slot, GS_LEDGER_SPILLING or
 * GS_LEDGER_UNSPILLING from a batch's plan to its end (the process may
 * have moved the slot or not: only it knows, and says so when it
 * reclaims), GS_LEDGER_HELD while a live process keeps a spare's fd it
 * did not map (gs_gpu_spill.c), then ndebt GS_LEDGER_OWED entries (allocation, chunks owed).
 * Mapped, written in place under the GPU's lock, committed and replaced
 * with the ledger.  Another file, not more ledger entries: an agent that
 * does not know it reads its ledger as before and ignores this one. */
#include "gs_gpu_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gs_log.h"

static int spillrec_path(char *buf, size_t len, const char *dir, const char *uuid)
{
        int n = snprintf(buf, len, "%s/spilled-%s", dir, uuid);

        return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

void gs_gpu_spillrec_read(struct gs_gpu *g, const struct gs_config *cfg)
{
        gs_gpu_assert_locked(g); /* gs_gpu_open_pool */
        char path[PATH_MAX], why[160] = "";
        uint64_t cb = 0;
        int r;

        if (spillrec_path(path, sizeof(path), cfg->state_dir, g->uuid) < 0)
                return;
        r = gs_ledger_read(path, g->uuid_raw, &g->spillrec.before, &g->spillrec.nbefore, &cb, why, sizeof(why));
        if (r == -ENOENT)
                return;
        if (r == 0 && cb != g->chunk_bytes) {
                snprintf(why, sizeof(why), "chunks of %llu bytes, configured %llu", (unsigned long long)cb,
                         (unsigned long long)g->chunk_bytes);
                r = -EINVAL;
        }
        if (r < 0) {
                log_warn("GPU %u: the previous agent's spill record %s is not used: %s; spilled data is "
                         "charged as device memory",
                         g->index, path, why[0] ? why : strerror(-r));
                gs_gpu_spillrec_done(g);
        }
}

void gs_gpu_spillrec_done(struct gs_gpu *g)
{
        free(g->spillrec.before);
        g->spillrec.before = NULL;
        g->spillrec.nbefore = 0;
}

void gs_gpu_spillrec_start(struct gs_gpu *g, const char *state_dir)
{
        char path[PATH_MAX];
        int r;

        if (!g->moves.nspare)
                return;
        g->spillrec.ndebt = g->units_total ? g->units_total : 1; /* an allocation holds a unit at least */
        r = spillrec_path(path, sizeof(path), state_dir, g->uuid);
        if (r == 0)
                r = gs_ledger_open(&g->spillrec.rec, path, g->uuid_raw, g->chunk_bytes,
                                   g->moves.nspare + g->spillrec.ndebt);
        if (r < 0) {
                log_error("GPU %u: no spill record in %s (%s): a restarted agent will charge spilled data as "
                          "device memory",
                          g->index, state_dir, strerror(-r));
                return;
        }
        g->spillrec.on = true;
}

void gs_gpu_spillrec_commit(struct gs_gpu *g)
{
        int r;

        gs_gpu_spillrec_done(g);
        if (g->spillrec.rec.fd < 0)
                return;
        r = gs_ledger_commit(&g->spillrec.rec);
        if (r < 0)
                log_error("GPU %u: cannot replace the spill record %s: %s", g->index, g->spillrec.rec.path,
                          strerror(-r));
}

void gs_gpu_spillrec_pause(struct gs_gpu *g, bool pause)
{
        int r;

        if (g->spillrec.rec.fd < 0)
                return;
        r = pause ? 0 : gs_ledger_relink(&g->spillrec.rec);
        if (r < 0)
                log_error("GPU %u: cannot put the spill record %s back: %s", g->index, g->spillrec.rec.path,
                          strerror(-r));
        g->spillrec.on = !pause;
}

void gs_gpu_spillrec_close(struct gs_gpu *g)
{
        g->spillrec.on = false;
        gs_ledger_close(&g->spillrec.rec);
        gs_gpu_spillrec_done(g);
}

void gs_gpu_spillrec_hold(struct gs_gpu *g, uint32_t spare, const struct gs_ledger_tag *t, uint32_t slot, bool held)
{
        gs_gpu_assert_locked(g);
        if (g->spillrec.on && spare < g->moves.nspare)
                gs_ledger_set(&g->spillrec.rec, spare, t, slot, held);
}

void gs_gpu_spillrec_moving(struct gs_gpu *g, const struct gs_ledger_tag *t, enum gs_move_dir dir,
                            const struct gs_move_ent *e, uint32_t n)
{
        gs_gpu_assert_locked(g);
        if (!g->spillrec.on)
                return;
        for (uint32_t i = 0; i < n; i++) {
                if (dir == GS_MOVE_TO_HOST && t && e[i].to >= g->nchunks) {
                        struct gs_ledger_tag m = *t;
                        m.kind = GS_LEDGER_SPILLING;
                        gs_ledger_set(&g->spillrec.rec, e[i].to - g->nchunks, &m, e[i].slot, true);
                } else if (dir == GS_MOVE_TO_DEVICE && e[i].from >= g->nchunks) {
                        gs_ledger_set_kind(&g->spillrec.rec, e[i].from - g->nchunks, GS_LEDGER_UNSPILLING);
                }
        }
}

void gs_gpu_spillrec_moved(struct gs_gpu *g, enum gs_move_dir dir, const struct gs_move_ent *e, uint32_t n,
                           uint32_t moved, bool kept)
{
        gs_gpu_assert_locked(g);
        if (!g->spillrec.on)
                return;
        /* What moved was recorded by its exchange (gs_gpu_chunk_hold). */
        for (uint32_t i = moved; i < n; i++) {
                if (dir == GS_MOVE_TO_HOST && e[i].to >= g->nchunks && kept)
                        gs_ledger_set_kind(&g->spillrec.rec, e[i].to - g->nchunks, GS_LEDGER_HELD);
                else if (dir == GS_MOVE_TO_HOST && e[i].to >= g->nchunks)
                        gs_ledger_set(&g->spillrec.rec, e[i].to - g->nchunks, NULL, 0, false);
                else if (dir == GS_MOVE_TO_DEVICE && e[i].from >= g->nchunks)
                        gs_ledger_set_kind(&g->spillrec.rec, e[i].from - g->nchunks, GS_LEDGER_SLOT);
        }
}

struct debts {
        struct gs_gpu *g;
        uint32_t n;
};

static void debt_one(void *ctx, uint64_t alloc, uint32_t owed)
{
        struct debts *d = ctx;
        struct gs_gpu *g = d->g;

        if (d->n >= g->spillrec.ndebt)
                return;
        struct gs_ledger_ent *e = &g->spillrec.rec.ent[g->moves.nspare + d->n++];
        if (e->kind == GS_LEDGER_OWED && e->alloc == alloc && e->slot == owed)
                return;
        struct gs_ledger_tag t = { .kind = GS_LEDGER_OWED, .alloc = alloc };
        gs_ledger_set(&g->spillrec.rec, (uint32_t)(e - g->spillrec.rec.ent), &t, owed, true);
}

void gs_gpu_spillrec_debts(struct gs_gpu *g)
{
        gs_gpu_assert_locked(g);
        struct debts d = { g, 0 };

        if (!g->spillrec.on || !g->spillrec.rec.ent)
                return;
        gs_pool_debts(g->pool, debt_one, &d);
        for (uint32_t i = g->moves.nspare + d.n;
             i < g->moves.nspare + g->spillrec.ndebt && g->spillrec.rec.ent[i].kind != GS_LEDGER_FREE; i++)
                gs_ledger_set(&g->spillrec.rec, i, NULL, 0, false);
}

void gs_gpu_spillrec_debts_adopt(struct gs_gpu *g, struct gs_palloc *(*pa_of)(void *ctx, uint64_t alloc), void *ctx)
{
        gs_gpu_assert_locked(g);
        for (uint32_t i = 0; i < g->spillrec.nbefore; i++) {
                const struct gs_ledger_ent *e = &g->spillrec.before[i];
                struct gs_palloc *pa;

                if (e->kind != GS_LEDGER_OWED || !(pa = pa_of(ctx, e->alloc)))
                        continue;
                gs_palloc_lent_before(pa, e->slot);
                log_info("GPU %u: allocation %llx was owed %u chunks before the restart", g->index,
                         (unsigned long long)e->alloc, e->slot);
        }
}
