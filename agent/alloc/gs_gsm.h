/* gs_gsm.h — the chunk level of the agent's allocator (see
 * docs/allocator.md).  The pool (gs_pool*.c) drives it; outside the
 * allocator only the GPU's scrubber (gs_gpu_scrub.c, gs_gpu_scrubber.c:
 * gs_gsm_clean, gs_gsm_scrub_next) and its spill books (gs_gpu_spill.c: a
 * chunk record's state) include it; marking a chunk clean is the only
 * change they make through it.
 *
 * A pool of nchunks fixed-size chunks (GSMs) and the lists they move
 * between, all intrusive doubly linked lists threaded through one array of
 * chunk records (indices, not pointers), so every move is O(1):
 *
 *   system free list (pool)  --quota at creation-->  allocation's free list
 *   allocation's free list   --take-->               process (at a slot)
 *   system free list         --take, ballooning-->   process (borrowed)
 *   another's free list      --take, lend_owned-->   process (borrowed;
 *                                                     the other is owed it)
 *
 * A borrowed chunk that comes back goes to the system list.  An own chunk
 * that comes back while the allocation still owes borrowed chunks repays
 * one of them instead: it goes to the system list and one held borrowed
 * chunk becomes an own chunk (chunks are interchangeable), so a balloon
 * deflates as soon as the allocation's use falls.
 *
 * A chunk that goes back to the system list after having been granted to
 * a process passes through the pool's return callback (gs_pool.h).
 *
 * Dirty chunks (docs/allocator.md "Scrubbing"): a chunk a process took is
 * dirty (it may hold the process's data) until the agent zeroes it and
 * says so (gs_gsm_clean); the system list holds only clean ones (what goes
 * there is made anew).  An allocation's free list keeps its clean chunks
 * before its dirty ones, the dirty ones in the order they came back, and
 * each dirty one also sits on the list of the process that gave it back
 * (its last holder, while that lives).  A process takes its own dirty
 * chunks back first (its own data: nothing to zero), then the clean ones,
 * then the oldest dirty one.  gs_gsm_scrub_next says which dirty chunks a
 * scrubber should zero next so that the others find clean ones. */
#ifndef GS_GSM_H
#define GS_GSM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gs_util.h"

#define GS_GSM_NONE UINT32_MAX
#define GS_GSM_MAX_SLOTS (UINT32_C(1) << 20)

enum gs_gsm_state {
        GS_GSM_SYS = 1, /* on the system free list */
        GS_GSM_RETIRED, /* out of service for good */
        GS_GSM_OWN,     /* on its allocation's free list */
        GS_GSM_HELD,    /* held by a process at a slot */
};

struct gs_gsm_alloc;
struct gs_gsm_proc;

struct gs_gsm_chunk {
        uint32_t prev, next;        /* the list of its state (SYS, OWN, HELD) */
        uint32_t bprev, bnext;      /* HELD: its allocation's borrowed list;
                                  OWN: its last holder's (last) */
        uint32_t slot;              /* HELD: where the process maps it */
        uint8_t state;              /* enum gs_gsm_state */
        uint8_t borrowed;           /* HELD: counts against the balloon cap */
        uint8_t granted;            /* granted to a process since it left SYS */
        uint8_t dirty;              /* taken by a process since made or zeroed */
        struct gs_gsm_alloc *alloc; /* OWN, HELD */
        struct gs_gsm_proc *proc;   /* HELD */
        struct gs_gsm_proc *last;   /* OWN and dirty: who gave it back, if alive */
        void *user;                 /* HELD: free for gs_pool*.c's use */
};

struct gs_gsm_list {
        uint32_t head, count;
        uint32_t tail;
};

typedef int (*gs_gsm_return_fn)(void *ctx, uint32_t chunk);
/* A chunk was placed at (held) or taken from (!held) a slot of a process
 * whose tag is not NULL (gs_ledger.h records who holds what). */
typedef void (*gs_gsm_hold_fn)(void *ctx, uint32_t chunk, const void *tag, uint32_t slot, int held);

struct gs_gsm {
        struct gs_gsm_chunk *chunks;
        uint32_t nchunks; /* including retired */
        uint32_t nretired;
        unsigned chunk_shift;
        struct gs_gsm_list sys;
        uint32_t reserved; /* sum of the allocations' quotas */
        uint32_t borrowed; /* sum of their borrowed chunks */
        uint32_t owed;     /* sum of their owed chunks: lent ones the system list owes */
        /* Allocations may borrow the clean free chunks of other
         * allocations, which are then owed them; and an allocation may be
         * made while its chunks are lent (owed).  Only where lent memory
         * can be taken back from live data (spill, docs/burst.md). */
        bool lend_owned;
        /* Records from nreal on are spares: no device memory of their
         * own; they stand, held and borrowed, for data moved to host
         * memory (gs_gsm_exchange), else retired.  nchunks by default. */
        uint32_t nreal;
        uint32_t spilled; /* spares held (data in host memory) */
        uint32_t nallocs;
        struct gs_gsm_alloc *allocs; /* doubly linked through next/prev */
        gs_gsm_return_fn return_fn;
        void *return_ctx;
        gs_gsm_hold_fn hold_fn;
        void *hold_ctx;
        /* Called when a dirty chunk lands on a free list or a clean one
         * leaves it (gs_gsm_scrub_next may have work); NULL: not told. */
        void (*kick_fn)(void *ctx);
        void *kick_ctx;
};

struct gs_gsm_alloc {
        struct gs_gsm *gsm;
        struct gs_gsm_alloc *prev, *next;
        uint32_t quota, cap;
        struct gs_gsm_list own;      /* free list */
        struct gs_gsm_list borrowed; /* held borrowed chunks (bprev/bnext) */
        uint32_t held;
        uint32_t nprocs;
        struct gs_gsm_proc *procs;
        /* Borrowed chunks it gave back whose memory its processes may still
         * hold (not re-created yet): they count against the cap. */
        uint32_t debt;
        /* Borrowed past the cap by gs_gsm_take_at (chunks a restarted
         * agent found held): the cap is exceeded by at most this. */
        uint32_t over;
        /* Chunks its processes gave back or that were repaid to it (what
         * it was owed), ever (wraps; written atomically, so it may be
         * read without the pool's lock). */
        uint32_t returned;
        /* Quota chunks it did not get when it was made because they were
         * lent (borrowed by other allocations): every chunk that reaches
         * the system list goes to an allocation that is owed one, and
         * nothing is lent while any is owed (docs/burst.md). */
        uint32_t owed;
        /* Of owed, chunks its processes asked for and did not get: repaid
         * before any other allocation's (gs_gsm_want). */
        uint32_t wants;
        /* Of its borrowed chunks, spares (data in host memory). */
        uint32_t spilled;
        /* While a restarted agent adopts what processes hold: chunks it
         * was owed before (gs_gsm_alloc_lent_before), lent first when an
         * adoption finds the system list empty. */
        uint32_t lent_before;
};

struct gs_gsm_proc {
        struct gs_gsm_alloc *alloc;
        struct gs_gsm_proc *prev, *next;
        uint32_t nslots;
        uint32_t *slots; /* chunk at each slot, GS_GSM_NONE if free;
                              only [0, slots_cap) stored, the rest free */
        uint32_t slots_cap;
        uint32_t lo_free; /* every slot below is occupied */
        struct gs_gsm_list held;
        /* Dirty chunks it gave back still on its allocation's free list,
         * newest first (bprev/bnext): taken back before any other. */
        struct gs_gsm_list mine;
        const void *tag; /* for hold_fn; NULL: not reported */
};

/* A chunk's links in one of its lists: prev/next (which == 0) or
 * bprev/bnext (which == 1). */
static inline uint32_t *gs_gsm_lprev(struct gs_gsm_chunk *c, int which)
{
        return which ? &c->bprev : &c->prev;
}
static inline uint32_t *gs_gsm_lnext(struct gs_gsm_chunk *c, int which)
{
        return which ? &c->bnext : &c->next;
}

/* pre: chunk_bytes a power of two, 2^16..2^47; nchunks >= 1. */
int gs_gsm_init(struct gs_gsm *g, uint32_t nchunks, uint64_t chunk_bytes) GS_WUR;
void gs_gsm_fini(struct gs_gsm *g);
/* -EINVAL for a bad id, -EBUSY if not on the system list. */
int gs_gsm_retire(struct gs_gsm *g, uint32_t chunk) GS_WUR;
/* A retired chunk back on the system list (its memory was re-created).
 * -EINVAL for a bad id, -EBUSY if not retired. */
int gs_gsm_unretire(struct gs_gsm *g, uint32_t chunk) GS_WUR;
static inline uint32_t gs_gsm_usable(const struct gs_gsm *g)
{
        return g->nchunks - g->nretired;
}

/* -EINVAL if quota is 0, -ENOSPC if fewer than quota chunks are free or
 * lent (not owed already): what is lent is owed to it (gs_gsm_alloc.owed)
 * and comes back as borrowers give chunks back. */
int gs_gsm_alloc_init(struct gs_gsm *g, struct gs_gsm_alloc *a, uint32_t quota, uint32_t cap) GS_WUR;
/* Chunks back to the system list.  -EBUSY if a process remains. */
int gs_gsm_alloc_fini(struct gs_gsm_alloc *a) GS_WUR;
/* Chunks a process of a may still take: own free + what it may borrow. */
uint32_t gs_gsm_alloc_obtainable(const struct gs_gsm_alloc *a);

/* -EINVAL if nslots is 0 or over GS_GSM_MAX_SLOTS; -ENOMEM. */
int gs_gsm_proc_init(struct gs_gsm_alloc *a, struct gs_gsm_proc *p, uint32_t nslots) GS_WUR;
/* Every held chunk goes back (gs_gsm_put), then p leaves its allocation. */
void gs_gsm_proc_fini(struct gs_gsm_proc *p);

static inline uint32_t gs_gsm_slot_chunk(const struct gs_gsm_proc *p, uint32_t slot)
{
        return slot < p->slots_cap ? p->slots[slot] : GS_GSM_NONE;
}
/* Finds the lowest k consecutive free slots and makes sure the slot map
 * can record them (so the takes that follow cannot fail).  -ENOSPC,
 * -ENOMEM. */
int gs_gsm_find_slots(struct gs_gsm_proc *p, uint32_t k, uint32_t *ret_first) GS_WUR;
/* Places a chunk at slot (free, and covered by gs_gsm_find_slots): from the
 * allocation's free list, else borrowed from the system list.  -ENOMEM if
 * neither can give one (nothing changed). */
int gs_gsm_take(struct gs_gsm_proc *p, uint32_t slot, uint32_t *ret_chunk) GS_WUR;
/* Like gs_gsm_take at a given free slot (< nslots), and past the balloon
 * cap if it must (the chunk is already held: a process an agent restart
 * found holding it, gs_pool.h "legacy").  -EBUSY (slot occupied), -ENOSPC
 * (no chunk on either list), -ENOMEM. */
int gs_gsm_take_at(struct gs_gsm_proc *p, uint32_t slot, uint32_t *ret_chunk) GS_WUR;
/* After an agent restart (gs_pool.h "legacy"): a was owed n chunks
 * before.  While it is set, a gs_gsm_take_at that finds the system list
 * empty takes a free chunk of such an allocation first (owed it again),
 * else (lend_owned) of the idle one with the most; gs_gsm_adopted ends
 * it for every allocation. */
void gs_gsm_alloc_lent_before(struct gs_gsm_alloc *a, uint32_t n);
void gs_gsm_adopted(struct gs_gsm *g);
/* After an agent restart: spare (retired) held at p's free slot (< nslots),
 * borrowed, past the cap if it must: the process maps host memory there
 * that the previous agent moved its data to.  -EBUSY (slot occupied),
 * -EINVAL (not a free spare), -ENOMEM. */
int gs_gsm_adopt_spare(struct gs_gsm_proc *p, uint32_t slot, uint32_t spare) GS_WUR;
/* held (held, with device memory) is made one of its allocation's
 * borrowed chunks, trading with one of them that is not a spare (chunks
 * are interchangeable), so that gs_gsm_exchange may take it.  0 (already
 * borrowed too), -EINVAL (not held), -ENOENT (the allocation borrows no
 * such chunk). */
int gs_gsm_make_borrowed(struct gs_gsm *g, uint32_t held) GS_WUR;
/* Moves (docs/burst.md "Giving it back").  spare (retired: a record
 * without device memory) takes held's place at its process's slot, with
 * all it counts for (borrowed, blocks); held goes to the system list as a
 * given-back chunk does (the return callback makes its memory anew) and
 * repays what is owed.  -EINVAL unless held is held and borrowed and spare
 * retired. */
int gs_gsm_exchange(struct gs_gsm *g, uint32_t held, uint32_t spare) GS_WUR;
/* A chunk the system list may lend, else (lend_owned) a clean free chunk
 * of an allocation (owed it from now on), retired for a move to take
 * (gs_gsm_exchange); gs_gsm_unretire puts it back (repaying what is
 * owed).  -ENOMEM if none. */
int gs_gsm_reserve(struct gs_gsm *g, uint32_t *ret_chunk) GS_WUR;
/* How many gs_gsm_reserve could take now. */
uint32_t gs_gsm_lendable(const struct gs_gsm *g);
/* n chunks were asked for in a and not obtained: up to what it is owed,
 * it is repaid first. */
void gs_gsm_want(struct gs_gsm_alloc *a, uint32_t n);
/* The chunk at slot (held) goes back: see the top of this file. */
void gs_gsm_put(struct gs_gsm_proc *p, uint32_t slot);

/* chunk's memory holds no process's data any more (zeroed, or made
 * anew): if it is on its allocation's free list, it is clean and goes to
 * the head, off its last holder's list; else nothing (a held chunk stays
 * dirty: its process may write it). */
void gs_gsm_clean(struct gs_gsm *g, uint32_t chunk);
/* Dirty chunks to zero next, at most max of them into ret (returns how
 * many): per allocation, while fewer than ahead of its free chunks are
 * clean, the dirty ones next in line (the oldest first), looking at most
 * GS_GSM_SCRUB_LOOK deep.  Only chunks another process may take: those of
 * an allocation with more than one process, or whose last holder is gone
 * (an only process takes its own back unzeroed). */
#define GS_GSM_SCRUB_LOOK 64u
uint32_t gs_gsm_scrub_next(const struct gs_gsm *g, uint32_t ahead, uint32_t *ret, uint32_t max);

/* Lists, states, owners, slot maps and counters against each other. */
int gs_gsm_validate(const struct gs_gsm *g, char *why, size_t whylen) GS_WUR;

#endif
