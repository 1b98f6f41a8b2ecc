/* gs_proc_share.h — weights among the processes competing for a GPU
 * (docs/compute.md "Weights"): every GS_PROC_SHARE_MS the main thread
 * looks at which processes launch (gs_shm.qos_launches, published by
 * their hooks), works out for each GPU and class the duty of each from
 * their allocations' weights (gs_qos_duties), and tells each process
 * whose duty changed (gs_shm.qos_share, its thread notified).
 *
 * A process competes while its launch count moved within the last
 * GS_PROC_SHARE_ACTIVE_MS; latency-critical processes are not counted (they
 * go first anyway), nor are other classes: weights rank a pod among its
 * class.  An allocation's weight is split evenly among its competing
 * processes.  A process's hook can lie about its launches: it then
 * changes only its own duty (as bypassing the hook would).
 *
 * The same tick tells each GPU's board whether a process that its
 * latency-critical flags would hold (standard or best-effort) launched
 * within GS_PROC_SHARE_HOLDABLE_MS (gs_qos_board.idle_until_ns): while
 * none did, its latency-critical processes do not track their work.  The
 * window is longer than a launching process's publish period plus a tick
 * (so one that launches without pause is never missed), and covers the
 * pauses of a training loop (a step's host work, a data loader's stall):
 * after a longer pause its latency-critical neighbours are unprotected
 * again for up to GS_QOS_LAUNCH_PUBLISH_MS + GS_PROC_SHARE_MS at its next
 * launch, and while one is alone they pay for tracking this long after its
 * last neighbour's last launch. */
#ifndef GS_PROC_SHARE_H
#define GS_PROC_SHARE_H

#include <stdint.h>

#define GS_PROC_SHARE_MS 100           /* how often the duties are worked out */
#define GS_PROC_SHARE_ACTIVE_MS 300    /* a process launching within this competes */
#define GS_PROC_SHARE_IDLE_MS 1000     /* the tick's period while no process is registered */
#define GS_PROC_SHARE_HOLDABLE_MS 1000 /* a holdable process launching within this: LC processes track */

struct gs_agent;

/* ag->share_timer's callback (gs_loop.h): the next due time. */
int64_t gs_proc_share_tick(void *ag, int64_t now);

#endif
