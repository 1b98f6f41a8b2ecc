/* gs_ctlsrv.h — the agent's control socket: proto/gshare.proto framed as in
 * gs_ctl.h, served from the main epoll loop.  Non-blocking throughout: a
 * client is read into a bounded buffer (one frame at most GS_CTL_MAX_MSG),
 * replies are queued and written as the socket takes them, a Watch client
 * whose queue passes GS_CTLSRV_MAX_QUEUED is dropped rather than let the
 * agent's memory grow, and at most GS_CTLSRV_MAX_CLIENTS are served at once.
 * The connections are a gs_stream server (gs_stream.h).
 * The socket is created mode 0600: only root (the device plugin, gsharectl
 * run by an admin) may talk to it. */
#ifndef GS_CTLSRV_H
#define GS_CTLSRV_H

#include "gs_agent.h"

#define GS_CTLSRV_MAX_CLIENTS 256u
#define GS_CTLSRV_MAX_QUEUED (16u << 20)
/* After an error reply, how long the peer has to read it and close. */
#define GS_CTLSRV_LINGER_MS 2000

/* Listens on path (a stale socket file there is replaced). */
int gs_ctlsrv_new(struct gs_agent *ag, const char *path, struct gs_ctlsrv **ret, char *err, size_t errlen) GS_WUR;
/* Closes every client and the socket, unlinks it.  NULL is fine. */
void gs_ctlsrv_free(struct gs_ctlsrv *s);
/* Sends the GPU list to every Watch client. */
void gs_ctlsrv_broadcast(struct gs_ctlsrv *s);

#endif
