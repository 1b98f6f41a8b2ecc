/* gs_sockmsg.h — messages on a process's socket (gs_wire.h: HELLO, WELCOME,
 * GRANT, ERROR): the header, and sending one SOCK_SEQPACKET record with the
 * fds it carries without ever blocking the caller for long.  Used by the
 * session on the main thread (gs_proc_*.c) and by the request server on the
 * worker threads (gs_serve.c). */
#ifndef GS_SOCKMSG_H
#define GS_SOCKMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gs_util.h"
#include "gs_wire.h"

/* A send waits at most this long for room in the socket. */
#define GS_SOCKMSG_SEND_MS 2000

void gs_sockmsg_hdr(struct gs_sock_hdr *h, uint16_t type, uint32_t len);
/* Sends one message with fds[0..nfds) (nfds <= 2) attached, waiting at
 * most GS_SOCKMSG_SEND_MS for room and giving up early if *stop (may be
 * NULL) is set.  0, -ETIMEDOUT, or the send's negative errno. */
int gs_sockmsg_send_fds(int sock, const void *msg, size_t len, const int *fds, size_t nfds, const int *stop) GS_WUR;
/* As gs_sockmsg_send_fds, with fd attached if >= 0. */
int gs_sockmsg_send(int sock, const void *msg, size_t len, int fd, const int *stop) GS_WUR;
/* One struct gs_sock_grant of type (GS_SOCK_GRANT, _IPC_GRANT, _MOVE)
 * for the ring request of req with fd attached, as gs_sockmsg_send. */
int gs_sockmsg_send_grant(int sock, uint16_t type, const struct gs_ring_msg *req, uint32_t slot, uint64_t chunk_bytes,
                          int fd, const int *stop) GS_WUR;
/* Best effort: an ERROR message with err and msg. */
void gs_sockmsg_error(int sock, int err, const char *msg);
/* Receives one message from a process (non-blocking) into buf; closes
 * whatever fds a hostile peer attached.  The length (0: closed), or a
 * negative errno (-EAGAIN: nothing yet); *ret_trunc when it was cut. */
ssize_t gs_sockmsg_recv(int sock, void *buf, size_t len, bool *ret_trunc) GS_WUR;
/* As gs_sockmsg_recv, keeping in *ret_fd the fd if exactly one came (-1
 * otherwise: none, or several, all closed); the caller closes it. */
ssize_t gs_sockmsg_recv_fd(int sock, void *buf, size_t len, bool *ret_trunc, int *ret_fd) GS_WUR;

#endif
