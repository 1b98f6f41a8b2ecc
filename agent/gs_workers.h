/* gs_workers.h — the bounded pool of threads that serve processes' request
 * rings (gs_proc.h says what serving a ring is).
 *
 * workerThreads threads serve every registered process; a process owns no
 * thread.  Each process has a doorbell, an eventfd the hook writes when it
 * publishes a request while the agent said it sleeps (gs_wire.h); every
 * idle doorbell is in one epoll set (EPOLLONESHOT), so an idle agent sleeps
 * in epoll_wait and a request wakes exactly one thread.
 *
 * Fairness is between allocations, not connections: a process with work
 * waits in its allocation's queue, and allocations with work take turns
 * (round robin).  A turn serves at most GS_WORKERS_BUDGET requests, then
 * the process goes to the back of its allocation's queue and the
 * allocation to the back of the line.  At most half the threads (rounded
 * up) serve one allocation at once, so an allocation whose processes stop
 * reading their sockets (a send may wait GS_PROC_SEND_MS) or flood requests
 * can hold no more than that; the others are served by the rest.  A thread
 * that finds its process's ring empty spins GS_PROC_SPIN_NS on it (while no
 * other work is queued) before putting it back to sleep: a busy process is
 * answered in microseconds, without syscalls.
 *
 * Threads: gs_workers_add/remove/free are the main thread's; everything
 * else runs on the pool's threads. */
#ifndef GS_WORKERS_H
#define GS_WORKERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gs_util.h"

#define GS_WORKERS_BUDGET 64u

struct gs_agent;
struct gs_workers;
struct gs_proc;
struct gs_wentry;

/* Per allocation (embedded in struct gs_allocation): its place in the line
 * and its queue of processes with work.  Zeroed by calloc; the pool's. */
struct gs_wgroup {
        struct gs_wgroup *next;
        struct gs_wentry *head, *tail;
        uint32_t busy;               /* threads serving it now */
        bool queued;
};

/* Per process (embedded in struct gs_proc); the pool's. */
struct gs_wentry {
        struct gs_wentry *next;      /* in its group's queue */
        struct gs_proc *p;
        struct gs_wgroup *grp;
        uint32_t slot, gen;          /* what its epoll event names */
        int state;                   /* see gs_workers.c */
        bool removing;
};

/* Starts nthreads threads able to serve up to max_procs processes at once.
 * 0 or a negative errno with the reason in err. */
int gs_workers_new(struct gs_agent *ag, uint32_t nthreads, uint32_t max_procs,
                   struct gs_workers **ret, char *err, size_t errlen) GS_WUR;
/* Stops and joins the threads; every process must have been removed.
 * NULL is fine. */
void gs_workers_free(struct gs_workers *w);
/* Starts serving p (its segment and doorbell ready, p->wake_fd).  -ENOSPC
 * when max_procs are served, or epoll's error. */
int gs_workers_add(struct gs_workers *w, struct gs_proc *p) GS_WUR;
/* Stops serving p: on return no thread touches p, nor will.  p->stop is set
 * (a thread in the middle of a send gives up at once).  Fine if never
 * added. */
void gs_workers_remove(struct gs_workers *w, struct gs_proc *p);

#endif
