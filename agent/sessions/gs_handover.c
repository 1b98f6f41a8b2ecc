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
#include "gs_handover_codec.h"
#include "gs_log.h"
#include "gs_proc.h"
#include "gs_sock.h"
#include "gs_sockdir.h"

struct gs_handover {
        int fd;
        int64_t take_ms; /* when TAKE was sent: the processes wait since */
        struct gs_ho_snapset snap;
};

/* One message within a step's time (gs_ho_recv). */
static int ho_recv(int fd, struct gs_ho_msg *m, uint16_t type, int *fds, uint32_t *nfds)
{
        return gs_ho_recv(fd, m, type, fds, nfds, GS_HANDOVER_STEP_MS);
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
        struct gs_ho_msg *m = calloc(1, sizeof(*m));
        int fds[GS_HO_MAX_FDS], r = 0;

        if (!m)
                return -ENOMEM;
        for (uint32_t gi = 0; gi < ag->node.ngpus && r == 0; gi++) {
                struct gs_gpu *g = &ag->node.gpus[gi];

                if (!g->pool)
                        continue;
                memset(m, 0, offsetof(struct gs_ho_msg, ent));
                m->type = GS_HO_GPU;
                m->nchunks = g->nchunks;
                m->arg = g->chunk_bytes;
                memcpy(m->uuid, g->uuid_raw, 16);
                r = gs_ho_send(fd, m, NULL, 0);
                gs_gpu_lock(g);
                if (snapshot)
                        g->restart.ho_snap_memid = g->memid_next;
                for (uint32_t c = 0; c < g->nchunks && r == 0;) {
                        uint32_t n = 0, nfds = 0;
                        for (; c < g->nchunks && n < GS_HO_MAX_FDS; c++) {
                                struct gs_chunk *k = &g->chunks[c];
                                if (k->fd < 0 || k->state == GS_CHUNK_PENDING || !k->memid)
                                        continue;
                                bool with_fd = snapshot || k->memid > g->restart.ho_snap_memid;
                                uint32_t fl = (k->writer != 0 || k->owner != NULL ? GS_HO_WRITTEN : 0) |
                                              (with_fd ? GS_HO_FD : 0);
                                m->ent[n++] = (struct gs_ho_ent){ c, fl, k->memid };
                                if (with_fd)
                                        fds[nfds++] = k->fd;
                        }
                        if (n) {
                                m->type = GS_HO_CHUNKS;
                                m->n = n;
                                r = gs_ho_send(fd, m, fds, nfds);
                        }
                }
                gs_gpu_unlock(g);
        }
        if (r == 0) {
                memset(m, 0, offsetof(struct gs_ho_msg, ent));
                m->type = GS_HO_SENT;
                r = gs_ho_send(fd, m, NULL, 0);
        }
        free(m);
        return r;
}

/* One new agent's whole exchange, on the main thread (the loop waits: the
 * processes' requests are served by the workers until TAKE). */
static void serve(struct gs_agent *ag, int fd)
{
        struct gs_ho_msg m;
        int r;

        r = ho_recv(fd, &m, GS_HO_PREPARE, NULL, NULL);
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
        memset(&m, 0, offsetof(struct gs_ho_msg, ent));
        m.type = GS_HO_ROOM;
        if (r < 0 || gs_ho_send(fd, &m, NULL, 0) < 0 || ho_recv(fd, &m, GS_HO_TAKE, NULL, NULL) < 0) {
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
                r = ho_recv(fd, &m, GS_HO_READY, NULL, NULL);
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
        fd = r = gs_sock_listen(sa.sun_path, SOCK_SEQPACKET, 0600, 4);
        if (r < 0)
                goto fail;
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

/* PREPARE's answer: every chunk's fd, per GPU, kept by memid. */
static int recv_snapshot(struct gs_handover *h)
{
        struct gs_ho_msg *m = calloc(1, sizeof(*m));
        int fds[GS_HO_MAX_FDS], r;
        uint32_t nfds;

        if (!m)
                return -ENOMEM;
        for (;;) {
                r = ho_recv(h->fd, m, 0, fds, &nfds);
                if (r < 0 || m->type == GS_HO_SENT)
                        break;
                r = gs_ho_snap_add(&h->snap, m, fds, nfds);
                if (r < 0)
                        break;
        }
        free(m);
        return r;
}

int gs_handover_begin(struct gs_agent *ag, struct gs_handover **ret, char *err, size_t errlen)
{
        struct sockaddr_un sa;
        struct gs_ho_msg m;
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
        memset(&m, 0, offsetof(struct gs_ho_msg, ent));
        m.type = GS_HO_PREPARE;
        m.arg = ag->node.cfg.context_bytes ? ag->node.cfg.context_bytes : GS_GiB;
        r = gs_ho_send(fd, &m, NULL, 0);
        if (r == 0)
                r = recv_snapshot(h);
        if (r == 0)
                r = ho_recv(fd, &m, GS_HO_ROOM, NULL, NULL);
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
        struct gs_ho_msg *m = calloc(1, sizeof(*m));
        struct gs_ho_take t = { .inh = inh,
                                .gpus = ag->node.gpus,
                                .ngpus = ag->node.ngpus,
                                .chunk_bytes = ag->node.cfg.chunk_bytes,
                                .snap = &h->snap };
        int fds[GS_HO_MAX_FDS], r;
        uint32_t nfds;

        if (!inh || !m) {
                r = -ENOMEM;
                goto fail;
        }
        memset(m, 0, offsetof(struct gs_ho_msg, ent));
        m->type = GS_HO_TAKE;
        h->take_ms = gs_mono_ms();
        r = gs_ho_send(h->fd, m, NULL, 0);
        while (r == 0) {
                r = ho_recv(h->fd, m, 0, fds, &nfds);
                if (r < 0 || m->type == GS_HO_SENT)
                        break;
                r = gs_ho_take_msg(&t, m, fds, nfds);
        }
        free(m);
        m = NULL;
        if (r < 0)
                goto fail;
        gs_ho_snap_free(&h->snap); /* memory gone since PREPARE: its fds are not needed */
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
        gs_ho_snap_free(&h->snap);
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
        struct gs_ho_msg m;

        if (!h)
                return;
        memset(&m, 0, offsetof(struct gs_ho_msg, ent));
        m.type = GS_HO_READY;
        if (gs_ho_send(h->fd, &m, NULL, 0) < 0)
                log_warn("upgrade: cannot tell the old agent we serve");
        else
                log_info("upgrade: serving %lld ms after taking over; the old agent lets its processes go",
                         (long long)(gs_mono_ms() - h->take_ms));
        gs_ho_snap_free(&h->snap);
        close(h->fd);
        free(h);
}
