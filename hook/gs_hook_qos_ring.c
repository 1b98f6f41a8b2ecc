/* gs_hook_qos_ring.c — see gs_hook_qos_ring.h. */
#include <sys/prctl.h>
#include <time.h>

#include "gs_hook_qos.h"
#include "gs_hook_qos_est.h"
#include "gs_hook_qos_ring.h"

static CUcontext g_ctx;
static CUevent g_ring[GS_QOS_RING], g_start, g_end;
static uint64_t g_next;             /* launches recorded in the ring */
static uint64_t g_est[GS_QOS_RING]; /* launch i's GPU time as expected when admitted */
static uint64_t g_hi[GS_QOS_RING];  /* ... at most (its kind's high estimate) */
static uint64_t g_at[GS_QOS_RING];  /* ... when it was launched (CLOCK_MONOTONIC ns) */
static uint64_t g_done;             /* launches before it are complete */
static uint64_t g_done_at;          /* when g_done was last seen to advance */
static size_t g_sample_h;           /* launch g_sample's kind (gs_qos_est_kind) */
static uint64_t g_sample_key;       /* ... as it was then (its entry may be taken over) */
static CUfunction g_sample_f;
static CUevent g_pre; /* before launch g_sample */
static uint64_t g_sample = UINT64_MAX;
static int g_ok = -1; /* -1: not made yet */

/* The kernel rounds a thread's sleeps up by its timer slack (50 µs by
 * default), more than the waits here are: the waiting thread's slack is
 * made 1 µs for the nap and put back after (PR_GET_TIMERSLACK is the
 * thread's own value, never an error). */
void gs_qos_nap_us(long us)
{
        struct timespec ts = { 0, us * 1000 };
        int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);

        if (slack > 1000)
                (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
        nanosleep(&ts, NULL);
        if (slack > 1000)
                (void)prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
}

void gs_qos_wait_event(const struct gs_cu *c, CUevent e, int64_t deadline)
{
        /* From a few µs up: a short kernel's end is seen at once. */
        for (long us = 5; c->event_query(e) == CUDA_ERROR_NOT_READY && gs_mono_ns() < deadline;
             us = us * 2 < GS_QOS_POLL_US ? us * 2 : GS_QOS_POLL_US)
                gs_qos_nap_us(us);
}

int gs_qos_ring_ready(const struct gs_cu *c)
{
        CUcontext cur = NULL;

        if (!c->ctx_get_current || c->ctx_get_current(&cur) != CUDA_SUCCESS || !cur)
                return 0;
        if (g_ok < 0) {
                g_ok = c->event_create && c->event_record && c->event_query && c->event_elapsed_time;
                for (unsigned i = 0; i < GS_QOS_RING && g_ok; i++)
                        g_ok = c->event_create(&g_ring[i], 0) == CUDA_SUCCESS;
                g_ok = g_ok && c->event_create(&g_start, 0) == CUDA_SUCCESS &&
                       c->event_create(&g_pre, 0) == CUDA_SUCCESS && c->event_create(&g_end, 0) == CUDA_SUCCESS;
                g_ctx = cur;
        }
        return g_ok && cur == g_ctx;
}

CUevent gs_qos_ring_cap_start(void)
{
        return g_start;
}

CUevent gs_qos_ring_cap_end(void)
{
        return g_end;
}

void gs_qos_ring_done(const struct gs_cu *c)
{
        uint64_t was;

        if (g_next - g_done >= GS_QOS_RING)
                g_done = g_next - (GS_QOS_RING - 1);
        was = g_done;
        while (g_done < g_next && c->event_query(g_ring[g_done % GS_QOS_RING]) != CUDA_ERROR_NOT_READY)
                g_done++;
        if (g_done != was)
                g_done_at = (uint64_t)gs_mono_ns();
}

int gs_qos_ring_idle(void)
{
        return g_done == g_next;
}

int gs_qos_ring_full(void)
{
        return g_next - g_done >= GS_QOS_RING - 1;
}

uint64_t gs_qos_ring_queued_ns(void)
{
        uint64_t ns = 0;

        for (uint64_t i = g_done + 1; i < g_next; i++)
                ns += g_est[i % GS_QOS_RING];
        return ns;
}

uint64_t gs_qos_ring_inflight_hi(uint64_t now)
{
        uint64_t ns = 0, began, hi;

        if (g_done == g_next)
                return 0;
        for (uint64_t i = g_done + 1; i < g_next; i++)
                ns += g_hi[i % GS_QOS_RING];
        began = g_at[g_done % GS_QOS_RING] > g_done_at ? g_at[g_done % GS_QOS_RING] : g_done_at;
        hi = g_hi[g_done % GS_QOS_RING];
        if (now > began)
                return ns + (hi > now - began ? hi - (now - began) : 0);
        return ns + hi;
}

void gs_qos_ring_wait_oldest(const struct gs_cu *c, int64_t deadline)
{
        gs_qos_wait_event(c, g_ring[g_done % GS_QOS_RING], deadline);
}

void gs_qos_ring_sample_before(const struct gs_cu *c, CUstream s, size_t h, CUfunction f, uint64_t shape)
{
        if (g_sample == UINT64_MAX && gs_qos_est_sample_this(h) && c->event_record(g_pre, s) == CUDA_SUCCESS) {
                g_sample = g_next;
                g_sample_h = h;
                g_sample_f = f;
                g_sample_key = shape;
        }
}

/* The time between g_pre and the launch's ring event is its own, or more
 * when the engine ran another context's turn in between
 * (gs_qos_est_take).  A sample that a latency-critical request lengthened
 * counts for the high estimate too: the samples that overlap a request
 * foreseen are those of the launches whose estimate was short (kept from
 * it, a short estimate was never corrected: on the fake driver the
 * foreseen server's p90 went from 0.5 ms to 1.6-2.4 ms in 2 of 5 runs). */
void gs_qos_ring_sample(const struct gs_cu *c)
{
        float ms = 0;

        if (g_sample == UINT64_MAX || g_sample >= g_next ||
            c->event_query(g_ring[g_sample % GS_QOS_RING]) == CUDA_ERROR_NOT_READY)
                return;
        if (g_next - g_sample < GS_QOS_RING &&
            c->event_elapsed_time(&ms, g_pre, g_ring[g_sample % GS_QOS_RING]) == CUDA_SUCCESS && ms > 0)
                gs_qos_est_take(g_sample_h, g_sample_f, g_sample_key, (uint64_t)(ms * 1e6));
        g_sample = UINT64_MAX;
}

int gs_qos_ring_record(const struct gs_cu *c, CUstream s, uint64_t est, uint64_t hi)
{
        if (c->event_record(g_ring[g_next % GS_QOS_RING], s) != CUDA_SUCCESS)
                return 0;
        g_est[g_next % GS_QOS_RING] = est;
        g_hi[g_next % GS_QOS_RING] = hi;
        g_at[g_next % GS_QOS_RING] = (uint64_t)gs_mono_ns();
        g_next++;
        return 1;
}
