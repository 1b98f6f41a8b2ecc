/* gs_proc_qos.h — the processes' side of compute QoS (docs/compute.md;
 * gs_wire.h item 10): an allocation's policy set from its pod, told to its
 * processes' hooks, and each latency-critical process's slot on its GPU's
 * board (agent/domain/gs_qos.h). */
#ifndef GS_PROC_QOS_H
#define GS_PROC_QOS_H

#include "gs_proc.h"
#include "gs_qos.h"

/* Main thread: a's policy is now pol (the reconciler read it from the
 * pod).  A change is logged, checkpointed, and each registered process's
 * hook is told (gs_shm.qos bumped, its thread notified). */
void gs_proc_qos_set(struct gs_agent *ag, struct gs_allocation *a, const struct gs_qos_policy *pol);
/* GS_OP_QOS (a worker, the process's turn). */
int gs_serve_qos(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req, struct gs_ring_msg *rep);
/* The process record is going: its board slot, if any, is freed. */
void gs_proc_qos_gone(struct gs_proc *p);

#endif
