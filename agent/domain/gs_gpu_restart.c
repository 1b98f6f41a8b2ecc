/* gs_gpu_restart.c — a GPU across agent restarts and upgrades
 * (gs_gpu_restart.h): the previous agent's ledger read at open, a
 * handed-over pool taken as it was, this agent's ledger kept (paused,
 * resumed, committed, stopped).  Chunks that trade memory so that what a
 * process already maps is charged where it sits are gs_gpu_chunk.c's. */
#include "gs_gpu_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gs_log.h"

/* gs_gsm_hold_fn: into the ledger (under g->lock). */
void gs_gpu_chunk_hold(void *ctx, uint32_t chunk, const void *tag, uint32_t slot, int held)
{
        struct gs_gpu *g = ctx;
        gs_gpu_assert_locked(g);

        if (chunk >= g->nchunks)
                gs_gpu_spillrec_hold(g, chunk - g->nchunks, tag, slot, held != 0);
        else
                gs_ledger_set(&g->restart.ledger, chunk, tag, slot, held != 0);
}

/* The previous agent's ledger of this GPU, kept in g->restart.held_before: its
 * chunk count, or 0 if there is none (or it is not usable). */
uint32_t gs_gpu_read_ledger(struct gs_gpu *g, const struct gs_config *cfg)
{
        gs_gpu_assert_locked(g); /* gs_gpu_open_pool */
        char path[PATH_MAX], why[160] = "";
        uint64_t cb = 0;
        int r;

        if (gs_ledger_path(path, sizeof(path), cfg->state_dir, g->uuid) < 0)
                return 0;
        gs_gpu_spillrec_read(g, cfg);
        r = gs_ledger_read(path, g->uuid_raw, &g->restart.held_before, &g->restart.nheld_before, &cb, why, sizeof(why));
        if (r == -ENOENT)
                return 0;
        if (r == 0 && cb != g->chunk_bytes) {
                snprintf(why, sizeof(why), "chunks of %llu bytes, configured %llu", (unsigned long long)cb,
                         (unsigned long long)g->chunk_bytes);
                r = -EINVAL;
        }
        if (r < 0) {
                log_warn("GPU %u: the previous agent's ledger %s is not used: %s", g->index, path,
                         why[0] ? why : strerror(-r));
                free(g->restart.held_before);
                g->restart.held_before = NULL;
                g->restart.nheld_before = 0;
                return 0;
        }
        /* The pool cannot have been larger than the GPU. */
        if ((uint64_t)g->restart.nheld_before * g->chunk_bytes > g->total_bytes)
                return (uint32_t)(g->total_bytes / g->chunk_bytes);
        return g->restart.nheld_before;
}

/* At a restart's start: whether the driver has one more chunk above the
 * reserve. */
bool gs_gpu_room_at_start(struct gs_gpu *g)
{
        gs_gpu_assert_locked(g); /* gs_gpu_open_pool */
        size_t free_b = 0, total_b = 0;

        if (g->node->cu.mem_get_info(&free_b, &total_b) != CUDA_SUCCESS)
                return false;
        return free_b >= g->reserve_bytes + g->chunk_bytes;
}

int gs_gpu_ledger_start(struct gs_gpu *g, const char *state_dir)
{
        char path[PATH_MAX];
        int r;

        if (!g->pool)
                return 0;
        if (mkdir(state_dir, 0700) < 0 && errno != EEXIST)
                return gs_neg_errno();
        r = gs_ledger_path(path, sizeof(path), state_dir, g->uuid);
        if (r == 0)
                r = gs_ledger_open(&g->restart.ledger, path, g->uuid_raw, g->chunk_bytes, g->nchunks);
        if (r < 0)
                log_error("GPU %u: no ledger in %s (%s): a restarted agent will not know what processes "
                          "hold",
                          g->index, state_dir, strerror(-r));
        else
                gs_gpu_spillrec_start(g, state_dir);
        return r;
}

void gs_gpu_inherit_settle(struct gs_gpu *g)
{
        uint32_t n = 0;

        /* Marked only: dropping their memory costs the driver time the
         * processes would wait for (an upgrade's gap); it is done before
         * any grant and by the next scans. */
        gs_gpu_lock(g);
        for (uint32_t i = 0; i < g->nchunks; i++) {
                struct gs_chunk *c = &g->chunks[i];
                if (c->state != GS_CHUNK_INHERITED || c->writer == 0 || gs_pool_chunk_held(g->pool, i))
                        continue;
                c->state = GS_CHUNK_RECYCLE;
                n++;
        }
        gs_gpu_unlock(g);
        if (n)
                log_info("GPU %u: %u handed-over chunks a process may still reach are made anew before use", g->index,
                         n);
}

void gs_gpu_ledger_commit(struct gs_gpu *g)
{
        int r;

        gs_gpu_lock(g);
        if (gs_gpu_phase_get(g) == GS_GPU_INHERITED) {
                /* The processes are restored: the scrubber may work. */
                gs_gpu_phase_set(g, GS_GPU_SERVING);
                if (g->scrub.started)
                        gs_gpu_scrub_kick(g);
        }
        gs_gpu_unlock(g);
        free(g->restart.held_before);
        g->restart.held_before = NULL;
        g->restart.nheld_before = 0;
        if (g->restart.ledger.fd < 0)
                return;
        gs_gpu_spillrec_commit(g);
        r = gs_ledger_commit(&g->restart.ledger);
        if (r < 0)
                log_error("GPU %u: cannot replace the ledger %s: %s", g->index, g->restart.ledger.path, strerror(-r));
}

void gs_gpu_ledger_pause(struct gs_gpu *g, bool pause)
{
        if (!g->pool)
                return;
        gs_gpu_lock(g);
        /* A new agent that failed after its restore replaced our file. */
        int r = pause ? 0 : gs_ledger_relink(&g->restart.ledger);
        if (r < 0 && r != -EBADF)
                log_error("GPU %u: cannot put the ledger %s back: %s; a restarted agent will not know what "
                          "processes hold",
                          g->index, g->restart.ledger.path, strerror(-r));
        gs_pool_set_hold_fn(g->pool, pause ? NULL : gs_gpu_chunk_hold, pause ? NULL : g);
        gs_gpu_spillrec_pause(g, pause);
        /* The new agent may grant any chunk from TAKE on: no memset of
         * ours may run then. */
        gs_gpu_phase_set(g, pause ? GS_GPU_PAUSED : GS_GPU_SERVING);
        if (pause)
                gs_gpu_batch_wait(g);
        else if (g->scrub.started)
                gs_gpu_scrub_kick(g);
        gs_gpu_unlock(g);
}

void gs_gpu_ledger_stop(struct gs_gpu *g)
{
        if (!g->pool)
                return;
        gs_gpu_lock(g);
        gs_pool_set_hold_fn(g->pool, NULL, NULL);
        gs_ledger_close(&g->restart.ledger);
        gs_gpu_spillrec_close(g);
        gs_gpu_unlock(g);
}

/* The pool of an agent handed over by a previous one: its chunks as they
 * were (inh), the previous ledger for what processes hold. */
int gs_gpu_open_inherited(struct gs_gpu *g, const struct gs_config *cfg, const struct gs_gpu_inherit *inh, char *err,
                          size_t errlen)
{
        gs_gpu_assert_locked(g); /* gs_gpu_open_pool */
        (void)gs_gpu_read_ledger(g, cfg);
        g->chunks = calloc(inh->nchunks, sizeof(*g->chunks));
        if (!g->chunks) {
                snprintf(err, errlen, "out of memory for %u chunks", inh->nchunks);
                return -ENOMEM;
        }
        for (uint32_t i = 0; i < inh->nchunks; i++) {
                struct gs_chunk *c = &g->chunks[i];
                c->fd = inh->fd[i];
                c->handle = 0; /* imported when the agent itself needs it (scrub) */
                c->state = c->fd >= 0 ? GS_CHUNK_INHERITED : GS_CHUNK_OURS;
                /* Another agent's process ids: scrubbed before any grant. */
                c->writer = inh->written[i] ? UINT64_MAX : 0;
                c->memid = c->fd >= 0 ? inh->memid[i] : 0;
                if (c->memid > g->memid_next)
                        g->memid_next = c->memid;
                if (c->fd >= 0)
                        g->chunks_made_at_start++;
        }
        g->nchunks = inh->nchunks;
        /* Nothing is scrubbed in the background before the processes are
         * restored (gs_gpu_ledger_commit): until READY the old agent may
         * take its chunks back. */
        gs_gpu_phase_set(g, GS_GPU_INHERITED);
        return 0;
}
