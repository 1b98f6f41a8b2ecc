/* check_proc.c — HELLO validation of a process's first message (gs_proc.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_proc.h"

static void hello(struct gs_sock_hello *h)
{
        memset(h, 0, sizeof(*h));
        h->h.magic = GS_WIRE_MAGIC;
        h->h.version = GS_WIRE_VERSION;
        h->h.type = GS_SOCK_HELLO;
        h->h.len = sizeof(*h);
}

START_TEST(test_check_hello)
{
        struct gs_sock_hello h;
        char err[128];

        hello(&h);
        ck_assert_int_eq(gs_proc_check_hello(&h, sizeof(h), err, sizeof(err)), 0);
        ck_assert_int_eq(gs_proc_check_hello(&h, sizeof(h) - 1, err, sizeof(err)), -EPROTO);
        ck_assert_ptr_nonnull(strstr(err, "bytes"));
        h.h.magic = 0x12345678;
        ck_assert_int_eq(gs_proc_check_hello(&h, sizeof(h), err, sizeof(err)), -EPROTO);
        ck_assert_ptr_nonnull(strstr(err, "magic"));
        hello(&h);
        h.h.version = GS_WIRE_VERSION + 1;
        ck_assert_int_eq(gs_proc_check_hello(&h, sizeof(h), err, sizeof(err)), -EPROTO);
        ck_assert_ptr_nonnull(strstr(err, "version"));
        hello(&h);
        h.h.type = GS_SOCK_WELCOME;
        ck_assert_int_eq(gs_proc_check_hello(&h, sizeof(h), err, sizeof(err)), -EPROTO);
        hello(&h);
        h.h.len = 4096;
        ck_assert_int_eq(gs_proc_check_hello(&h, sizeof(h), err, sizeof(err)), -EPROTO);
        /* A reclaim (an agent restart) is a known flag; others are not. */
        hello(&h);
        h.flags = GS_HELLO_RECLAIM;
        ck_assert_int_eq(gs_proc_check_hello(&h, sizeof(h), err, sizeof(err)), 0);
        h.flags = 2;
        ck_assert_int_eq(gs_proc_check_hello(&h, sizeof(h), err, sizeof(err)), -EPROTO);
        ck_assert_ptr_nonnull(strstr(err, "flags"));
        hello(&h);
        h.h.reserved = 1;
        ck_assert_int_eq(gs_proc_check_hello(&h, sizeof(h), err, sizeof(err)), -EPROTO);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("proc");
        TCase *t = tcase_create("proc");

        tcase_add_test(t, test_check_hello);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}
