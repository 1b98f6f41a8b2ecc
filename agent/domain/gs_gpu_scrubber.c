/* gs_gpu_scrubber.c — the background scrubber (gs_gpu.h "Scrubbing"): a
 * thread per GPU that zeroes, in batches on a lowest-priority stream,
 * chunks processes gave back to their allocation's free list, a few ahead
 * of need, kicked by the pool's free lists; its stream and events, its
 * start and stop. */
#include "gs_gpu_int.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "gs_gsm.h"
#include "gs_log.h"

/* The pool's chunk level (gs_pool_gsm): the scrubber reads and orders its
 * free lists.  Checked against what was set through gs_pool.h; if it does
 * not match, NULL: no scrubber, every scrub on the request path. */
static struct gs_gsm *pool_gsm(struct gs_gpu *g)
{
        struct gs_gsm *m = g->pool ? gs_pool_gsm(g->pool) : NULL;

        if (!m || m->nchunks != g->nchunks + g->moves.nspare || m->return_fn != gs_gpu_chunk_recycle ||
            m->return_ctx != g || !m->chunks)
                return NULL;
        return m;
}

/* Under g->lock: queues the next batch (gs_gsm_scrub_next) on the scrub
 * stream and records scrub_ev after it; how many chunks are in it.
 * Chunks that need no zeroing (made anew since, or before their grant)
 * are only said clean. */
static uint32_t batch_fill(struct gs_gpu *g)
{
        const struct gs_cuda *cu = &g->node->cu;
        uint32_t ids[GS_GPU_SCRUB_BATCH];
        char why[200] = "";
        bool again = true;
        int r = 0;

        if (!gs_gpu_scrubs(g) || !g->scrub.gsm || g->scrub.nbatch)
                return 0;
        for (int round = 0; again && r == 0 && g->scrub.nbatch == 0 && round < 8; round++) {
                uint32_t n = gs_gsm_scrub_next(g->scrub.gsm, GS_GPU_SCRUB_AHEAD, ids, GS_GPU_SCRUB_BATCH);

                again = false;
                for (uint32_t i = 0; i < n; i++) {
                        struct gs_chunk *c = &g->chunks[ids[i]];
                        if (c->fd < 0 || c->state == GS_CHUNK_RECYCLE || c->writer == 0) {
                                gs_gsm_clean(g->scrub.gsm, ids[i]);
                                again = true;
                                continue;
                        }
                        r = gs_chunk_map(g, c, why, sizeof(why));
                        if (r == 0)
                                r = gs_gpu_scrub_queue(g, c->va, g->chunk_bytes, why, sizeof(why));
                        if (r < 0) {
                                /* Retried later; said at 1, 2, 4, ... failures. */
                                g->scrub.st.failures++;
                                g->scrub.retry_ms = gs_mono_ms() + GS_GPU_SCRUB_RETRY_MS;
                                if (!(g->scrub.st.failures & (g->scrub.st.failures - 1)))
                                        log_warn("GPU %u: chunk %u not scrubbed in the background (zeroed when "
                                                 "granted; %llu failures): %s",
                                                 g->index, ids[i], (unsigned long long)g->scrub.st.failures, why);
                                break;
                        }
                        c->scrubbing = true;
                        g->scrub.batch[g->scrub.nbatch++] = (struct gs_gpu_scrub_ent){ .va = c->va, .chunk = ids[i] };
                }
        }
        if (!g->scrub.nbatch)
                return 0;
        g->scrub.st.batches_bg++;
        r = gs_cuda_check(cu, cu->event_record(g->scrub.ev, g->scrub.stream), "scrub: cuEventRecord", why, sizeof(why));
        if (r < 0) {
                (void)cu->ctx_synchronize(); /* no memset may outlive the batch */
                gs_gpu_batch_done(g, false, why);
                return 0;
        }
        return g->scrub.nbatch;
}

/* The scrubber: woken by kicks, it lets releases gather, queues a batch,
 * waits for it without the lock (the workers serve on; a grant that needs
 * a chunk of the batch waits itself, gs_gpu_batch_wait), and says its chunks are
 * clean.  It leaves only between batches. */
static void *scrubber(void *arg)
{
        struct gs_gpu *g = arg;
        const struct gs_cuda *cu = &g->node->cu;
        bool gather = true;

        gs_gpu_lock(g); /* makes g->ctx current for the thread's life */
        while (!g->scrub.stop) {
                if (!gs_gpu_scrubs(g) || !g->scrub.kicked) {
                        gs_gpu_cond_wait(g, &g->scrub.cond);
                        gather = true;
                        continue;
                }
                int64_t now = gs_mono_ms();
                if (now < g->scrub.retry_ms) {
                        struct timespec ts;
                        clock_gettime(CLOCK_MONOTONIC, &ts);
                        int64_t ns = ts.tv_nsec + (g->scrub.retry_ms - now) * 1000000;
                        ts.tv_sec += ns / 1000000000;
                        ts.tv_nsec = ns % 1000000000;
                        (void)gs_gpu_cond_timedwait(g, &g->scrub.cond, &ts);
                        continue;
                }
                if (gather) {
                        struct timespec ts = { 0, GS_GPU_SCRUB_GATHER_US * 1000L };
                        gather = false;
                        gs_gpu_unlock(g);
                        nanosleep(&ts, NULL);
                        gs_gpu_lock(g);
                        continue;
                }
                g->scrub.kicked = false;
                int64_t scrub_t0 = gs_mono_ns(); /* /metrics: gshare_scrub_duration_seconds */
                if (batch_fill(g) == 0) {
                        /* Nothing to zero: host memory for spills,
                         * made or dropped without the lock. */
                        struct gs_spill_job j;
                        bool done = false;
                        if (gs_gpu_spill_prepare_pick(g, &j)) {
                                gs_gpu_unlock(g);
                                gs_gpu_spill_prepare_work(g, &j);
                                gs_gpu_lock(g);
                                done = gs_gpu_spill_prepare_end(g, &j);
                        }
                        if (done)
                                g->scrub.kicked = true;
                        else
                                gather = true;
                        continue;
                }
                gs_gpu_unlock(g);
                CUresult cr = cu->event_synchronize(g->scrub.ev);
                gs_gpu_lock(g);
                if (g->scrub.nbatch)
                        gs_gpu_batch_done(g, cr == CUDA_SUCCESS, "scrub: cuEventSynchronize failed");
                gs_hist_since(&g->node->hists.scrub, scrub_t0);
                /* More may be wanted by now: look again at once. */
                g->scrub.kicked = true;
        }
        gs_gpu_unlock(g);
        return NULL;
}

/* The scrub stream and events, once the context is current: 0, or a
 * negative errno (logged) and none of them (synchronous scrubs). */
int gs_gpu_scrub_setup(struct gs_gpu *g)
{
        const struct gs_cuda *cu = &g->node->cu;
        const unsigned evf = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING;
        int least = 0, greatest = 0;
        char why[200];
        int r;

        /* The lowest priority is the numerically largest: the agent's
         * memsets yield to anything else the agent queues. */
        r = gs_cuda_check(cu, cu->ctx_get_stream_priority_range(&least, &greatest), "cuCtxGetStreamPriorityRange", why,
                          sizeof(why));
        if (r == 0)
                r = gs_cuda_check(cu, cu->stream_create_with_priority(&g->scrub.stream, CU_STREAM_NON_BLOCKING, least),
                                  "cuStreamCreateWithPriority", why, sizeof(why));
        if (r == 0)
                r = gs_cuda_check(cu, cu->event_create(&g->scrub.ev, evf), "cuEventCreate", why, sizeof(why));
        if (r == 0)
                r = gs_cuda_check(cu, cu->event_create(&g->scrub.sync_ev, evf), "cuEventCreate", why, sizeof(why));
        if (r < 0) {
                log_warn("GPU %u: no scrub stream (%s): chunks are zeroed when granted", g->index, why);
                if (g->scrub.sync_ev)
                        (void)cu->event_destroy(g->scrub.sync_ev);
                if (g->scrub.ev)
                        (void)cu->event_destroy(g->scrub.ev);
                if (g->scrub.stream)
                        (void)cu->stream_destroy(g->scrub.stream);
                g->scrub.sync_ev = g->scrub.ev = NULL;
                g->scrub.stream = NULL;
        }
        return r;
}

void gs_gpu_scrub_start(struct gs_gpu *g)
{
        pthread_condattr_t ca;
        sigset_t all, old;
        int r;

        if (!g->scrub.stream || !g->pool)
                return;
        g->scrub.gsm = pool_gsm(g);
        if (!g->scrub.gsm) {
                log_warn("GPU %u: the pool's free lists are not where expected: no scrubber, chunks are zeroed "
                         "when granted",
                         g->index);
                return;
        }
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&g->scrub.cond, &ca);
        pthread_condattr_destroy(&ca);
        /* Signals are the main thread's (signalfd). */
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        r = pthread_create(&g->scrub.thr, NULL, scrubber, g);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r != 0) {
                log_warn("GPU %u: no scrubber thread (%s): chunks are zeroed when granted", g->index, strerror(r));
                pthread_cond_destroy(&g->scrub.cond);
                g->scrub.gsm = NULL;
                return;
        }
        char name[16];
        snprintf(name, sizeof(name), "gshare-scrub%u", g->index % 100);
        (void)pthread_setname_np(g->scrub.thr, name);
        g->scrub.started = true;
        gs_gpu_lock(g);
        g->scrub.gsm->kick_ctx = g;
        g->scrub.gsm->kick_fn = gs_gpu_scrub_kick;
        gs_gpu_unlock(g);
}

/* Before the pool and the context go: the thread ends between batches. */
void gs_gpu_scrub_stop(struct gs_gpu *g)
{
        if (!g->scrub.started)
                return;
        gs_gpu_lock(g);
        g->scrub.stop = true;
        pthread_cond_signal(&g->scrub.cond);
        gs_gpu_unlock(g);
        pthread_join(g->scrub.thr, NULL);
        gs_gpu_lock(g);
        g->scrub.gsm->kick_fn = NULL;
        g->scrub.gsm = NULL;
        gs_gpu_unlock(g);
        pthread_cond_destroy(&g->scrub.cond);
        g->scrub.started = false;
}
