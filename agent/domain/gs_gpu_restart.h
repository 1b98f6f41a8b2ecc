/* gs_gpu_restart.h — what a GPU keeps for the agent after it (part of
 * struct gs_gpu, g->restart; gs_gpu_restart.c; docs/agent.md "Restarts"
 * and "Upgrades"): the ledger of who holds which chunk, the previous
 * agent's until its processes are restored, and the handover's phase
 * (gs_gpu_phase.h).  Every field under g->lock unless said otherwise. */
#ifndef GS_GPU_RESTART_H
#define GS_GPU_RESTART_H

#include <stdbool.h>
#include <stdint.h>

#include "gs_gpu_phase.h"
#include "gs_ledger.h"

struct gs_gpu;

/* What an earlier agent hands over of one GPU's pool (gs_handover.h):
 * per chunk id its exported fd (-1: no memory) and whether a process may
 * have written it (its writer). */
struct gs_gpu_inherit {
        uint32_t nchunks;
        int *fd;
        uint8_t *written;
        uint64_t *memid; /* the old agent's: kept, for its next upgrade */
};

/* The part.  ledger: this agent's, written under the lock by the pool's
 * hold callback; held_before: the previous agent's entries (nheld_before,
 * one per chunk), main thread, until the processes are restored. */
struct gs_gpu_restart {
        struct gs_ledger ledger;
        struct gs_ledger_ent *held_before;
        uint32_t nheld_before;
        uint64_t ho_snap_memid; /* an upgrade: memids up to this went at PREPARE */
        /* Under the lock: read through gs_gpu_phase_get, gs_gpu_makes_memory,
         * gs_gpu_scrubs; moved by gs_gpu_phase_set. */
        enum gs_gpu_phase phase;
};

/* gs_gpu_open reads the previous agent's ledger: the pool keeps its size
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

#endif
