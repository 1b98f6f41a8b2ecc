/* gs_hook_qos.h — compute QoS in the hook (docs/compute.md; gs_wire.h
 * item 10): admission at the launch gate, by the class the agent says.
 *
 * The agent hands each process its GPU's board (struct gs_qos_board): a
 * latency-critical (LC) process maps it writable and keeps its slot's flag
 * up while its work is on the GPU (gs_hook_qos_lc.h: raised at each
 * launch, lowered when the events recorded after its launches are done).
 * The others map it read-only.  While the board names an LC process that
 * launched lately, a standard or best-effort process keeps at most
 * GS_QOS_QUEUE_US of its work queued behind its running launch (an event
 * recorded after each launch, each counted at its kind's measured time:
 * gs_hook_qos_ring.h, gs_hook_qos_est.h), launches before an LC request
 * foreseen only what ends before it (gs_hook_qos_foresee.h), and while a
 * fresh LC flag is up launches nothing new: the LC's work then finds at
 * most that much of its work ahead.  A best-effort process always, and
 * any other while an LC process is registered, keeps at most
 * GS_QOS_BACKLOG_US queued (what is queued when a request comes cannot
 * be taken back).
 *
 * Nothing waits without bound: a flag older than GS_QOS_STALE_MS (its
 * process died or hangs) or stamped in the future is ignored, and one
 * launch waits at most GS_QOS_MAX_WAIT_MS in all.
 * Launches on a stream being captured are never held (they do not run),
 * nor NCCL's kernels.
 * Without a board (no agent with GS_FEAT_QOS, or none yet) or while no LC
 * process is on the board, a launch costs two loads more.
 *
 * A cap (percent of GPU time) keeps the process's measured GPU time under
 * cap % by delaying launches: a token bucket over the time between an
 * event before and after each launch (its launches run one at a time). */
#ifndef GS_HOOK_QOS_H
#define GS_HOOK_QOS_H

#include "gs_cudadecl.h"

#define GS_QOS_RING 64           /* events after launches: at most 63 in flight while bounded */
#define GS_QOS_QUEUE_US 200      /* GPU time queued beside an LC process */
#define GS_QOS_LC_RECENT_MS 100  /* ... that launched this recently (else the backlog bound) */
#define GS_QOS_SAMPLE 8          /* one launch in this many is timed (at random) */
#define GS_QOS_BACKLOG_US 20000  /* ... by a best-effort process, or while an LC one is registered */
#define GS_QOS_MAX_WAIT_MS 20    /* the most one launch waits for LC work */
#define GS_QOS_POLL_US 20        /* how often a waiting launch looks again */
#define GS_QOS_CAP_WINDOW_MS 100 /* a capped process's bucket: this much of its share */

/* Set once the process has a board or a cap (relaxed loads). */
extern int gs_qos_active;

/* Around one launch of kernel f (NULL: a graph) on stream s (the gate's
 * launch wrappers): before may wait; its result goes to after, with the
 * launch's.  shape tells launches of f apart whose GPU time differs (its
 * grid, GS_QOS_SHAPE; a graph's exec): the expected time of a launch is
 * that of (f, shape) as sampled (cuBLAS runs GEMMs of every size with a
 * few kernels: by function alone, a large one was expected to take what
 * the smallest took).  NCCL's kernels (their names, from cuFuncGetName
 * where the driver has it) are never held nor counted: a rank held
 * mid-collective would hold its peers. */
#define GS_QOS_SHAPE(x, y, z) ((uint64_t)(x) ^ (uint64_t)(y) << 31 ^ (uint64_t)(z) << 47)
int gs_qos_before_slow(CUstream s, CUfunction f, uint64_t shape);
void gs_qos_after_slow(int cookie, CUstream s, CUresult r);
static inline int gs_qos_before(CUstream s, CUfunction f, uint64_t shape)
{
        return __atomic_load_n(&gs_qos_active, __ATOMIC_RELAXED) ? gs_qos_before_slow(s, f, shape) : 0;
}
static inline void gs_qos_after(int cookie, CUstream s, CUresult r)
{
        if (cookie)
                gs_qos_after_slow(cookie, s, r);
}

/* The hook's thread, gs_conn.mu held, connection UP: asks GS_OP_QOS when
 * the connection is new or gs_shm.qos changed, and maps the board. */
void gs_qos_serve(void);

/* The hook's thread, gs_conn.mu held: the counts of launches and held
 * launches, and the GPU time QoS timed (a capped launch at its own
 * events' measure, one admitted through the ring at its function's
 * estimate: docs/compute.md "GPU time"), into the segment, for the
 * agent's metrics (while launches may be held, the thread looks every
 * GS_QOS_PUBLISH_MS). */
#define GS_QOS_PUBLISH_MS 1000
void gs_qos_publish(void);
/* The hook's thread, gs_conn.mu held: how long it may sleep before
 * publishing again (-1: until woken): GS_QOS_LAUNCH_PUBLISH_MS while the
 * process launches; after a quiet spell the next launch calls the
 * function set here (the thread's kick). */
int gs_qos_publish_ms(void);
void gs_qos_set_wake_fn(void (*fn)(void));
/* Whether this process's launches may be held now (a cap, or a
 * latency-critical process beside it). */
int gs_qos_may_hold(void);

/* Its weight among its class (docs/compute.md): 1..GS_QOS_WEIGHT_MAX,
 * GS_QOS_WEIGHT_DEFAULT until the agent says (any thread). */
unsigned gs_qos_weight(void);

/* For tests and logs: the class (enum gs_qos_class), the cap, and
 * launches held so far and the ns they waited. */
void gs_qos_stats(unsigned *cls, unsigned *cap, unsigned long long *held, unsigned long long *held_ns);

#endif
