/* gs_hook_msg.h — messages on the agent's socket (gs_wire.h), with the
 * fds they carry: no state, below the connection (gs_hook_conn.h). */
#ifndef GS_HOOK_MSG_H
#define GS_HOOK_MSG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gs_wire.h"

/* Receives one message and at most max (1 or 2) fds into ret_fds[0..max),
 * -1 where none came.  Returns the length or a negative errno (-EPROTO, all
 * fds closed, if more came or the message was cut).  flags: recvmsg's
 * (MSG_CMSG_CLOEXEC is always added). */
ssize_t gs_msg_recv_fds(int sock, void *buf, size_t len, int *ret_fds, int max, int flags);
/* Whether a received message of got bytes is a whole message of type. */
int gs_msg_hdr_ok(const struct gs_sock_hdr *h, uint16_t type, size_t len, ssize_t got);

#endif
