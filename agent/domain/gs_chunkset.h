/* gs_chunkset.h — pool chunks an allocation pays for while the agent gives
 * their memory to the driver: behind an application's VMM allocations
 * (gs_vmm.h) and for its processes' contexts and modules (gs_outside.h).
 *
 * The chunks come from a pproc of the set's own (gs_pproc_malloc of
 * chunk_bytes: quota and ballooning apply, they count as held, they are
 * never granted).  Taking one releases its memory; giving one back
 * re-creates it first (gs_gpu_chunk_remake, which also checks that the
 * driver has room: memory someone still holds is not created twice).
 *
 * Every call runs under g->lock (gs_gpu_lock, which makes g->ctx current;
 * asserted). */
#ifndef GS_CHUNKSET_H
#define GS_CHUNKSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gs_util.h"

struct gs_gpu;
struct gs_palloc;
struct gs_pproc;

struct gs_chunkset_ent {
        uint64_t off;   /* its block in the set's pproc */
        uint32_t chunk; /* pool chunk id */
};

/* Zeroed by the owner. */
struct gs_chunkset {
        struct gs_pproc *pp; /* created on first take */
        struct gs_chunkset_ent *held;
        uint32_t nheld, capheld;
        const void *tag; /* the pproc's (gs_pproc_set_tag), set by the owner */
};

/* k more chunks from pa, the set's range being nslots chunks, their memory
 * released.  all: all or nothing; else as many as the quota and the range
 * give.  Returns how many were taken (all: k), or a negative errno with
 * nothing taken (-ENOMEM at the quota or the end of the range). */
int gs_chunkset_take(struct gs_gpu *g, struct gs_chunkset *s, struct gs_palloc *pa, uint32_t nslots, uint32_t k,
                     bool all) GS_WUR;
/* After an agent restart: the chunks the set held at slots[0..n) before
 * (the previous agent's ledger) are its again, past the quota and balloon
 * cap if they must be (gs_pproc_adopt), each without memory (a record
 * with none stands for it, else its memory goes): what they stood for is
 * still the driver's.  Only on a set that took nothing yet.  Returns how
 * many were taken (a slot out of range or taken is skipped, logged), or a
 * negative errno (nothing taken). */
int gs_chunkset_adopt(struct gs_gpu *g, struct gs_chunkset *s, struct gs_palloc *pa, uint32_t nslots,
                      const uint32_t *slots, uint32_t n) GS_WUR;
/* Held chunk i (swapped with the last) goes back to the allocation with
 * fresh memory.  Returns 0; or, when it cannot be re-created (err says
 * why), a negative errno with the chunk kept, or with force 1: it went
 * back without memory, to be re-created when next granted or recycled. */
int gs_chunkset_give(struct gs_gpu *g, struct gs_chunkset *s, uint32_t i, bool force, char *err, size_t errlen) GS_WUR;
/* The set holds nothing any more: its pproc and array go. */
void gs_chunkset_fini(struct gs_chunkset *s);

#endif
