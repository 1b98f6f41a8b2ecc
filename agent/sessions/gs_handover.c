/* gs_handover.c — see gs_handover.h. */
#include "gs_handover.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "gs_allocs.h"
#include "gs_ctlsrv.h"
#include "gs_log.h"
#include "gs_proc.h"
#include "gs_sockdir.h"

#define HO_MAGIC 0x4f485347u /* "GSHO" */
#define HO_VERSION 1u
#define HO_MAX_FDS 250u      /* SCM_MAX_FD is 253 */

enum ho_type { HO_PREPARE = 1, HO_ROOM, HO_TAKE, HO_GPU, HO_CHUNKS, HO_SENT, HO_READY, HO_FAIL };

#define HO_WRITTEN 1u /* a process may have written it */
#define HO_FD 2u      /* its fd comes with this message (else: sent at PREPARE) */

struct ho_ent {
        uint32_t chunk;
        uint32_t flags;
        uint64_t memid;        /* gs_chunk.memid: the memory, whichever chunk holds it */
};

struct ho_msg {
        uint32_t magic;
        uint16_t version, type;
        uint32_t n;            /* CHUNKS: entries (and fds) */
        uint32_t nchunks;      /* GPU: the pool's size */
        uint64_t arg;          /* PREPARE: bytes wanted per GPU; GPU: chunk bytes */
        uint8_t uuid[16];      /* GPU */
        struct ho_ent ent[HO_MAX_FDS];
};

/* The chunks' fds the old agent sent at PREPARE, per GPU, by memid. */
struct ho_snap {
        uint8_t uuid[16];
        uint64_t *memid;
        int *fd;
        size_t n, cap;
};

struct gs_handover {
        int fd;
        int64_t take_ms;       /* when TAKE was sent: the processes wait since */
        struct ho_snap *snap;
        size_t nsnap;
};

static uint32_t fds_in(const struct ho_msg *m)
{
        uint32_t k = 0;

        for (uint32_t i = 0; i < m->n && i < HO_MAX_FDS; i++)
                k += (m->ent[i].flags & HO_FD) != 0;
        return k;
}

static size_t msg_len(const struct ho_msg *m)
{
        return offsetof(struct ho_msg, ent) + (m->type == HO_CHUNKS ? m->n * sizeof(struct ho_ent) : 0);
}

static int ho_send(int fd, struct ho_msg *m, const int *fds, uint32_t nfds)
{
        union {
                struct cmsghdr c;
                char b[CMSG_SPACE(sizeof(int) * HO_MAX_FDS)];
        } u;
        struct iovec iov = { m, msg_len(m) };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        ssize_t n;

        m->magic = HO_MAGIC;
        m->version = HO_VERSION;
        if (nfds) {
                memset(&u, 0, sizeof(u));
                mh.msg_control = u.b;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
                memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
        }
        do
                n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        return n == (ssize_t)iov.iov_len ? 0 : n < 0 ? gs_neg_errno() : -EPROTO;
}

/* One message of type (any if 0), with at most HO_MAX_FDS fds into fds
 * (nfds set), within GS_HANDOVER_STEP_MS. */
static int ho_recv(int fd, struct ho_msg *m, uint16_t type, int *fds, uint32_t *nfds)
{
        union {
                struct cmsghdr c;
                char b[CMSG_SPACE(sizeof(int) * HO_MAX_FDS)];
        } u;
        struct iovec iov = { m, sizeof(*m) };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b) };
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        uint32_t got = 0;
        ssize_t n;
        int r;

        do
                r = poll(&pfd, 1, GS_HANDOVER_STEP_MS);
        while (r < 0 && errno == EINTR);
        if (r == 0)
                return -ETIMEDOUT;
        do
                n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return gs_neg_errno();
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
                        for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                                int x;
                                memcpy(&x, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                                if (fds && got < HO_MAX_FDS)
                                        fds[got++] = x;
                                else
                                        close(x);
                        }
        if (nfds)
                *nfds = got;
        r = 0;
        if (n == 0)
                r = -ECONNRESET;
        else if ((size_t)n < offsetof(struct ho_msg, ent) || m->magic != HO_MAGIC || m->version != HO_VERSION ||
                 (type && m->type != type) || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
                 (m->type == HO_CHUNKS && (m->n > HO_MAX_FDS || (size_t)n != msg_len(m) || got != fds_in(m))))
                r = m->type == HO_FAIL ? -ECANCELED : -EPROTO;
        if (r < 0)
                for (uint32_t i = 0; i < got; i++)
                        close(fds[i]);
        return r;
}

static int sock_path(const struct gs_agent *ag, struct sockaddr_un *sa)
{
        memset(sa, 0, sizeof(*sa));
        sa->sun_family = AF_UNIX;
        if (snprintf(sa->sun_path, sizeof(sa->sun_path), "%s/%s", ag->node.cfg.state_dir, GS_HANDOVER_SOCKET) >=
            (int)sizeof(sa->sun_path))
                return -ENAMETOOLONG;
        return 0;
}

/* ---- the old agent ---- */

/* Drops the memory of up to want bytes of chunks no process holds, per
 * GPU: the new agent's context is made there. */
static void make_room(struct gs_agent *ag, uint64_t want)
{
        for (uint32_t gi = 0; gi < ag->node.ngpus; gi++) {
                struct gs_gpu *g = &ag->node.gpus[gi];
                uint64_t got = 0;

                if (!g->pool)
                        continue;
                /* Free chunks first, then allocations' own free chunks
                 * (made again when granted).  The lock is taken per chunk:
                 * the workers serve on meanwhile. */
                for (int pass = 0; pass < 2 && got < want; pass++)
                        for (uint32_t c = 0; c < g->nchunks && got < want; c++) {
                                gs_gpu_lock(g);
                                if (g->chunks[c].fd >= 0 && g->chunks[c].state != GS_CHUNK_PENDING &&
                                    !gs_pool_chunk_held(g->pool, c) &&
                                    (pass == 1 || gs_pool_chunk_in_sys(g->pool, c))) {
                                        gs_gpu_chunk_drop(g, c);
                                        got += g->chunk_bytes;
                                }
                                gs_gpu_unlock(g);
                        }
                log_info("upgrade: GPU %u: %llu MiB given back for the new agent's context", g->index,
                         (unsigned long long)(got >> 20));
        }
}

/* Sends every GPU's chunks with memory.  snapshot (PREPARE): every one
 * with its fd, and the GPU remembers up to which memid it sent; else
 * (TAKE): every one, with an fd only for memory made since. */
static int send_chunks(struct gs_agent *ag, int fd, bool snapshot)
{
        struct ho_msg *m = calloc(1, sizeof(*m));
        int fds[HO_MAX_FDS], r = 0;

        if (!m)
                return -ENOMEM;
        for (uint32_t gi = 0; gi < ag->node.ngpus && r == 0; gi++) {
                struct gs_gpu *g = &ag->node.gpus[gi];

                if (!g->pool)
                        continue;
                memset(m, 0, offsetof(struct ho_msg, ent));
                m->type = HO_GPU;
                m->nchunks = g->nchunks;
                m->arg = g->chunk_bytes;
                memcpy(m->uuid, g->uuid_raw, 16);
                r = ho_send(fd, m, NULL, 0);
                gs_gpu_lock(g);
                if (snapshot)
                        g->restart.ho_snap_memid = g->memid_next;
                for (uint32_t c = 0; c < g->nchunks && r == 0;) {
                        uint32_t n = 0, nfds = 0;
                        for (; c < g->nchunks && n < HO_MAX_FDS; c++) {
                                struct gs_chunk *k = &g->chunks[c];
                                if (k->fd < 0 || k->state == GS_CHUNK_PENDING || !k->memid)
                                        continue;
                                bool with_fd = snapshot || k->memid > g->restart.ho_snap_memid;
                                m->ent[n++] = (struct ho_ent){ c,
                                        (k->writer != 0 || k->owner != NULL ? HO_WRITTEN : 0) | (with_fd ? HO_FD : 0),
                                        k->memid };
                                if (with_fd)
                                        fds[nfds++] = k->fd;
                        }
                        if (n) {
                                m->type = HO_CHUNKS;
                                m->n = n;
                                r = ho_send(fd, m, fds, nfds);
                        }
                }
                gs_gpu_unlock(g);
        }
        if (r == 0) {
                memset(m, 0, offsetof(struct ho_msg, ent));
                m->type = HO_SENT;
                r = ho_send(fd, m, NULL, 0);
        }
        free(m);
        return r;
}

/* One new agent's whole exchange, on the main thread (the loop waits: the
 * processes' requests are served by the workers until TAKE). */
static void serve(struct gs_agent *ag, int fd)
{
        struct ho_msg m;
        int r;

        r = ho_recv(fd, &m, HO_PREPARE, NULL, NULL);
        if (r < 0) {
                log_warn("upgrade: no PREPARE from the new agent: %s", strerror(-r));
                return;
        }
        log_info("upgrade: a new agent takes over; making room for its context");
        make_room(ag, m.arg);
        /* Every chunk's fd now, while the processes are served: receiving
         * a thousand fds takes the new agent tens of ms (H100), which
         * they would otherwise wait for at TAKE. */
        r = send_chunks(ag, fd, true);
        memset(&m, 0, offsetof(struct ho_msg, ent));
        m.type = HO_ROOM;
        if (r < 0 || ho_send(fd, &m, NULL, 0) < 0 || ho_recv(fd, &m, HO_TAKE, NULL, NULL) < 0) {
                log_warn("upgrade: the new agent went away before taking over; serving on");
                return;
        }
        /* From here the processes wait: nothing they hold may move. */
        int64_t t_take = gs_mono_ms();
        gs_proc_pause_all(ag);
        gs_sockdir_listen(&ag->node, false);
        for (uint32_t i = 0; i < ag->node.ngpus; i++)
                gs_gpu_ledger_pause(&ag->node.gpus[i], true);
        int64_t t_paused = gs_mono_ms();
        r = send_chunks(ag, fd, false);
        log_info("upgrade: processes paused in %lld ms, chunks sent in %lld ms", (long long)(t_paused - t_take),
                 (long long)(gs_mono_ms() - t_paused));
        if (r == 0)
                r = ho_recv(fd, &m, HO_READY, NULL, NULL);
        if (r < 0) {
                char err[256];
                log_warn("upgrade: the new agent failed to take over (%s); serving on", strerror(-r));
                for (uint32_t i = 0; i < ag->node.ngpus; i++)
                        gs_gpu_ledger_pause(&ag->node.gpus[i], false);
                /* It may have bound its sockets at our paths already: ours
                 * again, fresh (connections in flight to its are lost and
                 * retried by their clients). */
                gs_sockdir_rebind(&ag->node);
                gs_ctlsrv_free(ag->ctl);
                ag->ctl = NULL;
                if (gs_ctlsrv_new(ag, ag->node.cfg.agent_socket, &ag->ctl, err, sizeof(err)) < 0)
                        log_error("upgrade: %s", err);
                gs_proc_resume_all(ag);
                ag->handover_retake = true;
                return;
        }
        /* The new agent serves: our connections end (the hooks reconnect to
         * it), our paths are its own now. */
        ag->node.handover = GS_NODE_HANDED_OVER;
        gs_proc_disconnect_all(ag);
        log_info("upgrade: handed over to the new agent %lld ms after it took over; waiting for the end",
                 (long long)(gs_mono_ms() - t_take));
        gs_loop_stop(ag->node.loop);
}

static void on_conn(void *data, uint32_t events)
{
        struct gs_agent *ag = data;
        int fd;

        (void)events;
        fd = accept4(ag->handover_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
                return;
        struct ucred cr;
        socklen_t l = sizeof(cr);
        /* Root's socket in a 0700 directory; a peer of another uid is not
         * an agent. */
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) < 0 || cr.uid != geteuid()) {
                close(fd);
                return;
        }
        serve(ag, fd);
        close(fd);
        if (ag->handover_retake && !gs_node_handed_over(&ag->node)) {
                char err[256];
                ag->handover_retake = false;
                gs_loop_io_del(ag->node.loop, &ag->handover_io);
                gs_closep(&ag->handover_fd);
                if (gs_handover_listen(ag, err, sizeof(err)) < 0)
                        log_error("upgrade: %s", err);
        }
}

int gs_handover_listen(struct gs_agent *ag, char *err, size_t errlen)
{
        struct sockaddr_un sa;
        mode_t old;
        int fd, r;

        ag->handover_fd = -1;
        r = sock_path(ag, &sa);
        if (r < 0) {
                snprintf(err, errlen, "the handover socket's path under %s is too long", ag->node.cfg.state_dir);
                return r;
        }
        if (mkdir(ag->node.cfg.state_dir, 0700) < 0 && errno != EEXIST) {
                r = gs_neg_errno();
                snprintf(err, errlen, "cannot create %s: %s", ag->node.cfg.state_dir, strerror(-r));
                return r;
        }
        (void)unlink(sa.sun_path);
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                r = gs_neg_errno();
                goto fail;
        }
        old = umask(0177);
        r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
        umask(old);
        if (r < 0 || listen(fd, 4) < 0) {
                r = gs_neg_errno();
                goto fail;
        }
        r = gs_loop_io_add(ag->node.loop, &ag->handover_io, fd, EPOLLIN, on_conn, ag);
        if (r < 0)
                goto fail;
        ag->handover_fd = fd;
        return 0;
fail:
        gs_closep(&fd);
        snprintf(err, errlen, "cannot listen on %s: %s", sa.sun_path, strerror(-r));
        return r;
}

void gs_handover_close(struct gs_agent *ag)
{
        struct sockaddr_un sa;

        if (ag->handover_fd < 0)
                return;
        gs_loop_io_del(ag->node.loop, &ag->handover_io);
        gs_closep(&ag->handover_fd);
        if (gs_node_paths_ours(&ag->node) && sock_path(ag, &sa) == 0)
                (void)unlink(sa.sun_path);
}

/* ---- the new agent ---- */

static void snap_free(struct gs_handover *h)
{
        for (size_t i = 0; i < h->nsnap; i++) {
                for (size_t k = 0; k < h->snap[i].n; k++)
                        gs_closep(&h->snap[i].fd[k]);
                free(h->snap[i].fd);
                free(h->snap[i].memid);
        }
        free(h->snap);
        h->snap = NULL;
        h->nsnap = 0;
}

/* PREPARE's answer: every chunk's fd, per GPU, kept by memid. */
static int recv_snapshot(struct gs_handover *h)
{
        struct ho_msg *m = calloc(1, sizeof(*m));
        struct ho_snap *cur = NULL;
        int fds[HO_MAX_FDS], r;
        uint32_t nfds;

        if (!m)
                return -ENOMEM;
        for (;;) {
                r = ho_recv(h->fd, m, 0, fds, &nfds);
                if (r < 0 || m->type == HO_SENT)
                        break;
                if (m->type == HO_GPU) {
                        struct ho_snap *t = realloc(h->snap, (h->nsnap + 1) * sizeof(*t));
                        if (!t) {
                                r = -ENOMEM;
                                break;
                        }
                        h->snap = t;
                        cur = &h->snap[h->nsnap++];
                        memset(cur, 0, sizeof(*cur));
                        memcpy(cur->uuid, m->uuid, 16);
                        continue;
                }
                if (m->type != HO_CHUNKS || !cur || nfds != m->n) {
                        for (uint32_t i = 0; i < nfds; i++)
                                close(fds[i]);
                        r = -EPROTO;
                        break;
                }
                if (cur->n + nfds > cur->cap) {
                        size_t cap = cur->cap ? 2 * cur->cap : 1024;
                        while (cap < cur->n + nfds)
                                cap *= 2;
                        uint64_t *mi = realloc(cur->memid, cap * sizeof(*mi));
                        if (mi)
                                cur->memid = mi;
                        int *f = mi ? realloc(cur->fd, cap * sizeof(*f)) : NULL;
                        if (f)
                                cur->fd = f;
                        if (!mi || !f) {
                                for (uint32_t i = 0; i < nfds; i++)
                                        close(fds[i]);
                                r = -ENOMEM;
                                break;
                        }
                        cur->cap = cap;
                }
                for (uint32_t i = 0; i < nfds; i++) {
                        cur->memid[cur->n] = m->ent[i].memid;
                        cur->fd[cur->n++] = fds[i];
                }
        }
        free(m);
        return r;
}

/* The fd the snapshot holds for memid on the GPU uuid (taken out), or -1. */
static int snap_take(struct gs_handover *h, const uint8_t uuid[16], uint64_t memid)
{
        for (size_t i = 0; i < h->nsnap; i++) {
                struct ho_snap *s = &h->snap[i];
                if (memcmp(s->uuid, uuid, 16))
                        continue;
                for (size_t k = 0; k < s->n; k++)
                        if (s->memid[k] == memid && s->fd[k] >= 0) {
                                int fd = s->fd[k];
                                s->fd[k] = -1;
                                return fd;
                        }
        }
        return -1;
}

int gs_handover_begin(struct gs_agent *ag, struct gs_handover **ret, char *err, size_t errlen)
{
        struct sockaddr_un sa;
        struct ho_msg m;
        int fd, r;

        *ret = NULL;
        if (sock_path(ag, &sa) < 0)
                return 0;
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                r = gs_neg_errno();
                snprintf(err, errlen, "socket: %s", strerror(-r));
                return r;
        }
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                close(fd); /* none listens: a first start or a restart */
                return 0;
        }
        struct gs_handover *h = calloc(1, sizeof(*h));
        if (!h) {
                close(fd);
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        h->fd = fd;
        memset(&m, 0, offsetof(struct ho_msg, ent));
        m.type = HO_PREPARE;
        m.arg = ag->node.cfg.context_bytes ? ag->node.cfg.context_bytes : GS_GiB;
        r = ho_send(fd, &m, NULL, 0);
        if (r == 0)
                r = recv_snapshot(h);
        if (r == 0)
                r = ho_recv(fd, &m, HO_ROOM, NULL, NULL);
        if (r < 0) {
                gs_handover_abort(h);
                snprintf(err, errlen, "the running agent did not answer on %s: %s", sa.sun_path, strerror(-r));
                return r;
        }
        *ret = h;
        log_info("upgrade: the running agent made room and sent its chunks; taking over from it");
        return 1;
}

void gs_handover_inherit_free(struct gs_gpu_inherit *inh, uint32_t n)
{
        for (uint32_t i = 0; inh && i < n; i++) {
                for (uint32_t c = 0; inh[i].fd && c < inh[i].nchunks; c++)
                        gs_closep(&inh[i].fd[c]);
                free(inh[i].fd);
                free(inh[i].written);
                free(inh[i].memid);
        }
        free(inh);
}

int gs_handover_take(struct gs_handover *h, struct gs_agent *ag, struct gs_gpu_inherit **ret_inh, char *err,
                     size_t errlen)
{
        struct gs_gpu_inherit *inh = calloc(ag->node.ngpus ? ag->node.ngpus : 1, sizeof(*inh));
        struct gs_gpu_inherit *cur = NULL;
        struct ho_msg *m = calloc(1, sizeof(*m));
        int fds[HO_MAX_FDS], r;
        uint32_t nfds;
        uint8_t uuid_cur[16] = { 0 };

        if (!inh || !m) {
                r = -ENOMEM;
                goto fail;
        }
        memset(m, 0, offsetof(struct ho_msg, ent));
        m->type = HO_TAKE;
        h->take_ms = gs_mono_ms();
        r = ho_send(h->fd, m, NULL, 0);
        while (r == 0) {
                r = ho_recv(h->fd, m, 0, fds, &nfds);
                if (r < 0)
                        break;
                if (m->type == HO_SENT)
                        break;
                if (m->type == HO_GPU) {
                        cur = NULL;
                        memcpy(uuid_cur, m->uuid, 16);
                        for (uint32_t gi = 0; gi < ag->node.ngpus; gi++)
                                if (!memcmp(ag->node.gpus[gi].uuid_raw, m->uuid, 16) && ag->node.gpus[gi].ctx_ready)
                                        cur = &inh[gi];
                        if (!cur || cur->nchunks || m->nchunks == 0 || m->nchunks > GS_LEDGER_MAX_CHUNKS ||
                            m->arg != ag->node.cfg.chunk_bytes) {
                                if (cur && m->arg != ag->node.cfg.chunk_bytes)
                                        log_warn("upgrade: the old agent's chunks are %llu bytes, ours %llu: "
                                                 "that GPU starts as after a restart",
                                                 (unsigned long long)m->arg, (unsigned long long)ag->node.cfg.chunk_bytes);
                                cur = NULL;
                                continue;
                        }
                        cur->nchunks = m->nchunks;
                        memcpy(uuid_cur, m->uuid, 16);
                        cur->fd = malloc(m->nchunks * sizeof(int));
                        cur->written = calloc(m->nchunks, 1);
                        cur->memid = calloc(m->nchunks, sizeof(uint64_t));
                        if (!cur->fd || !cur->written || !cur->memid) {
                                r = -ENOMEM;
                                break;
                        }
                        for (uint32_t c = 0; c < m->nchunks; c++)
                                cur->fd[c] = -1;
                        continue;
                }
                if (m->type != HO_CHUNKS) {
                        r = -EPROTO;
                        break;
                }
                for (uint32_t i = 0, k = 0; i < m->n; i++) {
                        uint32_t c = m->ent[i].chunk;
                        int f = (m->ent[i].flags & HO_FD) ? fds[k++] : snap_take(h, uuid_cur, m->ent[i].memid);
                        if (!cur || c >= cur->nchunks || cur->fd[c] >= 0 || f < 0) {
                                if (cur && f < 0)
                                        log_warn("upgrade: chunk %u (memory %llu) came without its fd", c,
                                                 (unsigned long long)m->ent[i].memid);
                                gs_closep(&f);
                                continue;
                        }
                        cur->fd[c] = f;
                        cur->written[c] = (m->ent[i].flags & HO_WRITTEN) != 0;
                        cur->memid[c] = m->ent[i].memid;
                }
        }
        free(m);
        m = NULL;
        if (r < 0)
                goto fail;
        snap_free(h); /* memory gone since PREPARE: its fds are not needed */
        log_info("upgrade: the old agent's chunks received %lld ms after TAKE", (long long)(gs_mono_ms() - h->take_ms));
        *ret_inh = inh;
        return 0;
fail:
        free(m);
        gs_handover_inherit_free(inh, ag->node.ngpus);
        snprintf(err, errlen, "taking over from the running agent: %s", strerror(-r));
        return r;
}

void gs_handover_abort(struct gs_handover *h)
{
        if (!h)
                return;
        snap_free(h);
        close(h->fd);
        free(h);
}

bool gs_handover_older_agent(const struct gs_agent *ag)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        bool up;
        int fd;

        if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", ag->node.cfg.agent_socket) >= (int)sizeof(sa.sun_path))
                return false;
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return false;
        up = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno == EAGAIN;
        close(fd);
        return up;
}

void gs_handover_finish(struct gs_handover *h)
{
        struct ho_msg m;

        if (!h)
                return;
        memset(&m, 0, offsetof(struct ho_msg, ent));
        m.type = HO_READY;
        if (ho_send(h->fd, &m, NULL, 0) < 0)
                log_warn("upgrade: cannot tell the old agent we serve");
        else
                log_info("upgrade: serving %lld ms after taking over; the old agent lets its processes go",
                         (long long)(gs_mono_ms() - h->take_ms));
        snap_free(h);
        close(h->fd);
        free(h);
}
