/* check_est.c — hook/gs_hook_qos_est.c: the least and the most of a
 * kind's samples (one kind of two durations), a sample of a kind whose
 * entry was taken over, and NCCL's kernels known by name.  Times in ns. */
#include <check.h>

#include "../gs_check.h"
#include <stdint.h>

#include "gs_hook_qos_est.h"

static const struct gs_cu none; /* no driver: no kernel names asked */

/* A kind of its own per test (the table is the module's). */
static size_t kind(uintptr_t f, uint64_t shape, CUfunction *fp)
{
        *fp = (CUfunction)f;
        return gs_qos_est_kind(&none, *fp, shape);
}

START_TEST(test_least_and_most)
{
        CUfunction f;
        size_t h = kind(0x1000, 1, &f);

        ck_assert(gs_qos_est_sample_this(h)); /* not measured yet: timed */
        gs_qos_est_take(h, f, 1, 500000);
        ck_assert_uint_eq(gs_qos_est_ns(h), 500000);
        ck_assert_uint_eq(gs_qos_est_hi(h), 500000);
        /* A longer one of the same kind (a GEMM of another K): the most
         * rises at once, the least by a sixteenth. */
        gs_qos_est_take(h, f, 1, 900000);
        ck_assert_uint_eq(gs_qos_est_hi(h), 900000);
        ck_assert_uint_eq(gs_qos_est_ns(h), 500000 + 500000 / 16 + 1);
        /* A shorter one: the least falls at once, the most by an eighth
         * of the difference. */
        gs_qos_est_take(h, f, 1, 100000);
        ck_assert_uint_eq(gs_qos_est_ns(h), 100000);
        ck_assert_uint_eq(gs_qos_est_hi(h), 900000 - 800000 / 8);
}
END_TEST

START_TEST(test_two_durations)
{
        CUfunction f;
        size_t h = kind(0x2000, 2, &f);

        /* One kind of two durations (a GEMM kernel of one grid, two K):
         * the least follows the short ones, the most the long ones, and
         * falls back only as short samples come: after 4 of them it is
         * still above half of the long one's. */
        gs_qos_est_take(h, f, 2, 1000000);
        for (int i = 0; i < 4; i++)
                gs_qos_est_take(h, f, 2, 50000);
        ck_assert_uint_eq(gs_qos_est_ns(h), 50000);
        ck_assert_uint_gt(gs_qos_est_hi(h), 500000);
        ck_assert_uint_lt(gs_qos_est_hi(h), 1000000);
        /* A long one again: the most is back at once. */
        gs_qos_est_take(h, f, 2, 1000000);
        ck_assert_uint_eq(gs_qos_est_hi(h), 1000000);
}
END_TEST

START_TEST(test_taken_over)
{
        CUfunction f;
        size_t h = kind(0x3000, 3, &f);

        gs_qos_est_take(h, f, 3, 700000);
        ck_assert_uint_eq(gs_qos_est_kind(&none, f, 3), h); /* the same kind: the same entry */
        /* A sample made when the entry held another kind (f on another
         * grid) is dropped: this kind is not measured by its launch. */
        gs_qos_est_take(h, f, 4, 5000000);
        ck_assert_uint_eq(gs_qos_est_hi(h), 700000);
        ck_assert_uint_eq(gs_qos_est_ns(h), 700000);
        ck_assert(!gs_qos_est_nccl(h));
}
END_TEST

/* A driver that names functions 0x5000 and 0x5001 as NCCL's and a GEMM,
 * and knows no other. */
static CUresult named(const char **name, CUfunction f)
{
        if ((uintptr_t)f == 0x5000)
                *name = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL";
        else if ((uintptr_t)f == 0x5001)
                *name = "sm90_xmma_gemm_bf16bf16_bf16f32";
        else
                return CUDA_ERROR_INVALID_HANDLE;
        return CUDA_SUCCESS;
}

/* NCCL's kernels are known by name, asked once per kind: a collective's
 * rank is never held (docs/compute.md "Limits"). */
START_TEST(test_nccl_by_name)
{
        struct gs_cu drv = { .func_get_name = named };
        size_t h;

        h = gs_qos_est_kind(&drv, (CUfunction)0x5000, 1);
        ck_assert(gs_qos_est_nccl(h));
        h = gs_qos_est_kind(&drv, (CUfunction)0x5001, 1);
        ck_assert(!gs_qos_est_nccl(h));
        /* A function the driver cannot name: not NCCL's. */
        h = gs_qos_est_kind(&drv, (CUfunction)0x5002, 1);
        ck_assert(!gs_qos_est_nccl(h));
        /* A graph (no function): never asked. */
        h = gs_qos_est_kind(&drv, NULL, 0x77);
        ck_assert(!gs_qos_est_nccl(h));
        /* A driver older than CUDA 12.3 (no cuFuncGetName): nothing known. */
        h = gs_qos_est_kind(&none, (CUfunction)0x5000, 2);
        ck_assert(!gs_qos_est_nccl(h));
}
END_TEST

int main(void)
{
        Suite *s = suite_create("est");
        TCase *tc = tcase_create("est");

        tcase_add_test(tc, test_least_and_most);
        tcase_add_test(tc, test_nccl_by_name);
        tcase_add_test(tc, test_two_durations);
        tcase_add_test(tc, test_taken_over);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
