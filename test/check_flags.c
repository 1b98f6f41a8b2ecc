/* check_flags.c — common/gs_flags.h: the command lines of the agent and
 * both plugins through the table of configuration keys.  A flag accepts
 * what its key accepts in the file (same problem in the error); the file
 * lies under the flags wherever --config stands; a program's own keys
 * have their types and checks; hostile values (empty, over-long, wrong
 * type) and malformed specs are refused. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_flags.h"

static struct gs_config cfg;
static char err[1024];
static int verbose;

/* A command line of args (up to NULL) after the program's name; getopt
 * may reorder the copy. */
static enum gs_flags_result parse(const struct gs_flags_spec *spec, const char *const *args)
{
        char *argv[32];
        int argc = 0;

        argv[argc++] = (char *)"prog";
        while (*args && argc < 31)
                argv[argc++] = (char *)*args++;
        argv[argc] = NULL;
        return gs_flags_parse(spec, argc, argv, &cfg, &verbose, err, sizeof(err));
}
#define PARSE(spec, ...) parse(spec, (const char *const[]){ __VA_ARGS__, NULL })

static const struct gs_flags_spec agent = { .key_flags = true };

/* A program's own settings, as the plugins have them. */
struct own {
        uint32_t timeout_ms;
        char endpoint[16];
        char dir[PATH_MAX];
};
#define OWN(f) .offset = offsetof(struct own, f), .size = sizeof(((struct own *)0)->f)

static int no_slash(const char *s, uint64_t v, char *msg, size_t n)
{
        (void)v;
        if (strchr(s, '/')) {
                snprintf(msg, n, "a file name, got '%s'", s);
                return -EINVAL;
        }
        return 0;
}

static const struct gs_config_key own_keys[] = {
        { "timeout", NULL, GS_CT_COUNT, OWN(timeout_ms), .min = 1, .max = 600000 },
        { "endpoint", NULL, GS_CT_STRING, OWN(endpoint), .check = no_slash },
        { "dir", NULL, GS_CT_PATH, OWN(dir) },
};
static struct own own;
static const struct gs_flag plugin_flags[] = {
        { "--kubelet-dir", "kubeletDir", NULL, NULL }, { "--agent-socket", "agentSocket", NULL, NULL },
        { "--timeout-ms", NULL, &own_keys[0], &own },  { "--endpoint", NULL, &own_keys[1], &own },
        { "--dir", NULL, &own_keys[2], &own },
};
static const struct gs_flags_spec plugin = { plugin_flags, GS_ARRAY_SIZE(plugin_flags), false, NULL };

static char tmp[64];

static const char *write_config(const char *name, const char *text)
{
        static char path[128];
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", tmp, name);
        f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(text, f);
        fclose(f);
        return path;
}

static void setup(void)
{
        snprintf(tmp, sizeof(tmp), "/tmp/check_flags.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(tmp));
        memset(&own, 0, sizeof(own));
        own.timeout_ms = 2000;
        verbose = 0;
        err[0] = '\0';
}

static void teardown(void)
{
        char cmd[96];

        snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
        (void)!system(cmd);
}

START_TEST(test_key_flags_as_in_the_file)
{
        ck_assert_int_eq(PARSE(&agent, "--chunk-size", "128Mi", "--unit-size=1Gi", "-v", "--verbose"), GS_FLAGS_OK);
        ck_assert_uint_eq(cfg.chunk_bytes, 128 * GS_MiB);
        ck_assert_int_eq(verbose, 2);
        /* The same problem as the file's, named by the flag. */
        ck_assert_int_eq(PARSE(&agent, "--chunk-size", "3Mi"), GS_FLAGS_BAD_FLAG);
        ck_assert_str_eq(err, "--chunk-size: must be a power of two, got 3Mi");
        ck_assert_int_eq(PARSE(&agent, "--devices", "0,GPU-bad"), GS_FLAGS_BAD_FLAG);
        ck_assert_ptr_nonnull(strstr(err, "--devices: 'GPU-bad' is neither a GPU UUID"));
        ck_assert_int_eq(PARSE(&agent, "--devices", "0,1"), GS_FLAGS_OK);
        ck_assert_uint_eq(cfg.ndevices, 2);
        /* A key without a flag of the agent's is no flag. */
        ck_assert_int_eq(PARSE(&agent, "--node-name", "x"), GS_FLAGS_BAD_FLAG);
        ck_assert_str_eq(err, ""); /* getopt named it */
}
END_TEST

START_TEST(test_config_under_the_flags)
{
        const char *c = write_config("c.yaml", "chunkSize: 256Mi\nunitSize: 1Gi\nreserve: 1Gi\n");

        /* Flags before and after --config both win over the file. */
        ck_assert_int_eq(PARSE(&agent, "--reserve", "2Gi", "--config", c, "--chunk-size", "64Mi"), GS_FLAGS_OK);
        ck_assert_uint_eq(cfg.reserve_bytes, 2 * GS_GiB);
        ck_assert_uint_eq(cfg.chunk_bytes, 64 * GS_MiB);
        ck_assert_uint_eq(cfg.unit_bytes, GS_GiB);
        /* The file's own error, with its line. */
        c = write_config("bad.yaml", "unitSize: 1Gi\nchunkSize: 3Mi\n");
        ck_assert_int_eq(PARSE(&agent, "--config", c), GS_FLAGS_BAD_CONFIG);
        ck_assert_ptr_nonnull(strstr(err, "bad.yaml:2: chunkSize: must be a power of two"));
        ck_assert_int_eq(PARSE(&agent, "--config", "/nonexistent/c.yaml"), GS_FLAGS_BAD_CONFIG);
        /* Values that do not go together: refused after all are set. */
        ck_assert_int_eq(PARSE(&agent, "--unit-size", "96Mi", "--chunk-size", "64Mi"), GS_FLAGS_BAD_CONFIG);
        ck_assert_ptr_nonnull(strstr(err, "unitSize"));
        /* -h wins, even over a bad file, and loads nothing. */
        ck_assert_int_eq(PARSE(&agent, "--config", c, "-h"), GS_FLAGS_HELP);
        ck_assert_int_eq(PARSE(&agent, "--help"), GS_FLAGS_HELP);
}
END_TEST

START_TEST(test_default_config)
{
        const char *c = write_config("default.yaml", "kubeletDir: /from/the/file\n");
        struct gs_flags_spec s = plugin;

        s.default_config = c;
        ck_assert_int_eq(PARSE(&s, NULL), GS_FLAGS_OK);
        ck_assert_str_eq(cfg.kubelet_dir, "/from/the/file");
        ck_assert_int_eq(PARSE(&s, "--kubelet-dir", "/flag"), GS_FLAGS_OK);
        ck_assert_str_eq(cfg.kubelet_dir, "/flag");
        /* A default that is not there: the built-in defaults. */
        s.default_config = "/nonexistent/default.yaml";
        ck_assert_int_eq(PARSE(&s, NULL), GS_FLAGS_OK);
        ck_assert_str_eq(cfg.kubelet_dir, "/var/lib/kubelet/device-plugins");
}
END_TEST

START_TEST(test_plugin_flags_through_keys)
{
        static char longsock[200];

        ck_assert_int_eq(PARSE(&plugin, "--agent-socket", "/run/a.sock", "--timeout-ms", "250", "--endpoint", "e.sock",
                               "--dir", "/proc/x"),
                         GS_FLAGS_OK);
        ck_assert_str_eq(cfg.agent_socket, "/run/a.sock");
        ck_assert_uint_eq(own.timeout_ms, 250);
        ck_assert_str_eq(own.endpoint, "e.sock");
        ck_assert_str_eq(own.dir, "/proc/x");
        /* The key's rules: absolute, fits sockaddr_un. */
        ck_assert_int_eq(PARSE(&plugin, "--kubelet-dir", "relative/dir"), GS_FLAGS_BAD_FLAG);
        ck_assert_str_eq(err, "--kubelet-dir: must be an absolute path, got 'relative/dir'");
        memset(longsock, 'a', sizeof(longsock) - 1);
        longsock[0] = '/';
        ck_assert_int_eq(PARSE(&plugin, "--agent-socket", longsock), GS_FLAGS_BAD_FLAG);
        ck_assert_ptr_nonnull(strstr(err, "--agent-socket: socket path too long"));
        /* The own keys' rules; a refused value leaves the old one. */
        own.timeout_ms = 2000;
        static const char *const bad_counts[] = { "0", "600001", "-1", "", "1x", "99999999999999999999", "0x10" };
        for (size_t i = 0; i < GS_ARRAY_SIZE(bad_counts); i++) {
                ck_assert_int_eq(PARSE(&plugin, "--timeout-ms", bad_counts[i]), GS_FLAGS_BAD_FLAG);
                ck_assert_ptr_nonnull(strstr(err, "--timeout-ms: expected a whole number from 1 to 600000"));
                ck_assert_uint_eq(own.timeout_ms, 2000);
        }
        ck_assert_int_eq(PARSE(&plugin, "--endpoint", "../kubelet.sock"), GS_FLAGS_BAD_FLAG);
        ck_assert_str_eq(err, "--endpoint: a file name, got '../kubelet.sock'");
        ck_assert_int_eq(PARSE(&plugin, "--endpoint", ""), GS_FLAGS_BAD_FLAG);
        ck_assert_str_eq(err, "--endpoint: must not be empty");
        ck_assert_int_eq(PARSE(&plugin, "--endpoint", "0123456789abcdef"), GS_FLAGS_BAD_FLAG); /* 16: no room */
        ck_assert_ptr_nonnull(strstr(err, "too long"));
        ck_assert_int_eq(PARSE(&plugin, "--dir", "x"), GS_FLAGS_BAD_FLAG);
        /* The agent's flags are not the plugin's. */
        ck_assert_int_eq(PARSE(&plugin, "--chunk-size", "64Mi"), GS_FLAGS_BAD_FLAG);
        /* A missing value, a stray argument. */
        ck_assert_int_eq(PARSE(&plugin, "--endpoint"), GS_FLAGS_BAD_FLAG);
        ck_assert_int_eq(PARSE(&plugin, "stray"), GS_FLAGS_BAD_FLAG);
        ck_assert_str_eq(err, "unexpected argument 'stray'");
}
END_TEST

START_TEST(test_bad_specs)
{
        static const struct gs_config_key devices = { "d", NULL, GS_CT_DEVICES, 0, 64, .opts = 0 };
        const struct gs_flag bad[][1] = {
                { { "kubelet-dir", "kubeletDir", NULL, NULL } }, /* no "--" */
                { { "--", "kubeletDir", NULL, NULL } },
                { { "--x", "noSuchKey", NULL, NULL } },
                { { "--x", NULL, NULL, NULL } },                 /* sets nothing */
                { { "--x", "kubeletDir", &own_keys[0], &own } }, /* two things */
                { { "--x", NULL, &own_keys[0], NULL } },         /* no base */
                { { "--x", NULL, &devices, &own } },             /* devices are the config's */
        };
        static struct gs_flag many[GS_FLAGS_MAX + 1];

        for (size_t i = 0; i < GS_ARRAY_SIZE(bad); i++) {
                struct gs_flags_spec s = { bad[i], 1, false, NULL };
                ck_assert_int_eq(PARSE(&s, NULL), GS_FLAGS_BAD_FLAG);
                ck_assert_ptr_nonnull(strstr(err, "not a flag the table can set"));
        }
        for (size_t i = 0; i < GS_ARRAY_SIZE(many); i++)
                many[i] = (struct gs_flag){ "--x", NULL, &own_keys[0], &own };
        struct gs_flags_spec s = { many, GS_ARRAY_SIZE(many), false, NULL };
        ck_assert_int_eq(PARSE(&s, NULL), GS_FLAGS_BAD_FLAG);
        ck_assert_ptr_nonnull(strstr(err, "more than"));
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("flags");
        TCase *tc = tcase_create("core");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_key_flags_as_in_the_file);
        tcase_add_test(tc, test_config_under_the_flags);
        tcase_add_test(tc, test_default_config);
        tcase_add_test(tc, test_plugin_flags_through_keys);
        tcase_add_test(tc, test_bad_specs);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return gs_check_run(suite());
}
