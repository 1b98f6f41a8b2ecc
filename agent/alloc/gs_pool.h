/* gs_pool.h — the agent's three-level allocator for one GPU, as the rest
 * of the agent sees it (docs/design.md; built by gs_gsm, gs_buddy
 * and gs_slab underneath).
 *
 * Addresses are integers: offsets in a process's virtual range of that GPU
 * (slot * chunk_bytes + offset in the chunk).  Nothing here touches device
 * memory or depends on CUDA, so it runs and is tested anywhere.
 *
 * Objects:
 *   gs_pool    one GPU's pool: nchunks chunks of chunk_bytes, chunk ids
 *              0..nchunks-1, and the system free list.
 *   gs_palloc  an allocation's part on that GPU: quota_chunks taken from the
 *              system list at creation (its own free list), and the right
 *              to borrow up to balloon_cap_chunks more (ballooning).
 *   gs_pproc   a process of an allocation on that GPU: the chunks it holds,
 *              each placed at a slot of its virtual range of nslots slots,
 *              and the blocks carved from them.
 *
 * Not thread-safe: the caller serializes all calls on one pool.  Every call
 * that fails returns a negative errno and leaves the state exactly as it was.
 * Debug builds (GS_ALLOC_DEBUG) run gs_pool_validate after each mutation and
 * abort on a violation. */
#ifndef GS_POOL_H
#define GS_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gs_util.h"

struct gs_pool;
struct gs_palloc;
struct gs_pproc;

/* Requests at most this size may be served by the slab level. */
#define GS_SLAB_MAX (64u * 1024u)

/* Default caps on live blocks (gs_pool_set_block_caps), which bound the
 * agent's own memory whatever a process asks for: a block served by a
 * slab costs about 2 B of agent memory (up to about 300 B when it alone
 * keeps its slab), any other about 100 B to 2 KiB (its record and the
 * free pieces around it). */
#define GS_POOL_MAX_PROC_BLOCKS (UINT64_C(1) << 20)
#define GS_POOL_MAX_ALLOC_BLOCKS (UINT64_C(1) << 22)

struct gs_grant {
        uint32_t chunk; /* chunk id in the pool */
        uint32_t slot;  /* where the process must map it */
};

struct gs_release {
        uint32_t first_slot; /* chunks now empty that the process should unmap */
        uint32_t count;      /* and then give back with gs_pproc_release; 0: none */
};

struct gs_pool_stats {
        uint64_t chunk_bytes;
        uint32_t nchunks;         /* usable chunks (retired ones excluded) */
        uint32_t chunks_free;     /* on the system free list */
        uint32_t chunks_reserved; /* quota chunks of all allocations */
        uint32_t chunks_borrowed; /* lent to allocations by ballooning, out of free units (not
                                     spilled ones, nor those lent out of other allocations' quotas) */
        uint32_t chunks_spilled;  /* spares held: borrowed data in host memory */
        uint32_t nallocs;
};

struct gs_palloc_stats {
        uint32_t quota_chunks;
        uint32_t balloon_cap_chunks;
        uint32_t chunks_free;       /* on the allocation's own free list */
        uint32_t chunks_held;       /* held by its processes (own + borrowed) */
        uint32_t chunks_borrowed;   /* of those, borrowed from the system list */
        uint32_t chunks_borrowable; /* more it may borrow now (cap and system list) */
        uint32_t chunks_spilled;    /* of chunks_borrowed, spares: data in host memory */
        uint32_t chunks_owed;       /* lent out of its quota (gs_gsm_alloc.owed) */
        uint32_t chunks_debt;       /* charged for memory a process may still hold (gs_palloc_debt) */
        uint32_t nprocs;
        uint64_t nblocks;         /* live blocks of all its processes */
        uint64_t bytes_requested; /* sum of sizes asked for by its processes */
        uint64_t bytes_in_blocks; /* sum of the blocks handed out for them */
};

struct gs_pproc_stats {
        uint32_t nslots;
        uint32_t chunks_held;
        uint32_t chunks_empty; /* held but with no live block */
        uint64_t nblocks;      /* live blocks */
        uint64_t bytes_requested;
        uint64_t bytes_in_blocks;
        uint64_t bytes_obtainable; /* what one more request could still get
                                      at most, roughly: free bytes in held
                                      chunks + free chunks it may still take */
};

/* Called when a chunk that has been granted to a process goes back to the
 * system free list (an allocation was deleted, or a borrowed chunk was
 * returned): the agent recycles its physical memory before any other
 * allocation can be given it, since the process it was granted to may have
 * kept the chunk's file descriptor.  Return 0, or a negative errno to have
 * the pool retire the chunk (no longer handed out, nchunks drops by one). */
typedef int (*gs_pool_return_fn)(void *ctx, uint32_t chunk);

/* pre: chunk_bytes is a power of two >= 64 KiB; nchunks >= 1.
 * Returns NULL on bad arguments or out of memory. */
struct gs_pool *gs_pool_new(uint32_t nchunks, uint64_t chunk_bytes);
/* Frees the pool and every allocation and process in it.  NULL is fine. */
void gs_pool_free(struct gs_pool *pool);
void gs_pool_set_return_fn(struct gs_pool *pool, gs_pool_return_fn fn, void *ctx);
/* At most per_proc live blocks in one process and per_alloc in all the
 * processes of one allocation (defaults GS_POOL_MAX_PROC_BLOCKS and
 * GS_POOL_MAX_ALLOC_BLOCKS); gs_pproc_malloc past either is -ENOMEM.
 * Lowering a cap under what is live frees nothing: only new requests fail.
 * -EINVAL if either is 0. */
int gs_pool_set_block_caps(struct gs_pool *pool, uint64_t per_proc, uint64_t per_alloc) GS_WUR;
/* Takes a free chunk out of service for good (e.g. its memory could not be
 * recreated).  -EBUSY if the chunk is not on the system free list. */
int gs_pool_retire_chunk(struct gs_pool *pool, uint32_t chunk) GS_WUR;
/* A chunk retired earlier goes back to the system free list (its memory
 * could be re-created after all).  -EBUSY if it is not retired. */
int gs_pool_unretire_chunk(struct gs_pool *pool, uint32_t chunk) GS_WUR;
void gs_pool_stats(const struct gs_pool *pool, struct gs_pool_stats *ret);
/* Walks every structure of the pool and checks its invariants.  Returns 0,
 * or -EUCLEAN and writes what is wrong into why (if non-NULL). */
int gs_pool_validate(const struct gs_pool *pool, char *why, size_t whylen) GS_WUR;

/* Creates an allocation part holding quota_chunks chunks moved from the
 * system list.  -ENOSPC if fewer than quota_chunks are free; -EINVAL if
 * quota_chunks is 0. */
int gs_palloc_new(struct gs_pool *pool, uint32_t quota_chunks, uint32_t balloon_cap_chunks,
                  struct gs_palloc **ret) GS_WUR;
/* Deletes it; all its chunks go back to the system list.  -EBUSY if it still
 * has processes. */
int gs_palloc_del(struct gs_palloc *a) GS_WUR;
void gs_palloc_stats(const struct gs_palloc *a, struct gs_palloc_stats *ret);
/* The most it may borrow, raised to cap chunks (a lower cap is ignored). */
void gs_palloc_raise_cap(struct gs_palloc *a, uint32_t cap);
/* How many chunks its processes gave back or were repaid to it (lent
 * chunks it was owed, taken back), ever (wraps): a request that failed for
 * want of memory compares it before and after, to know whether memory came
 * back meanwhile.  Any thread, without the pool's lock. */
uint32_t gs_palloc_returned(const struct gs_palloc *a);
/* Chunks the allocation gave back whose memory may still be held by its
 * processes: they count against its balloon cap until re-created (delta
 * +1 or -1; the count never goes below 0). */
void gs_palloc_debt(struct gs_palloc *a, int delta);

/* A new process with a virtual range of nslots chunk slots.  -EINVAL if
 * nslots is 0 or over 1<<20. */
int gs_pproc_new(struct gs_palloc *a, uint32_t nslots, struct gs_pproc **ret) GS_WUR;
/* The process is gone: every block is freed and every chunk it held goes
 * back to its allocation (borrowed ones to the system list first).  NULL ok. */
void gs_pproc_del(struct gs_pproc *p);
void gs_pproc_stats(const struct gs_pproc *p, struct gs_pproc_stats *ret);

/* Allocates size bytes.  On success *ret_off is the block's offset (aligned
 * to at least GS_MIN_ALIGN), and ret_grants[0..*ret_ngrants) lists the
 * chunks newly given to the process with their slots, which the caller must
 * send to it.  A request over chunk_bytes takes k whole chunks at k
 * consecutive slots (coalescing).  Errors: -EINVAL (size 0, or larger than
 * the pool), -ENOMEM (the process or its allocation at its live-block cap,
 * or quota and balloon cap used up), -ENOSPC (no k
 * consecutive free slots), -E2BIG (it would need more than max_grants new
 * chunks). */
int gs_pproc_malloc(struct gs_pproc *p, uint64_t size, uint64_t *ret_off, struct gs_grant *ret_grants,
                    uint32_t max_grants, uint32_t *ret_ngrants) GS_WUR;
/* Frees the block that starts at off.  -ENOENT if no live block starts
 * there (never allocated, already freed, or inside a block).  *ret_release
 * (if non-NULL) says which now-empty chunks the process should give back;
 * the process keeps one empty chunk cached so that alloc/free cycles do not
 * re-grant. */
int gs_pproc_free(struct gs_pproc *p, uint64_t off, struct gs_release *ret_release) GS_WUR;
/* The process unmapped slots [first_slot, first_slot+count): their chunks go
 * back to the allocation (borrowed ones to the system list).  -ENOENT if a
 * slot holds no chunk, -EBUSY if a chunk still has a live block.  All or
 * nothing. */
int gs_pproc_release(struct gs_pproc *p, uint32_t first_slot, uint32_t count) GS_WUR;
/* The lowest run of at most max consecutive slots of p holding wholly
 * free chunks (no live block, not legacy): its length (0: none) and its
 * first slot in *ret_first.  What the process can give back (unmap, then
 * gs_pproc_release) when memory is wanted elsewhere. */
uint32_t gs_pproc_empty_run(const struct gs_pproc *p, uint32_t max, uint32_t *ret_first);
/* The pool chunk id at slot, or UINT32_MAX if the slot holds none. */
uint32_t gs_pproc_slot_chunk(const struct gs_pproc *p, uint32_t slot);
/* The live block containing off: its start and requested size.  -ENOENT. */
int gs_pproc_range(const struct gs_pproc *p, uint64_t off, uint64_t *ret_base, uint64_t *ret_size) GS_WUR;

/* ---- after an agent restart: chunks a process already holds ---------
 *
 * A new agent knows (gs_ledger.h) which slots each live process held and
 * learns from the process (its hook) which of them it still maps and its
 * live blocks there; it does not know how the old agent carved them.
 * Such "legacy" chunks are held and charged as any other, opaque to the
 * buddy: their free space is not handed out again until every legacy
 * block in the chunk is freed, when the chunk becomes an ordinary empty
 * chunk of the process (and may be given back).  Legacy blocks are freed
 * and looked up (gs_pproc_free, gs_pproc_range) like any other.
 *
 *   gs_pproc_adopt        a chunk at a given free slot, opaque
 *   gs_pproc_legacy_claim the process maps the slot (adopting it if needed)
 *   gs_pproc_legacy_block a live block in claimed slots
 *   gs_pproc_legacy_seal  the list is complete: claimed chunks without a
 *                         block become empty chunks; no more blocks
 *
 * Slots not claimed stay opaque until the process is deleted (it may
 * still map them, and its hook does not know them). */

/* Takes a chunk for p at slot (free), past the balloon cap if it must: it
 * is already held.  -EBUSY (slot occupied or out of range), -ENOSPC (the
 * pool has no chunk left to stand for it), -ENOMEM. */
int gs_pproc_adopt(struct gs_pproc *p, uint32_t slot, uint32_t *ret_chunk) GS_WUR;
/* The same within the quota and balloon cap (-ENOMEM past them): for
 * what only the process says it holds. */
int gs_pproc_adopt_capped(struct gs_pproc *p, uint32_t slot, uint32_t *ret_chunk) GS_WUR;
/* The process maps slot: a legacy chunk there is claimed; a free slot is
 * adopted first, within the quota and balloon cap (*ret_chunk its chunk,
 * else UINT32_MAX; -ENOMEM past them).  -EBUSY if the slot holds an
 * ordinary chunk, -EALREADY once sealed. */
int gs_pproc_legacy_claim(struct gs_pproc *p, uint32_t slot, uint32_t *ret_chunk) GS_WUR;
/* A live block [off, off + size) whose slots are all claimed legacy
 * chunks.  -EINVAL (misaligned, empty, outside), -EALREADY (sealed),
 * -ENOMEM (the live-block caps). */
int gs_pproc_legacy_block(struct gs_pproc *p, uint64_t off, uint64_t size) GS_WUR;
/* Ends the claims.  complete: the blocks are all there are; claimed
 * chunks under none become empty chunks of the process.  Blocks that
 * overlap: -EINVAL, and then, as with !complete, every legacy chunk stays
 * opaque and the blocks are kept only for lookups and frees (a free of one
 * never empties a chunk). */
int gs_pproc_legacy_seal(struct gs_pproc *p, bool complete) GS_WUR;
/* Gives back legacy chunks never claimed (opaque, under no block) until at most
 * keep legacy chunks remain; returns how many went. */
uint32_t gs_pproc_legacy_shed(struct gs_pproc *p, uint32_t keep);
/* The same, calling fn with each chunk that went (now on its allocation's
 * or the system list). */
uint32_t gs_pproc_legacy_shed_fill(struct gs_pproc *p, uint32_t keep, void (*fn)(void *ctx, uint32_t chunk), void *ctx);
/* Legacy chunks p still holds (opaque or under legacy blocks). */
uint32_t gs_pproc_legacy_chunks(const struct gs_pproc *p);
/* Every chunk placed at or taken from a slot of a process with a tag
 * (gs_pproc_set_tag) is reported to fn, under the caller's serialization
 * (gs_gsm_hold_fn). */
void gs_pool_set_hold_fn(struct gs_pool *pool,
                         void (*fn)(void *ctx, uint32_t chunk, const void *tag, uint32_t slot, int held), void *ctx);
void gs_pproc_set_tag(struct gs_pproc *p, const void *tag);
/* p's tag, or NULL. */
const void *gs_pproc_tag(const struct gs_pproc *p);
/* The chunk level under the pool (gs_gsm.h): for the GPU's scrubber,
 * which orders its free lists by what has been zeroed.  Under the pool's
 * serialization, as every call here. */
struct gs_gsm *gs_pool_gsm(struct gs_pool *pool);
/* Whether chunk is on the system free list. */
bool gs_pool_chunk_in_sys(const struct gs_pool *pool, uint32_t chunk);
/* Whether chunk is held by a process (at a slot). */
bool gs_pool_chunk_held(const struct gs_pool *pool, uint32_t chunk);
/* How many of the chunks p holds satisfy pred. */
uint32_t gs_pproc_count_held(const struct gs_pproc *p, bool (*pred)(void *ctx, uint32_t chunk), void *ctx);

/* ---- Moves (docs/burst.md "Giving it back"; gs_gsm.h) ----
 * The last nspare records of the pool are spares, retired: they stand for
 * data a process's borrowed chunk held once it is moved to host memory,
 * so that the chunk can go to whom it is owed.  With spares, allocations
 * borrow the clean free chunks of others too (then owed them), and an
 * allocation may be made while its chunks are lent.  Once, before any
 * allocation.  -EINVAL otherwise. */
int gs_pool_set_spares(struct gs_pool *pool, uint32_t nspare) GS_WUR;
/* Chunks a move back could take now (gs_gsm_lendable). */
uint32_t gs_pool_lendable(const struct gs_pool *pool);
/* Chunks the allocations are owed in all. */
uint32_t gs_pool_owed(const struct gs_pool *pool);
/* gs_gsm_exchange, gs_gsm_reserve, gs_gsm_want. */
int gs_pool_exchange(struct gs_pool *pool, uint32_t held, uint32_t spare) GS_WUR;
int gs_pool_reserve(struct gs_pool *pool, uint32_t *ret_chunk) GS_WUR;
void gs_palloc_want(struct gs_palloc *a, uint32_t n);
uint32_t gs_palloc_owed(const struct gs_palloc *a);
/* After an agent restart (docs/burst.md "Agent restarts").  The
 * allocation's number (gs_ledger_tag.alloc), for gs_pool_debts. */
void gs_palloc_set_tag(struct gs_palloc *a, uint64_t tag);
/* fn(ctx, tag, owed) for each allocation owed chunks now. */
void gs_pool_debts(const struct gs_pool *pool, void (*fn)(void *ctx, uint64_t tag, uint32_t owed), void *ctx);
/* gs_gsm_alloc_lent_before, gs_gsm_adopted, gs_gsm_make_borrowed. */
void gs_palloc_lent_before(struct gs_palloc *a, uint32_t n);
void gs_pool_adopted(struct gs_pool *pool);
int gs_pool_make_borrowed(struct gs_pool *pool, uint32_t chunk) GS_WUR;
/* A spare free for an adoption (retired, held by nobody), or UINT32_MAX;
 * gs_pproc_adopt_spare places it at p's free slot as a legacy chunk
 * (gs_gsm_adopt_spare): 0, -EBUSY, -EINVAL, -ENOMEM. */
uint32_t gs_pool_spare_free(const struct gs_pool *pool);
int gs_pproc_adopt_spare(struct gs_pproc *p, uint32_t slot, uint32_t spare) GS_WUR;
/* Up to max slots of p: holding spares (spares), else borrowed chunks
 * with device memory (not from before a restart).  How many. */
uint32_t gs_pproc_move_slots(const struct gs_pproc *p, bool spares, uint32_t *slots, uint32_t max);

#endif
