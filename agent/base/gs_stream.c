/* gs_stream.c — see gs_stream.h. */
#include "gs_stream.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gs_log.h"
#include "gs_logrep.h"
#include "gs_loop.h"

struct gs_stream {
        struct gs_stream *next, *prev;
        struct gs_stream_srv *srv;
        struct gs_loop_io io;
        int fd;
        bool ended;       /* no more requests; close once written */
        bool shut;        /* our side shut down, waiting for the peer */
        bool rd_eof;      /* the peer will send nothing more */
        int64_t deadline; /* CLOCK_MONOTONIC ms; GS_LOOP_NEVER: none */
        void *data;
        uint8_t *in;
        size_t in_len, in_cap;
        uint8_t *out;
        size_t out_off, out_len, out_cap;
};

struct gs_stream_srv {
        struct gs_loop *loop;
        struct gs_loop_io io;
        struct gs_loop_timer timer;
        int fd;
        char name[32];
        struct gs_stream_limits lim;
        const struct gs_stream_ops *ops;
        void *ctx;
        struct gs_stream *conns;
        uint32_t nconns;
        uint64_t refused; /* over the cap, for the log */
};

uint32_t gs_stream_srv_count(const struct gs_stream_srv *s)
{
        return s->nconns;
}

struct gs_stream *gs_stream_first(struct gs_stream_srv *s)
{
        return s->conns;
}

struct gs_stream *gs_stream_next(struct gs_stream *c)
{
        return c->next;
}

const uint8_t *gs_stream_input(const struct gs_stream *c, size_t *len)
{
        *len = c->in_len;
        return c->in;
}

void gs_stream_consume(struct gs_stream *c, size_t n)
{
        if (n > c->in_len)
                n = c->in_len;
        memmove(c->in, c->in + n, c->in_len - n);
        c->in_len -= n;
}

void *gs_stream_data(const struct gs_stream *c)
{
        return c->data;
}

void gs_stream_set_data(struct gs_stream *c, void *data)
{
        c->data = data;
}

int gs_stream_fd(const struct gs_stream *c)
{
        return c->fd;
}

bool gs_stream_ended(const struct gs_stream *c)
{
        return c->ended;
}

void gs_stream_close(struct gs_stream *c)
{
        struct gs_stream_srv *s = c->srv;

        if (c->prev)
                c->prev->next = c->next;
        else
                s->conns = c->next;
        if (c->next)
                c->next->prev = c->prev;
        s->nconns--;
        gs_loop_io_del(s->loop, &c->io);
        gs_closep(&c->fd);
        free(c->in);
        free(c->out);
        c->in = c->out = NULL;
        gs_loop_defer_free(s->loop, c);
}

uint8_t *gs_stream_reserve(struct gs_stream *c, size_t len)
{
        size_t need;
        uint8_t *p;

        if (c->out_off == c->out_len) {
                c->out_off = c->out_len = 0;
        } else if (c->out_off && c->out_len + len > c->out_cap) {
                /* What the peer read leaves room: out_max bounds what is
                 * still queued, not what was written. */
                memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
                c->out_len -= c->out_off;
                c->out_off = 0;
        }
        if (len > c->srv->lim.out_max || c->out_len > c->srv->lim.out_max - len)
                return NULL;
        need = c->out_len + len;
        if (need > c->out_cap) {
                size_t cap = need > c->srv->lim.out_max / 2 ? c->srv->lim.out_max : need * 2;
                p = realloc(c->out, cap);
                if (!p)
                        return NULL;
                c->out = p;
                c->out_cap = cap;
        }
        p = c->out + c->out_len;
        c->out_len += len;
        return p;
}

void gs_stream_end(struct gs_stream *c)
{
        c->ended = true;
}

static void set_events(struct gs_stream *c)
{
        uint32_t want = (c->rd_eof ? 0 : EPOLLIN | EPOLLRDHUP) | (c->out_off < c->out_len ? EPOLLOUT : 0);

        if (gs_loop_io_set(c->srv->loop, &c->io, want) < 0)
                log_debug("%s: epoll_ctl: %m", c->srv->name);
}

/* Writes what the socket takes; after the end, shuts our side down once
 * all is written.  Returns < 0 if the connection should be closed. */
static int write_out(struct gs_stream *c)
{
        while (c->out_off < c->out_len) {
                ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN || errno == EWOULDBLOCK)
                                return 0;
                        return gs_neg_errno();
                }
                c->out_off += (size_t)w;
        }
        if (c->rd_eof)
                return -ECONNRESET; /* all written, the peer is done */
        if (c->ended && !c->shut) {
                (void)shutdown(c->fd, SHUT_WR);
                c->shut = true;
                if (c->srv->lim.linger_ms) {
                        int64_t until = gs_mono_ms() + c->srv->lim.linger_ms;
                        if (until < c->deadline) {
                                c->deadline = until;
                                gs_loop_timer_arm(&c->srv->timer, until);
                        }
                }
        }
        return 0;
}

int gs_stream_flush(struct gs_stream *c)
{
        if (write_out(c) < 0) {
                gs_stream_close(c);
                return -ECONNRESET;
        }
        set_events(c);
        return 0;
}

/* Reads what is there and lets the protocol consume it.  Returns < 0 if
 * the connection should be closed. */
static int read_in(struct gs_stream *c)
{
        const struct gs_stream_limits *lim = &c->srv->lim;

        while (!c->rd_eof) {
                uint8_t junk[1024];
                ssize_t n;

                if (c->ended) {
                        n = recv(c->fd, junk, sizeof(junk), MSG_DONTWAIT);
                } else {
                        if (c->in_len == c->in_cap) {
                                size_t cap = c->in_cap ? c->in_cap * 2 : 4096;
                                uint8_t *p;

                                if (cap > lim->in_max)
                                        cap = lim->in_max;
                                if (cap <= c->in_len)
                                        return -EMSGSIZE; /* full, and nothing consumed */
                                p = realloc(c->in, cap);
                                if (!p)
                                        return -ENOMEM;
                                c->in = p;
                                c->in_cap = cap;
                        }
                        n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, MSG_DONTWAIT);
                }
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : gs_neg_errno();
                }
                if (n == 0) {
                        /* Half-closed: what is queued still goes out. */
                        c->rd_eof = true;
                        return c->out_off < c->out_len ? 0 : -ECONNRESET;
                }
                if (c->ended)
                        continue;
                c->in_len += (size_t)n;
                if (c->srv->ops->on_data(c->srv->ctx, c) < 0)
                        return -ECONNABORTED;
        }
        return 0;
}

static void on_conn(void *data, uint32_t events)
{
        struct gs_stream *c = data;

        if ((events & EPOLLERR) || read_in(c) < 0) {
                gs_stream_close(c);
                return;
        }
        (void)gs_stream_flush(c);
}

static void on_listen(void *data, uint32_t events)
{
        struct gs_stream_srv *s = data;

        (void)events;
        for (;;) {
                struct gs_stream *c;
                int fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

                if (fd < 0) {
                        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                                log_warn_rep(gs_logrep_key(s->name), "%s: accept: %m", s->name);
                        return;
                }
                if (s->nconns >= s->lim.max_conns) {
                        if (s->refused++ % 1000 == 0)
                                log_warn_rep(gs_logrep_key(s->name),
                                             "%s: %u connections already, refusing (%llu so far)", s->name, s->nconns,
                                             (unsigned long long)s->refused);
                        if (s->ops->on_refuse)
                                s->ops->on_refuse(s->ctx, fd);
                        close(fd);
                        continue;
                }
                c = calloc(1, sizeof(*c));
                if (!c) {
                        close(fd);
                        continue;
                }
                c->srv = s;
                c->fd = fd;
                c->deadline = GS_LOOP_NEVER;
                if (gs_loop_io_add(s->loop, &c->io, fd, EPOLLIN | EPOLLRDHUP, on_conn, c) < 0) {
                        close(fd);
                        free(c);
                        continue;
                }
                if (s->lim.deadline_ms) {
                        c->deadline = gs_mono_ms() + s->lim.deadline_ms;
                        gs_loop_timer_arm(&s->timer, c->deadline);
                }
                c->next = s->conns;
                if (c->next)
                        c->next->prev = c;
                s->conns = c;
                s->nconns++;
        }
}

static int64_t on_timer(void *data, int64_t now)
{
        struct gs_stream_srv *s = data;
        int64_t next = GS_LOOP_NEVER;
        struct gs_stream *c, *nx;

        for (c = s->conns; c; c = nx) {
                nx = c->next;
                if (c->deadline <= now) {
                        if (!c->shut && s->ops->on_timeout)
                                s->ops->on_timeout(s->ctx, c);
                        gs_stream_close(c);
                } else if (c->deadline < next) {
                        next = c->deadline;
                }
        }
        return next;
}

int gs_stream_srv_new(struct gs_loop *loop, int listen_fd, const char *name, const struct gs_stream_limits *lim,
                      const struct gs_stream_ops *ops, void *ctx, struct gs_stream_srv **ret)
{
        struct gs_stream_srv *s = calloc(1, sizeof(*s));
        int r;

        if (!s) {
                close(listen_fd);
                return -ENOMEM;
        }
        s->loop = loop;
        s->fd = listen_fd;
        snprintf(s->name, sizeof(s->name), "%s", name);
        s->lim = *lim;
        s->ops = ops;
        s->ctx = ctx;
        r = gs_loop_io_add(loop, &s->io, listen_fd, EPOLLIN, on_listen, s);
        if (r < 0) {
                close(listen_fd);
                free(s);
                return r;
        }
        gs_loop_timer_add(loop, &s->timer, on_timer, s);
        *ret = s;
        return 0;
}

void gs_stream_srv_free(struct gs_stream_srv *s)
{
        if (!s)
                return;
        while (s->conns)
                gs_stream_close(s->conns);
        gs_loop_timer_del(s->loop, &s->timer);
        gs_loop_io_del(s->loop, &s->io);
        gs_closep(&s->fd);
        free(s);
}
