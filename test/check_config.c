/* check_config.c — gs_config: every key, sizes, and the errors. */
#include <check.h>

#include "gs_check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gs_config.h"
#include "gs_config_keys.h"
#include "gs_log.h"

static char path[64];

/* Writes text to a fresh temporary file; path names it. */
static void write_cfg(const char *text)
{
        int fd;

        snprintf(path, sizeof(path), "/tmp/gscfgXXXXXX");
        fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
        close(fd);
}

static int load(const char *text, struct gs_config *c, char *err, size_t n)
{
        int r;

        write_cfg(text);
        r = gs_config_load(c, path, err, n);
        unlink(path);
        return r;
}

/* Loads text expecting failure; checks that err is "<path>:<line>: <want...>"
 * and that the config was left untouched. */
static void expect_error(const char *text, int line, const char *want)
{
        struct gs_config c, before;
        char err[512] = "", prefix[128];
        int r;

        gs_config_defaults(&c);
        before = c;
        r = load(text, &c, err, sizeof(err));
        ck_assert_msg(r < 0, "accepted: %s", text);
        snprintf(prefix, sizeof(prefix), "%s:%d: ", path, line);
        ck_assert_msg(strncmp(err, prefix, strlen(prefix)) == 0, "err '%s' lacks prefix '%s'", err, prefix);
        ck_assert_msg(strstr(err, want), "err '%s' lacks '%s'", err, want);
        ck_assert_msg(memcmp(&c, &before, sizeof(c)) == 0, "config changed on failure");
}

START_TEST(test_defaults)
{
        struct gs_config c;
        char err[256];

        gs_config_defaults(&c);
        ck_assert_str_eq(c.resource_name, "gshare.io/gpumem");
        ck_assert_uint_eq(c.unit_bytes, GS_GiB);
        ck_assert_uint_eq(c.chunk_bytes, 64 * GS_MiB);
        ck_assert_uint_eq(c.reserve_bytes, 512 * GS_MiB);
        ck_assert_uint_eq(c.context_bytes, 0);
        ck_assert_uint_eq(c.usage_interval_ms, 1000);
        ck_assert_int_eq(c.over_quota, GS_OVER_QUOTA_KILL);
        ck_assert_uint_eq(c.over_quota_bound_bytes, 256ull << 20);
        ck_assert_uint_eq(c.over_quota_grace_ms, 5000);
        ck_assert_str_eq(c.nvml_library, "libnvidia-ml.so.1");
        ck_assert_uint_eq(c.balloon_cap_bytes, 0);
        ck_assert_uint_eq(c.burst_max_bytes, 0);
        ck_assert_uint_eq(c.max_blocks_per_process, 1048576);
        ck_assert_uint_eq(c.max_blocks_per_allocation, 4194304);
        ck_assert_uint_eq(c.ndevices, 0);
        ck_assert_str_eq(c.agent_socket, "/run/gshare/agent.sock");
        ck_assert_str_eq(c.socket_root, "/run/gshare/alloc");
        ck_assert_str_eq(c.state_dir, "/var/lib/gshare");
        ck_assert_str_eq(c.kubelet_dir, "/var/lib/kubelet/device-plugins");
        ck_assert_str_eq(c.hook_path, "/usr/local/lib/gshare/libgshare.so");
        ck_assert_str_eq(c.preload_path, "/usr/local/lib/gshare/ld.so.preload");
        ck_assert_int_eq(c.inject, GS_INJECT_PRELOAD);
        ck_assert_int_eq(c.device_nodes, 0);
        ck_assert_str_eq(c.cuda_library, "libcuda.so.1");
        ck_assert_str_eq(c.metrics_address, "");
        ck_assert_int_eq(c.log_level, GS_LOG_INFO);
        ck_assert_uint_eq(c.worker_threads, 4);
        ck_assert_uint_eq(c.max_conns, 4096);
        ck_assert_uint_eq(c.max_conns_per_alloc, 1024);
        ck_assert_uint_eq(c.max_conns_per_proc, 4);
        ck_assert_int_eq(gs_config_validate(&c, err, sizeof(err)), 0);
}
END_TEST

START_TEST(test_every_key)
{
        struct gs_config c;
        char err[256] = "";
        int r;

        gs_config_defaults(&c);
        r = load("# all keys\n"
                 "resourceName: example.com/mem\n"
                 "unitSize: 2Gi\n"
                 "chunkSize: 512Mi\n"
                 "reserve: 1536Mi\n"
                 "balloonCap: 4Gi\n"
                 "burstMax: 32Gi\n"
                 "spillMax: 48Gi\n"
                 "reclaimKillAfter: 30s\n"
                 "nvmlLibrary: /opt/nvml.so\n"
                 "contextSize: 600Mi\n"
                 "usageInterval: 250ms\n"
                 "agentWait: 5s\n"
                 "overQuota: report\n"
                 "overQuotaBound: 64Mi\n"
                 "overQuotaGrace: 2s\n"
                 "maxBlocksPerProcess: 1000\n"
                 "maxBlocksPerAllocation: 1073741824\n"
                 "devices:\n"
                 "  - GPU-8f3c2c1a-5b7d-4e1f-9a0b-0123456789ab\n"
                 "  - 3\n"
                 "agentSocket: /tmp/a.sock\n"
                 "socketRoot: /tmp/alloc\n"
                 "stateDir: /tmp/state\n"
                 "kubeletDir: /tmp/kubelet\n"
                 "hookPath: /opt/libgshare.so\n"
                 "preloadPath: /opt/ld.so.preload\n"
                 "inject: env\n"
                 "deviceNodes: true\n"
                 "cudaLibrary: /opt/libcuda.so.1\n"
                 "metricsAddress: \"0.0.0.0:9400\"\n"
                 "logLevel: debug\n"
                 "workerThreads: 8\n"
                 "maxConnections: 100\n"
                 "maxConnectionsPerAllocation: 50\n"
                 "maxConnectionsPerProcess: 2\n",
                 &c, err, sizeof(err));
        ck_assert_msg(r == 0, "%s", err);
        ck_assert_str_eq(c.resource_name, "example.com/mem");
        ck_assert_uint_eq(c.unit_bytes, 2 * GS_GiB);
        ck_assert_uint_eq(c.chunk_bytes, 512 * GS_MiB);
        ck_assert_uint_eq(c.reserve_bytes, 1536 * GS_MiB);
        ck_assert_uint_eq(c.agent_wait_ms, 5000);
        ck_assert_uint_eq(c.balloon_cap_bytes, 4 * GS_GiB);
        ck_assert_uint_eq(c.burst_max_bytes, 32 * GS_GiB);
        ck_assert_uint_eq(c.spill_max_bytes, 48 * GS_GiB);
        ck_assert_uint_eq(c.reclaim_kill_after_ms, 30000);
        ck_assert_str_eq(c.nvml_library, "/opt/nvml.so");
        ck_assert_uint_eq(c.context_bytes, 600 * GS_MiB);
        ck_assert_uint_eq(c.usage_interval_ms, 250);
        ck_assert_int_eq(c.over_quota, GS_OVER_QUOTA_REPORT);
        ck_assert_uint_eq(c.over_quota_bound_bytes, 64ull << 20);
        ck_assert_uint_eq(c.over_quota_grace_ms, 2000);
        ck_assert_uint_eq(c.max_blocks_per_process, 1000);
        ck_assert_uint_eq(c.max_blocks_per_allocation, 1073741824);
        ck_assert_uint_eq(c.ndevices, 2);
        ck_assert_str_eq(c.devices[0], "GPU-8f3c2c1a-5b7d-4e1f-9a0b-0123456789ab");
        ck_assert_str_eq(c.devices[1], "3");
        ck_assert_str_eq(c.agent_socket, "/tmp/a.sock");
        ck_assert_str_eq(c.socket_root, "/tmp/alloc");
        ck_assert_str_eq(c.state_dir, "/tmp/state");
        ck_assert_str_eq(c.kubelet_dir, "/tmp/kubelet");
        ck_assert_str_eq(c.hook_path, "/opt/libgshare.so");
        ck_assert_str_eq(c.preload_path, "/opt/ld.so.preload");
        ck_assert_int_eq(c.inject, GS_INJECT_ENV);
        ck_assert_int_eq(c.device_nodes, 1);
        ck_assert_str_eq(c.cuda_library, "/opt/libcuda.so.1");
        ck_assert_str_eq(c.metrics_address, "0.0.0.0:9400");
        ck_assert_int_eq(c.log_level, GS_LOG_DEBUG);
        ck_assert_uint_eq(c.worker_threads, 8);
        ck_assert_uint_eq(c.max_conns, 100);
        ck_assert_uint_eq(c.max_conns_per_alloc, 50);
        ck_assert_uint_eq(c.max_conns_per_proc, 2);
        ck_assert_int_eq(gs_config_validate(&c, err, sizeof(err)), 0);
}
END_TEST

START_TEST(test_partial_keeps_rest)
{
        struct gs_config c;
        char err[256] = "";

        gs_config_defaults(&c);
        ck_assert_int_eq(load("deviceNodes: no\ninject: preload\ndevices: all\n", &c, err, sizeof(err)), 0);
        ck_assert_int_eq(c.device_nodes, 0);
        ck_assert_uint_eq(c.ndevices, 0);
        ck_assert_uint_eq(c.unit_bytes, GS_GiB);
        /* empty file and comment-only file change nothing */
        ck_assert_int_eq(load("", &c, err, sizeof(err)), 0);
        ck_assert_int_eq(load("# nothing\n", &c, err, sizeof(err)), 0);
        ck_assert_str_eq(c.resource_name, "gshare.io/gpumem");
}
END_TEST

START_TEST(test_sizes)
{
        uint64_t b = 7;
        char buf[32];

        ck_assert_int_eq(gs_parse_size("0", &b), 0);
        ck_assert_uint_eq(b, 0);
        ck_assert_int_eq(gs_parse_size("4096", &b), 0);
        ck_assert_uint_eq(b, 4096);
        ck_assert_int_eq(gs_parse_size("3Ki", &b), 0);
        ck_assert_uint_eq(b, 3072);
        ck_assert_int_eq(gs_parse_size("256Mi", &b), 0);
        ck_assert_uint_eq(b, 268435456);
        ck_assert_int_eq(gs_parse_size("80Gi", &b), 0);
        ck_assert_uint_eq(b, 80 * GS_GiB);
        ck_assert_int_eq(gs_parse_size("2Ti", &b), 0);
        ck_assert_uint_eq(b, UINT64_C(2) << 40);
        ck_assert_int_eq(gs_parse_size("18446744073709551615", &b), 0);
        ck_assert_uint_eq(b, UINT64_MAX);
        b = 5;
        ck_assert_int_eq(gs_parse_size("18446744073709551616", &b), -ERANGE);
        ck_assert_int_eq(gs_parse_size("16777216Ti", &b), -ERANGE);
        ck_assert_int_eq(gs_parse_size("", &b), -EINVAL);
        ck_assert_int_eq(gs_parse_size("-1", &b), -EINVAL);
        ck_assert_int_eq(gs_parse_size("+1", &b), -EINVAL);
        ck_assert_int_eq(gs_parse_size("1G", &b), -EINVAL);
        ck_assert_int_eq(gs_parse_size("1GB", &b), -EINVAL);
        ck_assert_int_eq(gs_parse_size("1 Gi", &b), -EINVAL);
        ck_assert_int_eq(gs_parse_size("Gi", &b), -EINVAL);
        ck_assert_int_eq(gs_parse_size("1.5Gi", &b), -EINVAL);
        ck_assert_int_eq(gs_parse_size(NULL, &b), -EINVAL);
        ck_assert_uint_eq(b, 5); /* untouched on failure */

        gs_format_size(268435456, buf, sizeof(buf));
        ck_assert_str_eq(buf, "256Mi");
        gs_format_size(1536 * GS_MiB, buf, sizeof(buf));
        ck_assert_str_eq(buf, "1536Mi");
        gs_format_size(GS_GiB, buf, sizeof(buf));
        ck_assert_str_eq(buf, "1Gi");
        gs_format_size(UINT64_C(3) << 40, buf, sizeof(buf));
        ck_assert_str_eq(buf, "3Ti");
        gs_format_size(1000, buf, sizeof(buf));
        ck_assert_str_eq(buf, "1000");
        gs_format_size(0, buf, sizeof(buf));
        ck_assert_str_eq(buf, "0");
        /* round trip */
        for (uint64_t v = 1; v < (UINT64_C(1) << 50); v = v * 3 + 1024) {
                uint64_t back;
                gs_format_size(v, buf, sizeof(buf));
                ck_assert_int_eq(gs_parse_size(buf, &back), 0);
                ck_assert_uint_eq(back, v);
        }
}
END_TEST

START_TEST(test_errors)
{
        expect_error("unitSize: 1Gi\nbogusKey: 1\n", 2, "bogusKey: unknown key");
        expect_error("chunkSize: 3Mi\n", 1, "chunkSize: must be a power of two, got 3Mi");
        expect_error("chunkSize: 1Mi\n", 1, "chunkSize: must be a multiple of 2Mi");
        expect_error("chunkSize: 0\n", 1, "chunkSize: must not be 0");
        expect_error("\n\nunitSize: 1GB\n", 3, "unitSize: not a size: '1GB'");
        expect_error("unitSize: -1\n", 1, "unitSize: not a size");
        expect_error("reserve: 99999999999999999999\n", 1, "reserve: size '99999999999999999999' is too large");
        expect_error("overQuota: maybe\n", 1, "overQuota: expected kill or report, got 'maybe'");
        expect_error("overQuotaBound: lots\n", 1, "overQuotaBound: not a size: 'lots'");
        expect_error("overQuotaGrace: 2h\n", 1, "overQuotaGrace: must be at most 1h");
        expect_error("contextSize: lots\n", 1, "contextSize");
        expect_error("contextSize: 100Gi\n", 1, "contextSize: must be auto or at most 64Gi");
        expect_error("usageInterval: -1s\n", 1, "usageInterval");
        expect_error("agentWait: 2h\n", 1, "agentWait: must be at most 1h");
        expect_error("agentWait: soon\n", 1, "agentWait");
        expect_error("balloonCap: [1, 2]\n", 1, "balloonCap: expected a single value, got a list");
        expect_error("maxBlocksPerProcess: 0\n", 1, "maxBlocksPerProcess: must be 1 to 1073741824, got 0");
        expect_error("maxBlocksPerProcess: 1073741825\n", 1, "maxBlocksPerProcess: must be 1 to 1073741824");
        expect_error("maxBlocksPerAllocation: 99999999999999999999999\n", 1,
                     "maxBlocksPerAllocation: must be 1 to 1073741824, got 99999999999999999999999");
        expect_error("maxBlocksPerAllocation: 1Mi\n", 1,
                     "maxBlocksPerAllocation: expected a number of blocks, got '1Mi'");
        expect_error("maxBlocksPerAllocation: -5\n", 1, "maxBlocksPerAllocation: expected a number of blocks");
        expect_error("maxBlocksPerProcess: \"\"\n", 1, "maxBlocksPerProcess: expected a number of blocks, got ''");
        expect_error("resourceName: gpumem\n", 1, "resourceName: expected domain/name");
        expect_error("resourceName: Bad.IO/x\n", 1, "resourceName: expected domain/name");
        expect_error("inject: ldpreload\n", 1, "inject: expected preload or env, got 'ldpreload'");
        expect_error("deviceNodes: maybe\n", 1, "deviceNodes: expected true or false, got 'maybe'");
        expect_error("logLevel: loud\n", 1, "logLevel: expected error, warn, info or debug");
        expect_error("kubeletDir: relative/dir\n", 1, "kubeletDir: must be an absolute path");
        expect_error("hookPath: \"\"\n", 1, "hookPath: must be an absolute path");
        expect_error("preloadPath: x\n", 1, "preloadPath: must be an absolute path");
        expect_error("socketRoot: r\n", 1, "socketRoot: must be an absolute path");
        expect_error("stateDir: s\n", 1, "stateDir: must be an absolute path");
        expect_error(
                "agentSocket: /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
                1, "agentSocket: socket path too long");
        expect_error("cudaLibrary: \"\"\n", 1, "cudaLibrary: must not be empty");
        expect_error("metricsAddress: nowhere\n", 1, "metricsAddress: expected host:port");
        expect_error("metricsAddress: \":99999\"\n", 1, "metricsAddress: bad port");
        expect_error("devices: some\n", 1, "devices: expected 'all' or a list, got 'some'");
        expect_error("devices:\n  - 0\n  - GPU-zz\n", 3, "devices: 'GPU-zz' is neither a GPU UUID");
        expect_error("devices:\n  - 1\n  - 1\n", 3, "devices: '1' listed twice");
        expect_error("devices: []\n", 1, "devices: an empty list");
        expect_error("devices: {a: 1}\n", 1, "devices: expected 'all' or a list, got a mapping");
        expect_error("unitSize: 1Gi\nunitSize: 2Gi\n", 2, "unitSize: given twice");
        expect_error("- a\n- b\n", 1, "expected a mapping");
        expect_error("unitSize: [1Gi\n", 2, ""); /* YAML syntax error, with its line */
        expect_error("a: b: c\n", 1, "");
        expect_error("workerThreads: 0\n", 1, "workerThreads: expected a whole number from 1 to 256, got '0'");
        expect_error("workerThreads: 257\n", 1, "workerThreads: expected a whole number from 1 to 256");
        expect_error("maxConnections: -5\n", 1, "maxConnections: expected a whole number");
        expect_error("maxConnectionsPerAllocation: 10k\n", 1, "maxConnectionsPerAllocation: expected a whole number");
        expect_error("maxConnectionsPerProcess: 99999999999999999999\n", 1, "maxConnectionsPerProcess: expected");
}
END_TEST

START_TEST(test_too_many_devices)
{
        char text[4096] = "devices:\n";

        for (int i = 0; i <= GS_CONFIG_MAX_DEVICES; i++) {
                char line[16];
                snprintf(line, sizeof(line), "  - %d\n", i);
                strcat(text, line);
        }
        expect_error(text, 2 + GS_CONFIG_MAX_DEVICES, "devices: more than 64 entries");
}
END_TEST

START_TEST(test_file_errors)
{
        struct gs_config c;
        char err[256] = "";

        gs_config_defaults(&c);
        ck_assert_int_eq(gs_config_load(&c, "/nonexistent/gshare.yaml", err, sizeof(err)), -ENOENT);
        ck_assert_ptr_nonnull(strstr(err, "/nonexistent/gshare.yaml: cannot read"));
        ck_assert_int_lt(gs_config_load(&c, "/tmp", err, sizeof(err)), 0);
        ck_assert_ptr_nonnull(strstr(err, "/tmp: not a regular file"));
}
END_TEST

START_TEST(test_validate)
{
        struct gs_config c;
        char err[256] = "";

        gs_config_defaults(&c);
        c.unit_bytes = 352 * GS_MiB;
        ck_assert_int_eq(gs_config_validate(&c, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "unitSize (352Mi) must be a non-zero multiple of chunkSize (64Mi)"));
        gs_config_defaults(&c);
        c.balloon_cap_bytes = 100 * GS_MiB;
        ck_assert_int_eq(gs_config_validate(&c, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "balloonCap"));
        gs_config_defaults(&c);
        c.burst_max_bytes = 100 * GS_MiB;
        ck_assert_int_eq(gs_config_validate(&c, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "burstMax (100Mi) must be a multiple of chunkSize (64Mi)"));
        gs_config_defaults(&c);
        c.spill_max_bytes = 100 * GS_MiB;
        ck_assert_int_eq(gs_config_validate(&c, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "spillMax (100Mi) must be a multiple of chunkSize (64Mi)"));
        gs_config_defaults(&c);
        c.chunk_bytes = 3 * GS_MiB;
        ck_assert_int_eq(gs_config_validate(&c, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "chunkSize"));
}
END_TEST

/* A value out of k's range or of the wrong form, and what its error says. */
static void bad_value(const struct gs_config_key *k, char *v, size_t n, const char **want)
{
        switch (k->type) {
        case GS_CT_SIZE:
                if (k->max) {
                        snprintf(v, n, "%llu", (unsigned long long)k->max + 1);
                        *want = "must be ";
                } else {
                        snprintf(v, n, "99999999999999999999");
                        *want = "size '99999999999999999999' is too large";
                }
                return;
        case GS_CT_DURATION:
                snprintf(v, n, "%llums", (unsigned long long)(k->max ? k->max : 24ull * 3600 * 1000) + 1);
                *want = k->max ? "must be at most" : "duration '";
                return;
        case GS_CT_COUNT:
                snprintf(v, n, "%llu", (unsigned long long)k->max + 1);
                *want = "expected a whole number from 1 to";
                return;
        case GS_CT_BLOCKS:
                snprintf(v, n, "%llu", (unsigned long long)k->max + 1);
                *want = "must be 1 to";
                return;
        case GS_CT_BOOL:
        case GS_CT_ENUM:
                snprintf(v, n, "sometimes");
                *want = "expected ";
                return;
        case GS_CT_DEVICES:
                snprintf(v, n, "[1024]");
                *want = "'1024' is neither a GPU UUID";
                return;
        case GS_CT_PATH:
        case GS_CT_SOCKET:
        case GS_CT_STRING:
                /* One character more than the field holds. */
                ck_assert_uint_lt(k->size + 1, n);
                memset(v, 'a', k->size);
                v[0] = k->type == GS_CT_STRING ? 'a' : '/';
                v[k->size] = '\0';
                *want = k->type == GS_CT_SOCKET ? "socket path too long" : "";
                if (k->type == GS_CT_PATH || (k->type == GS_CT_STRING && !k->check))
                        *want = "too long";
                return;
        }
        ck_abort_msg("%s: a type this test does not know", k->name);
}

/* Every key of the table: a value out of range is refused, the error names
 * the file, line and key, and the config is untouched. */
START_TEST(test_every_key_out_of_range)
{
        static char text[PATH_MAX + 512], v[PATH_MAX + 64], want[PATH_MAX + 256];

        for (size_t i = 0; i < gs_config_nkeys; i++) {
                const struct gs_config_key *k = &gs_config_keys[i];
                const char *problem = "";

                bad_value(k, v, sizeof(v), &problem);
                snprintf(text, sizeof(text), "# line 1\n%s: %s\n", k->name, v);
                snprintf(want, sizeof(want), "%s: %s", k->name, problem);
                expect_error(text, 2, want);
        }
}
END_TEST

/* Every key but devices takes one value: a list or a mapping is refused. */
START_TEST(test_every_key_one_value)
{
        char text[256], want[256];

        for (size_t i = 0; i < gs_config_nkeys; i++) {
                const struct gs_config_key *k = &gs_config_keys[i];

                if (k->type == GS_CT_DEVICES)
                        continue;
                snprintf(text, sizeof(text), "%s: [1, 2]\n", k->name);
                snprintf(want, sizeof(want), "%s: expected a single value, got a list", k->name);
                expect_error(text, 1, want);
                snprintf(text, sizeof(text), "%s: {a: 1}\n", k->name);
                snprintf(want, sizeof(want), "%s: expected a single value, got a mapping", k->name);
                expect_error(text, 1, want);
        }
}
END_TEST

/* The table's bounds are inclusive: min and max are accepted, as a file's
 * value or a flag's. */
START_TEST(test_bounds_accepted)
{
        for (size_t i = 0; i < gs_config_nkeys; i++) {
                const struct gs_config_key *k = &gs_config_keys[i];
                struct gs_config c;
                char v[64], err[512] = "";
                uint64_t got = 0;

                if (k->type != GS_CT_COUNT && k->type != GS_CT_BLOCKS && !(k->type == GS_CT_DURATION && k->max))
                        continue;
                for (int hi = 0; hi < 2; hi++) {
                        uint64_t want = hi ? k->max : k->min;
                        gs_config_defaults(&c);
                        if (k->type == GS_CT_DURATION)
                                snprintf(v, sizeof(v), "%llums", (unsigned long long)want);
                        else
                                snprintf(v, sizeof(v), "%llu", (unsigned long long)want);
                        ck_assert_msg(gs_config_set(&c, k->name, v, err, sizeof(err)) == 0, "%s", err);
                        memcpy(&got, (char *)&c + k->offset, k->size);
                        ck_assert_uint_eq(got, want);
                }
        }
}
END_TEST

START_TEST(test_unknown_keys)
{
        struct gs_config c, before;
        char err[256] = "";

        expect_error("workerThreads: 2\nmaxConnectionz: 5\n", 2, "maxConnectionz: unknown key");
        /* A flag's name is not a key of the file. */
        expect_error("--chunk-size: 128Mi\n", 1, "--chunk-size: unknown key");
        gs_config_defaults(&c);
        before = c;
        ck_assert_int_eq(gs_config_set(&c, "--bogus", "1", err, sizeof(err)), -EINVAL);
        ck_assert_str_eq(err, "--bogus: unknown key");
        ck_assert_int_eq(memcmp(&c, &before, sizeof(c)), 0);
}
END_TEST

/* Flags: a key set by its flag or its YAML name, with the file's rules and
 * errors under the flag's name; a failed flag changes nothing. */
START_TEST(test_flags)
{
        struct gs_config c, before;
        char err[512] = "";

        gs_config_defaults(&c);
        ck_assert_int_eq(gs_config_set(&c, "--chunk-size", "128Mi", err, sizeof(err)), 0);
        ck_assert_uint_eq(c.chunk_bytes, 128 * GS_MiB);
        ck_assert_int_eq(gs_config_set(&c, "--reconcile-interval", "0.5s", err, sizeof(err)), 0);
        ck_assert_uint_eq(c.reconcile_interval_ms, 500);
        ck_assert_int_eq(gs_config_set(&c, "--socket", "/tmp/x.sock", err, sizeof(err)), 0);
        ck_assert_str_eq(c.agent_socket, "/tmp/x.sock");
        ck_assert_int_eq(gs_config_set(&c, "workerThreads", "16", err, sizeof(err)), 0);
        ck_assert_uint_eq(c.worker_threads, 16);
        ck_assert_int_eq(gs_config_set(&c, "--devices", "GPU-8f3c2c1a-5b7d-4e1f-9a0b-0123456789ab,3", err, sizeof(err)),
                         0);
        ck_assert_uint_eq(c.ndevices, 2);
        ck_assert_str_eq(c.devices[0], "GPU-8f3c2c1a-5b7d-4e1f-9a0b-0123456789ab");
        ck_assert_str_eq(c.devices[1], "3");

        before = c;
        ck_assert_int_eq(gs_config_set(&c, "--chunk-size", "3Mi", err, sizeof(err)), -EINVAL);
        ck_assert_str_eq(err, "--chunk-size: must be a power of two, got 3Mi");
        ck_assert_int_eq(gs_config_set(&c, "--unit-size", "1GB", err, sizeof(err)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "--unit-size: not a size: '1GB'"));
        ck_assert_int_eq(gs_config_set(&c, "--state-dir", "relative", err, sizeof(err)), -EINVAL);
        ck_assert_str_eq(err, "--state-dir: must be an absolute path, got 'relative'");
        ck_assert_int_eq(gs_config_set(&c, "--reclaim-grace", "soon", err, sizeof(err)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "--reclaim-grace: not a duration: 'soon'"));
        ck_assert_int_eq(gs_config_set(&c, "--devices", "0,7,0", err, sizeof(err)), -EINVAL);
        ck_assert_str_eq(err, "--devices: '0' listed twice");
        ck_assert_int_eq(gs_config_set(&c, "--devices", "1,,2", err, sizeof(err)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "--devices: '' is neither a GPU UUID"));
        ck_assert_int_eq(gs_config_set(&c, "maxConnections", "0", err, sizeof(err)), -EINVAL);
        ck_assert_str_eq(err, "maxConnections: expected a whole number from 1 to 65536, got '0'");
        ck_assert_int_eq(memcmp(&c, &before, sizeof(c)), 0);

        ck_assert_int_eq(gs_config_set(&c, "--devices", "all", err, sizeof(err)), 0);
        ck_assert_uint_eq(c.ndevices, 0);
}
END_TEST

/* Every flag names a key of the table, once. */
START_TEST(test_flags_unique)
{
        for (size_t i = 0; i < gs_config_nkeys; i++) {
                const struct gs_config_key *k = &gs_config_keys[i];

                ck_assert_ptr_eq(gs_config_key_find(k->name), k);
                if (k->flag) {
                        ck_assert_msg(strncmp(k->flag, "--", 2) == 0, "%s: flag %s", k->name, k->flag);
                        ck_assert_ptr_eq(gs_config_key_find(k->flag), k);
                }
        }
}
END_TEST

int main(void)
{
        Suite *s = suite_create("config");
        TCase *tc = tcase_create("config");

        tcase_add_test(tc, test_defaults);
        tcase_add_test(tc, test_every_key);
        tcase_add_test(tc, test_partial_keeps_rest);
        tcase_add_test(tc, test_sizes);
        tcase_add_test(tc, test_errors);
        tcase_add_test(tc, test_too_many_devices);
        tcase_add_test(tc, test_file_errors);
        tcase_add_test(tc, test_validate);
        tcase_add_test(tc, test_every_key_out_of_range);
        tcase_add_test(tc, test_every_key_one_value);
        tcase_add_test(tc, test_bounds_accepted);
        tcase_add_test(tc, test_unknown_keys);
        tcase_add_test(tc, test_flags);
        tcase_add_test(tc, test_flags_unique);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
