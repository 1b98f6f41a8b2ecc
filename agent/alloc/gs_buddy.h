/* gs_buddy.h — the buddy level of the agent's allocator (internal to
 * alloc/: gs_pool*.c through gs_pool_int.h, and gs_slab.h; see
 * docs/allocator.md).
 *
 * One gs_buddy per process serves blocks of 256 B up to chunk_bytes out of
 * the chunks that process holds.  Each chunk is its own buddy tree: blocks
 * never span two chunks, merging stops at the chunk's size.  Addresses are
 * integers (offsets in the process's virtual range); nothing is ever read
 * or written at them.
 *
 * Every block (free or not) has a record (struct gs_blk) kept in an
 * open-addressing hash keyed by its offset, so metadata is proportional to
 * the number of blocks, never to chunk_bytes / 256, and finding a block or
 * its buddy costs one probe sequence.  Free blocks also sit on intrusive
 * per-order free lists (O(1) insert and removal).
 *
 * A request of s bytes (rounded up to 256 B) is carved as Linux's
 * alloc_pages_exact does: a block of order ceil(log2(s)) is taken and the
 * tail past s is given back to the free lists at once, so the block handed
 * out is exactly s bytes, the binary decomposition of s (20 MiB = 16 + 4).
 *
 * The hash is shared with gs_pool_blocks.c (coalesced blocks) and the slab
 * level, which finds a slab by its block's record; slots have none. */
#ifndef GS_BUDDY_H
#define GS_BUDDY_H

#include <stddef.h>
#include <stdint.h>

#include "gs_util.h"

#define GS_BUDDY_MIN_SHIFT 8u  /* 256 B, GS_MIN_ALIGN */
#define GS_BUDDY_MAX_SHIFT 47u /* largest chunk the buddy accepts: 128 TiB */

/* Records needed, in the worst case, by one gs_buddy_alloc or
 * gs_buddy_free: at most one per order split off or given back. */
#define GS_BUDDY_OP_RECS (2u * (GS_BUDDY_MAX_SHIFT - GS_BUDDY_MIN_SHIFT + 1u))

enum gs_blk_kind {
        GS_BLK_FREE = 1, /* on a free list; size = 1 << order */
        GS_BLK_USED,     /* handed out by the buddy; size = rounded request */
        GS_BLK_SLAB,     /* handed out by the buddy to a slab; owner = slab */
        GS_BLK_WHOLE,    /* whole chunks of a coalesced request (gs_pool_blocks.c) */
        GS_BLK_TAIL,     /* the partial last chunk of a coalesced request,
                            carved at the chunk's base; owner = its WHOLE */
        GS_BLK_LEGACY,   /* an aligned power-of-two piece of a block an
                            earlier agent carved (gs_pool.h "legacy") */
};

/* 40 bytes: a free block needs its list links, any other its size asked
 * for and owner, never both, so they share the space (the agent holds one
 * record per buddy block; docs/allocator.md "The agent's memory"). */
struct gs_blk {
        uint64_t off;  /* start, in the process's virtual range */
        uint64_t size; /* bytes the block spans */
        union {
                struct { /* FREE: its order's free list */
                        struct gs_blk *prev, *next;
                };
                struct {              /* any other kind */
                        uint64_t req; /* bytes asked for (USED, WHOLE); else 0 */
                        void *owner;  /* SLAB: the struct gs_slab; WHOLE, TAIL:
                                         each other */
                };
        };
        uint8_t kind;  /* enum gs_blk_kind */
        uint8_t order; /* FREE: log2(size) */
};
_Static_assert(sizeof(struct gs_blk) == 40, "struct gs_blk grew: it is per block");

struct gs_buddy_ent {
        uint64_t key;
        struct gs_blk *blk; /* NULL: empty */
};

struct gs_buddy_arena;

struct gs_buddy {
        unsigned chunk_shift; /* log2(chunk_bytes) */
        uint64_t nonempty;    /* bit o: free list o is not empty */
        struct gs_blk *free_head[GS_BUDDY_MAX_SHIFT + 1];
        /* the hash: tab_cap a power of two, at most half full */
        struct gs_buddy_ent *tab;
        size_t tab_cap, tab_n;
        /* records: carved from arenas, recycled through rec_free */
        struct gs_buddy_arena *arenas;
        struct gs_blk *rec_free;
        size_t rec_nfree;
        /* accounting */
        uint64_t nchunks;       /* chunks added and not removed */
        uint64_t nchunks_empty; /* of those, wholly free */
        uint64_t bytes_used;    /* sum of USED, SLAB and TAIL block sizes */
        /* the same per chunk, indexed by off >> chunk_shift: allocation
           prefers free blocks in the fullest chunks */
        uint64_t *fill;
        size_t fill_cap;
};

/* Free blocks of the chosen order looked at to find the fullest chunk. */
#define GS_BUDDY_SCAN 8u

/* pre: GS_BUDDY_MIN_SHIFT + 8 <= chunk_shift <= GS_BUDDY_MAX_SHIFT. */
int gs_buddy_init(struct gs_buddy *b, unsigned chunk_shift) GS_WUR;
/* Frees every record and the hash.  Safe on a zeroed or finished buddy. */
void gs_buddy_fini(struct gs_buddy *b);

/* Makes sure the next nrec record allocations and hash insertions cannot
 * fail, so callers can check everything before they mutate anything.
 * -ENOMEM. */
int gs_buddy_reserve(struct gs_buddy *b, size_t nrec) GS_WUR;

/* Makes sure chunks below end (an offset) can be added without
 * allocating.  -ENOMEM. */
int gs_buddy_reserve_chunks(struct gs_buddy *b, uint64_t end) GS_WUR;
/* Adds a wholly free chunk starting at base (a multiple of chunk_bytes,
 * not already added).  -ENOMEM (never after gs_buddy_reserve(b, 1) and
 * gs_buddy_reserve_chunks covering it). */
int gs_buddy_add_chunk(struct gs_buddy *b, uint64_t base) GS_WUR;
/* The aligned power-of-two pieces [start, end) splits into, greedily from
 * the start (each the largest aligned to its position that fits): the
 * canonical decomposition, which leaves no two free buddies.  Calls fn
 * for each if not NULL; returns how many.  pre: both 256-aligned. */
size_t gs_buddy_pieces(uint64_t start, uint64_t end, void (*fn)(void *ctx, uint64_t off, unsigned order), void *ctx);
/* Adds a chunk at base (not in this buddy) whose ranges [r[2i], r[2i+1])
 * (i < n; sorted, disjoint, 256-aligned, inside the chunk) are in use:
 * they become GS_BLK_LEGACY pieces, the rest free blocks.  -ENOMEM
 * (nothing added). */
int gs_buddy_add_chunk_used(struct gs_buddy *b, uint64_t base, const uint64_t *r, size_t n) GS_WUR;
/* Frees the GS_BLK_LEGACY pieces of [start, end) (as gs_buddy_pieces
 * splits it), merging as gs_buddy_free does.  *ret_empty_base: a chunk it
 * left wholly free, else UINT64_MAX.  -ENOENT if a piece is not there
 * (nothing freed), -ENOMEM. */
int gs_buddy_free_pieces(struct gs_buddy *b, uint64_t start, uint64_t end, uint64_t *ret_empty_base) GS_WUR;
/* 1 if the chunk at base is in this buddy and wholly free, else 0. */
int gs_buddy_chunk_is_free(const struct gs_buddy *b, uint64_t base);
/* Takes a wholly free chunk out.  -EBUSY if it is not wholly free (or not
 * in this buddy). */
int gs_buddy_remove_chunk(struct gs_buddy *b, uint64_t base) GS_WUR;

/* Allocates a block of size bytes rounded up to 256 B, kind GS_BLK_USED or
 * GS_BLK_SLAB, records req in it and returns its record.  The block's
 * offset is aligned to the power of two at or above its size.  It comes
 * from the smallest order with a free block and, among the first
 * GS_BUDDY_SCAN blocks of that order, from the fullest chunk: sparse
 * chunks drain and go back whole, for coalesced requests.  -EINVAL if
 * size is 0 or over chunk_bytes; -ENOSPC if no free block is large enough
 * (the caller may add a chunk and retry); -ENOMEM. */
int gs_buddy_alloc(struct gs_buddy *b, uint64_t size, uint64_t req, enum gs_blk_kind kind, struct gs_blk **ret) GS_WUR;
/* Like gs_buddy_alloc, but the block starts at base, a wholly free chunk
 * of this buddy (used for the tail of a coalesced request).  -EBUSY if the
 * chunk is not wholly free. */
int gs_buddy_alloc_at(struct gs_buddy *b, uint64_t base, uint64_t size, enum gs_blk_kind kind,
                      struct gs_blk **ret) GS_WUR;
/* Frees a block returned by gs_buddy_alloc (the record is recycled) and
 * merges it with its free buddies.  *ret_empty_base is the chunk's base if
 * the chunk became wholly free, else UINT64_MAX.  -ENOMEM (nothing done). */
int gs_buddy_free(struct gs_buddy *b, struct gs_blk *blk, uint64_t *ret_empty_base) GS_WUR;

/* The hash, also used by the slab level and gs_pool_blocks.c for their records. */
struct gs_blk *gs_buddy_find(const struct gs_buddy *b, uint64_t key);
/* pre: gs_buddy_reserve covered it; key not present. */
void gs_buddy_insert(struct gs_buddy *b, uint64_t key, struct gs_blk *blk);
/* pre: key present. */
void gs_buddy_remove(struct gs_buddy *b, uint64_t key);
/* pre: gs_buddy_reserve covered it.  Returns a zeroed record. */
struct gs_blk *gs_buddy_rec_get(struct gs_buddy *b);
void gs_buddy_rec_put(struct gs_buddy *b, struct gs_blk *blk);

/* The block record (not a slot) whose range contains off, or NULL. */
struct gs_blk *gs_buddy_find_containing(const struct gs_buddy *b, uint64_t off);

/* Checks every invariant: free lists against the hash and the mask, every
 * chunk exactly tiled by its blocks, no two free buddies left unmerged,
 * alignment, the counters.  Returns 0 or -EUCLEAN with a reason in why. */
int gs_buddy_validate(const struct gs_buddy *b, char *why, size_t whylen) GS_WUR;

#endif
