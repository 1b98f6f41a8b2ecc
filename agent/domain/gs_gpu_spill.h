/* gs_gpu_spill.h — a GPU's moves (part of struct gs_gpu, g->moves;
 * gs_gpu_spill.c; docs/burst.md "Giving it back"): spare records that
 * stand for host memory, a borrower's data moved there so that the chunk
 * under it goes to the allocation it is owed to, and moved back.  Every
 * field and function under g->lock (asserted) unless said otherwise. */
#ifndef GS_GPU_SPILL_H
#define GS_GPU_SPILL_H

#include <stdbool.h>
#include <stdint.h>

#include "gs_cuda.h"
#include "gs_ledger.h"
#include "gs_pool.h"

struct gs_gpu;
struct gs_allocation;

/* No move back to a GPU until moveBackQuiet (config, default 10 s) after
 * an owner last asked for lent memory there: what it frees a moment later
 * it may want again (a caching allocator's churn), and moves both ways
 * cost the borrower. */

/* A spare record's host memory while a move to it runs (gs_gpu_spill.c). */
struct gs_spare {
        CUmemGenericAllocationHandle h;
        int fd;    /* -1: none */
        bool busy; /* in a move now, or being made or dropped (working) */
        /* Made or dropped by the scrubber without the lock
         * (gs_gpu_spill_prepare_work): h and fd are its until
         * gs_gpu_spill_prepare_end; nobody else reads them meanwhile. */
        bool working;
        /* The id of a live process that was sent this host memory's fd
         * and did not map it (a move it said it did not do): it may keep
         * the memory, so the record stays charged (spillMax) and unused
         * until that process is gone (gs_gpu_spill_release_holder); 0:
         * none.  The agent itself keeps no handle of it then. */
        uint64_t holder;
        /* The id of a live process whose mover has this host memory
         * prepared (GS_OP_SPILL_PREP: imported, mapped at its scratch) for
         * a move of its own to come; the agent keeps its handle and fd
         * too.  Used in that process's moves only; once its process is
         * gone it is ready again (the process's import went with it), once
         * not needed or the process reconnected it is held by the
         * process (holder).  0: none. */
        uint64_t prep;
};

/* One slot's move: the record at the slot (from) gives way to to, whose
 * memory (fd) the process maps there once it copied the data over. */
struct gs_move_ent {
        uint32_t slot, from, to;
        int fd;
        bool prep; /* to's host memory is prepared in the process: no fd sent */
};

/* Where a batch's time goes, in order (docs/burst.md "Giving it back"):
 * the agent plans (host memory made, if it was not ready ahead); in the
 * process, as its mover says (GS_OP_SPILL_DONE): the launch gate closed
 * and the GPU synchronized, host memory imported and mapped at scratch
 * addresses (what of it the copy did not hide), the copy, the slots
 * remapped (what of it the copy did not hide); the rest of the time the
 * agent saw in the process is the wire (fds sent, calls answered); then
 * the agent settles (records exchanged, chunks made anew). */
enum gs_move_phase {
        GS_PHASE_PLAN,
        GS_PHASE_SYNC,
        GS_PHASE_PREPARE,
        GS_PHASE_COPY,
        GS_PHASE_REMAP,
        GS_PHASE_WIRE,
        GS_PHASE_SETTLE,
        GS_PHASE_N
};
/* "plan", "sync", ...: the metric's label and the log's words. */
extern const char *const gs_move_phase_names[GS_PHASE_N];

/* A take-back's spilling: the batches to host memory from the first after
 * nothing was wanted back to the one after which nothing is (logged then,
 * once). */
struct gs_gpu_takeback {
        uint64_t ns[GS_PHASE_N];
        uint64_t start_ns; /* the first batch planned (0: none yet) */
        uint32_t batches;
        uint32_t chunks;
};

/* Moves since the GPU was opened (gs_gpu_move_*). */
struct gs_gpu_move_stats {
        uint64_t chunks_out;           /* moved to host memory */
        uint64_t chunks_back;          /* moved back to the GPU */
        uint64_t refused;              /* spills that found no host memory (spillMax) */
        uint64_t moves;                /* batches, both ways */
        uint64_t move_ns;              /* their time in all, as the agent saw it */
        uint64_t take_back_asks;       /* owners' requests that made the agent ask for moves */
        uint64_t spill_ns[GS_PHASE_N]; /* batches to host memory, by phase */
};

/* The part: the pool's records [nchunks, nchunks + nspare) are spares
 * (gs_pool.h "Moves"); spill_want: chunks owners asked for that are lent;
 * moving_out: of those, in moves now; moving_back: chunks in moves back
 * to the GPU now. */
struct gs_gpu_moves {
        uint32_t nspare;
        struct gs_spare *spares;
        uint32_t spill_want;
        uint32_t moving_out;
        uint32_t moving_back;
        int64_t spill_want_ms;      /* since when spill_want waits for progress (0: none) */
        int64_t last_want_ms;       /* the last owner's request for lent memory */
        int64_t move_back_quiet_ms; /* config moveBackQuiet; set at open */
        struct gs_gpu_move_stats st;
        struct gs_gpu_takeback tb;
};

/* Before the pool is made: spillMax / chunk spare records (at most the
 * pool's size), 0 = no spill.  After it is closed: whatever host memory is
 * still made. */
int gs_gpu_spill_init(struct gs_gpu *g, uint64_t spill_max_bytes, char *err, size_t errlen) GS_WUR;
void gs_gpu_spill_fini(struct gs_gpu *g);
/* Under g->lock.  Up to max moves of pp's slots: to host memory, as many
 * as g->moves.spill_want asks for and spares allow (host memory made for each),
 * or back to the GPU (a lendable chunk reserved and made ready for each,
 * as a grant to process proc of owner).  How many into e, or 0 (err says
 * why when spares ran out). */
int gs_gpu_move_plan(struct gs_gpu *g, struct gs_pproc *pp, enum gs_move_dir dir, struct gs_move_ent *e, uint32_t max,
                     struct gs_allocation *owner, uint64_t proc, char *err, size_t errlen);
/* Under g->lock: gs_gpu_move_plan to host memory while the nbusy moves
 * of busy (the process's last batch, all moved) are not settled yet: the
 * next batch, planned before the last is settled so that the process
 * moves it meanwhile (GS_MOVE_CHAIN), their slots passed over. */
int gs_gpu_move_plan_next(struct gs_gpu *g, struct gs_pproc *pp, const struct gs_move_ent *busy, uint32_t nbusy,
                          struct gs_move_ent *e, uint32_t max, uint64_t proc, char *err, size_t errlen);
/* Under g->lock: the first moved of the n planned moves were done (the
 * records exchange: a spilled chunk goes to whom it is owed, made anew),
 * the others are undone (moved past n counts as n: it is the process's
 * word).  owner, proc: the process's allocation and id;
 * proc 0: the process is gone.  A spare whose fd a live process got and
 * did not map stays held by proc (struct gs_spare's holder). */
void gs_gpu_move_end(struct gs_gpu *g, enum gs_move_dir dir, const struct gs_move_ent *e, uint32_t n, uint32_t moved,
                     struct gs_allocation *owner, uint64_t proc);
/* Under g->lock, after gs_gpu_move_end: the batch's time by phase
 * (ns[GS_PHASE_N]; moved of n chunks).  A move to host memory adds to the
 * totals (st.spill_ns) and to the take-back's; once nothing is wanted
 * back nor moving out, the take-back is logged in one line and begins
 * anew. */
void gs_gpu_move_timed(struct gs_gpu *g, enum gs_move_dir dir, const uint64_t ns[GS_PHASE_N], uint32_t moved);
/* Host memory made ahead past what is owed, while anything is (spares). */
#define GS_PREP_MARGIN (2u * GS_MOVE_MAX)
/* Under g->lock: chunks whose data sits in host memory now. */
uint32_t gs_gpu_spilled(struct gs_gpu *g);
/* Under g->lock: spares whose host memory is made (ready, or in a move). */
uint32_t gs_gpu_spill_ready(const struct gs_gpu *g);
/* Under g->lock: the mover of process proc (pp its chunks on g) asks for
 * host memory ahead of its moves (GS_OP_SPILL_PREP).  While it borrows
 * chunks with device memory and something is owed on g: up to max spares
 * whose host memory is made and that nobody uses (never more than its
 * borrowed chunks, nor GS_PREP_MAX prepared and held by it in all) are
 * prepared for it: their ids (spare indices) and fds (copies: the caller
 * sends and closes them) in ids, fds; how many.  When
 * it borrows nothing any more (device or host memory), what it has
 * prepared is not needed: *ret_release, and those spares are held by
 * it until it exits (it may keep the memory). */
uint32_t gs_gpu_spill_prep_plan(struct gs_gpu *g, struct gs_pproc *pp, uint64_t proc, uint32_t *ids, int *fds,
                                uint32_t max, bool *ret_release);
/* Under g->lock: whether proc's mover has preparing to do: what
 * gs_gpu_spill_prep_plan would give it, or release. */
bool gs_gpu_spill_prep_due(struct gs_gpu *g, struct gs_pproc *pp, uint64_t proc);
/* Under g->lock: spares prepared in processes (prep). */
uint32_t gs_gpu_spill_prepared(const struct gs_gpu *g);
/* Under g->lock: spares held by processes that kept their fd (holder). */
uint32_t gs_gpu_spill_held(const struct gs_gpu *g);
/* Under g->lock: process proc is gone: the spares it held are free again
 * (their host memory went with it), those prepared in it ready again.
 * How many were held. */
uint32_t gs_gpu_spill_release_holder(struct gs_gpu *g, uint64_t proc);
/* Under g->lock: the spares proc held are held by to (the same process's
 * new record: it reconnected, gs_proc_take_over_closed), and so are
 * those prepared in it (its mover lets them go on a new connection, but
 * may keep them).  How many were held. */
uint32_t gs_gpu_spill_pass_holder(struct gs_gpu *g, uint64_t proc, uint64_t to);
/* Under g->lock, restoring after a restart: a spare held by process proc
 * (tag, slot: the spill record's entry, GS_LEDGER_HELD) as before it.
 * -ENOSPC if no spare record is free. */
int gs_gpu_spill_hold_adopted(struct gs_gpu *g, uint64_t proc, const struct gs_ledger_tag *t, uint32_t slot);
/* Under g->lock: a spare's pool record that is free and held by nobody
 * (gs_pool_spare_free less the held ones), or UINT32_MAX. */
uint32_t gs_gpu_spare_record_free(struct gs_gpu *g);
/* The scrubber's: host memory is kept made ahead for as many chunks as
 * are owed (not in moves), so that a reclaim does not wait for the
 * pinning; one spare's made or dropped per round, in three steps so that
 * the lock is let go by its holder, not behind its back:
 *   gs_gpu_spill_prepare_pick  under g->lock: whether there is one (j
 *                              says which, its spare marked busy);
 *   gs_gpu_spill_prepare_work  without the lock: made or dropped;
 *   gs_gpu_spill_prepare_end   under g->lock again: not busy; whether it
 *                              was done (a failure is logged). */
struct gs_spill_job {
        uint32_t spare;
        bool drop;
        int r;
        char err[256];
};
bool gs_gpu_spill_prepare_pick(struct gs_gpu *g, struct gs_spill_job *j);
void gs_gpu_spill_prepare_work(struct gs_gpu *g, struct gs_spill_job *j);
bool gs_gpu_spill_prepare_end(struct gs_gpu *g, const struct gs_spill_job *j);
/* Under g->lock: what is owed or wanted changed (the scrubber looks). */
void gs_gpu_spill_kick(struct gs_gpu *g);

#endif
