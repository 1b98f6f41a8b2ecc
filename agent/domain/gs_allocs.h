/* gs_allocs.h — allocations: one per set of device IDs handed to a container
 * (DESIGN.md "Allocation").  Main thread only.
 *
 * The id is a 16-hex-digit FNV-1a hash of the sorted device IDs, so asking
 * again for the same set finds the same allocation (the plugin's Allocate
 * is idempotent).  Its socket directory <socketRoot>/<id>-<random>/ is new
 * for every allocation (a released one's directory, maybe still mounted
 * or holding what a container left there, is never reused) and keeps its
 * path across agent restarts (the checkpoint names it), because it is
 * bind-mounted into containers: it is never removed on shutdown, only its
 * socket.  socketRoot is 0700: only root on the host reaches a socket;
 * a container reaches its own through the mount.
 *
 * Release: an allocation whose processes are all gone is deleted at once.
 * One that still has live processes is marked releasing: its socket is
 * closed (no new process can register), it drops out of the checkpoint, and
 * it is deleted, its units freed, when its last process exits.  Until then
 * its device IDs stay taken (CreateAllocation on them fails with -EBUSY),
 * since its memory is still in use.
 *
 * Checkpoint: <stateDir>/allocations, rewritten atomically (temp file,
 * fsync, rename) on every change:
 *     # gshare-agent allocations v2
 *     <id> <created unix time> <count> <device id> ... dir=<directory name>
 * (v1 lines, without dir=, are read too: their directory is <id>).
 * At start the agent re-creates each allocation in it.  A line that cannot
 * be restored now (GPU missing or unhealthy, too few free chunks, socket
 * path blocked) stays in the checkpoint: an allocation leaves it only by
 * release.  It is retried every GS_ALLOCS_RETRY_MS (and when the same
 * device IDs are asked for again); meanwhile its device IDs are refused to
 * other allocations and reported (ListGpus units_restoring) so that the
 * plugin advertises them Unhealthy.  A line that does not parse is kept
 * verbatim.  Processes are not checkpointed: after an agent restart they
 * must register again (their memory was the old agent's and is gone). */
#ifndef GS_ALLOCS_H
#define GS_ALLOCS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <limits.h>

#include "gs_agent.h"
#include "gs_ipc.h"
#include "gs_loop.h"
#include "gs_outside.h"
#include "gs_wire.h"
#include "gs_workers.h"

struct gs_palloc;
struct gs_proc;

struct gs_part {
        uint32_t gpu;            /* index into agent->gpus */
        uint32_t units;
        uint32_t quota_chunks;
        struct gs_palloc *pa;
        /* Its processes' memory outside the pool (gs_outside.h), under the
         * GPU's lock; bypass_charge is the charge slot of processes of the
         * pod that never registered (gs_usage.h). */
        struct gs_outside out;
        uint64_t bypass_charge;
        bool gone;               /* being deleted: owes nothing any more */
        /* Under the GPU's lock: a request of a process failed for want of
         * memory; the main loop asks the others for their wholly free
         * chunks (gs_proc_ask_give_back) and clears it. */
        bool give_back_wanted;
        uint32_t others_asked;   /* processes the last sweep asked */
        int64_t event_ms;        /* last over-quota Event (gs_event.h), CLOCK_MONOTONIC */
};

#define GS_ALLOCS_DIR_MAX 32      /* "<16 hex id>-<8 hex>" and a NUL */

struct gs_allocation {
        struct gs_allocation *next;
        struct gs_agent *agent;
        char id[17];             /* 16 hex digits of a hash of the sorted IDs */
        char **device_ids;       /* sorted */
        size_t ndevice_ids;
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
        struct gs_ipc_table ipc;     /* CUDA IPC exports of its processes */
        struct gs_wgroup wgroup;     /* its place in the worker pool's line */
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


#define GS_ALLOCS_MAX_IDS 4096u   /* device IDs in one request */
#define GS_CHECKPOINT_NAME "allocations"
#define GS_ALLOCS_RETRY_MS 1000

/* Writes the 16-hex-digit id of a sorted set of device IDs into out[17]. */
void gs_allocs_id(const char *const *sorted_ids, size_t n, char out[17]);

/* Creates the allocation of device IDs ids[0..n) (any order), or finds the
 * existing one for the same set (*ret_created = false).  All or nothing:
 * on failure returns a negative errno with a message naming the problem in
 * err and changes nothing.  created_unix 0 means now.  dir: the socket
 * directory's name of a restored allocation, or NULL for a fresh one
 * (<id>-<random>, created anew: no two allocations share a directory).
 * checkpoint: rewrite the checkpoint file (false while restoring it). */
int gs_allocs_create(struct gs_agent *ag, const char *const *ids, size_t n, uint64_t created_unix,
                     const char *dir, bool checkpoint, struct gs_allocation **ret, bool *ret_created, char *err,
                     size_t errlen) GS_WUR;

/* Before creating the allocation of ids[0..n): each other allocation holding
 * one of these IDs belongs to a pod that is gone (the kubelet hands out only
 * IDs that no container holds).  If none of them has a live process, they
 * are released, so that the new allocation takes their units at once, and 0
 * is returned; if one has, nothing changes and -EBUSY comes back with err
 * naming it and its pod.  An exact match (create returns it), an empty set or
 * an ID that is not this node's: 0, nothing done (create reports those). */
int gs_allocs_take_over(struct gs_agent *ag, const char *const *ids, size_t n, char *err,
                        size_t errlen) GS_WUR;

/* Whether a's pod is gone (released, or PodResources showed a pod holding it
 * and no longer does) while processes still use it: its units are then
 * reported draining (Unhealthy at the plugin). */
bool gs_allocs_draining(const struct gs_allocation *a);

/* Releases a (see above).  Returns 0 or a negative errno with err. */
int gs_allocs_release(struct gs_agent *ag, struct gs_allocation *a, char *err,
                      size_t errlen) GS_WUR;

/* Deletes a releasing allocation once it has no process left; no-op else. */
void gs_allocs_reap(struct gs_agent *ag, struct gs_allocation *a);

struct gs_allocation *gs_allocs_find(struct gs_agent *ag, const char *id);
/* The allocation holding exactly this set of device IDs (any order), or NULL. */
struct gs_allocation *gs_allocs_find_ids(struct gs_agent *ag, const char *const *ids, size_t n);

/* Writes the checkpoint.  Returns 0 or a negative errno (logged). */
int gs_allocs_checkpoint(struct gs_agent *ag) GS_WUR;
/* Re-creates the allocations of the checkpoint, logging each one and each
 * that cannot be restored.  A missing file is not an error. */
int gs_allocs_restore(struct gs_agent *ag) GS_WUR;

/* ag->restore_timer's callback (gs_loop.h): retries the checkpoint lines
 * not restored yet, every GS_ALLOCS_RETRY_MS while there are any. */
int64_t gs_allocs_tick(void *ag, int64_t now);
/* Releases a checkpoint line not restored yet, by id or by its exact set of
 * device IDs.  0, -ENOENT (no such line), or a negative errno with err. */
int gs_allocs_release_pending(struct gs_agent *ag, const char *id, const char *const *ids, size_t n,
                              char *err, size_t errlen) GS_WUR;
/* Whether the checkpoint line of allocation id waits to be restored. */
bool gs_allocs_is_pending(const struct gs_agent *ag, const char *id);
/* Units of g held by checkpoint lines not restored yet, into ret_units[max];
 * returns how many. */
size_t gs_allocs_units_pending(struct gs_agent *ag, const struct gs_gpu *g, uint32_t *ret_units,
                               size_t max);

/* Agent shutdown: closes every allocation's socket (unlinks it, keeps the
 * directory and the checkpoint) and frees them.  Processes must be gone. */
void gs_allocs_shutdown(struct gs_agent *ag);

/* Parses one checkpoint line (modified in place) into its parts; the
 * device IDs point into line; ret_dir gets the socket directory's name
 * (v1 lines have none: it is the id).  Returns the number of IDs, or
 * -EINVAL. */
int gs_allocs_parse_line(char *line, char ret_id[17], uint64_t *ret_created, char **ret_ids,
                         size_t max_ids, char ret_dir[GS_ALLOCS_DIR_MAX]) GS_WUR;

/* Slots of a part's outside set (gs_outside.h): its quota plus what it may
 * borrow. */
uint32_t gs_allocs_outside_slots(const struct gs_agent *ag, const struct gs_part *part);

/* An upgrade (gs_handover.h): stops (on false) or resumes accepting on
 * every allocation's socket. */
void gs_allocs_listen(struct gs_agent *ag, bool on);
/* An upgrade that failed after the new agent bound its sockets at our
 * paths: every allocation listens again on a fresh socket at its path. */
void gs_allocs_rebind(struct gs_agent *ag);

#endif
