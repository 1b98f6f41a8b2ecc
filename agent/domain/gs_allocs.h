/* gs_allocs.h — allocations: the lifecycle of one allocation of units of
 * the GPUs to one owner (docs/design.md).  Main thread only.
 *
 * The owner is a field of the allocation (gs_ckpt.h, enum gs_owner_kind):
 *   - the device plugin's: a set of device IDs handed to a container.  Its
 *     id is a 16-hex-digit FNV-1a hash of the sorted device IDs, so asking
 *     again for the same set finds the same allocation (the plugin's
 *     Allocate is idempotent);
 *   - a DRA ResourceClaim's: `units` units of one GPU, the agent picking the
 *     lowest free ones; asking again for the same claim UID finds it.  One
 *     claim is one allocation with one quota, however many pods or
 *     containers use it (docs/dra.md).  Its id is random.
 * The request (struct gs_alloc_req) is parsed once, at this boundary, into
 * the units the allocation holds (struct gs_unit).
 *
 * Its socket directory <socketRoot>/<id>-<random>/ (gs_sockdir.h) is new
 * for every allocation and keeps its path across agent restarts (the
 * checkpoint names it), because it is bind-mounted into containers.
 *
 * Release: an allocation whose processes are all gone is deleted at once.
 * One that still has live processes is marked releasing: its socket is
 * closed (no new process can register), it drops out of the checkpoint, and
 * it is deleted, its units freed, when its last process exits.  Until then
 * its units stay taken (asking for them fails with -EBUSY, or -ENOSPC for a
 * claim), since its memory is still in use.  A device plugin's allocation
 * goes by ReleaseAllocation or the reconciler (gs_recon.h); a claim's only
 * by the release of the claim (NodeUnprepareResources).
 *
 * Checkpoint (gs_ckpt.h): one line per allocation, rewritten on every
 * change (one file replace, one fsync and one directory fsync per create
 * or release).  At start the agent re-creates each allocation in it
 * (gs_restore.h); a line that cannot be restored now stays in it, and a
 * checkpoint that cannot be read whole leaves the allocations unknown:
 * nothing is created, released or reclaimed until it reads.  Processes are
 * not checkpointed: after an agent restart they must register again. */
#ifndef GS_ALLOCS_H
#define GS_ALLOCS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <limits.h>

#include "gs_node.h"
#include "gs_ckpt.h"
#include "gs_ipc_table.h"
#include "gs_loop.h"
#include "gs_outside.h"
#include "gs_wire.h"
#include "gs_workers.h"

struct gs_palloc;
struct gs_proc;

struct gs_part {
        uint32_t gpu; /* index into agent->gpus */
        uint32_t units;
        uint32_t quota_chunks;
        /* The most its processes may hold: quota + what they may borrow.
         * Raised (never lowered) by gs_allocs_set_burst on the main thread;
         * read atomically by the workers. */
        uint32_t burst_chunks;
        struct gs_palloc *pa;
        /* Its processes' memory outside the pool (gs_outside.h), under the
         * GPU's lock; bypass_charge is the charge slot of processes of the
         * pod that never registered (gs_usage.h). */
        struct gs_outside out;
        uint64_t bypass_charge;
        bool gone; /* being deleted: owes nothing any more */
        /* Under the GPU's lock: a request of a process was short of
         * memory; the main loop's kick asks the others for their wholly
         * free chunks and clears it (sessions/gs_short.h). */
        bool give_back_wanted;
        uint32_t others_asked; /* processes the last kick asked */
        int64_t event_ms;      /* last over-quota Event (gs_event.h), CLOCK_MONOTONIC */
        /* Borrowing Events (gs_usage.c): whether GPUMemoryBorrowed was
         * told and not yet GPUMemoryReturned, and when the last was. */
        bool borrow_told;
        int64_t borrow_event_ms;
        /* The same for GPUMemorySpilled / GPUMemoryUnspilled. */
        bool spill_told;
        int64_t spill_event_ms;
};

/* One unit an allocation holds. */
struct gs_unit {
        uint32_t gpu; /* index into agent->gpus */
        uint32_t unit;
};

struct gs_allocation {
        struct gs_allocation *next;
        struct gs_node *node;
        char id[17];             /* 16 hex digits */
        enum gs_owner_kind kind; /* its owner */
        char **device_ids;       /* GS_OWNER_DEVICES: sorted; else NULL */
        size_t ndevice_ids;
        struct gs_claim claim;  /* GS_OWNER_CLAIM */
        uint64_t burst_bytes;   /* as asked for (0: the node's balloonCap) */
        uint64_t burst_refused; /* a pod annotation's burst refused (said once) */
        /* Its compute policy (gs_qos.h): the reconciler sets it from the
         * pod (gs_proc_qos_set), the checkpoint keeps it.  Main thread
         * writes; workers read it whole (four bytes, atomically). */
        struct gs_qos_policy qos;
        /* The launches its gone processes' hooks said their QoS held, and
         * the ns they waited (their last gs_shm.qos_held, _ns; saturating):
         * the metrics' sums go on past a process's exit.  Shown, never
         * used (a hostile hook can say anything).  Main thread.
         * qos_gpu_ns_gone likewise: the GPU time their QoS timed (their
         * last gs_shm.qos_gpu_ns). */
        uint64_t qos_held_gone, qos_held_ns_gone, qos_gpu_ns_gone;
        struct gs_unit *units; /* what it holds (claims: ascending) */
        size_t nunits;
        uint64_t created_unix;
        uint32_t nparts;
        struct gs_part parts[GS_MAX_GPUS_PER_ALLOC];
        char dir_name[GS_ALLOCS_DIR_MAX]; /* of socket_dir, under socketRoot */
        char socket_dir[PATH_MAX];
        char socket_path[PATH_MAX];
        int listen_fd;
        struct gs_loop_io listen_io;
        /* Released by the control API; deleted when its last process exits.
         * Its units stay taken until then (its processes still hold memory). */
        bool releasing;
        struct gs_proc *procs;
        uint32_t nprocs;
        struct gs_ipc_table ipc; /* CUDA IPC exports of its processes */
        struct gs_wgroup wgroup; /* its place in the worker pool's line */
        /* The reconciler's (gs_recon.h): the container PodResources last
         * showed holding its device IDs (empty: none seen yet), and since
         * when (CLOCK_MONOTONIC ms) no container has held them (0: held, or
         * not yet looked at). */
        char pod_namespace[64];
        char pod_name[254];
        char container_name[64];
        /* The pod's UID, from its registered processes' cgroups: processes
         * of the pod that bypass the hook are charged here (gs_usage.h). */
        char pod_uid[37];
        int64_t unheld_since_ms;
};

#define GS_CHECKPOINT_NAME GS_CKPT_NAME
#define GS_ALLOCS_RETRY_MS 1000

/* Writes the 16-hex-digit id of a sorted set of device IDs into out[17]. */
void gs_allocs_id(const char *const *sorted_ids, size_t n, char out[17]);

/* What to create, parsed by gs_allocs_create alone. */
struct gs_alloc_req {
        enum gs_owner_kind kind;
        const char *const *ids; /* GS_OWNER_DEVICES: the device IDs, any order */
        size_t nids;
        struct gs_claim claim; /* GS_OWNER_CLAIM: uid, ns, name, gpu_uuid, units */
        /* Per GPU, the most its processes may use, quota included (what is
         * past the quota is borrowed); 0: quota + the node's balloonCap. */
        uint64_t burst_bytes;
        struct gs_qos_policy qos; /* its compute policy (gs_qos.h) */
        /* The checkpoint line being restored (its id, creation time,
         * socket directory, a claim's units; the checkpoint is not
         * rewritten), or NULL: a new allocation, checkpointed. */
        const struct gs_ckpt_rec *restore;
};

/* Creates the allocation of req, or finds the existing one of the same
 * owner (*ret_created = false).  All or nothing: on failure returns a
 * negative errno with a message naming the problem in err and changes
 * nothing.  Device IDs: -EINVAL (none, too many, duplicated, not a device
 * ID), -ENODEV (not this node's), -EBUSY (part of another allocation, or of
 * one being released or waiting to be restored), -EIO (an unhealthy GPU).
 * A claim: -EINVAL (a bad uid, namespace or name, 0 units, more than the
 * GPU has), -ENODEV (no such GPU here), -EEXIST (the claim has an
 * allocation of another size or GPU), -ENOSPC (too few free units),
 * -EAGAIN (its allocation waits to be restored), -EIO.  Both: the
 * checkpoint's write error.
 * A new request goes through gs_restore_create (gs_restore.h), which first
 * makes sure the allocations are known (else the checkpoint's read error);
 * this returns 1, nothing done, for a new request of exactly the device IDs
 * of a checkpoint line not restored yet (gs_pending.h): gs_restore_create
 * restores that line. */
int gs_allocs_create(struct gs_node *ag, const struct gs_alloc_req *req, struct gs_allocation **ret, bool *ret_created,
                     char *err, size_t errlen) GS_WUR;

/* The claim a is the allocation of, or NULL (a device plugin's, or a
 * claim's released and draining). */
const struct gs_claim *gs_allocs_claim(const struct gs_allocation *a);
/* The allocation of claim uid (not one being released), or NULL. */
struct gs_allocation *gs_allocs_find_claim(struct gs_node *ag, const char *uid);
/* Releases the allocation of claim uid (gs_allocs_release; a line waiting
 * to be restored: gs_restore_release_claim, the door callers use).  0 also
 * when the claim has none. */
int gs_allocs_release_claim(struct gs_node *ag, const char *uid, char *err, size_t errlen) GS_WUR;

/* Before creating the allocation of ids[0..n): each other allocation holding
 * one of these IDs belongs to a pod that is gone (the kubelet hands out only
 * IDs that no container holds).  If none of them has a live process, they
 * are released, so that the new allocation takes their units at once, and 0
 * is returned; if one has, nothing changes and -EBUSY comes back with err
 * naming it and its pod.  An exact match (create returns it), an empty set or
 * an ID that is not this node's: 0, nothing done (create reports those). */
int gs_allocs_take_over(struct gs_node *ag, const char *const *ids, size_t n, char *err, size_t errlen) GS_WUR;

/* Whether a's pod is gone (released, or PodResources showed a pod holding it
 * and no longer does) while processes still use it: its units are then
 * reported draining (Unhealthy at the plugin). */
bool gs_allocs_draining(const struct gs_allocation *a);

/* Releases a (see above).  Returns 0 or a negative errno with err. */
int gs_allocs_release(struct gs_node *ag, struct gs_allocation *a, char *err, size_t errlen) GS_WUR;

/* Deletes a releasing allocation once it has no process left; no-op else. */
void gs_allocs_reap(struct gs_node *ag, struct gs_allocation *a);

struct gs_allocation *gs_allocs_find(struct gs_node *ag, const char *id);
/* The allocation holding exactly this set of device IDs (any order), or NULL. */
struct gs_allocation *gs_allocs_find_ids(struct gs_node *ag, const char *const *ids, size_t n);

/* Writes the checkpoint.  Returns 0 or a negative errno (logged); while
 * the checkpoint is unknown (gs_restore.h) the read's error, nothing
 * written. */
int gs_allocs_checkpoint(struct gs_node *ag) GS_WUR;

/* Agent shutdown: closes every allocation's socket (unlinks it, keeps the
 * directory and the checkpoint) and frees them.  Processes must be gone. */
void gs_allocs_shutdown(struct gs_node *ag);

/* Slots of a part's outside set (gs_outside.h): its quota plus what it may
 * borrow. */
uint32_t gs_allocs_outside_slots(const struct gs_node *ag, const struct gs_part *part);

/* The GPU of this UUID (any case), or NULL. */
struct gs_gpu *gs_allocs_gpu(struct gs_node *ag, const char *uuid);

/* part->burst_chunks from any thread. */
static inline uint32_t gs_part_burst(const struct gs_part *part)
{
        return __atomic_load_n(&part->burst_chunks, __ATOMIC_ACQUIRE);
}

/* Main thread: gives allocation a the burst limit bytes (docs/burst.md),
 * checked as at its creation; a burst is only raised.  Its processes
 * already registered may borrow up to their address range (sized by the
 * node's burstMax, gs_proc.h).  Checkpointed.  0, or a negative errno with
 * err (nothing changed). */
int gs_allocs_set_burst(struct gs_node *ag, struct gs_allocation *a, uint64_t bytes, char *err, size_t errlen) GS_WUR;
/* Main thread (the reconciler): the burst a's pod asks for by its
 * annotation (gs_podburst.h); a refused one is logged once. */
void gs_allocs_burst_from_pod(struct gs_node *ag, struct gs_allocation *a, uint64_t bytes);

#endif
