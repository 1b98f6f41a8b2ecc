/* fc_state.h — the layout of test/fakecuda's shared state file, which the
 * fake NVML (test/fakenvml) reads too: per-process device-memory charges
 * are what NVML's per-process used memory reports on a real GPU (memory a
 * process created, its contexts; not what it imported). */
#ifndef FC_STATE_H
#define FC_STATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define FC_MAX_DEV 8
#define FC_MAX_PROCS 512
#define FC_MAGIC 0x46434b46u /* "FKCF" */
#define FC_VERSION 3u
#define FC_MAX_EXPORTS 16384

struct fc_proc {
        int32_t pid;
        /* The inode of the process's pid namespace (0: unknown): pid is a
         * pid in that namespace (a pod's processes have their own). */
        uint32_t pidns;
        uint64_t bytes[FC_MAX_DEV];
};

/* Memory of which an fd was handed out (cuMemExportToShareableHandle), so
 * other processes may hold it: an fd or a mapping of its memfd.  While its
 * creator lives and keeps it, it is on the creator's books (procs[].bytes);
 * once the creator released it or died, it stays used, as on a GPU, as long
 * as any process holds it: a zombie, on nobody's books, still in used[].
 *
 * state is the entry's one word, changed only by compare-and-swap:
 * 0 free; otherwise kind << 56 | hi << 32 | lo with
 *   FC_EX_WRITING, slot, pid  being filled in for the creator (slot, pid)
 *   FC_EX_OWNED,   slot, pid  on the books of the creator (slot, pid)
 *   FC_EX_ZOMBIE,  0,    ino  nobody's (lo: the low 32 bits of ino, so
 *                             that a reused entry is not taken for this one)
 * ino, bytes and dev are written while WRITING and fixed until free. */
struct fc_export {
        uint64_t state;
        uint64_t ino; /* the memfd's inode */
        uint64_t bytes;
        int32_t dev;
        int32_t pad;
};

#define FC_EX_WRITING 1u
#define FC_EX_OWNED 2u
#define FC_EX_ZOMBIE 3u

static inline uint64_t fc_ex_state(unsigned kind, uint32_t hi, uint32_t lo)
{
        return (uint64_t)kind << 56 | (uint64_t)(hi & 0xffffffu) << 32 | lo;
}

static inline unsigned fc_ex_kind(uint64_t state)
{
        return (unsigned)(state >> 56);
}

struct fc_shared {
        uint32_t magic, version, ndev, pad;
        uint64_t total[FC_MAX_DEV];
        uint64_t used[FC_MAX_DEV];
        /* exports[i] for i >= ex_hwm has never been used. */
        uint32_t ex_hwm, pad2;
        struct fc_proc procs[FC_MAX_PROCS];
        struct fc_export exports[FC_MAX_EXPORTS];
};

_Static_assert(sizeof(struct fc_export) == 32, "fc_export layout");
_Static_assert(FC_MAX_PROCS <= 0xffffff, "a slot fits fc_export.state");
/* test/e2e reads used[0] at this offset (test_density.fake_used). */
_Static_assert(offsetof(struct fc_shared, used) == 80, "fc_shared layout");

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
