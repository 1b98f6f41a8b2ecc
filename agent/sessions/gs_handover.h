/* gs_handover.h — an upgrade without a gap: the running agent hands its
 * pool and its processes to a new one (issue 18; docs/agent.md
 * "Upgrades").
 *
 * The new agent starts beside the old one (the DaemonSet's maxSurge) and
 * finds it listening on <stateDir>/handover.sock (0600, root's):
 *
 *   new -> old  PREPARE   the bytes of memory a context needs
 *   old         drops the memory of that many free chunks (the pool keeps
 *               them, without memory) so the new agent's context fits,
 *               and serves on
 *   old -> new  ROOM
 *   new         creates its contexts, then
 *   new -> old  TAKE
 *   old         stops serving (processes stay connected, their requests
 *               wait), stops writing its ledger, and sends per GPU its
 *               pool's size and the fd of every chunk with memory
 *               (SCM_RIGHTS), whether a process may have written it
 *   old -> new  GPU, CHUNKS..., SENT
 *   new         builds its pools from those fds (the very memory the
 *               processes map: a chunk's memory is never re-created while
 *               it lives), restores the allocations (binding their
 *               sockets anew at the same paths) and the processes from
 *               the old ledger, binds the control socket and its own
 *               handover socket
 *   new -> old  READY
 *   old         closes every process's connection and its sockets
 *               (removing no path: they are the new agent's now), lets its
 *               memory go, and waits for its end (SIGTERM)
 *
 * The processes' hooks see their connection close, connect again at once
 * and reclaim what they hold (gs_wire.h "Reclaim"); a request that was
 * waiting is sent again.  If the new agent fails before READY the old one
 * serves on as before.  An agent killed at any point leaves a ledger that
 * says what every process holds: the next agent starts as after a crash. */
#ifndef GS_HANDOVER_H
#define GS_HANDOVER_H

#include "gs_agent.h"
#include "gs_gpu.h"

#define GS_HANDOVER_SOCKET "handover.sock"
/* A step of the exchange taking longer than this fails it. */
#define GS_HANDOVER_STEP_MS 30000

struct gs_handover;

/* The old agent's side: listens on <stateDir>/handover.sock.  0 or a
 * negative errno with err set (the agent runs on; no upgrade can take
 * over from it without a gap then). */
int gs_handover_listen(struct gs_agent *ag, char *err, size_t errlen) GS_WUR;
/* Stops listening (the path stays when the agent was handed over). */
void gs_handover_close(struct gs_agent *ag);

/* The new agent's side.  Connects to an old agent if one listens and asks
 * for room for a context: 1 with *ret (an old agent is handing over), 0
 * if none listens (a first start, or the old one died: a restart), or a
 * negative errno with err set. */
int gs_handover_begin(struct gs_agent *ag, struct gs_handover **ret, char *err, size_t errlen) GS_WUR;
/* TAKE: the old agent's chunks.  *ret_inh gets one entry per GPU of
 * ag->node.gpus (nchunks 0: the old agent had none for it). */
int gs_handover_take(struct gs_handover *h, struct gs_agent *ag, struct gs_gpu_inherit **ret_inh, char *err,
                     size_t errlen) GS_WUR;
/* READY, and the connection goes.  NULL is fine (nothing to do). */
void gs_handover_finish(struct gs_handover *h);
/* This agent cannot take over: the connection goes without READY and the
 * old agent serves on.  NULL is fine. */
void gs_handover_abort(struct gs_handover *h);
/* No handover socket answers: whether an agent (of an earlier release,
 * without one) still serves the control socket. */
bool gs_handover_older_agent(const struct gs_agent *ag);
/* Frees what gs_handover_take returned (fds not taken are closed). */
void gs_handover_inherit_free(struct gs_gpu_inherit *inh, uint32_t n);

#endif
