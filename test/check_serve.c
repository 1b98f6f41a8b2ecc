/* check_serve.c — the request switch (sessions/gs_serve.h gs_serve_one)
 * driven directly, without rings or workers (fixture: gs_check_serve.h):
 * one process of one allocation of 4 chunks on a GPU of the fake driver.
 * Every case checks after itself that the pool validates and that the
 * allocation holds and the process has what it should: a refused or
 * hostile request changes nothing.  CTX with a context of two chunks,
 * IPC between two processes of one allocation and one of another; the
 * spill ops are check_serve_spill.c's. */
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/resource.h>

#include "gs_check_serve.h"

static void setup(void)
{
        serve_setup();
}

/* A context is charged at a chunk and a megabyte: two chunks. */
static void setup_ctx(void)
{
        opt_context_bytes = CHUNK + MiB;
        serve_setup();
}

static void teardown(void)
{
        serve_teardown();
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
                                        GS_OP_SPILL,    GS_OP_SPILL_DONE, GS_OP_NOTIFY,      GS_OP_SPILL_PREP };
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
        static const uint32_t ops[] = { 0, GS_OP_SPILL_PREP + 1, 100, UINT32_MAX,
                                        /* known, not announced to this process */
                                        GS_OP_SPILL, GS_OP_SPILL_DONE, GS_OP_SPILL_PREP,
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

/* CTX charges the context to the allocation before it exists: its size
 * (2 chunks' worth here) taken from the quota as memory outside the pool,
 * once; CTX_DONE ends the promise, once. */
START_TEST(test_ctx_charged_once)
{
        const uint64_t ctx = CHUNK + MiB, quota = (uint64_t)QUOTA * CHUNK;
        struct gs_part *part = &a.parts[0];
        struct gs_ring_msg rep;

        /* Another process's promise on this GPU, which nothing here touches. */
        gs_gpu_lock(g);
        g->ctx_promised = 7 * MiB;
        gs_gpu_unlock(g);
        /* A CTX_DONE with nothing promised takes back nothing. */
        ck_assert_int_eq(serve(GS_OP_CTX_DONE, 0, UINT64_MAX, UINT64_MAX).status, 0);
        ck_assert_uint_eq(g->ctx_promised, 7 * MiB);
        for (int i = 0; i < 2; i++) {
                rep = serve(GS_OP_CTX, 0, UINT64_MAX, UINT64_MAX);
                ck_assert_int_eq(rep.status, 0);
                ck_assert_uint_eq(rep.arg[0], quota);
                ck_assert_uint_eq(rep.arg[1], 2 * CHUNK); /* chunks held: the context's */
                ck_assert_uint_eq(rep.arg[2], ctx);       /* outside the pool */
                ck_assert_uint_eq(rep.arg[3], 0xa1);
                ck_assert_uint_eq(part->out.cs.nheld, 2);
                ck_assert_uint_eq(part->out.charged, ctx);
                ck_assert_uint_eq(part->out.short_bytes, 0);
                ck_assert_uint_eq(g->ctx_promised, 7 * MiB + ctx); /* the second is a no-op */
                take_grants(0, NULL);
                check_books(0, 0);
        }
        /* What is left of the quota: 2 chunks. */
        rep = serve(GS_OP_MEMINFO, 0, 0, 0);
        ck_assert_uint_eq(rep.arg[0], quota - 2 * CHUNK);
        ck_assert_int_eq(serve(GS_OP_ALLOC, 0, 2 * CHUNK + 1, 0).status, -ENOMEM);
        take_grants(0, NULL);
        check_books(0, 0);
        uint64_t off = alloc_ok(2 * CHUNK, 2);
        check_books(2, 1);
        /* CTX_DONE ends the promise, not the charge; again changes nothing. */
        for (int i = 0; i < 2; i++) {
                ck_assert_int_eq(serve(GS_OP_CTX_DONE, 0, 0, 0).status, 0);
                ck_assert_uint_eq(g->ctx_promised, 7 * MiB);
                ck_assert_uint_eq(p.gpus[0].ctx_promised, 0);
                ck_assert_uint_eq(part->out.charged, ctx);
                check_books(2, 1);
        }
        ck_assert_int_eq(serve(GS_OP_FREE, 0, off, 0).status, 0);
        give_back_all();
        check_books(0, 0);
        ck_assert_uint_eq(part->out.cs.nheld, 2);
}
END_TEST

/* A quota with no room for the context: refused, nothing charged, each
 * time it is asked. */
START_TEST(test_ctx_no_room)
{
        struct gs_part *part = &a.parts[0];
        uint64_t off = alloc_ok(3 * CHUNK, 3);

        for (int i = 0; i < 2; i++) {
                struct gs_ring_msg rep = serve(GS_OP_CTX, 0, 0, 0);

                ck_assert_int_eq(rep.status, -ENOMEM);
                ck_assert_uint_eq(rep.arg[0], (uint64_t)QUOTA * CHUNK);
                ck_assert_uint_eq(rep.arg[1], 3 * CHUNK);
                ck_assert_uint_eq(rep.arg[2], 0);
                ck_assert_uint_eq(part->out.cs.nheld, 0);
                ck_assert_uint_eq(part->out.charged, 0);
                ck_assert_uint_eq(p.gpus[0].ctx_expect, 0);
                ck_assert_uint_eq(g->ctx_promised, 0);
                take_grants(0, NULL);
                check_books(3, 1);
        }
        ck_assert_int_eq(serve(GS_OP_CTX_DONE, 0, 0, 0).status, 0);
        ck_assert_uint_eq(g->ctx_promised, 0);
        /* With the room back, the context is charged. */
        ck_assert_int_eq(serve(GS_OP_FREE, 0, off, 0).status, 0);
        give_back_all();
        ck_assert_int_eq(serve(GS_OP_CTX, 0, 0, 0).status, 0);
        ck_assert_uint_eq(part->out.cs.nheld, 2);
        check_books(0, 0);
}
END_TEST

/* The one VMM_GRANT a create sends: its id, size and fd of size bytes. */
static void take_vmm_grant(uint64_t id, uint64_t size)
{
        struct gs_sock_vmm_grant m;
        bool trunc;
        int fd = -1;

        ck_assert_int_eq(gs_sockmsg_recv_fd(peer, &m, sizeof(m), &trunc, &fd), (ssize_t)sizeof(m));
        ck_assert_uint_eq(m.h.type, GS_SOCK_VMM_GRANT);
        ck_assert_uint_eq(m.seq, 0x1234567800ull + GS_OP_VMM_CREATE);
        ck_assert_uint_eq(m.id, id);
        ck_assert_uint_eq(m.size, size);
        ck_assert_uint_eq(m.gpu, 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(lseek(fd, 0, SEEK_END), (off_t)size);
        close(fd);
        nothing_sent(peer);
}

/* A create takes whole chunks from the quota for the set; a release
 * gives them back; what does not fit beside the pool's chunks is refused
 * and changes nothing. */
START_TEST(test_vmm_create_release)
{
        struct gs_vmm_set *vs = &p.gpus[0].vmm;
        struct gs_ring_msg rep = serve(GS_OP_VMM_CREATE, 0, GS_VMM_ALIGN, 0);

        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[1], 1);
        uint64_t id = rep.arg[0];
        take_vmm_grant(id, GS_VMM_ALIGN);
        ck_assert_uint_eq(vs->count, 1);
        ck_assert_uint_eq(vs->live_bytes, GS_VMM_ALIGN);
        ck_assert_uint_eq(vs->cs.nheld, 1);
        check_books(0, 0);
        /* Two chunks more: 30 MiB of the set's free, two more chunks. */
        rep = serve(GS_OP_VMM_CREATE, 0, 2 * CHUNK, 0);
        ck_assert_int_eq(rep.status, 0);
        uint64_t id2 = rep.arg[0];
        ck_assert_uint_ne(id2, id);
        take_vmm_grant(id2, 2 * CHUNK);
        ck_assert_uint_eq(vs->cs.nheld, 3);
        uint64_t off = alloc_ok(MiB, 1);
        check_books(1, 1);
        /* Nothing more fits, VMM or pool. */
        ck_assert_int_eq(serve(GS_OP_VMM_CREATE, 0, CHUNK, 0).status, -ENOMEM);
        ck_assert_int_eq(serve(GS_OP_ALLOC, 0, CHUNK, 0).status, -ENOMEM);
        take_grants(0, NULL);
        ck_assert_uint_eq(vs->count, 2);
        ck_assert_uint_eq(vs->live_bytes, 2 * CHUNK + GS_VMM_ALIGN);
        ck_assert_uint_eq(vs->cs.nheld, 3);
        check_books(1, 1);
        /* Unknown ids, and ids of what is released, release nothing. */
        static const uint64_t bad[] = { 0, UINT64_MAX, 12345 };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                ck_assert_int_eq(serve(GS_OP_VMM_RELEASE, 0, bad[i] == 12345 ? id + id2 + 1 : bad[i], 0).status,
                                 -ENOENT);
                ck_assert_uint_eq(vs->count, 2);
                check_books(1, 1);
        }
        ck_assert_int_eq(serve(GS_OP_VMM_RELEASE, 0, id2, 0).status, 0);
        ck_assert_int_eq(serve(GS_OP_VMM_RELEASE, 0, id2, 0).status, -ENOENT);
        ck_assert_uint_eq(vs->count, 1);
        ck_assert_uint_eq(vs->live_bytes, GS_VMM_ALIGN);
        ck_assert_uint_eq(vs->cs.nheld, 2); /* a chunk's worth free went back */
        check_books(1, 1);
        ck_assert_int_eq(serve(GS_OP_VMM_RELEASE, 0, id, 0).status, 0);
        ck_assert_uint_eq(vs->count, 0);
        ck_assert_uint_eq(vs->cs.nheld, 0);
        check_books(1, 1);
        take_grants(0, NULL);
        ck_assert_int_eq(serve(GS_OP_FREE, 0, off, 0).status, 0);
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

/* q: another process of a; r: a process of another allocation, b. */
static struct gs_proc q, r;
static struct gs_allocation b;
static int peer_q = -1, peer_r = -1;

static void setup_ipc(void)
{
        serve_setup();
        serve_proc_init(&q, &a, 2, &peer_q);
        serve_alloc_init(&b, "00000000000000b2", QUOTA, 0);
        serve_proc_init(&r, &b, 3, &peer_r);
}

/* An export names p's block by a token that only another process of a
 * opens, on the chunks under the block; the export ends with the block.
 * Opening takes nothing from anybody's quota. */
START_TEST(test_ipc_export_open)
{
        uint64_t off = alloc_ok(CHUNK + 3 * MiB, 2), tok[2];
        struct gs_ring_msg rep = serve(GS_OP_IPC_EXPORT, 0, off + CHUNK + 5, 0);

        ck_assert_int_eq(rep.status, 0);
        tok[0] = rep.arg[0];
        tok[1] = rep.arg[1];
        ck_assert(tok[0] || tok[1]);
        ck_assert_uint_eq(rep.arg[2], CHUNK + 3 * MiB);
        ck_assert_uint_eq(rep.arg[3], off);
        ck_assert_uint_eq(gs_ipc_count(&p), 1);
        /* Again, from anywhere in the block: the same token. */
        rep = serve(GS_OP_IPC_EXPORT, 0, off, 0);
        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[0], tok[0]);
        ck_assert_uint_eq(rep.arg[1], tok[1]);
        ck_assert_uint_eq(gs_ipc_count(&p), 1);
        /* KEEP: the chunks under it, for the hook to keep. */
        rep = serve(GS_OP_IPC_EXPORT, 0, off, GS_IPC_EXPORT_KEEP);
        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[0], tok[0]);
        take_sent(peer, GS_SOCK_IPC_GRANT, 2, CHUNK, NULL);
        check_books(2, 1);
        /* q opens it: both chunks, the block at its offset in the first. */
        rep = serve_as(&q, GS_OP_IPC_OPEN, 0, tok[0], tok[1]);
        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[0], off % CHUNK);
        ck_assert_uint_eq(rep.arg[1], 2);
        ck_assert_uint_eq(rep.arg[2], CHUNK + 3 * MiB);
        uint32_t slots[2];
        take_sent(peer_q, GS_SOCK_IPC_GRANT, 2, CHUNK, slots);
        ck_assert_uint_eq(slots[0], 0);
        ck_assert_uint_eq(slots[1], 1);
        check_books(2, 1);
        /* Refused, nothing sent: p's own token (-EINVAL), a token one bit
         * off, and the token from a process of another allocation. */
        ck_assert_int_eq(serve(GS_OP_IPC_OPEN, 0, tok[0], tok[1]).status, -EINVAL);
        ck_assert_int_eq(serve_as(&q, GS_OP_IPC_OPEN, 0, tok[0] ^ 1, tok[1]).status, -ENOENT);
        ck_assert_int_eq(serve_as(&q, GS_OP_IPC_OPEN, 0, tok[0], tok[1] ^ (1ull << 63)).status, -ENOENT);
        ck_assert_int_eq(serve_as(&r, GS_OP_IPC_OPEN, 0, tok[0], tok[1]).status, -ENOENT);
        ck_assert_int_eq(serve_as(&r, GS_OP_IPC_OPEN, 1, tok[0], tok[1]).status, -EINVAL);
        nothing_sent(peer);
        nothing_sent(peer_q);
        nothing_sent(peer_r);
        ck_assert_uint_eq(gs_ipc_count(&p), 1);
        check_books(2, 1);
        /* Freed, the block's token opens nothing. */
        ck_assert_int_eq(serve(GS_OP_FREE, 0, off, 0).status, 0);
        ck_assert_uint_eq(gs_ipc_count(&p), 0);
        ck_assert_int_eq(serve_as(&q, GS_OP_IPC_OPEN, 0, tok[0], tok[1]).status, -ENOENT);
        nothing_sent(peer_q);
        check_books(2, 0);
        give_back_all();
        check_books(0, 0);
}
END_TEST

/* An export with KEEP whose chunks' fds the agent cannot make (out of
 * fds here) is refused as out of memory, and leaves no export behind:
 * the hook got no token.  An export made before stays. */
START_TEST(test_ipc_keep_refused)
{
        uint64_t off = alloc_ok(MiB, 1), off2 = alloc_ok(MiB, 0);
        struct rlimit rl, low;
        struct gs_ring_msg rep;
        int fds = gs_check_count_fds();

        rep = serve(GS_OP_IPC_EXPORT, 0, off2, 0);
        ck_assert_int_eq(rep.status, 0);
        const uint64_t tok2[2] = { rep.arg[0], rep.arg[1] };
        ck_assert_uint_eq(gs_ipc_count(&p), 1);
        /* Every fd below the limit in use: no dup can succeed. */
        int lowest = fcntl(0, F_DUPFD_CLOEXEC, 0);
        ck_assert_int_ge(lowest, 0);
        close(lowest);
        ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
        low = rl;
        low.rlim_cur = (rlim_t)lowest;
        ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
        rep = serve(GS_OP_IPC_EXPORT, 0, off, GS_IPC_EXPORT_KEEP);
        ck_assert_int_eq(rep.status, -ENOMEM);
        ck_assert_uint_eq(rep.arg[0], 0);
        ck_assert_uint_eq(rep.arg[1], 0);
        ck_assert_uint_eq(gs_ipc_count(&p), 1);
        rep = serve(GS_OP_IPC_EXPORT, 0, off2, GS_IPC_EXPORT_KEEP);
        ck_assert_int_eq(rep.status, -ENOMEM);
        ck_assert_uint_eq(gs_ipc_count(&p), 1);
        ck_assert_int_eq(serve_as(&q, GS_OP_IPC_OPEN, 0, tok2[0], tok2[1]).status, -ENOMEM);
        nothing_sent(peer_q);
        ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
        nothing_sent(peer);
        ck_assert_int_eq(gs_check_count_fds(), fds);
        check_books(1, 2);
        /* The earlier export answers, with its token; the refused one is
         * made anew. */
        rep = serve(GS_OP_IPC_EXPORT, 0, off2, GS_IPC_EXPORT_KEEP);
        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[0], tok2[0]);
        ck_assert_uint_eq(rep.arg[1], tok2[1]);
        take_sent(peer, GS_SOCK_IPC_GRANT, 1, CHUNK, NULL);
        rep = serve(GS_OP_IPC_EXPORT, 0, off, GS_IPC_EXPORT_KEEP);
        ck_assert_int_eq(rep.status, 0);
        take_sent(peer, GS_SOCK_IPC_GRANT, 1, CHUNK, NULL);
        ck_assert_uint_eq(gs_ipc_count(&p), 2);
        ck_assert_int_eq(gs_check_count_fds(), fds);
        check_books(1, 2);
}
END_TEST

/* At GS_IPC_MAX_EXPORTS_PER_PROC live exports the next is refused with
 * -ENOMEM and nothing is added; one freed makes room again. */
START_TEST(test_ipc_export_bound)
{
        const uint32_t n = GS_IPC_MAX_EXPORTS_PER_PROC + 1;
        uint64_t *offs = calloc(n, sizeof(*offs));
        struct gs_ring_msg rep;

        ck_assert_ptr_nonnull(offs);
        offs[0] = alloc_ok(4096, 1);
        for (uint32_t i = 1; i < n; i++)
                offs[i] = alloc_ok(4096, 0);
        check_books(1, n);
        for (uint32_t i = 0; i < n - 1; i++)
                ck_assert_int_eq(serve(GS_OP_IPC_EXPORT, 0, offs[i], 0).status, 0);
        ck_assert_uint_eq(gs_ipc_count(&p), GS_IPC_MAX_EXPORTS_PER_PROC);
        rep = serve(GS_OP_IPC_EXPORT, 0, offs[n - 1], 0);
        ck_assert_int_eq(rep.status, -ENOMEM);
        ck_assert_uint_eq(rep.arg[0], 0);
        ck_assert_uint_eq(rep.arg[1], 0);
        ck_assert_uint_eq(gs_ipc_count(&p), GS_IPC_MAX_EXPORTS_PER_PROC);
        /* An exported block again is no new export. */
        ck_assert_int_eq(serve(GS_OP_IPC_EXPORT, 0, offs[5], 0).status, 0);
        ck_assert_int_eq(serve(GS_OP_FREE, 0, offs[0], 0).status, 0);
        ck_assert_uint_eq(gs_ipc_count(&p), GS_IPC_MAX_EXPORTS_PER_PROC - 1);
        ck_assert_int_eq(serve(GS_OP_IPC_EXPORT, 0, offs[n - 1], 0).status, 0);
        ck_assert_uint_eq(gs_ipc_count(&p), GS_IPC_MAX_EXPORTS_PER_PROC);
        nothing_sent(peer);
        check_books(1, n - 1);
        free(offs);
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
        tcase_add_test(t, test_vmm_create_release);
        suite_add_tcase(s, t);
        t = tcase_create("ctx");
        tcase_add_checked_fixture(t, setup_ctx, teardown);
        tcase_set_timeout(t, 60);
        tcase_add_test(t, test_ctx_charged_once);
        tcase_add_test(t, test_ctx_no_room);
        suite_add_tcase(s, t);
        t = tcase_create("ipc");
        tcase_add_checked_fixture(t, setup_ipc, teardown);
        tcase_set_timeout(t, 60);
        tcase_add_test(t, test_ipc_export_open);
        tcase_add_test(t, test_ipc_export_bound);
        tcase_add_test(t, test_ipc_keep_refused);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}
