/* gs_proc_qos.c — see gs_proc_qos.h. */
#include "gs_proc_qos.h"

#include <errno.h>
#include <unistd.h>

#include "gs_allocs.h"
#include "gs_gpu.h"
#include "gs_log.h"
#include "gs_sockmsg.h"

void gs_proc_qos_set(struct gs_agent *ag, struct gs_allocation *a, const struct gs_qos_policy *pol)
{
        char was[64], now[64];

        if (gs_qos_same(&a->qos, pol))
                return;
        gs_qos_format(&a->qos, was, sizeof(was));
        gs_qos_format(pol, now, sizeof(now));
        __atomic_store(&a->qos, (struct gs_qos_policy *)pol, __ATOMIC_RELEASE);
        log_info("allocation %s (pod %s/%s): compute %s (was %s), from the pod", a->id, a->pod_namespace, a->pod_name,
                 now, was);
        if (gs_allocs_checkpoint(&ag->node) < 0)
                log_warn("allocation %s: its compute policy is not in the checkpoint yet", a->id);
        gs_node_changed(&ag->node);
        for (struct gs_proc *p = a->procs; p; p = p->next) {
                if (p->state != GS_PROC_ACTIVE || !p->shm)
                        continue;
                __atomic_add_fetch(&p->shm->qos, 1, __ATOMIC_RELEASE);
                gs_proc_notify(p);
        }
}

/* The slot p holds on its board (p->qos_slot1 is it + 1; 0: none). */
static uint32_t slot_of(const struct gs_proc *p)
{
        return p->qos_slot1 ? p->qos_slot1 - 1 : GS_QOS_NO_SLOT;
}

int gs_serve_qos(struct gs_proc *p, struct gs_proc_gpu *pg, const struct gs_ring_msg *req, struct gs_ring_msg *rep)
{
        struct gs_qos_policy pol;
        uint32_t gpu = pg->g->index, slot;
        int fd = -1, r;
        bool lc;

        __atomic_load(&p->alloc->qos, &pol, __ATOMIC_ACQUIRE);
        lc = pol.cls == GS_QOS_LATENCY;
        /* Asked again: the slot it has is kept while it stays
         * latency-critical on that GPU. */
        if (p->qos_slot1 && (!lc || p->qos_gpu != gpu))
                gs_proc_qos_gone(p);
        slot = slot_of(p);
        r = gs_qos_board_open(gpu, lc, (uint32_t)p->pid, &fd, &slot);
        if (r < 0) {
                rep->status = r;
                return 0;
        }
        if (lc && slot == GS_QOS_NO_SLOT && !p->qos_full_said) {
                p->qos_full_said = true;
                log_warn("process %d (%s) of allocation %s: latency-critical, but GPU %u's %u board slots are "
                         "taken: its work is not flagged",
                         p->pid, p->comm, p->alloc->id, gpu, GS_QOS_SLOTS);
        }
        p->qos_slot1 = slot == GS_QOS_NO_SLOT ? 0 : slot + 1;
        p->qos_gpu = gpu;
        rep->arg[0] = pol.cls;
        rep->arg[1] = pol.cap;
        rep->arg[2] = slot;
        rep->arg[3] = sizeof(struct gs_qos_board);
        rep->ret4 = gs_qos_weight_of(&pol);
        r = gs_sockmsg_send_grant(p->sock, GS_SOCK_QOS, req, slot, sizeof(struct gs_qos_board), fd, &p->stop);
        close(fd);
        return r;
}

void gs_proc_qos_gone(struct gs_proc *p)
{
        if (p->qos_slot1)
                gs_qos_board_release(p->qos_gpu, p->qos_slot1 - 1);
        p->qos_slot1 = 0;
}
