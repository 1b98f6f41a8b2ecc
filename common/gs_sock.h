/* gs_sock.h — unix sockets: a listening socket born with its mode, and one
 * message sent or received with fds attached (SCM_RIGHTS).  The agent's
 * control, allocation and handover sockets listen through it; its
 * processes' messages and the handover carry fds through it.  The hook
 * keeps its own copies (it links libc only). */
#ifndef GS_SOCK_H
#define GS_SOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "gs_util.h"

/* The most fds one message carries (either way). */
#define GS_SOCK_MAX_FDS 253 /* SCM_MAX_FD */

/* A unix socket of type (SOCK_STREAM or SOCK_SEQPACKET; made non-blocking
 * and close-on-exec) bound at path and listening with backlog.  The file is
 * born with mode (bind under a umask that leaves mode): there is no moment
 * when others could connect, and no chmod by path that a swapped-in symlink
 * could redirect.  The umask is the process's: call this from the one
 * thread that creates files.  An existing file at path is not removed (the
 * caller decides whether a stale one may go).  Returns the fd, or
 * -ENAMETOOLONG when path does not fit sockaddr_un, or the failing call's
 * negative errno; on failure nothing this call bound is left at path. */
int gs_sock_listen(const char *path, int type, mode_t mode, int backlog) GS_WUR;

/* Sends one message (buf, len) with fds[0..nfds) attached: one sendmsg
 * with flags | MSG_NOSIGNAL, retried on EINTR.  Returns the bytes sent, or
 * a negative errno (-EINVAL: nfds over GS_SOCK_MAX_FDS). */
ssize_t gs_sock_send_fds(int sock, const void *buf, size_t len, const int *fds, size_t nfds, int flags) GS_WUR;

/* Receives one message into buf: one recvmsg with flags |
 * MSG_CMSG_CLOEXEC, retried on EINTR.  Of the fds that came, the first
 * max_fds (at most GS_SOCK_MAX_FDS) are kept in fds[0..*ret_nfds) in their
 * order; every other one is closed here (the kernel drops those past
 * GS_SOCK_MAX_FDS and says the message was truncated).  *ret_trunc: the
 * data or the fds were cut (MSG_TRUNC, MSG_CTRUNC).  Returns the length
 * (0: the peer closed), or a negative errno with no fd kept.  A caller
 * that wants "exactly n" passes max_fds n + 1 and checks *ret_nfds. */
ssize_t gs_sock_recv_fds(int sock, void *buf, size_t len, int flags, int *fds, size_t max_fds, size_t *ret_nfds,
                         bool *ret_trunc) GS_WUR;

#endif
