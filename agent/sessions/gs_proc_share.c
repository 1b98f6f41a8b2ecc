/* gs_proc_share.c — see gs_proc_share.h. */
#include "gs_proc_share.h"

#include "gs_agent.h"
#include "gs_allocs.h"
#include "gs_gpu.h"
#include "gs_log.h"
#include "gs_proc.h"
#include "gs_qos.h"

/* Whether p's launch count moved within the last ms, as of now (ms). */
static bool launched_within(struct gs_proc *p, int64_t now, int64_t ms)
{
        uint64_t n = __atomic_load_n(&p->shm->qos_launches, __ATOMIC_RELAXED);

        if (n != p->share_launches) {
                p->share_launches = n;
                p->share_moved_ms = now;
        }
        return p->share_moved_ms && now - p->share_moved_ms < ms;
}

/* p's duty is now duty (0: none): told if it changed. */
static void tell(struct gs_proc *p, uint8_t duty)
{
        if (p->share_told == duty)
                return;
        p->share_told = duty;
        log_debug("process %d (%s) of allocation %s: launches in %u %% of its duty periods (0: all)", p->pid, p->comm,
                  p->alloc->id, (unsigned)duty);
        __atomic_store_n(&p->shm->qos_share, (uint32_t)duty, __ATOMIC_RELEASE);
        gs_proc_notify(p);
}

/* Whether p counts on GPU gpu's books (its first GPU: as its board). */
static bool on_gpu(const struct gs_proc *p, uint32_t gpu)
{
        return p->state == GS_PROC_ACTIVE && p->shm && p->ngpus > 0 && p->gpus[0].g && p->gpus[0].g->index == gpu;
}

/* The processes of class cls on GPU gpu that compete now, into ps[] (at
 * most GS_QOS_SHARE_MAX), with their weights; the others of the class
 * told none.  How many processes of the GPU there are, added to *nprocs;
 * *holdable set if one of class cls that a latency-critical flag would
 * hold launched within GS_PROC_SHARE_HOLDABLE_MS. */
static uint32_t gather(struct gs_agent *ag, uint32_t gpu, unsigned cls, int64_t now, struct gs_proc **ps, uint64_t *w,
                       uint32_t *nprocs, bool *holdable)
{
        uint32_t n = 0;

        for (struct gs_allocation *a = ag->node.allocs; a; a = a->next) {
                struct gs_qos_policy pol;
                uint32_t first = n;

                __atomic_load(&a->qos, &pol, __ATOMIC_ACQUIRE);
                for (struct gs_proc *p = a->procs; p; p = p->next) {
                        if (!on_gpu(p, gpu))
                                continue;
                        (*nprocs)++;
                        if (pol.cls != cls)
                                continue;
                        if (cls != GS_QOS_LATENCY && launched_within(p, now, GS_PROC_SHARE_HOLDABLE_MS))
                                *holdable = true;
                        if (cls == GS_QOS_LATENCY || !launched_within(p, now, GS_PROC_SHARE_ACTIVE_MS) ||
                            n == GS_QOS_SHARE_MAX) {
                                tell(p, 0);
                                continue;
                        }
                        ps[n++] = p;
                }
                /* The allocation's weight, split among its competing
                 * processes (in thousandths). */
                for (uint32_t i = first; i < n; i++)
                        w[i] = (uint64_t)gs_qos_weight_of(&pol) * 1000 / (n - first);
        }
        return n;
}

int64_t gs_proc_share_tick(void *data, int64_t now)
{
        struct gs_agent *ag = data;
        struct gs_proc *ps[GS_QOS_SHARE_MAX];
        uint64_t w[GS_QOS_SHARE_MAX];
        uint8_t duty[GS_QOS_SHARE_MAX];
        uint32_t nprocs = 0;

        for (uint32_t gi = 0; gi < ag->node.ngpus; gi++) {
                uint32_t gpu = ag->node.gpus[gi].index;
                bool holdable = false;

                for (unsigned cls = GS_QOS_STANDARD; cls <= GS_QOS_BEST_EFFORT; cls++) {
                        uint32_t n = gather(ag, gpu, cls, now, ps, w, &nprocs, &holdable);

                        gs_qos_duties(n, w, duty);
                        for (uint32_t i = 0; i < n; i++)
                                tell(ps[i], duty[i]);
                }
                gs_qos_board_holdable(gpu, holdable);
        }
        return now + (nprocs ? GS_PROC_SHARE_MS : GS_PROC_SHARE_IDLE_MS);
}
