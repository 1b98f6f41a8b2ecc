/* gs_serve.h — the request server: what a worker thread (gs_workers.h)
 * does with a registered process's ring.  Each request is copied out of
 * the ring before it is looked at, every index and size in it is bounded,
 * and its reply is published on the reply ring (the hook woken through its
 * doorbell): ALLOC/FREE of pool blocks (grants sent on the socket first),
 * VMM create/release, context charges, CUDA IPC export/open, MEMINFO.
 * The GPU's pool is only touched under the GPU's lock.
 *
 * An empty ring is spun on for GS_SERVE_SPIN_NS while no other process
 * waits for a thread, then the process's doorbell is armed: a busy process
 * is answered in microseconds, without syscalls. */
#ifndef GS_SERVE_H
#define GS_SERVE_H

#include <stdbool.h>
#include <stdint.h>

#include "gs_proc.h"
#include "gs_workers.h"

#define GS_SERVE_SPIN_NS 50000u
/* Most slots one GS_OP_GIVE_BACK reply names. */
#define GS_GIVE_BACK_RUN 256u

/* The worker pool's turn (gs_workers_turn_fn) for a struct gs_proc. */
enum gs_turn gs_serve_turn(void *proc, uint32_t budget, const uint32_t *others_waiting);

/* Serves up to budget requests from p's ring (each reply published, the
 * hook woken), *ret_served of them.  0 when the ring is empty or the budget
 * spent; a negative errno when the connection must go (logged, the socket
 * shut down: the main loop sees the hang-up). */
int gs_serve_some(struct gs_proc *p, uint32_t budget, uint32_t *ret_served) GS_WUR;
/* Whether p's request ring holds a request. */
bool gs_serve_has_work(const struct gs_proc *p);
/* Serves one request (copied out of the ring) into *rep; sends the grants
 * of an ALLOC on the socket first.  Returns 0, or a negative errno when
 * the connection must be dropped. */
int gs_serve_one(struct gs_proc *p, const struct gs_ring_msg *req, struct gs_ring_msg *rep) GS_WUR;

#endif
