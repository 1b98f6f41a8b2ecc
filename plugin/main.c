/* main.c — gshare-device-plugin: flags, config, signals. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "gs_config.h"
#include "gs_flags.h"
#include "gs_log.h"
#include "gs_plugin.h"

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: gshare-device-plugin [OPTIONS]\n"
                "Advertises gshare GPU memory units to the kubelet (device-plugin API v1beta1).\n\n"
                "  --config PATH           YAML config shared with the agent (default %s;\n"
                "                          if that default is missing, built-in defaults apply)\n"
                "  --kubelet-dir DIR       the kubelet's device-plugin dir (config kubeletDir)\n"
                "  --agent-socket PATH     the agent's control socket (config agentSocket)\n"
                "  --agent-timeout-ms N    bound on each call to the agent (default 2000)\n"
                "  --endpoint NAME         our socket's name in the kubelet dir (default %s)\n"
                "  --nvidia-proc DIR       driver's proc dir for device minors (default /proc/driver/nvidia)\n"
                "  -v, --verbose           debug logging\n"
                "  -h, --help              this help\n",
                GS_CONFIG_DEFAULT_PATH, GS_PLUGIN_ENDPOINT);
}

/* The plugin's own settings (not in the YAML): keys of a table of its
 * own, set as the config's keys are (common/gs_flags.h). */
#define OWN(f) .offset = offsetof(struct gs_plugin_opts, f), .size = sizeof(((struct gs_plugin_opts *)0)->f)

/* The endpoint is a file name in the kubelet's directory: no path. */
static int check_endpoint(const char *s, uint64_t v, char *msg, size_t n)
{
        (void)v;
        if (strchr(s, '/') || strcmp(s, ".") == 0 || strcmp(s, "..") == 0) {
                snprintf(msg, n, "a file name, got '%s'", s);
                return -EINVAL;
        }
        return 0;
}

static const struct gs_config_key own_keys[] = {
        { "agentTimeout", NULL, GS_CT_COUNT, OWN(agent_timeout_ms), .min = 1, .max = 600000 },
        { "endpoint", NULL, GS_CT_STRING, OWN(endpoint), .check = check_endpoint },
        { "nvidiaProc", NULL, GS_CT_PATH, OWN(nvidia_proc) },
};

int main(int argc, char **argv)
{
        static struct gs_plugin_opts o; /* large: keep it off the stack */
        const struct gs_flag flags[] = {
                { "--kubelet-dir", "kubeletDir", NULL, NULL },    { "--agent-socket", "agentSocket", NULL, NULL },
                { "--agent-timeout-ms", NULL, &own_keys[0], &o }, { "--endpoint", NULL, &own_keys[1], &o },
                { "--nvidia-proc", NULL, &own_keys[2], &o },
        };
        const struct gs_flags_spec spec = { flags, GS_ARRAY_SIZE(flags), false, GS_CONFIG_DEFAULT_PATH };
        char err[1024];
        int verbose = 0, r;
        sigset_t mask;
        struct stat st;
        struct sockaddr_un sa;

        o.agent_timeout_ms = 2000;
        snprintf(o.nvidia_proc, sizeof(o.nvidia_proc), "/proc/driver/nvidia");
        snprintf(o.endpoint, sizeof(o.endpoint), "%s", GS_PLUGIN_ENDPOINT);
        switch (gs_flags_parse(&spec, argc, argv, &o.cfg, &verbose, err, sizeof(err))) {
        case GS_FLAGS_OK: break;
        case GS_FLAGS_HELP: usage(stdout); return 0;
        case GS_FLAGS_BAD_FLAG:
                if (err[0])
                        fprintf(stderr, "gshare-device-plugin: %s\n", err);
                else
                        usage(stderr); /* getopt has named the flag */
                return 2;
        case GS_FLAGS_BAD_CONFIG: fprintf(stderr, "gshare-device-plugin: %s\n", err); return 1;
        }
        /* + the private name serve() binds first: "/.<endpoint>.<pid>.<n>" */
        if (strlen(o.cfg.kubelet_dir) + 2 * strlen(o.endpoint) + 28 >= sizeof(sa.sun_path) ||
            strlen(o.cfg.agent_socket) >= sizeof(sa.sun_path)) {
                fprintf(stderr, "gshare-device-plugin: socket path too long for a unix socket\n");
                return 2;
        }
        gs_log_init("plugin", verbose ? GS_LOG_DEBUG : o.cfg.log_level);
        if (stat(o.cfg.kubelet_dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
                log_error("kubelet dir %s: %s", o.cfg.kubelet_dir, errno ? strerror(errno) : "not a directory");
                return 1;
        }
        /* Block the stop signals in every thread; the plugin takes them with
         * a signalfd.  A dead peer must not kill us with SIGPIPE. */
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        signal(SIGPIPE, SIG_IGN);
        r = gs_plugin_run(&o);
        return r < 0 ? 1 : 0;
}
