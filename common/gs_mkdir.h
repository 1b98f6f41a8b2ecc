/* gs_mkdir.h — mkdir -p: the directories above a socket or state path
 * (gshare-agent: agentSocket, socketRoot, stateDir) and the DRA plugin's
 * registration and plugin directories. */
#ifndef GS_MKDIR_H
#define GS_MKDIR_H

#include <stddef.h>
#include <sys/types.h>

#include "gs_util.h"

/* Creates each missing directory above path (not path itself), each with
 * mode whatever the umask.  Existing ones are left as they are (a link to
 * a directory, as /var/run, counts as one); one that is not a directory is
 * an error naming it.  Trailing slashes are ignored.  Returns how many
 * directories it created (0: none were missing), or a negative errno with
 * the problem in err: -ENAMETOOLONG (path over PATH_MAX - 1), -ENOTDIR,
 * or mkdir's or chmod's error.  Those it created before a failure stay. */
int gs_mkdir_parents(const char *path, mode_t mode, char *err, size_t errlen) GS_WUR;

/* gs_mkdir_parents(path, parent_mode), then path itself with mode (an
 * existing directory is left as it is).  Returns how many it created, or a
 * negative errno with the problem in err. */
int gs_mkdir_p(const char *path, mode_t parent_mode, mode_t mode, char *err, size_t errlen) GS_WUR;

#endif
