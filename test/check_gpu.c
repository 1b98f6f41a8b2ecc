/* check_gpu.c — the GPU's NUMA node lookup in sysfs (gs_gpu.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_gpu.h"

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

int main(void)
{
        Suite *s = suite_create("gpu");
        TCase *t = tcase_create("gpu");

        tcase_add_test(t, test_numa_node);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}
