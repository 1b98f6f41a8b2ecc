/* gs_metrics_qos.c — the allocations' compute QoS families (see
 * gs_metrics_int.h; docs/compute.md, docs/metrics.md). */
#include "gs_metrics_int.h"

#include <stdint.h>

#include "gs_proc_qosrep.h"
#include "gs_qos.h"

#define ALLOC_FAMILY(name, type, help, fmt, expr)                       \
        do {                                                            \
                gs_mx_family(b, "gshare_allocation_" name, type, help); \
                for (size_t i = 0; i < nas; i++) {                      \
                        const struct gs_allocation *a = as[i].a;        \
                        gs_mx_put(b, "gshare_allocation_" name);        \
                        gs_mx_alloc_labels(b, a, as[i].claim, NULL);    \
                        gs_mx_put(b, " " fmt "\n", (expr));             \
                }                                                       \
        } while (0)

void gs_metrics_qos_allocations(struct gs_mx_buf *b, const struct gs_mx_alloc *as, size_t nas)
{
        gs_mx_family(b, "gshare_allocation_compute_class", "gauge",
                     "1, with the allocation's compute class as label class (docs/compute.md).");
        for (size_t i = 0; i < nas; i++) {
                gs_mx_put(b, "gshare_allocation_compute_class");
                gs_mx_alloc_labels(b, as[i].a, as[i].claim, NULL);
                /* One label more inside the braces gs_mx_alloc_labels closed. */
                if (!b->failed && b->len && b->p[b->len - 1] == '}')
                        b->len--;
                gs_mx_put(b, ",class=\"%s\"} 1\n", gs_qos_class_name(as[i].a->qos.cls));
        }
        ALLOC_FAMILY("compute_cap_percent", "gauge",
                     "The allocation's cap on GPU time, in percent (0: none; docs/compute.md).", "%u", a->qos.cap);
        ALLOC_FAMILY("compute_weight", "gauge",
                     "The allocation's weight among the allocations of its class, 1 to 100 (default 10; "
                     "docs/compute.md).",
                     "%u", gs_qos_weight_of(&a->qos));
        /* As its processes' hooks say: shown, never used. */
        ALLOC_FAMILY("compute_held_launches_total", "counter",
                     "Launches of the allocation's processes its compute QoS held, summed over its processes, "
                     "those gone included (as their hooks report; docs/compute.md).",
                     "%llu", (unsigned long long)gs_proc_qos_report(a, GS_QR_HELD));
        ALLOC_FAMILY("compute_held_seconds_total", "counter",
                     "Seconds the allocation's held launches waited, summed over its processes (as their hooks "
                     "report).",
                     "%.9f", (double)gs_proc_qos_report(a, GS_QR_HELD_NS) / 1e9);
        ALLOC_FAMILY("compute_gpu_seconds_total", "counter",
                     "GPU time of the allocation's launches its compute QoS timed, in seconds, summed over its "
                     "processes, those gone included (as their hooks report: an estimate from sampled events, "
                     "launches QoS let through untimed not counted; docs/compute.md \"GPU time\").",
                     "%.9f", (double)gs_proc_qos_report(a, GS_QR_GPU_NS) / 1e9);
}
