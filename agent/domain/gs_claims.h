/* gs_claims.h — allocations of DRA ResourceClaims (gshare-dra-plugin,
 * docs/dra.md).  Main thread only.
 *
 * A claim's allocation is an ordinary allocation (gs_allocs.h) of units
 * the agent picks among the GPU's free ones (lowest first), plus an entry
 * claim UID -> allocation id in a table that the reconciler consults: the
 * kubelet's PodResources names no device-plugin IDs for a claim, so without
 * the entry the reconciler would reclaim the allocation after reclaimGrace.
 * A claim's allocation goes only by release of the claim (the plugin's
 * NodeUnprepareResources), through gs_allocs_release: deleted at once, or
 * once its last process has exited.
 *
 * The table is kept in <stateDir>/claims, rewritten atomically on every
 * change, one line per claim:
 *     # gshare-agent claims v1
 *     <claim uid> <allocation id> <gpu uuid> <units> <namespace> <name>
 * The entry is written before the allocation is created and removed after
 * it is released, so a crash in between leaves an entry whose allocation
 * does not exist, which the next request for the claim replaces; never an
 * unnamed claim allocation.  Loaded on first use (after the allocations'
 * checkpoint is restored, which re-creates the allocations themselves).
 *
 * No file is no claims.  A file that exists but cannot be read whole
 * (EACCES, EIO, EMFILE, a line over GS_CLAIMS_LINE_MAX bytes, more than
 * GS_CLAIMS_KEPT_MAX lines that are not claims) leaves the claims unknown,
 * never empty: an empty table would let the reconciler reclaim every
 * claim's allocation, and a save erase the file.  While unknown, claims are
 * neither created nor released, the reconciler releases nothing, and every
 * use reads the file again; the failure is logged once per streak.
 *
 * A line that is not a claim this agent can use (it does not parse, or it
 * is one past GS_CLAIMS_MAX) is kept verbatim and written back on every
 * save, as the allocations checkpoint keeps its unparsable lines; an
 * allocation whose id such a line holds is never reclaimed. */
#ifndef GS_CLAIMS_H
#define GS_CLAIMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gs_agent.h"
#include "gs_devid.h"

#define GS_CLAIMS_NAME "claims"
#define GS_CLAIMS_MAX 4096u       /* claims prepared on one node at once */
#define GS_CLAIM_UID_MAX 36       /* a UUID */
#define GS_CLAIM_NS_MAX 63
#define GS_CLAIM_NAME_MAX 253
#define GS_CLAIMS_LINE_MAX 1023u  /* a claim's line is at most about 430 */
#define GS_CLAIMS_KEPT_MAX 64u    /* lines kept that are not claims */

struct gs_claim {
        char uid[GS_CLAIM_UID_MAX + 1];
        char alloc_id[17];
        char gpu_uuid[GS_UUID_STR_LEN + 1];
        uint32_t units;
        char ns[GS_CLAIM_NS_MAX + 1];
        char name[GS_CLAIM_NAME_MAX + 1];
};

/* Creates the allocation of claim uid: units units of GPU gpu_uuid, or
 * finds the one it has (*ret_created false).  Returns 0 or a negative errno
 * with err naming the problem, nothing changed: -EINVAL (a bad uid, 0 units,
 * more than the GPU has), -ENODEV (no such GPU here), -EEXIST (the claim
 * has an allocation of another size or GPU), -ENOSPC (too few free units),
 * -EAGAIN (its allocation waits to be restored), or what gs_allocs_create
 * returns (an unhealthy GPU: -EIO). */
int gs_claims_create(struct gs_agent *ag, const char *uid, const char *ns, const char *name,
                     const char *gpu_uuid, uint32_t units, struct gs_allocation **ret,
                     bool *ret_created, char *err, size_t errlen) GS_WUR;

/* Releases the allocation of claim uid (gs_allocs_release) and forgets the
 * claim.  0 also when the claim has none (release is idempotent). */
int gs_claims_release(struct gs_agent *ag, const char *uid, char *err, size_t errlen) GS_WUR;

/* Reads <stateDir>/claims if it has not been read whole yet.  Returns 0
 * once the claims are known (no file: none), else the negative errno of the
 * failure (-ENOMEM, -ENAMETOOLONG, the open's or the read's, -EFBIG past the
 * bounds above) with err naming the file; the next call tries again. */
int gs_claims_load(struct gs_agent *ag, char *err, size_t errlen) GS_WUR;

/* The claim whose allocation a is, or NULL (also while the claims are
 * unknown: for display only; a decision uses gs_claims_may_own). */
const struct gs_claim *gs_claims_of(struct gs_agent *ag, const struct gs_allocation *a);

/* Whether a is, or may be, a claim's allocation: 1 (a claim names it, or a
 * kept line holds its id), 0 (positively not), or the negative errno of
 * gs_claims_load while the claims are unknown. */
int gs_claims_may_own(struct gs_agent *ag, const struct gs_allocation *a) GS_WUR;

/* Frees the table (agent shutdown).  The file stays. */
void gs_claims_free(struct gs_agent *ag);

/* Parses one line of the file (modified in place) into c.  0 or -EINVAL. */
int gs_claims_parse_line(char *line, struct gs_claim *c) GS_WUR;

#endif
