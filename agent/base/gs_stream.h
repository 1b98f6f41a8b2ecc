/* gs_stream.h — a bounded server of non-blocking stream connections on the
 * agent's loop: the control socket (gs_ctlsrv.h) and the metrics endpoint
 * (gs_metrics.h) are each a protocol over one of these.
 *
 * The server accepts up to max_conns connections (more are accepted and
 * closed at once, after the protocol's refuse hook had its word: the
 * kernel's backlog would otherwise fill and hide later clients).  Each
 * connection reads into a buffer of at most in_max bytes and hands what it
 * holds to the protocol's on_data, which consumes whole messages and queues
 * replies; queued output is bounded by out_max (-ENOBUFS beyond: the peer
 * is not reading) and written as the socket takes it, with EPOLLOUT asked
 * for only while something waits.
 *
 * Ending: gs_stream_end stops reading requests (later input is discarded)
 * and, once the output is written, shuts our side down and waits for the
 * peer to close, at most linger_ms: closing with unread input would reset
 * the connection and could destroy the reply in flight.  A peer that
 * closes with nothing queued is closed at once.  deadline_ms, if not 0,
 * bounds a connection's whole life (on_timeout has its word first).
 *
 * Closing frees the connection after the loop's current batch. */
#ifndef GS_STREAM_H
#define GS_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gs_util.h"

struct gs_loop;
struct gs_stream_srv;
struct gs_stream;

struct gs_stream_ops {
        /* New input: in[0, len) (gs_stream_input).  Consume whole messages
         * with gs_stream_consume and queue replies.  Return < 0 to close
         * the connection now.  With the buffer full and nothing consumed,
         * the connection is closed (a message longer than in_max). */
        int (*on_data)(void *ctx, struct gs_stream *c);
        /* Optional: a best-effort word to a connection refused over the cap
         * (write to fd without blocking). */
        void (*on_refuse)(void *ctx, int fd);
        /* Optional: the deadline passed; the connection is closed after. */
        void (*on_timeout)(void *ctx, struct gs_stream *c);
};

struct gs_stream_limits {
        uint32_t max_conns;
        size_t in_max;
        size_t out_max;
        int64_t deadline_ms; /* 0: none */
        int64_t linger_ms;   /* after gs_stream_end, for the peer's close */
};

/* Serves listen_fd (bound, listening, non-blocking; the server owns it and
 * closes it).  name is for the log.  ops and ctx must outlive the server. */
int gs_stream_srv_new(struct gs_loop *loop, int listen_fd, const char *name, const struct gs_stream_limits *lim,
                      const struct gs_stream_ops *ops, void *ctx, struct gs_stream_srv **ret) GS_WUR;
/* Closes every connection and the listening socket.  NULL is fine. */
void gs_stream_srv_free(struct gs_stream_srv *s);
uint32_t gs_stream_srv_count(const struct gs_stream_srv *s);
/* Iteration over the open connections (for broadcasts).  Closing the
 * current one is fine if the next was taken first. */
struct gs_stream *gs_stream_first(struct gs_stream_srv *s);
struct gs_stream *gs_stream_next(struct gs_stream *c);

/* The bytes read and not consumed yet. */
const uint8_t *gs_stream_input(const struct gs_stream *c, size_t *len);
void gs_stream_consume(struct gs_stream *c, size_t n);
/* Room for len more bytes of output, queued when the call returns (fill it
 * before returning to the loop); NULL when out_max would be passed or memory
 * is short. */
uint8_t *gs_stream_reserve(struct gs_stream *c, size_t len);
/* Writes what the socket takes now.  Returns 0, or < 0 if the connection
 * is gone (it is then closed). */
int gs_stream_flush(struct gs_stream *c);
void gs_stream_end(struct gs_stream *c);
bool gs_stream_ended(const struct gs_stream *c);
void gs_stream_close(struct gs_stream *c);
/* The protocol's own state for the connection (NULL at first). */
void *gs_stream_data(const struct gs_stream *c);
void gs_stream_set_data(struct gs_stream *c, void *data);
int gs_stream_fd(const struct gs_stream *c);

#endif
