/* gs_ledger.h — which process holds which chunk, kept where a restarted
 * agent finds it (issue 18; docs/agent.md "Restarts").
 *
 * When the agent dies, the chunks its processes have mapped stay alive in
 * them (the driver keeps mapped memory), but the agent's books go.  A new
 * agent must charge every byte a process still holds to its allocation
 * without trusting the process's word, and must know the pool's size
 * before the crash so that the units it advertises do not drop.  So each
 * GPU has a file <stateDir>/held-<GPU UUID>: a header (chunk size, chunk
 * count) and one entry per pool chunk naming the process (pid and start
 * time, so a reused pid is not mistaken for it), its allocation and the
 * slot where it maps the chunk.  The file is mapped MAP_SHARED and written
 * in place under the GPU's lock as chunks are placed at and taken from
 * processes' slots (gs_pool_set_hold_fn): a kill -9 loses nothing, since
 * the page cache outlives the process.  An entry is written whole before
 * its kind is set (and its kind cleared first when it goes), so a torn
 * write reads as "not held" only for a chunk whose fd was never sent.
 *
 * A new agent reads the old file (gs_ledger_read), builds its pool and
 * its processes' records from it, writing a new file under a temporary
 * name (gs_ledger_open) that replaces the old one only once all of it is
 * written (gs_ledger_commit): killed halfway, the next agent reads the old
 * file again. */
#ifndef GS_LEDGER_H
#define GS_LEDGER_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gs_util.h"

#define GS_LEDGER_MAGIC 0x4c534847u /* "GHSL" */
#define GS_LEDGER_VERSION 1u
#define GS_LEDGER_MAX_CHUNKS (UINT32_C(1) << 24)

enum gs_ledger_kind {
        GS_LEDGER_FREE = 0,
        GS_LEDGER_SLOT = 1, /* granted: mapped by the process at slot */
        GS_LEDGER_VMM = 2,  /* behind the process's own VMM allocations */
        /* The spill record's (gs_gpu_spillrec.c; slot entries otherwise as
         * SLOT, whose kind there means: data in host memory at slot). */
        GS_LEDGER_SPILLING = 3,   /* a move of slot to host memory in flight */
        GS_LEDGER_UNSPILLING = 4, /* a move of slot back to the GPU in flight */
        GS_LEDGER_OWED = 5,       /* allocation alloc is owed slot chunks */
        /* A spare whose host memory's fd the process got in a move of
         * slot it said it did not do: charged until the process is gone
         * (gs_gpu_spill.c, struct gs_spare's holder). */
        GS_LEDGER_HELD = 6,
        /* Held by allocation alloc's outside set (gs_outside.h: chunks whose
         * memory went to its processes' contexts and modules) at slot of
         * the set; pid and start 0. */
        GS_LEDGER_OUTSIDE = 7,
};

/* Who holds a chunk: a gs_pproc's tag (gs_pool.h). */
struct gs_ledger_tag {
        uint32_t pid;
        uint32_t kind;  /* enum gs_ledger_kind */
        uint64_t start; /* the process's start time (/proc/PID/stat, ticks) */
        uint64_t alloc; /* the allocation's id as a number */
};

struct gs_ledger_ent {
        uint32_t pid;
        uint32_t slot;
        uint64_t start;
        uint64_t alloc;
        uint32_t kind; /* written last, cleared first */
        uint32_t reserved;
};
_Static_assert(sizeof(struct gs_ledger_ent) == 32, "gs_ledger_ent layout");

struct gs_ledger_hdr {
        uint32_t magic, version;
        uint64_t chunk_bytes;
        uint32_t nchunks, reserved;
        uint8_t uuid[16];
        uint64_t pad[3];
};
_Static_assert(sizeof(struct gs_ledger_hdr) == 64, "gs_ledger_hdr layout");

struct gs_ledger {
        int fd;
        void *map;
        size_t len;
        struct gs_ledger_ent *ent;
        uint32_t nchunks;
        char path[PATH_MAX], tmp[PATH_MAX];
};

/* The ledger file's path for GPU uuid under dir. */
int gs_ledger_path(char *buf, size_t len, const char *dir, const char *uuid) GS_WUR;
/* Reads path: 0 with *ret (malloc'd, *ret_n entries, all of them, held
 * or not) and *ret_chunk_bytes; -ENOENT if there is none; -EINVAL (with
 * why) if it is not a ledger of this GPU; else a negative errno. */
int gs_ledger_read(const char *path, const uint8_t uuid[16], struct gs_ledger_ent **ret, uint32_t *ret_n,
                   uint64_t *ret_chunk_bytes, char *why, size_t whylen) GS_WUR;
/* A new ledger of nchunks free entries, mapped, under a temporary name
 * beside path.  0 or a negative errno (l->fd is -1 then). */
int gs_ledger_open(struct gs_ledger *l, const char *path, const uint8_t uuid[16], uint64_t chunk_bytes,
                   uint32_t nchunks) GS_WUR;
/* The new ledger replaces the old file.  0 or a negative errno. */
int gs_ledger_commit(struct gs_ledger *l) GS_WUR;
/* Records chunk as held by t at slot, or as free. */
void gs_ledger_set(struct gs_ledger *l, uint32_t chunk, const struct gs_ledger_tag *t, uint32_t slot, bool held);
/* Entry i's kind only (its other fields as they are). */
void gs_ledger_set_kind(struct gs_ledger *l, uint32_t i, uint32_t kind);
/* A committed ledger no longer at its path (another agent's replaced it:
 * a takeover that failed) is put there again, a copy mapped in its place;
 * the caller keeps gs_ledger_set away meanwhile.  0 or a negative errno. */
int gs_ledger_relink(struct gs_ledger *l) GS_WUR;
/* Unmaps and closes; the file stays as it is.  l->fd -1 is fine. */
void gs_ledger_close(struct gs_ledger *l);
/* A process's start time in clock ticks since boot (field 22 of
 * /proc/PID/stat), or 0 if it cannot be read. */
uint64_t gs_ledger_pid_start(pid_t pid);

#endif
