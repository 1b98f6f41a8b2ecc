/* gs_slab.h — the slab level of the agent's allocator (internal to
 * alloc/: gs_pool*.c through gs_pool_int.h; see docs/allocator.md).
 *
 * When a process keeps asking for the same small size (<= GS_SLAB_MAX,
 * rounded up to 256 B: one class per 256 B step), one buddy block is cut
 * into equal slots of that size and later requests are served from it:
 * a slot costs a bit flip instead of buddy splits and merges, and sizes that are not powers of two waste nothing but the
 * 256 B rounding (2049 B gets a 2304 B slot).  The block is exactly its
 * slots (the buddy carves exact sizes): GS_SLAB_BLOCK_TARGET / slot of
 * them, at least GS_SLAB_MIN_SLOTS and at most GS_SLAB_MAX_SLOTS (and at
 * most a chunk), so a size class with few live slots holds little idle
 * memory.  A slab whose slots are all free goes back to the buddy at once.
 *
 * A slot has no record of its own: its state is a bit of its slab's free
 * mask and its requested size one byte (the size is within 256 B below
 * the slot size), so a live 256 B block costs the agent about 2 bytes
 * (the slab struct and the slab block's buddy record, shared by 128
 * slots), not a record and a hash entry of its own.  free() finds the slab
 * through the buddy's hash: a slab block is aligned to the power of two at
 * or above its size, and slab blocks are 32 KiB (128 x 256 B) to 256 KiB,
 * so the slab containing off starts at off rounded down to one of a few
 * powers of two (gs_slab_find; one probe for the 256 B class). */
#ifndef GS_SLAB_H
#define GS_SLAB_H

#include <stddef.h>
#include <stdint.h>

#include "gs_pool.h"
#include "gs_buddy.h"

#define GS_SLAB_CLASSES (GS_SLAB_MAX / GS_MIN_ALIGN)
#define GS_SLAB_BLOCK_TARGET (256u * 1024u)
#define GS_SLAB_MIN_SLOTS 4u
#define GS_SLAB_MAX_SLOTS 128u
/* The request of a size that turns the slab on: the first one of a size
 * goes to the buddy, the second and later to a slab. */
#define GS_SLAB_THRESHOLD 2u

struct gs_slab {
        struct gs_slab *prev, *next; /* its class's partial or full list */
        struct gs_blk *blk;          /* the buddy block it carves */
        uint64_t base;
        uint32_t slot; /* slot bytes */
        uint16_t nslots, nfree;
        uint16_t cls;
        uint64_t freemask[GS_SLAB_MAX_SLOTS / 64]; /* bit i: slot i free */
        /* live slot i was asked for slot - GS_MIN_ALIGN + 1 + req[i] bytes;
           0 while free */
        uint8_t req[GS_SLAB_MAX_SLOTS];
};

struct gs_slab_class {
        struct gs_slab *partial, *full;
        uint32_t nreq; /* requests of this size seen (saturates) */
        uint32_t nslabs;
};

struct gs_slab_cache {
        struct gs_buddy *buddy;
        struct gs_slab *spare; /* one preallocated slab struct */
        uint64_t nslabs;
        uint64_t slots_used;
        /* slab blocks are aligned to 2^lo_shift .. 2^hi_shift (gs_slab_find) */
        unsigned lo_shift, hi_shift;
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
/* A slot for size bytes (1..GS_SLAB_MAX), of size rounded up to 256 B; its
 * offset in *ret_off.  -ENOSPC if a new slab is needed and the buddy has no
 * block for it (add a chunk, retry); -ENOMEM.  Nothing changes on failure. */
int gs_slab_alloc(struct gs_slab_cache *sc, uint64_t size, uint64_t *ret_off) GS_WUR;
/* The slab whose block contains off, or NULL. */
struct gs_slab *gs_slab_find(const struct gs_slab_cache *sc, uint64_t off);
/* The index of the live slot of s that contains off; -ENOENT if that slot
 * is free (or off is past the last slot).  pre: s contains off. */
int gs_slab_slot(const struct gs_slab *s, uint64_t off, unsigned *ret_i) GS_WUR;
static inline uint64_t gs_slab_slot_off(const struct gs_slab *s, unsigned i)
{
        return s->base + (uint64_t)i * s->slot;
}
/* The size asked for live slot i. */
static inline uint64_t gs_slab_slot_req(const struct gs_slab *s, unsigned i)
{
        return s->slot - GS_MIN_ALIGN + 1u + s->req[i];
}
/* Frees live slot i of s.  *ret_empty_base as gs_buddy_free when the slab's
 * block went back and left its chunk empty, else UINT64_MAX.  -ENOMEM
 * (nothing done). */
int gs_slab_free(struct gs_slab_cache *sc, struct gs_slab *s, unsigned i, uint64_t *ret_empty_base) GS_WUR;

/* Live slots, the sizes asked for them and the bytes they span, counted by
 * walking every slab (for validators). */
void gs_slab_usage(const struct gs_slab_cache *sc, uint64_t *ret_slots, uint64_t *ret_req, uint64_t *ret_bytes);
/* Slabs against their lists, masks and buddy blocks; the counters. */
int gs_slab_validate(const struct gs_slab_cache *sc, char *why, size_t whylen) GS_WUR;

#endif
