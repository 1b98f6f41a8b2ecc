/* gs_sockdir.h — an allocation's socket directory and listening socket
 * (docs/design.md).  Main thread only.
 *
 * <socketRoot>/<dir>/agent.sock.  socketRoot is 0700: only root on the
 * host reaches a socket; a container reaches its own directory (0755)
 * through the bind mount.  A fresh allocation's directory is
 * "<id>-<8 random hex digits>", created anew (no two allocations ever share
 * one: a released one's, maybe still mounted or holding what a container
 * left there, is never reused); a restored one keeps its name (the
 * checkpoint names it).  The directory is never removed on shutdown, only
 * the socket.  Directories are made and checked through O_NOFOLLOW fds: a
 * symlink planted in their place is refused, never followed. */
#ifndef GS_SOCKDIR_H
#define GS_SOCKDIR_H

#include <stddef.h>

#include "gs_allocs.h"

/* Opens a's socket, listening, watched by the main loop: in directory dir
 * (a restored allocation's; it may exist), or, dir NULL, in a fresh one
 * made here.  Sets a->dir_name, socket_dir, socket_path, listen_fd.
 * Returns 0 or a negative errno with err. */
int gs_sockdir_open(struct gs_node *ag, struct gs_allocation *a, const char *dir, char *err, size_t errlen) GS_WUR;
/* Closes a's socket (unlinked unless the paths are another agent's). */
void gs_sockdir_close(struct gs_node *ag, struct gs_allocation *a);

/* An upgrade (gs_handover.h): stops (on false) or resumes accepting on
 * every allocation's socket. */
void gs_sockdir_listen(struct gs_node *ag, bool on);
/* An upgrade that failed after the new agent bound its sockets at our
 * paths: every allocation listens again on a fresh socket at its path. */
void gs_sockdir_rebind(struct gs_node *ag);

#endif
