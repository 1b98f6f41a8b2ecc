/* gs_proc.c — a registered process's record on the main thread
 * (gs_proc.h): its part on each GPU of its allocation, the end of its
 * connection and its exit (everything it had freed), and what the agent
 * does to every process at once (pause, resume, disconnect, ask to give
 * back, kill).  Its connection: gs_proc_conn.c; registration:
 * gs_proc_hello.c; reclaim after a restart: gs_proc_reclaim.c; the
 * previous agent's processes: gs_proc_adopt.c. */
#include "gs_proc_int.h"
#include "gs_proc_qosrep.h"
#include "gs_qos.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "gs_allocs.h"
#include "gs_gpu.h"
#include "gs_ipc.h"
#include "gs_log.h"

static void stop_worker(struct gs_proc *p)
{
        gs_workers_remove(p->agent->workers, &p->went);
}

/* Ends the connection (the process may live on). */
void gs_proc_close_conn(struct gs_agent *ag, struct gs_proc *p)
{
        stop_worker(p);
        /* Its exports die with the connection (no FREE can reach us any
         * more to retire them), before its blocks may go. */
        gs_ipc_unexport_all(&p->alloc->ipc, p);
        if (p->sock >= 0) {
                gs_loop_io_del(ag->node.loop, &p->sock_io);
                gs_closep(&p->sock);
                /* A hook waiting for a reply wakes and finds the socket
                 * closed now, not a sleep slice later. */
                if (p->shm)
                        gs_doorbell_ring(&p->shm->hook_wake, &p->shm->hook_sleeping);
        }
        p->state = GS_PROC_CLOSED;
}

/* Under g->lock: the process is gone; a move of its in flight is undone
 * (nothing of it moved: the batch's spares and chunks go back). */
static void move_cancel(struct gs_proc_gpu *pg)
{
        gs_gpu_assert_locked(pg->g);
        if (!pg->nmove)
                return;
        gs_gpu_move_end(pg->g, (enum gs_move_dir)pg->move_dir, pg->move, pg->nmove, 0, NULL, 0);
        pg->nmove = 0;
}

/* The process is gone: frees everything it had. */
void gs_proc_destroy(struct gs_agent *ag, struct gs_proc *p, const char *why)
{
        struct gs_allocation *a = p->alloc;
        bool changed = false;

        gs_proc_close_conn(ag, p);
        if (p->pidfd >= 0) {
                gs_loop_io_del(ag->node.loop, &p->pidfd_io);
                gs_closep(&p->pidfd);
        }
        for (uint32_t i = 0; i < p->ngpus; i++) {
                struct gs_gpu *g = p->gpus[i].g;
                uint32_t before = g->last_borrowed;
                if (!p->gpus[i].pp)
                        continue;
                gs_gpu_lock(g);
                gs_vmm_clear(g, &p->gpus[i].vmm);
                move_cancel(&p->gpus[i]);
                uint32_t held = gs_gpu_spill_release_holder(g, p->id);
                if (held)
                        log_info("GPU %u: process %d (%s) is gone with the host memory of %u chunks it did not move "
                                 "(spillMax has it again)",
                                 g->index, p->pid, p->comm, held);
                gs_pproc_del(p->gpus[i].pp);
                gs_pproc_del(p->gpus[i].vpp);
                p->gpus[i].vpp = NULL;
                free(p->gpus[i].lvmm);
                p->gpus[i].lvmm = NULL;
                p->gpus[i].nlvmm = 0;
                /* Its context is gone with it: what it was charged goes
                 * back once the driver has the memory free again. */
                g->outside_measured -= p->gpus[i].outside_measured;
                g->ctx_promised -= p->gpus[i].ctx_promised;
                p->gpus[i].ctx_promised = 0;
                (void)!gs_outside_charge(g, &a->parts[i].out, a->parts[i].pa,
                                         gs_allocs_outside_slots(&ag->node, &a->parts[i]), &p->gpus[i].outside_charge,
                                         0, false);
                gs_gpu_check_lending(g);
                changed |= before != g->last_borrowed;
                gs_gpu_unlock(g);
        }
        if (p->shm) {
                /* What its hook said of QoS stays in the allocation's
                 * sums (metrics only). */
                gs_proc_qos_keep(a, p);
                munmap(p->shm, sizeof(*p->shm));
        }
        gs_closep(&p->shmfd);
        gs_closep(&p->wake_fd);
        gs_closep(&p->notify_fd);
        /* Its compute QoS slot (gs_proc_qos.c took it) goes back. */
        if (p->qos_slot1)
                gs_qos_board_release(p->qos_gpu, p->qos_slot1 - 1);
        p->qos_slot1 = 0;
        for (struct gs_proc **pp = &a->procs; *pp; pp = &(*pp)->next)
                if (*pp == p) {
                        *pp = p->next;
                        a->nprocs--;
                        ag->nconns--;
                        break;
                }
        if (why)
                log_info("process %d (%s) of allocation %s %s, its memory is back (%llu requests served)", p->pid,
                         p->comm, a->id, why, (unsigned long long)__atomic_load_n(&p->nrequests, __ATOMIC_RELAXED));
        free(p->grants);
        free(p->grant_fds);
        gs_agent_want_scan(ag);
        gs_loop_defer_free(ag->node.loop, p);
        gs_allocs_reap(&ag->node, a);
        (void)changed; /* the worker-side poke covers lending; nothing else changed */
}

/* The allocation's id as the ledger keeps it. */
uint64_t gs_proc_alloc_num(const struct gs_allocation *a)
{
        return strtoull(a->id, NULL, 16);
}

/* One gs_pproc per GPU of the allocation, with their ledger tags. */
int gs_proc_gpus_init(struct gs_agent *ag, struct gs_proc *p, char *err, size_t errlen)
{
        struct gs_allocation *a = p->alloc;
        int r;

        for (uint32_t i = 0; i < a->nparts; i++) {
                struct gs_part *part = &a->parts[i];
                struct gs_proc_gpu *pg = &p->gpus[i];
                struct gs_gpu *g = &ag->node.gpus[part->gpu];
                /* Room for a burst given later (a pod's annotation,
                 * gs_allocs_set_burst): as much as the node allows. */
                uint64_t most = part->quota_chunks + ag->node.cfg.burst_max_bytes / g->chunk_bytes;
                uint64_t slots = 2 * (gs_part_burst(part) > most ? gs_part_burst(part) : most);

                if (slots > (1u << 20))
                        slots = 1u << 20;
                pg->g = g;
                pg->nslots = (uint32_t)(slots ? slots : 1);
                pg->quota_bytes = (uint64_t)part->quota_chunks * g->chunk_bytes;
                pg->vmm.pa = part->pa;
                pg->vmm.nslots = pg->nslots;
                pg->tag = (struct gs_ledger_tag){ (uint32_t)p->pid, GS_LEDGER_SLOT, p->start, gs_proc_alloc_num(a) };
                pg->vtag = pg->tag;
                pg->vtag.kind = GS_LEDGER_VMM;
                pg->vmm.cs.tag = p->start ? &pg->vtag : NULL;
                gs_gpu_lock(g);
                r = gs_pproc_new(part->pa, pg->nslots, &pg->pp);
                if (r == 0 && p->start)
                        gs_pproc_set_tag(pg->pp, &pg->tag);
                gs_gpu_unlock(g);
                if (r < 0) {
                        snprintf(err, errlen, "cannot create the process on GPU %u: %s", g->index, strerror(-r));
                        return r;
                }
                p->ngpus = i + 1;
        }
        return 0;
}

void gs_proc_on_pidfd(void *data, uint32_t events)
{
        struct gs_proc *p = data;

        (void)events;
        gs_proc_destroy(p->agent, p, p->state == GS_PROC_HELLO ? NULL : "exited");
}

void gs_proc_kill_all(struct gs_agent *ag)
{
        /* A releasing allocation leaves the list with its last process, but
         * its memory lives until the graveyard is emptied: a->next stays valid. */
        for (struct gs_allocation *a = ag->node.allocs; a; a = a->next)
                while (a->procs)
                        gs_proc_destroy(ag, a->procs, NULL);
}

void gs_proc_pause_all(struct gs_agent *ag)
{
        for (struct gs_allocation *a = ag->node.allocs; a; a = a->next)
                for (struct gs_proc *p = a->procs; p; p = p->next)
                        if (p->state == GS_PROC_ACTIVE) {
                                stop_worker(p);
                                __atomic_store_n(&p->stop, 0, __ATOMIC_RELEASE);
                        }
}

void gs_proc_resume_all(struct gs_agent *ag)
{
        for (struct gs_allocation *a = ag->node.allocs; a; a = a->next)
                for (struct gs_proc *p = a->procs; p; p = p->next)
                        if (p->state == GS_PROC_ACTIVE &&
                            gs_workers_add(ag->workers, &p->went, p, &a->wgroup, p->wake_fd, &p->stop) < 0)
                                shutdown(p->sock, SHUT_RDWR); /* no slot: it reconnects */
}

void gs_proc_disconnect_all(struct gs_agent *ag)
{
        for (struct gs_allocation *a = ag->node.allocs; a; a = a->next)
                for (struct gs_proc *p = a->procs; p; p = p->next)
                        if (p->state != GS_PROC_CLOSED)
                                gs_proc_close_conn(ag, p);
}
