/* gs_proc_conn.c — a process's connection on the main thread (gs_proc.h
 * "Life of a process"): accepted within the caps (maxConnections...), its
 * pidfd opened, its socket's events taken by the state it is in (HELLO,
 * reclaim, served), and the deadlines of HELLO and of a reclaim. */
#include "gs_proc_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gs_log.h"
#include "gs_logrep.h"
#include "gs_sockmsg.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

static void on_sock(void *data, uint32_t events);

static int pidfd_exited(int pidfd)
{
        struct pollfd pfd = { .fd = pidfd, .events = POLLIN };

        return poll(&pfd, 1, 0) > 0;
}

static int open_pidfd(int sock, pid_t pid)
{
        int fd = -1;
        socklen_t l = sizeof(fd);

        /* SO_PEERPIDFD (Linux 6.5) names the very process that connected;
         * pidfd_open by pid is the fallback, racy only if the peer already
         * exited and its pid was reused in between. */
        if (getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &fd, &l) == 0 && fd >= 0) {
                (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
                return fd;
        }
        if (pid <= 0)
                return -ESRCH;
        fd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (fd < 0)
                return gs_neg_errno();
        (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
        return fd;
}

/* Whether a new connection of process pid on a must be refused: 0, or
 * which cap refuses it (1-4: its refusals are logged once per allocation
 * and cap, then counted), with why. */
static int refuse_conn(struct gs_agent *ag, struct gs_allocation *a, pid_t pid, char *why, size_t whylen)
{
        const struct gs_config *c = &ag->node.cfg;
        uint32_t mine = 0;

        if (a->releasing) {
                snprintf(why, whylen, "allocation is being released");
                return 1;
        }
        if (ag->nconns >= c->max_conns) {
                snprintf(why, whylen, "the agent serves its maximum of %u connections (maxConnections)", c->max_conns);
                return 2;
        }
        if (a->nprocs >= c->max_conns_per_alloc) {
                snprintf(why, whylen, "too many connections in this allocation (maxConnectionsPerAllocation %u)",
                         c->max_conns_per_alloc);
                return 3;
        }
        /* A pid from another pid namespace reads 0: no per-process count. */
        /* A closed connection is none (the process may be reclaiming it). */
        for (const struct gs_proc *q = a->procs; pid > 0 && q; q = q->next)
                mine += q->pid == pid && q->state != GS_PROC_CLOSED;
        if (mine >= c->max_conns_per_proc) {
                snprintf(why, whylen, "process %d has %u connections already (maxConnectionsPerProcess)", pid, mine);
                return 4;
        }
        return 0;
}

void gs_proc_on_listen(void *data, uint32_t events)
{
        struct gs_allocation *a = data;
        struct gs_agent *ag = gs_agent_of(a->node);

        (void)events;
        for (;;) {
                struct ucred cred;
                socklen_t l = sizeof(cred);
                struct gs_proc *p;
                char why[160];
                int sock, sndbuf = 4 << 20;

                sock = accept4(a->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (sock < 0) {
                        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                                log_warn_rep(gs_logrep_key(a->id), "allocation %s: accept: %m", a->id);
                        return;
                }
                if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &l) < 0) {
                        log_warn_rep(gs_logrep_key(a->id), "allocation %s: SO_PEERCRED: %m", a->id);
                        close(sock);
                        continue;
                }
                int cap = refuse_conn(ag, a, cred.pid, why, sizeof(why));
                if (cap) {
                        char junk[sizeof(struct gs_sock_hello) + 64];
                        log_warn_rep(gs_logrep_key(a->id) + (uint64_t)cap, "process %d on allocation %s refused: %s",
                                     cred.pid, a->id, why);
                        gs_sockmsg_error(sock, -EMFILE, why);
                        /* Closing with its HELLO unread would reset the peer
                         * and lose the ERROR: stop it sending, drain, close. */
                        (void)shutdown(sock, SHUT_RD);
                        while (recv(sock, junk, sizeof(junk), MSG_DONTWAIT) > 0)
                                ;
                        close(sock);
                        continue;
                }
                /* Grants of a large request are queued before the reply: give
                 * them room (FORCE works with CAP_NET_ADMIN; else capped). */
                if (setsockopt(sock, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf)) < 0)
                        (void)setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
                p = calloc(1, sizeof(*p));
                if (!p) {
                        close(sock);
                        continue;
                }
                p->agent = ag;
                p->alloc = a;
                p->id = ++ag->next_proc_id;
                p->pid = cred.pid;
                p->start = cred.pid > 0 ? gs_ledger_pid_start(cred.pid) : 0;
                p->uid = cred.uid;
                p->sock = sock;
                p->shmfd = -1;
                p->wake_fd = -1;
                p->notify_fd = -1;
                p->pidfd = open_pidfd(sock, cred.pid);
                if (p->pidfd < 0) {
                        log_warn("process %d: no pidfd (%s): its memory returns when its socket closes", cred.pid,
                                 strerror(-p->pidfd));
                        p->pidfd = -1;
                }
                snprintf(p->comm, sizeof(p->comm), "?");
                p->hello_deadline_ms = gs_mono_ms() + GS_PROC_HELLO_MS;
                gs_loop_timer_arm(&ag->hello_timer, p->hello_deadline_ms);
                p->sock_io.fd = p->pidfd_io.fd = -1;
                p->next = a->procs;
                a->procs = p;
                a->nprocs++;
                ag->nconns++;
                if (gs_loop_io_add(ag->node.loop, &p->sock_io, sock, EPOLLIN | EPOLLRDHUP, on_sock, p) < 0 ||
                    (p->pidfd >= 0 &&
                     gs_loop_io_add(ag->node.loop, &p->pidfd_io, p->pidfd, EPOLLIN, gs_proc_on_pidfd, p) < 0)) {
                        gs_proc_destroy(ag, p, NULL);
                        continue;
                }
        }
}

static void on_sock(void *data, uint32_t events)
{
        struct gs_proc *p = data;
        struct gs_agent *ag = p->agent;
        char err[256];
        int r;

        if (p->state == GS_PROC_HELLO) {
                r = gs_proc_on_hello(ag, p, err, sizeof(err));
                if (r > 0)
                        return;
                if (r < 0) {
                        log_warn_rep(gs_logrep_key(p->alloc->id), "process %d on allocation %s refused: %s", p->pid,
                                     p->alloc->id, err);
                        if (r != -ECONNRESET)
                                gs_sockmsg_error(p->sock, r, err);
                        /* It never got memory: nothing to keep. */
                        gs_proc_destroy(ag, p, NULL);
                }
                return;
        }
        if (p->state == GS_PROC_RECLAIM) {
                r = gs_proc_on_reclaim(ag, p, err, sizeof(err));
                if (r >= 0)
                        return;
                log_warn_rep(gs_logrep_key(p->alloc->id), "process %d on allocation %s: %s", p->pid, p->alloc->id, err);
                if (r != -ECONNRESET)
                        gs_sockmsg_error(p->sock, r, err);
                /* It keeps what it holds until it exits. */
                gs_proc_close_conn(ag, p);
                if (p->pidfd < 0 || pidfd_exited(p->pidfd))
                        gs_proc_destroy(ag, p, "exited");
                return;
        }
        if (p->state == GS_PROC_ACTIVE) {
                char junk[64];
                ssize_t n = recv(p->sock, junk, sizeof(junk), MSG_DONTWAIT);
                if (n < 0 && (errno == EAGAIN || errno == EINTR) && !(events & (EPOLLHUP | EPOLLRDHUP)))
                        return;
                if (n > 0)
                        log_warn_rep(gs_logrep_key(p->alloc->id),
                                     "process %d of allocation %s sent data on its socket after HELLO; "
                                     "dropped",
                                     p->pid, p->alloc->id);
                gs_proc_close_conn(ag, p);
        }
        if (p->pidfd < 0 || pidfd_exited(p->pidfd))
                gs_proc_destroy(ag, p, "exited");
}

int64_t gs_proc_tick(void *data, int64_t now)
{
        struct gs_agent *ag = data;
        int64_t next = GS_LOOP_NEVER;

        for (struct gs_allocation *a = ag->node.allocs; a; a = a->next) {
                struct gs_proc *p = a->procs, *nx;
                for (; p; p = nx) {
                        nx = p->next;
                        if (p->state == GS_PROC_RECLAIM && p->hello_deadline_ms <= now) {
                                log_warn_rep(gs_logrep_key(a->id),
                                             "process %d on allocation %s did not finish its reclaim in %d ms; "
                                             "it keeps what it holds",
                                             p->pid, a->id, GS_PROC_RECLAIM_MS);
                                gs_sockmsg_error(p->sock, -ETIMEDOUT, "no reclaim in time");
                                gs_proc_close_conn(ag, p);
                                continue;
                        }
                        if (p->state == GS_PROC_RECLAIM && p->hello_deadline_ms < next)
                                next = p->hello_deadline_ms;
                        if (p->state != GS_PROC_HELLO)
                                continue;
                        if (p->hello_deadline_ms <= now) {
                                log_warn_rep(gs_logrep_key(a->id),
                                             "process %d on allocation %s sent no HELLO in %d ms; dropped", p->pid,
                                             a->id, GS_PROC_HELLO_MS);
                                gs_sockmsg_error(p->sock, -ETIMEDOUT, "no HELLO in time");
                                gs_proc_destroy(ag, p, NULL);
                                continue;
                        }
                        if (p->hello_deadline_ms < next)
                                next = p->hello_deadline_ms;
                }
        }
        return next;
}
