/* gs_burst.h — an allocation's burst limit (docs/burst.md): what a burst
 * asked for (by CreateAllocation, a DRA claim's configuration or a pod's
 * annotation) may be on one GPU, checked against the quota, the GPU's
 * pool and the node's burstMax. */
#ifndef GS_BURST_H
#define GS_BURST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gs_config.h"
#include "gs_gpu.h"
#include "gs_util.h"

/* The chunks an allocation of quota chunks on g may borrow: with bytes 0,
 * the node's balloonCap; else bytes rounded up to a chunk, less the quota.
 * -EINVAL with err naming the problem: below the quota, more than the
 * pool, or borrowing more than max(burstMax, balloonCap) (not checked when
 * restoring: it was allowed when it was made). */
int gs_burst_cap(const struct gs_config *c, const struct gs_gpu *g, uint64_t quota_chunks, uint64_t bytes, bool restore,
                 uint64_t *ret_cap, char *err, size_t errlen) GS_WUR;

#endif
