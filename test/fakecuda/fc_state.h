/* fc_state.h — the layout of test/fakecuda's shared state file, which the
 * fake NVML (test/fakenvml) reads too: per-process device-memory charges
 * are what NVML's per-process used memory reports on a real GPU (memory a
 * process created, its contexts; not what it imported). */
#ifndef FC_STATE_H
#define FC_STATE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define FC_MAX_DEV 8
#define FC_MAX_PROCS 512
#define FC_MAGIC 0x46434b46u /* "FKCF" */
#define FC_VERSION 2u
#define FC_MAX_ZOMBIES 4096

struct fc_proc {
        int32_t pid;
        /* The inode of the process's pid namespace (0: unknown): pid is a
         * pid in that namespace (a pod's processes have their own). */
        uint32_t pidns;
        uint64_t bytes[FC_MAX_DEV];
};

/* Memory its creator released while another process still held it (an fd
 * or a mapping of its memfd): it stays used, as on a GPU, until no process
 * holds it any more. */
struct fc_zombie {
        uint64_t ino;      /* the memfd's inode; 0: free entry */
        uint64_t bytes;
        int32_t dev;
        int32_t busy;      /* claimed by a process updating it */
};

struct fc_shared {
        uint32_t magic, version, ndev, pad;
        uint64_t total[FC_MAX_DEV];
        uint64_t used[FC_MAX_DEV];
        struct fc_proc procs[FC_MAX_PROCS];
        struct fc_zombie zombies[FC_MAX_ZOMBIES];
};

/* $GSHARE_FAKECUDA_STATE, default /dev/shm/gshare-fakecuda-<uid>. */
static inline const char *fc_state_path(char *buf, size_t n)
{
        const char *path = secure_getenv("GSHARE_FAKECUDA_STATE");

        if (path && *path)
                return path;
        snprintf(buf, n, "/dev/shm/gshare-fakecuda-%u", (unsigned)getuid());
        return buf;
}

#endif
