/* check_serve.c — the request switch (sessions/gs_serve.h gs_serve_one)
 * driven directly, without rings or workers: one process of one
 * allocation of 4 chunks on a GPU of the fake driver (a real pool, chunks
 * handed out as fds over a socketpair whose other end the test reads).
 * Every case checks after itself that the pool validates and that the
 * allocation holds and the process has what it should: a refused or
 * hostile request changes nothing. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
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

static void setup(void)
{
        char err[256];
        int sv[2];

        gs_check_fakecuda_env(state, sizeof(state), "serve", "1Gi");
        gs_log_init("check_serve", GS_LOG_WARN);
        gs_config_defaults(&ag.node.cfg);
        ag.node.cfg.chunk_bytes = CHUNK;
        ag.node.cfg.unit_bytes = 2 * CHUNK;
        ag.node.cfg.reserve_bytes = 0;
        gs_check_cuda_open(&ag.node);
        g = gs_check_gpu_open(&ag.node, NCHUNKS);
        ck_assert_int_eq(gs_loop_new(&ag.node.loop), 0);
        gs_agent_wire(&ag, NULL);
        gs_short_wire(&ag);

        snprintf(a.id, sizeof(a.id), "00000000000000a1");
        a.nparts = 1;
        a.parts[0].gpu = 0;
        a.parts[0].quota_chunks = QUOTA;
        a.parts[0].burst_chunks = QUOTA; /* no burst: the quota is the limit */
        gs_ipc_table_init(&a.ipc);
        gs_gpu_lock(g);
        int r = gs_palloc_new(g->pool, QUOTA, 0, &a.parts[0].pa);
        gs_gpu_unlock(g);
        ck_assert_int_eq(r, 0);
        ag.node.allocs = &a;

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
        p.agent = &ag;
        p.alloc = &a;
        p.id = 1;
        p.pid = getpid();
        p.state = GS_PROC_ACTIVE;
        p.sock = sv[0];
        peer = sv[1];
        p.pidfd = -1;
        p.shmfd = -1;
        p.wake_fd = -1;
        p.notify_fd = -1;
        p.shm = &shm;
        snprintf(p.comm, sizeof(p.comm), "check_serve");
        ck_assert_msg(gs_proc_gpus_init(&ag, &p, err, sizeof(err)) == 0, "%s", err);
        p.max_grants = p.gpus[0].nslots < GS_MAX_GRANTS_PER_REPLY ? p.gpus[0].nslots : GS_MAX_GRANTS_PER_REPLY;
        p.grants = calloc(p.max_grants, sizeof(*p.grants));
        p.grant_fds = calloc(p.max_grants, sizeof(*p.grant_fds));
        ck_assert(p.grants && p.grant_fds);
        a.procs = &p;
}

static void teardown(void)
{
        unlink(state);
}

/* The books after a case: the pool sound, the allocation holding held
 * chunks, the process nblocks live blocks, nothing else granted. */
#define check_books(held, nblocks) check_books_at(__LINE__, held, nblocks)
static void check_books_at(int line, uint32_t held, uint64_t nblocks)
{
        struct gs_palloc_stats ps;
        struct gs_pproc_stats st;
        char why[256] = "";
        int r;

        gs_gpu_lock(g);
        r = gs_pool_validate(g->pool, why, sizeof(why));
        gs_palloc_stats(a.parts[0].pa, &ps);
        gs_pproc_stats(p.gpus[0].pp, &st);
        gs_gpu_unlock(g);
        ck_assert_msg(r == 0, "line %d: %s", line, why);
        ck_assert_msg(ps.chunks_held == held, "line %d: %u chunks held, %u expected", line, ps.chunks_held, held);
        ck_assert_msg(st.chunks_held == held, "line %d: the process holds %u", line, st.chunks_held);
        ck_assert_msg(st.nblocks == nblocks, "line %d: %llu blocks, %llu expected", line,
                      (unsigned long long)st.nblocks, (unsigned long long)nblocks);
        ck_assert_uint_le(ps.chunks_held, QUOTA);
        ck_assert_uint_eq(ps.chunks_borrowed, 0);
}

/* One request; the reply echoes seq, op and gpu whatever its status. */
static struct gs_ring_msg serve(uint32_t op, uint32_t gpu, uint64_t a0, uint64_t a1)
{
        struct gs_ring_msg req, rep;

        memset(&req, 0, sizeof(req));
        memset(&rep, 0x5a, sizeof(rep));
        req.seq = 0x1234567800ull + op;
        req.op = op;
        req.gpu = gpu;
        req.arg[0] = a0;
        req.arg[1] = a1;
        ck_assert_int_eq(gs_serve_one(&p, &req, &rep), 0);
        ck_assert_uint_eq(rep.seq, req.seq);
        ck_assert_uint_eq(rep.op, op);
        ck_assert_uint_eq(rep.gpu, gpu);
        return rep;
}

/* The grants an ALLOC sent before its reply: n messages, each with one
 * fd of a chunk's size; their slots in slots[]. Nothing more is waiting. */
static void take_grants(uint32_t n, uint32_t *slots)
{
        struct gs_sock_grant m;
        bool trunc;

        for (uint32_t i = 0; i < n; i++) {
                int fd = -1;
                ssize_t k = gs_sockmsg_recv_fd(peer, &m, sizeof(m), &trunc, &fd);

                ck_assert_int_eq(k, (ssize_t)sizeof(m));
                ck_assert_uint_eq(m.h.type, GS_SOCK_GRANT);
                ck_assert_uint_eq(m.chunk_bytes, CHUNK);
                ck_assert_uint_lt(m.slot, p.gpus[0].nslots);
                ck_assert_int_ge(fd, 0);
                ck_assert_int_eq(lseek(fd, 0, SEEK_END), (off_t)CHUNK);
                close(fd);
                if (slots)
                        slots[i] = m.slot;
        }
        char b[64];
        ck_assert_int_eq(recv(peer, b, sizeof(b), MSG_DONTWAIT), -1);
        ck_assert_int_eq(errno, EAGAIN);
}

/* An ALLOC of size that succeeds: its offset; its grants taken. */
static uint64_t alloc_ok(uint64_t size, uint32_t ngrants)
{
        struct gs_ring_msg rep = serve(GS_OP_ALLOC, 0, size, 0);

        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[1], ngrants);
        take_grants(ngrants, NULL);
        return rep.arg[0];
}

/* Gives the process's empty chunks back (GIVE_BACK, then RELEASE of the
 * run it names), as its hook does. */
static void give_back_all(void)
{
        for (int i = 0; i < (int)QUOTA + 1; i++) {
                struct gs_ring_msg rep = serve(GS_OP_GIVE_BACK, 0, 0, 0);

                ck_assert_int_eq(rep.status, 0);
                if (rep.arg[1] == 0)
                        return;
                rep = serve(GS_OP_RELEASE, 0, rep.arg[0], rep.arg[1]);
                ck_assert_int_eq(rep.status, 0);
        }
        ck_abort_msg("GIVE_BACK never ran dry");
}

START_TEST(test_ping_echoes)
{
        struct gs_ring_msg rep = serve(GS_OP_PING, 0, 0xfeedface12345678ull, 7);

        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[0], 0xfeedface12345678ull);
        ck_assert_uint_eq(rep.arg[1], 0); /* only arg0 is echoed */
        ck_assert_uint_eq(rep.others_asked, 0);
        /* A PING needs no GPU: any index is answered. */
        rep = serve(GS_OP_PING, UINT32_MAX, 42, 0);
        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[0], 42);
        check_books(0, 0);
}
END_TEST

START_TEST(test_gpu_out_of_range)
{
        static const uint32_t ops[] = { GS_OP_ALLOC,    GS_OP_FREE,       GS_OP_MEMINFO,     GS_OP_RANGE,
                                        GS_OP_RELEASE,  GS_OP_VMM_CREATE, GS_OP_VMM_RELEASE, GS_OP_IPC_EXPORT,
                                        GS_OP_IPC_OPEN, GS_OP_CTX,        GS_OP_CTX_DONE,    GS_OP_GIVE_BACK,
                                        GS_OP_SPILL,    GS_OP_SPILL_DONE, GS_OP_NOTIFY };
        static const uint32_t gpus[] = { 1, GS_MAX_GPUS_PER_ALLOC, UINT32_MAX };
        uint64_t off = alloc_ok(MiB, 1);

        for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
                for (size_t j = 0; j < sizeof(gpus) / sizeof(gpus[0]); j++) {
                        struct gs_ring_msg rep = serve(ops[i], gpus[j], ops[i] == GS_OP_FREE ? off : CHUNK, 0);

                        ck_assert_msg(rep.status == -EINVAL, "op %u gpu %u: status %d", ops[i], gpus[j], rep.status);
                        ck_assert_uint_eq(rep.arg[0], 0);
                        ck_assert_uint_eq(rep.arg[1], 0);
                        check_books(1, 1);
                }
        take_grants(0, NULL);
        ck_assert_int_eq(serve(GS_OP_FREE, 0, off, 0).status, 0);
        check_books(1, 0);
}
END_TEST

START_TEST(test_alloc_free)
{
        struct gs_ring_msg rep;
        uint64_t off;
        uint32_t slot;

        rep = serve(GS_OP_ALLOC, 0, MiB, 0);
        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[1], 1);
        take_grants(1, &slot);
        off = rep.arg[0];
        ck_assert_uint_eq(off / CHUNK, slot); /* the block lies in the granted slot */
        check_books(1, 1);
        /* RANGE finds the block from inside it. */
        rep = serve(GS_OP_RANGE, 0, off + 100, 0);
        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[0], off);
        ck_assert_uint_ge(rep.arg[1], MiB);
        /* A second block fits in the same chunk: no new grant. */
        rep = serve(GS_OP_ALLOC, 0, MiB, 0);
        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[1], 0);
        take_grants(0, NULL);
        ck_assert_uint_ne(rep.arg[0], off);
        check_books(1, 2);
        /* A chunk with a live block cannot be released. */
        ck_assert_int_eq(serve(GS_OP_RELEASE, 0, slot, 1).status, -EBUSY);
        check_books(1, 2);
        ck_assert_int_eq(serve(GS_OP_FREE, 0, rep.arg[0], 0).status, 0);
        check_books(1, 1);
        ck_assert_int_eq(serve(GS_OP_FREE, 0, off, 0).status, 0);
        /* The empty chunk stays cached with the process until given back. */
        check_books(1, 0);
        give_back_all();
        check_books(0, 0);
        /* The whole quota at once: 4 grants, then nothing more fits. */
        off = alloc_ok((uint64_t)QUOTA * CHUNK, QUOTA);
        check_books(QUOTA, 1);
        rep = serve(GS_OP_ALLOC, 0, MiB, 0);
        ck_assert_int_eq(rep.status, -ENOMEM);
        take_grants(0, NULL);
        check_books(QUOTA, 1);
        ck_assert_int_eq(serve(GS_OP_FREE, 0, off, 0).status, 0);
        give_back_all();
        check_books(0, 0);
}
END_TEST

START_TEST(test_free_unknown_or_twice)
{
        uint64_t off = alloc_ok(3 * MiB, 1);
        static const uint64_t bad[] = { 1, 4096, CHUNK, 17 * CHUNK, UINT64_MAX, UINT64_MAX - CHUNK + 1 };

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct gs_ring_msg rep = serve(GS_OP_FREE, 0, off + bad[i], 0);

                ck_assert_int_lt(rep.status, 0);
                ck_assert_uint_eq(rep.arg[1], 0);
                check_books(1, 1);
        }
        ck_assert_int_eq(serve(GS_OP_FREE, 0, off, 0).status, 0);
        check_books(1, 0);
        ck_assert_int_eq(serve(GS_OP_FREE, 0, off, 0).status, -ENOENT);
        check_books(1, 0);
        /* RANGE of what is gone, or never was, finds nothing. */
        ck_assert_int_lt(serve(GS_OP_RANGE, 0, off, 0).status, 0);
        ck_assert_int_lt(serve(GS_OP_RANGE, 0, UINT64_MAX, 0).status, 0);
        check_books(1, 0);
}
END_TEST

START_TEST(test_alloc_refused)
{
        const uint64_t quota = (uint64_t)QUOTA * CHUNK;
        struct {
                uint64_t size, a1;
                int status;
        } c[] = {
                { 0, 0, -EINVAL },   /* nothing */
                { MiB, 1, -EINVAL }, /* arg1 must be 0 */
                { MiB, UINT64_MAX, -EINVAL },
                { quota + 1, 0, -ENOMEM }, /* past the quota: what a driver says */
                { UINT64_MAX, 0, -ENOMEM },
                { UINT64_MAX - CHUNK + 2, 0, -ENOMEM }, /* rounds past 2^64 */
                { (uint64_t)1 << 63, 0, -ENOMEM },
        };

        for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
                struct gs_ring_msg rep = serve(GS_OP_ALLOC, 0, c[i].size, c[i].a1);

                ck_assert_msg(rep.status == c[i].status, "case %zu: status %d", i, rep.status);
                ck_assert_uint_eq(rep.arg[0], 0);
                ck_assert_uint_eq(rep.arg[1], 0);
                take_grants(0, NULL);
                check_books(0, 0);
        }
        /* Exactly the quota is not refused. */
        uint64_t off = alloc_ok(quota, QUOTA);
        check_books(QUOTA, 1);
        ck_assert_int_eq(serve(GS_OP_FREE, 0, off, 0).status, 0);
        give_back_all();
        check_books(0, 0);
}
END_TEST

START_TEST(test_unknown_op)
{
        static const uint32_t ops[] = { 0, GS_OP_QOS + 1, 100, UINT32_MAX,
                                        /* known, not announced to this process */
                                        GS_OP_SPILL, GS_OP_SPILL_DONE,
                                        /* no notification eventfd to send */
                                        GS_OP_NOTIFY };
        uint64_t off = alloc_ok(MiB, 1);

        for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
                struct gs_ring_msg rep = serve(ops[i], 0, off, 1);

                ck_assert_msg(rep.status == -EPROTO, "op %u: status %d", ops[i], rep.status);
                ck_assert_uint_eq(rep.arg[0], 0);
                take_grants(0, NULL);
                check_books(1, 1);
        }
        ck_assert_int_eq(serve(GS_OP_FREE, 0, off, 0).status, 0);
        check_books(1, 0);
}
END_TEST

START_TEST(test_meminfo)
{
        const uint64_t quota = (uint64_t)QUOTA * CHUNK;
        struct gs_ring_msg rep = serve(GS_OP_MEMINFO, 0, UINT64_MAX, UINT64_MAX);

        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[1], quota); /* total: the quota, no burst */
        ck_assert_uint_eq(rep.arg[0], quota); /* free: all of it */
        uint64_t off = alloc_ok(CHUNK + MiB, 2);
        rep = serve(GS_OP_MEMINFO, 0, 0, 0);
        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[1], quota);
        ck_assert_uint_le(rep.arg[0], quota - CHUNK - MiB);
        ck_assert_uint_ge(rep.arg[0], quota - 2 * CHUNK);
        check_books(2, 1);
        ck_assert_int_eq(serve(GS_OP_FREE, 0, off, 0).status, 0);
        give_back_all();
        rep = serve(GS_OP_MEMINFO, 0, 0, 0);
        ck_assert_uint_eq(rep.arg[0], quota);
        check_books(0, 0);
}
END_TEST

START_TEST(test_release_hostile)
{
        uint32_t n = p.gpus[0].nslots;
        struct {
                uint64_t first, count;
        } c[] = {
                { 0, 0 }, /* nothing */
                { n, 1 }, /* past the slots */
                { UINT64_MAX, 1 },
                { 1, UINT64_MAX }, /* first + count wraps */
                { n - 1, 2 },
                { 0, (uint64_t)n + 1 },
                { (uint64_t)1 << 32, 1 }, /* truncates to slot 0 */
                { 0, ((uint64_t)1 << 32) + 1 },
        };
        uint32_t slot;
        struct gs_ring_msg rep = serve(GS_OP_ALLOC, 0, MiB, 0);

        ck_assert_int_eq(rep.status, 0);
        take_grants(1, &slot);
        ck_assert_int_eq(serve(GS_OP_FREE, 0, rep.arg[0], 0).status, 0);
        check_books(1, 0);
        for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
                rep = serve(GS_OP_RELEASE, 0, c[i].first, c[i].count);
                ck_assert_msg(rep.status == -EINVAL, "case %zu: status %d", i, rep.status);
                check_books(1, 0);
        }
        /* A slot holding no chunk: all or nothing, the held one stays. */
        ck_assert_int_eq(serve(GS_OP_RELEASE, 0, slot == 0 ? 1 : 0, 1).status, -ENOENT);
        ck_assert_int_lt(serve(GS_OP_RELEASE, 0, slot == 0 ? 0 : slot - 1, 2).status, 0);
        check_books(1, 0);
        ck_assert_int_eq(serve(GS_OP_RELEASE, 0, slot, 1).status, 0);
        check_books(0, 0);
        ck_assert_int_eq(serve(GS_OP_RELEASE, 0, slot, 1).status, -ENOENT);
        check_books(0, 0);
}
END_TEST

START_TEST(test_vmm_hostile)
{
        static const uint64_t ids[] = { 0, 1, UINT64_MAX };
        const uint64_t quota = (uint64_t)QUOTA * CHUNK;
        struct {
                uint64_t size, a1;
                int status;
        } c[] = {
                { 0, 0, -EINVAL },
                { GS_VMM_ALIGN + 1, 0, -EINVAL },
                { GS_VMM_ALIGN, 1, -EINVAL },
                { quota + GS_VMM_ALIGN, 0, -ENOMEM },
                { UINT64_MAX - GS_VMM_ALIGN + 1, 0, -ENOMEM },
        };

        for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
                struct gs_ring_msg rep = serve(GS_OP_VMM_CREATE, 0, c[i].size, c[i].a1);

                ck_assert_msg(rep.status == c[i].status, "case %zu: status %d", i, rep.status);
                ck_assert_uint_eq(rep.arg[0], 0);
                take_grants(0, NULL);
                check_books(0, 0);
        }
        for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
                ck_assert_int_lt(serve(GS_OP_VMM_RELEASE, 0, ids[i], 0).status, 0);
                check_books(0, 0);
        }
}
END_TEST

START_TEST(test_ipc_hostile)
{
        uint64_t off = alloc_ok(MiB, 1);
        struct gs_ring_msg rep;

        /* A token nobody exported opens nothing and sends no fd. */
        rep = serve(GS_OP_IPC_OPEN, 0, 0, 0);
        ck_assert_int_lt(rep.status, 0);
        rep = serve(GS_OP_IPC_OPEN, 0, UINT64_MAX, UINT64_MAX);
        ck_assert_int_lt(rep.status, 0);
        /* Exporting what is no block exports nothing. */
        rep = serve(GS_OP_IPC_EXPORT, 0, off + 17 * CHUNK, 0);
        ck_assert_int_lt(rep.status, 0);
        rep = serve(GS_OP_IPC_EXPORT, 0, UINT64_MAX, GS_IPC_EXPORT_KEEP);
        ck_assert_int_lt(rep.status, 0);
        take_grants(0, NULL);
        ck_assert_uint_eq(gs_ipc_count(&p), 0);
        check_books(1, 1);
        ck_assert_int_eq(serve(GS_OP_FREE, 0, off, 0).status, 0);
        check_books(1, 0);
}
END_TEST

START_TEST(test_notify_and_give_back_empty)
{
        struct gs_sock_grant m;
        bool trunc;
        int fd = -1;

        /* Nothing held: GIVE_BACK names no run. */
        struct gs_ring_msg rep = serve(GS_OP_GIVE_BACK, 0, UINT64_MAX, UINT64_MAX);
        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[0], 0);
        ck_assert_uint_eq(rep.arg[1], 0);
        check_books(0, 0);
        /* With an eventfd, NOTIFY sends it (a reference: the agent keeps its
         * own), and the hook's end writes what the agent's end reads. */
        p.notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        ck_assert_int_ge(p.notify_fd, 0);
        rep = serve(GS_OP_NOTIFY, 0, 0, 0);
        ck_assert_int_eq(rep.status, 0);
        ck_assert_int_eq(gs_sockmsg_recv_fd(peer, &m, sizeof(m), &trunc, &fd), (ssize_t)sizeof(m));
        ck_assert_uint_eq(m.h.type, GS_SOCK_NOTIFY);
        ck_assert_int_ge(fd, 0);
        gs_proc_notify(&p);
        uint64_t v = 0;
        ck_assert_int_eq(read(fd, &v, sizeof(v)), (ssize_t)sizeof(v));
        ck_assert_uint_eq(v, 1);
        close(fd);
        take_grants(0, NULL);
        check_books(0, 0);
}
END_TEST

/* GS_OP_QOS (docs/compute.md): the board's fd before the reply, and the
 * allocation's class, cap and weight in it (ret4: the weight, the default
 * for an allocation that has none). */
START_TEST(test_qos_weight)
{
        static const struct {
                struct gs_qos_policy pol;
                uint64_t weight;
        } cases[] = {
                { { .cls = GS_QOS_BEST_EFFORT, .cap = 30, .weight = 30 }, 30 },
                { { .cls = GS_QOS_STANDARD }, GS_QOS_WEIGHT_DEFAULT },
                { { .cls = GS_QOS_STANDARD, .weight = 100 }, 100 },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct gs_sock_grant m;
                bool trunc;
                int fd = -1;

                a.qos = cases[i].pol;
                struct gs_ring_msg rep = serve(GS_OP_QOS, 0, 0, 0);
                ck_assert_int_eq(rep.status, 0);
                ck_assert_int_eq(gs_sockmsg_recv_fd(peer, &m, sizeof(m), &trunc, &fd), (ssize_t)sizeof(m));
                ck_assert_uint_eq(m.h.type, GS_SOCK_QOS);
                ck_assert_int_ge(fd, 0);
                close(fd);
                ck_assert_uint_eq(rep.arg[0], cases[i].pol.cls);
                ck_assert_uint_eq(rep.arg[1], cases[i].pol.cap);
                ck_assert_uint_eq(rep.arg[2], GS_QOS_NO_SLOT);
                ck_assert_uint_eq(rep.arg[3], sizeof(struct gs_qos_board));
                ck_assert_uint_eq(rep.ret4, cases[i].weight);
        }
        a.qos = (struct gs_qos_policy){ 0 };
        take_grants(0, NULL);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("serve");
        TCase *t = tcase_create("serve");

        tcase_add_checked_fixture(t, setup, teardown);
        tcase_set_timeout(t, 60);
        tcase_add_test(t, test_ping_echoes);
        tcase_add_test(t, test_gpu_out_of_range);
        tcase_add_test(t, test_alloc_free);
        tcase_add_test(t, test_free_unknown_or_twice);
        tcase_add_test(t, test_alloc_refused);
        tcase_add_test(t, test_unknown_op);
        tcase_add_test(t, test_meminfo);
        tcase_add_test(t, test_release_hostile);
        tcase_add_test(t, test_vmm_hostile);
        tcase_add_test(t, test_ipc_hostile);
        tcase_add_test(t, test_notify_and_give_back_empty);
        tcase_add_test(t, test_qos_weight);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}
