/* gs_proc_qosrep.c — see gs_proc_qosrep.h. */
#include "gs_proc_qosrep.h"

#include "gs_allocs.h"
#include "gs_util.h"

/* The word of p's segment that reports r. */
static const uint64_t *report_word(const struct gs_proc *p, enum gs_qos_report r)
{
        return r == GS_QR_HELD ? &p->shm->qos_held : r == GS_QR_HELD_NS ? &p->shm->qos_held_ns : &p->shm->qos_gpu_ns;
}

/* a's sum of r over its processes gone, to add to. */
static uint64_t *gone_sum(struct gs_allocation *a, enum gs_qos_report r)
{
        return r == GS_QR_HELD ? &a->qos_held_gone : r == GS_QR_HELD_NS ? &a->qos_held_ns_gone : &a->qos_gpu_ns_gone;
}

uint64_t gs_proc_qos_report(const struct gs_allocation *a, enum gs_qos_report r)
{
        uint64_t sum = r == GS_QR_HELD      ? a->qos_held_gone
                       : r == GS_QR_HELD_NS ? a->qos_held_ns_gone
                                            : a->qos_gpu_ns_gone;

        for (const struct gs_proc *p = a->procs; p; p = p->next)
                if (p->state != GS_PROC_HELLO && p->shm)
                        gs_add_sat(&sum, __atomic_load_n(report_word(p, r), __ATOMIC_RELAXED));
        return sum;
}

void gs_proc_qos_keep(struct gs_allocation *a, const struct gs_proc *p)
{
        if (!p->shm)
                return;
        for (enum gs_qos_report r = GS_QR_HELD; r <= GS_QR_GPU_NS; r++)
                gs_add_sat(gone_sum(a, r), __atomic_load_n(report_word(p, r), __ATOMIC_RELAXED));
}
