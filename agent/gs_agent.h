/* gs_agent.h — the node agent's state, shared by its modules:
 *
 *   gs_cuda    the driver table
 *   gs_gpu     one GPU: context, identity, the chunk pool and its recycling
 *   gs_allocs  allocations: validation of device IDs, ids, socket
 *              directories, the checkpoint
 *   gs_proc    registered processes: HELLO/WELCOME, the segment, the worker
 *              thread serving the request ring, grants, exit handling
 *   gs_ctlsrv  the control socket (proto/gshare.proto)
 *   gs_agent.c the main loop's services below; gs_agent_main.c: main(),
 *              configuration, the epoll loop, signals
 *
 * Threads: the main thread owns every structure below and is the only one
 * that creates or destroys allocations and processes.  A bounded pool of
 * worker threads (gs_workers.h) serves the processes' rings; a worker
 * touches the gs_proc it serves, and the pools under the GPU's mutex (the
 * allocator is not thread-safe).  A worker
 * tells the main thread about a protocol violation by shutting its socket
 * down (the main loop sees the hang-up) and about a lending change through
 * the agent's eventfd. */
#ifndef GS_AGENT_H
#define GS_AGENT_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "gs_alloc.h"
#include "gs_config.h"
#include "gs_cuda.h"
#include "gs_devid.h"
#include "gs_ipc.h"
#include "gs_nvml.h"
#include "gs_outside.h"
#include "gs_util.h"
#include "gs_wire.h"
#include "gs_workers.h"

struct gs_agent;
struct gs_allocation;

struct gs_chunk {
        CUmemGenericAllocationHandle handle;
        int fd;          /* exported once; -1 when retired or pending */
        /* Its fd went to a process of this allocation (NULL: to none, or
         * the allocation is gone).  Main thread writes it at grant time
         * under the GPU's lock. */
        struct gs_allocation *owner;
        bool pending;    /* retired until its memory can be re-created */
        /* Under the GPU's lock: the id of the last process granted this
         * memory (it may have written it), 0 if none since it was made or
         * scrubbed.  Another process gets it only scrubbed (gs_gpu.h). */
        uint64_t writer;
};

struct gs_gpu {
        struct gs_agent *agent;
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
        /* Serializes every call on pool and every access to chunks[]. */
        pthread_mutex_t lock;
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
};

/* Every object watched by the main epoll carries one of these first, so the
 * loop knows what became ready. */
enum gs_ev_kind {
        GS_EV_CTL_LISTEN = 1, GS_EV_CTL_CLIENT, GS_EV_ALLOC_LISTEN,
        GS_EV_PROC_SOCK, GS_EV_PROC_PIDFD, GS_EV_SIGNAL, GS_EV_NOTIFY, GS_EV_TIMER,
        GS_EV_RECON,
        GS_EV_METRICS_LISTEN, GS_EV_METRICS_CLIENT,
};
struct gs_ev {
        enum gs_ev_kind kind;
        void *obj;
        bool dead;       /* object destroyed: ignore its remaining events */
};

struct gs_proc;

struct gs_part {
        uint32_t gpu;            /* index into agent->gpus */
        uint32_t units;
        uint32_t quota_chunks;
        struct gs_palloc *pa;
        /* Its processes' memory outside the pool (gs_outside.h), under the
         * GPU's lock; bypass_charge is the charge slot of processes of the
         * pod that never registered (gs_usage.h). */
        struct gs_outside out;
        uint64_t bypass_charge;
        bool gone;               /* being deleted: owes nothing any more */
        int64_t event_ms;        /* last over-quota Event (gs_event.h), CLOCK_MONOTONIC */
};

#define GS_ALLOCS_DIR_MAX 32      /* "<16 hex id>-<8 hex>" and a NUL */

struct gs_allocation {
        struct gs_allocation *next;
        struct gs_agent *agent;
        char id[17];             /* 16 hex digits of a hash of the sorted IDs */
        char **device_ids;       /* sorted */
        size_t ndevice_ids;
        uint64_t created_unix;
        uint32_t nparts;
        struct gs_part parts[GS_MAX_GPUS_PER_ALLOC];
        char dir_name[GS_ALLOCS_DIR_MAX]; /* of socket_dir, under socketRoot */
        char socket_dir[PATH_MAX];
        char socket_path[PATH_MAX];
        int listen_fd;
        struct gs_ev listen_ev;
        /* Released by the control API; deleted when its last process exits.
         * Its units stay taken until then (its processes still hold memory). */
        bool releasing;
        struct gs_proc *procs;
        uint32_t nprocs;
        struct gs_ipc_table ipc;     /* CUDA IPC exports of its processes */
        struct gs_wgroup wgroup;     /* its place in the worker pool's line */
        /* The reconciler's (gs_recon.h): the container PodResources last
         * showed holding its device IDs (empty: none seen yet), and since
         * when (CLOCK_MONOTONIC ms) no container has held them (0: held, or
         * not yet looked at). */
        char pod_namespace[64];
        char pod_name[254];
        char container_name[64];
        /* The pod's UID, from its registered processes' cgroups: processes
         * of the pod that bypass the hook are charged here (gs_usage.h). */
        char pod_uid[37];
        int64_t unheld_since_ms;
};

struct gs_ctlsrv;
struct gs_metrics;
struct gs_events;
struct gs_allocs_pending;
struct gs_claims;

struct gs_agent {
        struct gs_config cfg;
        struct gs_cuda cu;
        struct gs_gpu *gpus;
        uint32_t ngpus;
        struct gs_allocation *allocs;
        uint32_t nallocs;
        /* Checkpoint lines not restored yet (gs_allocs.h), and when they
         * are next retried (CLOCK_MONOTONIC ms). */
        struct gs_allocs_pending *pending;
        /* DRA claims' allocations (gs_claims.h); NULL until first used. */
        struct gs_claims *claims;
        int64_t pending_retry_ms;
        uint64_t generation;     /* ListGpusReply.generation */
        uint64_t next_proc_id;
        int epfd;
        int notify_fd;           /* eventfd: workers -> main (lending changed) */
        struct gs_ev notify_ev;
        struct gs_ctlsrv *ctl;
        struct gs_metrics *metrics;      /* gs_metrics.h; NULL: metricsAddress empty */
        struct gs_nvml nvml;             /* gs_usage.h; fn NULL: no NVML */
        struct gs_events *events;        /* gs_event.h; NULL: no API server */
        int64_t usage_next_ms;           /* next scan (CLOCK_MONOTONIC); 0: none */
        int usage_kick;                  /* atomic: a scan is wanted now (gs_agent_want_scan) */
        int notify_changed;              /* atomic: gs_agent_poke since the last NOTIFY */
        unsigned usage_scans;            /* atomic: scans done (gs_agent_wait_scan) */
        struct gs_workers *workers;      /* gs_workers.h: serve the processes' rings */
        uint32_t nconns;                 /* processes' connections, all allocations */
        bool stopping;
        /* Objects destroyed while handling a batch of events are freed after
         * it, since later events of the batch may still point at them. */
        void **graveyard;
        size_t ngrave, capgrave;
};

/* Registers fd with the main epoll for events, with ev as its tag. */
int gs_agent_watch(struct gs_agent *ag, int fd, uint32_t events, struct gs_ev *ev) GS_WUR;
void gs_agent_unwatch(struct gs_agent *ag, int fd);
/* Sends buf[*off, len) on a non-blocking socket as far as it takes,
 * advancing *off.  0 (all sent, or the socket is full), or a negative
 * errno: the peer is gone. */
int gs_agent_send_pending(int fd, const void *buf, size_t len, size_t *off) GS_WUR;
/* free(p) after the current batch of events (see graveyard). */
void gs_agent_defer_free(struct gs_agent *ag, void *p);
/* Frees what gs_agent_defer_free collected.  Main loop, between batches. */
void gs_agent_flush_graveyard(struct gs_agent *ag);
/* Something that Watch clients see changed: bump the generation and send
 * them the GPU list.  Main thread only. */
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
