/* main.c — gshare-dra-plugin: flags, config, signals (dra/gs_dra.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gs_config.h"
#include "gs_config_keys.h"
#include "gs_flags.h"
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

/* The plugin's own settings (not in the YAML): keys of a table of its
 * own, set as the config's keys are (common/gs_flags.h). */
struct dra_flags {
        char root[PATH_MAX], regdir[PATH_MAX], plugdir[PATH_MAX];
};
#define OWN(s, f) .offset = offsetof(struct s, f), .size = sizeof(((struct s *)0)->f)

static int check_driver(const char *s, uint64_t v, char *msg, size_t n)
{
        (void)v;
        if (!gs_k8s_subdomain_ok(s)) {
                snprintf(msg, n, "not a DRA driver name (a DNS subdomain): '%s'", s);
                return -EINVAL;
        }
        return 0;
}

static const struct gs_config_key own_keys[] = {
        { "driver", NULL, GS_CT_STRING, OWN(gs_dra_opts, driver), .check = check_driver },
        { "cdiDir", NULL, GS_CT_PATH, OWN(gs_dra_opts, cdi_dir) },
        { "nvidiaProc", NULL, GS_CT_PATH, OWN(gs_dra_opts, nvidia_proc) },
        { "agentTimeout", NULL, GS_CT_COUNT, OWN(gs_dra_opts, agent_timeout_ms), .min = 1, .max = 600000 },
        { "kubeletRoot", NULL, GS_CT_PATH, OWN(dra_flags, root) },
        { "registryDir", NULL, GS_CT_PATH, OWN(dra_flags, regdir) },
        { "pluginsDir", NULL, GS_CT_PATH, OWN(dra_flags, plugdir) },
};

int main(int argc, char **argv)
{
        static struct gs_dra_opts o; /* large: off the stack */
        static struct dra_flags df = { .root = "/var/lib/kubelet" };
        const struct gs_flag flags[] = {
                { "--driver", NULL, &own_keys[0], &o },        { "--cdi-dir", NULL, &own_keys[1], &o },
                { "--nvidia-proc", NULL, &own_keys[2], &o },   { "--agent-timeout-ms", NULL, &own_keys[3], &o },
                { "--kubelet-root", NULL, &own_keys[4], &df }, { "--registry-dir", NULL, &own_keys[5], &df },
                { "--plugins-dir", NULL, &own_keys[6], &df },  { "--agent-socket", "agentSocket", NULL, NULL },
                { "--node", "nodeName", NULL, NULL },
        };
        const struct gs_flags_spec spec = { flags, GS_ARRAY_SIZE(flags), false, GS_CONFIG_DEFAULT_PATH };
        const char *node;
        char err[1024];
        int verbose = 0;
        sigset_t mask;

        o.agent_timeout_ms = 5000;
        snprintf(o.driver, sizeof(o.driver), "%s", GS_DRA_DRIVER);
        snprintf(o.cdi_dir, sizeof(o.cdi_dir), "/var/run/cdi");
        snprintf(o.nvidia_proc, sizeof(o.nvidia_proc), "/proc/driver/nvidia");
        switch (gs_flags_parse(&spec, argc, argv, &o.cfg, &verbose, err, sizeof(err))) {
        case GS_FLAGS_OK: break;
        case GS_FLAGS_HELP: usage(stdout); return 0;
        case GS_FLAGS_BAD_FLAG:
                if (err[0])
                        fprintf(stderr, "gshare-dra-plugin: %s\n", err);
                else
                        usage(stderr); /* getopt has named the flag */
                return 2;
        case GS_FLAGS_BAD_CONFIG: fprintf(stderr, "gshare-dra-plugin: %s\n", err); return 1;
        }
        node = o.cfg.node_name[0] ? o.cfg.node_name : secure_getenv("NODE_NAME");
        if (!node || !gs_k8s_subdomain_ok(node) || strlen(node) >= sizeof(o.node)) {
                fprintf(stderr,
                        "gshare-dra-plugin: no node name, or not a DNS name: give --node, nodeName or $NODE_NAME\n");
                return 2;
        }
        snprintf(o.node, sizeof(o.node), "%s", node);
        if ((df.regdir[0] ? snprintf(o.registry_dir, sizeof(o.registry_dir), "%s", df.regdir)
                          : snprintf(o.registry_dir, sizeof(o.registry_dir), "%s/plugins_registry", df.root)) >=
                    (int)sizeof(o.registry_dir) ||
            (df.plugdir[0] ? snprintf(o.plugin_dir, sizeof(o.plugin_dir), "%s/%s", df.plugdir, o.driver)
                           : snprintf(o.plugin_dir, sizeof(o.plugin_dir), "%s/plugins/%s", df.root, o.driver)) >=
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
