/* check_agent.c — the agent's modules that run without a driver or a
 * socket: allocation ids, the checkpoint line format, the NUMA lookup,
 * HELLO validation, and the driver table's loading and error adapter.
 * (Everything else runs end to end in test/e2e/test_e2e.py.) */
#include <check.h>

#include "gs_check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gs_allocs.h"
#include "gs_cuda.h"
#include "gs_event.h"
#include "gs_gpu.h"
#include "gs_proc.h"
#include "gs_usage.h"

/* The pod UID in /proc/<pid>/cgroup as the systemd and cgroupfs drivers
 * write it; anything else is no pod. */
START_TEST(test_pod_uid)
{
        char uid[37];

        ck_assert_int_eq(gs_usage_pod_uid("0::/kubepods.slice/kubepods-burstable.slice/"
                                          "kubepods-burstable-pod0b5e7c1a_2f3d_4e5f_8a9b_0c1d2e3f4a5b.slice/"
                                          "cri-containerd-0123.scope\n", uid), 0);
        ck_assert_str_eq(uid, "0b5e7c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5b");
        ck_assert_int_eq(gs_usage_pod_uid("12:memory:/kubepods/besteffort/"
                                          "pod0B5E7C1A-2F3D-4E5F-8A9B-0C1D2E3F4A5B/abc\n", uid), 0);
        ck_assert_str_eq(uid, "0b5e7c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5b");
        ck_assert_int_eq(gs_usage_pod_uid("0::/user.slice/user-0.slice/session-1.scope\n", uid), -ENOENT);
        /* too short, a bad character, one digit too many */
        ck_assert_int_eq(gs_usage_pod_uid("0::/kubepods/pod0b5e7c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5\n", uid), -ENOENT);
        ck_assert_int_eq(gs_usage_pod_uid("0::/kubepods/pod0b5e7c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5z\n", uid), -ENOENT);
        ck_assert_int_eq(gs_usage_pod_uid("0::/kubepods/pod0b5e7c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5b0\n", uid), -ENOENT);
}
END_TEST

/* An Event's JSON: the pod, the reason, the message escaped. */
START_TEST(test_event_json)
{
        char buf[2048];
        int n = gs_event_json(buf, sizeof(buf), "team-a", "trainer-0", "0b5e7c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5b",
                              "GPUMemoryOverQuota", "over \"quota\"\\\n", "node-1", 0);

        ck_assert_int_gt(n, 0);
        ck_assert_ptr_nonnull(strstr(buf, "\"involvedObject\":{\"apiVersion\":\"v1\",\"kind\":\"Pod\","
                                          "\"namespace\":\"team-a\",\"name\":\"trainer-0\","
                                          "\"uid\":\"0b5e7c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5b\"}"));
        ck_assert_ptr_nonnull(strstr(buf, "\"message\":\"over \\\"quota\\\"\\\\\\u000a\""));
        ck_assert_ptr_nonnull(strstr(buf, "\"firstTimestamp\":\"1970-01-01T00:00:00Z\""));
        /* no uid: no uid field */
        n = gs_event_json(buf, sizeof(buf), "ns", "p", "", "R", "m", "n", 0);
        ck_assert_int_gt(n, 0);
        ck_assert_ptr_null(strstr(buf, "\"uid\""));
        ck_assert_int_eq(gs_event_json(buf, 64, "ns", "p", "", "R", "m", "n", 0), -ENOSPC);
}
END_TEST

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

START_TEST(test_numa_node)
{
        char root[] = "/tmp/gsnumaXXXXXX", dir[256], file[300];
        FILE *f;

        ck_assert_ptr_nonnull(mkdtemp(root));
        ck_assert_int_eq(gs_gpu_numa_node(root, "0000:3B:00.0"), -1); /* absent */
        snprintf(dir, sizeof(dir), "%s/bus", root);
        mkdir(dir, 0755);
        snprintf(dir, sizeof(dir), "%s/bus/pci", root);
        mkdir(dir, 0755);
        snprintf(dir, sizeof(dir), "%s/bus/pci/devices", root);
        mkdir(dir, 0755);
        /* sysfs names devices in lower case; CUDA reports upper case. */
        snprintf(dir, sizeof(dir), "%s/bus/pci/devices/0000:3b:00.0", root);
        mkdir(dir, 0755);
        snprintf(file, sizeof(file), "%s/numa_node", dir);
        f = fopen(file, "w");
        fputs("1\n", f);
        fclose(f);
        ck_assert_int_eq(gs_gpu_numa_node(root, "0000:3B:00.0"), 1);
        f = fopen(file, "w");
        fputs("garbage\n", f);
        fclose(f);
        ck_assert_int_eq(gs_gpu_numa_node(root, "0000:3B:00.0"), -1);
        f = fopen(file, "w");
        fputs("-1\n", f);
        fclose(f);
        ck_assert_int_eq(gs_gpu_numa_node(root, "0000:3b:00.0"), -1);
        unlink(file);
}
END_TEST

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
        hello(&h);
        h.flags = 1;
        ck_assert_int_eq(gs_proc_check_hello(&h, sizeof(h), err, sizeof(err)), -EPROTO);
        hello(&h);
        h.h.reserved = 1;
        ck_assert_int_eq(gs_proc_check_hello(&h, sizeof(h), err, sizeof(err)), -EPROTO);
}
END_TEST

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
        ck_assert_int_eq(gs_cuda_check(NULL, CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate", err, sizeof(err)),
                         -ENOMEM);
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
        /* The fake driver has every entry, under the _v2 names cuda.h uses. */
        snprintf(path, sizeof(path), "%s/test/fakecuda/libcuda.so.1", b ? b : "build");
        if (access(path, F_OK) == 0) {
                ck_assert_int_eq(gs_cuda_open(&cu, path, err, sizeof(err)), 0);
                ck_assert_ptr_nonnull(cu.mem_get_info);
                ck_assert_ptr_nonnull(cu.mem_export);
                gs_cuda_close(&cu);
                ck_assert_ptr_null(cu.dl);
        }
}
END_TEST

int main(void)
{
        Suite *s = suite_create("agent");
        TCase *t = tcase_create("agent");

        tcase_add_test(t, test_id_stable_and_distinct);
        tcase_add_test(t, test_pod_uid);
        tcase_add_test(t, test_event_json);
        tcase_add_test(t, test_parse_line);
        tcase_add_test(t, test_parse_line_rejects);
        tcase_add_test(t, test_numa_node);
        tcase_add_test(t, test_check_hello);
        tcase_add_test(t, test_cuda_errno);
        tcase_add_test(t, test_cuda_open);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}
