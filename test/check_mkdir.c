/* check_mkdir.c — common/gs_mkdir.h: mkdir -p with the mode whatever the
 * umask, counting what it made; existing directories (and links to them)
 * left alone; a file in the way, an over-long path and odd components
 * ("//", "..", trailing slashes) handled and named. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_mkdir.h"

static char root[64];
static char err[512];

static void setup(void)
{
        snprintf(root, sizeof(root), "/tmp/check_mkdir.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(root));
        err[0] = '\0';
}

static void teardown(void)
{
        char cmd[128];

        snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
        (void)!system(cmd);
}

/* The mode of root/rel (lstat: a link is not followed), 0 if none. */
static mode_t mode_of(const char *rel)
{
        char p[PATH_MAX];
        struct stat st;

        snprintf(p, sizeof(p), "%s/%s", root, rel);
        if (lstat(p, &st) < 0)
                return 0;
        return st.st_mode;
}

START_TEST(test_parents_with_mode_whatever_umask)
{
        char p[PATH_MAX];
        mode_t old = umask(077);

        snprintf(p, sizeof(p), "%s/a/b/c/agent.sock", root);
        ck_assert_int_eq(gs_mkdir_parents(p, 0755, err, sizeof(err)), 3);
        umask(old);
        ck_assert_int_eq(mode_of("a"), S_IFDIR | 0755);
        ck_assert_int_eq(mode_of("a/b"), S_IFDIR | 0755);
        ck_assert_int_eq(mode_of("a/b/c"), S_IFDIR | 0755);
        ck_assert_int_eq(mode_of("a/b/c/agent.sock"), 0); /* not the path itself */
        /* Again: nothing missing, nothing made. */
        ck_assert_int_eq(gs_mkdir_parents(p, 0755, err, sizeof(err)), 0);
}
END_TEST

START_TEST(test_existing_left_alone)
{
        char p[PATH_MAX], d[PATH_MAX];

        snprintf(d, sizeof(d), "%s/keep", root);
        ck_assert_int_eq(mkdir(d, 0700), 0);
        snprintf(p, sizeof(p), "%s/keep/x/y", root);
        ck_assert_int_eq(gs_mkdir_parents(p, 0755, err, sizeof(err)), 1);
        ck_assert_int_eq(mode_of("keep"), S_IFDIR | 0700); /* its mode untouched */
        /* A link to a directory is a directory (/var/run -> /run). */
        snprintf(p, sizeof(p), "%s/link", root);
        ck_assert_int_eq(symlink(d, p), 0);
        snprintf(p, sizeof(p), "%s/link/z/s", root);
        ck_assert_int_eq(gs_mkdir_parents(p, 0755, err, sizeof(err)), 1);
        ck_assert_int_eq(mode_of("keep/z"), S_IFDIR | 0755);
}
END_TEST

START_TEST(test_file_in_the_way)
{
        char p[PATH_MAX], f[PATH_MAX];

        snprintf(f, sizeof(f), "%s/afile", root);
        close(open(f, O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
        snprintf(p, sizeof(p), "%s/afile/x/y", root);
        ck_assert_int_eq(gs_mkdir_parents(p, 0755, err, sizeof(err)), -ENOTDIR);
        ck_assert_ptr_nonnull(strstr(err, f));
        ck_assert_ptr_nonnull(strstr(err, "exists and is not a directory"));
        /* The leaf too, with gs_mkdir_p. */
        ck_assert_int_eq(gs_mkdir_p(f, 0755, 0750, err, sizeof(err)), -ENOTDIR);
        /* A dangling link in the way is no directory either. */
        snprintf(p, sizeof(p), "%s/dangling", root);
        ck_assert_int_eq(symlink("/nonexistent/nowhere", p), 0);
        snprintf(p, sizeof(p), "%s/dangling/x", root);
        ck_assert_int_eq(gs_mkdir_parents(p, 0755, err, sizeof(err)), -ENOTDIR);
}
END_TEST

START_TEST(test_odd_components)
{
        char p[PATH_MAX];

        /* Doubled and trailing slashes: the same directories. */
        snprintf(p, sizeof(p), "%s//d1///d2//", root);
        ck_assert_int_eq(gs_mkdir_p(p, 0755, 0750, err, sizeof(err)), 2);
        ck_assert_int_eq(mode_of("d1"), S_IFDIR | 0755);
        ck_assert_int_eq(mode_of("d1/d2"), S_IFDIR | 0750);
        ck_assert_int_eq(gs_mkdir_p(p, 0755, 0750, err, sizeof(err)), 0);
        /* ".." walks as the kernel walks it. */
        snprintf(p, sizeof(p), "%s/d1/../d3/d4", root);
        ck_assert_int_eq(gs_mkdir_p(p, 0755, 0700, err, sizeof(err)), 2);
        ck_assert_int_eq(mode_of("d3/d4"), S_IFDIR | 0700);
        /* The root and an empty path. */
        ck_assert_int_eq(gs_mkdir_p("/", 0755, 0755, err, sizeof(err)), 0);
        ck_assert_int_eq(gs_mkdir_parents("/x", 0755, err, sizeof(err)), 0);
        ck_assert_int_eq(gs_mkdir_p("", 0755, 0755, err, sizeof(err)), -ENOENT);
}
END_TEST

START_TEST(test_too_long)
{
        static char p[PATH_MAX + 64];
        char small[8];

        memset(p, 'a', sizeof(p) - 1);
        p[0] = '/';
        p[sizeof(p) - 1] = '\0';
        ck_assert_int_eq(gs_mkdir_parents(p, 0755, err, sizeof(err)), -ENAMETOOLONG);
        ck_assert_ptr_nonnull(strstr(err, "path too long"));
        p[PATH_MAX] = '\0'; /* PATH_MAX characters: no room for the NUL */
        ck_assert_int_eq(gs_mkdir_p(p, 0755, 0755, err, sizeof(err)), -ENAMETOOLONG);
        /* A component over NAME_MAX: the kernel's error, named. */
        snprintf(p, sizeof(p), "%s/", root);
        memset(p + strlen(p), 'b', NAME_MAX + 1);
        p[strlen(root) + 1 + NAME_MAX + 1] = '\0';
        strcat(p, "/x");
        ck_assert_int_eq(gs_mkdir_parents(p, 0755, err, sizeof(err)), -ENAMETOOLONG);
        ck_assert_ptr_nonnull(strstr(err, "cannot create directory"));
        /* A small error buffer: cut, never overrun. */
        ck_assert_int_eq(gs_mkdir_parents(p, 0755, small, sizeof(small)), -ENAMETOOLONG);
        ck_assert_uint_eq(strlen(small), sizeof(small) - 1);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("mkdir");
        TCase *tc = tcase_create("core");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_parents_with_mode_whatever_umask);
        tcase_add_test(tc, test_existing_left_alone);
        tcase_add_test(tc, test_file_in_the_way);
        tcase_add_test(tc, test_odd_components);
        tcase_add_test(tc, test_too_long);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return gs_check_run(suite());
}
