/* check_logrep.c — "log once, then count" (common/gs_logrep.h): a repeated
 * condition is one line, its count comes with the next line about it (after
 * the interval, when cleared, when its slot is taken), interleaved
 * conditions are each logged once, memory stays bounded, and threads
 * repeating at once count every repeat. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_logrep.h"

static int log_fd = -1;

static void capture(void)
{
        log_fd = gs_check_capture_stderr();
        gs_log_init("test", GS_LOG_INFO);
}

static int count(const char *s)
{
        return gs_check_log_count(log_fd, s);
}

START_TEST(test_once_then_counted)
{
        static struct gs_logrep r = GS_LOGREP_INIT;

        capture();
        for (int i = 0; i < 100; i++)
                gs_logrep(&r, GS_LOG_WARN, 44, "GPU 0: chunk %d not re-created yet", 44);
        ck_assert_int_eq(count("chunk 44 not re-created yet"), 1);
        ck_assert_int_eq(count("repeated"), 0);
        ck_assert_uint_eq(gs_logrep_pending(&r, 44), 99);
        /* Over: the count is logged with the last line, and the next
         * occurrence is logged afresh. */
        gs_logrep_clear(&r, 44);
        ck_assert_int_eq(count("chunk 44 not re-created yet (repeated 99 times in the last"), 1);
        ck_assert_uint_eq(gs_logrep_pending(&r, 44), 0);
        gs_logrep(&r, GS_LOG_WARN, 44, "GPU 0: chunk %d not re-created yet", 44);
        ck_assert_int_eq(count("chunk 44 not re-created yet"), 3);
        gs_logrep_clear(&r, 44); /* nothing repeated since: no line */
        gs_logrep_clear(&r, 45); /* never seen: nothing */
        ck_assert_int_eq(count("chunk 44 not re-created yet"), 3);
}
END_TEST

START_TEST(test_interleaved_keys)
{
        static struct gs_logrep r = GS_LOGREP_INIT;

        capture();
        /* Two GPUs failing in turn, as on the H200 node: one line each. */
        for (int retry = 0; retry < 50; retry++)
                for (unsigned g = 0; g < 2; g++)
                        for (int i = 0; i < 6; i++)
                                gs_logrep(&r, GS_LOG_WARN, (uint64_t)g << 32 | 44, "GPU %u: chunk 44", g);
        ck_assert_int_eq(count("GPU 0: chunk 44"), 1);
        ck_assert_int_eq(count("GPU 1: chunk 44"), 1);
        ck_assert_uint_eq(gs_logrep_pending(&r, (uint64_t)1 << 32 | 44), 299);
}
END_TEST

START_TEST(test_periodic)
{
        static struct gs_logrep r = GS_LOGREP_INIT;

        capture();
        for (int i = 0; i < 5; i++)
                gs_logrep(&r, GS_LOG_WARN, 1, "still failing: %d", i);
        ck_assert_int_eq(count("still failing"), 1);
        /* The interval over (0: always): the next occurrence is logged, with
         * the count of those not logged. */
        r.interval_ms = 0;
        gs_logrep(&r, GS_LOG_WARN, 1, "still failing: %d", 5);
        ck_assert_int_eq(count("still failing: 5 (repeated 4 times in the last"), 1);
        gs_logrep(&r, GS_LOG_WARN, 1, "still failing: %d", 6);
        ck_assert_int_eq(count("still failing: 6\n"), 1); /* none between: no count */
}
END_TEST

START_TEST(test_bounded)
{
        static struct gs_logrep r = GS_LOGREP_INIT;
        char s[64];

        capture();
        /* More conditions than slots: the one logged longest ago gives its
         * slot up, its count logged first; memory is the struct's. */
        for (int i = 0; i < 3; i++)
                gs_logrep(&r, GS_LOG_WARN, 0, "key %d", 0);
        for (uint64_t k = 1; k < GS_LOGREP_SLOTS; k++)
                gs_logrep(&r, GS_LOG_WARN, k, "key %llu", (unsigned long long)k);
        ck_assert_int_eq(count("repeated"), 0);
        gs_logrep(&r, GS_LOG_WARN, 1000, "key %d", 1000);
        ck_assert_int_eq(count("key 0 (repeated 2 times"), 1);
        ck_assert_int_eq(count("key 1000"), 1);
        /* A key that lost its slot is logged again when it comes back. */
        gs_logrep(&r, GS_LOG_WARN, 0, "key %d", 0);
        snprintf(s, sizeof(s), "key 0\n");
        ck_assert_int_eq(count(s), 2);
        ck_assert_uint_le(sizeof(r), 4096);
}
END_TEST

START_TEST(test_level)
{
        static struct gs_logrep r = GS_LOGREP_INIT;

        capture();
        gs_log_set_level(GS_LOG_WARN);
        for (int i = 0; i < 3; i++)
                gs_logrep(&r, GS_LOG_INFO, 7, "quiet %d", i);
        ck_assert_int_eq(count("quiet"), 0);
        ck_assert_uint_eq(gs_logrep_pending(&r, 7), 0);
        /* The call-site form. */
        for (int i = 0; i < 3; i++)
                log_warn_rep(7, "site %d", i);
        ck_assert_int_eq(count("site 0"), 1);
        ck_assert_int_eq(count("site"), 1);
}
END_TEST

static struct gs_logrep shared = GS_LOGREP_INIT;

static void *hammer(void *arg)
{
        (void)arg;
        for (int i = 0; i < 10000; i++)
                gs_logrep(&shared, GS_LOG_WARN, 9, "from every thread");
        return NULL;
}

START_TEST(test_threads)
{
        pthread_t t[4];

        capture();
        for (int i = 0; i < 4; i++)
                ck_assert_int_eq(pthread_create(&t[i], NULL, hammer, NULL), 0);
        for (int i = 0; i < 4; i++)
                pthread_join(t[i], NULL);
        ck_assert_int_eq(count("from every thread"), 1);
        ck_assert_uint_eq(gs_logrep_pending(&shared, 9), 39999);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("logrep");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_once_then_counted);
        tcase_add_test(tc, test_interleaved_keys);
        tcase_add_test(tc, test_periodic);
        tcase_add_test(tc, test_bounded);
        tcase_add_test(tc, test_level);
        tcase_add_test(tc, test_threads);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return gs_check_run(suite());
}
