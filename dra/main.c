/* main.c — gshare-dra-plugin: flags, config, signals (dra/gs_dra.h). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gs_config.h"
#include "gs_dra.h"
#include "gs_k8sname.h"
#include "gs_log.h"

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: gshare-dra-plugin [OPTIONS]\n"
                "Kubernetes DRA kubelet plugin for gshare GPU memory (dra/v1, ResourceSlices).\n\n"
                "  --config PATH           YAML config shared with the agent (default %s;\n"
                "                          if that default is missing, built-in defaults apply)\n"
                "  --driver NAME           the DRA driver's name (default %s)\n"
                "  --kubelet-root DIR      the kubelet's root (default /var/lib/kubelet): registration in\n"
                "                          DIR/plugins_registry, our socket in DIR/plugins/<driver>\n"
                "  --registry-dir DIR      overrides the registration directory (DIR/<driver>-reg.sock)\n"
                "  --plugins-dir DIR       overrides the plugins directory (our socket in DIR/<driver>)\n"
                "  --cdi-dir DIR           where CDI specs go (default /var/run/cdi)\n"
                "  --agent-socket PATH     the agent's control socket (config agentSocket)\n"
                "  --agent-timeout-ms N    bound on each call to the agent (default 5000)\n"
                "  --node NAME             this node (config nodeName, else $NODE_NAME)\n"
                "  --nvidia-proc DIR       the driver's proc dir, for its version (default /proc/driver/nvidia)\n"
                "  -v, --verbose           debug logging\n"
                "  -h, --help              this help\n",
                GS_CONFIG_DEFAULT_PATH, GS_DRA_DRIVER);
}

static int copy_opt(char *dst, size_t cap, const char *flag, const char *v)
{
        if (!v || !v[0] || strlen(v) >= cap) {
                fprintf(stderr, "gshare-dra-plugin: %s: bad value '%s'\n", flag, v ? v : "");
                return -EINVAL;
        }
        memcpy(dst, v, strlen(v) + 1);
        return 0;
}

int main(int argc, char **argv)
{
        enum { O_CONFIG = 256, O_DRIVER, O_ROOT, O_CDI, O_AGENT, O_TIMEOUT, O_NODE, O_PROC, O_REG, O_PLUGINS };
        static const struct option longopts[] = {
                { "config", required_argument, NULL, O_CONFIG },
                { "driver", required_argument, NULL, O_DRIVER },
                { "kubelet-root", required_argument, NULL, O_ROOT },
                { "cdi-dir", required_argument, NULL, O_CDI },
                { "registry-dir", required_argument, NULL, O_REG },
                { "plugins-dir", required_argument, NULL, O_PLUGINS },
                { "agent-socket", required_argument, NULL, O_AGENT },
                { "agent-timeout-ms", required_argument, NULL, O_TIMEOUT },
                { "node", required_argument, NULL, O_NODE },
                { "nvidia-proc", required_argument, NULL, O_PROC },
                { "verbose", no_argument, NULL, 'v' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        static struct gs_dra_opts o; /* large: off the stack */
        const char *config = NULL, *root = "/var/lib/kubelet", *agent = NULL, *node = NULL;
        const char *regdir = NULL, *plugdir = NULL;
        char err[1024];
        int verbose = 0, c, r;
        struct stat st;
        sigset_t mask;

        o.agent_timeout_ms = 5000;
        snprintf(o.driver, sizeof(o.driver), "%s", GS_DRA_DRIVER);
        snprintf(o.cdi_dir, sizeof(o.cdi_dir), "/var/run/cdi");
        snprintf(o.nvidia_proc, sizeof(o.nvidia_proc), "/proc/driver/nvidia");
        while ((c = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
                switch (c) {
                case O_CONFIG: config = optarg; break;
                case O_ROOT: root = optarg; break;
                case O_AGENT: agent = optarg; break;
                case O_NODE: node = optarg; break;
                case O_REG: regdir = optarg; break;
                case O_PLUGINS: plugdir = optarg; break;
                case O_DRIVER:
                        if (copy_opt(o.driver, sizeof(o.driver), "--driver", optarg) < 0 || !gs_k8s_subdomain_ok(o.driver))
                                return 2;
                        break;
                case O_CDI:
                        if (copy_opt(o.cdi_dir, sizeof(o.cdi_dir), "--cdi-dir", optarg) < 0)
                                return 2;
                        break;
                case O_PROC:
                        if (copy_opt(o.nvidia_proc, sizeof(o.nvidia_proc), "--nvidia-proc", optarg) < 0)
                                return 2;
                        break;
                case O_TIMEOUT: {
                        char *end;
                        long v = strtol(optarg, &end, 10);
                        if (*end || v < 1 || v > 600000) {
                                fprintf(stderr, "gshare-dra-plugin: --agent-timeout-ms: expected 1..600000, got '%s'\n", optarg);
                                return 2;
                        }
                        o.agent_timeout_ms = (int)v;
                        break;
                }
                case 'v': verbose = 1; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "gshare-dra-plugin: unexpected argument '%s'\n", argv[optind]);
                return 2;
        }
        gs_config_defaults(&o.cfg);
        if (config || stat(GS_CONFIG_DEFAULT_PATH, &st) == 0) {
                r = gs_config_load(&o.cfg, config ? config : GS_CONFIG_DEFAULT_PATH, err, sizeof(err));
                if (r == 0)
                        r = gs_config_validate(&o.cfg, err, sizeof(err));
                if (r < 0) {
                        fprintf(stderr, "gshare-dra-plugin: %s\n", err);
                        return 1;
                }
        }
        if (agent && copy_opt(o.cfg.agent_socket, sizeof(o.cfg.agent_socket), "--agent-socket", agent) < 0)
                return 2;
        if (!node)
                node = o.cfg.node_name[0] ? o.cfg.node_name : secure_getenv("NODE_NAME");
        if (!node || !gs_k8s_subdomain_ok(node) || copy_opt(o.node, sizeof(o.node), "--node", node) < 0) {
                fprintf(stderr, "gshare-dra-plugin: no node name, or not a DNS name: give --node, nodeName or $NODE_NAME\n");
                return 2;
        }
        if ((regdir ? snprintf(o.registry_dir, sizeof(o.registry_dir), "%s", regdir)
                    : snprintf(o.registry_dir, sizeof(o.registry_dir), "%s/plugins_registry", root)) >=
                    (int)sizeof(o.registry_dir) ||
            (plugdir ? snprintf(o.plugin_dir, sizeof(o.plugin_dir), "%s/%s", plugdir, o.driver)
                     : snprintf(o.plugin_dir, sizeof(o.plugin_dir), "%s/plugins/%s", root, o.driver)) >=
                    (int)sizeof(o.plugin_dir)) {
                fprintf(stderr, "gshare-dra-plugin: --kubelet-root, --registry-dir or --plugins-dir too long\n");
                return 2;
        }
        gs_log_init("dra", verbose ? GS_LOG_DEBUG : o.cfg.log_level);
        /* The stop signals are taken by sigwait; a dead peer must not kill us. */
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        signal(SIGPIPE, SIG_IGN);
        return gs_dra_run(&o) < 0 ? 1 : 0;
}
