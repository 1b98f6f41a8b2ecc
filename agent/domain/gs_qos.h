/* gs_qos.h — an allocation's compute policy (docs/compute.md): its class
 * (latency-critical, standard, best-effort) and an optional cap (percent
 * of GPU time), and the per-GPU board its processes' hooks share
 * (gs_wire.h, item 10).
 *
 * The policy comes from the pod through the API server (the reconciler
 * reads it: gs_podburst.h), never from the container: the class defaults
 * from the pod's priority, and an annotation may only lower it.  A weight
 * (1..100, GS_QOS_WEIGHT_DEFAULT unless said) ranks a pod among the others
 * of its class.  The allocation keeps it (struct gs_allocation.qos) and
 * the checkpoint writes it (" qos=<class>[,cap=<n>][,weight=<w>]"; absent
 * for the default, so such lines are as before), so a restarted agent
 * restores it.
 *
 * The board of a node GPU is a sealed memfd of struct gs_qos_board: one
 * slot per latency-critical process, which only such processes map
 * writable (the others get a read-only fd of it). */
#ifndef GS_QOS_H
#define GS_QOS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gs_util.h"
#include "gs_wire.h"

#define GS_QOS_ANN_CLASS "gshare.io/compute-class"
#define GS_QOS_ANN_CAP "gshare.io/compute-cap"
#define GS_QOS_ANN_WEIGHT "gshare.io/compute-weight"
/* Node GPUs with a board (an ordinal past it gets none: no QoS there). */
#define GS_QOS_MAX_GPUS 64u

/* Four bytes: loaded and stored whole, atomically (lock-free). */
struct gs_qos_policy {
        uint8_t cls;    /* enum gs_qos_class */
        uint8_t cap;    /* percent of GPU time, 1..100; 0: none */
        uint8_t weight; /* among its class, 1..100; 0: GS_QOS_WEIGHT_DEFAULT */
        uint8_t reserved;
};
_Static_assert(sizeof(struct gs_qos_policy) == 4, "gs_qos_policy is loaded whole");

/* What the API server says of a pod. */
struct gs_qos_pod {
        bool has_priority;
        int64_t priority; /* spec.priority */
        const char *cls;  /* the annotations, NULL when absent */
        const char *cap;
        const char *weight;
};

/* "latency-critical", "standard", "best-effort" ("?" otherwise). */
const char *gs_qos_class_name(unsigned cls);
/* One of those names into *ret: 0, or -EINVAL. */
int gs_qos_class_parse(const char *s, uint8_t *ret) GS_WUR;
/* Higher runs first: best-effort 0, standard 1, latency-critical 2. */
unsigned gs_qos_rank(unsigned cls);
/* The policy of a pod: the class its priority gives (>= lc_priority:
 * latency-critical, < 0: best-effort, else standard), lowered by its
 * annotation, never raised; the cap and the weight of its annotations.
 * Always sets *ret;
 * 0, or -EINVAL with err naming the bad value (then the default of that
 * value applies; a class above the priority's is one). */
int gs_qos_from_pod(const struct gs_qos_pod *pod, int64_t lc_priority, struct gs_qos_policy *ret, char *err,
                    size_t errlen) GS_WUR;
/* p's weight: 1..GS_QOS_WEIGHT_MAX (its field's 0 is the default). */
static inline unsigned gs_qos_weight_of(const struct gs_qos_policy *p)
{
        return p->weight && p->weight <= GS_QOS_WEIGHT_MAX ? p->weight : GS_QOS_WEIGHT_DEFAULT;
}
/* Whether p is the default (standard, no cap, the default weight). */
static inline bool gs_qos_is_default(const struct gs_qos_policy *p)
{
        return p->cls == GS_QOS_STANDARD && !p->cap && gs_qos_weight_of(p) == GS_QOS_WEIGHT_DEFAULT;
}
/* Whether a and b say the same (a weight of 0 and of the default alike). */
static inline bool gs_qos_same(const struct gs_qos_policy *a, const struct gs_qos_policy *b)
{
        return a->cls == b->cls && a->cap == b->cap && gs_qos_weight_of(a) == gs_qos_weight_of(b);
}
/* "1".."100" (a cap's percent, a weight) into *ret: 0, or -EINVAL. */
int gs_qos_percent_parse(const char *s, uint8_t *ret) GS_WUR;
/* The checkpoint's token: " qos=<class>[,cap=<n>][,weight=<w>]", nothing
 * for the default (the default weight is not written). */
void gs_qos_put(FILE *f, const struct gs_qos_policy *p);
/* Parses "qos=<class>[,cap=<n>][,weight=<w>]": 0, or -EINVAL (not such a
 * token). */
int gs_qos_token_parse(const char *tok, struct gs_qos_policy *ret) GS_WUR;
/* "latency-critical" or "best-effort,cap=30,weight=20" into buf (the
 * default weight left out). */
void gs_qos_format(const struct gs_qos_policy *p, char *buf, size_t cap);

/* ---- weights: shares of a GPU's time (docs/compute.md "Weights") ---- */

/* Most processes of one GPU whose shares are worked out together. */
#define GS_QOS_SHARE_MAX 64u
/* n processes of one class competing on one GPU, of weights w[i] >= 1:
 * into ret[i] the duty (percent of each of the hook's duty periods it may
 * launch in, 1..99) that keeps process i near its weighted share
 * w[i] / sum(w), or 0 where none is needed.  The driver gives contexts
 * with work equal turns, so the lightest are held part of the time and
 * the rest split what they leave: water-filling from the lightest, each
 * held one's window (all open at the period's start) closing once it has
 * had its share in equal turns with those still on, and a process free
 * where that takes the whole period (work-conserving: nobody is held
 * alone, or at equal weights).  Exact while every process always has work
 * (weights 10:20:30:40: duties 40, 70, 90 and none).  n <=
 * GS_QOS_SHARE_MAX. */
void gs_qos_duties(uint32_t n, const uint64_t *w, uint8_t *ret);

/* ---- the boards (any thread; their own lock) ---- */

/* For GPU gpu (its ordinal): an fd of its board (a dup: the caller closes
 * it), writable when lc, and for lc a slot in *slot: the one *slot names
 * if the caller took it before, else a free one (taken for pid, its flag
 * cleared); else *slot = GS_QOS_NO_SLOT (not lc, or all slots taken: the
 * fd is read-only and the process's launches are not flagged).  The board
 * is made at the first call.  0, or a negative errno. */
int gs_qos_board_open(uint32_t gpu, bool lc, uint32_t pid, int *ret_fd, uint32_t *slot) GS_WUR;
/* The slot's process is gone: its flag is cleared and the slot free. */
void gs_qos_board_release(uint32_t gpu, uint32_t slot);
/* Latency-critical processes registered on GPU gpu's board. */
uint32_t gs_qos_board_nlc(uint32_t gpu);
/* Whether a process that GPU gpu's latency-critical flags would hold has
 * launched lately (gs_qos_board.idle_until_ns): if not, the board says
 * so until GS_QOS_IDLE_LEASE_MS from now; if so, it says 0 (track).  A
 * GPU without a board yet: nothing. */
void gs_qos_board_holdable(uint32_t gpu, bool launched);

#endif
