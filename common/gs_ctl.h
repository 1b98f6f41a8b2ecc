/* gs_ctl.h — framing of the control protocol (proto/gshare.proto) on the
 * agent's control socket, and a blocking client for it.
 *
 * A frame is a 4-byte little-endian length, then that many bytes of one
 * serialized message; 0 < length <= GS_CTL_MAX_MSG. */
#ifndef GS_CTL_H
#define GS_CTL_H

#include <stddef.h>
#include <stdint.h>

#include "gs_util.h"
#include "gshare.pb-c.h"

#define GS_CTL_MAX_MSG (4u << 20)
#define GS_CTL_DEFAULT_SOCKET "/run/gshare/agent.sock"

/* A frame's header: the message's length, 4 bytes little-endian. */
#define GS_CTL_HDR 4

typedef Gshare__Ctl__V1__Request GsCtlRequest;
typedef Gshare__Ctl__V1__Reply GsCtlReply;

/* The frame of msg, one definition for both ends (the agent's control
 * server, gs_ctlsrv.c, and this client): *ret_size is GS_CTL_HDR + the
 * packed message.  0, -EINVAL for an empty message (no frame has length
 * 0), or -EMSGSIZE over GS_CTL_MAX_MSG. */
int gs_ctl_frame_size(const ProtobufCMessage *msg, size_t *ret_size) GS_WUR;
/* Writes msg's frame into buf, of the size gs_ctl_frame_size gave. */
void gs_ctl_frame_pack(const ProtobufCMessage *msg, uint8_t *buf, size_t size);
/* The message length a frame's header says, in *ret_len: 0, or -EMSGSIZE
 * for 0 or over GS_CTL_MAX_MSG (a hostile or broken peer: never trust it
 * for an allocation). */
int gs_ctl_frame_len(const uint8_t hdr[GS_CTL_HDR], uint32_t *ret_len) GS_WUR;

/* Connects to the unix socket at path (SOCK_STREAM, SOCK_CLOEXEC).
 * Returns the fd or a negative errno. */
int gs_ctl_connect(const char *path) GS_WUR;

/* Writes one frame holding msg, waiting at most timeout_ms (< 0: forever).
 * Returns 0, -ETIMEDOUT, -EMSGSIZE, or another negative errno. */
int gs_ctl_send(int fd, const ProtobufCMessage *msg, int timeout_ms) GS_WUR;

/* Reads one frame into a malloc'ed buffer *ret_buf of *ret_len bytes.
 * Returns 0, -ECONNRESET on EOF before a whole frame, -EMSGSIZE for a length
 * of 0 or over GS_CTL_MAX_MSG, -ETIMEDOUT, or another negative errno; on
 * failure the outputs are untouched. */
int gs_ctl_recv_frame(int fd, int timeout_ms, uint8_t **ret_buf, size_t *ret_len) GS_WUR;

/* Reads one Reply.  On success *ret_reply is to be freed with
 * gs_ctl_reply_free.  -EBADMSG if the frame does not unpack. */
int gs_ctl_recv_reply(int fd, int timeout_ms, GsCtlReply **ret_reply) GS_WUR;

/* One request, one reply, on a new connection to path.  Returns 0 with
 * *ret_reply set (whose ->error may still be non-zero: the agent's answer),
 * or a negative errno if the exchange itself failed. */
int gs_ctl_call(const char *path, const GsCtlRequest *req, int timeout_ms, GsCtlReply **ret_reply) GS_WUR;

void gs_ctl_reply_free(GsCtlReply *reply);

#endif
