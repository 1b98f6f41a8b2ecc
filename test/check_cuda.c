/* check_cuda.c — the driver table: loading and the error adapter (gs_cuda.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_cuda.h"

START_TEST(test_cuda_errno)
{
        char err[128] = "";

        ck_assert_int_eq(gs_cuda_errno(CUDA_SUCCESS), 0);
        ck_assert_int_eq(gs_cuda_errno(CUDA_ERROR_OUT_OF_MEMORY), -ENOMEM);
        ck_assert_int_eq(gs_cuda_errno(CUDA_ERROR_INVALID_VALUE), -EINVAL);
        ck_assert_int_eq(gs_cuda_errno(CUDA_ERROR_NO_DEVICE), -ENODEV);
        ck_assert_int_eq(gs_cuda_errno(CUDA_ERROR_NOT_SUPPORTED), -EOPNOTSUPP);
        ck_assert_int_eq(gs_cuda_errno(CUDA_ERROR_UNKNOWN), -EIO);
        /* Without a loaded table the message still names the call and code. */
        ck_assert_int_eq(gs_cuda_check(NULL, CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate", err, sizeof(err)), -ENOMEM);
        ck_assert_ptr_nonnull(strstr(err, "cuMemCreate"));
        ck_assert_ptr_nonnull(strstr(err, "2"));
        err[0] = '\0';
        ck_assert_int_eq(gs_cuda_check(NULL, CUDA_SUCCESS, "x", err, sizeof(err)), 0);
        ck_assert_str_eq(err, "");
}
END_TEST

START_TEST(test_cuda_open)
{
        struct gs_cuda cu;
        char err[512], path[512];
        const char *b = getenv("B");

        ck_assert_int_eq(gs_cuda_open(&cu, "/nonexistent/libcuda.so.1", err, sizeof(err)), -ENOENT);
        ck_assert_ptr_nonnull(strstr(err, "/nonexistent/libcuda.so.1"));
        ck_assert_ptr_null(cu.init);
        /* A library without the driver's symbols: the first missing is named. */
        ck_assert_int_eq(gs_cuda_open(&cu, "libm.so.6", err, sizeof(err)), -ENOSYS);
        ck_assert_ptr_nonnull(strstr(err, "cuInit"));
        ck_assert_ptr_null(cu.mem_create);
        gs_cuda_close(&cu);
        /* The fake driver has every entry, under the _v2 names cuda.h uses.
         * It is a build product (make test builds it first): missing, the
         * test fails rather than skip this half. */
        snprintf(path, sizeof(path), "%s/test/fakecuda/libcuda.so.1", b ? b : "build");
        ck_assert_msg(access(path, F_OK) == 0, "missing %s: run make first", path);
        ck_assert_msg(gs_cuda_open(&cu, path, err, sizeof(err)) == 0, "%s", err);
        ck_assert_ptr_nonnull(cu.mem_get_info);
        ck_assert_ptr_nonnull(cu.mem_export);
        gs_cuda_close(&cu);
        ck_assert_ptr_null(cu.dl);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("cuda");
        TCase *t = tcase_create("cuda");

        tcase_add_test(t, test_cuda_errno);
        tcase_add_test(t, test_cuda_open);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}
