/* gs_hook_qos_ring.h — a bounded process's launches in flight
 * (docs/compute.md "How it is enforced").
 *
 * An event is recorded after each launch QoS bounds (the ring: launch i's
 * event is slot i % GS_QOS_RING), with what the launch was expected to
 * take (its kind's estimate and high estimate, gs_hook_qos_est.h) and when
 * it was launched.  The launches before the oldest event not yet done are
 * complete; what is queued behind it is the sum of the estimates.  One
 * launch at a time is timed (an event before it too): its sample goes to
 * its kind's estimates as soon as a wait sees it done.  The events live in
 * the context of the process's first bounded launch; launches in another
 * are not bounded (fail open).  A capped launch's own events (before and
 * after it) are made with the ring.
 *
 * Everything here runs under the caller's lock (gs_hook_qos.c's g_mu). */
#ifndef GS_HOOK_QOS_RING_H
#define GS_HOOK_QOS_RING_H

#include <stddef.h>
#include <stdint.h>

#include "gs_hook.h"

/* A nap of us microseconds, at a timer slack of 1 µs (any thread). */
void gs_qos_nap_us(long us);
/* Waits until e is complete or deadline (CLOCK_MONOTONIC ns) passes. */
void gs_qos_wait_event(const struct gs_cu *c, CUevent e, int64_t deadline);

/* Whether the events are usable in the current context (made at the
 * first call, in that context). */
int gs_qos_ring_ready(const struct gs_cu *c);
/* The capped launch's events (gs_qos_ring_ready first). */
CUevent gs_qos_ring_cap_start(void);
CUevent gs_qos_ring_cap_end(void);

/* Looks at the launches in flight: those seen done are no longer. */
void gs_qos_ring_done(const struct gs_cu *c);
/* Whether none is in flight; whether the ring is full. */
int gs_qos_ring_idle(void);
int gs_qos_ring_full(void);
/* GPU time expected of the launches queued behind the oldest in flight
 * (running, or the next to). */
uint64_t gs_qos_ring_queued_ns(void);
/* GPU time the launches in flight may still take at now, by their high
 * estimates: the oldest started at the latest when it was launched or
 * when the one before it was seen to end, and what it ran since is off. */
uint64_t gs_qos_ring_inflight_hi(uint64_t now);
/* Waits for the oldest in flight to end (or deadline). */
void gs_qos_ring_wait_oldest(const struct gs_cu *c, int64_t deadline);

/* Before a launch of kind h (f, shape) on stream s: an event recorded
 * before it if this one is to be timed (none is being, and
 * gs_qos_est_sample_this says so). */
void gs_qos_ring_sample_before(const struct gs_cu *c, CUstream s, size_t h, CUfunction f, uint64_t shape);
/* The launch being timed, if seen done: its sample taken. */
void gs_qos_ring_sample(const struct gs_cu *c);
/* After a launch on s, expected to take est ns (at most hi): its event
 * recorded; 0 if the driver refused it (the launch is not counted). */
int gs_qos_ring_record(const struct gs_cu *c, CUstream s, uint64_t est, uint64_t hi);

#endif
