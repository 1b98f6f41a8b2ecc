/* gs_hook_conn.h — the connection to the agent (gs_wire.h), as the hook's
 * other modules see it: the process's one connection, its GPUs as WELCOME
 * described them, and one request at a time.
 *
 * Locking: gs_conn.mu guards everything here and every module's table
 * (gs_hook_vmm.c, gs_hook_ipc.c); a module's entry point takes it, the
 * functions below expect it held.  One request is outstanding at a time,
 * so replies come back in order and application threads are safe.
 * Whatever the agent sends is checked before use; a violation drops the
 * connection (gs_conn_lost) and memory calls fail closed from then on. */
#ifndef GS_HOOK_CONN_H
#define GS_HOOK_CONN_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "gs_hook.h"
#include "gs_hook_blocks.h"
#include "gs_hook_msg.h"
#include "gs_wire.h"

/* One GPU of the allocation. */
/* What a slot maps (gs_hook_gpu.mapped): a granted chunk, or host memory a
 * move put there (said at a reclaim, GS_RECLAIM_HOST). */
#define GS_MAPPED_DEVICE 1
#define GS_MAPPED_HOST 2

struct gs_hook_gpu {
        uint8_t uuid[16];
        uint64_t quota, chunk;
        uint32_t max_slots;
        CUdeviceptr va_base;     /* 0 until reserved */
        uint8_t *mapped;         /* max_slots: 0, GS_MAPPED_DEVICE or GS_MAPPED_HOST */
        int ctx_charged;         /* GS_OP_CTX done for this process */
        int ctx_done;            /* and GS_OP_CTX_DONE sent */
        struct gs_blocks blocks; /* live blocks, for a reclaim */
};

/* LOST: the agent went away (its socket closed, or it stopped answering);
 * our memory stays mapped and the next call connects again and reclaims
 * it (gs_wire.h "Reclaim"), waiting up to $GSHARE_AGENT_WAIT seconds
 * (default GS_AGENT_WAIT_S) from the loss for an agent to answer.  Also a
 * process whose first connection found no agent answering (a restart):
 * it waits the same way, then registers (ngpus == 0: never welcomed, so a
 * plain HELLO, no reclaim).  DOWN: for good (refused, a protocol
 * violation, or the socket's directory gone: the allocation was
 * deleted). */
enum { GS_CONN_NEW = 0, GS_CONN_UP = 1, GS_CONN_DOWN = 2, GS_CONN_LOST = 3 };
#define GS_AGENT_WAIT_S 30

struct gs_conn {
        pthread_mutex_t mu;
        int state;
        int sock;
        int wake;   /* the agent's doorbell (eventfd of WELCOME) */
        int notify; /* the agent's notification eventfd (GS_OP_NOTIFY), or -1 */
        struct gs_shm *shm;
        uint32_t req_head, rep_tail;
        uint64_t seq;
        uint32_t ngpus;
        struct gs_hook_gpu gpus[GS_MAX_GPUS_PER_ALLOC];
        /* CUdevice -> index into gpus; -1: not in the allocation; -2: unknown. */
        int devmap[GS_MAX_DEVICES];
        const char *sock_path;
        uint32_t features;       /* GS_FEAT_* the agent announced */
        uint32_t give_back_seen; /* gs_shm.give_back when last looked at */
        uint64_t lost_ns;        /* LOST since (gs_mono_ns) */
        uint64_t wait_ns;        /* how long calls wait for a new agent */
        uint64_t reconnects;     /* successful reclaims, for tests and logs */
};

/* The process's connection (a fork child starts a new one). */
extern struct gs_conn gs_conn;

/* The following: pre gs_conn.mu held. */

/* Connects if not yet tried (no CUDA call); whether connected. */
int gs_conn_up(void);
/* Connects if not yet tried; the driver table when connected, else NULL. */
const struct gs_cu *gs_conn_ready(void);
/* Sends one request and waits for its reply.  0 with *ret filled
 * (ret->status is the agent's verdict), or a negative errno after which
 * the connection is gone. */
/* With all four arguments, and during(data) called once while the agent
 * serves it (after the request is sent, before its reply is waited for;
 * during may be NULL). */
int gs_conn_call_during(uint32_t op, uint32_t gpu, uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3,
                        struct gs_ring_msg *ret, void (*during)(void *), void *data) GS_WUR;
/* The same with arg2 and arg3 0 and nothing during. */
GS_WUR static inline int gs_conn_call(uint32_t op, uint32_t gpu, uint64_t a0, uint64_t a1, struct gs_ring_msg *ret)
{
        return gs_conn_call_during(op, gpu, a0, a1, 0, 0, ret, NULL, NULL);
}
/* For a reclaim, a module's list of the live VMM allocations on gpu (up to
 * max_pairs (id, size) pairs from table index from on, *ret_next where to
 * go on; how many): gs_hook_vmm sets it at its first allocation, so this
 * module calls none of its users. */
typedef size_t (*gs_conn_vmm_list_fn)(uint32_t gpu, size_t from, uint64_t *pairs, size_t max_pairs, size_t *ret_next);
void gs_conn_set_vmm_lister(gs_conn_vmm_list_fn fn);
/* For a reclaim, after a GPU's blocks: a module's IPC exports on gpu
 * (GS_RECLAIM_IPC, _IPC_FD), sent with gs_conn_reclaim_send through m;
 * 0 or a negative errno.  gs_hook_ipc sets it at its first kept export. */
typedef int (*gs_conn_ipc_reclaim_fn)(uint32_t gpu, struct gs_sock_reclaim *m);
void gs_conn_set_ipc_reclaimer(gs_conn_ipc_reclaim_fn fn);
/* Sends one reclaim message of count items in m, with fd attached if >= 0. */
int gs_conn_reclaim_send(struct gs_sock_reclaim *m, uint32_t gpu, uint32_t kind, uint32_t count, uint32_t flags,
                         int fd) GS_WUR;
/* This thread's calls never wait for a new agent: a request whose agent
 * went away fails at once (the hook's thread). */
void gs_conn_no_wait(void);
/* One try to connect again while LOST (the hook's thread: no waiting).
 * Whether up. */
int gs_conn_retry(void);
/* Whether the agent closed the connection (no reply pending: the lock is
 * held between requests). */
int gs_conn_hung_up(void);
/* The layers above are told through one callback (gs_hook_thread.c sets
 * it at load; the connection calls none of its users): CLOSING before the
 * fds of a connection that was up are closed, DOWN when it is forgotten
 * for good, UP when a connection is up.  pre for all: gs_conn.mu held. */
enum gs_conn_event { GS_CONN_EV_CLOSING, GS_CONN_EV_DOWN, GS_CONN_EV_UP };
typedef void (*gs_conn_event_fn)(enum gs_conn_event ev);
void gs_conn_set_event_fn(gs_conn_event_fn fn);
/* Says why once, and forgets the connection for good. */
void gs_conn_lost(const char *why);
/* The agent went away: the connection is LOST (reconnected at the next
 * call).  Says why once. */
void gs_conn_broken(const char *why);
/* The next message on the socket, without waiting, and at most one fd
 * (*ret_fd, -1 if none).  Its length, or a negative errno. */
ssize_t gs_conn_recv_fd(void *buf, size_t len, int *ret_fd);
/* The agent's verdict on a request as a negative errno (0: done). */
int gs_conn_status(int32_t st);

#endif
