/* gs_wire.h — the protocol between the hook (libgshare.so, in a container's
 * process) and the agent.  Header-only, libc-only: the hook includes it.
 *
 * Transport, per process:
 *   1. The hook connects to <socket_dir>/agent.sock (AF_UNIX, SOCK_SEQPACKET,
 *      SOCK_CLOEXEC).  The socket directory is the allocation's private
 *      directory, bind-mounted into the container by the device plugin: being
 *      able to connect is the capability.  The agent identifies the peer with
 *      SO_PEERCRED (never with what the hook says) and watches it with a pidfd.
 *   2. hook -> agent: struct gs_sock_hello.
 *      agent -> hook: struct gs_sock_welcome with two fds (SCM_RIGHTS, in
 *      this order): a sealed memfd of struct gs_shm (size fixed:
 *      F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL, so the hook cannot SIGBUS the
 *      agent by truncating it) and the agent's doorbell, an eventfd; or
 *      struct gs_sock_error and close.  (v2: v1 had no eventfd.)
 *   3. Requests and replies then travel on the two SPSC rings in the segment
 *      (see gs_ring.h).  The hook keeps one request outstanding at a time
 *      (its own mutex), so replies come back in order.
 *   4. Chunk grants need file descriptors, which rings cannot carry: a reply
 *      to GS_OP_ALLOC whose ret[1] = k > 0 means that k struct gs_sock_grant
 *      messages, each with one chunk fd, were sent on the socket *before* the
 *      reply was published.  The hook reads them, imports each fd
 *      (cuMemImportFromShareableHandle, POSIX fd type), maps it at
 *      va_base[gpu] + slot * chunk_bytes, closes the fd, and only then hands
 *      the address to the caller.
 *   5. The socket stays open for the process's life.  EOF means the process
 *      closed it; the agent returns the process's memory once the process
 *      has exited (pidfd readable), since a live process that merely closed
 *      the socket still has its chunks mapped.
 *   6. Reclaim (the agent restarted, docs/agent.md "Restarts").  A hook
 *      whose agent went away keeps its memory mapped and connects again;
 *      its HELLO carries GS_HELLO_RECLAIM.  After WELCOME it sends
 *      GS_SOCK_RECLAIM messages: per GPU the slots it has mapped
 *      (GS_RECLAIM_SLOTS) and its live blocks (GS_RECLAIM_BLOCKS), with
 *      GS_FEAT_IPC_KEEP its IPC exports and the fds of the memory under
 *      them (GS_RECLAIM_IPC, GS_RECLAIM_IPC_FD), with GS_FEAT_HOST_SLOTS
 *      the slots whose data a move put in host memory (GS_RECLAIM_HOST),
 *      then one GS_RECLAIM_END; the agent answers GS_SOCK_RECLAIM_DONE (err 0) or
 *      ERROR and close, and only then serves the rings.  What the process
 *      holds is charged from the agent's own ledger, never from these
 *      messages: they only say where the free space is.
 *
 * 7. Give-back (GS_FEAT_GIVEBACK).  Chunks a process holds with no live
 *    block in them (freed, cached for reuse) are its to keep only while
 *    nobody else of its allocation needs memory: after a request fails
 *    with -ENOMEM, or when gs_shm.give_back changed, the hook asks
 *    GS_OP_GIVE_BACK for such chunks, unmaps and RELEASEs them.
 * 8. Moves (GS_FEAT_SPILL, docs/burst.md "Giving it back").  A process
 *    that may borrow chunks runs one thread of the hook's (the mover) that
 *    waits on gs_shm.spill.  When the agent bumps it (and FUTEX_WAKEs it),
 *    the mover asks GS_OP_SPILL for each GPU: the reply names k slots and,
 *    before it, k GS_SOCK_MOVE messages each carry the fd of the memory
 *    that slot is to map from now on (host memory, or device memory to
 *    come back to).  The mover closes the launch gate (hook/gs_hook_gate.h),
 *    synchronizes the GPU, copies each slot's data into the new memory,
 *    maps the new memory at the same address, opens the gate, and says
 *    how many slots it moved with GS_OP_SPILL_DONE.  With
 *    GS_FEAT_SPILL_PREP the mover first asks GS_OP_SPILL_PREP: host
 *    memory sent ahead of need, which it imports and maps at scratch
 *    addresses of its own and keeps until a move names it
 *    (GS_SOCK_MOVE_PREP: that memory for that slot, no fd) or the agent
 *    says it is not needed any more.  With GS_FEAT_SPILL_CHAIN the mover
 *    that moved a whole batch to host memory asks for the next one in its
 *    GS_OP_SPILL_DONE (GS_MOVE_CHAIN): the agent plans and sends it
 *    before it settles the batch just moved, so that the settling (chunks
 *    made anew) runs while the process copies.
 * 9. Notification (GS_FEAT_NOTIFY).  So that a process that makes no call
 *    answers at once, the hook's thread asks GS_OP_NOTIFY once per
 *    connection for an eventfd of the agent's, and blocks in poll() on it
 *    (and on the socket, to see the agent go away).  The agent writes it
 *    (8 bytes, 1) each time it bumps gs_shm.give_back or gs_shm.spill for
 *    that process; the words stay the record of what was asked.
 * 10. Compute QoS (GS_FEAT_QOS, docs/compute.md).  The hook's thread asks
 *    GS_OP_QOS for GPU 0 of its allocation once per connection and each
 *    time gs_shm.qos changed: the reply says the allocation's class, cap
 *    and weight, and before it one GS_SOCK_QOS message carries the fd of that
 *    node GPU's board (struct gs_qos_board): writable for a
 *    latency-critical process (ret2 = its slot), read-only for the others
 *    (ret2 = GS_QOS_NO_SLOT).  Only latency-critical processes can write
 *    the board, so a process can never make others wait for it unless its
 *    pod is latency-critical.
 * Versions.  The segment and message layouts are GS_WIRE_VERSION; features
 * added since are negotiated: an agent sets the bits it supports in the
 * WELCOME header's `reserved` field (GS_FEAT_*; an older agent leaves 0,
 * and refuses a HELLO with flags it does not know), and a hook uses a
 * feature only if the agent announced it.
 *
 * Addresses on the wire are offsets into the process's reserved virtual
 * range of that GPU, never device pointers: offset = slot * chunk_bytes +
 * offset in the chunk.  The hook adds its own va_base.
 *
 * Everything the hook sends is hostile input to the agent: the agent copies
 * each message out of shared memory before validating it, bounds every
 * index and size, and drops the connection on a protocol violation.
 */
#ifndef GS_WIRE_H
#define GS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define GS_WIRE_MAGIC 0x52485347u /* "GSHR" little-endian */
#define GS_WIRE_VERSION 2u
#define GS_SOCKET_NAME "agent.sock"
#define GS_MAX_GPUS_PER_ALLOC 8
#define GS_RING_SLOTS 64u /* power of two */
/* Most chunks one reply may grant (one GRANT message, one fd each). */
#define GS_MAX_GRANTS_PER_REPLY 4096u

enum gs_sock_type {
        GS_SOCK_HELLO = 1,        /* hook -> agent */
        GS_SOCK_WELCOME = 2,      /* agent -> hook, with the segment's memfd */
        GS_SOCK_GRANT = 3,        /* agent -> hook, with one chunk fd */
        GS_SOCK_ERROR = 4,        /* agent -> hook, then close */
        GS_SOCK_VMM_GRANT = 5,    /* agent -> hook, with one VMM allocation's fd */
        GS_SOCK_IPC_GRANT = 6,    /* agent -> hook, with one chunk fd of an opened IPC handle */
        GS_SOCK_RECLAIM = 7,      /* hook -> agent, after a reclaiming HELLO's WELCOME */
        GS_SOCK_RECLAIM_DONE = 8, /* agent -> hook: struct gs_sock_error, err 0 */
        GS_SOCK_MOVE = 9,         /* agent -> hook, with one fd: struct gs_sock_grant */
        GS_SOCK_NOTIFY = 10,      /* agent -> hook, with one fd: struct gs_sock_grant (GS_OP_NOTIFY) */
        GS_SOCK_QOS = 11,         /* agent -> hook, with one fd: struct gs_sock_grant (GS_OP_QOS) */
        GS_SOCK_PREP = 12,        /* agent -> hook, with one fd: struct gs_sock_grant (GS_OP_SPILL_PREP) */
        GS_SOCK_MOVE_PREP = 13,   /* agent -> hook, no fd: struct gs_sock_grant (GS_OP_SPILL) */
};

/* gs_sock_hello.flags */
#define GS_HELLO_RECLAIM 1u /* the process held memory from an earlier agent */
/* WELCOME's h.reserved: what this agent supports. */
#define GS_FEAT_RECLAIM 1u
#define GS_FEAT_GIVEBACK 2u      /* GS_OP_GIVE_BACK and gs_shm.give_back */
#define GS_FEAT_SPILL 4u         /* GS_OP_SPILL, GS_OP_SPILL_DONE and gs_shm.spill */
#define GS_FEAT_IPC_KEEP 8u      /* GS_OP_IPC_EXPORT's GS_IPC_EXPORT_KEEP, GS_RECLAIM_IPC(_FD) */
#define GS_FEAT_NOTIFY 16u       /* GS_OP_NOTIFY: an eventfd written with each ask (item 9) */
#define GS_FEAT_HOST_SLOTS 32u   /* GS_RECLAIM_HOST */
#define GS_FEAT_QOS 64u          /* GS_OP_QOS, gs_shm.qos and the compute board (item 10) */
#define GS_FEAT_SPILL_PREP 128u  /* GS_OP_SPILL_PREP, GS_SOCK_MOVE_PREP (item 8) */
#define GS_FEAT_SPILL_CHAIN 256u /* GS_OP_SPILL_DONE's GS_MOVE_CHAIN (item 8) */

struct gs_sock_hdr {
        uint32_t magic;    /* GS_WIRE_MAGIC */
        uint16_t version;  /* GS_WIRE_VERSION */
        uint16_t type;     /* enum gs_sock_type */
        uint32_t len;      /* whole message, header included */
        uint32_t reserved; /* 0 */
};
_Static_assert(sizeof(struct gs_sock_hdr) == 16, "gs_sock_hdr layout");

struct gs_sock_hello {
        struct gs_sock_hdr h;
        uint32_t pid;   /* informational only; the agent uses SO_PEERCRED */
        uint32_t flags; /* GS_HELLO_*; 0 for a first registration */
        char comm[16];  /* informational, for gsharectl; need not be NUL-terminated */
};
_Static_assert(sizeof(struct gs_sock_hello) == 40, "gs_sock_hello layout");

struct gs_wire_gpu {
        uint8_t uuid[16];     /* as cuDeviceGetUuid reports it */
        uint64_t quota_bytes; /* the allocation's limit on this GPU */
        uint64_t chunk_bytes; /* GSM size; slots are this far apart */
        uint32_t max_slots;   /* the hook reserves max_slots * chunk_bytes of VA */
        uint32_t reserved;
};
_Static_assert(sizeof(struct gs_wire_gpu) == 40, "gs_wire_gpu layout");

struct gs_sock_welcome {
        struct gs_sock_hdr h;
        uint32_t ngpus;     /* <= GS_MAX_GPUS_PER_ALLOC */
        uint32_t shm_bytes; /* size of the memfd segment */
        uint64_t proc_id;   /* the agent's id for this process (for logs) */
        struct gs_wire_gpu gpus[GS_MAX_GPUS_PER_ALLOC];
};
_Static_assert(sizeof(struct gs_sock_welcome) == 16 + 16 + 40 * GS_MAX_GPUS_PER_ALLOC, "gs_sock_welcome layout");

struct gs_sock_grant {
        struct gs_sock_hdr h;
        uint64_t seq;  /* seq of the ring request this grant belongs to */
        uint32_t gpu;  /* index into welcome.gpus */
        uint32_t slot; /* map at va_base + slot * chunk_bytes */
        uint64_t chunk_bytes;
};
_Static_assert(sizeof(struct gs_sock_grant) == 40, "gs_sock_grant layout");

/* One reclaim message: count items of kind for GPU gpu.  len = 32 + 8 *
 * count.  SLOTS: each item a slot; BLOCKS: pairs (offset, size) of live
 * blocks, count even; END: count 0, flags bit i set when GPU i's blocks
 * are complete (else the agent keeps every chunk of that GPU opaque). */
enum gs_reclaim_kind {
        GS_RECLAIM_SLOTS = 1,
        GS_RECLAIM_BLOCKS = 2,
        GS_RECLAIM_END = 3,
        /* pairs (id, size) of the process's live VMM allocations made by an
         * earlier agent (its GS_OP_VMM_RELEASE of such an id is accepted) */
        GS_RECLAIM_VMM = 4,
        /* GS_FEAT_IPC_KEEP: triples (token0, token1, offset) of the
         * process's live IPC exports on gpu (GS_OP_IPC_EXPORT's token and
         * block offset), count a multiple of 3, after its BLOCKS */
        GS_RECLAIM_IPC = 5,
        /* GS_FEAT_IPC_KEEP: count 1, item[0] = a slot under one of those
         * exports, with one fd (SCM_RIGHTS): the memory mapped there, as
         * the export's GS_SOCK_IPC_GRANT gave it; after the IPC triples */
        GS_RECLAIM_IPC_FD = 6,
        /* slots whose memory a move put in host memory (GS_FEAT_HOST_SLOTS):
         * taken only for slots the agent's record has in a move */
        GS_RECLAIM_HOST = 7,
};
#define GS_RECLAIM_MAX_ITEMS 4096u
struct gs_sock_reclaim {
        struct gs_sock_hdr h;
        uint32_t gpu;
        uint32_t kind; /* enum gs_reclaim_kind */
        uint32_t count;
        uint32_t flags;
        uint64_t item[GS_RECLAIM_MAX_ITEMS];
};
_Static_assert(sizeof(struct gs_sock_reclaim) == 32 + 8 * GS_RECLAIM_MAX_ITEMS, "gs_sock_reclaim layout");

/* GS_SOCK_IPC_GRANT uses struct gs_sock_grant too: before the reply to a
 * GS_OP_IPC_OPEN, one per chunk under the exported block, in order; slot is
 * the chunk's index i (0..k-1): the hook maps it at its new range's base +
 * i * chunk_bytes. */

/* Sent before the reply to a GS_OP_VMM_CREATE that succeeded: the fd is a
 * physical allocation of exactly `size` bytes (POSIX fd handle type) that
 * the hook imports and hands to the application as its cuMemCreate handle. */
struct gs_sock_vmm_grant {
        struct gs_sock_hdr h;
        uint64_t seq;      /* seq of the ring request this grant belongs to */
        uint64_t id;       /* the agent's id of the VMM allocation */
        uint64_t size;     /* bytes, as requested */
        uint32_t gpu;      /* index into welcome.gpus */
        uint32_t reserved; /* 0 */
};
_Static_assert(sizeof(struct gs_sock_vmm_grant) == 48, "gs_sock_vmm_grant layout");

/* VMM allocation sizes are multiples of this (the driver's granularity for
 * device memory). */
#define GS_VMM_ALIGN (UINT64_C(2) << 20)

struct gs_sock_error {
        struct gs_sock_hdr h;
        int32_t err;   /* negative errno */
        char msg[236]; /* NUL-terminated */
};
_Static_assert(sizeof(struct gs_sock_error) == 256, "gs_sock_error layout");

/* Ring operations.  arg[] in the request, ret[] in the reply; status is 0 or
 * a negative errno (-ENOMEM: over the quota; -EINVAL: bad argument; -ENOENT:
 * no such allocation at that offset; -EPROTO: malformed request). */
enum gs_op {
        /* arg0 = size (bytes, > 0), arg1 = flags (0).
         * ret0 = offset, ret1 = k, the GRANT messages sent before this reply. */
        GS_OP_ALLOC = 1,
        /* arg0 = offset as returned by ALLOC.
         * ret0 = first slot the hook should unmap and RELEASE, ret1 = count of
         * consecutive slots (0: nothing to release).  The agent asks for this
         * when a chunk became empty and the process already caches one. */
        GS_OP_FREE = 2,
        /* ret0 = bytes this process can still obtain, ret1 = the quota. */
        GS_OP_MEMINFO = 3,
        /* arg0 = any offset inside a live block.  ret0 = block's offset,
         * ret1 = block's size as requested. */
        GS_OP_RANGE = 4,
        /* arg0 = first slot, arg1 = count: the hook has unmapped these slots
         * (after a FREE reply asked it to); their chunks go back to the
         * allocation.  The agent checks the chunks are still empty. */
        GS_OP_RELEASE = 5,
        /* No operation; ret0 = arg0.  For tests and latency measurements. */
        GS_OP_PING = 6,
        /* The application's cuMemCreate.  arg0 = size (a multiple of
         * GS_VMM_ALIGN, > 0), arg1 = flags (0).  ret0 = the allocation's id,
         * ret1 = 1: one GS_SOCK_VMM_GRANT (with the fd) was sent on the
         * socket before this reply.  -ENOMEM at the quota. */
        GS_OP_VMM_CREATE = 7,
        /* arg0 = id: the application released its handle (cuMemRelease).
         * -ENOENT for an unknown id. */
        GS_OP_VMM_RELEASE = 8,
        /* The application's cuIpcGetMemHandle.  arg0 = any offset inside a
         * live block of this process.  ret0, ret1 = a random 128-bit token
         * naming that block to the other processes of the same allocation
         * (the same token each time for the same block), ret2 = the block's
         * size, ret3 = its offset.  The token dies when the block is freed
         * or the process exits.  -ENOENT: no live block there; -ENOMEM: at
         * GS_IPC_MAX_EXPORTS_PER_PROC or the allocation's bound.
         * GS_FEAT_IPC_KEEP: arg1 = GS_IPC_EXPORT_KEEP asks, before the
         * reply, for one GS_SOCK_IPC_GRANT per chunk under the block (slot
         * i: the block's i-th chunk), which the hook keeps while the export
         * lives and hands a new agent in its reclaim (GS_RECLAIM_IPC): the
         * token then survives an agent restart or upgrade (docs/agent.md,
         * "Restarts").  -EIO: this agent has no fd of that memory (-ENOMEM:
         * out of fds); such a refusal makes no export. */
        GS_OP_IPC_EXPORT = 9,
        /* The application's cuIpcOpenMemHandle.  arg0, arg1 = a token from
         * GS_OP_IPC_EXPORT of another process of this allocation, on this
         * GPU.  ret0 = the block's offset in its first chunk, ret1 = k, the
         * GS_SOCK_IPC_GRANT messages (the chunks under the block) sent
         * before this reply, ret2 = the block's size.  -ENOENT: no such
         * token in this allocation (never issued, freed, its process gone,
         * or another allocation's); -EINVAL: the token is this process's
         * own, or of another GPU. */
        GS_OP_IPC_OPEN = 10,
        /* The process is about to create a CUDA context on this GPU
         * (cuDevicePrimaryCtxRetain, cuCtxCreate): the agent charges the
         * expected context size to the allocation and releases that much
         * pool memory to the driver, where the context will find it
         * (agent/domain/gs_outside.h).  Once per process and GPU; again is a no-op.
         * ret0 = the quota, ret1 = bytes the allocation uses (chunks held,
         * outside memory included), ret2 = of those, outside the pool,
         * ret3 = the allocation's id (its 16 hex digits as a number).
         * -ENOMEM: the quota has no room for a context. */
        GS_OP_CTX = 11,
        /* The context GS_OP_CTX made room for was created (or the attempt
         * failed): the room is no longer promised.  No result. */
        GS_OP_CTX_DONE = 12,
        /* Memory is wanted elsewhere (GS_FEAT_GIVEBACK): a request of this
         * process failed with -ENOMEM, or the agent bumped gs_shm.give_back.
         * ret0 = first slot, ret1 = count (0: none) of consecutive slots whose
         * chunks hold no live block: the hook unmaps them and RELEASEs them,
         * and asks again until count is 0.  Then a failed request is worth
         * one more try. */
        GS_OP_GIVE_BACK = 13,
        /* GS_FEAT_SPILL: the mover asks what to move on this GPU.  ret0 =
         * k (0: nothing now; at most GS_MOVE_MAX), ret1 = the direction
         * (enum gs_move_dir).  Before the reply, k GS_SOCK_MOVE messages
         * (struct gs_sock_grant: seq, gpu, slot, chunk_bytes), each with
         * the fd of the memory to map at that slot instead of what it maps
         * now, the data copied over.  Every reply with k > 0 is answered by
         * a GS_OP_SPILL_DONE before any other GS_OP_SPILL. */
        GS_OP_SPILL = 14,
        /* arg0 = moved: the first `moved` slots of the last GS_OP_SPILL
         * reply map their new memory (data copied); the others kept what
         * they mapped.  arg1 = the direction, as in that reply.  arg2,
         * arg3: where the batch's time went in the process, in
         * microseconds, two fields of 32 bits each (GS_MOVE_US_PACK):
         * arg2 = sync, prepare; arg3 = copy, remap (0 from a hook that
         * does not say; statistics only: the agent bounds them by the
         * time it saw).  GS_FEAT_SPILL_CHAIN: arg1 may carry GS_MOVE_CHAIN
         * (all of a batch to host memory moved): the reply is then
         * GS_OP_SPILL's for the next batch, planned before this one is
         * settled (ret0 = k, ret1 = the direction; its k GS_SOCK_MOVE or
         * GS_SOCK_MOVE_PREP messages first), and this one is settled
         * while the process moves that one.  k = 0: nothing chained (ask
         * GS_OP_SPILL). */
        GS_OP_SPILL_DONE = 15,
        /* GS_FEAT_NOTIFY (item 9): before the reply (status 0), one
         * GS_SOCK_NOTIFY message (struct gs_sock_grant: seq, the rest 0)
         * carries the agent's notification eventfd for this process.  gpu
         * 0.  No result. */
        GS_OP_NOTIFY = 16,
        /* GS_FEAT_QOS (item 10): gpu 0.  ret0 = the class (enum
         * gs_qos_class), ret1 = the cap (percent of GPU time, 1..100; 0:
         * none), ret2 = the process's slot in the board (GS_QOS_NO_SLOT:
         * not latency-critical, the fd is read-only), ret3 = the board's
         * size, ret4 = the weight among its class (1..100; 0 from an
         * agent that does not send it: the default, 10).  Before the reply, one GS_SOCK_QOS message (struct
         * gs_sock_grant: seq, gpu, slot = ret2, chunk_bytes = ret3) with
         * the board's fd. */
        GS_OP_QOS = 17,
        /* GS_FEAT_SPILL_PREP (item 8), asked by the mover before
         * GS_OP_SPILL.  ret0 = k (at most GS_MOVE_MAX): before the reply, k
         * GS_SOCK_PREP messages (struct gs_sock_grant: seq, gpu, slot = the
         * host memory's id (< GS_PREP_ID_MAX), chunk_bytes), each with the
         * fd of host memory made for a move to come: the mover imports it,
         * maps it at a scratch chunk and keeps it until a GS_OP_SPILL
         * reply names it (GS_SOCK_MOVE_PREP: slot, chunk_bytes = the id;
         * no fd) or the connection ends; at most GS_PREP_MAX per GPU.
         * ret1 = 1: the memory prepared so far is not needed: the mover
         * releases all of it (the agent charges it to the process until it
         * exits all the same). */
        GS_OP_SPILL_PREP = 18,
};

/* Compute classes (docs/compute.md), in the order of their rank: a
 * latency-critical process's launches go first, standard and best-effort
 * ones wait while it has work in flight. */
enum gs_qos_class {
        GS_QOS_STANDARD = 0, /* the default: as without QoS */
        GS_QOS_LATENCY = 1,  /* latency-critical */
        GS_QOS_BEST_EFFORT = 2,
};
/* A pod's weight among the pods of its class (GS_OP_QOS's ret4):
 * 1..GS_QOS_WEIGHT_MAX, GS_QOS_WEIGHT_DEFAULT unless said. */
#define GS_QOS_WEIGHT_DEFAULT 10u
#define GS_QOS_WEIGHT_MAX 100u
#define GS_QOS_NO_SLOT 0xffffffffu
#define GS_QOS_SLOTS 32u
#define GS_QOS_MAGIC 0x534f5147u /* "GQOS" */
/* One latency-critical process's flag: up while its work is in flight,
 * stamp_ns (CLOCK_MONOTONIC) its last launch, or the last time its hook
 * saw work of it still in flight (the hook's poller stamps it again every
 * GS_QOS_LC_POLL_US).  Readers ignore a flag older than GS_QOS_STALE_MS:
 * a process that died or hangs holds nobody longer than that. */
struct gs_qos_slot {
        uint32_t up;
        uint32_t pid; /* informational */
        uint64_t stamp_ns;
        /* Its next request foreseen (hook/gs_hook_qos_foresee.h): when it
         * is expected, the period learnt and the lead the others make way
         * by; 0 while its requests come at irregular times (and from a
         * hook of an earlier release, in what was reserved).  Each word
         * read on its own: a torn set is what a hostile writer could
         * write, and readers bound it. */
        uint64_t fs_next_ns;
        uint32_t fs_period_us;
        uint32_t fs_lead_us;
        uint64_t reserved[4];
};
_Static_assert(sizeof(struct gs_qos_slot) == 64, "gs_qos_slot layout");
_Static_assert(offsetof(struct gs_qos_slot, fs_next_ns) == 16, "gs_qos_slot layout");
/* The board of one node GPU, a sealed memfd the agent made: nlc is the
 * latency-critical processes registered on the GPU (written by the agent;
 * while it is 0, no launch waits anywhere).
 *
 * idle_until_ns (CLOCK_MONOTONIC; in what was reserved: an older agent
 * leaves it 0): until then, no process that a latency-critical flag would
 * hold (standard or best-effort, on this GPU's board) has launched within
 * the agent's window (GS_PROC_SHARE_HOLDABLE_MS, docs/compute.md), so a
 * latency-critical process's hook need not track its work: it records no
 * events and never raises its flag, as there is nobody to protect it
 * from.  The agent writes it each GS_PROC_SHARE_MS while that holds (now
 * + GS_QOS_IDLE_LEASE_MS) and 0 at the first tick that sees such a process
 * launch; the hooks read it at each launch.  0, a time past (an agent gone
 * or late: tracking resumes within the lease), or one more than twice the
 * lease ahead (another clock: a time namespace): track, as before the
 * field.
 * Written only by the agent; the board is writable to every
 * latency-critical process of the GPU, which can write it as it can write
 * any other slot's flag (docs/compute.md "Against a hostile tenant"). */
struct gs_qos_board {
        uint32_t magic;  /* GS_QOS_MAGIC */
        uint32_t nslots; /* GS_QOS_SLOTS */
        uint32_t nlc;
        uint32_t reserved0;
        uint64_t idle_until_ns;
        uint32_t reserved[10];
        struct gs_qos_slot slot[GS_QOS_SLOTS];
};
_Static_assert(sizeof(struct gs_qos_board) == 64 + 64 * GS_QOS_SLOTS, "gs_qos_board layout");
_Static_assert(offsetof(struct gs_qos_board, idle_until_ns) == 16, "gs_qos_board layout");
#define GS_QOS_STALE_MS 4u
#define GS_QOS_IDLE_LEASE_MS 500u
/* A launching process's hook publishes gs_shm.qos_launches (and takes
 * gs_shm.qos_share) this often. */
#define GS_QOS_LAUNCH_PUBLISH_MS 50
/* A weight's duty (gs_shm.qos_share) d: the hook launches in the first
 * d % of each period less twice what it keeps queued, at most
 * GS_QOS_DUTY_QUEUE_US (the driver's turns are ~2 ms) and a quarter of its
 * d % (the agent tells each duty from this: gs_qos_duties). */
#define GS_QOS_DUTY_PERIOD_MS 20
#define GS_QOS_DUTY_QUEUE_US 2000

/* In a reply's others_asked (GS_FEAT_SPILL): chunks this allocation is
 * owed are being moved off their borrowers for it: the request is worth
 * trying again for up to GS_MOVE_PATIENCE_MS. */
#define GS_OTHERS_MOVING 0x80000000u
#define GS_MOVE_PATIENCE_MS 10000u
/* GS_OP_SPILL_DONE's arg2 and arg3: two times in microseconds (each
 * capped at 32 bits), lo in the low half. */
#define GS_MOVE_US_PACK(lo, hi) \
        ((uint64_t)((lo) > UINT32_MAX ? UINT32_MAX : (lo)) | (uint64_t)((hi) > UINT32_MAX ? UINT32_MAX : (hi)) << 32)
#define GS_MOVE_US_LO(v) ((uint32_t)(v))
#define GS_MOVE_US_HI(v) ((uint32_t)((v) >> 32))

/* Most host memories prepared ahead in a process per GPU
 * (GS_OP_SPILL_PREP), and the bound of their ids. */
#define GS_PREP_MAX 256u
#define GS_PREP_ID_MAX (1u << 24)

/* Most slots one GS_OP_SPILL reply may name. */
#define GS_MOVE_MAX 32u
enum gs_move_dir {
        GS_MOVE_TO_HOST = 1,   /* spill: host memory in, device memory out */
        GS_MOVE_TO_DEVICE = 2, /* back: device memory in, host memory out */
};
/* In GS_OP_SPILL_DONE's arg1, beside the direction (GS_FEAT_SPILL_CHAIN). */
#define GS_MOVE_CHAIN 0x100u

/* The CUipcMemHandle (64 bytes) the hook gives the application for gshare
 * memory.  Only the agent can resolve the token, and only for a process of
 * the allocation that exported it: a handle is worthless in another
 * container, and 128 random bits cannot be guessed. */
#define GS_IPC_MAGIC "gshrIPC1"
#define GS_IPC_EXPORT_KEEP 1u
/* Live IPC exports of one process (the agent refuses more; the hook keeps
 * no more). */
#define GS_IPC_MAX_EXPORTS_PER_PROC 1024u
struct gs_ipc_handle {
        char magic[8]; /* GS_IPC_MAGIC, no NUL */
        uint64_t token[2];
        uint64_t size;        /* the block's size, informational */
        uint8_t reserved[32]; /* 0 */
};
_Static_assert(sizeof(struct gs_ipc_handle) == 64, "gs_ipc_handle is a CUipcMemHandle");

struct gs_ring_msg {
        uint64_t seq;    /* chosen by the hook, echoed in the reply */
        uint32_t op;     /* enum gs_op */
        uint32_t gpu;    /* index into welcome.gpus */
        uint64_t arg[4]; /* request arguments; in a reply, the results (ret) */
        int32_t status;  /* reply only */
        /* A reply with status -ENOMEM (GS_FEAT_GIVEBACK): how many other
         * processes of the allocation hold chunks with no live block and
         * were just asked to give them back: the request may succeed if
         * tried again in a moment.  0 otherwise. */
        uint32_t others_asked;
        /* A reply's fifth result: GS_OP_QOS's weight; 0 otherwise (and in
         * every reply of an agent older than it). */
        uint64_t ret4;
};
_Static_assert(sizeof(struct gs_ring_msg) == 64, "gs_ring_msg is one cache line");

/* A power-of-two single-producer/single-consumer ring.  head is written only
 * by the producer, tail only by the consumer; each on its own cache line so
 * the two sides do not false-share.  Indices run freely (uint32 wrap) and
 * are masked on use; head - tail is the fill, never more than GS_RING_SLOTS
 * unless the peer is hostile. */
struct gs_ring {
        _Alignas(64) uint32_t head;
        _Alignas(64) uint32_t tail;
        _Alignas(64) struct gs_ring_msg msg[GS_RING_SLOTS];
};

struct gs_shm {
        uint32_t magic;      /* GS_WIRE_MAGIC */
        uint32_t version;    /* GS_WIRE_VERSION */
        uint32_t size;       /* sizeof(struct gs_shm) */
        uint32_t ring_slots; /* GS_RING_SLOTS */
        /* Doorbells.  The producer of a ring bumps the consumer's word after
         * publishing and wakes the consumer only if it announced it sleeps
         * (the *_sleeping flag); the consumer sets its flag, re-checks the
         * ring, then waits.  The hook waits on hook_wake with FUTEX_WAIT
         * (shared futex: the two sides are different processes) and the
         * agent wakes it with FUTEX_WAKE.  The agent waits for many
         * processes at once with a few threads, so it waits in epoll on the
         * eventfd of WELCOME, which the hook writes (gs_doorbell_ring_fd)
         * instead of a FUTEX_WAKE on agent_wake. */
        _Alignas(64) uint32_t agent_wake;
        uint32_t agent_sleeping;
        /* GS_FEAT_GIVEBACK: the agent bumps it when another process of the
         * allocation, or the allocation's memory outside the pool, wants
         * the chunks this process holds without a live block; the hook,
         * seeing it changed (its thread, notified: item 9; or at its next
         * call), gives them back (GS_OP_GIVE_BACK).  In the padding of the agent_wake line: the
         * layout is unchanged for hooks that do not know it. */
        uint32_t give_back;
        /* GS_FEAT_SPILL: the agent bumps it, then FUTEX_WAKEs it (shared
         * futex), when it wants this process's mover to move chunks (wire
         * item 8).  Same line, same compatibility as give_back. */
        uint32_t spill;
        /* GS_FEAT_QOS: the agent bumps it when the allocation's compute
         * policy changed; the hook's thread asks GS_OP_QOS again (item 10).
         * Same line, same compatibility as give_back. */
        uint32_t qos;
        /* GS_FEAT_QOS: a duty (percent, 1..99; 0 or 100: none) the agent
         * sets while this process competes with others of its class and
         * more weight (docs/compute.md "Weights"), and notifies when it
         * changes: the hook launches only in that part of each of its
         * duty periods.  Same line, same compatibility as give_back. */
        uint32_t qos_share;
        _Alignas(64) uint32_t hook_wake;
        uint32_t hook_sleeping;
        /* GS_FEAT_QOS: the hook's count of launches its compute QoS held
         * and the ns they waited (docs/compute.md), for the agent's
         * metrics only (a hostile hook can write anything here).  In the
         * padding of the hook_wake line: the layout is unchanged. */
        uint64_t qos_held;
        uint64_t qos_held_ns;
        /* GS_FEAT_QOS: the hook's count of kernel and graph launches, at
         * most GS_QOS_LAUNCH_PUBLISH_MS old while it launches: the agent
         * sees from it who competes (a process that lies only changes its
         * own share). */
        uint64_t qos_launches;
        /* GS_FEAT_QOS: the GPU time, in ns, of the launches the hook's
         * compute QoS timed (docs/compute.md "GPU time": a capped launch
         * at its own events' measure, one admitted beside latency-critical
         * work or under a duty at its function's estimate from sampled
         * events; launches QoS lets through untimed count nothing),
         * published with qos_launches.  For the agent's metrics only (a
         * hostile hook can write anything here).  Same line, same
         * compatibility as qos_held. */
        uint64_t qos_gpu_ns;
        struct gs_ring req; /* hook -> agent */
        struct gs_ring rep; /* agent -> hook */
};
_Static_assert(sizeof(struct gs_ring) == 128 + 64 * GS_RING_SLOTS, "gs_ring layout");
_Static_assert(sizeof(struct gs_shm) % 64 == 0, "gs_shm layout");
_Static_assert(offsetof(struct gs_shm, req) == offsetof(struct gs_shm, hook_wake) + 64,
               "gs_shm: the hook_wake line's fields stay in its padding");

#endif
