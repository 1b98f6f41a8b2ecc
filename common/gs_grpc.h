/* gs_grpc.h — a small gRPC server and client over unix sockets, on the gRPC
 * C core API (grpc/grpc.h), with protobuf-c messages.
 *
 * Server: methods are dispatched by path ("/v1beta1.DevicePlugin/Allocate").
 * Each call runs on its own thread with its own completion queue, so a slow
 * handler (one waiting on the agent) never holds up another call.  A unary
 * handler returns a status and a reply; a server-streaming handler sends any
 * number of messages with gs_grpc_call_send and returns when it is done or
 * when gs_grpc_call_wait_closed says the client went away.  Unknown methods
 * get UNIMPLEMENTED, undecodable requests INVALID_ARGUMENT.
 *
 * Client: one unary call on a fresh channel ("unix:<path>", insecure
 * credentials), bounded by a deadline; and a server-streaming reader, used by
 * tests. */
#ifndef GS_GRPC_H
#define GS_GRPC_H

#include <grpc/status.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "gs_util.h"

/* Longest status message a handler can give. */
#define GS_GRPC_MSG_MAX 512
/* Most calls handled at once; more get RESOURCE_EXHAUSTED. */
#define GS_GRPC_MAX_CALLS 256

struct gs_grpc_server;
struct gs_grpc_call;

/* A unary handler.  On GRPC_STATUS_OK, *ret_reply holds the reply, which the
 * server packs and then hands to the method's free_reply.  Otherwise msg
 * (msglen bytes) says what was wrong, and *ret_reply must be left NULL. */
typedef grpc_status_code (*gs_grpc_unary_fn)(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req,
                                             ProtobufCMessage **ret_reply, char *msg, size_t msglen);
typedef void (*gs_grpc_free_fn)(void *ctx, ProtobufCMessage *reply);
/* A server-streaming handler: sends with gs_grpc_call_send, returns the
 * final status (ignored if the client is gone). */
typedef grpc_status_code (*gs_grpc_stream_fn)(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req,
                                              char *msg, size_t msglen);

struct gs_grpc_method {
        const char *path;                          /* "/package.Service/Method" */
        const ProtobufCMessageDescriptor *request; /* type of the request */
        gs_grpc_unary_fn unary;                    /* exactly one of unary, stream */
        gs_grpc_free_fn free_reply;                /* for unary replies; NULL: nothing */
        gs_grpc_stream_fn stream;
};

/* Serves methods[0..n) on the unix socket at path (a stale socket file there
 * is replaced).  methods and ctx must outlive the server.  Returns 0 with
 * *ret_server set, or a negative errno (-EADDRINUSE if the socket cannot be
 * bound, -ENAMETOOLONG for a path that does not fit sockaddr_un). */
int gs_grpc_server_start(const char *path, const struct gs_grpc_method *methods, size_t n, void *ctx,
                         struct gs_grpc_server **ret_server) GS_WUR;

/* Stops accepting calls, cancels the calls in flight (streams see their
 * client gone), waits for every handler to return, and frees the server.
 * NULL is fine. */
void gs_grpc_server_stop(struct gs_grpc_server *s);

/* In a handler: sends one message of a stream.  Returns 0, -ECANCELED if the
 * call is over (client cancelled or vanished, server stopping), -ETIMEDOUT if
 * the client did not take it within timeout_ms (the call is then cancelled),
 * or -ENOMEM. */
int gs_grpc_call_send(struct gs_grpc_call *call, const ProtobufCMessage *msg, int timeout_ms) GS_WUR;

/* In a handler: waits up to timeout_ms (0: just look) for the call to end.
 * Returns 1 if the client cancelled, vanished, or the server is stopping;
 * 0 if the call is still open. */
int gs_grpc_call_wait_closed(struct gs_grpc_call *call, int timeout_ms) GS_WUR;

/* In a handler: milliseconds left before the client's deadline, or -1 if it
 * set none. */
int64_t gs_grpc_call_deadline_left_ms(const struct gs_grpc_call *call);

/* Client: one unary call to method on the unix socket at path, waiting at
 * most timeout_ms.  Returns 0 with *ret_reply (free with
 * protobuf_c_message_free_unpacked) when the status is OK; otherwise a
 * negative errno (-ETIMEDOUT for DEADLINE_EXCEEDED, -ECONNREFUSED for
 * UNAVAILABLE, -EPROTO for any other status or an undecodable reply) with
 * *ret_status and msg saying why.  ret_status may be NULL. */
int gs_grpc_unary_call(const char *path, const char *method, const ProtobufCMessage *req,
                       const ProtobufCMessageDescriptor *reply_desc, int timeout_ms, ProtobufCMessage **ret_reply,
                       grpc_status_code *ret_status, char *msg, size_t msglen) GS_WUR;

struct gs_grpc_stream;

/* Client: starts a server-streaming call (no overall deadline). */
int gs_grpc_stream_open(const char *path, const char *method, const ProtobufCMessage *req,
                        struct gs_grpc_stream **ret_stream) GS_WUR;
/* Reads the next message, waiting at most timeout_ms.  Returns 0 with
 * *ret_msg, -ETIMEDOUT (call again to keep waiting), -ENODATA at the end of
 * the stream (*ret_status, msg then hold the final status), -EBADMSG. */
int gs_grpc_stream_read(struct gs_grpc_stream *st, const ProtobufCMessageDescriptor *d, int timeout_ms,
                        ProtobufCMessage **ret_msg, grpc_status_code *ret_status, char *msg, size_t msglen) GS_WUR;
/* Cancels the call if still open and frees everything.  NULL is fine. */
void gs_grpc_stream_close(struct gs_grpc_stream *st);

/* The POSIX errno closest to a gRPC status (OK -> 0). */
int gs_grpc_status_to_errno(grpc_status_code s);

#endif
