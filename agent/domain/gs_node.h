/* gs_node.h — what the domain's modules share on one node: the
 * configuration, the driver and NVML tables, the GPUs, the allocations, the
 * main thread's loop; and the callbacks through which the domain tells the
 * layers above (agent/layers.txt: it never calls them).  The sessions'
 * struct gs_agent (gs_agent.h) holds one as its member `node` and sets the
 * callbacks; the domain's modules take a struct gs_node *.
 *
 * Threads: the main thread owns every field here and is the only one that
 * creates or destroys GPUs and allocations; worker threads read the
 * configuration and tables, and reach a GPU's pool under its lock
 * (gs_gpu.h). */
#ifndef GS_NODE_H
#define GS_NODE_H

#include <stdbool.h>
#include <stdint.h>

#include "gs_config.h"
#include "gs_cuda.h"
#include "gs_hist.h"
#include "gs_loop.h"
#include "gs_nvml.h"

struct gs_node;
struct gs_gpu;
struct gs_allocation;
struct gs_pending;

/* What the agent's work took, for /metrics (gs_hist.h, gs_metrics.h);
 * recorded by whichever thread does the work. */
#define GS_HIST_OPS 14 /* by request op (gs_wire.h GS_OP_*); 0: any other */
enum { GS_HIST_GRANT_ALLOC, GS_HIST_GRANT_VMM, GS_HIST_GRANTS };
enum { GS_HIST_RECON_LIST, GS_HIST_RECON_APPLY, GS_HIST_RECONS };
struct gs_agent_hists {
        struct gs_hist request[GS_HIST_OPS];        /* request served, ring to reply */
        struct gs_hist grant_bytes[GS_HIST_GRANTS]; /* a block or VMM allocation granted */
        struct gs_hist ctx_charge;                  /* charging a context (GS_OP_CTX) */
        struct gs_hist scrub;                       /* a scrubber batch, queued to done */
        struct gs_hist reconcile[GS_HIST_RECONS];   /* PodResources List; applying it */
};

/* Where an upgrade left this agent, for the whole node (each GPU has its
 * own phase, gs_gpu_phase.h); set once, by the main thread:
 *
 *   OURS             no handover: the sockets' and files' paths are ours.
 *   HANDED_OVER      an old agent after READY (gs_handover.h): its paths
 *                    are the new agent's now.
 *   TAKEOVER_FAILED  a new agent that failed before READY: the paths are
 *                    still the old agent's, which serves on.
 *
 *   OURS -> HANDED_OVER      READY (gs_handover.c)
 *   OURS -> TAKEOVER_FAILED  a takeover abandoned (gs_agent_main.c)
 *
 * Either of the last two: no path is removed or written. */
enum gs_node_handover {
        GS_NODE_OURS = 0,
        GS_NODE_HANDED_OVER,
        GS_NODE_TAKEOVER_FAILED,
};

struct gs_node {
        struct gs_config cfg;
        struct gs_cuda cu;
        struct gs_nvml nvml; /* fn NULL: no NVML */
        struct gs_gpu *gpus;
        uint32_t ngpus;
        struct gs_allocation *allocs;
        uint32_t nallocs;
        /* Checkpoint lines not restored yet (gs_pending.h). */
        struct gs_pending *pending;
        /* 0, or the negative errno of the last failed read of the
         * checkpoint: the allocations are unknown (gs_restore.h). */
        int ckpt_err;
        struct gs_loop *loop;               /* gs_loop.h: the main thread's reactor */
        struct gs_loop_timer restore_timer; /* gs_restore_tick */
        /* An upgrade's handover as this agent sees it (gs_node_handover;
         * gs_handover.h): read through gs_node_paths_ours,
         * gs_node_handed_over.  Main thread. */
        enum gs_node_handover handover;
        /* Watch clients are served (the control socket is up): a change
         * is worth telling. */
        bool watched;
        struct gs_agent_hists hists;
        /* Told up; set by the layer above before the first allocation. */
        /* A connection waits on an allocation's socket (data: the allocation). */
        gs_loop_io_fn on_alloc_conn;
        /* Main thread: something Watch clients see changed. */
        void (*on_changed)(struct gs_node *n);
        /* Worker threads: a lending change happened (the main thread
         * will tell Watch clients). */
        void (*on_poke)(struct gs_node *n);
};

static inline void gs_node_changed(struct gs_node *n)
{
        if (n->on_changed)
                n->on_changed(n);
}

static inline void gs_node_poke(struct gs_node *n)
{
        if (n->on_poke)
                n->on_poke(n);
}

/* Whether the sockets' and files' paths are this agent's to remove and
 * write (no handover took them, gs_node_handover). */
static inline bool gs_node_paths_ours(const struct gs_node *n)
{
        return n->handover == GS_NODE_OURS;
}

/* Whether this agent handed everything over to a new one (READY). */
static inline bool gs_node_handed_over(const struct gs_node *n)
{
        return n->handover == GS_NODE_HANDED_OVER;
}

#endif
