/* gs_hook_qos_foresee.h — the next request of a latency-critical process
 * foreseen (docs/compute.md "Foresight").
 *
 * Admission cannot take back a kernel already running: beside a trainer
 * whose GEMMs take 0.7 ms, a latency-critical request that comes while one
 * runs waits for the rest of it, whatever the others' queues hold.  Many
 * latency-critical processes work in a rhythm (a server fed at a steady
 * rate, a frame loop, a control loop): their requests come a period apart
 * with little jitter.  Their hook learns the period from when its work
 * starts after a pause, and publishes the next start it expects in its
 * board slot (gs_qos_slot.fs_*).  The others' hooks then launch only what
 * they expect to have finished before it (a lead ahead), hold from then
 * until the request comes (or is late), within the usual bound of what
 * they keep queued (more, on an H200, let the trainer's estimates that
 * were short of a kernel's time add up: HP's p99 rose).  A process whose
 * requests come at irregular times publishes nothing and is protected as
 * before.
 *
 * Pure functions over integers (times in ns of CLOCK_MONOTONIC): no
 * driver, no clock, no lock; test/hook/check_foresee.c drives them. */
#ifndef GS_HOOK_QOS_FORESEE_H
#define GS_HOOK_QOS_FORESEE_H

#include <stdint.h>

/* A start of work counts as a request's arrival after the work was idle
 * this long (shorter pauses are a request's own host gaps). */
#define GS_FORESEE_GAP_US 500
/* Periods learnt: 1 ms to 1 s. */
#define GS_FORESEE_MIN_PERIOD_US 1000
#define GS_FORESEE_MAX_PERIOD_US 1000000
/* Regular enough: the intervals' mean deviation at most 1/8 of the
 * period, after at least this many intervals. */
#define GS_FORESEE_MIN_INTERVALS 6
/* The lead: twice the mean deviation plus this (wake-up jitter). */
#define GS_FORESEE_SLACK_US 100
/* A request late by more than the lead is still waited for until this
 * part of the period more: holding costs the others only while the
 * request is late (it ends when the request comes), and one woken late
 * (a server's sleep overshoots now and then) would otherwise find a long
 * kernel just launched. */
#define GS_FORESEE_LATE_DIV 8

/* The learner of a latency-critical process (its hook's, under its lock). */
struct gs_foresee {
        uint64_t last_ns;   /* the last arrival (0: none yet) */
        uint64_t next_ns;   /* the next one published (0: none) */
        uint64_t period_ns; /* the intervals' moving mean (0: none yet) */
        uint64_t dev_ns;    /* their moving mean deviation from it */
        uint32_t n;         /* intervals taken since the last reset */
        uint32_t kept;      /* the last arrival was late: the next kept to the schedule */
};

/* What to publish: the next arrival expected, the period and the lead
 * (each 0 when the rhythm is not regular enough to foresee). */
struct gs_foresee_next {
        uint64_t next_ns;
        uint32_t period_us;
        uint32_t lead_us;
};

/* A request arrived at now: the learner updated; *ret the next one
 * expected: a period after this one, or, if this one came later than the
 * lead (within the late window) after one that did not, a period after
 * when it was expected (a server fed on a schedule keeps it: one woken
 * late does not delay the next).  An interval outside the periods learnt
 * starts over. */
void gs_foresee_arrival(struct gs_foresee *f, uint64_t now, struct gs_foresee_next *ret);

/* What a process beside a latency-critical one does with a launch of
 * est ns, inflight ns of its own work being on the GPU or queued (by its
 * estimates), given that process's published next arrival. */
enum gs_foresee_do {
        GS_FORESEE_NONE = 0, /* no foresight (none published, stale, the request late, est too long) */
        GS_FORESEE_ADMIT,    /* all of it ends before the lead: launch (within the plain bound) */
        GS_FORESEE_DRAIN,    /* it would not, with this in flight: wait for a launch in flight to end */
        GS_FORESEE_HOLD,     /* it would not end before the request: wait for it (until late by the lead
                              * and a GS_FORESEE_LATE_DIV-th of the period) */
};
enum gs_foresee_do gs_foresee_decide(const struct gs_foresee_next *pub, uint64_t now, uint64_t inflight, uint64_t est);

/* Whether pub foresees a request within within_ns of now (a process that
 * will need its neighbours' queues short soon, though idle now). */
int gs_foresee_soon(const struct gs_foresee_next *pub, uint64_t now, uint64_t within_ns);

#endif
