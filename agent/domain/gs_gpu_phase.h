/* gs_gpu_phase.h — where an upgrade's handover (gs_handover.h) stands: per
 * GPU, one phase instead of the flags it was (frozen, scrub_paused), and
 * for the node, whose the sockets' and files' paths are (gs_node.h).
 *
 * A GPU's phase, under its lock, moved only by gs_gpu_phase_set:
 *
 *   SERVING      the agent serves: it writes its ledger and spill record,
 *                the scrubber works.  Every GPU starts here.
 *   INHERITED    a new agent's pool built from the chunks an old one
 *                handed over, its processes not adopted yet: until READY
 *                the old agent may take its chunks back, so the scrubber
 *                touches none.
 *   PAUSED       an old agent after TAKE: the new agent may grant any
 *                chunk; no ledger or spill-record writes (the pool's hold
 *                callback is off), no memset of ours runs.
 *   HANDED_OVER  an old agent after READY, stopping: its memory is the
 *                new agent's (the processes map it); it makes none.
 *
 * The moves, all in one place (gs_gpu_phase.c checks them):
 *
 *   SERVING   -> INHERITED    gs_gpu_open_pool with the old agent's chunks
 *   INHERITED -> SERVING      the processes adopted (gs_gpu_ledger_commit)
 *   SERVING   -> PAUSED       TAKE (gs_gpu_ledger_pause(g, true))
 *   PAUSED    -> SERVING      the new agent failed (gs_gpu_ledger_pause(g, false))
 *   PAUSED    -> HANDED_OVER  READY, at the stop (gs_gpu_hand_over)
 *   SERVING   -> HANDED_OVER  the same for a GPU without a pool (never paused)
 *
 * Read through the functions below, not the field. */
#ifndef GS_GPU_PHASE_H
#define GS_GPU_PHASE_H

#include <stdbool.h>

struct gs_gpu;

enum gs_gpu_phase {
        GS_GPU_SERVING = 0,
        GS_GPU_INHERITED,
        GS_GPU_PAUSED,
        GS_GPU_HANDED_OVER,
};

/* Under g->lock.  A move the table above lacks is a bug: logged, and it
 * aborts unless NDEBUG (as gs_gpu_assert_locked); else the phase is left
 * as it was. */
void gs_gpu_phase_set(struct gs_gpu *g, enum gs_gpu_phase to);
enum gs_gpu_phase gs_gpu_phase_get(const struct gs_gpu *g);
const char *gs_gpu_phase_name(enum gs_gpu_phase p);
/* Whether g may make memory (not HANDED_OVER). */
bool gs_gpu_makes_memory(const struct gs_gpu *g);
/* Whether the scrubber may touch g's memory (SERVING only). */
bool gs_gpu_scrubs(const struct gs_gpu *g);
/* The stop of an old agent that handed over: g goes HANDED_OVER.  Takes
 * g->lock. */
void gs_gpu_hand_over(struct gs_gpu *g);

#endif
