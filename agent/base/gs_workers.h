/* gs_workers.h — a bounded pool of threads that serve items with work:
 * the processes' request rings (gs_serve.h says what serving a ring is; the
 * pool knows nothing of it).
 *
 * workerThreads threads serve every item; an item owns no thread.  Each
 * item has a doorbell, an fd that becomes readable when it has work while
 * no thread serves it (the process's eventfd, gs_wire.h); every idle
 * doorbell is in one epoll set (EPOLLONESHOT), so an idle pool sleeps in
 * epoll_wait and a doorbell wakes exactly one thread.  A thread serves an
 * item with the turn function given at creation, at most GS_WORKERS_BUDGET
 * requests a turn.
 *
 * Fairness is between groups (allocations), not items: an item with work
 * waits in its group's queue, and groups with work take turns (round
 * robin).  After a turn the item goes to the back of its group's queue
 * and the group to the back of the line.  At most half the threads
 * (rounded up) serve one group at once, so a group whose items stall (a
 * process that stops reading its socket: a send may wait
 * GS_SOCKMSG_SEND_MS) or flood requests can hold no more than that; the
 * others are served by the rest.
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

struct gs_workers;
struct gs_wentry;

/* How a turn ended. */
enum gs_turn {
        GS_TURN_IDLE, /* no work left: the doorbell is armed again */
        GS_TURN_MORE, /* budget spent with work left: queued again */
        GS_TURN_DEAD, /* the item must go (its owner removes it) */
};
/* Serves item for one turn, at most budget requests; others_waiting
 * (atomic reads) counts items queued for a thread meanwhile. */
typedef enum gs_turn (*gs_workers_turn_fn)(void *item, uint32_t budget, const uint32_t *others_waiting);

/* Per allocation (embedded in struct gs_allocation): its place in the line
 * and its queue of processes with work.  Zeroed by calloc; the pool's. */
struct gs_wgroup {
        struct gs_wgroup *next;
        struct gs_wentry *head, *tail;
        uint32_t busy; /* threads serving it now */
        bool queued;
};

/* Per item (embedded in struct gs_proc); the pool's. */
struct gs_wentry {
        struct gs_wentry *next; /* in its group's queue */
        void *item;             /* NULL: not in the pool */
        int fd;                 /* the doorbell */
        int *stop;              /* set when it is removed */
        struct gs_wgroup *grp;
        uint32_t slot, gen; /* what its epoll event names */
        int state;          /* see gs_workers.c */
        bool removing;
};

/* Starts nthreads threads able to serve up to max_procs items at once with
 * turn.  0 or a negative errno with the reason in err. */
int gs_workers_new(gs_workers_turn_fn turn, uint32_t nthreads, uint32_t max_procs, struct gs_workers **ret, char *err,
                   size_t errlen) GS_WUR;
/* Stops and joins the threads; every process must have been removed.
 * NULL is fine. */
void gs_workers_free(struct gs_workers *w);
/* Starts serving item (through e, in group grp) when doorbell fd is
 * readable.  -ENOSPC when max_procs are served, or epoll's error. */
int gs_workers_add(struct gs_workers *w, struct gs_wentry *e, void *item, struct gs_wgroup *grp, int fd,
                   int *stop) GS_WUR;
/* Stops serving e's item: on return no thread touches it, nor will.  *stop
 * is set first (a turn in the middle of a send gives up at once).  Fine if
 * never added. */
void gs_workers_remove(struct gs_workers *w, struct gs_wentry *e);

#endif
