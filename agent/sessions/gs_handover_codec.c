/* gs_handover_codec.c — see gs_handover_codec.h. */
#include "gs_handover_codec.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gs_ledger.h"
#include "gs_log.h"
#include "gs_sock.h"
#include "gs_util.h"

static void close_all(const int *fds, uint32_t n)
{
        for (uint32_t i = 0; i < n; i++)
                close(fds[i]);
}

/* The fds a CHUNKS must come with: one per entry flagged GS_HO_FD. */
static uint32_t fds_in(const struct gs_ho_msg *m)
{
        uint32_t k = 0;

        if (m->type != GS_HO_CHUNKS)
                return 0;
        for (uint32_t i = 0; i < m->n && i < GS_HO_MAX_FDS; i++)
                k += (m->ent[i].flags & GS_HO_FD) != 0;
        return k;
}

size_t gs_ho_msg_len(const struct gs_ho_msg *m)
{
        return offsetof(struct gs_ho_msg, ent) + (m->type == GS_HO_CHUNKS ? m->n * sizeof(struct gs_ho_ent) : 0);
}

int gs_ho_send(int fd, struct gs_ho_msg *m, const int *fds, uint32_t nfds)
{
        size_t len = gs_ho_msg_len(m);
        ssize_t n;

        if (nfds > GS_HO_MAX_FDS || (m->type == GS_HO_CHUNKS && m->n > GS_HO_MAX_FDS))
                return -EINVAL;
        m->magic = GS_HO_MAGIC;
        m->version = GS_HO_VERSION;
        n = gs_sock_send_fds(fd, m, len, fds, nfds, 0);
        return n == (ssize_t)len ? 0 : n < 0 ? (int)n : -EPROTO;
}

int gs_ho_recv(int fd, struct gs_ho_msg *m, uint16_t type, int *fds, uint32_t *nfds, int timeout_ms)
{
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        int all[GS_SOCK_MAX_FDS];
        size_t got = 0;
        bool trunc = false;
        ssize_t n;
        int r;

        if (nfds)
                *nfds = 0;
        do
                r = poll(&pfd, 1, timeout_ms);
        while (r < 0 && errno == EINTR);
        if (r == 0)
                return -ETIMEDOUT;
        /* Every fd that came is counted (a message with more than its
         * entries say is refused), then kept in fds or closed. */
        n = gs_sock_recv_fds(fd, m, sizeof(*m), 0, all, GS_SOCK_MAX_FDS, &got, &trunc);
        if (n < 0)
                return (int)n;
        if (!fds || got > GS_HO_MAX_FDS) {
                close_all(all, (uint32_t)got);
                trunc = trunc || got > GS_HO_MAX_FDS; /* more than a frame may carry */
                got = 0;
        } else {
                memcpy(fds, all, got * sizeof(int));
        }
        r = 0;
        if (n == 0)
                r = -ECONNRESET;
        else if ((size_t)n < offsetof(struct gs_ho_msg, ent) || m->magic != GS_HO_MAGIC ||
                 m->version != GS_HO_VERSION || (type && m->type != type) || trunc ||
                 (m->type == GS_HO_CHUNKS && (m->n > GS_HO_MAX_FDS || (size_t)n != gs_ho_msg_len(m))) ||
                 got != fds_in(m))
                r = (size_t)n >= offsetof(struct gs_ho_msg, ent) && m->type == GS_HO_FAIL ? -ECANCELED : -EPROTO;
        if (r < 0) {
                close_all(fds, (uint32_t)got);
                got = 0;
        }
        if (nfds)
                *nfds = (uint32_t)got;
        return r;
}

/* ---- PREPARE's answer ---- */

int gs_ho_snap_add(struct gs_ho_snapset *s, const struct gs_ho_msg *m, const int *fds, uint32_t nfds)
{
        if (m->type == GS_HO_GPU && nfds == 0 && s->n < GS_HO_MAX_GPUS) {
                struct gs_ho_snap *t = realloc(s->snap, (s->n + 1) * sizeof(*t));
                if (!t)
                        return -ENOMEM;
                s->snap = t;
                memset(&t[s->n], 0, sizeof(*t));
                memcpy(t[s->n].uuid, m->uuid, 16);
                s->n++;
                return 0;
        }
        struct gs_ho_snap *cur = s->n ? &s->snap[s->n - 1] : NULL;
        /* Every entry with its fd, within the ledger's bound per GPU. */
        if (m->type != GS_HO_CHUNKS || !cur || nfds != m->n || m->n > GS_HO_MAX_FDS ||
            cur->n + nfds > GS_LEDGER_MAX_CHUNKS) {
                close_all(fds, nfds);
                return -EPROTO;
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
                        close_all(fds, nfds);
                        return -ENOMEM;
                }
                cur->cap = cap;
        }
        for (uint32_t i = 0; i < nfds; i++) {
                cur->memid[cur->n] = m->ent[i].memid;
                cur->fd[cur->n++] = fds[i];
        }
        return 0;
}

int gs_ho_snap_take(struct gs_ho_snapset *s, const uint8_t uuid[16], uint64_t memid)
{
        for (size_t i = 0; i < s->n; i++) {
                struct gs_ho_snap *p = &s->snap[i];
                if (memcmp(p->uuid, uuid, 16))
                        continue;
                for (size_t k = 0; k < p->n; k++)
                        if (p->memid[k] == memid && p->fd[k] >= 0) {
                                int fd = p->fd[k];
                                p->fd[k] = -1;
                                return fd;
                        }
        }
        return -1;
}

void gs_ho_snap_free(struct gs_ho_snapset *s)
{
        for (size_t i = 0; i < s->n; i++) {
                for (size_t k = 0; k < s->snap[i].n; k++)
                        gs_closep(&s->snap[i].fd[k]);
                free(s->snap[i].fd);
                free(s->snap[i].memid);
        }
        free(s->snap);
        s->snap = NULL;
        s->n = 0;
}

/* ---- TAKE's answer ---- */

static int take_gpu(struct gs_ho_take *t, const struct gs_ho_msg *m)
{
        struct gs_gpu_inherit *cur = NULL;

        memcpy(t->uuid, m->uuid, 16);
        for (uint32_t gi = 0; gi < t->ngpus; gi++)
                if (!memcmp(t->gpus[gi].uuid_raw, m->uuid, 16) && t->gpus[gi].ctx_ready)
                        cur = &t->inh[gi];
        t->cur = NULL;
        if (!cur || cur->nchunks || m->nchunks == 0 || m->nchunks > GS_LEDGER_MAX_CHUNKS || m->arg != t->chunk_bytes) {
                if (cur && m->arg != t->chunk_bytes)
                        log_warn("upgrade: the old agent's chunks are %llu bytes, ours %llu: "
                                 "that GPU starts as after a restart",
                                 (unsigned long long)m->arg, (unsigned long long)t->chunk_bytes);
                return 0;
        }
        cur->nchunks = m->nchunks;
        cur->fd = malloc(m->nchunks * sizeof(int));
        cur->written = calloc(m->nchunks, 1);
        cur->memid = calloc(m->nchunks, sizeof(uint64_t));
        if (!cur->fd || !cur->written || !cur->memid)
                return -ENOMEM; /* freed with inh (gs_handover_inherit_free) */
        for (uint32_t c = 0; c < m->nchunks; c++)
                cur->fd[c] = -1;
        t->cur = cur;
        return 0;
}

int gs_ho_take_msg(struct gs_ho_take *t, const struct gs_ho_msg *m, const int *fds, uint32_t nfds)
{
        if (m->type == GS_HO_GPU && nfds == 0)
                return take_gpu(t, m);
        if (m->type != GS_HO_CHUNKS || m->n > GS_HO_MAX_FDS || nfds != fds_in(m)) {
                close_all(fds, nfds);
                return -EPROTO;
        }
        struct gs_gpu_inherit *cur = t->cur;
        for (uint32_t i = 0, k = 0; i < m->n; i++) {
                uint32_t c = m->ent[i].chunk;
                int f = (m->ent[i].flags & GS_HO_FD) ? fds[k++]
                        : t->snap                    ? gs_ho_snap_take(t->snap, t->uuid, m->ent[i].memid)
                                                     : -1;
                if (!cur || c >= cur->nchunks || cur->fd[c] >= 0 || f < 0) {
                        if (cur && f < 0)
                                log_warn("upgrade: chunk %u (memory %llu) came without its fd", c,
                                         (unsigned long long)m->ent[i].memid);
                        gs_closep(&f);
                        continue;
                }
                cur->fd[c] = f;
                cur->written[c] = (m->ent[i].flags & GS_HO_WRITTEN) != 0;
                cur->memid[c] = m->ent[i].memid;
        }
        return 0;
}
