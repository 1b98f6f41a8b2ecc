/* gs_proc_ghost.c — a previous agent's process, found from its ledger or
 * spill record (gs_proc_adopt.c, gs_proc_spillrest.c): its allocation
 * by number, and its closed record (a ghost) if it still lives. */
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
struct gs_proc *gs_proc_ghost(struct gs_agent *ag, struct gs_allocation *a, const struct gs_ledger_ent *e)
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
            gs_loop_io_add(ag->node.loop, &q->pidfd_io, q->pidfd, EPOLLIN, gs_proc_on_pidfd, q) < 0) {
                log_error("process %d of allocation %s: %s", q->pid, a->id, err);
                gs_proc_destroy(ag, q, NULL);
                return NULL;
        }
        log_info("process %d (%s) of allocation %s held memory from before the restart: charged until it "
                 "reconnects or exits (#%llu)",
                 q->pid, q->comm, a->id, (unsigned long long)q->id);
        return q;
}

struct gs_allocation *gs_proc_alloc_by_num(struct gs_agent *ag, uint64_t num, uint32_t gpu, uint32_t *ret_part)
{
        for (struct gs_allocation *a = ag->node.allocs; a; a = a->next) {
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
