/* gs_agent.h — the node agent: the state its modules share (the
 * configuration, the driver table, the GPUs, the allocations, the loop)
 * and the few services of the main loop they call (gs_agent.c).  The
 * domain types live with their modules: struct gs_gpu in gs_gpu.h, struct
 * gs_allocation in gs_allocs.h, struct gs_proc in gs_proc.h.  docs/design.md
 * draws the modules and which thread owns what.
 *
 * Threads: the main thread runs the loop (gs_loop.h), owns every structure
 * here and is the only one that creates or destroys allocations and
 * processes.  A bounded pool of worker threads (gs_workers.h) serves the
 * processes' rings; a worker touches the gs_proc it serves, and the pools
 * under the GPU's mutex (the allocator is not thread-safe).  A worker tells
 * the main thread about a protocol violation by shutting its socket down
 * (the loop sees the hang-up), about a lending change with gs_agent_poke,
 * asks for a usage scan with gs_agent_want_scan and for the short-of-memory
 * kick with gs_short_request (async sources of the loop); it waits for the
 * main loop on done_cv (gs_agent_await), never in naps. */
#ifndef GS_AGENT_H
#define GS_AGENT_H

#include <limits.h>
#include <stddef.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "gs_loop.h"
#include "gs_node.h"
#include "gs_short.h"
#include "gs_util.h"

struct gs_agent;
struct gs_allocation;
struct gs_ctlsrv;
struct gs_metrics;
struct gs_events;

struct gs_agent {
        /* What the domain shares (gs_node.h): configuration, driver,
         * GPUs, allocations, the loop; its callbacks are wired here. */
        struct gs_node node;
        uint64_t generation; /* ListGpusReply.generation */
        uint64_t next_proc_id;
        /* gs_agent_changed: posted, once per batch; main wires what runs. */
        struct gs_loop_post changed_post;
        void (*on_changed)(struct gs_agent *ag);
        struct gs_loop_async changed_async; /* gs_agent_poke */
        struct gs_loop_async scan_async;    /* gs_agent_want_scan */
        /* A request short of memory (gs_short.h): the kick, its count. */
        struct gs_short shortmem;
        /* Workers wait for a kick or scan on done_cv (gs_agent_count). */
        pthread_mutex_t done_mu;
        pthread_cond_t done_cv;
        bool wired;                       /* gs_agent_wire ran: done_mu/cv made */
        struct gs_loop_timer hello_timer; /* gs_proc_tick */
        struct gs_loop_timer usage_timer; /* gs_usage_tick */
        struct gs_loop_timer share_timer; /* gs_proc_share_tick */
        struct gs_ctlsrv *ctl;
        struct gs_metrics *metrics; /* gs_metrics.h; NULL: metricsAddress empty */
        struct gs_events *events;   /* gs_event.h; NULL: no API server */
        unsigned usage_scans;       /* atomic: scans done (gs_agent_wait_scan) */
        struct gs_workers *workers; /* gs_workers.h: serve the processes' rings */
        uint32_t nconns;            /* processes' connections, all allocations */
        /* Upgrades (gs_handover.h): the listening handover socket, and
         * whether this agent handed everything over (its sockets' paths
         * are the new agent's then: none is removed at exit). */
        int handover_fd;
        struct gs_loop_io handover_io;
        bool handover_retake;    /* a failed takeover: listen on our handover socket anew */
        int64_t settle_until_ms; /* atomic: after taking over, the old agent lets memory go */
        int64_t start_unix;      /* when this agent started (time(2)); /metrics */
        /* Main thread: an Event about allocation a for its pod or claim
         * (main wires the services' gs_usage_event; NULL: none). */
        void (*on_event)(struct gs_agent *ag, const struct gs_allocation *a, int warning, const char *reason,
                         const char *msg);
};

static inline void gs_agent_event(struct gs_agent *ag, const struct gs_allocation *a, int warning, const char *reason,
                                  const char *msg)
{
        if (ag->on_event)
                ag->on_event(ag, a, warning, reason, msg);
}

/* The agent whose node n is (the sessions' side of a domain callback). */
static inline struct gs_agent *gs_agent_of(struct gs_node *n)
{
        return (struct gs_agent *)((char *)n - offsetof(struct gs_agent, node));
}

/* Wires the agent's own loop sources (pokes, scan requests) on ag->node.loop;
 * main adds the timers.  on_changed runs once after
 * each batch in which gs_agent_changed was called. */
void gs_agent_wire(struct gs_agent *ag, void (*on_changed)(struct gs_agent *ag));
/* Undoes gs_agent_wire's own state, after every thread is joined. */
void gs_agent_unwire(struct gs_agent *ag);
/* Main thread: counts a short-of-memory kick or usage scan done (count is
 * &ag->shortmem.kicks or &ag->usage_scans) and wakes the workers that wait
 * for it (gs_agent_await). */
void gs_agent_count(struct gs_agent *ag, unsigned *count);
/* A thread holding no GPU lock: waits until the main loop's counter *count
 * (read as before when it asked) is n past before, at most ms, blocked on
 * done_cv: whether it got there. */
bool gs_agent_await(struct gs_agent *ag, const unsigned *count, unsigned before, unsigned n, int ms);
/* Something that Watch clients see changed: bumps the generation; the
 * GPU list goes to them once, after the current batch.  Main thread only. */
void gs_agent_changed(struct gs_agent *ag);
/* Worker threads: a lending change happened; the main thread will call
 * gs_agent_changed. */
void gs_agent_poke(struct gs_agent *ag);
/* Any thread: the main thread should scan memory outside the pool now
 * (gs_usage.h): a process registered or left, or the driver had no room. */
void gs_agent_want_scan(struct gs_agent *ag);
/* A worker thread holding no GPU lock: asks for a scan and waits until one
 * has run, at most ms (the scan charges growth to its pods, which gives the
 * headroom back unless memory is really held past a quota). */
void gs_agent_wait_scan(struct gs_agent *ag, int ms);

#endif
