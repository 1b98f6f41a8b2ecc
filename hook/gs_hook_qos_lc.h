/* gs_hook_qos_lc.h — a latency-critical process's flag on its GPU's board
 * (docs/compute.md "Admission"): up while its work is on the GPU, so that
 * the other processes' hooks hold their launches.
 *
 * Raised (and stamped) at each launch.  After the launch an event is
 * recorded on its stream (one event per stream, re-recorded: it marks the
 * stream's last launch); a thread of the process's own, "gshare-qos",
 * looks at the pending events every GS_QOS_LC_POLL_US while any is
 * pending, stamps the flag again while work is left, and lowers it when
 * the work of every stream is done.  Applications whose synchronize never
 * reaches the hook's wrappers (PyTorch's goes through the runtime's own
 * driver entry points) are then seen done within a poll.
 *
 * Without that thread or its events (the driver refused them, more
 * streams than GS_QOS_LC_STREAMS pending) the flag comes down at the
 * next synchronize wrapper, or is ignored by the others once older than
 * GS_QOS_STALE_MS: never a wait without bound. */
#ifndef GS_HOOK_QOS_LC_H
#define GS_HOOK_QOS_LC_H

#include <stdint.h>

#include "gs_cudadecl.h"
#include "gs_wire.h"

#define GS_QOS_LC_STREAMS 16 /* streams whose last launch is tracked */
#define GS_QOS_LC_POLL_US 20 /* how often the thread looks at them */

/* The hook's thread (gs_conn.mu): our board and slot (GS_QOS_NO_SLOT:
 * not latency-critical).  A slot we leave is lowered first. */
void gs_qos_lc_set(struct gs_qos_board *b, uint32_t slot);
/* Whether this process holds a latency-critical slot (a relaxed load). */
int gs_qos_lc_is(void);
/* Our slot, for the others' scan of the board (GS_QOS_NO_SLOT: none). */
uint32_t gs_qos_lc_slot(void);

/* Whether our launches are to be tracked now: not while the board's
 * idle_until_ns says that no process our flag would hold has launched on
 * the GPU lately (gs_wire.h): then a launch records no event, starts no
 * poller and leaves the flag down.  One load, and a clock read while
 * untracked; the first launch after the agent says otherwise is tracked.
 * Any thread. */
int gs_qos_lc_tracking(void);

/* Around one launch on stream s of a latency-critical process: the flag
 * up before; after, the stream's event recorded (r: the launch's result). */
void gs_qos_lc_launching(void);
void gs_qos_lc_launched(CUstream s, CUresult r);
/* A synchronize wrapper returned success: everything of ours launched
 * before it is done. */
void gs_qos_lc_synced(void);

#endif
