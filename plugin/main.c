/* main.c — gshare-device-plugin: flags, config, signals. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "gs_config.h"
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

static int set_str(char *dst, size_t cap, const char *what, const char *v)
{
        if (!v[0] || strlen(v) >= cap) {
                fprintf(stderr, "gshare-device-plugin: %s: bad value '%s'\n", what, v);
                return -EINVAL;
        }
        memcpy(dst, v, strlen(v) + 1);
        return 0;
}

int main(int argc, char **argv)
{
        enum { O_CONFIG = 256, O_KDIR, O_AGENT, O_TIMEOUT, O_ENDPOINT, O_PROC };
        static const struct option longopts[] = {
                { "config", required_argument, NULL, O_CONFIG },
                { "kubelet-dir", required_argument, NULL, O_KDIR },
                { "agent-socket", required_argument, NULL, O_AGENT },
                { "agent-timeout-ms", required_argument, NULL, O_TIMEOUT },
                { "endpoint", required_argument, NULL, O_ENDPOINT },
                { "nvidia-proc", required_argument, NULL, O_PROC },
                { "verbose", no_argument, NULL, 'v' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        static struct gs_plugin_opts o; /* large: keep it off the stack */
        const char *config = NULL, *kdir = NULL, *agent = NULL;
        char err[1024];
        int verbose = 0, c, r;
        sigset_t mask;
        struct stat st;
        struct sockaddr_un sa;

        o.agent_timeout_ms = 2000;
        snprintf(o.nvidia_proc, sizeof(o.nvidia_proc), "/proc/driver/nvidia");
        snprintf(o.endpoint, sizeof(o.endpoint), "%s", GS_PLUGIN_ENDPOINT);
        while ((c = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
                switch (c) {
                case O_CONFIG: config = optarg; break;
                case O_KDIR: kdir = optarg; break;
                case O_AGENT: agent = optarg; break;
                case O_TIMEOUT: {
                        char *end;
                        long v = strtol(optarg, &end, 10);
                        if (*end || v < 1 || v > 600000) {
                                fprintf(stderr, "gshare-device-plugin: --agent-timeout-ms: expected 1..600000, got '%s'\n", optarg);
                                return 2;
                        }
                        o.agent_timeout_ms = (int)v;
                        break;
                }
                case O_ENDPOINT:
                        if (strchr(optarg, '/') || set_str(o.endpoint, sizeof(o.endpoint), "--endpoint", optarg) < 0) {
                                fprintf(stderr, "gshare-device-plugin: --endpoint: a file name, got '%s'\n", optarg);
                                return 2;
                        }
                        break;
                case O_PROC:
                        if (set_str(o.nvidia_proc, sizeof(o.nvidia_proc), "--nvidia-proc", optarg) < 0)
                                return 2;
                        break;
                case 'v': verbose = 1; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "gshare-device-plugin: unexpected argument '%s'\n", argv[optind]);
                usage(stderr);
                return 2;
        }
        gs_config_defaults(&o.cfg);
        if (config || stat(GS_CONFIG_DEFAULT_PATH, &st) == 0) {
                r = gs_config_load(&o.cfg, config ? config : GS_CONFIG_DEFAULT_PATH, err, sizeof(err));
                if (r < 0) {
                        fprintf(stderr, "gshare-device-plugin: %s\n", err);
                        return 1;
                }
        }
        if ((kdir && set_str(o.cfg.kubelet_dir, sizeof(o.cfg.kubelet_dir), "--kubelet-dir", kdir) < 0) ||
            (agent && set_str(o.cfg.agent_socket, sizeof(o.cfg.agent_socket), "--agent-socket", agent) < 0))
                return 2;
        /* + the private name serve() binds first: "/.<endpoint>.<pid>.<n>" */
        if (strlen(o.cfg.kubelet_dir) + 2 * strlen(o.endpoint) + 28 >= sizeof(sa.sun_path) ||
            strlen(o.cfg.agent_socket) >= sizeof(sa.sun_path)) {
                fprintf(stderr, "gshare-device-plugin: socket path too long for a unix socket\n");
                return 2;
        }
        r = gs_config_validate(&o.cfg, err, sizeof(err));
        if (r < 0) {
                fprintf(stderr, "gshare-device-plugin: %s\n", err);
                return 1;
        }
        gs_log_init("plugin", verbose ? GS_LOG_DEBUG : o.cfg.log_level);
        if (stat(o.cfg.kubelet_dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
                log_error("kubelet dir %s: %s", o.cfg.kubelet_dir,
                          errno ? strerror(errno) : "not a directory");
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
