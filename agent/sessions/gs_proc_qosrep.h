/* gs_proc_qosrep.h — what an allocation's processes' hooks report of
 * compute QoS, summed for the metrics and gsharectl (docs/compute.md "GPU
 * time"; gs_wire.h's gs_shm.qos_held, qos_held_ns, qos_gpu_ns).  Apart
 * from gs_proc_qos.c, which tells the hooks the policy: the process
 * records' end (gs_proc.c) keeps what a process reported, and nothing
 * here calls back into the records' code. */
#ifndef GS_PROC_QOSREP_H
#define GS_PROC_QOSREP_H

#include <stdint.h>

#include "gs_proc.h"

/* What an allocation's processes' hooks report of compute QoS (gs_shm):
 * launches held, the ns they waited, the ns of GPU time QoS timed
 * (docs/compute.md "GPU time").  Summed over its registered processes, as
 * each last said (on its first GPU), and those gone (gs_proc_qos_keep);
 * saturating.  Shown, never used: a hostile hook can report anything.
 * Main thread. */
enum gs_qos_report { GS_QR_HELD, GS_QR_HELD_NS, GS_QR_GPU_NS };
uint64_t gs_proc_qos_report(const struct gs_allocation *a, enum gs_qos_report r);
/* p's record is going, its segment still mapped: what its hook reported
 * stays in its allocation a's sums.  Main thread. */
void gs_proc_qos_keep(struct gs_allocation *a, const struct gs_proc *p);

#endif
