/* check_buddy.c — the buddy level on its own (agent/alloc/gs_buddy.h). */
#include <check.h>

#include "gs_check.h"
#include <stdlib.h>

#include "gs_buddy.h"

#define CHUNK_SHIFT 20u /* 1 MiB chunks keep the trees small */
#define CHUNK (UINT64_C(1) << CHUNK_SHIFT)

static struct gs_buddy b;

static void setup(void)
{
        ck_assert_int_eq(gs_buddy_init(&b, CHUNK_SHIFT), 0);
}
static void teardown(void)
{
        gs_buddy_fini(&b);
}

static void valid(void)
{
        char why[256] = "";
        int r = gs_buddy_validate(&b, why, sizeof(why));
        ck_assert_msg(r == 0, "validate: %s", why);
}

static struct gs_blk *alloc_ok(uint64_t size)
{
        struct gs_blk *x = NULL;
        ck_assert_int_eq(gs_buddy_alloc(&b, size, size, GS_BLK_USED, &x), 0);
        valid();
        return x;
}

static uint64_t free_ok(struct gs_blk *x)
{
        uint64_t empty = 0;
        ck_assert_int_eq(gs_buddy_free(&b, x, &empty), 0);
        valid();
        return empty;
}

START_TEST(test_bad_args)
{
        struct gs_buddy z;
        struct gs_blk *x = NULL;

        ck_assert_int_eq(gs_buddy_init(&z, 15), -EINVAL);
        gs_buddy_fini(&z);
        ck_assert_int_eq(gs_buddy_alloc(&b, 256, 256, GS_BLK_USED, &x), -ENOSPC);
        ck_assert_int_eq(gs_buddy_add_chunk(&b, 0), 0);
        ck_assert_int_eq(gs_buddy_alloc(&b, 0, 0, GS_BLK_USED, &x), -EINVAL);
        ck_assert_int_eq(gs_buddy_alloc(&b, CHUNK + 1, 1, GS_BLK_USED, &x), -EINVAL);
        ck_assert_ptr_null(x);
        ck_assert_int_eq(gs_buddy_remove_chunk(&b, CHUNK), -EBUSY);
        valid();
}
END_TEST

START_TEST(test_split_and_merge)
{
        ck_assert_int_eq(gs_buddy_add_chunk(&b, 3 * CHUNK), 0);
        ck_assert_uint_eq(b.nchunks_empty, 1);
        struct gs_blk *x = alloc_ok(1);
        ck_assert_uint_eq(x->off, 3 * CHUNK);
        ck_assert_uint_eq(x->size, 256);
        ck_assert_uint_eq(b.nchunks_empty, 0);
        /* one free block of each order 8..19 remains */
        for (unsigned o = 8; o < CHUNK_SHIFT; o++)
                ck_assert_ptr_nonnull(b.free_head[o]);
        struct gs_blk *y = alloc_ok(256);
        ck_assert_uint_eq(y->off, 3 * CHUNK + 256);
        ck_assert_uint_eq(free_ok(x), UINT64_MAX);
        ck_assert_uint_eq(free_ok(y), 3 * CHUNK);
        ck_assert_uint_eq(b.nchunks_empty, 1);
        ck_assert_uint_eq(b.tab_n, 1);
        ck_assert_int_eq(gs_buddy_remove_chunk(&b, 3 * CHUNK), 0);
        ck_assert_uint_eq(b.nchunks, 0);
        valid();
}
END_TEST

START_TEST(test_exact_tail)
{
        /* 20/32 of a chunk: the block is 16 + 4, the 4 + 8 tail is free */
        uint64_t s = CHUNK / 32 * 20;
        ck_assert_int_eq(gs_buddy_add_chunk(&b, 0), 0);
        struct gs_blk *x = alloc_ok(s);
        ck_assert_uint_eq(x->size, s);
        ck_assert_uint_eq(b.bytes_used, s);
        struct gs_blk *t4 = gs_buddy_find(&b, s);
        ck_assert_ptr_nonnull(t4);
        ck_assert_int_eq(t4->kind, GS_BLK_FREE);
        ck_assert_uint_eq(t4->size, CHUNK / 32 * 4);
        struct gs_blk *t8 = gs_buddy_find(&b, CHUNK / 32 * 24);
        ck_assert_ptr_nonnull(t8);
        ck_assert_uint_eq(t8->size, CHUNK / 32 * 8);
        /* the freed tail serves the next request: 12/32 fits exactly */
        struct gs_blk *y = alloc_ok(CHUNK / 32 * 8);
        ck_assert_uint_eq(y->off, CHUNK / 32 * 24);
        /* interior offsets are not blocks */
        ck_assert_ptr_eq(gs_buddy_find_containing(&b, CHUNK / 32 * 17), x);
        ck_assert_ptr_eq(gs_buddy_find_containing(&b, CHUNK / 32 * 25), y);
        ck_assert_ptr_eq(gs_buddy_find_containing(&b, CHUNK / 32 * 21), t4);
        free_ok(x);
        ck_assert_uint_eq(free_ok(y), 0);
}
END_TEST

START_TEST(test_odd_sizes_alignment)
{
        /* 2049 B rounds to 2304 = 2048 + 256, aligned to 4096 */
        ck_assert_int_eq(gs_buddy_add_chunk(&b, 0), 0);
        struct gs_blk *x = alloc_ok(2049);
        ck_assert_uint_eq(x->size, 2304);
        ck_assert_uint_eq(x->off % 4096, 0);
        struct gs_blk *y = alloc_ok(2049);
        ck_assert_uint_eq(y->off % 4096, 0);
        ck_assert_uint_ne(x->off, y->off);
        struct gs_blk *z = alloc_ok(1792); /* 1024 + 512 + 256 */
        ck_assert_uint_eq(z->size, 1792);
        free_ok(y);
        free_ok(x);
        ck_assert_uint_eq(free_ok(z), 0);
}
END_TEST

START_TEST(test_no_space_then_chunk)
{
        struct gs_blk *x = NULL, *y = NULL;
        ck_assert_int_eq(gs_buddy_add_chunk(&b, 0), 0);
        x = alloc_ok(CHUNK);
        ck_assert_int_eq(gs_buddy_alloc(&b, 256, 256, GS_BLK_USED, &y), -ENOSPC);
        ck_assert_int_eq(gs_buddy_add_chunk(&b, CHUNK), 0);
        y = alloc_ok(CHUNK / 2 + 256);
        ck_assert_uint_eq(y->off, CHUNK);
        ck_assert_int_eq(gs_buddy_remove_chunk(&b, 0), -EBUSY);
        ck_assert_uint_eq(free_ok(x), 0);
        ck_assert_int_eq(gs_buddy_remove_chunk(&b, 0), 0);
        ck_assert_uint_eq(free_ok(y), CHUNK);
        valid();
}
END_TEST

/* Of two free blocks of the right order, the one in the fuller chunk is
 * taken, even when the other is at the head of the free list. */
START_TEST(test_fullest_chunk_first)
{
        const uint64_t q = CHUNK / 4;
        ck_assert_int_eq(gs_buddy_add_chunk(&b, 0), 0);
        ck_assert_int_eq(gs_buddy_add_chunk(&b, CHUNK), 0);
        struct gs_blk *p1 = alloc_ok(q), *p2 = alloc_ok(q);
        ck_assert_uint_eq(p1->off, CHUNK);
        ck_assert_uint_eq(p2->off, CHUNK + q);
        struct gs_blk *w = alloc_ok(3 * q);
        ck_assert_uint_eq(w->off, 0);
        ck_assert_uint_eq(b.fill[0], 3 * q);
        ck_assert_uint_eq(b.fill[1], 2 * q);
        ck_assert_uint_eq(free_ok(p2), UINT64_MAX); /* now the head of order q */
        ck_assert_uint_eq(b.free_head[CHUNK_SHIFT - 2]->off, CHUNK + q);
        struct gs_blk *y = alloc_ok(q);
        ck_assert_uint_eq(y->off, 3 * q); /* chunk 0: 3/4 full, chunk 1: 1/4 */
        ck_assert_uint_eq(b.fill[0], CHUNK);
        ck_assert_uint_eq(free_ok(p1), CHUNK);
        ck_assert_uint_eq(b.fill[1], 0);
        b.fill[1] = 256; /* corrupt: the validator must see it */
        ck_assert_int_eq(gs_buddy_validate(&b, NULL, 0), -EUCLEAN);
        b.fill[1] = 0;
        valid();
}
END_TEST

START_TEST(test_validate_catches)
{
        char why[128] = "";
        ck_assert_int_eq(gs_buddy_add_chunk(&b, 0), 0);
        struct gs_blk *x = alloc_ok(4096);
        x->size = 8192; /* corrupt: chunk no longer tiled, bytes_used off */
        ck_assert_int_eq(gs_buddy_validate(&b, why, sizeof(why)), -EUCLEAN);
        ck_assert(why[0] != 0);
        x->size = 4096;
        valid();
        b.nonempty ^= 1u << 12;
        ck_assert_int_eq(gs_buddy_validate(&b, NULL, 0), -EUCLEAN);
        b.nonempty ^= 1u << 12;
        valid();
}
END_TEST

/* Many random blocks in 4 chunks against a byte map of which 256 B units
 * are taken. */
START_TEST(test_random)
{
        enum { NCH = 4, UNITS = NCH * (CHUNK >> 8), N = 512 };
        static unsigned char map[UNITS];
        struct gs_blk *live[N] = { 0 };
        unsigned seed = 12345;
        for (unsigned c = 0; c < NCH; c++)
                ck_assert_int_eq(gs_buddy_add_chunk(&b, (uint64_t)c * CHUNK), 0);
        for (int step = 0; step < 20000; step++) {
                int i = rand_r(&seed) % N;
                if (live[i]) {
                        uint64_t u0 = live[i]->off >> 8, n = live[i]->size >> 8;
                        for (uint64_t u = u0; u < u0 + n; u++)
                                map[u] = 0;
                        uint64_t e;
                        ck_assert_int_eq(gs_buddy_free(&b, live[i], &e), 0);
                        live[i] = NULL;
                } else {
                        uint64_t size = 1 + (uint64_t)rand_r(&seed) % (rand_r(&seed) % 4 ? 8192 : CHUNK / 4);
                        struct gs_blk *x = NULL;
                        int r = gs_buddy_alloc(&b, size, size, GS_BLK_USED, &x);
                        if (r == -ENOSPC)
                                continue;
                        ck_assert_int_eq(r, 0);
                        ck_assert_uint_eq(x->size, gs_align_up(size, 256));
                        ck_assert_uint_eq(x->off / CHUNK, (x->off + x->size - 1) / CHUNK);
                        for (uint64_t u = x->off >> 8; u < (x->off + x->size) >> 8; u++) {
                                ck_assert_int_eq(map[u], 0);
                                map[u] = 1;
                        }
                        live[i] = x;
                }
                if (step % 97 == 0)
                        valid();
        }
        for (int i = 0; i < N; i++)
                if (live[i]) {
                        uint64_t e;
                        ck_assert_int_eq(gs_buddy_free(&b, live[i], &e), 0);
                }
        valid();
        ck_assert_uint_eq(b.nchunks_empty, NCH);
        ck_assert_uint_eq(b.tab_n, NCH);
        ck_assert_uint_eq(b.bytes_used, 0);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("buddy");
        TCase *tc = tcase_create("core");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_bad_args);
        tcase_add_test(tc, test_split_and_merge);
        tcase_add_test(tc, test_exact_tail);
        tcase_add_test(tc, test_odd_sizes_alignment);
        tcase_add_test(tc, test_no_space_then_chunk);
        tcase_add_test(tc, test_fullest_chunk_first);
        tcase_add_test(tc, test_validate_catches);
        tcase_add_test(tc, test_random);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
