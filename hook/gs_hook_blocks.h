/* gs_hook_blocks.h — the blocks this process holds on one GPU (offset in
 * its range -> size asked for), kept by the hook itself so that after an
 * agent restart it can tell the new agent where its live data is
 * (gs_wire.h "Reclaim"); the agent carves blocks, the hook only mirrors
 * them.  An open-addressing table with linear probing and backward-shift
 * deletion: no tombstones, O(1) expected, memory proportional to the live
 * blocks (bounded by the agent's maxBlocksPerProcess). */
#ifndef GS_HOOK_BLOCKS_H
#define GS_HOOK_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

struct gs_blocks {
        uint64_t *key; /* offset + 1; 0: empty */
        uint64_t *size;
        size_t cap, n; /* cap: a power of two, at most 3/4 full */
        int broken;    /* an insertion failed (out of memory): incomplete */
};

/* Records a block; on failure the table is marked broken (the reclaim
 * then says the list is incomplete). */
void gs_blocks_add(struct gs_blocks *b, uint64_t off, uint64_t size);
/* Forgets the block at off: 1 if there was one, else 0. */
int gs_blocks_del(struct gs_blocks *b, uint64_t off);
/* The i-th slot of the table, for walking it: 1 with the block, 0 if
 * empty.  i < b->cap. */
int gs_blocks_at(const struct gs_blocks *b, size_t i, uint64_t *ret_off, uint64_t *ret_size);
/* Whether a block meets [lo, hi) (a walk of the table). */
int gs_blocks_meet(const struct gs_blocks *b, uint64_t lo, uint64_t hi);
/* Empties the table and frees its memory. */
void gs_blocks_clear(struct gs_blocks *b);

#endif
