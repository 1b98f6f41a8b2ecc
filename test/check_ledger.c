/* check_ledger.c — the ledger of who holds which chunk, which a restarted
 * agent reads (gs_ledger.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_ledger.h"

static char dir[] = "/tmp/check_ledger.XXXXXX";
static const uint8_t uuid[16] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };

static void setup(void)
{
        ck_assert_ptr_nonnull(mkdtemp(dir));
}
static void teardown(void)
{
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        (void)!system(cmd);
        strcpy(dir, "/tmp/check_ledger.XXXXXX");
}

START_TEST(test_roundtrip)
{
        char path[256], why[160];
        struct gs_ledger l;
        struct gs_ledger_ent *e;
        struct gs_ledger_tag t = { 42, GS_LEDGER_SLOT, 12345, 0xabcdef };
        struct gs_ledger_tag v = { 43, GS_LEDGER_VMM, 777, 0x1 };
        uint32_t n;
        uint64_t cb;

        ck_assert_int_eq(gs_ledger_path(path, sizeof(path), dir, "GPU-x"), 0);
        ck_assert_int_eq(gs_ledger_read(path, uuid, &e, &n, &cb, why, sizeof(why)), -ENOENT);
        ck_assert_int_eq(gs_ledger_open(&l, path, uuid, 1 << 26, 8), 0);
        gs_ledger_set(&l, 0, &t, 5, true);
        gs_ledger_set(&l, 3, &v, 1, true);
        gs_ledger_set(&l, 7, &t, 6, true);
        gs_ledger_set(&l, 7, &t, 6, false);
        gs_ledger_set(&l, 8, &t, 1, true); /* out of range: ignored */
        /* Not committed: the old file (none) is what a reader sees. */
        ck_assert_int_eq(gs_ledger_read(path, uuid, &e, &n, &cb, why, sizeof(why)), -ENOENT);
        ck_assert_int_eq(gs_ledger_commit(&l), 0);
        /* Written in place after the commit too, without any sync call. */
        gs_ledger_set(&l, 2, &t, 9, true);
        ck_assert_int_eq(gs_ledger_read(path, uuid, &e, &n, &cb, why, sizeof(why)), 0);
        ck_assert_uint_eq(n, 8);
        ck_assert_uint_eq(cb, 1 << 26);
        ck_assert_uint_eq(e[0].kind, GS_LEDGER_SLOT);
        ck_assert_uint_eq(e[0].pid, 42);
        ck_assert_uint_eq(e[0].slot, 5);
        ck_assert_uint_eq(e[0].start, 12345);
        ck_assert_uint_eq(e[0].alloc, 0xabcdef);
        ck_assert_uint_eq(e[3].kind, GS_LEDGER_VMM);
        ck_assert_uint_eq(e[3].pid, 43);
        ck_assert_uint_eq(e[2].slot, 9);
        ck_assert_uint_eq(e[7].kind, GS_LEDGER_FREE);
        ck_assert_uint_eq(e[1].kind, GS_LEDGER_FREE);
        free(e);
        /* Another GPU's ledger is not used. */
        uint8_t other[16] = { 0 };
        ck_assert_int_eq(gs_ledger_read(path, other, &e, &n, &cb, why, sizeof(why)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(why, "another GPU"));
        gs_ledger_close(&l);
        /* The file outlives the writer. */
        ck_assert_int_eq(gs_ledger_read(path, uuid, &e, &n, &cb, why, sizeof(why)), 0);
        free(e);
}
END_TEST

/* A writer killed with SIGKILL loses nothing it wrote (the page cache
 * outlives it), and a new ledger replaces the old only at its commit. */
START_TEST(test_killed_writer)
{
        char path[256], why[160];
        struct gs_ledger_ent *e;
        struct gs_ledger_tag t = { 9, GS_LEDGER_SLOT, 1, 2 };
        uint32_t n;
        uint64_t cb;
        int st, pfd[2];

        ck_assert_int_eq(gs_ledger_path(path, sizeof(path), dir, "GPU-y"), 0);
        ck_assert_int_eq(pipe(pfd), 0);
        pid_t pid = fork();
        if (pid == 0) {
                struct gs_ledger l;
                if (gs_ledger_open(&l, path, uuid, 1 << 21, 4) < 0 || gs_ledger_commit(&l) < 0)
                        _exit(1);
                for (uint32_t i = 0; i < 4; i++)
                        gs_ledger_set(&l, i, &t, i + 10, true);
                (void)!write(pfd[1], "x", 1);
                for (;;)
                        pause();
        }
        char c;
        ck_assert_int_eq(read(pfd[0], &c, 1), 1);
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        ck_assert_int_eq(gs_ledger_read(path, uuid, &e, &n, &cb, why, sizeof(why)), 0);
        for (uint32_t i = 0; i < 4; i++) {
                ck_assert_uint_eq(e[i].kind, GS_LEDGER_SLOT);
                ck_assert_uint_eq(e[i].slot, i + 10);
        }
        free(e);
        /* A new agent's ledger, not committed (killed while restoring):
         * the old one is still what is read, and the next one starts over. */
        struct gs_ledger l2;
        ck_assert_int_eq(gs_ledger_open(&l2, path, uuid, 1 << 21, 4), 0);
        gs_ledger_set(&l2, 0, &t, 99, true);
        ck_assert_int_eq(gs_ledger_read(path, uuid, &e, &n, &cb, why, sizeof(why)), 0);
        ck_assert_uint_eq(e[0].slot, 10);
        free(e);
        gs_ledger_close(&l2);
        ck_assert_int_eq(gs_ledger_open(&l2, path, uuid, 1 << 21, 4), 0);
        gs_ledger_close(&l2);
}
END_TEST

/* Files that are not ledgers of this GPU are refused with a reason. */
START_TEST(test_bad_files)
{
        char path[256], why[160];
        struct gs_ledger_ent *e;
        uint32_t n;
        uint64_t cb;
        int fd;

        snprintf(path, sizeof(path), "%s/held-bad", dir);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, "garbage", 7), 7);
        close(fd);
        ck_assert_int_eq(gs_ledger_read(path, uuid, &e, &n, &cb, why, sizeof(why)), -EINVAL);
        /* A ledger cut short. */
        struct gs_ledger l;
        ck_assert_int_eq(gs_ledger_open(&l, path, uuid, 1 << 21, 16), 0);
        ck_assert_int_eq(gs_ledger_commit(&l), 0);
        gs_ledger_close(&l);
        ck_assert_int_eq(truncate(path, 64 + 32 * 15), 0);
        ck_assert_int_eq(gs_ledger_read(path, uuid, &e, &n, &cb, why, sizeof(why)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(why, "chunks"));
        /* A symlink is not followed. */
        char link[256];
        snprintf(link, sizeof(link), "%s/held-link", dir);
        ck_assert_int_eq(symlink(path, link), 0);
        ck_assert_int_lt(gs_ledger_read(link, uuid, &e, &n, &cb, why, sizeof(why)), 0);
        ck_assert_int_eq(gs_ledger_open(&l, path, uuid, 1 << 21, 0), -EINVAL);
}
END_TEST

/* A new agent that failed after its restore had put its own ledger at
 * the path: the old agent, serving on, puts its own back and goes on
 * writing it in place. */
START_TEST(test_relink)
{
        char path[256], why[160];
        struct gs_ledger l, other;
        struct gs_ledger_ent *e;
        struct gs_ledger_tag t = { 42, GS_LEDGER_SLOT, 12345, 0xabcdef };
        struct gs_ledger_tag u = { 99, GS_LEDGER_SLOT, 5, 0x2 };
        uint32_t n;
        uint64_t cb;

        ck_assert_int_eq(gs_ledger_path(path, sizeof(path), dir, "GPU-x"), 0);
        ck_assert_int_eq(gs_ledger_open(&l, path, uuid, 1 << 26, 4), 0);
        ck_assert_int_eq(gs_ledger_relink(&l), 0); /* not committed: nothing to do */
        ck_assert_int_eq(gs_ledger_commit(&l), 0);
        gs_ledger_set(&l, 1, &t, 3, true);
        ck_assert_int_eq(gs_ledger_relink(&l), 0); /* still at its path: left as it is */
        ck_assert_int_eq(gs_ledger_open(&other, path, uuid, 1 << 26, 4), 0);
        gs_ledger_set(&other, 2, &u, 1, true);
        ck_assert_int_eq(gs_ledger_commit(&other), 0);
        gs_ledger_close(&other);
        ck_assert_int_eq(gs_ledger_read(path, uuid, &e, &n, &cb, why, sizeof(why)), 0);
        ck_assert_uint_eq(e[1].kind, GS_LEDGER_FREE);
        ck_assert_uint_eq(e[2].kind, GS_LEDGER_SLOT);
        free(e);
        ck_assert_int_eq(gs_ledger_relink(&l), 0);
        gs_ledger_set(&l, 0, &t, 7, true); /* after: in the file at the path */
        ck_assert_int_eq(gs_ledger_read(path, uuid, &e, &n, &cb, why, sizeof(why)), 0);
        ck_assert_uint_eq(n, 4);
        ck_assert_uint_eq(e[0].kind, GS_LEDGER_SLOT);
        ck_assert_uint_eq(e[0].slot, 7);
        ck_assert_uint_eq(e[1].kind, GS_LEDGER_SLOT);
        ck_assert_uint_eq(e[1].pid, 42);
        ck_assert_uint_eq(e[1].slot, 3);
        ck_assert_uint_eq(e[2].kind, GS_LEDGER_FREE);
        free(e);
        char tmp[300];
        snprintf(tmp, sizeof(tmp), "%s.old", path);
        ck_assert_int_ne(access(tmp, F_OK), 0); /* no temporary left */
        gs_ledger_close(&l);
}
END_TEST

START_TEST(test_pid_start)
{
        uint64_t me = gs_ledger_pid_start(getpid());
        ck_assert_uint_gt(me, 0);
        ck_assert_uint_eq(gs_ledger_pid_start(getpid()), me);
        pid_t pid = fork();
        if (pid == 0)
                _exit(0);
        waitpid(pid, NULL, 0);
        ck_assert_uint_eq(gs_ledger_pid_start(pid), 0); /* gone */
        ck_assert_uint_ge(gs_ledger_pid_start(1), 0);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("ledger");
        TCase *t = tcase_create("ledger");

        tcase_add_checked_fixture(t, setup, teardown);
        tcase_add_test(t, test_roundtrip);
        tcase_add_test(t, test_killed_writer);
        tcase_add_test(t, test_bad_files);
        tcase_add_test(t, test_relink);
        tcase_add_test(t, test_pid_start);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}
