/* check_alloc.c — the allocator through its public interface (gs_pool.h). */
#include <check.h>

#include "gs_check.h"
#include <stdlib.h>
#include <string.h>

#include "gs_pool.h"

#define CHUNK (256 * GS_MiB)

static struct gs_pool *pool;

static void setup(void)
{
        pool = gs_pool_new(16, CHUNK);
        ck_assert_ptr_nonnull(pool);
}

static void teardown(void)
{
        gs_pool_free(pool);
}

static void valid(void)
{
        char why[256] = "";
        int r = gs_pool_validate(pool, why, sizeof(why));
        ck_assert_msg(r == 0, "validate: %s", why);
}

static struct gs_grant grants[16];
static uint32_t ngrants;

static uint64_t must_malloc(struct gs_pproc *p, uint64_t size)
{
        uint64_t off = UINT64_MAX;
        int r = gs_pproc_malloc(p, size, &off, grants, 16, &ngrants);
        ck_assert_msg(r == 0, "malloc %llu: %d", (unsigned long long)size, r);
        ck_assert_uint_eq(off % GS_MIN_ALIGN, 0);
        valid();
        return off;
}

static struct gs_release must_free(struct gs_pproc *p, uint64_t off)
{
        struct gs_release rel = { 77, 77 };
        ck_assert_int_eq(gs_pproc_free(p, off, &rel), 0);
        valid();
        return rel;
}

START_TEST(test_pool_args)
{
        struct gs_palloc *a = NULL;
        struct gs_pool_stats ps;
        ck_assert_ptr_null(gs_pool_new(0, CHUNK));
        ck_assert_ptr_null(gs_pool_new(4, CHUNK + 1));
        ck_assert_ptr_null(gs_pool_new(4, 32 * GS_KiB));
        gs_pool_free(NULL);
        ck_assert_int_eq(gs_palloc_new(pool, 0, 0, &a), -EINVAL);
        ck_assert_int_eq(gs_palloc_new(pool, 17, 0, &a), -ENOSPC);
        ck_assert_ptr_null(a);
        gs_pool_stats(pool, &ps);
        ck_assert_uint_eq(ps.chunk_bytes, CHUNK);
        ck_assert_uint_eq(ps.nchunks, 16);
        ck_assert_uint_eq(ps.chunks_free, 16);
        ck_assert_uint_eq(ps.nallocs, 0);
        ck_assert_int_eq(gs_pool_retire_chunk(pool, 3), 0);
        ck_assert_int_eq(gs_pool_retire_chunk(pool, 3), -EBUSY);
        ck_assert_int_eq(gs_pool_retire_chunk(pool, 99), -EINVAL);
        gs_pool_stats(pool, &ps);
        ck_assert_uint_eq(ps.nchunks, 15);
        ck_assert_int_eq(gs_palloc_new(pool, 16, 0, &a), -ENOSPC);
        valid();
}
END_TEST

START_TEST(test_bad_input_leaves_state)
{
        struct gs_palloc *a;
        struct gs_pproc *p, *q = NULL;
        struct gs_pproc_stats st0, st1;
        struct gs_release rel;
        uint64_t off, base, size;
        ck_assert_int_eq(gs_palloc_new(pool, 4, 0, &a), 0);
        ck_assert_int_eq(gs_pproc_new(a, 0, &q), -EINVAL);
        ck_assert_int_eq(gs_pproc_new(a, (1u << 20) + 1, &q), -EINVAL);
        ck_assert_ptr_null(q);
        ck_assert_int_eq(gs_pproc_new(a, 64, &p), 0);
        uint64_t x = must_malloc(p, 1000);
        gs_pproc_stats(p, &st0);
        ck_assert_int_eq(gs_pproc_malloc(p, 0, &off, grants, 16, &ngrants), -EINVAL);
        ck_assert_int_eq(gs_pproc_malloc(p, 16 * CHUNK + 1, &off, grants, 16, &ngrants), -EINVAL);
        ck_assert_int_eq(gs_pproc_malloc(p, 5 * CHUNK, &off, grants, 16, &ngrants), -ENOMEM);
        ck_assert_int_eq(gs_pproc_malloc(p, 3 * CHUNK, &off, grants, 2, &ngrants), -E2BIG);
        ck_assert_int_eq(gs_pproc_free(p, x + 256, &rel), -ENOENT);   /* interior */
        ck_assert_int_eq(gs_pproc_free(p, x + 1, &rel), -ENOENT);     /* unaligned */
        ck_assert_int_eq(gs_pproc_free(p, 7 * CHUNK, &rel), -ENOENT); /* never */
        ck_assert_int_eq(gs_pproc_free(p, UINT64_MAX - 255, &rel), -ENOENT);
        ck_assert_int_eq(gs_pproc_release(p, 0, 1), -EBUSY);  /* not empty */
        ck_assert_int_eq(gs_pproc_release(p, 1, 1), -ENOENT); /* unheld */
        ck_assert_int_eq(gs_pproc_release(p, 0, 0), -EINVAL);
        ck_assert_int_eq(gs_pproc_release(p, 63, 2), -ENOENT);
        ck_assert_int_eq(gs_pproc_release(p, UINT32_MAX, 2), -ENOENT);
        ck_assert_int_eq(gs_pproc_range(p, x + 1000, &base, &size), -ENOENT);
        ck_assert_int_eq(gs_pproc_range(p, 5 * CHUNK, &base, &size), -ENOENT);
        ck_assert_int_eq(gs_palloc_del(a), -EBUSY);
        gs_pproc_stats(p, &st1);
        ck_assert_int_eq(memcmp(&st0, &st1, sizeof(st0)), 0);
        valid();
        must_free(p, x);
        ck_assert_int_eq(gs_pproc_free(p, x, &rel), -ENOENT); /* double free */
        valid();
        gs_pproc_del(p);
        ck_assert_int_eq(gs_palloc_del(a), 0);
        valid();
}
END_TEST

START_TEST(test_grant_and_accounting)
{
        struct gs_palloc *a;
        struct gs_pproc *p;
        struct gs_pproc_stats st;
        struct gs_palloc_stats as;
        ck_assert_int_eq(gs_palloc_new(pool, 2, 0, &a), 0);
        ck_assert_int_eq(gs_pproc_new(a, 8, &p), 0);
        uint64_t x = must_malloc(p, 20 * GS_MiB);
        ck_assert_uint_eq(ngrants, 1);
        ck_assert_uint_eq(grants[0].slot, 0);
        uint64_t y = must_malloc(p, 100);
        ck_assert_uint_eq(ngrants, 0); /* same chunk */
        gs_pproc_stats(p, &st);
        ck_assert_uint_eq(st.chunks_held, 1);
        ck_assert_uint_eq(st.nblocks, 2);
        ck_assert_uint_eq(st.bytes_requested, 20 * GS_MiB + 100);
        /* 20 MiB is handed out exactly, not as a 32 MiB block */
        ck_assert_uint_eq(st.bytes_in_blocks, 20 * GS_MiB + 256);
        ck_assert_uint_eq(st.bytes_obtainable, 2 * CHUNK - 20 * GS_MiB - 256);
        gs_palloc_stats(a, &as);
        ck_assert_uint_eq(as.quota_chunks, 2);
        ck_assert_uint_eq(as.chunks_free, 1);
        ck_assert_uint_eq(as.chunks_held, 1);
        ck_assert_uint_eq(as.bytes_in_blocks, st.bytes_in_blocks);
        uint64_t base, size;
        ck_assert_int_eq(gs_pproc_range(p, x + 17 * GS_MiB, &base, &size), 0);
        ck_assert_uint_eq(base, x);
        ck_assert_uint_eq(size, 20 * GS_MiB);
        ck_assert_int_eq(gs_pproc_range(p, y + 99, &base, &size), 0);
        ck_assert_uint_eq(base, y);
        must_free(p, x);
        struct gs_release rel = must_free(p, y);
        ck_assert_uint_eq(rel.count, 0); /* the only empty chunk stays cached */
        gs_pproc_stats(p, &st);
        ck_assert_uint_eq(st.chunks_empty, 1);
        ck_assert_uint_eq(st.nblocks, 0);
        ck_assert_uint_eq(st.bytes_in_blocks, 0);
        /* cached: the next request needs no grant */
        must_malloc(p, 4096);
        ck_assert_uint_eq(ngrants, 0);
        gs_pproc_del(p);
        gs_palloc_stats(a, &as);
        ck_assert_uint_eq(as.chunks_free, 2);
        ck_assert_uint_eq(as.bytes_requested, 0);
        ck_assert_int_eq(gs_palloc_del(a), 0);
}
END_TEST

START_TEST(test_slab_path)
{
        struct gs_palloc *a;
        struct gs_pproc *p;
        struct gs_pproc_stats st;
        uint64_t off[200];
        ck_assert_int_eq(gs_palloc_new(pool, 1, 0, &a), 0);
        ck_assert_int_eq(gs_pproc_new(a, 8, &p), 0);
        for (int i = 0; i < 200; i++)
                off[i] = must_malloc(p, 2049);
        gs_pproc_stats(p, &st);
        ck_assert_uint_eq(st.bytes_in_blocks, 200 * 2304);
        /* 2nd..114th share one slab of 113 slots: consecutive 2304 B slots */
        ck_assert_uint_eq(off[2] - off[1], 2304);
        ck_assert_uint_eq(off[1] % (256 * GS_KiB), 0);
        uint64_t base, size;
        ck_assert_int_eq(gs_pproc_range(p, off[5] + 2000, &base, &size), 0);
        ck_assert_uint_eq(base, off[5]);
        ck_assert_uint_eq(size, 2049);
        ck_assert_int_eq(gs_pproc_range(p, off[5] + 2100, &base, &size), -ENOENT);
        struct gs_release rel;
        struct gs_pproc_stats st0, st1;
        gs_pproc_stats(p, &st0);
        ck_assert_int_eq(gs_pproc_free(p, off[5] + 256, &rel), -ENOENT);    /* inside a slot */
        ck_assert_int_eq(gs_pproc_free(p, off[199] + 2304, &rel), -ENOENT); /* a free slot */
        ck_assert_int_eq(gs_pproc_range(p, off[199] + 2304, &base, &size), -ENOENT);
        gs_pproc_stats(p, &st1);
        ck_assert_int_eq(memcmp(&st0, &st1, sizeof(st0)), 0);
        must_free(p, off[1]); /* slot 0 of its slab: same offset as the slab's block */
        ck_assert_int_eq(gs_pproc_free(p, off[1], &rel), -ENOENT);
        ck_assert_int_eq(gs_pproc_free(p, off[7], &rel), 0);
        ck_assert_int_eq(gs_pproc_free(p, off[7], &rel), -ENOENT); /* double free */
        valid();
        off[7] = must_malloc(p, 2049); /* the lowest free slot again */
        ck_assert_uint_eq(off[7], off[1]);
        off[1] = must_malloc(p, 2304);
        for (int i = 0; i < 200; i++)
                must_free(p, off[i]);
        gs_pproc_stats(p, &st);
        ck_assert_uint_eq(st.nblocks, 0);
        ck_assert_uint_eq(st.chunks_empty, 1);
        gs_pproc_del(p);
        ck_assert_int_eq(gs_palloc_del(a), 0);
}
END_TEST

/* The live-block caps bound the agent's memory: past either a request
 * is -ENOMEM (the hook's CUDA_ERROR_OUT_OF_MEMORY) and nothing changes;
 * a free makes room again. */
START_TEST(test_block_caps)
{
        struct gs_palloc *a;
        struct gs_pproc *p, *q;
        struct gs_pproc_stats st0, st1;
        struct gs_palloc_stats as;
        uint64_t off[8], x;
        ck_assert_int_eq(gs_pool_set_block_caps(pool, 0, 5), -EINVAL);
        ck_assert_int_eq(gs_pool_set_block_caps(pool, 3, 0), -EINVAL);
        ck_assert_int_eq(gs_pool_set_block_caps(pool, 3, 5), 0);
        ck_assert_int_eq(gs_palloc_new(pool, 4, 0, &a), 0);
        ck_assert_int_eq(gs_pproc_new(a, 16, &p), 0);
        ck_assert_int_eq(gs_pproc_new(a, 16, &q), 0);
        off[0] = must_malloc(p, 256);       /* buddy */
        off[1] = must_malloc(p, 256);       /* slab */
        off[2] = must_malloc(p, 2 * CHUNK); /* coalesced: one block too */
        gs_pproc_stats(p, &st0);
        ck_assert_uint_eq(st0.nblocks, 3);
        /* the process is at its cap, whatever the size */
        ck_assert_int_eq(gs_pproc_malloc(p, 256, &x, grants, 16, &ngrants), -ENOMEM);
        ck_assert_int_eq(gs_pproc_malloc(p, 64 * GS_MiB, &x, grants, 16, &ngrants), -ENOMEM);
        ck_assert_int_eq(gs_pproc_malloc(p, CHUNK + 1, &x, grants, 16, &ngrants), -ENOMEM);
        gs_pproc_stats(p, &st1);
        ck_assert_int_eq(memcmp(&st0, &st1, sizeof(st0)), 0);
        valid();
        /* the allocation has 5: q gets 2 more */
        off[3] = must_malloc(q, 512);
        off[4] = must_malloc(q, 512);
        gs_palloc_stats(a, &as);
        ck_assert_uint_eq(as.nblocks, 5);
        ck_assert_int_eq(gs_pproc_malloc(q, 512, &x, grants, 16, &ngrants), -ENOMEM);
        /* a free makes room for one, in either process */
        must_free(p, off[1]);
        gs_palloc_stats(a, &as);
        ck_assert_uint_eq(as.nblocks, 4);
        off[1] = must_malloc(p, 256);
        ck_assert_int_eq(gs_pproc_malloc(q, 512, &x, grants, 16, &ngrants), -ENOMEM);
        gs_pproc_del(p); /* its blocks leave the allocation's count */
        gs_palloc_stats(a, &as);
        ck_assert_uint_eq(as.nblocks, 2);
        off[5] = must_malloc(q, 512);
        ck_assert_int_eq(gs_pproc_malloc(q, 512, &x, grants, 16, &ngrants), -ENOMEM); /* q: 3 */
        /* raising the caps lets it go on */
        ck_assert_int_eq(gs_pool_set_block_caps(pool, 4, 5), 0);
        off[6] = must_malloc(q, 512);
        gs_pproc_del(q);
        gs_palloc_stats(a, &as);
        ck_assert_uint_eq(as.nblocks, 0);
        ck_assert_int_eq(gs_palloc_del(a), 0);
        valid();
}
END_TEST

START_TEST(test_coalesced)
{
        struct gs_palloc *a;
        struct gs_pproc *p;
        ck_assert_int_eq(gs_palloc_new(pool, 8, 0, &a), 0);
        ck_assert_int_eq(gs_pproc_new(a, 16, &p), 0);
        uint64_t s = must_malloc(p, 1000); /* slot 0 */
        uint64_t x = must_malloc(p, 3 * CHUNK - 5);
        ck_assert_uint_eq(ngrants, 3);
        ck_assert_uint_eq(x, 1 * CHUNK);
        for (uint32_t i = 0; i < 3; i++)
                ck_assert_uint_eq(grants[i].slot, 1 + i);
        uint64_t base, size;
        ck_assert_int_eq(gs_pproc_range(p, x + 2 * CHUNK + 7, &base, &size), 0);
        ck_assert_uint_eq(base, x);
        ck_assert_uint_eq(size, 3 * CHUNK - 5);
        struct gs_release rel;
        ck_assert_int_eq(gs_pproc_free(p, x + CHUNK, &rel), -ENOENT);
        ck_assert_int_eq(gs_pproc_release(p, 2, 1), -EBUSY);
        /* not enough chunks left for 6 more */
        uint64_t off;
        ck_assert_int_eq(gs_pproc_malloc(p, 5 * CHUNK, &off, grants, 16, &ngrants), -ENOMEM);
        rel = must_free(p, x);
        /* The allocation still has 4 free chunks for its other processes:
         * the block's 3 chunks stay cached. */
        ck_assert_uint_eq(rel.count, 0);
        valid();
        struct gs_pproc_stats st;
        gs_pproc_stats(p, &st);
        ck_assert_uint_eq(st.chunks_held, 4);
        ck_assert_uint_eq(st.chunks_empty, 3);
        /* The same size again reuses them: no grant, same place. */
        x = must_malloc(p, 3 * CHUNK - 5);
        ck_assert_uint_eq(ngrants, 0);
        ck_assert_uint_eq(x, 1 * CHUNK);
        valid();
        /* Under pressure (fewer free chunks in the allocation than the
         * block had) all but one go back at once. */
        uint64_t y = must_malloc(p, 3 * CHUNK);
        ck_assert_uint_eq(ngrants, 3);
        ck_assert_uint_eq(y, 4 * CHUNK);
        rel = must_free(p, x);
        ck_assert_uint_eq(rel.first_slot, 1);
        ck_assert_uint_eq(rel.count, 2);
        ck_assert_int_eq(gs_pproc_release(p, rel.first_slot, rel.count), 0);
        valid();
        gs_pproc_stats(p, &st);
        ck_assert_uint_eq(st.chunks_held, 5);
        ck_assert_uint_eq(st.chunks_empty, 1);
        rel = must_free(p, y);
        ck_assert_uint_eq(rel.count, 0); /* 3 free in the allocation again */
        must_free(p, s);
        gs_pproc_del(p);
        ck_assert_int_eq(gs_palloc_del(a), 0);
        valid();
}
END_TEST

START_TEST(test_coalesced_tail)
{
        struct gs_palloc *a;
        struct gs_pproc *p;
        struct gs_pproc_stats st;
        struct gs_release rel;
        ck_assert_int_eq(gs_palloc_new(pool, 4, 0, &a), 0);
        ck_assert_int_eq(gs_pproc_new(a, 16, &p), 0);
        /* 300 MiB: one whole chunk plus a 44 MiB tail in the next */
        uint64_t x = must_malloc(p, 300 * GS_MiB);
        ck_assert_uint_eq(ngrants, 2);
        gs_pproc_stats(p, &st);
        ck_assert_uint_eq(st.bytes_in_blocks, 300 * GS_MiB);
        ck_assert_uint_eq(st.chunks_empty, 0);
        uint64_t base, size;
        ck_assert_int_eq(gs_pproc_range(p, x + 299 * GS_MiB, &base, &size), 0);
        ck_assert_uint_eq(base, x);
        ck_assert_int_eq(gs_pproc_free(p, x + CHUNK, &rel), -ENOENT); /* the tail's start */
        /* the rest of the tail's chunk serves other requests */
        uint64_t y = must_malloc(p, 128 * GS_MiB);
        ck_assert_uint_eq(ngrants, 0);
        ck_assert_uint_eq(y / CHUNK, 1);
        ck_assert_int_eq(gs_pproc_range(p, x + 301 * GS_MiB, &base, &size), -ENOENT);
        ck_assert_int_eq(gs_pproc_release(p, 1, 1), -EBUSY);
        rel = must_free(p, x);
        ck_assert_uint_eq(rel.count, 0); /* slot 0 is the only empty chunk */
        rel = must_free(p, y);
        ck_assert_uint_eq(rel.first_slot, 1);
        ck_assert_uint_eq(rel.count, 1);
        ck_assert_int_eq(gs_pproc_release(p, 0, 2), 0);
        valid();
        gs_pproc_del(p);
        ck_assert_int_eq(gs_palloc_del(a), 0);
}
END_TEST

START_TEST(test_no_slots)
{
        struct gs_palloc *a;
        struct gs_pproc *p;
        uint64_t off;
        ck_assert_int_eq(gs_palloc_new(pool, 8, 0, &a), 0);
        ck_assert_int_eq(gs_pproc_new(a, 3, &p), 0);
        must_malloc(p, CHUNK / 2 + 1); /* slot 0 */
        ck_assert_int_eq(gs_pproc_malloc(p, 3 * CHUNK, &off, grants, 16, &ngrants), -ENOSPC);
        must_malloc(p, CHUNK / 2 + 1);                                            /* slot 1 */
        must_malloc(p, CHUNK / 2 + 1);                                            /* slot 2 */
        ck_assert_int_eq(gs_pproc_malloc(p, 256, &off, grants, 16, &ngrants), 0); /* tails */
        ck_assert_int_eq(gs_pproc_malloc(p, CHUNK / 2, &off, grants, 16, &ngrants), -ENOSPC);
        ck_assert_int_eq(gs_pproc_malloc(p, CHUNK / 2, &off, grants, 0, &ngrants), -ENOSPC);
        valid();
        gs_pproc_del(p);
        ck_assert_int_eq(gs_palloc_del(a), 0);
}
END_TEST

static int nreturned;
static int on_return(void *ctx, uint32_t chunk)
{
        (void)chunk;
        *(int *)ctx += 1;
        nreturned++;
        return 0;
}

START_TEST(test_balloon)
{
        struct gs_palloc *a, *b;
        struct gs_pproc *p;
        struct gs_palloc_stats as;
        struct gs_pool_stats ps;
        int ctx = 0;
        uint64_t off, x[4];
        gs_pool_set_return_fn(pool, on_return, &ctx);
        ck_assert_int_eq(gs_palloc_new(pool, 2, 2, &a), 0);
        ck_assert_int_eq(gs_palloc_new(pool, 12, 0, &b), 0);
        ck_assert_int_eq(gs_pproc_new(a, 16, &p), 0);
        for (int i = 0; i < 4; i++)
                x[i] = must_malloc(p, CHUNK);
        gs_palloc_stats(a, &as);
        ck_assert_uint_eq(as.chunks_borrowed, 2);
        ck_assert_uint_eq(as.chunks_held, 4);
        gs_pool_stats(pool, &ps);
        ck_assert_uint_eq(ps.chunks_borrowed, 2);
        ck_assert_uint_eq(ps.chunks_free, 0);
        ck_assert_uint_eq(ps.chunks_reserved, 14);
        ck_assert_int_eq(gs_pproc_malloc(p, 256, &off, grants, 16, &ngrants), -ENOMEM);
        /* the first own chunk emptied and released repays a loan */
        must_free(p, x[0]);
        struct gs_release rel = must_free(p, x[1]);
        ck_assert_uint_eq(rel.count, 1);
        ck_assert_int_eq(gs_pproc_release(p, rel.first_slot, 1), 0);
        valid();
        gs_palloc_stats(a, &as);
        ck_assert_uint_eq(as.chunks_borrowed, 1);
        ck_assert_int_eq(ctx, 1);
        gs_pproc_del(p);
        gs_palloc_stats(a, &as);
        ck_assert_uint_eq(as.chunks_borrowed, 0);
        ck_assert_uint_eq(as.chunks_free, 2);
        ck_assert_int_eq(ctx, 2);
        gs_pool_stats(pool, &ps);
        ck_assert_uint_eq(ps.chunks_free, 2);
        ck_assert_uint_eq(ps.chunks_borrowed, 0);
        ck_assert_int_eq(gs_palloc_del(a), 0);
        ck_assert_int_eq(ctx, 4); /* its granted chunks were recycled */
        ck_assert_int_eq(gs_palloc_del(b), 0);
        ck_assert_int_eq(ctx, 4);
        valid();
}
END_TEST

START_TEST(test_release_hint)
{
        struct gs_palloc *a;
        struct gs_pproc *p;
        ck_assert_int_eq(gs_palloc_new(pool, 4, 0, &a), 0);
        ck_assert_int_eq(gs_pproc_new(a, 8, &p), 0);
        uint64_t x = must_malloc(p, CHUNK);
        uint64_t y = must_malloc(p, CHUNK);
        uint64_t z = must_malloc(p, 512);
        ck_assert_uint_eq(z / CHUNK, 2);
        struct gs_release rel = must_free(p, x);
        ck_assert_uint_eq(rel.count, 0);
        rel = must_free(p, y);
        ck_assert_uint_eq(rel.first_slot, 1);
        ck_assert_uint_eq(rel.count, 1);
        /* the hint is advice: the process may ignore it */
        rel = must_free(p, z);
        ck_assert_uint_eq(rel.first_slot, 2);
        ck_assert_uint_eq(rel.count, 1);
        ck_assert_int_eq(gs_pproc_release(p, 0, 3), 0);
        struct gs_pproc_stats st;
        gs_pproc_stats(p, &st);
        ck_assert_uint_eq(st.chunks_held, 0);
        ck_assert_int_eq(gs_pproc_free(p, z, NULL), -ENOENT);
        gs_pproc_del(p);
        ck_assert_int_eq(gs_palloc_del(a), 0);
}
END_TEST

/* hold_fn records, for the ledger test below. */
static int holds[16], hold_slot[16];
static void on_hold(void *ctx, uint32_t chunk, const void *tag, uint32_t slot, int held)
{
        (void)ctx;
        ck_assert_ptr_nonnull(tag);
        ck_assert_uint_lt(chunk, 16);
        holds[chunk] += held ? 1 : -1;
        hold_slot[chunk] = held ? (int)slot : -1;
}

/* After an agent restart (gs_pool.h "legacy"): chunks adopted at given
 * slots stay opaque until the process says which it maps and where its
 * live blocks are; then each claimed chunk is an ordinary buddy chunk with
 * those blocks in place, its free space handed out again. */
START_TEST(test_legacy)
{
        struct gs_palloc *a;
        struct gs_pproc *p;
        uint64_t base, size, off = 0, off2;
        uint32_t c;
        static int tag;

        memset(holds, 0, sizeof(holds));
        gs_pool_set_hold_fn(pool, on_hold, NULL);
        ck_assert_int_eq(gs_palloc_new(pool, 6, 0, &a), 0);
        ck_assert_int_eq(gs_pproc_new(a, 32, &p), 0);
        gs_pproc_set_tag(p, &tag);
        /* Seven slots held before (the ledger says so): one more than the
         * quota (past the cap, borrowed: it is held already). */
        uint32_t slots[] = { 3, 4, 5, 9, 12, 13, 14 };
        for (unsigned i = 0; i < 7; i++) {
                ck_assert_int_eq(gs_pproc_adopt(p, slots[i], &c), 0);
                ck_assert_int_eq(holds[c], 1);
                ck_assert_int_eq(hold_slot[c], (int)slots[i]);
                valid();
        }
        ck_assert_int_eq(gs_pproc_adopt(p, 3, &c), -EBUSY);
        ck_assert_int_eq(gs_pproc_adopt(p, 32, &c), -EBUSY);
        ck_assert_uint_eq(gs_pproc_legacy_chunks(p), 7);
        /* Before the claims nothing is handed out of them, and the quota is
         * used up: refused. */
        ck_assert_int_eq(gs_pproc_malloc(p, 4096, &off, grants, 16, &ngrants), -ENOMEM);
        /* A slot the ledger does not name: only within the quota (none left). */
        ck_assert_int_eq(gs_pproc_legacy_claim(p, 20, &c), -ENOMEM);
        /* The process maps 3, 4, 9, 12, 13, 14; not 5 (kept opaque). */
        uint32_t claimed[] = { 3, 4, 9, 12, 13, 14 };
        for (unsigned i = 0; i < 6; i++) {
                ck_assert_int_eq(gs_pproc_legacy_claim(p, claimed[i], &c), 0);
                ck_assert_uint_eq(c, UINT32_MAX);
        }
        valid();
        /* Blocks: one in 3, one spanning 3..4, one in 12, one over 13..14
         * (a coalesced block); 9 has none. */
        ck_assert_int_eq(gs_pproc_legacy_block(p, 3 * CHUNK + 4096, 1000), 0);
        ck_assert_int_eq(gs_pproc_legacy_block(p, 3 * CHUNK + CHUNK / 2, CHUNK), 0);
        ck_assert_int_eq(gs_pproc_legacy_block(p, 12 * CHUNK, 300), 0);
        ck_assert_int_eq(gs_pproc_legacy_block(p, 13 * CHUNK, CHUNK + 12345), 0);
        /* Not in claimed legacy slots, misaligned, empty: refused. */
        ck_assert_int_eq(gs_pproc_legacy_block(p, 5 * CHUNK, 256), -EINVAL);
        ck_assert_int_eq(gs_pproc_legacy_block(p, 7 * CHUNK, 256), -EINVAL);
        ck_assert_int_eq(gs_pproc_legacy_block(p, 3 * CHUNK + 8, 256), -EINVAL);
        ck_assert_int_eq(gs_pproc_legacy_block(p, 3 * CHUNK, 0), -EINVAL);
        valid();
        ck_assert_int_eq(gs_pproc_legacy_seal(p, true), 0);
        ck_assert_int_eq(gs_pproc_legacy_seal(p, true), -EALREADY);
        ck_assert_int_eq(gs_pproc_legacy_claim(p, 21, &c), -EALREADY);
        valid();
        /* Only 5 is opaque now; 9 is an empty chunk. */
        ck_assert_uint_eq(gs_pproc_legacy_chunks(p), 1);
        struct gs_pproc_stats st;
        gs_pproc_stats(p, &st);
        ck_assert_uint_eq(st.chunks_held, 7);
        ck_assert_uint_eq(st.chunks_empty, 1);
        ck_assert_uint_eq(st.nblocks, 4);
        /* Lookups inside legacy blocks. */
        ck_assert_int_eq(gs_pproc_range(p, 3 * CHUNK + CHUNK / 2 + CHUNK - 1, &base, &size), 0);
        ck_assert_uint_eq(base, 3 * CHUNK + CHUNK / 2);
        ck_assert_uint_eq(size, CHUNK);
        ck_assert_int_eq(gs_pproc_range(p, 3 * CHUNK + 4096 + 999, &base, &size), 0);
        ck_assert_uint_eq(base, 3 * CHUNK + 4096);
        ck_assert_int_eq(gs_pproc_range(p, 3 * CHUNK + 4096 + 1000, &base, &size), -ENOENT);
        ck_assert_int_eq(gs_pproc_range(p, 14 * CHUNK + 12344, &base, &size), 0);
        ck_assert_uint_eq(base, 13 * CHUNK);
        ck_assert_int_eq(gs_pproc_range(p, 5 * CHUNK, &base, &size), -ENOENT);
        /* The free space around the blocks serves new requests, without a
         * grant: half of chunk 4 is free. */
        off = must_malloc(p, CHUNK / 2);
        ck_assert_uint_eq(ngrants, 0);
        ck_assert_uint_eq(off, 4 * CHUNK + CHUNK / 2);
        off2 = must_malloc(p, 100000);
        ck_assert_uint_eq(ngrants, 0);
        ck_assert(off2 / CHUNK != 5);
        /* Frees of legacy blocks; a second is refused. */
        must_free(p, 3 * CHUNK + 4096);
        ck_assert_int_eq(gs_pproc_free(p, 3 * CHUNK + 4096, NULL), -ENOENT);
        must_free(p, 3 * CHUNK + CHUNK / 2);
        must_free(p, 13 * CHUNK);
        must_free(p, 12 * CHUNK);
        must_free(p, off);
        must_free(p, off2);
        gs_pproc_stats(p, &st);
        ck_assert_uint_eq(st.nblocks, 0);
        ck_assert_uint_eq(st.chunks_empty, 6); /* all but the opaque one */
        ck_assert_int_eq(gs_pproc_release(p, 5, 1), -EBUSY);
        ck_assert_int_eq(gs_pproc_release(p, 12, 1), 0);
        valid();
        /* The process goes: every chunk is back, the ledger told. */
        gs_pproc_del(p);
        valid();
        for (unsigned i = 0; i < 16; i++)
                ck_assert_int_eq(holds[i], 0);
        ck_assert_int_eq(gs_palloc_del(a), 0);
        valid();
}
END_TEST

/* Overlapping blocks, or an incomplete list: every legacy chunk stays
 * opaque; the blocks can still be freed and looked up. */
START_TEST(test_legacy_inexact)
{
        struct gs_palloc *a;
        struct gs_pproc *p;
        uint32_t c;
        uint64_t base, size;

        for (int complete = 0; complete < 2; complete++) {
                ck_assert_int_eq(gs_palloc_new(pool, 2, 0, &a), 0);
                ck_assert_int_eq(gs_pproc_new(a, 8, &p), 0);
                ck_assert_int_eq(gs_pproc_legacy_claim(p, 0, &c), 0);
                ck_assert_int_eq(gs_pproc_legacy_claim(p, 1, &c), 0);
                ck_assert_int_eq(gs_pproc_legacy_block(p, 0, 8192), 0);
                if (complete)
                        ck_assert_int_eq(gs_pproc_legacy_block(p, 4096, 256), 0); /* overlaps */
                ck_assert_int_eq(gs_pproc_legacy_seal(p, complete), complete ? -EINVAL : 0);
                valid();
                ck_assert_uint_eq(gs_pproc_legacy_chunks(p), 2);
                ck_assert_int_eq(gs_pproc_range(p, 100, &base, &size), 0);
                ck_assert_uint_eq(base, 0);
                must_free(p, 0);
                ck_assert_uint_eq(gs_pproc_legacy_chunks(p), 2); /* still opaque */
                uint64_t off;
                ck_assert_int_eq(gs_pproc_malloc(p, 256, &off, grants, 16, &ngrants), -ENOMEM);
                gs_pproc_del(p);
                ck_assert_int_eq(gs_palloc_del(a), 0);
                valid();
        }
}
END_TEST

/* Random legacy blocks of every size, sealed into the buddy; then random
 * requests and frees of both kinds, every invariant checked after each
 * step (debug build), until everything is freed. */
START_TEST(test_legacy_random)
{
        struct gs_palloc *a;
        struct gs_pproc *p;
        uint64_t live[512];
        unsigned nlive = 0;
        uint32_t c;

        srand(7);
        ck_assert_int_eq(gs_palloc_new(pool, 8, 0, &a), 0);
        ck_assert_int_eq(gs_pproc_new(a, 16, &p), 0);
        for (uint32_t s = 0; s < 4; s++)
                ck_assert_int_eq(gs_pproc_legacy_claim(p, s, &c), 0);
        /* Disjoint blocks at random 256-aligned places in slots 0..3. */
        for (uint64_t pos = 0; pos < 4 * CHUNK && nlive < 200;) {
                pos += (uint64_t)(rand() % 64) * 256 * (1 + (rand() % 4 == 0) * 4096);
                uint64_t sz = 1 + (uint64_t)rand() % (rand() % 8 == 0 ? CHUNK / 2 : 70000);
                if (pos + sz > 4 * CHUNK)
                        break;
                ck_assert_int_eq(gs_pproc_legacy_block(p, pos, sz), 0);
                live[nlive++] = pos;
                pos = gs_align_up(pos + sz, 256);
        }
        ck_assert_int_eq(gs_pproc_legacy_seal(p, true), 0);
        valid();
        for (int step = 0; step < 3000 || nlive; step++) {
                if (step < 3000 && nlive < 512 && rand() % 2) {
                        uint64_t off;
                        uint64_t sz = 1 + (uint64_t)rand() % (rand() % 16 == 0 ? CHUNK : 100000);
                        if (gs_pproc_malloc(p, sz, &off, grants, 16, &ngrants) == 0)
                                live[nlive++] = off;
                } else if (nlive) {
                        unsigned i = (unsigned)rand() % nlive;
                        ck_assert_int_eq(gs_pproc_free(p, live[i], NULL), 0);
                        live[i] = live[--nlive];
                }
                valid();
        }
        struct gs_pproc_stats st;
        gs_pproc_stats(p, &st);
        ck_assert_uint_eq(st.nblocks, 0);
        ck_assert_uint_eq(st.chunks_empty, st.chunks_held);
        gs_pproc_del(p);
        ck_assert_int_eq(gs_palloc_del(a), 0);
        valid();
}
END_TEST

START_TEST(test_two_procs_isolated)
{
        struct gs_palloc *a;
        struct gs_pproc *p, *q;
        ck_assert_int_eq(gs_palloc_new(pool, 2, 0, &a), 0);
        ck_assert_int_eq(gs_pproc_new(a, 4, &p), 0);
        ck_assert_int_eq(gs_pproc_new(a, 4, &q), 0);
        uint64_t x = must_malloc(p, 4096);
        uint32_t cp = grants[0].chunk;
        uint64_t y = must_malloc(q, 4096);
        ck_assert_uint_ne(grants[0].chunk, cp);
        ck_assert_uint_eq(x, y); /* each its own virtual range */
        uint64_t off;
        ck_assert_int_eq(gs_pproc_malloc(q, CHUNK, &off, grants, 4, &ngrants), -ENOMEM);
        gs_pproc_del(p);
        must_malloc(q, CHUNK); /* p's chunk came back to the allocation */
        ck_assert_uint_eq(grants[0].chunk, cp);
        gs_pproc_del(q);
        gs_pproc_del(NULL);
        ck_assert_int_eq(gs_palloc_del(a), 0);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("alloc");
        TCase *tc = tcase_create("core");
        /* A limit that only catches a hang: test_legacy_random validates the
         * pool after each of its 3000 operations, which took past check's
         * default 4 s under TSan on a loaded 2-core machine. */
        tcase_set_timeout(tc, 120);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_pool_args);
        tcase_add_test(tc, test_bad_input_leaves_state);
        tcase_add_test(tc, test_grant_and_accounting);
        tcase_add_test(tc, test_slab_path);
        tcase_add_test(tc, test_block_caps);
        tcase_add_test(tc, test_coalesced);
        tcase_add_test(tc, test_coalesced_tail);
        tcase_add_test(tc, test_no_slots);
        tcase_add_test(tc, test_balloon);
        tcase_add_test(tc, test_release_hint);
        tcase_add_test(tc, test_two_procs_isolated);
        tcase_add_test(tc, test_legacy);
        tcase_add_test(tc, test_legacy_inexact);
        tcase_add_test(tc, test_legacy_random);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
