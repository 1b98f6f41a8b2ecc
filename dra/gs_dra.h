/* gs_dra.h — gshare-dra-plugin: a Kubernetes DRA driver's kubelet plugin
 * (docs/dra.md).  Serves plugin registration (pluginregistration/v1) and
 * the dra/v1 DRAPlugin service with the gRPC C core; publishes the node's
 * ResourceSlice (gs_slice.h); prepares a claim by asking the agent for an
 * allocation of the claim's consumed memory (CreateClaimAllocation) and
 * writing its CDI spec (gs_cdi.h).  It keeps no state of its own: the agent
 * holds the claims' allocations, the CDI directory their specs, so it may
 * be restarted at any time. */
#ifndef GS_DRA_H
#define GS_DRA_H

#include <limits.h>

#include "gs_config.h"
#include "gs_util.h"

#define GS_DRA_DRIVER "gpumem.gshare.io"
#define GS_DRA_SERVICE "v1.DRAPlugin"
#define GS_DRA_SERVICE_BETA "v1beta1.DRAPlugin" /* same handlers: see gs_dra_run */
#define GS_DRA_MAX_CLAIMS 64                    /* claims in one call */

struct gs_dra_opts {
        struct gs_config cfg;
        char driver[64];             /* the DRA driver's name */
        char registry_dir[PATH_MAX]; /* <kubelet>/plugins_registry */
        char plugin_dir[PATH_MAX];   /* <kubelet>/plugins/<driver> */
        char cdi_dir[PATH_MAX];      /* /var/run/cdi */
        char nvidia_proc[PATH_MAX];  /* /proc/driver/nvidia: the driver's version */
        char node[GS_CONFIG_NODE_NAME_MAX];
        uint32_t agent_timeout_ms; /* each call to the agent, 1..600000 */
};

/* Runs until SIGTERM or SIGINT (blocked by the caller in every thread).
 * 0 on a clean stop, a negative errno if it could not start. */
int gs_dra_run(const struct gs_dra_opts *o) GS_WUR;

#endif
