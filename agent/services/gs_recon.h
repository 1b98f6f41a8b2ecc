/* gs_recon.h — the reconciler with the kubelet (docs/design.md).
 *
 * AllocateRequest carries no pod identity, so the agent learns which pod
 * holds an allocation afterwards: every reconcileInterval a thread calls
 * PodResourcesLister.List on podResourcesSocket (gRPC, blocking, never on
 * the main thread), keeps the device IDs of resourceName each container
 * holds, and hands that snapshot to the main thread through an eventfd.
 *
 * The main thread applies it (gs_recon_apply):
 *   - an allocation any of whose device IDs a container holds records that
 *     container (namespace/pod/container, shown by gsharectl);
 *   - an allocation none of whose IDs any container holds, seen so for
 *     reclaimGrace and created at least reclaimGrace ago, is released
 *     (gs_allocs_release: deleted when its last process exits).  The grace
 *     covers the window between Allocate and the container's start, which
 *     PodResources does not report yet.
 * A List that fails (kubelet down, timeout, a reply too large to trust)
 * yields no snapshot: nothing is reclaimed on missing information, and the
 * failure is logged once per streak.  The allocation's owner decides
 * (gs_allocs.h): only a device plugin's is ever reclaimed, never a DRA
 * claim's nor one that a kept (unparsable) checkpoint line names; and
 * while the checkpoint cannot be read (gs_restore.h) nothing is.
 *
 * Optionally (gs_watch, when the agent runs in a cluster with NODE_NAME
 * set) a watch of the node's pods on the API server calls gs_recon_kick
 * when a pod is deleted or finishes, so that the List happens at once. */
#ifndef GS_RECON_H
#define GS_RECON_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "gs_agent.h"

/* Device IDs of resourceName in one List reply; a larger reply is refused
 * (as a failure: nothing reclaimed). */
#define GS_RECON_MAX_IDS 65536u
/* Bound on one List call. */
#define GS_RECON_LIST_TIMEOUT_MS 5000

struct gs_recon;
struct gs_recon_snapshot;

/* Starts the reconciler of ag (ag->node.cfg: podResourcesSocket,
 * reconcileInterval, reclaimGrace, resourceName): its thread, which hands
 * each snapshot to the main loop (an async source on ag->node.loop, where it is
 * applied).  With reconcileInterval 0 it returns 0 and *ret NULL
 * (reconciler off). */
int gs_recon_start(struct gs_agent *ag, struct gs_recon **ret) GS_WUR;

/* Any thread: list again now instead of at the next interval. */
void gs_recon_kick(struct gs_recon *rc);

/* Stops the thread (waits for a List in flight, at most
 * GS_RECON_LIST_TIMEOUT_MS) and frees rc.  NULL is fine. */
void gs_recon_stop(struct gs_recon *rc);

/* ---- the parts, for tests ---- */

/* Builds the snapshot of a List reply: the device IDs of resource each
 * container holds.  Returns 0, -E2BIG past GS_RECON_MAX_IDS, -ENOMEM; err
 * says why. */
int gs_recon_snapshot_new(const ProtobufCMessage *list_reply, const char *resource, struct gs_recon_snapshot **ret,
                          char *err, size_t errlen) GS_WUR;
void gs_recon_snapshot_free(struct gs_recon_snapshot *s);

/* Main thread: applies snapshot s at now_ms (CLOCK_MONOTONIC) and now_unix
 * (wall clock) as described above.  Returns how many allocations it
 * released. */
unsigned gs_recon_apply(struct gs_agent *ag, const struct gs_recon_snapshot *s, int64_t now_ms, uint64_t now_unix,
                        uint32_t grace_ms);

#endif
