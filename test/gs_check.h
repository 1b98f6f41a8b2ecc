/* gs_check.h — the one way every check suite runs: fork mode unless
 * CK_FORK=no (for gdb), exit status = whether any test failed (or none
 * ran: a CK_RUN_CASE that names no case). */
#ifndef GS_CHECK_H
#define GS_CHECK_H

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static inline int gs_check_run(Suite *s)
{
        SRunner *sr = srunner_create(s);
        int failed;

        srunner_set_fork_status(sr, CK_FORK_GETENV);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        /* CK_RUN_CASE naming no case runs nothing: that is no pass. */
        if (srunner_ntests_run(sr) == 0) {
                fprintf(stderr, "no test ran (CK_RUN_SUITE=%s CK_RUN_CASE=%s)\n", getenv("CK_RUN_SUITE") ?: "",
                        getenv("CK_RUN_CASE") ?: "");
                failed = 1;
        }
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* The test's stderr (so its log lines) into a memfd, returned for
 * gs_check_log_count(). */
static inline int gs_check_capture_stderr(void)
{
        int fd = memfd_create("log", MFD_CLOEXEC);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(dup2(fd, 2), 2);
        return fd;
}

/* How often s occurs in what fd holds (its first 64 KiB). */
static inline int gs_check_log_count(int fd, const char *s)
{
        static char buf[1 << 16];
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        int c = 0;

        ck_assert_int_ge(n, 0);
        buf[n] = '\0';
        for (char *p = buf; (p = strstr(p, s)); p++)
                c++;
        return c;
}

/* Descriptors open in this process now: a test that starts and ends with
 * the same count left none behind. */
static inline int gs_check_count_fds(void)
{
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        int n = 0;

        ck_assert_ptr_nonnull(d);
        while ((e = readdir(d)))
                n += e->d_name[0] != '.';
        closedir(d);
        return n - 1; /* the directory's own */
}

/* The fake driver (test/fakecuda) for this process alone: one device of
 * mem ("1Gi"), no bytes charged for contexts, its state at a path for name
 * and the pid (into state, removed first: the test removes it after). */
static inline void gs_check_fakecuda_env(char *state, size_t len, const char *name, const char *mem)
{
        snprintf(state, len, "/dev/shm/gs-check-%s-%d", name, (int)getpid());
        unlink(state);
        setenv("GSHARE_FAKECUDA_STATE", state, 1);
        setenv("GSHARE_FAKECUDA_MEM", mem, 1);
        setenv("GSHARE_FAKECUDA_DEVICES", "1", 1);
        setenv("GSHARE_FAKECUDA_CTX_BYTES", "0", 1);
}

#endif
