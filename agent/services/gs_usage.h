/* gs_usage.h — the agent's periodic look at GPU memory held outside its
 * pool, through NVML (gs_nvml.h), every usageInterval and soon after a
 * process registers or exits.
 *
 * For each GPU, NVML lists the processes holding memory and how much:
 *   - a registered process is charged what NVML shows, or its expected
 *     context size (GS_OP_CTX) if that is more, to its allocation
 *     (gs_outside.h): module images that load lazily make it grow, and the
 *     scan takes more of the allocation's chunks for it;
 *   - a process that never registered (it bypasses the hook) but lives in
 *     a pod whose allocation is known (its cgroup names the pod's UID, which
 *     the allocation learnt from its registered processes) is charged to
 *     that allocation the same way;
 *   - the agent itself and processes of no known pod are not charged.
 * When an allocation's charges exceed what its quota can cover, config
 * overQuota decides: kill (the processes the quota cannot cover get
 * SIGKILL, bypassing ones first; the default: the quota is a promise to
 * every other pod, as a memory cgroup's limit is) or report (a warning in
 * the log and the gshare_allocation_over_quota_total metric).  Either way a
 * Warning Event GPUMemoryOverQuota goes to the pod (gs_event.h), at most
 * once a minute.  Main thread only. */
#ifndef GS_USAGE_H
#define GS_USAGE_H

#include <stdint.h>

#include "gs_agent.h"

/* At most one over-quota Event per allocation part this often. */
#define GS_USAGE_EVENT_MS 60000

/* Opens NVML (config nvmlLibrary) and finds each GPU's device.  Without
 * NVML the agent runs on, charging expected context sizes only. */
void gs_usage_open(struct gs_agent *ag);
void gs_usage_close(struct gs_agent *ag);
/* Scans now. */
void gs_usage_scan(struct gs_agent *ag);
/* ag->usage_timer's callback (gs_loop.h): scans; the next scan is due
 * usageInterval later (gs_agent_want_scan brings it forward). */
int64_t gs_usage_tick(void *ag, int64_t now);

struct gs_allocation;
/* An Event with reason and message on a's pod, or on its DRA claim (whose
 * pod the agent does not know); nothing without an API server.  Main
 * thread. */
void gs_usage_event(struct gs_agent *ag, const struct gs_allocation *a, int warning, const char *reason,
                    const char *msg);

/* The pod UID in a /proc/<pid>/cgroup text ("...pod<uid>..." with '_' or
 * '-' in the UID, as the systemd and cgroupfs drivers write it), written
 * with dashes into uid (37 bytes).  0, or -ENOENT. */
int gs_usage_pod_uid(const char *cgroup_text, char uid[37]) GS_WUR;

#endif
