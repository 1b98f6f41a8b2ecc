/* gs_check_serve.h — the fixture of the suites that drive the request
 * switch (sessions/gs_serve.h gs_serve_one) directly, without rings or
 * workers: one process p of one allocation a of QUOTA chunks on a GPU of
 * the fake driver (a real pool, chunks handed out as fds over a
 * socketpair whose other end, peer, the test reads), and the helpers
 * that send it requests and check the books after them.  Included once,
 * by check_serve.c and check_serve_spill.c. */
#ifndef GS_CHECK_SERVE_H
#define GS_CHECK_SERVE_H

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_check_gpu.h"
#include "gs_agent.h"
#include "gs_gpu.h"
#include "gs_ipc.h"
#include "gs_log.h"
#include "gs_proc.h"
#include "gs_proc_int.h"
#include "gs_serve.h"
#include "gs_short.h"
#include "gs_sockmsg.h"

#define MiB (UINT64_C(1) << 20)
#define CHUNK (32 * MiB)
#define NCHUNKS 32u
#define QUOTA 4u /* chunks */

static struct gs_agent ag;
static struct gs_gpu *g;
static struct gs_allocation a;
static struct gs_proc p;
static struct gs_shm shm;
static int peer = -1; /* the hook's end of p->sock */
static char state[64];
/* Set before serve_setup: the node's context size (cfg.context_bytes),
 * its spillMax, and how many chunks a may borrow past its quota. */
static uint64_t opt_context_bytes, opt_spill_max;
static uint32_t opt_borrow;

/* Process id of allocation al, connected over a new socketpair whose
 * hook's end goes to *ret_peer. */
static inline void serve_proc_init(struct gs_proc *q, struct gs_allocation *al, uint64_t id, int *ret_peer)
{
        char err[256];
        int sv[2];

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
        q->agent = &ag;
        q->alloc = al;
        q->id = id;
        q->pid = getpid();
        q->state = GS_PROC_ACTIVE;
        q->sock = sv[0];
        *ret_peer = sv[1];
        q->pidfd = -1;
        q->shmfd = -1;
        q->wake_fd = -1;
        q->notify_fd = -1;
        q->shm = &shm;
        snprintf(q->comm, sizeof(q->comm), "check_serve");
        ck_assert_msg(gs_proc_gpus_init(&ag, q, err, sizeof(err)) == 0, "%s", err);
        q->max_grants = q->gpus[0].nslots < GS_MAX_GRANTS_PER_REPLY ? q->gpus[0].nslots : GS_MAX_GRANTS_PER_REPLY;
        q->grants = calloc(q->max_grants, sizeof(*q->grants));
        q->grant_fds = calloc(q->max_grants, sizeof(*q->grant_fds));
        ck_assert(q->grants && q->grant_fds);
        q->next = al->procs;
        al->procs = q;
}

/* Allocation al named id: quota chunks on GPU 0, borrow more. */
static inline void serve_alloc_init(struct gs_allocation *al, const char *id, uint32_t quota, uint32_t borrow)
{
        snprintf(al->id, sizeof(al->id), "%s", id);
        al->nparts = 1;
        al->parts[0].gpu = 0;
        al->parts[0].quota_chunks = quota;
        al->parts[0].burst_chunks = quota + borrow;
        gs_ipc_table_init(&al->ipc);
        gs_outside_init(&al->parts[0].out, strtoull(id, NULL, 16));
        gs_gpu_lock(g);
        int r = gs_palloc_new(g->pool, quota, borrow, &al->parts[0].pa);
        gs_gpu_unlock(g);
        ck_assert_int_eq(r, 0);
        al->next = ag.node.allocs;
        ag.node.allocs = al;
}

static inline void serve_setup(void)
{
        gs_check_fakecuda_env(state, sizeof(state), "serve", "1Gi");
        gs_log_init("check_serve", GS_LOG_WARN);
        gs_config_defaults(&ag.node.cfg);
        ag.node.cfg.chunk_bytes = CHUNK;
        ag.node.cfg.unit_bytes = 2 * CHUNK;
        ag.node.cfg.reserve_bytes = 0;
        ag.node.cfg.context_bytes = opt_context_bytes;
        ag.node.cfg.spill_max_bytes = opt_spill_max;
        gs_check_cuda_open(&ag.node);
        g = gs_check_gpu_open(&ag.node, NCHUNKS);
        ck_assert_int_eq(gs_loop_new(&ag.node.loop), 0);
        gs_agent_wire(&ag, NULL);
        gs_short_wire(&ag);
        serve_alloc_init(&a, "00000000000000a1", QUOTA, opt_borrow);
        serve_proc_init(&p, &a, 1, &peer);
}

static inline void serve_teardown(void)
{
        unlink(state);
}

/* The books after a case: the pool sound, the process holding held
 * chunks and nblocks live blocks, the allocation those and the chunks of
 * its memory outside the pool and of the process's VMM allocations,
 * nothing borrowed. */
#define check_books(held, nblocks) check_books_at(__LINE__, held, nblocks)
static inline void check_books_at(int line, uint32_t held, uint64_t nblocks)
{
        struct gs_palloc_stats ps;
        struct gs_pproc_stats st;
        char why[256] = "";
        uint32_t others;
        int r;

        gs_gpu_lock(g);
        r = gs_pool_validate(g->pool, why, sizeof(why));
        gs_palloc_stats(a.parts[0].pa, &ps);
        gs_pproc_stats(p.gpus[0].pp, &st);
        others = a.parts[0].out.cs.nheld + p.gpus[0].vmm.cs.nheld;
        gs_gpu_unlock(g);
        ck_assert_msg(r == 0, "line %d: %s", line, why);
        ck_assert_msg(st.chunks_held == held, "line %d: the process holds %u, %u expected", line, st.chunks_held, held);
        ck_assert_msg(ps.chunks_held == held + others, "line %d: %u chunks held, %u + %u expected", line,
                      ps.chunks_held, held, others);
        ck_assert_msg(st.nblocks == nblocks, "line %d: %llu blocks, %llu expected", line,
                      (unsigned long long)st.nblocks, (unsigned long long)nblocks);
        ck_assert_uint_le(ps.chunks_held, QUOTA);
        ck_assert_uint_eq(ps.chunks_borrowed, 0);
}

/* One request of q; the reply echoes seq, op and gpu whatever its status. */
static inline struct gs_ring_msg serve_as(struct gs_proc *q, uint32_t op, uint32_t gpu, uint64_t a0, uint64_t a1)
{
        struct gs_ring_msg req, rep;

        memset(&req, 0, sizeof(req));
        memset(&rep, 0x5a, sizeof(rep));
        req.seq = 0x1234567800ull + op;
        req.op = op;
        req.gpu = gpu;
        req.arg[0] = a0;
        req.arg[1] = a1;
        ck_assert_int_eq(gs_serve_one(q, &req, &rep), 0);
        ck_assert_uint_eq(rep.seq, req.seq);
        ck_assert_uint_eq(rep.op, op);
        ck_assert_uint_eq(rep.gpu, gpu);
        return rep;
}

static inline struct gs_ring_msg serve(uint32_t op, uint32_t gpu, uint64_t a0, uint64_t a1)
{
        return serve_as(&p, op, gpu, a0, a1);
}

/* Nothing more is waiting on the hook's end fd. */
static inline void nothing_sent(int fd)
{
        char b[64];

        ck_assert_int_eq(recv(fd, b, sizeof(b), MSG_DONTWAIT), -1);
        ck_assert_int_eq(errno, EAGAIN);
}

/* What a request sent before its reply on the hook's end fd: n messages
 * of type, each a struct gs_sock_grant of seq with one fd of bytes; their
 * slots in slots[].  Nothing more is waiting. */
static inline void take_sent(int fd, uint32_t type, uint32_t n, uint64_t bytes, uint32_t *slots)
{
        struct gs_sock_grant m;
        bool trunc;

        for (uint32_t i = 0; i < n; i++) {
                int mfd = -1;
                ssize_t k = gs_sockmsg_recv_fd(fd, &m, sizeof(m), &trunc, &mfd);

                ck_assert_int_eq(k, (ssize_t)sizeof(m));
                ck_assert_uint_eq(m.h.type, type);
                ck_assert_uint_eq(m.chunk_bytes, CHUNK);
                ck_assert_int_ge(mfd, 0);
                ck_assert_int_eq(lseek(mfd, 0, SEEK_END), (off_t)bytes);
                close(mfd);
                if (slots)
                        slots[i] = m.slot;
        }
        nothing_sent(fd);
}

/* The grants an ALLOC sent before its reply: n chunks, in p's slots. */
static inline void take_grants(uint32_t n, uint32_t *slots)
{
        uint32_t s[GS_MAX_GRANTS_PER_REPLY];

        ck_assert_uint_le(n, GS_MAX_GRANTS_PER_REPLY);
        take_sent(peer, GS_SOCK_GRANT, n, CHUNK, s);
        for (uint32_t i = 0; i < n; i++) {
                ck_assert_uint_lt(s[i], p.gpus[0].nslots);
                if (slots)
                        slots[i] = s[i];
        }
}

/* An ALLOC of size that succeeds: its offset; its grants taken. */
static inline uint64_t alloc_ok(uint64_t size, uint32_t ngrants)
{
        struct gs_ring_msg rep = serve(GS_OP_ALLOC, 0, size, 0);

        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[1], ngrants);
        take_grants(ngrants, NULL);
        return rep.arg[0];
}

/* Gives the process's empty chunks back (GIVE_BACK, then RELEASE of the
 * run it names), as its hook does. */
static inline void give_back_all(void)
{
        for (int i = 0; i < (int)(QUOTA + opt_borrow) + 1; i++) {
                struct gs_ring_msg rep = serve(GS_OP_GIVE_BACK, 0, 0, 0);

                ck_assert_int_eq(rep.status, 0);
                if (rep.arg[1] == 0)
                        return;
                rep = serve(GS_OP_RELEASE, 0, rep.arg[0], rep.arg[1]);
                ck_assert_int_eq(rep.status, 0);
        }
        ck_abort_msg("GIVE_BACK never ran dry");
}

#endif
