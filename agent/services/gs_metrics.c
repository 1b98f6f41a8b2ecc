/* gs_metrics.c — see gs_metrics.h. */
#include "gs_metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gs_allocs.h"
#include "gs_metrics_int.h"
#include "gs_gpu.h"
#include "gs_pending.h"
#include "gs_log.h"
#include "gs_proc.h"
#include "gs_stream.h"

struct gs_metrics {
        struct gs_agent *ag;
        struct gs_stream_srv *srv;
};

/* ---- the scrape (the text: gs_metrics_text.c) ---- */

/* What is read under each GPU's lock, read once so that every family of one
 * scrape agrees. */
struct gpu_snap {
        struct gs_pool_stats st;
        uint32_t units_allocated, units_lent, units_draining, units_restoring;
        uint32_t spilled, owed, spill_ready, spill_held, spill_prep;
        struct gs_gpu_move_stats mv;
};

struct part_snap {
        const struct gs_allocation *a;
        const struct gs_claim *claim;
        const struct gs_gpu *g;
        uint32_t units;
        uint64_t quota_bytes, burst_bytes, borrowed_bytes, held_bytes, requested_bytes, outside_bytes, over_quota_bytes,
                spilled_bytes, lent_bytes;
        uint32_t over_quota;
};

/* Every sample of one histogram: _bucket per bound and +Inf, _sum, _count;
 * lab: its labels, formatted and escaped (`a="x",b="y"`), or "". */
static void hist_samples(struct gs_mx_buf *b, const char *name, const char *lab, const struct gs_hist *h,
                         const struct gs_hist_scale *sc)
{
        const char *sep = lab[0] ? "," : "", *open = lab[0] ? "{" : "", *close = lab[0] ? "}" : "";
        struct gs_hist_snap sn;

        gs_hist_read(h, sc, &sn);
        for (uint32_t i = 0; i < sc->n; i++) {
                if (sc->le_div == 1)
                        gs_mx_put(b, "%s_bucket{%s%sle=\"%llu\"} %llu\n", name, lab, sep, (unsigned long long)sc->le[i],
                                  (unsigned long long)sn.cum[i]);
                else
                        gs_mx_put(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, lab, sep, (double)sc->le[i] / sc->le_div,
                                  (unsigned long long)sn.cum[i]);
        }
        gs_mx_put(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, lab, sep, (unsigned long long)sn.count);
        if (sc->le_div == 1)
                gs_mx_put(b, "%s_sum%s%s%s %llu\n", name, open, lab, close, (unsigned long long)sn.sum);
        else
                gs_mx_put(b, "%s_sum%s%s%s %.9f\n", name, open, lab, close, (double)sn.sum / sc->le_div);
        gs_mx_put(b, "%s_count%s%s%s %llu\n", name, open, lab, close, (unsigned long long)sn.count);
}

/* The node's name, as the DaemonSet gives it (kube-state-metrics' node
 * label), for the agent's and the GPUs' series: NULL if not known. */
static const char *node_name(const struct gs_agent *ag)
{
        const char *node = ag->node.cfg.node_name[0] ? ag->node.cfg.node_name : secure_getenv("NODE_NAME");

        return node && node[0] && strlen(node) < GS_CONFIG_NODE_NAME_MAX ? node : NULL;
}

/* An agent-wide sample's name and labels: {node="..."} if known. */
static void put_agent(struct gs_mx_buf *b, const char *name, const char *node)
{
        gs_mx_put(b, "%s", name);
        if (node) {
                gs_mx_put(b, "{");
                gs_mx_label(b, "node", node, true);
                gs_mx_put(b, "}");
        }
}

/* Request ops by number (gs_wire.h), as the op label says them; 0: any
 * other. */
static const char *const op_names[GS_HIST_OPS] = {
        [0] = "other",
        [GS_OP_ALLOC] = "alloc",
        [GS_OP_FREE] = "free",
        [GS_OP_MEMINFO] = "meminfo",
        [GS_OP_RANGE] = "range",
        [GS_OP_RELEASE] = "release",
        [GS_OP_PING] = "ping",
        [GS_OP_VMM_CREATE] = "vmm_create",
        [GS_OP_VMM_RELEASE] = "vmm_release",
        [GS_OP_IPC_EXPORT] = "ipc_export",
        [GS_OP_IPC_OPEN] = "ipc_open",
        [GS_OP_CTX] = "ctx",
        [GS_OP_CTX_DONE] = "ctx_done",
        [GS_OP_GIVE_BACK] = "give_back",
};

/* A histogram family of n histograms, told apart by label (names[i]), or
 * one without a label (label NULL, n 1); with the node label if known. */
static void hist_family(struct gs_mx_buf *b, const char *node, const char *name, const char *help, const char *label,
                        const char *const *names, const struct gs_hist *h, uint32_t n, const struct gs_hist_scale *sc)
{
        gs_mx_family(b, name, "histogram", help);
        for (uint32_t i = 0; i < n; i++) {
                struct gs_mx_buf lab = { 0 };

                if (node)
                        gs_mx_label(&lab, "node", node, true);
                if (label)
                        gs_mx_label(&lab, label, names[i], !node);
                if (lab.failed)
                        b->failed = true;
                else
                        hist_samples(b, name, lab.p ? lab.p : "", &h[i], sc);
                free(lab.p);
        }
}

static void hists(struct gs_mx_buf *b, struct gs_agent *ag, const char *node)
{
        static const char *const grants[GS_HIST_GRANTS] = { "alloc", "vmm_create" };
        static const char *const phases[GS_HIST_RECONS] = { "list", "apply" };
        const struct gs_agent_hists *h = &ag->node.hists;

        hist_family(b, node, "gshare_request_duration_seconds",
                    "Time the agent took to serve a process's request, from taking it off the ring to "
                    "publishing the reply, by op.",
                    "op", op_names, h->request, GS_HIST_OPS, &gs_hist_seconds);
        hist_family(b, node, "gshare_grant_bytes",
                    "Sizes of the memory requests granted: blocks (op alloc) and VMM allocations (op vmm_create).",
                    "op", grants, h->grant_bytes, GS_HIST_GRANTS, &gs_hist_bytes);
        hist_family(b, node, "gshare_context_charge_duration_seconds",
                    "Time to charge a process's CUDA context to its quota before it is created (GPU lock wait "
                    "included).",
                    NULL, NULL, &h->ctx_charge, 1, &gs_hist_seconds);
        hist_family(b, node, "gshare_scrub_duration_seconds",
                    "Time of one batch of the background scrubber, from queueing its zeroing to its completion.", NULL,
                    NULL, &h->scrub, 1, &gs_hist_seconds);
        hist_family(b, node, "gshare_reconcile_duration_seconds",
                    "Time of a reconcile: the kubelet's PodResources List (phase list, failed ones included) and "
                    "applying its answer to the allocations (phase apply).",
                    "phase", phases, h->reconcile, GS_HIST_RECONS, &gs_hist_seconds);
}

static uint32_t active_procs(const struct gs_allocation *a)
{
        uint32_t n = 0;

        for (const struct gs_proc *p = a->procs; p; p = p->next)
                n += p->state != GS_PROC_HELLO;
        return n;
}

#define GPU_FAMILY(name, help, expr) GPU_FAMILY_T("gauge", name, help, "%llu", (unsigned long long)(expr))
/* With the type and the sample's format (and expr of its type). */
#define GPU_FAMILY_T(type, name, help, fmt, expr)                           \
        do {                                                                \
                gs_mx_family(b, "gshare_gpu_" name, type, help);            \
                for (uint32_t i = 0; i < ag->node.ngpus; i++) {             \
                        const struct gs_gpu *g = &ag->node.gpus[i];         \
                        const struct gpu_snap *s = &sn->gs[i];              \
                        (void)g;                                            \
                        (void)s;                                            \
                        gs_mx_put(b, "gshare_gpu_" name "{");               \
                        gs_mx_label(b, "gpu", ag->node.gpus[i].uuid, true); \
                        if (node)                                           \
                                gs_mx_label(b, "node", node, false);        \
                        gs_mx_put(b, "} " fmt "\n", expr);                  \
                }                                                           \
        } while (0)

#define PART_FAMILY(name, help, field)                                                    \
        do {                                                                              \
                gs_mx_family(b, "gshare_allocation_" name, "gauge", help);                \
                for (size_t i = 0; i < sn->nparts; i++) {                                 \
                        gs_mx_put(b, "gshare_allocation_" name);                          \
                        gs_mx_alloc_labels(b, sn->ps[i].a, sn->ps[i].claim, sn->ps[i].g); \
                        gs_mx_put(b, " %llu\n", (unsigned long long)sn->ps[i].field);     \
                }                                                                         \
        } while (0)

/* One sample per registered process and GPU; expr may use st (its pproc
 * stats) and pg, read under the GPU's lock. */
#define PROC_FAMILY(name, help, expr)                                                                  \
        do {                                                                                           \
                gs_mx_family(b, "gshare_process_" name, "gauge", help);                                \
                for (const struct gs_allocation *a = ag->node.allocs; a; a = a->next)                  \
                        for (const struct gs_proc *p = a->procs; p; p = p->next)                       \
                                for (uint32_t i = 0; p->state != GS_PROC_HELLO && i < p->ngpus; i++) { \
                                        const struct gs_proc_gpu *pg = &p->gpus[i];                    \
                                        struct gs_pproc_stats st;                                      \
                                        double v; /* exact for integers below 2^53 */                  \
                                        char pid[16];                                                  \
                                        gs_gpu_lock(pg->g);                                            \
                                        gs_pproc_stats(pg->pp, &st);                                   \
                                        v = (expr);                                                    \
                                        gs_gpu_unlock(pg->g);                                          \
                                        snprintf(pid, sizeof(pid), "%d", (int)p->pid);                 \
                                        gs_mx_put(b, "gshare_process_" name "{");                      \
                                        gs_mx_label(b, "allocation", a->id, true);                     \
                                        gs_mx_label(b, "gpu", pg->g->uuid, false);                     \
                                        gs_mx_label(b, "pid", pid, false);                             \
                                        gs_mx_put(b, "} %.17g\n", v);                                  \
                                }                                                                      \
        } while (0)

/* What one scrape shows, read under each GPU's lock once. */
struct snap {
        struct gpu_snap *gs;    /* by GPU index */
        struct part_snap *ps;   /* nparts: every allocation's parts */
        struct gs_mx_alloc *as; /* nas */
        size_t nparts, nas;
        uint32_t nprocs;
};

static void snap_free(struct snap *sn)
{
        free(sn->gs);
        free(sn->ps);
        free(sn->as);
}

static int snap_gpus(struct gs_agent *ag, struct snap *sn)
{
        for (uint32_t i = 0; i < ag->node.ngpus; i++) {
                struct gs_gpu *g = &ag->node.gpus[i];
                struct gpu_snap *s = &sn->gs[i];

                if (g->pool) {
                        gs_gpu_lock(g);
                        gs_pool_stats(g->pool, &s->st);
                        s->spilled = gs_gpu_spilled(g);
                        s->owed = gs_pool_owed(g->pool);
                        s->spill_ready = gs_gpu_spill_ready(g);
                        s->spill_held = gs_gpu_spill_held(g);
                        s->spill_prep = gs_gpu_spill_prepared(g);
                        s->mv = g->moves.st;
                        gs_gpu_unlock(g);
                        s->units_lent = gs_gpu_units_lent(g);
                }
                s->units_allocated = gs_gpu_units_allocated(g);
                for (uint32_t u = 0; g->unit_owner && u < g->units_total; u++)
                        s->units_draining += g->unit_owner[u] && gs_allocs_draining(g->unit_owner[u]);
                if (ag->node.pending) {
                        uint32_t *units = calloc(g->units_total + 1, sizeof(*units));
                        if (!units)
                                return -ENOMEM;
                        s->units_restoring = (uint32_t)gs_pending_units(&ag->node, g, units, g->units_total);
                        free(units);
                }
        }
        return 0;
}

static struct part_snap part_snap(const struct gs_allocation *a, const struct gs_claim *claim, uint32_t i,
                                  struct gs_gpu *g)
{
        struct gs_palloc_stats st;
        struct part_snap p = { .a = a, .claim = claim, .g = g, .units = a->parts[i].units };

        gs_gpu_lock(g);
        gs_palloc_stats(a->parts[i].pa, &st);
        p.outside_bytes = a->parts[i].out.charged;
        p.over_quota = a->parts[i].out.over_quota;
        p.over_quota_bytes = a->parts[i].out.short_bytes;
        gs_gpu_unlock(g);
        p.quota_bytes = (uint64_t)a->parts[i].quota_chunks * g->chunk_bytes;
        p.burst_bytes = (uint64_t)gs_part_burst(&a->parts[i]) * g->chunk_bytes;
        p.borrowed_bytes = (uint64_t)st.chunks_borrowed * g->chunk_bytes;
        p.spilled_bytes = (uint64_t)st.chunks_spilled * g->chunk_bytes;
        p.lent_bytes = (uint64_t)st.chunks_owed * g->chunk_bytes;
        p.held_bytes = (uint64_t)st.chunks_held * g->chunk_bytes;
        p.requested_bytes = st.bytes_requested;
        return p;
}

static int snap_take(struct gs_agent *ag, struct snap *sn)
{
        size_t maxparts = 0, nas = 0;

        memset(sn, 0, sizeof(*sn));
        for (const struct gs_allocation *a = ag->node.allocs; a; a = a->next, nas++)
                maxparts += a->nparts;
        sn->gs = calloc(ag->node.ngpus + 1, sizeof(*sn->gs));
        sn->ps = calloc(maxparts + 1, sizeof(*sn->ps));
        sn->as = calloc(nas + 1, sizeof(*sn->as));
        if (!sn->gs || !sn->ps || !sn->as || snap_gpus(ag, sn) < 0)
                return -ENOMEM;
        for (const struct gs_allocation *a = ag->node.allocs; a && sn->nas < nas; a = a->next) {
                const struct gs_claim *claim = gs_allocs_claim(a);

                sn->as[sn->nas++] = (struct gs_mx_alloc){ .a = a, .claim = claim };
                sn->nprocs += active_procs(a);
                for (uint32_t i = 0; i < a->nparts && sn->nparts < maxparts; i++)
                        sn->ps[sn->nparts++] = part_snap(a, claim, i, &ag->node.gpus[a->parts[i].gpu]);
        }
        return 0;
}

static void render_agent(struct gs_mx_buf *b, struct gs_agent *ag, const struct snap *sn, const char *node)
{
        gs_mx_family(b, "gshare_allocations", "gauge", "Allocations the agent holds (releasing ones included).");
        put_agent(b, "gshare_allocations", node);
        gs_mx_put(b, " %u\n", ag->node.nallocs);
        gs_mx_family(b, "gshare_processes", "gauge", "Registered processes of all allocations.");
        put_agent(b, "gshare_processes", node);
        gs_mx_put(b, " %u\n", sn->nprocs);
        gs_mx_family(b, "gshare_usage_scans_total", "counter",
                     "Scans of the memory processes hold outside the pool (usageInterval, and on demand).");
        put_agent(b, "gshare_usage_scans_total", node);
        gs_mx_put(b, " %u\n", __atomic_load_n(&ag->usage_scans, __ATOMIC_ACQUIRE));
        gs_mx_family(b, "gshare_agent_start_time_seconds", "gauge",
                     "When this agent started, in seconds since the epoch (a change is a restart or an upgrade).");
        put_agent(b, "gshare_agent_start_time_seconds", node);
        gs_mx_put(b, " %lld\n", (long long)ag->start_unix);
}

static void render_gpus(struct gs_mx_buf *b, struct gs_agent *ag, const struct snap *sn, const char *node)
{
        GPU_FAMILY("healthy", "1 if the GPU's pool is usable, 0 if not.", g->healthy ? 1 : 0);
        GPU_FAMILY("chunk_bytes", "Size of one GSM chunk, in bytes.", g->chunk_bytes);
        GPU_FAMILY("chunks", "Chunks in the pool (retired ones excluded).", s->st.nchunks);
        GPU_FAMILY("chunks_free", "Chunks on the system free list.", s->st.chunks_free);
        GPU_FAMILY("chunks_reserved", "Chunks reserved as quota by allocations.", s->st.chunks_reserved);
        GPU_FAMILY("chunks_borrowed", "Chunks lent to allocations beyond their quota (ballooning).",
                   s->st.chunks_borrowed);
        GPU_FAMILY("chunks_retired", "Chunks taken out of the pool after a failed recycle.", g->chunks_retired);
        GPU_FAMILY("chunks_spilled", "Chunks whose data borrowers hold in host memory now (docs/burst.md).",
                   s->spilled);
        GPU_FAMILY("chunks_owed", "Chunks lent out of allocations' quotas, owed back to them.", s->owed);
        GPU_FAMILY("chunks_spill_held", "Spare host memory a live process may keep, charged until it exits.",
                   s->spill_held);
        GPU_FAMILY("chunks_spill_prepared", "Spare host memory prepared ahead in borrowers' movers.", s->spill_prep);
        GPU_FAMILY("spill_host_bytes", "Host memory for spills: spilled, made ahead, held (at most spillMax).",
                   (uint64_t)(s->spilled + s->spill_ready + s->spill_held) * g->chunk_bytes);
        GPU_FAMILY_T("counter", "chunks_moved_out_total", "Chunks moved to host memory.", "%llu",
                     (unsigned long long)s->mv.chunks_out);
        GPU_FAMILY_T("counter", "chunks_moved_back_total", "Chunks moved back to the GPU.", "%llu",
                     (unsigned long long)s->mv.chunks_back);
        GPU_FAMILY_T("counter", "move_batches_total", "Batches of moves, both ways.", "%llu",
                     (unsigned long long)s->mv.moves);
        GPU_FAMILY_T("counter", "move_seconds_total", "Time the batches of moves took, from planning to settling.",
                     "%.6f", (double)s->mv.move_ns / 1e9);
        gs_mx_family(b, "gshare_gpu_spill_phase_seconds_total", "counter",
                     "Time of the batches of moves to host memory, by phase (docs/burst.md \"Giving it back\").");
        for (uint32_t i = 0; i < ag->node.ngpus; i++)
                for (int ph = 0; ph < GS_PHASE_N; ph++) {
                        gs_mx_put(b, "gshare_gpu_spill_phase_seconds_total{");
                        gs_mx_label(b, "gpu", ag->node.gpus[i].uuid, true);
                        gs_mx_label(b, "phase", gs_move_phase_names[ph], false);
                        if (node)
                                gs_mx_label(b, "node", node, false);
                        gs_mx_put(b, "} %.6f\n", (double)sn->gs[i].mv.spill_ns[ph] / 1e9);
                }
        GPU_FAMILY_T("counter", "spills_refused_total", "Spills that found no host memory left (spillMax).", "%llu",
                     (unsigned long long)s->mv.refused);
        GPU_FAMILY("units", "Units of the resource the GPU offers.", g->units_total);
        GPU_FAMILY("units_allocated", "Units held by allocations.", s->units_allocated);
        GPU_FAMILY("units_lent", "Units' worth of chunks lent by ballooning.", s->units_lent);
        GPU_FAMILY("units_draining",
                   "Units of allocations whose pod is gone while processes still use them "
                   "(advertised unhealthy until they exit).",
                   s->units_draining);
        GPU_FAMILY("units_restoring", "Units of checkpointed allocations not restored yet (advertised unhealthy).",
                   s->units_restoring);
}

static void render_allocations(struct gs_mx_buf *b, struct gs_agent *ag, const struct snap *sn)
{
        PART_FAMILY("units", "Units of the GPU the allocation holds.", units);
        PART_FAMILY("quota_bytes", "The allocation's quota on the GPU, in bytes.", quota_bytes);
        PART_FAMILY("burst_bytes",
                    "The most the allocation's processes may use on the GPU, quota included "
                    "(past the quota: borrowed while memory is free; docs/burst.md).",
                    burst_bytes);
        PART_FAMILY("borrowed_bytes", "Bytes in chunks the allocation borrowed beyond its quota.", borrowed_bytes);
        PART_FAMILY("spilled_bytes", "Of the borrowed bytes, those moved to host memory (docs/burst.md).",
                    spilled_bytes);
        PART_FAMILY("lent_bytes",
                    "Bytes of the allocation's quota lent to borrowers while it did not use them, "
                    "taken back when it asks.",
                    lent_bytes);
        PART_FAMILY("held_bytes", "Bytes in chunks held by the allocation's processes (chunks held x chunk size).",
                    held_bytes);
        PART_FAMILY("requested_bytes", "Bytes the allocation's processes asked for and hold.", requested_bytes);
        PART_FAMILY("outside_bytes",
                    "Bytes its processes hold outside the pool (contexts, modules, "
                    "processes that bypass the hook), charged to its quota.",
                    outside_bytes);
        PART_FAMILY("over_quota_bytes",
                    "Bytes outside the pool its quota does not cover yet (0: within its "
                    "quota); meanwhile its allocations fail with out of memory.",
                    over_quota_bytes);
        gs_mx_family(b, "gshare_allocation_over_quota_total", "counter",
                     "Times a scan found memory outside the pool that the allocation's quota could not cover.");
        for (size_t i = 0; i < sn->nparts; i++) {
                gs_mx_put(b, "gshare_allocation_over_quota_total");
                gs_mx_alloc_labels(b, sn->ps[i].a, sn->ps[i].claim, sn->ps[i].g);
                gs_mx_put(b, " %u\n", sn->ps[i].over_quota);
        }
        gs_mx_family(b, "gshare_allocation_processes", "gauge", "Registered processes of the allocation.");
        for (size_t i = 0; i < sn->nas; i++) {
                gs_mx_put(b, "gshare_allocation_processes");
                gs_mx_alloc_labels(b, sn->as[i].a, sn->as[i].claim, NULL);
                gs_mx_put(b, " %u\n", active_procs(sn->as[i].a));
        }
        gs_mx_family(b, "gshare_allocation_draining", "gauge",
                     "1 while the allocation's pod is gone (released, or no longer in PodResources) and processes "
                     "still use it, else 0.");
        for (size_t i = 0; i < sn->nas; i++) {
                gs_mx_put(b, "gshare_allocation_draining");
                gs_mx_alloc_labels(b, sn->as[i].a, sn->as[i].claim, NULL);
                gs_mx_put(b, " %d\n", gs_allocs_draining(sn->as[i].a) ? 1 : 0);
        }
        gs_metrics_qos_allocations(b, sn->as, sn->nas);
        /* As its hook says (docs/compute.md): shown, never used. */
        PROC_FAMILY("compute_held_launches",
                    "Launches of the process its compute QoS held (as its hook reports, "
                    "on its first GPU; docs/compute.md).",
                    i == 0 && p->shm ? __atomic_load_n(&p->shm->qos_held, __ATOMIC_RELAXED) : 0);
        PROC_FAMILY("compute_held_seconds", "Seconds its held launches waited (as its hook reports).",
                    i == 0 && p->shm ? (double)__atomic_load_n(&p->shm->qos_held_ns, __ATOMIC_RELAXED) / 1e9 : 0);
        PROC_FAMILY("compute_gpu_seconds",
                    "GPU time of the process's launches its compute QoS timed, in seconds (as its hook reports: an "
                    "estimate from sampled events; docs/compute.md).",
                    i == 0 && p->shm ? (double)__atomic_load_n(&p->shm->qos_gpu_ns, __ATOMIC_RELAXED) / 1e9 : 0);
        /* The agent's own word (gs_proc_share.c), not the hook's. */
        PROC_FAMILY("compute_duty_percent",
                    "The duty the agent gives the process for its weight: the percent of each 20 ms period it may "
                    "launch in (0: none, not held by its weight; on its first GPU; docs/compute.md \"Weights\").",
                    i == 0 ? p->share_told : 0);
        PROC_FAMILY("granted_bytes", "Bytes in chunks the process holds from the pool (chunks held x chunk size).",
                    (uint64_t)st.chunks_held * pg->g->chunk_bytes);
        PROC_FAMILY("outside_bytes",
                    "Bytes the process is charged for outside the pool (its context, modules): "
                    "what NVML shows, or the expected context size if more.",
                    pg->outside_charge);
}

int gs_metrics_render(struct gs_agent *ag, char **ret, size_t *ret_len)
{
        struct snap sn;
        struct gs_mx_buf b = { 0 };
        const char *node = node_name(ag);
        int r = snap_take(ag, &sn);

        if (r == 0) {
                render_agent(&b, ag, &sn, node);
                render_gpus(&b, ag, &sn, node);
                render_allocations(&b, ag, &sn);
                hists(&b, ag, node);
                r = b.failed ? -ENOMEM : 0;
        }
        snap_free(&sn);
        if (r < 0) {
                free(b.p);
                return r;
        }
        *ret = b.p;
        *ret_len = b.len;
        return 0;
}

/* ---- HTTP ---- */

int gs_metrics_parse_request(const char *buf, size_t len, bool *ret_head)
{
        const char *eol = memchr(buf, '\n', len), *end = NULL, *sp1, *sp2, *line_end;
        size_t mlen, plen;

        *ret_head = false;
        /* The blank line that ends the headers: \r\n\r\n, or bare \n\n. */
        for (size_t i = 0; i + 1 < len && !end; i++)
                if (buf[i] == '\n' && (buf[i + 1] == '\n' || (buf[i + 1] == '\r' && i + 2 < len && buf[i + 2] == '\n')))
                        end = buf + i;
        if (!eol)
                return len >= GS_METRICS_MAX_REQUEST ? 431 : 0;
        /* The request line is whole: judge it now, so that garbage gets its
         * 400 without waiting for a blank line that may never come. */
        line_end = eol > buf && eol[-1] == '\r' ? eol - 1 : eol;
        sp1 = memchr(buf, ' ', (size_t)(line_end - buf));
        if (!sp1)
                return 400;
        sp2 = memchr(sp1 + 1, ' ', (size_t)(line_end - sp1 - 1));
        if (!sp2 || (size_t)(line_end - sp2 - 1) != 8 ||
            (memcmp(sp2 + 1, "HTTP/1.1", 8) != 0 && memcmp(sp2 + 1, "HTTP/1.0", 8) != 0))
                return 400;
        mlen = (size_t)(sp1 - buf);
        plen = (size_t)(sp2 - sp1 - 1);
        if (mlen == 0 || mlen > 16 || plen == 0 || sp1[1] != '/')
                return 400;
        for (size_t i = 0; i < mlen; i++)
                if (buf[i] < 'A' || buf[i] > 'Z')
                        return 400;
        for (size_t i = 0; i < plen; i++)
                if ((unsigned char)sp1[1 + i] <= 0x20 || (unsigned char)sp1[1 + i] >= 0x7f)
                        return 400;
        if (!end)
                return len >= GS_METRICS_MAX_REQUEST ? 431 : 0;
        if (!((mlen == 3 && memcmp(buf, "GET", 3) == 0) || (mlen == 4 && memcmp(buf, "HEAD", 4) == 0)))
                return 405;
        *ret_head = mlen == 4;
        if (!(plen >= 8 && memcmp(sp1 + 1, "/metrics", 8) == 0 && (plen == 8 || sp1[9] == '?')))
                return 404;
        return 200;
}

static const char *reason(int status)
{
        switch (status) {
        case 200: return "OK";
        case 400: return "Bad Request";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 408: return "Request Timeout";
        case 431: return "Request Header Fields Too Large";
        case 503: return "Service Unavailable";
        default: return "Internal Server Error";
        }
}

/* Queues the whole response for status and ends the connection.  0 or
 * -ENOMEM. */
static int respond(struct gs_metrics *m, struct gs_stream *c, int status, bool head)
{
        struct gs_mx_buf b = { 0 };
        char *body = NULL;
        size_t blen = 0;
        const char *type = "text/plain; charset=utf-8";
        uint8_t *out;

        if (status == 200) {
                if (gs_metrics_render(m->ag, &body, &blen) < 0)
                        status = 500;
                else
                        type = "text/plain; version=0.0.4; charset=utf-8";
        }
        if (status != 200) {
                char msg[64];
                int n = snprintf(msg, sizeof(msg), "%d %s\n", status, reason(status));
                body = strdup(msg);
                blen = body ? (size_t)n : 0;
        }
        gs_mx_put(&b, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
                  status, reason(status), type, blen, status == 405 ? "Allow: GET, HEAD\r\n" : "");
        if (head)
                blen = 0;
        out = b.failed ? NULL : gs_stream_reserve(c, b.len + blen);
        if (out) {
                memcpy(out, b.p, b.len);
                if (blen)
                        memcpy(out + b.len, body, blen);
        }
        free(body);
        free(b.p);
        gs_stream_end(c);
        return out ? 0 : -ENOMEM;
}

static int on_data(void *ctx, struct gs_stream *c)
{
        size_t len;
        const char *in = (const char *)gs_stream_input(c, &len);
        bool head;
        int status = gs_metrics_parse_request(in, len, &head);

        return status ? respond(ctx, c, status, head) : 0;
}

/* Best effort, never blocking: a short answer to a connection about to be
 * closed (too many, or too slow). */
static void say_and_close(int fd, int status)
{
        char msg[160];
        int n = snprintf(msg, sizeof(msg), "HTTP/1.1 %d %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", status,
                         reason(status));

        (void)!send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)shutdown(fd, SHUT_WR);
}

static void on_refuse(void *ctx, int fd)
{
        (void)ctx;
        say_and_close(fd, 503);
}

static void on_timeout(void *ctx, struct gs_stream *c)
{
        (void)ctx;
        if (!gs_stream_ended(c))
                say_and_close(gs_stream_fd(c), 408);
}

static const struct gs_stream_ops metrics_ops = {
        .on_data = on_data,
        .on_refuse = on_refuse,
        .on_timeout = on_timeout,
};

int gs_metrics_parse_address(const char *addr, struct sockaddr_storage *ret, socklen_t *ret_len)
{
        const char *colon = strrchr(addr, ':');
        char host[64], *end;
        unsigned long port;
        size_t hlen;

        if (!colon || colon[1] < '0' || colon[1] > '9')
                return -EINVAL;
        errno = 0;
        port = strtoul(colon + 1, &end, 10);
        if (errno || *end || port == 0 || port > 65535)
                return -EINVAL;
        hlen = (size_t)(colon - addr);
        if (hlen >= sizeof(host))
                return -EINVAL;
        memset(ret, 0, sizeof(*ret));
        if (hlen >= 2 && addr[0] == '[' && addr[hlen - 1] == ']') {
                struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ret;
                memcpy(host, addr + 1, hlen - 2);
                host[hlen - 2] = '\0';
                if (inet_pton(AF_INET6, host, &s6->sin6_addr) != 1)
                        return -EINVAL;
                s6->sin6_family = AF_INET6;
                s6->sin6_port = htons((uint16_t)port);
                *ret_len = sizeof(*s6);
        } else {
                struct sockaddr_in *s4 = (struct sockaddr_in *)ret;
                memcpy(host, addr, hlen);
                host[hlen] = '\0';
                if (inet_pton(AF_INET, host, &s4->sin_addr) != 1)
                        return -EINVAL;
                s4->sin_family = AF_INET;
                s4->sin_port = htons((uint16_t)port);
                *ret_len = sizeof(*s4);
        }
        return 0;
}

int gs_metrics_new(struct gs_agent *ag, const char *addr, struct gs_metrics **ret, char *err, size_t errlen)
{
        struct sockaddr_storage sa;
        socklen_t salen;
        static const struct gs_stream_limits lim = {
                .max_conns = GS_METRICS_MAX_CLIENTS,
                .in_max = GS_METRICS_MAX_REQUEST,
                .out_max = GS_METRICS_MAX_RESPONSE,
                .deadline_ms = GS_METRICS_DEADLINE_MS,
        };
        struct gs_metrics *m;
        int one = 1, fd, r;

        *ret = NULL;
        if (!addr[0])
                return 0;
        if (gs_metrics_parse_address(addr, &sa, &salen) < 0) {
                snprintf(err, errlen, "metricsAddress: expected IPv4:port or [IPv6]:port, got '%s'", addr);
                return -EINVAL;
        }
        m = calloc(1, sizeof(*m));
        if (!m) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        m->ag = ag;
        if (!ag->start_unix)
                ag->start_unix = (int64_t)time(NULL);
        fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
            bind(fd, (struct sockaddr *)&sa, salen) < 0 || listen(fd, 64) < 0) {
                r = gs_neg_errno();
                gs_closep(&fd);
                goto fail;
        }
        r = gs_stream_srv_new(ag->node.loop, fd, "metrics", &lim, &metrics_ops, m, &m->srv);
        if (r < 0)
                goto fail;
        *ret = m;
        return 0;
fail:
        snprintf(err, errlen, "metricsAddress: cannot listen on %s: %s", addr, strerror(-r));
        free(m);
        return r;
}

void gs_metrics_free(struct gs_metrics *m)
{
        if (!m)
                return;
        gs_stream_srv_free(m->srv);
        free(m);
}
