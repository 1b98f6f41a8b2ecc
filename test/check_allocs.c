/* check_allocs.c — allocations (gs_allocs.h): ids of device-ID sets, the owner; the
 * checkpoint format is check_ckpt.c's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_allocs.h"

START_TEST(test_id_stable_and_distinct)
{
        const char *a[] = { "GPU-00000000-0000-0000-0000-000000000001-u0",
                            "GPU-00000000-0000-0000-0000-000000000001-u1" };
        const char *b[] = { "GPU-00000000-0000-0000-0000-000000000001-u0" };
        const char *s1[] = { "ab", "c" }, *s2[] = { "a", "bc" };
        char x[17], y[17];

        gs_allocs_id(a, 2, x);
        gs_allocs_id(a, 2, y);
        ck_assert_str_eq(x, y);
        ck_assert_uint_eq(strlen(x), 16);
        ck_assert_uint_eq(strspn(x, "0123456789abcdef"), 16);
        gs_allocs_id(b, 1, y);
        ck_assert_str_ne(x, y);
        /* The separator keeps {"ab","c"} and {"a","bc"} apart. */
        gs_allocs_id(s1, 2, x);
        gs_allocs_id(s2, 2, y);
        ck_assert_str_ne(x, y);
}
END_TEST

/* The owner is the allocation's: a claim's is found by its UID (not
 * while it is being released), a device plugin's has no claim. */
START_TEST(test_owner)
{
        struct gs_node n;
        struct gs_allocation a = { .kind = GS_OWNER_CLAIM }, b = { .kind = GS_OWNER_DEVICES };

        memset(&n, 0, sizeof(n));
        snprintf(a.claim.uid, sizeof(a.claim.uid), "11111111-1111-1111-1111-111111111111");
        snprintf(b.id, sizeof(b.id), "bbbbbbbbbbbbbbbb");
        a.next = &b;
        n.allocs = &a;
        ck_assert_ptr_eq(gs_allocs_claim(&a), &a.claim);
        ck_assert_ptr_null(gs_allocs_claim(&b));
        ck_assert_ptr_eq(gs_allocs_find_claim(&n, "11111111-1111-1111-1111-111111111111"), &a);
        ck_assert_ptr_null(gs_allocs_find_claim(&n, "bbbbbbbbbbbbbbbb"));
        a.releasing = true;
        ck_assert_ptr_null(gs_allocs_find_claim(&n, "11111111-1111-1111-1111-111111111111"));
}
END_TEST

int main(void)
{
        Suite *s = suite_create("allocs");
        TCase *t = tcase_create("allocs");

        tcase_add_test(t, test_id_stable_and_distinct);
        tcase_add_test(t, test_owner);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}
