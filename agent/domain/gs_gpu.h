/* gs_gpu.h — one GPU of the node: its primary context, identity, and the
 * pool of GSM chunks the agent carves from its free memory.
 *
 * At open, (free - reserve) / chunk_bytes chunks are created with
 * cuMemCreate (POSIX file-descriptor handle type) and each is exported once;
 * the fd is kept and sent to every process granted the chunk.  From then on
 * a process that bypasses the hook finds only the reserve free.
 *
 * Recycling: when a chunk that was granted goes back to the system free
 * list, its memory is released and a fresh chunk created and exported in its
 * place, since the process it was granted to may have kept the old fd; the
 * fresh memory cannot be reached through it.  If that fails the chunk is
 * retired (the pool shrinks by one chunk).
 *
 * "Under g->lock" below: the caller took it with gs_gpu_lock
 * (gs_gpu_lock.h), which also made g->ctx current on its thread; each
 * such function asserts it (gs_gpu_assert_locked).  "Takes g->lock": the
 * function takes it itself, the caller must not hold it. */
#ifndef GS_GPU_H
#define GS_GPU_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "gs_node.h"
#include "gs_cuda.h"
#include "gs_devid.h"
#include "gs_gpu_lock.h"
#include "gs_gpu_phase.h"
#include "gs_ledger.h"
#include "gs_pool.h"
#include "gs_wire.h"

struct gs_allocation;
struct gs_gsm;
/* No move back to a GPU until moveBackQuiet (config, default 10 s) after
 * an owner last asked for lent memory there: what it frees a moment later
 * it may want again (a caching allocator's churn), and moves both ways
 * cost the borrower. */

/* Chunks without memory made per usage scan at most (gs_gpu_retry_pending). */
#define GS_GPU_REMAKE_PER_SCAN 4u

/* What a chunk record's memory is, and what must happen to it before it
 * is granted.  Whether it has memory at all is its fd (>= 0); the states
 * are exclusive and each says which:
 *
 *   GS_CHUNK_OURS       made by this agent (fd >= 0), or without memory
 *                       for no process's sake (fd -1: a restart's start,
 *                       a handover, dropped for room): made when needed,
 *                       or filled with a free chunk's (gs_gpu_chunk_fill).
 *   GS_CHUNK_INHERITED  fd >= 0: made by an earlier agent and handed over
 *                       (gs_handover.h); fd is that agent's export,
 *                       handle 0 until the agent needs one.
 *   GS_CHUNK_RECYCLE    fd >= 0: inherited, and a process may still reach
 *                       it through a kept fd: its memory is dropped and
 *                       made anew before anyone gets it.
 *   GS_CHUNK_KEPT       fd -1: taken by a set of its allocation (gs_vmm,
 *                       gs_outside: its memory dropped for a process's
 *                       VMM allocations or contexts), or given back by one
 *                       without memory because the driver had no room: a
 *                       process of the allocation may still hold what
 *                       stands for it.  Never takes another chunk's
 *                       (gs_gpu_chunk_fill): it is made anew or not at all.
 *   GS_CHUNK_PENDING    fd -1: retired from the pool until its memory can
 *                       be re-created (counted in chunks_pending): a
 *                       process may still hold the old memory.  Like KEPT,
 *                       never filled; it may have been KEPT before.
 *
 * Transitions (all under the GPU's lock): dropped (gs_chunk_drop),
 * INHERITED and RECYCLE become OURS; made (gs_chunk_make), KEPT becomes
 * OURS; INHERITED becomes RECYCLE when the processes are restored
 * (gs_gpu_inherit_settle); OURS becomes KEPT when a set takes it or gives
 * it back without memory (gs_chunkset); OURS or KEPT become PENDING when
 * recycling finds no room (gs_gpu_chunk_recycle) or a restart holds
 * chunks back (gs_proc_restore), PENDING becomes OURS once re-created and
 * back in the pool (gs_gpu_retry_pending).  The records trade memory
 * (gs_gpu_chunk_swap, _fill): the state goes with it.
 *
 * One flag stays apart, because it is not what the memory is but a job
 * running on it: scrubbing (the scrubber's batch in flight may still
 * write it), on a chunk with memory in state OURS or INHERITED. */
enum gs_chunk_state {
        GS_CHUNK_OURS = 0,
        GS_CHUNK_INHERITED,
        GS_CHUNK_RECYCLE,
        GS_CHUNK_KEPT,
        GS_CHUNK_PENDING,
};

struct gs_chunk {
        CUmemGenericAllocationHandle handle;
        int fd;          /* exported once; -1 without memory */
        enum gs_chunk_state state;
        /* Its fd went to a process of this allocation (NULL: to none, or
         * the allocation is gone).  Main thread writes it at grant time
         * under the GPU's lock. */
        struct gs_allocation *owner;
        /* Names this memory (not the chunk id: records trade memory);
         * 0 without memory.  An upgrade sends each fd once (gs_handover.h). */
        uint64_t memid;
        /* Under the GPU's lock: the id of the last process granted this
         * memory (it may have written it), 0 if none since it was made or
         * scrubbed.  Another process gets it only scrubbed (gs_gpu.h). */
        uint64_t writer;
        /* The agent's own mapping of this memory, for scrubbing: made
         * with it (or on first need, inherited), gone with it; 0: none. */
        CUdeviceptr va;
        /* Under the lock: in the scrubber's batch in flight (its memset
         * may still run): granted to nobody, dropped by nobody, until the
         * batch is done (gs_gpu_scrubber.c gs_gpu_batch_wait). */
        bool scrubbing;
};

/* A spare record's host memory while a move to it runs (gs_gpu_spill.c). */
struct gs_spare {
        CUmemGenericAllocationHandle h;
        int fd;          /* -1: none */
        bool busy;       /* in a move now */
        /* The id of a live process that was sent this host memory's fd
         * and did not map it (a move it said it did not do): it may keep
         * the memory, so the record stays charged (spillMax) and unused
         * until that process is gone (gs_gpu_spill_release_holder); 0:
         * none.  The agent itself keeps no handle of it then. */
        uint64_t holder;
};

/* One slot's move: the record at the slot (from) gives way to to, whose
 * memory (fd) the process maps there once it copied the data over. */
struct gs_move_ent {
        uint32_t slot, from, to;
        int fd;
};

/* Moves since the GPU was opened (gs_gpu_move_*). */
struct gs_gpu_move_stats {
        uint64_t chunks_out;   /* moved to host memory */
        uint64_t chunks_back;  /* moved back to the GPU */
        uint64_t refused;      /* spills that found no host memory (spillMax) */
        uint64_t moves;        /* batches, both ways */
        uint64_t move_ns;      /* their time in all, as the agent saw it */
        uint64_t reclaim_asks; /* owners' requests that made the agent ask for moves */
};

/* The scrubber's batch in flight: a chunk's memory by its mapping (the
 * records may trade memory meanwhile, gs_gpu_chunk_swap). */
struct gs_gpu_scrub_ent {
        CUdeviceptr va;
        uint32_t chunk; /* where it was when queued */
};

/* What scrubbing did since the GPU was opened (gs_gpu_scrub_stats).  The
 * grants_* figures count chunks sent to processes, by what their
 * memory needed first. */
struct gs_gpu_scrub_stats {
        uint64_t grants;
        uint64_t grants_clean;         /* nothing: zeroed before, or fresh */
        uint64_t grants_same;          /* nothing: back to its last writer */
        uint64_t grants_scrubbed_sync; /* zeroed on the request path */
        uint64_t grants_waited;        /* waited for the scrubber's batch */
        uint64_t scrubbed_bg;          /* chunks the scrubber zeroed */
        uint64_t batches_bg;           /* its batches: one wait, one GPU switch each */
        uint64_t failures;             /* scrubs that failed (logged) */
};

/* Each allocation keeps this many free chunks zeroed ahead of a hand-off
 * from one of its processes to another (gs_gsm_scrub_next). */
#define GS_GPU_SCRUB_AHEAD 8u
/* At most this many chunks per batch of the scrubber. */
#define GS_GPU_SCRUB_BATCH 16u
/* Woken, the scrubber lets a burst of releases gather this long: one
 * batch for them, one switch of the GPU to the agent's context. */
#define GS_GPU_SCRUB_GATHER_US 1000
/* After a failed scrub it tries again this much later. */
#define GS_GPU_SCRUB_RETRY_MS 1000

struct gs_gpu {
        struct gs_node *node;
        uint32_t index;          /* CUDA ordinal */
        CUdevice dev;
        CUcontext ctx;           /* primary context, retained */
        uint8_t uuid_raw[16];
        char uuid[GS_UUID_STR_LEN + 1];
        char name[256];
        char pci_bus_id[32];
        int numa_node;
        uint64_t total_bytes;
        uint64_t reserve_bytes;
        uint64_t chunk_bytes;
        uint64_t unit_bytes;
        uint32_t nchunks;        /* chunks created at start */
        uint32_t units_total;
        uint32_t chunks_retired;
        uint32_t chunks_pending; /* retired for now: re-created when the driver has room */
        uint64_t ctx_promised;   /* under lock: charged for contexts not created yet */
        struct gs_chunk *chunks;
        struct gs_pool *pool;
        /* Serializes every call on pool and every access to chunks[]:
         * taken only through gs_gpu_lock (gs_gpu_lock.h). */
        struct gs_gpu_lock lock;
        bool healthy;
        char health_reason[160];
        /* units_total entries: the allocation holding each unit, or NULL.
         * Main thread only. */
        struct gs_allocation **unit_owner;
        uint32_t last_borrowed;  /* under lock: for lending-change events */
        /* Outside memory (gs_outside.h), under lock: what the outside sets
         * released to the driver, and what the last scan measured the
         * charged processes using outside the pool. */
        uint64_t outside_held;
        uint64_t outside_measured;
        /* A context's expected size, charged when a process is about to
         * create one (config contextSize, else measured at start). */
        uint64_t ctx_expect_bytes;
        void *nvml_dev;          /* NVML's device, NULL until found */
        /* Who holds which chunk, for a restarted agent (gs_ledger.h);
         * written under lock.  held_before: the previous agent's entries
         * (nheld_before, one per chunk), until the processes are restored. */
        struct gs_ledger ledger;
        struct gs_ledger_ent *held_before;
        uint32_t nheld_before;
        uint32_t chunks_made_at_start; /* with memory; the rest stood for memory held */
        bool ctx_ready;          /* gs_gpu_open_ctx done: a pool may be built */
        /* An upgrade's handover (gs_gpu_phase.h), under lock: read
         * through gs_gpu_makes_memory, gs_gpu_scrubs. */
        enum gs_gpu_phase phase;
        uint64_t memid_next;     /* under lock: the last memid given */
        uint64_t ho_snap_memid;  /* an upgrade: memids up to this went at PREPARE */
        /* Scrubbing (gs_gpu_scrub below).  Made with the context; without
         * them (stream NULL) every scrub is synchronous on the request
         * path and there is no scrubber. */
        CUstream scrub_stream;   /* lowest priority, non-blocking */
        CUevent scrub_ev;        /* the scrubber's batch */
        CUevent sync_ev;         /* a scrub under the lock */
        struct gs_gsm *gsm;      /* the pool's chunk level, NULL if unknown */
        /* The scrubber thread; the rest under lock. */
        pthread_t scrub_thr;
        bool scrub_started;
        bool scrub_stop;
        bool scrub_kicked;       /* there may be work: scrub_cond signalled */
        pthread_cond_t scrub_cond;
        int64_t scrub_retry_ms;  /* after a failure: not before (gs_mono_ms) */
        uint32_t nbatch;         /* chunks in the batch in flight */
        uint32_t scrub_batch_failures;
        struct gs_gpu_scrub_ent batch[GS_GPU_SCRUB_BATCH];
        struct gs_gpu_scrub_stats scrub_st;
        /* Moves (gs_gpu_spill.c), under lock: the pool's records
         * [nchunks, nchunks + nspare) are spares (gs_pool.h "Moves");
         * spill_want: chunks owners asked for that are lent; moving_out:
         * of those, in moves now. */
        uint32_t nspare;
        struct gs_spare *spares;
        uint32_t spill_want;
        uint32_t moving_out;
        int64_t spill_want_ms;   /* since when spill_want waits for progress (0: none) */
        int64_t last_want_ms;    /* the last owner's request for lent memory */
        int64_t move_back_quiet_ms; /* config moveBackQuiet */
        struct gs_gpu_move_stats move_st;
        /* Spilled slots, moves in flight and debts, for a restarted agent
         * (gs_gpu_spillrec.c; docs/burst.md "Agent restarts"): one entry
         * per spare, then ndebt for the allocations owed chunks.  Under
         * lock; spillrec_on while this agent writes it (not paused).
         * spilled_before: the previous agent's entries until restored. */
        struct gs_ledger spillrec;
        bool spillrec_on;
        uint32_t ndebt;
        struct gs_ledger_ent *spilled_before;
        uint32_t nspilled_before;
};

/* What an earlier agent hands over of one GPU's pool (gs_handover.h):
 * per chunk id its exported fd (-1: no memory) and whether a process may
 * have written it (its writer). */
/* Whether c's memory is an earlier agent's (INHERITED or RECYCLE). */
static inline bool gs_chunk_inherited(const struct gs_chunk *c)
{
        return c->state == GS_CHUNK_INHERITED || c->state == GS_CHUNK_RECYCLE;
}

struct gs_gpu_inherit {
        uint32_t nchunks;
        int *fd;
        uint8_t *written;
        uint64_t *memid;       /* the old agent's: kept, for its next upgrade */
};


/* Opens CUDA device `ordinal` into *g (zeroed by the caller, g->node set).
 * A GPU whose pool cannot be built is still opened, unhealthy, with the
 * reason in g->health_reason and no units.  Returns a negative errno with a
 * message in err only if the device cannot be used at all. */
int gs_gpu_open(struct gs_gpu *g, int ordinal, const struct gs_config *cfg, char *err,
                size_t errlen) GS_WUR;
/* gs_gpu_open in two steps, for an upgrade (gs_handover.h): the context
 * first, while the previous agent still serves; the pool once it handed
 * its chunks over (inh; NULL: made from the driver's free memory as
 * gs_gpu_open does).  The fds of inh are the GPU's from then on. */
int gs_gpu_open_ctx(struct gs_gpu *g, int ordinal, const struct gs_config *cfg, char *err,
                    size_t errlen) GS_WUR;
int gs_gpu_open_pool(struct gs_gpu *g, const struct gs_config *cfg, const struct gs_gpu_inherit *inh,
                     char *err, size_t errlen) GS_WUR;
/* Stops the scrubber, frees the pool, releases every chunk, releases the
 * context.  A zeroed or half-opened g is fine. */
void gs_gpu_close(struct gs_gpu *g);

/* Device memory of `size` bytes (a multiple of the granularity) on g, with
 * the chunks' properties; exported as a POSIX fd (close-on-exec) into
 * *ret_fd if export_fd, else *ret_fd = -1.  The caller holds g->lock and has
 * made g->ctx current.  0 or a negative errno with the reason in err. */
int gs_gpu_mem_make(struct gs_gpu *g, uint64_t size, bool export_fd,
                    CUmemGenericAllocationHandle *ret_h, int *ret_fd, char *err, size_t errlen) GS_WUR;
/* Closes *fd (if >= 0) and releases h. */
void gs_gpu_mem_drop(struct gs_gpu *g, CUmemGenericAllocationHandle h, int *fd);
/* A chunk without memory takes the memory of a chunk on the system free
 * list (which then has none, made again once the driver has room).  Only
 * for a chunk whose memory is known to be free in the driver and was made
 * into the pool's other chunks (a restart: the old agent's VMM fillers,
 * never exported), or chunks that went without memory for no process's
 * sake (a restart's start, a handover): never for one marked kept, whose
 * process may still hold its memory (taking another's would let it past
 * its quota).  Whether chunk has memory now.  Under g->lock. */
bool gs_gpu_chunk_fill(struct gs_gpu *g, uint32_t chunk);
/* Releases a pool chunk's memory (its fd becomes -1); the chunk stays in the
 * pool's books.  gs_gpu_chunk_remake creates and exports it again (no-op if
 * it has memory).  Both under g->lock with g->ctx current. */
void gs_gpu_chunk_drop(struct gs_gpu *g, uint32_t chunk);
int gs_gpu_chunk_remake(struct gs_gpu *g, uint32_t chunk, char *err, size_t errlen) GS_WUR;

/* 0 if the driver can give bytes more without its free memory falling
 * below the reserve plus what is promised to contexts being created
 * (released for them, gs_outside.h, and not created yet); else -ENOSPC (or
 * -EIO) with the figures in err.  Under g->lock with g->ctx current. */
int gs_gpu_room(struct gs_gpu *g, uint64_t bytes, char *err, size_t errlen) GS_WUR;
/* How many bytes gs_gpu_room allows now (0 if it cannot tell).  Under
 * g->lock with g->ctx current. */
uint64_t gs_gpu_room_left(struct gs_gpu *g);
/* Re-creates pending chunks (recycled while their old memory was still
 * held) where the driver has room now, and puts them back in the pool.
 * Under g->lock. */
void gs_gpu_retry_pending(struct gs_gpu *g);
/* a is going: its chunks owe it nothing.  Under g->lock. */
void gs_gpu_forget_owner(struct gs_gpu *g, const struct gs_allocation *a);
/* Scrubbing.  Natively the driver scrubs memory between processes; here
 * all GPU memory belongs to one process, the agent, so the agent scrubs:
 * memory granted to a process holds no other process's data.
 *
 * Every exported allocation is zeroed when gs_gpu_mem_make creates it (the
 * driver may hand the agent back memory a process of another allocation
 * used).  A chunk's memory is granted to a process other than its last
 * writer only zeroed, and only once that zeroing completed.  Most of that
 * is off the request path: the agent keeps each chunk mapped in its own
 * address space for the memory's life, and a scrubber thread per GPU
 * zeroes chunks that processes gave back to their allocation's free list,
 * in batches (one memset each on a lowest-priority stream, one wait for
 * the lot), a few ahead of need (GS_GPU_SCRUB_AHEAD, gs_gsm_scrub_next);
 * the free list hands a process its own chunks back first, then zeroed
 * ones (gs_gsm.h).  A grant that still finds a chunk another process
 * wrote zeroes it there and then (grants_scrubbed_sync); one that finds
 * it in the batch in flight waits for the batch.
 *
 * gs_gpu_scrub zeroes size bytes of allocation h through a mapping of its
 * own (reserve, map, access, cuMemsetD32, wait, unmap, free): no mapping
 * outlives the call (for memory that is not a chunk).  Under g->lock; it
 * makes g->ctx current.  0 or a negative errno with the reason in err. */
int gs_gpu_scrub(struct gs_gpu *g, CUmemGenericAllocationHandle h, uint64_t size, char *err,
                 size_t errlen) GS_WUR;
/* Before chunk is granted to process proc (its id, not 0): zeroed if
 * another process may have written it.  Under g->lock. */
int gs_gpu_chunk_grant(struct gs_gpu *g, uint32_t chunk, uint64_t proc, char *err,
                       size_t errlen) GS_WUR;
/* A copy of the scrubbing figures.  Takes g->lock. */
void gs_gpu_scrub_stats(struct gs_gpu *g, struct gs_gpu_scrub_stats *ret);

/* Units' worth of chunks lent by ballooning (rounded up: a partly lent unit
 * cannot be handed out).  Takes g->lock. */
uint32_t gs_gpu_units_lent(struct gs_gpu *g);
/* Units held by allocations.  Main thread only (unit_owner). */
uint32_t gs_gpu_units_allocated(const struct gs_gpu *g);

/* Reads /sys/bus/pci/devices/<bus id, lower case>/numa_node under sysfs
 * (normally "/sys"); -1 if absent or unreadable. */
int gs_gpu_numa_node(const char *sysfs, const char *pci_bus_id);

/* Under g->lock: the n chunks of gr just granted to process proc of
 * allocation owner, made ready to send: re-created if their memory was
 * given to the driver (-ENOMEM if the driver has no room for one: nothing
 * handed out, err says why), owned by owner, scrubbed if another process
 * may have written them (gs_gpu_chunk_grant).  Their fds in fds[0..n); -1
 * for one that could not be scrubbed (logged; it must not be sent). */
int gs_gpu_chunks_hand_out(struct gs_gpu *g, const struct gs_grant *gr, uint32_t n,
                           struct gs_allocation *owner, uint64_t proc, int *fds, char *err,
                           size_t errlen) GS_WUR;
/* ---- restarts (gs_ledger.h, docs/agent.md "Restarts") ----
 * gs_gpu_open reads the previous agent's ledger: the pool keeps its size
 * (units do not drop) and chunks whose memory the driver cannot give now
 * (processes still map it) start without memory.  Then: */
/* A new ledger for this agent under state_dir; chunk moves are recorded
 * from now on.  0 or a negative errno (the agent runs without one). */
int gs_gpu_ledger_start(struct gs_gpu *g, const char *state_dir) GS_WUR;
/* After the processes are restored on a handed-over pool: chunks a
 * process of the previous agent was granted and does not hold now (it may
 * have kept their fds) lose their memory, made anew when next needed, as
 * a recycled chunk is; the others (never granted) are kept.  The
 * scrubber, idle on a handed-over pool until then, starts its work. */
void gs_gpu_inherit_settle(struct gs_gpu *g);
/* The new ledger replaces the old one; held_before goes. */
void gs_gpu_ledger_commit(struct gs_gpu *g);
/* Shutdown: stops recording, so that tearing the processes down leaves
 * the file saying what they hold for the next agent.  Takes g->lock. */
void gs_gpu_ledger_stop(struct gs_gpu *g);
/* An upgrade (gs_handover.h): stops (pause) or resumes recording; on
 * resuming, the file is put back at its path if a new agent that failed
 * had replaced it.  The scrubber stops and resumes with it: once paused
 * (its batch in flight done), it touches no memory the new agent may
 * grant.  Takes g->lock. */
void gs_gpu_ledger_pause(struct gs_gpu *g, bool pause);
/* chunk was just placed for a process that already maps its memory (an
 * agent restart): it must have no memory of its own, so it trades its
 * memory with a chunk that has none and is held by nobody.  Under
 * g->lock.  0, or -ENOENT if no such chunk is left (it keeps its memory;
 * the process is charged twice for it until it lets go). */
int gs_gpu_chunk_orphan(struct gs_gpu *g, uint32_t chunk);
/* Chunks a and b trade their memory (records).  Under g->lock. */
void gs_gpu_chunk_swap(struct gs_gpu *g, uint32_t a, uint32_t b);
/* Chunks p holds whose memory the agent does not have: a process maps
 * them from before a restart (the driver counts such memory to the
 * process that maps it, so usage scans subtract them).  Under g->lock. */
uint32_t gs_gpu_orphans_of(struct gs_gpu *g, const struct gs_pproc *p);

/* ---- Spilled data across restarts (gs_gpu_spillrec.c) ----
 * The previous agent's record (g->spilled_before) says, per process slot,
 * whether its data was in host memory (GS_LEDGER_SLOT) or in a move
 * (GS_LEDGER_SPILLING, GS_LEDGER_UNSPILLING), and which allocations were
 * owed how many chunks (GS_LEDGER_OWED, alloc and count in slot).
 * gs_gpu_spillrec_done frees it once the processes are restored. */
void gs_gpu_spillrec_done(struct gs_gpu *g);
/* Under g->lock, before anything is adopted: each allocation owed chunks
 * before lends its own first again (gs_palloc_lent_before); tag_of gives
 * the allocation's part on g with that number, or NULL. */
void gs_gpu_spillrec_debts_restore(struct gs_gpu *g, struct gs_palloc *(*pa_of)(void *ctx, uint64_t alloc),
                                   void *ctx);

/* ---- Moves (gs_gpu_spill.c; docs/burst.md "Giving it back") ----
 * Before the pool is made: spillMax / chunk spare records (at most the
 * pool's size), 0 = no spill.  After it is closed: whatever host memory is
 * still made. */
int gs_gpu_spill_init(struct gs_gpu *g, uint64_t spill_max_bytes, char *err, size_t errlen) GS_WUR;
void gs_gpu_spill_fini(struct gs_gpu *g);
/* Under g->lock.  Up to max moves of pp's slots: to host memory, as many
 * as g->spill_want asks for and spares allow (host memory made for each),
 * or back to the GPU (a lendable chunk reserved and made ready for each,
 * as a grant to process proc of owner).  How many into e, or 0 (err says
 * why when spares ran out). */
int gs_gpu_move_plan(struct gs_gpu *g, struct gs_pproc *pp, enum gs_move_dir dir, struct gs_move_ent *e,
                     uint32_t max, struct gs_allocation *owner, uint64_t proc, char *err, size_t errlen);
/* Under g->lock: the first moved of the n planned moves were done (the
 * records exchange: a spilled chunk goes to whom it is owed, made anew),
 * the others are undone.  owner, proc: the process's allocation and id;
 * proc 0: the process is gone.  A spare whose fd a live process got and
 * did not map stays held by proc (struct gs_spare's holder). */
void gs_gpu_move_end(struct gs_gpu *g, enum gs_move_dir dir, const struct gs_move_ent *e, uint32_t n,
                     uint32_t moved, struct gs_allocation *owner, uint64_t proc);
/* Under g->lock: chunks whose data sits in host memory now. */
uint32_t gs_gpu_spilled(struct gs_gpu *g);
/* Under g->lock: spares whose host memory is made (ready, or in a move). */
uint32_t gs_gpu_spill_ready(const struct gs_gpu *g);
/* Under g->lock: spares held by processes that kept their fd (holder). */
uint32_t gs_gpu_spill_held(const struct gs_gpu *g);
/* Under g->lock: process proc is gone: the spares it held are free again
 * (their host memory went with it).  How many. */
uint32_t gs_gpu_spill_release_holder(struct gs_gpu *g, uint64_t proc);
/* Under g->lock: the spares proc held are held by to (the same process's
 * new record: it reconnected, gs_proc_take_over_closed).  How many. */
uint32_t gs_gpu_spill_pass_holder(struct gs_gpu *g, uint64_t proc, uint64_t to);
/* Under g->lock, restoring after a restart: a spare held by process proc
 * (tag, slot: the spill record's entry, GS_LEDGER_HELD) as before it.
 * -ENOSPC if no spare record is free. */
int gs_gpu_spill_hold_restored(struct gs_gpu *g, uint64_t proc, const struct gs_ledger_tag *t, uint32_t slot);
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

/* After any change to the pool under g->lock: if what is lent changed,
 * tells the main thread (gs_agent_poke). */
void gs_gpu_check_lending(struct gs_gpu *g);

#endif
