/* gs_hist.h — a histogram of fixed buckets for the agent's /metrics
 * (gs_metrics.h): how long requests, scrubs, context charges and
 * reconciles take, and how large grants are.
 *
 * A sample is counted in its bucket and added to the sum with relaxed
 * atomic adds: any thread records (the worker threads on the request path,
 * the scrubbers, the reconciler, the main thread) without a lock and
 * without allocating.  A struct gs_hist needs no setup: all zeros is empty
 * (it is embedded in struct gs_agent, zeroed at start).  The bucket bounds
 * are the scale's, given when a sample is recorded and when the histogram
 * is read; one histogram always uses one scale.
 *
 * Reading (gs_hist_read) takes each counter once: a sample recorded
 * meanwhile may be in the buckets and not yet in the sum, which Prometheus
 * tolerates (rates over minutes). */
#ifndef GS_HIST_H
#define GS_HIST_H

#include <stdint.h>

#include "gs_util.h"

#define GS_HIST_MAX_BOUNDS 24

/* Upper bounds (inclusive, increasing) of the buckets, in the unit samples
 * are recorded in; le_div turns one into the exposed unit (1e9: ns into
 * seconds; 1: bytes). */
struct gs_hist_scale {
        uint32_t n;
        uint64_t le[GS_HIST_MAX_BOUNDS];
        double le_div;
};

/* Durations, recorded in ns, exposed in seconds: 1 us to 10 s. */
extern const struct gs_hist_scale gs_hist_seconds;
/* Sizes in bytes: 4 KiB to 64 GiB, by factors of 4. */
extern const struct gs_hist_scale gs_hist_bytes;

struct gs_hist {
        uint64_t bucket[GS_HIST_MAX_BOUNDS + 1]; /* atomic; the last: above every bound */
        uint64_t sum;                            /* atomic, in the recorded unit */
};

/* Any thread: counts v in h. */
void gs_hist_observe(struct gs_hist *h, const struct gs_hist_scale *s, uint64_t v);

/* Any thread: counts the time since t0_ns (gs_mono_ns) in h, a duration
 * histogram (gs_hist_seconds).  A clock that went back counts 0. */
static inline void gs_hist_since(struct gs_hist *h, int64_t t0_ns)
{
        int64_t d = gs_mono_ns() - t0_ns;

        gs_hist_observe(h, &gs_hist_seconds, d > 0 ? (uint64_t)d : 0);
}

/* A reading: cumulative counts per bound (cum[i]: samples <= le[i]), the
 * count of all samples and their sum. */
struct gs_hist_snap {
        uint64_t cum[GS_HIST_MAX_BOUNDS];
        uint64_t count, sum;
};

void gs_hist_read(const struct gs_hist *h, const struct gs_hist_scale *s, struct gs_hist_snap *ret);

#endif
