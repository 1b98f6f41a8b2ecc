/* gs_metrics_int.h — what the metrics' files share (gs_metrics.c renders
 * the scrape, gs_metrics_qos.c its compute QoS families, both with
 * gs_metrics_text.c's writers): the exposition text being built, and an
 * allocation's labels.  Main thread, as the scrape. */
#ifndef GS_METRICS_INT_H
#define GS_METRICS_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "gs_allocs.h"
#include "gs_gpu.h"
#include "gs_util.h"

/* The text so far; failed once an allocation failed (the rest is not
 * written). */
struct gs_mx_buf {
        char *p;
        size_t len, cap;
        bool failed;
};

/* Per allocation: its claim (a DRA claim's allocation), once a scrape. */
struct gs_mx_alloc {
        const struct gs_allocation *a;
        const struct gs_claim *claim;
};

/* gs_metrics_text.c: printf to the text (failed on ENOMEM). */
void GS_PRINTF(2, 3) gs_mx_put(struct gs_mx_buf *b, const char *fmt, ...);
/* A label value, escaped as the format wants: \ " and newline. */
void gs_mx_label(struct gs_mx_buf *b, const char *name, const char *value, bool first);
/* A family's # HELP and # TYPE lines. */
void gs_mx_family(struct gs_mx_buf *b, const char *name, const char *type, const char *help);
/* An allocation's labels, braces included: its id, the GPU g (NULL: none),
 * and what joins it with kube-state-metrics: the namespace, pod and
 * container PodResources showed holding it, and for a DRA claim's
 * allocation the claim (and its namespace).  A label not known yet is left
 * out. */
void gs_mx_alloc_labels(struct gs_mx_buf *b, const struct gs_allocation *a, const struct gs_claim *c,
                        const struct gs_gpu *g);

/* gs_metrics_qos.c: the allocations' compute families (docs/compute.md,
 * docs/metrics.md): class, cap, weight, and the launches its processes'
 * hooks held, summed. */
void gs_metrics_qos_allocations(struct gs_mx_buf *b, const struct gs_mx_alloc *as, size_t nas);

#endif
