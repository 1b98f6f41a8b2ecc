/* gs_usage.c — see gs_usage.h. */
#include "gs_usage.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "gs_pool.h"
#include "gs_event.h"
#include "gs_gpu.h"
#include "gs_log.h"
#include "gs_nvml.h"
#include "gs_proc.h"
#include "gs_short.h"

void gs_usage_open(struct gs_agent *ag)
{
        char err[512];

        if (gs_nvml_open(&ag->node.nvml, ag->node.cfg.nvml_library, err, sizeof(err)) < 0)
                log_warn("NVML unavailable (%s): memory outside the pool is charged by expected "
                         "context size only, processes that bypass the hook are not seen",
                         err);
        gs_loop_timer_arm(&ag->usage_timer, 0);
}

void gs_usage_close(struct gs_agent *ag)
{
        gs_nvml_close(&ag->node.nvml);
}

static void *nvml_dev(struct gs_agent *ag, struct gs_gpu *g)
{
        if (!g->nvml_dev && ag->node.nvml.fn)
                g->nvml_dev = gs_nvml_device(&ag->node.nvml, g->uuid);
        return g->nvml_dev;
}

int gs_usage_pod_uid(const char *text, char uid[37])
{
        for (const char *p = strstr(text, "pod"); p; p = strstr(p + 3, "pod")) {
                const char *q = p + 3;
                size_t i;

                for (i = 0; i < 36; i++) {
                        char c = q[i];
                        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
                        if (dash ? (c != '-' && c != '_') : !isxdigit((unsigned char)c))
                                break;
                        uid[i] = dash ? '-' : (char)tolower((unsigned char)c);
                }
                if (i == 36 && !isxdigit((unsigned char)q[36])) {
                        uid[36] = '\0';
                        return 0;
                }
        }
        return -ENOENT;
}

/* The pod UID of pid from its cgroup file ($GSHARE_PROC_ROOT for tests,
 * default /proc). */
static int pid_pod_uid(pid_t pid, char uid[37])
{
        const char *root = getenv("GSHARE_PROC_ROOT");
        char path[128], buf[4096];
        size_t len = 0;
        int fd, r;

        snprintf(path, sizeof(path), "%s/%d/cgroup", root && *root ? root : "/proc", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -ENOENT;
        r = gs_read_all(fd, buf, sizeof(buf) - 1, &len);
        close(fd);
        if (r < 0 && r != -EFBIG)
                return r;
        buf[len] = '\0';
        return gs_usage_pod_uid(buf, uid);
}

/* A process NVML lists on a GPU, classified once per scan: uid is the pod
 * UID of a process that bypasses the hook ("" for the agent, registered
 * processes and processes of no pod). */
struct seen {
        struct gs_nvml_proc pr;
        char uid[37];
};

static uint64_t lookup(const struct seen *sv, uint32_t n, pid_t pid)
{
        for (uint32_t i = 0; i < n; i++)
                if (sv[i].pr.pid == pid)
                        return sv[i].pr.bytes;
        return 0;
}

static bool registered(struct gs_agent *ag, pid_t pid)
{
        for (struct gs_allocation *a = ag->node.allocs; a; a = a->next)
                for (struct gs_proc *p = a->procs; p; p = p->next)
                        if (p->pid == pid)
                                return true;
        return false;
}

static void kill_pid(struct gs_allocation *a, pid_t pid, int pidfd, uint64_t bytes, const char *what)
{
        int fd = pidfd >= 0 ? pidfd : (int)syscall(SYS_pidfd_open, pid, 0);
        int r = fd >= 0 ? (int)syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0) : -1;

        log_warn("allocation %s (pod %s/%s) is over its quota: %s %d holding %llu MiB outside "
                 "the pool %s",
                 a->id, a->pod_namespace[0] ? a->pod_namespace : "?", a->pod_name[0] ? a->pod_name : "?", what,
                 (int)pid, (unsigned long long)(bytes >> 20),
                 r == 0 ? "killed (overQuota: kill)" : "could not be killed");
        if (fd >= 0 && fd != pidfd)
                close(fd);
}

/* The log line, and an Event at most once a minute: on the pod, or for a
 * DRA claim's allocation (whose pod the agent does not know) on the claim. */
static void report(struct gs_agent *ag, struct gs_allocation *a, struct gs_part *part, struct gs_gpu *g, uint64_t over,
                   uint32_t killed)
{
        const struct gs_claim *claim;
        char msg[600], what[200];
        int64_t now = gs_mono_ms();
        int r;

        if (killed)
                snprintf(what, sizeof(what),
                         "over by more than overQuotaBound (%llu MiB) for overQuotaGrace: %u "
                         "process(es) killed (overQuota: kill)",
                         (unsigned long long)(ag->node.cfg.over_quota_bound_bytes >> 20), killed);
        else if (over > ag->node.cfg.over_quota_bound_bytes && ag->node.cfg.over_quota == GS_OVER_QUOTA_KILL)
                snprintf(what, sizeof(what),
                         "its processes are killed if it stays over by more than "
                         "overQuotaBound (%llu MiB) for overQuotaGrace (%u ms)",
                         (unsigned long long)(ag->node.cfg.over_quota_bound_bytes >> 20),
                         ag->node.cfg.over_quota_grace_ms);
        else
                snprintf(what, sizeof(what), "no process is killed (%s)",
                         ag->node.cfg.over_quota == GS_OVER_QUOTA_KILL ? "within overQuotaBound" : "overQuota: report");
        snprintf(msg, sizeof(msg),
                 "gshare allocation %s is over its quota on GPU %s by %llu MiB: %llu MiB of %llu "
                 "held outside the pool (contexts, modules, processes bypassing the hook); its allocations fail "
                 "with CUDA_ERROR_OUT_OF_MEMORY until memory it frees covers it; %s",
                 a->id, g->uuid, (unsigned long long)((over + (1 << 20) - 1) >> 20),
                 (unsigned long long)(part->out.charged >> 20),
                 (unsigned long long)(((uint64_t)part->quota_chunks * g->chunk_bytes) >> 20), what);
        if (!killed && part->event_ms && now - part->event_ms < GS_USAGE_EVENT_MS)
                return; /* said already, once a minute at most */
        log_warn("allocation %s (pod %s/%s): %s", a->id, a->pod_namespace[0] ? a->pod_namespace : "?",
                 a->pod_name[0] ? a->pod_name : "?", msg);
        part->event_ms = now;
        if (!ag->events)
                return;
        if (a->pod_name[0])
                r = gs_events_post(ag->events, GS_EVENT_WARNING, GS_EVENT_POD, a->pod_namespace, a->pod_name,
                                   a->pod_uid, "GPUMemoryOverQuota", msg);
        else if ((claim = gs_allocs_claim(a)))
                r = gs_events_post(ag->events, GS_EVENT_WARNING, GS_EVENT_CLAIM, claim->ns, claim->name, claim->uid,
                                   "GPUMemoryOverQuota", msg);
        else
                return;
        if (r < 0)
                log_debug("allocation %s: over-quota Event dropped", a->id);
}

/* The last resort: processes of part i killed until what they hold outside
 * the pool covers over bytes: those that bypass the hook first, then the
 * registered ones holding most outside the pool.  How many were killed. */
static uint32_t kill_over(struct gs_allocation *a, uint32_t i, const struct seen *sv, uint32_t n, uint64_t over)
{
        uint64_t freed = 0;
        uint32_t killed = 0;

        for (uint32_t k = 0; a->pod_uid[0] && k < n && freed < over; k++)
                if (strcmp(sv[k].uid, a->pod_uid) == 0) {
                        kill_pid(a, sv[k].pr.pid, -1, sv[k].pr.bytes, "process bypassing the hook");
                        freed += sv[k].pr.bytes;
                        killed++;
                }
        while (freed < over) {
                struct gs_proc *big = NULL;
                for (struct gs_proc *p = a->procs; p; p = p->next)
                        if (i < p->ngpus && p->state != GS_PROC_HELLO && !p->over_killed &&
                            (!big || p->gpus[i].outside_measured > big->gpus[i].outside_measured))
                                big = p;
                if (!big || !big->gpus[i].outside_measured)
                        break;
                big->over_killed = true;
                kill_pid(a, big->pid, big->pidfd, big->gpus[i].outside_measured, "process");
                freed += big->gpus[i].outside_measured;
                killed++;
        }
        return killed;
}

/* Borrowing (docs/burst.md) is told on the pod or claim as Normal Events:
 * GPUMemoryBorrowed when part starts borrowing (at most once a
 * GS_USAGE_EVENT_MS), GPUMemoryReturned when what it borrowed is all back
 * after that.  borrowed: its chunks borrowed now. */
static void note_borrowing(struct gs_agent *ag, struct gs_allocation *a, struct gs_part *part, const struct gs_gpu *g,
                           uint32_t borrowed)
{
        int64_t now = gs_mono_ms();
        char msg[400];

        if (!borrowed == !part->borrow_told)
                return;
        if (borrowed && part->borrow_event_ms && now - part->borrow_event_ms < GS_USAGE_EVENT_MS)
                return; /* said a moment ago: not again while it comes and goes */
        if (borrowed)
                snprintf(msg, sizeof(msg),
                         "gshare allocation %s borrows %llu MiB of free memory on GPU %s past its "
                         "quota of %llu MiB (burst %llu MiB); the memory is lent while free",
                         a->id, (unsigned long long)(((uint64_t)borrowed * g->chunk_bytes) >> 20), g->uuid,
                         (unsigned long long)(((uint64_t)part->quota_chunks * g->chunk_bytes) >> 20),
                         (unsigned long long)(((uint64_t)gs_part_burst(part) * g->chunk_bytes) >> 20));
        else
                snprintf(msg, sizeof(msg), "gshare allocation %s gave back all it borrowed on GPU %s", a->id, g->uuid);
        part->borrow_told = borrowed != 0;
        part->borrow_event_ms = now;
        log_info("allocation %s (pod %s/%s): %s", a->id, a->pod_namespace[0] ? a->pod_namespace : "?",
                 a->pod_name[0] ? a->pod_name : "?", msg);
        gs_usage_event(ag, a, 0, borrowed ? "GPUMemoryBorrowed" : "GPUMemoryReturned", msg);
}

void gs_usage_event(struct gs_agent *ag, const struct gs_allocation *a, int warning, const char *reason,
                    const char *msg)
{
        const struct gs_claim *claim = gs_allocs_claim(a);
        enum gs_event_type type = warning ? GS_EVENT_WARNING : GS_EVENT_NORMAL;
        int r = -EINVAL;

        if (!ag->events)
                return;
        if (a->pod_name[0])
                r = gs_events_post(ag->events, type, GS_EVENT_POD, a->pod_namespace, a->pod_name, a->pod_uid, reason,
                                   msg);
        else if (claim)
                r = gs_events_post(ag->events, type, GS_EVENT_CLAIM, claim->ns, claim->name, claim->uid, reason, msg);
        if (r < 0)
                log_debug("allocation %s: %s Event not posted: %s", a->id, reason, strerror(-r));
}

/* Spills (docs/burst.md "Giving it back"), as borrowing above: Normal
 * GPUMemorySpilled when some of what part borrowed was moved to host
 * memory (at most once a GS_USAGE_EVENT_MS), GPUMemoryUnspilled when all
 * of it is back on the GPU.  spilled: its chunks in host memory now. */
static void note_spilling(struct gs_agent *ag, struct gs_allocation *a, struct gs_part *part, const struct gs_gpu *g,
                          uint32_t spilled)
{
        int64_t now = gs_mono_ms();
        char msg[400];

        if (!spilled == !part->spill_told)
                return;
        if (spilled && part->spill_event_ms && now - part->spill_event_ms < GS_USAGE_EVENT_MS)
                return;
        if (spilled)
                snprintf(msg, sizeof(msg),
                         "gshare allocation %s: %llu MiB of the memory it borrowed on GPU %s were "
                         "moved to host memory for their owner (same addresses, slower); they come back when the GPU "
                         "has memory to lend",
                         a->id, (unsigned long long)(((uint64_t)spilled * g->chunk_bytes) >> 20), g->uuid);
        else
                snprintf(msg, sizeof(msg), "gshare allocation %s: its memory on GPU %s is all on the GPU again", a->id,
                         g->uuid);
        part->spill_told = spilled != 0;
        part->spill_event_ms = now;
        log_info("allocation %s (pod %s/%s): %s", a->id, a->pod_namespace[0] ? a->pod_namespace : "?",
                 a->pod_name[0] ? a->pod_name : "?", msg);
        gs_usage_event(ag, a, 0, spilled ? "GPUMemorySpilled" : "GPUMemoryUnspilled", msg);
}

/* One allocation part on g: charges from the scan's list sv[0..n). */
static uint64_t scan_part(struct gs_agent *ag, struct gs_gpu *g, struct gs_allocation *a, uint32_t i,
                          const struct seen *sv, uint32_t n)
{
        struct gs_part *part = &a->parts[i];
        uint32_t slots = gs_allocs_outside_slots(&ag->node, part), killed = 0;
        uint64_t measured = 0, bypass = 0, over;
        struct gs_palloc_stats ps;
        bool all_back = true;

        if (!a->pod_uid[0])
                for (struct gs_proc *p = a->procs; p && !a->pod_uid[0]; p = p->next)
                        if (pid_pod_uid(p->pid, a->pod_uid) < 0)
                                a->pod_uid[0] = '\0';
        for (uint32_t k = 0; a->pod_uid[0] && k < n; k++)
                if (strcmp(sv[k].uid, a->pod_uid) == 0)
                        bypass += sv[k].pr.bytes;
        gs_gpu_lock(g);
        for (struct gs_proc *p = a->procs; p; p = p->next) {
                struct gs_proc_gpu *pg = &p->gpus[i];
                uint64_t m = lookup(sv, n, p->pid);

                /* Before a process has reclaimed, what it maps is not all
                 * known (slots in host memory), nor its charge. */
                if (p->state != GS_PROC_ACTIVE)
                        all_back = false;
                if (i >= p->ngpus || p->state == GS_PROC_HELLO)
                        continue;
                /* Memory an earlier agent made that the process still maps
                 * (and holds no handle of) counts to the process in NVML
                 * (test/gpu/orphan_check.py): it is charged as held chunks. */
                uint64_t orphan =
                        ((uint64_t)gs_gpu_orphans_of(g, pg->pp) + gs_gpu_orphans_of(g, pg->vpp)) * g->chunk_bytes;
                m = m > orphan ? m - orphan : 0;
                /* In a move the process maps other memory than its chunks
                 * say (unmapped, not settled yet): a charge only goes up. */
                if ((g->moves.moving_out || g->moves.moving_back) && m < pg->outside_measured)
                        m = pg->outside_measured;
                pg->outside_measured = m;
                measured += m;
                (void)!gs_outside_charge(g, &part->out, part->pa, slots, &pg->outside_charge,
                                         m > pg->ctx_expect ? m : pg->ctx_expect, false);
        }
        (void)!gs_outside_charge(g, &part->out, part->pa, slots, &part->bypass_charge, bypass, false);
        if (all_back)
                gs_outside_adopted_done(g, &part->out);
        measured += bypass;
        gs_outside_settle(g, &part->out);
        over = part->out.short_bytes;
        if (over) {
                /* Covered first from the pod's own free memory: chunks its
                 * processes hold with no live block come back (their hooks
                 * give them back at their next call) and the set takes
                 * them before any process may (gs_outside_cover). */
                (void)gs_short_ask_give_back(a, i);
                /* Killing is the last resort: over by more than the bound,
                 * for longer than the grace. */
                if (ag->node.cfg.over_quota == GS_OVER_QUOTA_KILL && over > ag->node.cfg.over_quota_bound_bytes &&
                    gs_mono_ms() - part->out.short_since_ms >= (int64_t)ag->node.cfg.over_quota_grace_ms)
                        killed = kill_over(a, i, sv, n, over);
        }
        gs_palloc_stats(part->pa, &ps);
        gs_gpu_unlock(g);
        note_borrowing(ag, a, part, g, ps.chunks_borrowed);
        note_spilling(ag, a, part, g, ps.chunks_spilled);
        if (over)
                report(ag, a, part, g, over, killed);
        return measured;
}

void gs_usage_scan(struct gs_agent *ag)
{
        struct gs_nvml_proc *pr = calloc(GS_NVML_MAX_PROCS, sizeof(*pr));
        struct seen *sv = calloc(GS_NVML_MAX_PROCS, sizeof(*sv));

        if (!pr || !sv) {
                free(pr);
                free(sv);
                return;
        }
        for (uint32_t gi = 0; gi < ag->node.ngpus; gi++) {
                struct gs_gpu *g = &ag->node.gpus[gi];
                void *dev = nvml_dev(ag, g);
                uint64_t measured = 0;
                uint32_t n = 0;
                int r;

                if (!g->pool)
                        continue;
                gs_gpu_lock(g);
                gs_gpu_retry_pending(g);
                gs_gpu_unlock(g);
                if (!dev)
                        continue;
                r = gs_nvml_procs(&ag->node.nvml, dev, pr, GS_NVML_MAX_PROCS, &n);
                if (r < 0) {
                        log_debug("GPU %u: NVML process list: %s", g->index, strerror(-r));
                        continue;
                }
                /* Each process's cgroup is read once, whatever the number
                 * of allocations. */
                for (uint32_t k = 0; k < n; k++) {
                        sv[k].pr = pr[k];
                        if (pr[k].pid == getpid() || registered(ag, pr[k].pid) || pid_pod_uid(pr[k].pid, sv[k].uid) < 0)
                                sv[k].uid[0] = '\0';
                }
                for (struct gs_allocation *a = ag->node.allocs; a; a = a->next)
                        for (uint32_t i = 0; i < a->nparts; i++)
                                if (a->parts[i].gpu == gi)
                                        measured += scan_part(ag, g, a, i, sv, n);
                gs_gpu_lock(g);
                g->outside_measured = measured;
                gs_gpu_unlock(g);
        }
        free(pr);
        free(sv);
        gs_agent_count(ag, &ag->usage_scans);
}

int64_t gs_usage_tick(void *data, int64_t now)
{
        struct gs_agent *ag = data;

        (void)now;
        gs_usage_scan(ag);
        return ag->node.cfg.usage_interval_ms ? gs_mono_ms() + ag->node.cfg.usage_interval_ms : GS_LOOP_NEVER;
}
