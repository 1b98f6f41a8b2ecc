/* gs_ipc.h — CUDA IPC between processes of one allocation (the
 * application's cuIpcGetMemHandle / cuIpcOpenMemHandle; GS_OP_IPC_EXPORT
 * and GS_OP_IPC_OPEN in gs_wire.h).
 *
 * The driver refuses legacy IPC on VMM memory, and a handle to one of our
 * chunks would expose every block in it to whoever holds the handle.  So
 * the agent brokers it: an export names one live block of one process by
 * a random 128-bit token, kept in the allocation's table; a process of the
 * same allocation that presents the token is sent the chunks under the
 * block (their fds) and maps them in a range of its own.  The trust
 * boundary is the allocation: its processes are one container, which can
 * already read each other's memory; a token is worthless in any other
 * allocation.
 *
 * An export lives until its block is freed or its process exits, across
 * agent restarts and upgrades too: the agent keeps tokens only in memory,
 * so the exporter's hook keeps them (and, from GS_IPC_EXPORT_KEEP's
 * grants, an fd of the memory under each exported block: after a kill -9
 * only the processes hold any) and hands them to the next agent in its
 * reclaim (gs_ipc_reclaim_*).  Nothing is persisted: the state directory
 * holds no token, and a token reclaimed names a live block of the
 * reclaiming process only, in its own allocation.  The exporter re-registers
 * at its next memory call; until then its tokens are unknown (-ENOENT).
 *
 * An importer's mapping is its own business afterwards: the chunk stays in
 * the allocation (same container), and if it ever leaves it, the agent
 * re-creates its memory before anyone else gets it (gs_gpu's recycling),
 * so a stale mapping never sees another container's data.
 *
 * Locking: table->lock, then a GPU's lock (never the other way round). */
#ifndef GS_IPC_H
#define GS_IPC_H

#include <pthread.h>
#include <stdint.h>

#include "gs_ipc_table.h"
#include "gs_util.h"

struct gs_proc;

/* Exports the block at [off, off + size) of process p on its GPU index gpu
 * (the caller checked that a live block starts there).  The same token as
 * before if already exported.  -ENOSPC at GS_IPC_MAX_EXPORTS, -ENOMEM, or
 * the error of getrandom. */
int gs_ipc_export(struct gs_ipc_table *t, struct gs_proc *p, uint32_t gpu, uint64_t off, uint64_t size,
                  uint64_t ret_token[2]) GS_WUR;

/* Forgets p's export of the block at off on gpu (it is being freed). */
void gs_ipc_unexport(struct gs_ipc_table *t, struct gs_proc *p, uint32_t gpu, uint64_t off);
/* Forgets every export of p (it is gone). */
void gs_ipc_unexport_all(struct gs_ipc_table *t, struct gs_proc *p);

/* What an importer needs: the chunks under the block, each fd a duplicate
 * (O_CLOEXEC) the caller must close. */
struct gs_ipc_open {
        uint64_t off_in_chunk, size;
        uint32_t nchunks;
        int *fds; /* nchunks, malloc'ed; gs_ipc_open_done frees */
};

/* Resolves token for importer q on its GPU index gpu.  -ENOENT (no such
 * token), -EINVAL (q's own, or another GPU), -ENOMEM, -EMFILE (out of fds),
 * -EIO (a chunk has no memory: retired). */
int gs_ipc_open(struct gs_ipc_table *t, const struct gs_proc *q, uint32_t gpu, const uint64_t token[2],
                struct gs_ipc_open *ret) GS_WUR;
void gs_ipc_open_done(struct gs_ipc_open *o);

/* The fds of the chunks under p's export of the block at off on gpu (its
 * GS_IPC_EXPORT_KEEP grants), as gs_ipc_open would give them: -ENOENT (no
 * such export), -EIO, -ENOMEM, -EMFILE. */
int gs_ipc_export_fds(struct gs_ipc_table *t, const struct gs_proc *p, uint32_t gpu, uint64_t off,
                      struct gs_ipc_open *ret) GS_WUR;

/* A reclaiming process p (main thread, before a worker serves it; its
 * GS_RECLAIM_IPC and _IPC_FD messages, gs_wire.h).  An export it says it
 * had: kept pending (never resolved) until gs_ipc_reclaim_end checks its
 * block.  -ENOSPC at the bounds, -EEXIST for a token in use (the export
 * is dropped; the process may go on), -ENOMEM. */
int gs_ipc_reclaim_export(struct gs_ipc_table *t, struct gs_proc *p, uint32_t gpu, const uint64_t token[2],
                          uint64_t off) GS_WUR;
/* The memory p maps at slot on gpu: fd is taken (closed on failure).
 * -EINVAL: p does not hold that slot, or sent it already; -ENOMEM. */
int gs_ipc_reclaim_fd(struct gs_ipc_table *t, struct gs_proc *p, uint32_t gpu, uint32_t slot, int fd) GS_WUR;
/* Its reclaim is complete (its blocks in place): each pending export of p
 * whose offset starts a live block and whose chunks all came with an fd
 * resolves from now on, the others are dropped, and so is the memory no
 * export of p covers.  How many were reclaimed. */
uint32_t gs_ipc_reclaim_end(struct gs_ipc_table *t, struct gs_proc *p);

/* Number of live exports of p (for FREE's fast path and listings). */
uint32_t gs_ipc_count(const struct gs_proc *p);

#endif
