/* check_allocs.c — allocations: ids of device-ID sets and the checkpoint line format (gs_allocs.h). */
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

START_TEST(test_parse_line)
{
        char line[512], id[17], dir[GS_ALLOCS_DIR_MAX];
        char *ids[4];
        uint64_t created = 0;

        snprintf(line, sizeof(line), "0123456789abcdef 1700000000 2 X-u0 X-u1\n");
        ck_assert_int_eq(gs_allocs_parse_line(line, id, &created, ids, 4, dir), 2);
        ck_assert_str_eq(id, "0123456789abcdef");
        ck_assert_uint_eq(created, 1700000000u);
        ck_assert_str_eq(ids[0], "X-u0");
        ck_assert_str_eq(ids[1], "X-u1");
        ck_assert_str_eq(dir, "0123456789abcdef"); /* v1: the directory is the id */
        snprintf(line, sizeof(line), "0123456789abcdef 1700000000 1 X-u0 dir=0123456789abcdef-00c0ffee\n");
        ck_assert_int_eq(gs_allocs_parse_line(line, id, &created, ids, 4, dir), 1);
        ck_assert_str_eq(ids[0], "X-u0");
        ck_assert_str_eq(dir, "0123456789abcdef-00c0ffee");
}
END_TEST

START_TEST(test_parse_line_rejects)
{
        static const char *bad[] = {
                "",
                "0123456789abcdeF 1 1 a",      /* upper case id */
                "0123456789abcde 1 1 a",       /* short id */
                "0123456789abcdef -1 1 a",     /* negative time */
                "0123456789abcdef x 1 a",      /* junk time */
                "0123456789abcdef 1 2 a",      /* fewer IDs than said */
                "0123456789abcdef 1 1 a b",    /* more IDs than said */
                "0123456789abcdef 1 0",        /* none */
                "0123456789abcdef 1 5 a b c d e", /* over max_ids */
                "0123456789abcdef 1 99999999999999999999999 a",
                "0123456789abcdef 1 1 a dir=../etc",      /* not one hex component */
                "0123456789abcdef 1 1 a dir=",
                "0123456789abcdef 1 1 a dir=ab dir=cd",
                "0123456789abcdef 1 1 a dir=ab b",
                "0123456789abcdef 1 2 a dir=ab b",
                "0123456789abcdef 1 1 a dir=0123456789abcdef-0123456789abcdef",
        };
        char line[128], id[17] = "unchanged", dir[GS_ALLOCS_DIR_MAX];
        char *ids[4];
        uint64_t created = 77;

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                snprintf(line, sizeof(line), "%s", bad[i]);
                ck_assert_msg(gs_allocs_parse_line(line, id, &created, ids, 4, dir) == -EINVAL,
                              "accepted '%s'", bad[i]);
                ck_assert_uint_eq(created, 77);
        }
}
END_TEST

int main(void)
{
        Suite *s = suite_create("allocs");
        TCase *t = tcase_create("allocs");

        tcase_add_test(t, test_id_stable_and_distinct);
        tcase_add_test(t, test_parse_line);
        tcase_add_test(t, test_parse_line_rejects);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}
