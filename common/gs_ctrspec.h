/* gs_ctrspec.h — what a gshare container gets for an allocation (the env
 * and mounts of docs/plugin.md "What a container gets"), independent of how
 * it is handed to the runtime: the device plugin answers Allocate with it,
 * the DRA plugin writes it as a CDI spec.  Device nodes are added with
 * gs_ctrspec_add_devices when deviceNodes is true (the NVIDIA container
 * runtime adds them otherwise). */
#ifndef GS_CTRSPEC_H
#define GS_CTRSPEC_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "gs_config.h"
#include "gs_util.h"
#include "gs_wire.h"
#include "gshare.pb-c.h"

/* Where things appear inside a container. */
#define GS_CTR_HOOK "/usr/lib/gshare/libgshare.so"
#define GS_CTR_PRELOAD "/etc/ld.so.preload"
#define GS_CTR_SOCKET_DIR "/var/run/gshare"

#define GS_CTRSPEC_MAX_ENV 7
#define GS_CTRSPEC_MAX_MOUNTS 3
#define GS_CTRSPEC_VALUE_MAX 1024
/* The driver's three control nodes and one node per GPU. */
#define GS_CTRSPEC_MAX_DEVS (3 + GS_MAX_GPUS_PER_ALLOC)

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
        size_t ndevs; /* device nodes: only with deviceNodes */
        char devs[GS_CTRSPEC_MAX_DEVS][32];
};

/* Fills ret for allocation al under configuration c (hookPath,
 * preloadPath, inject).  Returns 0, or -EINVAL with err when the agent's
 * allocation is unusable (no part, too many, a socket directory that is not
 * an absolute path). */
int gs_ctrspec_build(const struct gs_config *c, const Gshare__Ctl__V1__Allocation *al, struct gs_ctrspec *ret,
                     char *err, size_t errlen) GS_WUR;

/* config deviceNodes: adds /dev/nvidiactl, /dev/nvidia-uvm,
 * /dev/nvidia-uvm-tools and, for each of the allocation's GPUs whose PCI
 * bus id is pci[i] ("" if unknown), /dev/nvidiaN, N its minor in
 * <nvidia_proc>/gpus/<pci>/information.  A GPU whose minor cannot be found
 * is logged and left out. */
void gs_ctrspec_add_devices(struct gs_ctrspec *s, const char *nvidia_proc, const char *const *pci, size_t n);

#endif
