/* gs_proc.h — the processes registered on allocations' sockets (gs_wire.h is
 * the protocol; this is the agent's side of it).
 *
 * Life of a process:
 *   accept      SO_PEERCRED gives the pid; a pidfd watches it.
 *   HELLO       must arrive within GS_PROC_HELLO_MS and be exactly a valid
 *               struct gs_sock_hello; else an ERROR message and close.
 *   WELCOME     a sealed memfd segment with the two rings and a doorbell
 *               (eventfd), one gs_pproc per GPU of the allocation; the
 *               worker pool (gs_workers.h) serves it from then on.  A
 *               connection gets WELCOME only once the pool has taken it.
 *   socket EOF  the pool lets go of it; memory is kept while the process lives
 *               (it may still have its chunks mapped).
 *   exit        (pidfd readable) every chunk goes back to the allocation.
 * Without a pidfd (pidfd_open unsupported, or a pid from another pid
 * namespace) socket EOF counts as exit.
 *
 * Caps (config): maxConnections in all, maxConnectionsPerAllocation,
 * maxConnectionsPerProcess (by SO_PEERCRED pid); past one a connection gets
 * an ERROR naming it and is closed, before any WELCOME.  Requests are
 * copied out of the ring before they are looked at; every index is bounded;
 * a broken ring drops the connection. */
#ifndef GS_PROC_H
#define GS_PROC_H

#include "gs_agent.h"
#include "gs_allocs.h"
#include "gs_gpu.h"
#include "gs_ledger.h"
#include "gs_ring.h"
#include "gs_vmm.h"
#include "gs_wire.h"
#include "gs_workers.h"

#define GS_PROC_HELLO_MS 2000
/* A VMM create that found no room in the driver waits this long at most
 * for a scan to restore the headroom, then tries once more; at most once
 * a second per process, so that a process cannot hold a worker with it. */
#define GS_PROC_ROOM_WAIT_MS 300

struct gs_legacy_vmm {
        uint64_t id, size;
};

struct gs_proc_gpu {
        struct gs_gpu *g;
        struct gs_pproc *pp;
        uint64_t quota_bytes;
        uint32_t nslots;
        struct gs_vmm_set vmm; /* the application's cuMemCreate allocations */
        /* Outside the pool (gs_outside.h), under g->lock: the charge slot
         * (max of the two below), the context size charged by GS_OP_CTX,
         * and what NVML last showed. */
        uint64_t outside_charge;
        uint64_t ctx_expect;
        uint64_t outside_measured;
        uint64_t ctx_promised; /* part of g->ctx_promised: until GS_OP_CTX_DONE */
        int64_t room_wait_ms;  /* last wait for a scan (GS_PROC_ROOM_WAIT_MS) */
        /* Restarts (gs_ledger.h): who holds pp's and vmm's chunks, and
         * the chunks behind VMM allocations the process made under an
         * earlier agent (held until it exits; NULL if none). */
        struct gs_ledger_tag tag, vtag;
        struct gs_pproc *vpp;
        /* Its VMM allocations made under an earlier agent (reclaimed): vpp
         * keeps chunks for their bytes, fewer as they are released. */
        struct gs_legacy_vmm *lvmm;
        uint32_t nlvmm;
        uint64_t lvmm_bytes;
        /* Slots in a move when the earlier agent stopped: charged as
         * device memory unless the process says they are in host memory
         * (GS_RECLAIM_HOST; gs_proc_spillrest.c). */
        uint32_t maybe_host[GS_MOVE_MAX];
        uint32_t nmaybe_host;
        /* A batch of moves sent, not answered yet (gs_serve_spill.c);
         * the worker serving the process's turn, or under g->lock. */
        struct gs_move_ent move[GS_MOVE_MAX];
        uint32_t nmove;
        uint32_t move_dir;
        uint64_t move_start_ns;
        uint64_t move_plan_ns;
        /* A batch answered with the next one planned (GS_MOVE_CHAIN): the
         * process moves that one while this one is settled, once the reply
         * is out, in the same worker's turn (gs_serve_spill_settle); its
         * time by phase, settle excepted.  nsettle 0: none. */
        struct gs_move_ent settle[GS_MOVE_MAX];
        uint32_t nsettle;
        uint64_t settle_ns[GS_PHASE_N];
        bool ctx_refused_said; /* "no room for a CUDA context" logged */
};

/* After the application released a VMM allocation the set does not know:
 * one of the legacy ones (its chunks go back as far as the others allow),
 * 0; else -ENOENT.  Under the GPU's lock. */
int gs_proc_legacy_vmm_release(struct gs_proc_gpu *pg, uint64_t id);

/* RECLAIM: WELCOME sent to a reclaiming HELLO, its GS_SOCK_RECLAIM
 * messages being read; not served yet. */
enum gs_proc_state { GS_PROC_HELLO = 0, GS_PROC_ACTIVE, GS_PROC_CLOSED, GS_PROC_RECLAIM };
/* A reclaiming process has this long to send its reclaim messages. */
#define GS_PROC_RECLAIM_MS 10000

struct gs_proc {
        struct gs_proc *next; /* in alloc->procs */
        struct gs_agent *agent;
        struct gs_allocation *alloc;
        uint64_t id;
        pid_t pid;
        uint64_t start; /* its start time (gs_ledger_pid_start) */
        uid_t uid;
        char comm[17];
        enum gs_proc_state state;
        int64_t hello_deadline_ms;
        int sock;
        int pidfd;
        struct gs_loop_io sock_io, pidfd_io;
        int shmfd;
        struct gs_shm *shm;
        uint32_t ngpus;
        struct gs_proc_gpu gpus[GS_MAX_GPUS_PER_ALLOC];
        /* Worker-private ring indices (never re-read from shared memory). */
        uint32_t req_tail, rep_head;
        struct gs_grant *grants;
        int *grant_fds;
        uint32_t max_grants;
        int wake_fd;           /* doorbell (eventfd) the hook writes */
        int notify_fd;         /* eventfd the agent writes when it asks (GS_OP_NOTIFY) */
        struct gs_wentry went; /* the worker pool's */
        int stop;              /* atomic: main asks the workers to let go */
        uint64_t nrequests;    /* atomic, for logs */
        uint32_t nexports;     /* atomic: live IPC exports (gs_ipc.h) */
        bool over_killed;      /* main: killed by the over-quota policy (gs_usage.h) */
        bool move_feature;     /* GS_FEAT_SPILL announced to it */
        /* Its mover asked GS_OP_SPILL_PREP once (a hook that knows it);
         * woken once to find out (main thread). */
        bool prep_asked, prep_rung;
        /* Compute QoS (gs_proc_qos.h), its worker's: its slot + 1 on
         * GPU qos_gpu's board (0: none). */
        uint32_t qos_slot1, qos_gpu;
        bool qos_full_said;
        /* Weights (gs_proc_share.h), main's: the launch count last seen,
         * when it last moved (ms; 0: never), the cap it was told (0:
         * none). */
        uint64_t share_launches;
        int64_t share_moved_ms;
        uint8_t share_told;
};

/* The allocation's listening socket is readable: accept every waiting
 * connection. */
void gs_proc_on_listen(void *a, uint32_t events);
/* ag->hello_timer's callback (gs_loop.h): drops connections whose HELLO is
 * late.  Returns the next deadline. */
int64_t gs_proc_tick(void *ag, int64_t now);
/* Shutdown: ends every process's connection and frees its memory. */
void gs_proc_kill_all(struct gs_agent *ag);

/* At start, after the allocations are restored: the processes the
 * previous agent's ledger names that still live get records (closed
 * connections, their chunks held at their slots, their memory none of the
 * agent's) until they reclaim them or exit; processes of allocations
 * that are gone leave their chunks pending.  Then the new ledger replaces
 * the old one. */
void gs_proc_adopt(struct gs_agent *ag);
/* After bumping p's give_back or spill word: wakes its hook's thread if it
 * took the notification eventfd (GS_OP_NOTIFY); a no-op otherwise.  Any
 * thread: the fd lives as long as the process record. */
static inline void gs_proc_notify(struct gs_proc *p)
{
        uint64_t one = 1;

        /* EAGAIN: the counter is full, a wake-up is pending anyway. */
        if (p->notify_fd >= 0 && write(p->notify_fd, &one, sizeof(one)) < 0) {
        }
}

/* An upgrade (gs_handover.h).  pause: the workers let go of every process
 * (their requests wait in the rings); resume: they serve them again;
 * disconnect: every connection ends, each process keeping what it holds
 * (its hook connects to the new agent). */
void gs_proc_pause_all(struct gs_agent *ag);
void gs_proc_resume_all(struct gs_agent *ag);
void gs_proc_disconnect_all(struct gs_agent *ag);
/* Validates a HELLO of n bytes received on the socket.  0 or -EPROTO with
 * the reason in err. */
int gs_proc_check_hello(const void *buf, size_t n, char *err, size_t errlen) GS_WUR;

#endif
