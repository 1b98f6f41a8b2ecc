/* gs_outside.h — GPU memory a pod's processes hold outside the agent's pool
 * (their CUDA contexts, module images, anything a process allocates without
 * the hook), charged to the pod's own quota.
 *
 * The driver can only give a process memory that is free in the driver, and
 * the pool holds everything but the reserve.  So the allocation pays for its
 * processes' outside memory in whole chunks: an outside set (one per
 * allocation part, i.e. per allocation and GPU) holds chunks taken from the
 * allocation like a process would (gs_pproc_malloc on a pproc of its own:
 * quota and ballooning apply, they count as held, they are never granted),
 * and their memory is released to the driver, where the processes'
 * contexts and modules find it.
 *
 * Each process has a charge slot per GPU, and the set holds
 * ceil(sum of charges / chunk_bytes) chunks: rounding costs at most one chunk
 * per allocation, not per process.
 *
 *   charge up    take chunks, drop their memory.  strict (a context about to
 *                be created): all or nothing, -ENOMEM at the quota.  Not
 *                strict (a measurement: the memory is already in use): take
 *                what the quota allows and return -EDQUOT for the rest; the
 *                caller applies the over-quota policy.
 *   charge down  re-create chunks and give them back, but only while the
 *                driver's free memory stays above the reserve plus what is
 *                promised to contexts not yet created (gs_gpu_room):
 *                memory released to the driver returns to the pool only once
 *                it is really free again.  A chunk that cannot be re-created
 *                yet stays in the set (still charged) and is retried by the
 *                next call.
 *
 * Every call runs under g->lock (gs_gpu_lock, which makes g->ctx current;
 * asserted). */
#ifndef GS_OUTSIDE_H
#define GS_OUTSIDE_H

#include <stdbool.h>
#include <stdint.h>

#include "gs_chunkset.h"
#include "gs_ledger.h"
#include "gs_util.h"

struct gs_gpu;
struct gs_palloc;

/* Zeroed by the owner (the allocation part). */
struct gs_outside {
        struct gs_chunkset cs; /* the chunks taken */
        uint64_t charged;      /* sum of the charge slots */
        uint32_t over_quota;   /* measurements the quota could not cover */
        /* Charged beyond what the set holds (the quota could not cover it:
         * the memory came from the reserve), and since when (0: covered).
         * Meanwhile every chunk the allocation gets back comes here first
         * (gs_outside_cover), before any process may take it. */
        uint64_t short_bytes;
        int64_t short_since_ms;
        /* Its chunks' ledger entries (GS_LEDGER_OUTSIDE), so that a
         * restarted agent charges them again (gs_outside_adopt). */
        struct gs_ledger_tag tag;
        /* What the previous agent's set held (gs_outside_adopt): the set
         * covers at least this until the processes' own charges are known
         * again (gs_outside_adopted_done). */
        uint64_t adopted;
};

/* The set records its chunks in the GPU's ledger as allocation alloc's
 * (its number, gs_ledger_tag.alloc).  o must not move afterwards. */
void gs_outside_init(struct gs_outside *o, uint64_t alloc);

/* Sets *slot (one process's charge on this GPU, part of o->charged) to
 * bytes and brings the set to ceil(charged / chunk) chunks.  pa is the
 * allocation part's pool allocation, nslots the size of the set's range.
 * Returns 0; -ENOMEM (strict: nothing changed); -EDQUOT (not strict: the
 * charge went up and is recorded, but the set holds fewer chunks than the
 * charges need: the quota cannot cover them). */
int gs_outside_charge(struct gs_gpu *g, struct gs_outside *o, struct gs_palloc *pa, uint32_t nslots, uint64_t *slot,
                      uint64_t bytes, bool strict) GS_WUR;
/* While short: takes what the allocation has free towards the charges.
 * After anything that gave chunks back to the allocation (a release, a
 * process's exit) and before a grant from it. */
void gs_outside_cover(struct gs_gpu *g, struct gs_outside *o, struct gs_palloc *pa, uint32_t nslots);
/* Gives back what is not charged any more (retries chunks that could not
 * be re-created before).  Called by the periodic scan. */
void gs_outside_settle(struct gs_gpu *g, struct gs_outside *o);
/* The allocation is going: every chunk back (re-created if possible; one
 * that cannot be stays without memory and is re-created when next granted),
 * the set's pproc deleted.  charged must be 0 (every process gone). */
void gs_outside_clear(struct gs_gpu *g, struct gs_outside *o);
/* After an agent restart, before any charge: the chunks the previous
 * agent's set held (its ledger's GS_LEDGER_OUTSIDE entries for this
 * allocation: their slots[0..n)) are the set's again, past the quota if
 * they must be: their memory is in the driver's hands already (the
 * processes' contexts), so each is a chunk without memory.  The charges
 * come back with the processes (the usage scan); until then nothing goes
 * back that the driver cannot make again (gs_outside_settle).  Without
 * this, a borrower whose quota and burst its adopted chunks fill, on a
 * pool whose free chunks are owed, could not be charged for its contexts
 * and would show over its quota by their size.  What they held stays
 * charged (o->adopted) until gs_outside_adopted_done.  Returns how many
 * chunks the set took. */
uint32_t gs_outside_adopt(struct gs_gpu *g, struct gs_outside *o, struct gs_palloc *pa, uint32_t nslots,
                          const uint32_t *slots, uint32_t n);
/* Every process of the allocation is back and measured (the usage scan):
 * the adopted charge goes, the processes' own charges stand. */
void gs_outside_adopted_done(struct gs_gpu *g, struct gs_outside *o);

#endif
