/* gs_ctrspec.h — what a gshare container gets for an allocation (the env
 * and mounts of docs/plugin.md "What a container gets"), independent of how
 * it is handed to the runtime: the DRA plugin writes it as a CDI spec
 * (dra/gs_cdi.h).  Device nodes are not part of it (the device plugin adds
 * them itself with deviceNodes: true). */
#ifndef GS_CTRSPEC_H
#define GS_CTRSPEC_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "gs_config.h"
#include "gs_util.h"
#include "gshare.pb-c.h"

#define GS_CTRSPEC_MAX_ENV 6
#define GS_CTRSPEC_MAX_MOUNTS 3
#define GS_CTRSPEC_VALUE_MAX 1024

struct gs_ctrspec {
        size_t nenv;
        struct {
                char name[32];
                char value[GS_CTRSPEC_VALUE_MAX];
        } env[GS_CTRSPEC_MAX_ENV];
        size_t nmounts;
        struct {
                char host[PATH_MAX];
                char ctr[PATH_MAX];
                bool ro;
        } mounts[GS_CTRSPEC_MAX_MOUNTS];
};

/* Fills ret for allocation al under configuration c (hookPath,
 * preloadPath, inject).  Returns 0, or -EINVAL with err when the agent's
 * allocation is unusable (no part, too many, a socket directory that is not
 * an absolute path). */
int gs_ctrspec_build(const struct gs_config *c, const Gshare__Ctl__V1__Allocation *al,
                     struct gs_ctrspec *ret, char *err, size_t errlen) GS_WUR;

#endif
