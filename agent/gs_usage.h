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
/* What NVML shows this process (the agent) holding on g; 0 if unknown.
 * gs_gpu_open measures its own context with it. */
uint64_t gs_usage_own_bytes(struct gs_agent *ag, struct gs_gpu *g);
/* Scans now. */
void gs_usage_scan(struct gs_agent *ag);
/* Makes the next scan come within 100 ms (a process registered or left). */
void gs_usage_kick(struct gs_agent *ag);
/* Any thread: asks the main thread for a scan now (no room in the driver:
 * growth since the last scan may have used the headroom). */
void gs_usage_kick_async(struct gs_agent *ag);
/* A worker thread (holding no GPU lock) that found no room: asks for a
 * scan and waits until one has run, at most ms.  The scan charges growth
 * to its pods, which restores the headroom unless memory is really held
 * past its quota; the caller then tries once more. */
void gs_usage_wait_scan(struct gs_agent *ag, int ms);
/* Scans if one is due.  Returns the ms until the next one, or timeout if
 * that is sooner (timeout < 0: none). */
int gs_usage_tick(struct gs_agent *ag, int timeout);

/* The pod UID in a /proc/<pid>/cgroup text ("...pod<uid>..." with '_' or
 * '-' in the UID, as the systemd and cgroupfs drivers write it), written
 * with dashes into uid (37 bytes).  0, or -ENOENT. */
int gs_usage_pod_uid(const char *cgroup_text, char uid[37]) GS_WUR;

#endif
