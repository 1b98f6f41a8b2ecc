/* gs_hook_qos_est.h — a launch's expected GPU time by its kind, from
 * sampled launches (docs/compute.md "How it is enforced").
 *
 * A kind is a function and its launch's shape (its grid, GS_QOS_SHAPE),
 * or a graph's exec: cuBLAS runs GEMMs of every size with a few kernels,
 * so by function alone a large GEMM was expected to take what the
 * smallest took.  Per kind, cached (direct-mapped: a kind evicted is
 * measured again): whether it is one of NCCL's kernels, the least of its
 * samples (rising by a sixteenth a sample: another context's turn only
 * lengthens a sample) and the most (falling by an eighth of the
 * difference a sample: launches of one kind can take different times, a
 * GEMM kernel of one grid and another K).
 *
 * Everything here runs under the caller's lock (gs_hook_qos.c's g_mu). */
#ifndef GS_HOOK_QOS_EST_H
#define GS_HOOK_QOS_EST_H

#include <stddef.h>
#include <stdint.h>

#include "gs_hook.h"

#define GS_QOS_EST_KINDS 1024

/* The entry of (f, shape) (f NULL: a graph, shape its exec), taken over
 * if another kind had it (then its name is asked of the driver, c). */
size_t gs_qos_est_kind(const struct gs_cu *c, CUfunction f, uint64_t shape);
/* Whether entry h is one of NCCL's kernels. */
int gs_qos_est_nccl(size_t h);
/* Entry h's GPU time: the least of its samples (not measured yet: the
 * mean of all samples), and the most of them lately. */
uint64_t gs_qos_est_ns(size_t h);
uint64_t gs_qos_est_hi(size_t h);
/* Whether to time the launch of entry h about to be made: a kind not
 * measured yet, and one launch in GS_QOS_SAMPLE at random (every
 * GS_QOS_SAMPLE-th launch aliased with a loop's fixed sequence: of a
 * step that alternates a GEMM and a short kernel, only the short one was
 * ever timed). */
int gs_qos_est_sample_this(size_t h);
/* A sample of d ns taken of a launch of entry h, kind (f, shape) when it
 * was made (an entry taken over since keeps its own). */
void gs_qos_est_take(size_t h, CUfunction f, uint64_t shape, uint64_t d);

#endif
