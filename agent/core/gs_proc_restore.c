/* gs_proc_restore.c — at start, the previous agent's processes (gs_ledger.h):
 * each live one its ledger names gets a closed record (a ghost) holding
 * its chunks at their slots, charged until it reclaims them or exits; the
 * chunks adopted take the memory the processes map; chunks of live
 * processes of allocations that are gone wait, pending. */
#include "gs_proc_int.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gs_gpu.h"
#include "gs_log.h"

/* The closed record of (pid, start) on allocation a, made if the process
 * still lives: NULL if it does not (its memory is free in the driver). */
static struct gs_proc *ghost(struct gs_agent *ag, struct gs_allocation *a, const struct gs_ledger_ent *e)
{
        struct gs_proc *q;
        char err[200], path[64];
        int pidfd, fd;

        for (q = a->procs; q; q = q->next)
                if (q->pid == (pid_t)e->pid && q->start == e->start)
                        return q;
        pidfd = (int)syscall(SYS_pidfd_open, (pid_t)e->pid, 0);
        if (pidfd < 0)
                return NULL;
        /* After the pidfd: a pid reused since cannot pass for it. */
        if (gs_ledger_pid_start((pid_t)e->pid) != e->start) {
                close(pidfd);
                return NULL;
        }
        (void)fcntl(pidfd, F_SETFD, FD_CLOEXEC);
        q = calloc(1, sizeof(*q));
        if (!q) {
                close(pidfd);
                return NULL;
        }
        q->agent = ag;
        q->alloc = a;
        q->id = ++ag->next_proc_id;
        q->pid = (pid_t)e->pid;
        q->start = e->start;
        q->sock = q->shmfd = q->wake_fd = q->notify_fd = -1;
        q->pidfd = pidfd;
        q->sock_io.fd = q->pidfd_io.fd = -1;
        q->state = GS_PROC_CLOSED;
        snprintf(q->comm, sizeof(q->comm), "?");
        snprintf(path, sizeof(path), "/proc/%d/comm", q->pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
                ssize_t n = read(fd, q->comm, sizeof(q->comm) - 1);
                q->comm[n > 0 ? n : 0] = '\0';
                if (n > 0 && q->comm[n - 1] == '\n')
                        q->comm[n - 1] = '\0';
                close(fd);
        }
        q->next = a->procs;
        a->procs = q;
        a->nprocs++;
        ag->nconns++;
        if (gs_proc_gpus_init(ag, q, err, sizeof(err)) < 0 ||
            gs_loop_io_add(ag->loop, &q->pidfd_io, q->pidfd, EPOLLIN, gs_proc_on_pidfd, q) < 0) {
                log_error("process %d of allocation %s: %s", q->pid, a->id, err);
                gs_proc_destroy(ag, q, NULL);
                return NULL;
        }
        log_info("process %d (%s) of allocation %s held memory from before the restart: charged until it "
                 "reconnects or exits (#%llu)", q->pid, q->comm, a->id, (unsigned long long)q->id);
        return q;
}

static struct gs_allocation *alloc_by_num(struct gs_agent *ag, uint64_t num, uint32_t gpu, uint32_t *ret_part)
{
        for (struct gs_allocation *a = ag->allocs; a; a = a->next) {
                if (a->releasing || gs_proc_alloc_num(a) != num)
                        continue;
                for (uint32_t i = 0; i < a->nparts; i++)
                        if (a->parts[i].gpu == gpu && !a->parts[i].gone) {
                                *ret_part = i;
                                return a;
                        }
        }
        return NULL;
}

/* One chunk the previous agent's ledger says a live process holds. */
/* The chunk adopted for the entry, or UINT32_MAX. */
static uint32_t restore_one(struct gs_agent *ag, struct gs_gpu *g, const struct gs_ledger_ent *e, uint32_t *lost,
                            struct gs_allocation **ret_owner)
{
        struct gs_allocation *a;
        struct gs_proc *q = NULL;
        uint32_t pi, chunk;
        int r = -ESRCH;

        a = alloc_by_num(ag, e->alloc, g->index, &pi);
        if (a)
                q = ghost(ag, a, e);
        else if (e->pid && gs_ledger_pid_start((pid_t)e->pid) == e->start)
                r = -ENOENT; /* alive, of an allocation gone */
        if (!q) {
                if (r == -ENOENT)
                        (*lost)++;
                return UINT32_MAX;
        }
        struct gs_proc_gpu *pg = &q->gpus[pi];
        pthread_mutex_lock(&g->lock);
        if (e->kind == GS_LEDGER_VMM && !pg->vpp) {
                r = gs_pproc_new(a->parts[pi].pa, pg->nslots, &pg->vpp);
                if (r == 0)
                        gs_pproc_set_tag(pg->vpp, &pg->vtag);
        }
        struct gs_pproc *pp = e->kind == GS_LEDGER_VMM ? pg->vpp : pg->pp;
        r = pp ? gs_pproc_adopt(pp, e->slot, &chunk) : -ENOMEM;
        *ret_owner = a;
        pthread_mutex_unlock(&g->lock);
        if (r < 0) {
                log_warn("GPU %u: slot %u of process %d (allocation %s) not restored: %s", g->index, e->slot,
                         q->pid, a->id, strerror(-r));
                return UINT32_MAX;
        }
        return chunk;
}

/* Under g->lock, once every entry is adopted: each adopted chunk takes the
 * memory its process maps.  Handed over (target: the memid the old agent's
 * chunk had): exactly that memory, wherever it sits now (a permutation:
 * a chunk once given its target keeps it); after a crash (target 0): none,
 * trading its memory with a chunk that has none. */
static void place_adopted(struct gs_gpu *g, const uint32_t *chunk, const uint64_t *target,
                          struct gs_allocation *const *owner, uint32_t n)
{
        uint32_t lacking = 0;

        for (uint32_t k = 0; k < n; k++) {
                if (!target[k] || g->chunks[chunk[k]].memid == target[k])
                        continue;
                for (uint32_t j = 0; j < g->nchunks; j++)
                        if (g->chunks[j].memid == target[k] && g->chunks[j].fd >= 0) {
                                gs_gpu_chunk_swap(g, chunk[k], j);
                                break;
                        }
        }
        for (uint32_t k = 0; k < n; k++) {
                if (target[k] && g->chunks[chunk[k]].memid == target[k])
                        continue;
                if (gs_gpu_chunk_orphan(g, chunk[k]) < 0)
                        lacking++;
        }
        /* The process maps that memory: it is its allocation's until gone
         * (never a free chunk's to take, gs_gpu_chunk_fill). */
        for (uint32_t k = 0; k < n; k++)
                g->chunks[chunk[k]].owner = owner[k];
        if (lacking)
                log_warn("GPU %u: %u chunks processes hold have no chunk without memory to stand for them", g->index,
                         lacking);
}

void gs_proc_restore(struct gs_agent *ag)
{
        for (uint32_t gi = 0; gi < ag->ngpus; gi++) {
                struct gs_gpu *g = &ag->gpus[gi];
                uint32_t lost = 0, made;

                if (!g->pool)
                        continue;
                (void)!gs_gpu_ledger_start(g, ag->cfg.state_dir);
                /* What each of the old agent's chunks held, before anything
                 * moves (handed over: its memid; after a crash: nothing). */
                uint64_t *was = calloc(g->nheld_before ? g->nheld_before : 1, sizeof(*was));
                uint64_t *target = calloc(g->nheld_before ? g->nheld_before : 1, sizeof(*target));
                uint32_t *chunk = calloc(g->nheld_before ? g->nheld_before : 1, sizeof(*chunk));
                struct gs_allocation **owner = calloc(g->nheld_before ? g->nheld_before : 1, sizeof(*owner));
                uint32_t n = 0;
                if (!was || !target || !chunk || !owner) {
                        free(owner);
                        log_error("GPU %u: out of memory restoring processes", g->index);
                        free(was);
                        free(target);
                        free(chunk);
                        gs_gpu_ledger_commit(g);
                        continue;
                }
                for (uint32_t i = 0; i < g->nheld_before && i < g->nchunks; i++)
                        was[i] = g->chunks[i].inherited ? g->chunks[i].memid : 0;
                /* Mapped chunks first: the chunks without memory stand for
                 * what processes map; VMM backing chunks counted the old
                 * agent's fillers too, which died with it. */
                for (uint32_t kind = GS_LEDGER_SLOT; kind <= GS_LEDGER_VMM; kind++)
                        for (uint32_t i = 0; i < g->nheld_before; i++)
                                if (g->held_before[i].kind == kind) {
                                        struct gs_allocation *a = NULL;
                                        uint32_t c = restore_one(ag, g, &g->held_before[i], &lost, &a);
                                        if (c != UINT32_MAX) {
                                                chunk[n] = c;
                                                owner[n] = a;
                                                target[n++] = was[i];
                                        }
                                }
                pthread_mutex_lock(&g->lock);
                place_adopted(g, chunk, target, owner, n);
                pthread_mutex_unlock(&g->lock);
                free(owner);
                free(was);
                free(target);
                free(chunk);
                gs_gpu_inherit_settle(g);
                /* Live processes of allocations that are gone hold memory
                 * no allocation pays for: as many chunks without memory
                 * wait, pending, until it is free. */
                pthread_mutex_lock(&g->lock);
                made = 0;
                for (uint32_t c = 0; c < g->nchunks && made < lost; c++)
                        if (g->chunks[c].fd < 0 && !g->chunks[c].pending &&
                            gs_pool_retire_chunk(g->pool, c) == 0) {
                                g->chunks[c].pending = true;
                                g->chunks_pending++;
                                made++;
                        }
                pthread_mutex_unlock(&g->lock);
                if (lost)
                        log_warn("GPU %u: %u chunks held by live processes of allocations that are gone: pending "
                                 "until they are free", g->index, lost);
                gs_gpu_ledger_commit(g);
        }
}
