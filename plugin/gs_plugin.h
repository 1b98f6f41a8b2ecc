/* gs_plugin.h — gshare-device-plugin: the kubelet device-plugin API
 * (v1beta1) served over the gRPC C core, backed by the agent's control
 * socket.  The plugin is stateless: GPUs, health and allocations come from
 * the agent; it may crash and restart freely. */
#ifndef GS_PLUGIN_H
#define GS_PLUGIN_H

#include <limits.h>

#include "gs_config.h"
#include "gs_util.h"

#define GS_PLUGIN_ENDPOINT "gshare.sock"
#define GS_PLUGIN_API_VERSION "v1beta1"
#define GS_PLUGIN_KUBELET_SOCKET "kubelet.sock"

struct gs_plugin_opts {
        struct gs_config cfg;
        uint32_t agent_timeout_ms;  /* each call to the agent, 1..600000 */
        char nvidia_proc[PATH_MAX]; /* /proc/driver/nvidia, for device minors */
        char endpoint[64];          /* socket file name in the kubelet dir */
};

/* Runs until SIGTERM or SIGINT (which the caller has blocked in every
 * thread; the plugin takes them with a signalfd).  Returns 0 on a clean
 * stop, or a negative errno if it could not start serving. */
int gs_plugin_run(const struct gs_plugin_opts *o) GS_WUR;

#endif
