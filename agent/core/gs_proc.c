/* gs_proc.c — see gs_proc.h. */
#include "gs_proc.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "gs_allocs.h"
#include "gs_gpu.h"
#include "gs_log.h"
#include "gs_ring.h"
#include "gs_sockmsg.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
#ifndef F_SEAL_SEAL
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#endif

int gs_proc_check_hello(const void *buf, size_t n, char *err, size_t errlen)
{
        struct gs_sock_hello h;

        if (n != sizeof(h)) {
                snprintf(err, errlen, "HELLO of %zu bytes, expected %zu", n, sizeof(h));
                return -EPROTO;
        }
        memcpy(&h, buf, sizeof(h));
        if (h.h.magic != GS_WIRE_MAGIC) {
                snprintf(err, errlen, "bad magic 0x%08x", h.h.magic);
                return -EPROTO;
        }
        if (h.h.version != GS_WIRE_VERSION) {
                snprintf(err, errlen, "protocol version %u, this agent speaks %u", h.h.version,
                         GS_WIRE_VERSION);
                return -EPROTO;
        }
        if (h.h.type != GS_SOCK_HELLO || h.h.len != sizeof(h) || h.h.reserved) {
                snprintf(err, errlen, "not a HELLO (type %u, len %u)", h.h.type, h.h.len);
                return -EPROTO;
        }
        if (h.flags & ~GS_HELLO_RECLAIM) {
                snprintf(err, errlen, "HELLO flags 0x%x, this agent knows 0x%x", h.flags, GS_HELLO_RECLAIM);
                return -EPROTO;
        }
        return 0;
}

static void stop_worker(struct gs_proc *p)
{
        gs_workers_remove(p->agent->workers, &p->went);
}

static void on_sock(void *data, uint32_t events);
static void on_pidfd(void *data, uint32_t events);

/* Ends the connection (the process may live on). */
static void close_conn(struct gs_agent *ag, struct gs_proc *p)
{
        stop_worker(p);
        /* Its exports die with the connection (no FREE can reach us any
         * more to retire them), before its blocks may go. */
        gs_ipc_unexport_all(&p->alloc->ipc, p);
        if (p->sock >= 0) {
                gs_loop_io_del(ag->loop, &p->sock_io);
                gs_closep(&p->sock);
                /* A hook waiting for a reply wakes and finds the socket
                 * closed now, not a sleep slice later. */
                if (p->shm)
                        gs_doorbell_ring(&p->shm->hook_wake, &p->shm->hook_sleeping);
        }
        p->state = GS_PROC_CLOSED;
}

/* The process is gone: frees everything it had. */
static void destroy(struct gs_agent *ag, struct gs_proc *p, const char *why)
{
        struct gs_allocation *a = p->alloc;
        bool changed = false;

        close_conn(ag, p);
        if (p->pidfd >= 0) {
                gs_loop_io_del(ag->loop, &p->pidfd_io);
                gs_closep(&p->pidfd);
        }
        for (uint32_t i = 0; i < p->ngpus; i++) {
                struct gs_gpu *g = p->gpus[i].g;
                uint32_t before = g->last_borrowed;
                if (!p->gpus[i].pp)
                        continue;
                pthread_mutex_lock(&g->lock);
                gs_vmm_clear(g, &p->gpus[i].vmm);
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
                                        gs_allocs_outside_slots(ag, &a->parts[i]),
                                        &p->gpus[i].outside_charge, 0, false);
                gs_gpu_check_lending(g);
                changed |= before != g->last_borrowed;
                pthread_mutex_unlock(&g->lock);
        }
        if (p->shm)
                munmap(p->shm, sizeof(*p->shm));
        gs_closep(&p->shmfd);
        gs_closep(&p->wake_fd);
        for (struct gs_proc **pp = &a->procs; *pp; pp = &(*pp)->next)
                if (*pp == p) {
                        *pp = p->next;
                        a->nprocs--;
                        ag->nconns--;
                        break;
                }
        if (why)
                log_info("process %d (%s) of allocation %s %s, its memory is back (%llu requests served)",
                         p->pid, p->comm, a->id, why,
                         (unsigned long long)__atomic_load_n(&p->nrequests, __ATOMIC_RELAXED));
        free(p->grants);
        free(p->grant_fds);
        gs_agent_want_scan(ag);
        gs_loop_defer_free(ag->loop, p);
        gs_allocs_reap(ag, a);
        (void)changed; /* the worker-side poke covers lending; nothing else changed */
}

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

/* Whether a new connection of process pid on a must be refused (why). */
static bool refuse_conn(struct gs_agent *ag, struct gs_allocation *a, pid_t pid, char *why,
                        size_t whylen)
{
        const struct gs_config *c = &ag->cfg;
        uint32_t mine = 0;

        if (a->releasing) {
                snprintf(why, whylen, "allocation is being released");
                return true;
        }
        if (ag->nconns >= c->max_conns) {
                snprintf(why, whylen, "the agent serves its maximum of %u connections (maxConnections)",
                         c->max_conns);
                return true;
        }
        if (a->nprocs >= c->max_conns_per_alloc) {
                snprintf(why, whylen, "too many connections in this allocation (maxConnectionsPerAllocation %u)",
                         c->max_conns_per_alloc);
                return true;
        }
        /* A pid from another pid namespace reads 0: no per-process count. */
        /* A closed connection is none (the process may be reclaiming it). */
        for (const struct gs_proc *q = a->procs; pid > 0 && q; q = q->next)
                mine += q->pid == pid && q->state != GS_PROC_CLOSED;
        if (mine >= c->max_conns_per_proc) {
                snprintf(why, whylen, "process %d has %u connections already (maxConnectionsPerProcess)",
                         pid, mine);
                return true;
        }
        return false;
}

void gs_proc_on_listen(void *data, uint32_t events)
{
        struct gs_allocation *a = data;
        struct gs_agent *ag = a->agent;

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
                                log_warn("allocation %s: accept: %m", a->id);
                        return;
                }
                if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &l) < 0) {
                        log_warn("allocation %s: SO_PEERCRED: %m", a->id);
                        close(sock);
                        continue;
                }
                if (refuse_conn(ag, a, cred.pid, why, sizeof(why))) {
                        char junk[sizeof(struct gs_sock_hello) + 64];
                        log_warn("process %d on allocation %s refused: %s", cred.pid, a->id, why);
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
                p->pidfd = open_pidfd(sock, cred.pid);
                if (p->pidfd < 0) {
                        log_warn("process %d: no pidfd (%s): its memory returns when its socket closes",
                                 cred.pid, strerror(-p->pidfd));
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
                if (gs_loop_io_add(ag->loop, &p->sock_io, sock, EPOLLIN | EPOLLRDHUP, on_sock, p) < 0 ||
                    (p->pidfd >= 0 && gs_loop_io_add(ag->loop, &p->pidfd_io, p->pidfd, EPOLLIN,
                                                     on_pidfd, p) < 0)) {
                        destroy(ag, p, NULL);
                        continue;
                }
        }
}

static int make_segment(struct gs_proc *p, char *err, size_t errlen)
{
        int fd, r;
        void *m;

        fd = memfd_create("gshare-rings", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0 || ftruncate(fd, sizeof(struct gs_shm)) < 0) {
                r = gs_neg_errno();
                snprintf(err, errlen, "memfd: %s", strerror(-r));
                goto fail;
        }
        m = mmap(NULL, sizeof(struct gs_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
                r = gs_neg_errno();
                snprintf(err, errlen, "mmap: %s", strerror(-r));
                goto fail;
        }
        gs_shm_init(m);
        /* Fixed size for good: a peer that could shrink it would SIGBUS us. */
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
                r = gs_neg_errno();
                snprintf(err, errlen, "sealing the segment: %s", strerror(-r));
                munmap(m, sizeof(struct gs_shm));
                goto fail;
        }
        p->shm = m;
        p->shmfd = fd;
        return 0;
fail:
        gs_closep(&fd);
        return r;
}


/* The allocation's id as the ledger keeps it. */
static uint64_t alloc_num(const struct gs_allocation *a)
{
        return strtoull(a->id, NULL, 16);
}

/* One gs_pproc per GPU of the allocation, with their ledger tags. */
static int gpus_init(struct gs_agent *ag, struct gs_proc *p, char *err, size_t errlen)
{
        struct gs_allocation *a = p->alloc;
        int r;

        for (uint32_t i = 0; i < a->nparts; i++) {
                struct gs_part *part = &a->parts[i];
                struct gs_proc_gpu *pg = &p->gpus[i];
                struct gs_gpu *g = &ag->gpus[part->gpu];
                uint64_t slots = 2 * ((uint64_t)part->quota_chunks +
                                      ag->cfg.balloon_cap_bytes / g->chunk_bytes);

                if (slots > (1u << 20))
                        slots = 1u << 20;
                pg->g = g;
                pg->nslots = (uint32_t)(slots ? slots : 1);
                pg->quota_bytes = (uint64_t)part->quota_chunks * g->chunk_bytes;
                pg->vmm.pa = part->pa;
                pg->vmm.nslots = pg->nslots;
                pg->tag = (struct gs_ledger_tag){ (uint32_t)p->pid, GS_LEDGER_SLOT, p->start, alloc_num(a) };
                pg->vtag = pg->tag;
                pg->vtag.kind = GS_LEDGER_VMM;
                pg->vmm.cs.tag = p->start ? &pg->vtag : NULL;
                pthread_mutex_lock(&g->lock);
                r = gs_pproc_new(part->pa, pg->nslots, &pg->pp);
                if (r == 0 && p->start)
                        gs_pproc_set_tag(pg->pp, &pg->tag);
                pthread_mutex_unlock(&g->lock);
                if (r < 0) {
                        snprintf(err, errlen, "cannot create the process on GPU %u: %s", g->index,
                                 strerror(-r));
                        return r;
                }
                p->ngpus = i + 1;
        }
        return 0;
}

/* A reclaiming process p: a closed record of the same process (a ghost
 * from the ledger, or a connection it lost) hands p everything it holds. */
static void take_over_closed(struct gs_agent *ag, struct gs_proc *p)
{
        struct gs_proc *q;

        for (q = p->alloc->procs; q; q = q->next)
                if (q != p && q->state == GS_PROC_CLOSED && q->pid == p->pid && q->start == p->start && p->start)
                        break;
        if (!q)
                return;
        for (uint32_t i = 0; i < p->ngpus && i < q->ngpus; i++) {
                struct gs_proc_gpu *pg = &p->gpus[i], *qg = &q->gpus[i];
                struct gs_gpu *g = pg->g;

                pthread_mutex_lock(&g->lock);
                gs_pproc_del(pg->pp);
                pg->pp = qg->pp;
                qg->pp = NULL;
                gs_pproc_set_tag(pg->pp, &pg->tag);
                pg->vpp = qg->vpp;
                qg->vpp = NULL;
                if (pg->vpp)
                        gs_pproc_set_tag(pg->vpp, &pg->vtag);
                pg->vmm = qg->vmm;
                qg->vmm = (struct gs_vmm_set){ .pa = qg->vmm.pa, .nslots = qg->vmm.nslots };
                pg->vmm.cs.tag = &pg->vtag;
                if (pg->vmm.cs.pp)
                        gs_pproc_set_tag(pg->vmm.cs.pp, &pg->vtag);
                pg->lvmm = qg->lvmm;
                pg->nlvmm = qg->nlvmm;
                pg->lvmm_bytes = qg->lvmm_bytes;
                qg->lvmm = NULL;
                qg->nlvmm = 0;
                qg->lvmm_bytes = 0;
                pg->outside_charge = qg->outside_charge;
                pg->ctx_expect = qg->ctx_expect;
                pg->outside_measured = qg->outside_measured;
                pg->ctx_promised = qg->ctx_promised;
                qg->outside_charge = qg->outside_measured = qg->ctx_promised = 0;
                pthread_mutex_unlock(&g->lock);
        }
        log_info("process %d of allocation %s reconnected: it keeps what it held (#%llu)", p->pid, p->alloc->id,
                 (unsigned long long)q->id);
        destroy(ag, q, NULL);
}

/* HELLO arrived (or not): registers the process. */
static int on_hello(struct gs_agent *ag, struct gs_proc *p, char *err, size_t errlen)
{
        struct gs_allocation *a = p->alloc;
        char buf[sizeof(struct gs_sock_hello) + 64];
        struct gs_sock_welcome w;
        struct gs_sock_hello h;
        bool trunc;
        ssize_t n;
        int r;

        n = gs_sockmsg_recv(p->sock, buf, sizeof(buf), &trunc);
        if (n == -EAGAIN)
                return 1; /* spurious */
        if (n <= 0) {
                snprintf(err, errlen, "closed before HELLO");
                return -ECONNRESET;
        }
        if (trunc) {
                snprintf(err, errlen, "oversized HELLO");
                return -EPROTO;
        }
        r = gs_proc_check_hello(buf, (size_t)n, err, errlen);
        if (r < 0)
                return r;
        memcpy(&h, buf, sizeof(h));
        for (size_t i = 0; i < sizeof(h.comm) && h.comm[i]; i++)
                p->comm[i] = (h.comm[i] >= 0x20 && h.comm[i] < 0x7f) ? h.comm[i] : '?';
        p->comm[sizeof(h.comm)] = '\0';
        if (!p->comm[0])
                snprintf(p->comm, sizeof(p->comm), "?");

        r = make_segment(p, err, errlen);
        if (r < 0)
                return r;
        memset(&w, 0, sizeof(w));
        gs_sockmsg_hdr(&w.h, GS_SOCK_WELCOME, sizeof(w));
        w.h.reserved = GS_FEAT_RECLAIM | GS_FEAT_GIVEBACK;
        w.ngpus = a->nparts;
        w.shm_bytes = sizeof(struct gs_shm);
        w.proc_id = p->id;
        r = gpus_init(ag, p, err, errlen);
        if (r < 0)
                return r;
        p->max_grants = 1;
        for (uint32_t i = 0; i < a->nparts; i++) {
                struct gs_proc_gpu *pg = &p->gpus[i];

                memcpy(w.gpus[i].uuid, pg->g->uuid_raw, 16);
                w.gpus[i].quota_bytes = pg->quota_bytes;
                w.gpus[i].chunk_bytes = pg->g->chunk_bytes;
                w.gpus[i].max_slots = pg->nslots;
                if (pg->nslots > p->max_grants)
                        p->max_grants = pg->nslots;
        }
        if (h.flags & GS_HELLO_RECLAIM)
                take_over_closed(ag, p);
        if (p->max_grants > GS_MAX_GRANTS_PER_REPLY)
                p->max_grants = GS_MAX_GRANTS_PER_REPLY;
        p->grants = calloc(p->max_grants, sizeof(*p->grants));
        p->grant_fds = calloc(p->max_grants, sizeof(*p->grant_fds));
        if (!p->grants || !p->grant_fds) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        p->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (p->wake_fd < 0) {
                r = gs_neg_errno();
                snprintf(err, errlen, "eventfd: %s", strerror(-r));
                return r;
        }
        /* WELCOME only for a connection that will be served. */
        /* Asleep from the start: the first request rings the doorbell. */
        __atomic_store_n(&p->shm->agent_sleeping, 1, __ATOMIC_SEQ_CST);
        if (!(h.flags & GS_HELLO_RECLAIM)) {
                r = gs_workers_add(ag->workers, &p->went, p, &a->wgroup, p->wake_fd, &p->stop);
                if (r < 0) {
                        snprintf(err, errlen, "no worker slot: %s", strerror(-r));
                        return r;
                }
        }
        {
                const int fds[2] = { p->shmfd, p->wake_fd };
                r = gs_sockmsg_send_fds(p->sock, &w, sizeof(w), fds, 2, NULL);
        }
        if (r < 0) {
                snprintf(err, errlen, "sending WELCOME: %s", strerror(-r));
                return -ECONNRESET;
        }
        if (h.flags & GS_HELLO_RECLAIM) {
                p->state = GS_PROC_RECLAIM;
                p->hello_deadline_ms = gs_mono_ms() + GS_PROC_RECLAIM_MS;
                gs_loop_timer_arm(&ag->hello_timer, p->hello_deadline_ms);
                return 0;
        }
        p->state = GS_PROC_ACTIVE;
        gs_agent_want_scan(ag);
        log_info("process %d (%s, uid %u) registered on allocation %s as #%llu", p->pid, p->comm,
                 (unsigned)p->uid, a->id, (unsigned long long)p->id);
        return 0;
}

static void fill_shed(void *ctx, uint32_t chunk)
{
        struct gs_gpu *g = ctx;

        /* Filler memory: never exported, nobody may hold it. */
        g->chunks[chunk].owner = NULL;
        (void)gs_gpu_chunk_fill(g, chunk);
}

/* pre: the GPU's lock.  vpp keeps as many chunks as the legacy VMM
 * allocations' bytes need: more are given back (their fillers died with
 * the old agent), fewer (no ledger said so) are adopted, standing for
 * memory the process holds. */
static void legacy_vmm_settle(struct gs_proc *p, struct gs_proc_gpu *pg, uint32_t gi)
{
        struct gs_gpu *g = pg->g;
        uint32_t keep = (uint32_t)((pg->lvmm_bytes + g->chunk_bytes - 1) / g->chunk_bytes);
        struct gs_part *part = &p->alloc->parts[gi];

        if (!pg->vpp && keep == 0)
                return;
        if (!pg->vpp) {
                if (gs_pproc_new(part->pa, pg->nslots, &pg->vpp) < 0)
                        return;
                gs_pproc_set_tag(pg->vpp, &pg->vtag);
        }
        /* What goes stood for the old agent's fillers: memory it never
         * exported, free since it died and made into this agent's free
         * chunks at its start: the chunks that go back take theirs. */
        uint32_t shed = gs_pproc_legacy_shed_fill(pg->vpp, keep, fill_shed, g);
        if (shed)
                log_debug("GPU %u: %u chunks behind VMM fillers of process %d given back", g->index, shed, p->pid);
        for (uint32_t s = 0; s < pg->nslots && gs_pproc_legacy_chunks(pg->vpp) < keep; s++) {
                uint32_t chunk;
                if (gs_pproc_slot_chunk(pg->vpp, s) != UINT32_MAX)
                        continue;
                if (gs_pproc_adopt_capped(pg->vpp, s, &chunk) < 0)
                        break;
                (void)gs_gpu_chunk_orphan(g, chunk);
                g->chunks[chunk].owner = p->alloc; /* the process holds that memory */
        }
        gs_gpu_check_lending(g);
}

int gs_proc_legacy_vmm_release(struct gs_proc_gpu *pg, uint64_t id)
{
        for (uint32_t i = 0; i < pg->nlvmm; i++) {
                if (pg->lvmm[i].id != id)
                        continue;
                pg->lvmm_bytes -= pg->lvmm[i].size;
                pg->lvmm[i] = pg->lvmm[--pg->nlvmm];
                if (pg->vpp)
                        (void)gs_pproc_legacy_shed(pg->vpp, (uint32_t)((pg->lvmm_bytes + pg->g->chunk_bytes - 1) /
                                                                       pg->g->chunk_bytes));
                return 0;
        }
        return -ENOENT;
}

/* One GS_SOCK_RECLAIM message of a reclaiming process: 1 for more to
 * come, 0 when the process is served from now on, or a negative errno
 * with err set (its connection ends; it keeps what it holds). */
static int on_reclaim(struct gs_agent *ag, struct gs_proc *p, char *err, size_t errlen)
{
        static struct gs_sock_reclaim m; /* main thread only */
        const size_t head = offsetof(struct gs_sock_reclaim, item);
        bool trunc;
        ssize_t n;
        int r = 0;

        n = gs_sockmsg_recv(p->sock, &m, sizeof(m), &trunc);
        if (n == -EAGAIN)
                return 1;
        if (n <= 0) {
                snprintf(err, errlen, "closed during its reclaim");
                return -ECONNRESET;
        }
        if ((size_t)n < head || trunc || m.h.magic != GS_WIRE_MAGIC ||
            m.h.version != GS_WIRE_VERSION || m.h.type != GS_SOCK_RECLAIM || m.h.len != (size_t)n ||
            m.count > GS_RECLAIM_MAX_ITEMS || (size_t)n != head + 8 * (size_t)m.count) {
                snprintf(err, errlen, "malformed reclaim message (%zd bytes)", n);
                return -EPROTO;
        }
        if (m.kind == GS_RECLAIM_END) {
                for (uint32_t i = 0; i < p->ngpus; i++) {
                        struct gs_gpu *g = p->gpus[i].g;
                        pthread_mutex_lock(&g->lock);
                        r = gs_pproc_legacy_seal(p->gpus[i].pp, (m.flags >> i) & 1);
                        legacy_vmm_settle(p, &p->gpus[i], i);
                        pthread_mutex_unlock(&g->lock);
                        if (r < 0)
                                log_warn("process %d of allocation %s: its blocks on GPU %u are kept opaque: %s",
                                         p->pid, p->alloc->id, g->index, strerror(-r));
                }
                r = gs_workers_add(ag->workers, &p->went, p, &p->alloc->wgroup, p->wake_fd, &p->stop);
                if (r < 0) {
                        snprintf(err, errlen, "no worker slot: %s", strerror(-r));
                        return r;
                }
                struct gs_sock_error done = { 0 };
                gs_sockmsg_hdr(&done.h, GS_SOCK_RECLAIM_DONE, sizeof(done));
                if (send(p->sock, &done, sizeof(done), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(done)) {
                        snprintf(err, errlen, "sending RECLAIM_DONE: %s", strerror(errno));
                        return -ECONNRESET;
                }
                p->state = GS_PROC_ACTIVE;
                gs_agent_want_scan(ag);
                log_info("process %d (%s) reclaimed its memory on allocation %s as #%llu", p->pid, p->comm,
                         p->alloc->id, (unsigned long long)p->id);
                return 0;
        }
        if (m.gpu >= p->ngpus ||
            (m.kind != GS_RECLAIM_SLOTS && m.kind != GS_RECLAIM_BLOCKS && m.kind != GS_RECLAIM_VMM) ||
            (m.kind != GS_RECLAIM_SLOTS && m.count % 2)) {
                snprintf(err, errlen, "bad reclaim message (GPU %u, kind %u, %u items)", m.gpu, m.kind, m.count);
                return -EPROTO;
        }
        struct gs_proc_gpu *pg = &p->gpus[m.gpu];
        if (m.kind == GS_RECLAIM_VMM) {
                /* Main thread; the workers do not serve p yet. */
                for (uint32_t k = 0; k + 1 < m.count; k += 2) {
                        uint64_t id = m.item[k], size = m.item[k + 1];
                        if (!size || size % GS_VMM_ALIGN || size > (uint64_t)pg->nslots * pg->g->chunk_bytes ||
                            pg->nlvmm >= GS_VMM_MAX_PER_PROC) {
                                snprintf(err, errlen, "bad reclaimed VMM allocation %llu of %llu bytes",
                                         (unsigned long long)id, (unsigned long long)size);
                                return -EPROTO;
                        }
                        if (!pg->lvmm || (pg->nlvmm >= 16 && !(pg->nlvmm & (pg->nlvmm - 1)))) {
                                struct gs_legacy_vmm *t = realloc(pg->lvmm, (pg->lvmm ? 2 * pg->nlvmm : 16) *
                                                                                    sizeof(*t));
                                if (!t) {
                                        snprintf(err, errlen, "out of memory");
                                        return -ENOMEM;
                                }
                                pg->lvmm = t;
                        }
                        pg->lvmm[pg->nlvmm++] = (struct gs_legacy_vmm){ id, size };
                        pg->lvmm_bytes += size;
                        if (pg->vmm.next_id < id)
                                pg->vmm.next_id = id; /* new ids never meet old ones */
                }
                return 1;
        }
        pthread_mutex_lock(&pg->g->lock);
        for (uint32_t k = 0; k < m.count && r == 0; k++) {
                if (m.kind == GS_RECLAIM_SLOTS) {
                        uint32_t chunk;
                        if (m.item[k] >= pg->nslots) {
                                r = -EINVAL;
                                break;
                        }
                        r = gs_pproc_legacy_claim(pg->pp, (uint32_t)m.item[k], &chunk);
                        if (r == 0 && chunk != UINT32_MAX && gs_gpu_chunk_orphan(pg->g, chunk) < 0)
                                log_warn("GPU %u: no chunk without memory to stand for slot %u of process %d",
                                         pg->g->index, (unsigned)m.item[k], p->pid);
                        if (r == 0 && chunk != UINT32_MAX)
                                pg->g->chunks[chunk].owner = p->alloc;
                        if (r == -ENOSPC || r == -ENOMEM) {
                                /* Not in the ledger: only the process says so,
                                 * and its quota cannot cover it.  Serving it
                                 * would hand that slot out again. */
                                snprintf(err, errlen, "it maps slot %u on GPU %u, which the ledger does not name and "
                                         "its quota cannot cover", (unsigned)m.item[k], pg->g->index);
                                pthread_mutex_unlock(&pg->g->lock);
                                return -EDQUOT;
                        }
                } else {
                        r = gs_pproc_legacy_block(pg->pp, m.item[k], m.item[k + 1]);
                        k++;
                }
        }
        gs_gpu_check_lending(pg->g);
        pthread_mutex_unlock(&pg->g->lock);
        if (r < 0) {
                snprintf(err, errlen, "reclaim on GPU %u refused: %s", m.gpu, strerror(-r));
                return r == -ENOMEM ? r : -EPROTO;
        }
        return 1;
}

static void on_sock(void *data, uint32_t events)
{
        struct gs_proc *p = data;
        struct gs_agent *ag = p->agent;
        char err[256];
        int r;

        if (p->state == GS_PROC_HELLO) {
                r = on_hello(ag, p, err, sizeof(err));
                if (r > 0)
                        return;
                if (r < 0) {
                        log_warn("process %d on allocation %s refused: %s", p->pid, p->alloc->id, err);
                        if (r != -ECONNRESET)
                                gs_sockmsg_error(p->sock, r, err);
                        /* It never got memory: nothing to keep. */
                        destroy(ag, p, NULL);
                }
                return;
        }
        if (p->state == GS_PROC_RECLAIM) {
                r = on_reclaim(ag, p, err, sizeof(err));
                if (r >= 0)
                        return;
                log_warn("process %d on allocation %s: %s", p->pid, p->alloc->id, err);
                if (r != -ECONNRESET)
                        gs_sockmsg_error(p->sock, r, err);
                /* It keeps what it holds until it exits. */
                close_conn(ag, p);
                if (p->pidfd < 0 || pidfd_exited(p->pidfd))
                        destroy(ag, p, "exited");
                return;
        }
        if (p->state == GS_PROC_ACTIVE) {
                char junk[64];
                ssize_t n = recv(p->sock, junk, sizeof(junk), MSG_DONTWAIT);
                if (n < 0 && (errno == EAGAIN || errno == EINTR) && !(events & (EPOLLHUP | EPOLLRDHUP)))
                        return;
                if (n > 0)
                        log_warn("process %d of allocation %s sent data on its socket after HELLO; dropped",
                                 p->pid, p->alloc->id);
                close_conn(ag, p);
        }
        if (p->pidfd < 0 || pidfd_exited(p->pidfd))
                destroy(ag, p, "exited");
}

static void on_pidfd(void *data, uint32_t events)
{
        struct gs_proc *p = data;

        (void)events;
        destroy(p->agent, p, p->state == GS_PROC_HELLO ? NULL : "exited");
}

int64_t gs_proc_tick(void *data, int64_t now)
{
        struct gs_agent *ag = data;
        int64_t next = GS_LOOP_NEVER;

        for (struct gs_allocation *a = ag->allocs; a; a = a->next) {
                struct gs_proc *p = a->procs, *nx;
                for (; p; p = nx) {
                        nx = p->next;
                        if (p->state == GS_PROC_RECLAIM && p->hello_deadline_ms <= now) {
                                log_warn("process %d on allocation %s did not finish its reclaim in %d ms; "
                                         "it keeps what it holds", p->pid, a->id, GS_PROC_RECLAIM_MS);
                                gs_sockmsg_error(p->sock, -ETIMEDOUT, "no reclaim in time");
                                close_conn(ag, p);
                                continue;
                        }
                        if (p->state == GS_PROC_RECLAIM && p->hello_deadline_ms < next)
                                next = p->hello_deadline_ms;
                        if (p->state != GS_PROC_HELLO)
                                continue;
                        if (p->hello_deadline_ms <= now) {
                                log_warn("process %d on allocation %s sent no HELLO in %d ms; dropped",
                                         p->pid, a->id, GS_PROC_HELLO_MS);
                                gs_sockmsg_error(p->sock, -ETIMEDOUT, "no HELLO in time");
                                destroy(ag, p, NULL);
                                continue;
                        }
                        if (p->hello_deadline_ms < next)
                                next = p->hello_deadline_ms;
                }
        }
        return next;
}

void gs_proc_kill_all(struct gs_agent *ag)
{
        /* A releasing allocation leaves the list with its last process, but
         * its memory lives until the graveyard is emptied: a->next stays valid. */
        for (struct gs_allocation *a = ag->allocs; a; a = a->next)
                while (a->procs)
                        destroy(ag, a->procs, NULL);
}

/* ---- restart: the previous agent's processes (gs_ledger.h) ---- */

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
        q->sock = q->shmfd = q->wake_fd = -1;
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
        if (gpus_init(ag, q, err, sizeof(err)) < 0 ||
            gs_loop_io_add(ag->loop, &q->pidfd_io, q->pidfd, EPOLLIN, on_pidfd, q) < 0) {
                log_error("process %d of allocation %s: %s", q->pid, a->id, err);
                destroy(ag, q, NULL);
                return NULL;
        }
        log_info("process %d (%s) of allocation %s held memory from before the restart: charged until it "
                 "reconnects or exits (#%llu)", q->pid, q->comm, a->id, (unsigned long long)q->id);
        return q;
}

static struct gs_allocation *alloc_by_num(struct gs_agent *ag, uint64_t num, uint32_t gpu, uint32_t *ret_part)
{
        for (struct gs_allocation *a = ag->allocs; a; a = a->next) {
                if (a->releasing || alloc_num(a) != num)
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

uint32_t gs_proc_ask_give_back(struct gs_allocation *a, uint32_t i)
{
        uint32_t n = 0;

        for (struct gs_proc *p = a->procs; p; p = p->next) {
                struct gs_pproc_stats st;
                if (p->state != GS_PROC_ACTIVE || i >= p->ngpus || !p->gpus[i].pp || !p->shm)
                        continue;
                gs_pproc_stats(p->gpus[i].pp, &st);
                if (st.chunks_empty == 0)
                        continue;
                __atomic_add_fetch(&p->shm->give_back, 1, __ATOMIC_RELEASE);
                n++;
        }
        return n;
}

void gs_proc_give_back_sweep(struct gs_agent *ag)
{
        for (struct gs_allocation *a = ag->allocs; a; a = a->next)
                for (uint32_t i = 0; i < a->nparts; i++) {
                        struct gs_gpu *g = &ag->gpus[a->parts[i].gpu];
                        pthread_mutex_lock(&g->lock);
                        if (a->parts[i].give_back_wanted) {
                                a->parts[i].give_back_wanted = false;
                                a->parts[i].others_asked = gs_proc_ask_give_back(a, i);
                        }
                        pthread_mutex_unlock(&g->lock);
                }
        __atomic_add_fetch(&ag->give_back_sweeps, 1, __ATOMIC_ACQ_REL);
}

void gs_proc_pause_all(struct gs_agent *ag)
{
        for (struct gs_allocation *a = ag->allocs; a; a = a->next)
                for (struct gs_proc *p = a->procs; p; p = p->next)
                        if (p->state == GS_PROC_ACTIVE) {
                                stop_worker(p);
                                __atomic_store_n(&p->stop, 0, __ATOMIC_RELEASE);
                        }
}

void gs_proc_resume_all(struct gs_agent *ag)
{
        for (struct gs_allocation *a = ag->allocs; a; a = a->next)
                for (struct gs_proc *p = a->procs; p; p = p->next)
                        if (p->state == GS_PROC_ACTIVE &&
                            gs_workers_add(ag->workers, &p->went, p, &a->wgroup, p->wake_fd, &p->stop) < 0)
                                shutdown(p->sock, SHUT_RDWR); /* no slot: it reconnects */
}

void gs_proc_disconnect_all(struct gs_agent *ag)
{
        for (struct gs_allocation *a = ag->allocs; a; a = a->next)
                for (struct gs_proc *p = a->procs; p; p = p->next)
                        if (p->state != GS_PROC_CLOSED)
                                close_conn(ag, p);
}
