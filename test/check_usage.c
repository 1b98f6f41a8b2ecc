/* check_usage.c — the pod UID in a process's cgroup (gs_usage.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_usage.h"

/* The pod UID in /proc/<pid>/cgroup as the systemd and cgroupfs drivers
 * write it; anything else is no pod. */
START_TEST(test_pod_uid)
{
        char uid[37];

        ck_assert_int_eq(gs_usage_pod_uid("0::/kubepods.slice/kubepods-burstable.slice/"
                                          "kubepods-burstable-pod0b5e7c1a_2f3d_4e5f_8a9b_0c1d2e3f4a5b.slice/"
                                          "cri-containerd-0123.scope\n",
                                          uid),
                         0);
        ck_assert_str_eq(uid, "0b5e7c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5b");
        ck_assert_int_eq(gs_usage_pod_uid("12:memory:/kubepods/besteffort/"
                                          "pod0B5E7C1A-2F3D-4E5F-8A9B-0C1D2E3F4A5B/abc\n",
                                          uid),
                         0);
        ck_assert_str_eq(uid, "0b5e7c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5b");
        ck_assert_int_eq(gs_usage_pod_uid("0::/user.slice/user-0.slice/session-1.scope\n", uid), -ENOENT);
        /* too short, a bad character, one digit too many */
        ck_assert_int_eq(gs_usage_pod_uid("0::/kubepods/pod0b5e7c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5\n", uid), -ENOENT);
        ck_assert_int_eq(gs_usage_pod_uid("0::/kubepods/pod0b5e7c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5z\n", uid), -ENOENT);
        ck_assert_int_eq(gs_usage_pod_uid("0::/kubepods/pod0b5e7c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5b0\n", uid), -ENOENT);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("usage");
        TCase *t = tcase_create("usage");

        tcase_add_test(t, test_pod_uid);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}
