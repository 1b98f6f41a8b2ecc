/* check_arena.c — common/gs_arena.h: pieces zeroed and freed at once, the
 * arena reusable after; a failed allocation (an overflowing count, memory
 * refused) marks it failed and gs_arena_str still gives a string. */
#include <stdint.h>
#include <string.h>

#include "gs_arena.h"
#include "gs_check.h"

START_TEST(test_pieces_zeroed_and_grow)
{
        struct gs_arena a = { 0 };
        unsigned char *p[1000];

        for (size_t i = 0; i < GS_ARRAY_SIZE(p); i++) {
                p[i] = gs_arena_alloc(&a, i);
                ck_assert_ptr_nonnull(p[i]); /* size 0 gives a piece too */
                for (size_t k = 0; k < i; k++)
                        ck_assert_int_eq(p[i][k], 0);
                memset(p[i], 0xaa, i);
        }
        ck_assert_uint_eq(a.n, GS_ARRAY_SIZE(p));
        ck_assert(!a.failed);
        gs_arena_free(&a);
        ck_assert_uint_eq(a.n, 0);
        ck_assert_ptr_null(a.blocks);
        /* Reusable after, and free of an empty one is fine (twice). */
        ck_assert_ptr_nonnull(gs_arena_alloc(&a, 8));
        gs_arena_free(&a);
        gs_arena_free(&a);
}
END_TEST

START_TEST(test_strings)
{
        struct gs_arena a = { 0 };
        char *s;

        s = gs_arena_printf(&a, "%s-%d", "gpu", 7);
        ck_assert_str_eq(s, "gpu-7");
        ck_assert_str_eq(gs_arena_printf(&a, "%s", ""), "");
        s = gs_arena_str(&a, "uuid");
        ck_assert_str_eq(s, "uuid");
        ck_assert(!a.failed);
        gs_arena_free(&a);
}
END_TEST

START_TEST(test_array_overflow_marks_failed)
{
        struct gs_arena a = { 0 };
        uint32_t *v;

        v = gs_arena_array(&a, 16, sizeof(*v));
        ck_assert_ptr_nonnull(v);
        ck_assert_uint_eq(v[15], 0);
        ck_assert_ptr_nonnull(gs_arena_array(&a, 0, sizeof(*v)));
        ck_assert_ptr_nonnull(gs_arena_array(&a, 5, 0));
        ck_assert(!a.failed);
        /* A count from a peer times a size that wraps: refused, not a short piece. */
        ck_assert_ptr_null(gs_arena_array(&a, SIZE_MAX / 8 + 1, 8));
        ck_assert(a.failed);
        gs_arena_free(&a);
        ck_assert(!a.failed);
        ck_assert_ptr_null(gs_arena_array(&a, (size_t)1 << 63, 4));
        ck_assert(a.failed);
        gs_arena_free(&a);
}
END_TEST

/* ASan's allocator answers an impossible size with NULL, as libc's does,
 * instead of stopping the test. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
        return "allocator_may_return_null=1";
}

/* Memory refused: NULL and failed; the pieces before stay valid. */
START_TEST(test_out_of_memory)
{
        struct gs_arena a = { 0 };
        char *s = gs_arena_str(&a, "kept");

        ck_assert_ptr_null(gs_arena_alloc(&a, SIZE_MAX / 2));
        ck_assert(a.failed);
        ck_assert_str_eq(s, "kept");
        ck_assert_ptr_nonnull(gs_arena_alloc(&a, 8)); /* later ones may succeed; failed stays */
        ck_assert(a.failed);
        gs_arena_free(&a);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("arena");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_pieces_zeroed_and_grow);
        tcase_add_test(tc, test_strings);
        tcase_add_test(tc, test_array_overflow_marks_failed);
        tcase_add_test(tc, test_out_of_memory);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return gs_check_run(suite());
}
