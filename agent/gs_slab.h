/* gs_slab.h — the slab level of the agent's allocator (internal to
 * gs_alloc.c; see docs/allocator.md).
 *
 * When a process keeps asking for the same small size (<= GS_SLAB_MAX,
 * rounded up to 256 B: one class per 256 B step), one buddy block is cut
 * into equal slots of that size and later requests are served from it:
 * a slot costs a bit flip and a hash insertion instead of buddy splits and
 * merges, and sizes that are not powers of two waste nothing but the
 * 256 B rounding (2049 B gets a 2304 B slot).  The block is the power of
 * two at or above 64 slots (capped at the chunk size), so the tail that
 * cannot hold a slot is under 1/64 of it.  A slab whose slots are all free
 * goes back to the buddy at once.
 *
 * Slots have records in the buddy's hash (kind GS_BLK_SLOT, key
 * off | GS_BLK_KEY_SLOT), so free() finds them with one lookup. */
#ifndef GS_SLAB_H
#define GS_SLAB_H

#include <stddef.h>
#include <stdint.h>

#include "gs_alloc.h"
#include "gs_buddy.h"

#define GS_SLAB_CLASSES (GS_SLAB_MAX / GS_MIN_ALIGN)
#define GS_SLAB_MIN_SLOTS 64u
#define GS_SLAB_MAX_SLOTS 128u /* 64 slots of s fit in a power of two < 128 s */
/* The request of a size that turns the slab on: the first one of a size
 * goes to the buddy, the second and later to a slab. */
#define GS_SLAB_THRESHOLD 2u

struct gs_slab {
        struct gs_slab *prev, *next; /* its class's partial or full list */
        struct gs_blk *blk;          /* the buddy block it carves */
        uint64_t base;
        uint32_t slot;               /* slot bytes */
        uint16_t nslots, nfree;
        uint16_t cls;
        uint64_t freemask[GS_SLAB_MAX_SLOTS / 64]; /* bit i: slot i free */
};

struct gs_slab_class {
        struct gs_slab *partial, *full;
        uint32_t nreq;   /* requests of this size seen (saturates) */
        uint32_t nslabs;
};

struct gs_slab_cache {
        struct gs_buddy *buddy;
        struct gs_slab *spare; /* one preallocated slab struct */
        uint64_t nslabs;
        uint64_t slots_used;
        struct gs_slab_class cls[GS_SLAB_CLASSES];
};

void gs_slab_init(struct gs_slab_cache *sc, struct gs_buddy *buddy);
/* Frees the slab structs (not the buddy blocks: the buddy is finished
 * with them).  Safe on a finished cache. */
void gs_slab_fini(struct gs_slab_cache *sc);

/* Block bytes for slabs of slot bytes (a 256 B multiple <= GS_SLAB_MAX). */
uint64_t gs_slab_block_bytes(uint32_t slot, unsigned chunk_shift);
/* Would this request (of size bytes, 1..GS_SLAB_MAX) be served by a slab?
 * Nothing changes; call gs_slab_note once the request succeeded. */
int gs_slab_wants(const struct gs_slab_cache *sc, uint64_t size);
void gs_slab_note(struct gs_slab_cache *sc, uint64_t size);

/* Preallocates what a new slab would need besides buddy space, so that a
 * caller that adds a chunk for it first cannot fail afterwards.  -ENOMEM. */
int gs_slab_reserve(struct gs_slab_cache *sc) GS_WUR;
/* A slot for size bytes (1..GS_SLAB_MAX).  -ENOSPC if a new slab is needed
 * and the buddy has no block for it (add a chunk, retry); -ENOMEM. */
int gs_slab_alloc(struct gs_slab_cache *sc, uint64_t size, struct gs_blk **ret) GS_WUR;
/* Frees a slot (kind GS_BLK_SLOT).  *ret_empty_base as gs_buddy_free when
 * the slab's block went back and left its chunk empty, else UINT64_MAX.
 * -ENOMEM (nothing done). */
int gs_slab_free(struct gs_slab_cache *sc, struct gs_blk *slot, uint64_t *ret_empty_base) GS_WUR;

/* Slabs against their lists and masks, slot records against the slabs. */
int gs_slab_validate(const struct gs_slab_cache *sc, char *why, size_t whylen) GS_WUR;

#endif
