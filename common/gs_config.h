/* gs_config.h — the YAML configuration shared by gshare-agent and
 * gshare-device-plugin (rendered by the Helm chart into one ConfigMap).
 *
 * Example (every key optional; these are the defaults):
 *
 *   resourceName: gshare.io/gpumem
 *   unitSize: 1Gi            # one unit of the resource
 *   chunkSize: 64Mi          # GSM size: a power of two, multiple of 2Mi
 *   reserve: 512Mi           # per GPU, headroom left free in the driver
 *   balloonCap: 0            # per allocation, borrowable from the system list
 *   burstMax: 0              # the most an allocation's burst may borrow past its
 *                            # quota (docs/burst.md); 0: no burst past balloonCap
 *   spillMax: 0              # per GPU, host memory for borrowers' data moved off
 *                            # the GPU when its owners want it back; 0: no spill
 *   reclaimKillAfter: 0      # an owner still short of its lent memory this long
 *                            # (no host memory left to spill to): its biggest
 *                            # borrower is killed; 0: never
 *   moveBackQuiet: 10s       # spilled data moves back once no owner asked for
 *                            # lent memory this long
 *   maxBlocksPerProcess: 1048576     # live blocks (cuMemAlloc) a process may hold
 *   maxBlocksPerAllocation: 4194304  # ... all processes of an allocation, per GPU
 *   devices: all             # or a list of GPU UUIDs / indices
 *   agentSocket: /run/gshare/agent.sock
 *   socketRoot: /run/gshare/alloc        # allocations' socket directories
 *   stateDir: /var/lib/gshare            # agent checkpoint
 *   kubeletDir: /var/lib/kubelet/device-plugins
 *   hookPath: /usr/local/lib/gshare/libgshare.so   # host path, mounted into pods
 *   preloadPath: /usr/local/lib/gshare/ld.so.preload
 *   inject: preload          # preload (/etc/ld.so.preload) | env (LD_PRELOAD)
 *   deviceNodes: false       # also hand /dev/nvidia* to containers
 *   cudaLibrary: libcuda.so.1
 *   nvmlLibrary: libnvidia-ml.so.1
 *   contextSize: auto        # charged when a process creates a context; auto:
 *                            # the agent's own context, measured at start
 *   usageInterval: 1s        # NVML scan of memory outside the pool; 0: off
 *   overQuota: kill          # a pod over its quota outside the pool: kill | report
 *   metricsAddress: ""       # e.g. 0.0.0.0:9400; empty: off
 *   logLevel: info           # error | warn | info | debug
 *   podResourcesSocket: /var/lib/kubelet/pod-resources/kubelet.sock
 *   reconcileInterval: 10s   # PodResources poll (agent reconciler); 0: off
 *   reclaimGrace: 60s        # an allocation no pod holds this long is released
 *   computeLatencyPriority: 1000000 # a pod of this priority or more is latency-critical
 *   podWatch: auto           # API-server watch of the node's pods: auto | on | off
 *   apiServer: ""            # empty: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
 *   apiTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token  # "": none
 *   apiCaFile: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt    # "": system CAs
 *   nodeName: ""             # empty: $NODE_NAME
 *   workerThreads: 4         # the agent's threads serving processes' rings
 *   maxConnections: 4096     # processes' connections to the agent, all told
 *   maxConnectionsPerAllocation: 1024
 *   maxConnectionsPerProcess: 4
 *
 * Sizes take a plain byte count or a suffix Ki, Mi, Gi, Ti (powers of 1024).
 * Durations take a number (decimals allowed) with a unit ms, s, m or h; a
 * bare number is seconds; at most 24h.
 * Unknown keys and bad values are errors naming the file, line and key.
 * What each key accepts: the table in gs_config_keys.c. */
#ifndef GS_CONFIG_H
#define GS_CONFIG_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "gs_util.h"

#define GS_CONFIG_MAX_DEVICES 64
#define GS_CONFIG_DEFAULT_PATH "/etc/gshare/config.yaml"

enum gs_inject { GS_INJECT_PRELOAD = 0, GS_INJECT_ENV = 1 };
enum gs_over_quota { GS_OVER_QUOTA_KILL = 0, GS_OVER_QUOTA_REPORT = 1 };
/* auto: on when in a cluster (agent/services/gs_watch.h). */
enum gs_pod_watch { GS_POD_WATCH_AUTO = 0, GS_POD_WATCH_ON, GS_POD_WATCH_OFF };
#define GS_CONFIG_API_SERVER_MAX 512
#define GS_CONFIG_NODE_NAME_MAX 254
/* maxBlocksPerProcess / maxBlocksPerAllocation: 1 .. this */
#define GS_CONFIG_MAX_BLOCKS (UINT64_C(1) << 30)

struct gs_config {
        char resource_name[256];
        uint64_t unit_bytes;
        uint64_t chunk_bytes;
        uint64_t reserve_bytes;
        uint64_t balloon_cap_bytes;
        uint64_t burst_max_bytes;
        uint64_t spill_max_bytes;
        uint32_t reclaim_kill_after_ms; /* 0: never kill for a reclaim */
        uint32_t move_back_quiet_ms;    /* no move back sooner after an owner's request */
        /* Caps on live blocks, which bound the agent's memory per process
           and per allocation on each GPU (agent/alloc/gs_pool.h). */
        uint64_t max_blocks_per_process;
        uint64_t max_blocks_per_allocation;
        /* ndevices == 0 means all GPUs; else each entry a UUID or an index. */
        unsigned ndevices;
        char devices[GS_CONFIG_MAX_DEVICES][64];
        char agent_socket[PATH_MAX];
        char socket_root[PATH_MAX];
        char state_dir[PATH_MAX];
        /* Created once this agent serves (or stands ready to take over from
         * an agent of an earlier release), removed when it stops or hands
         * over: the readiness probe's file, private to the pod ("": none). */
        char ready_file[PATH_MAX];
        char kubelet_dir[PATH_MAX];
        char hook_path[PATH_MAX];
        char preload_path[PATH_MAX];
        enum gs_inject inject;
        int device_nodes;
        char cuda_library[PATH_MAX];
        /* Outside memory (agent/services/gs_usage.h). */
        char nvml_library[PATH_MAX];
        uint64_t context_bytes;     /* 0: auto */
        uint32_t usage_interval_ms; /* 0: no scan */
        /* How long a hooked process's calls wait for a new agent after
         * losing its agent (GSHARE_AGENT_WAIT, docs/agent.md "Restarts"). */
        uint32_t agent_wait_ms;
        enum gs_over_quota over_quota;
        /* overQuota applies only to a pod over its quota by more than
         * over_quota_bound_bytes for over_quota_grace_ms; up to the bound
         * it is never killed (its allocations fail until it is covered). */
        uint64_t over_quota_bound_bytes;
        uint32_t over_quota_grace_ms;
        char metrics_address[256];
        int log_level; /* enum gs_log_level */
        /* The agent's reconciler (agent/services/gs_recon.h). */
        char pod_resources_socket[PATH_MAX];
        uint32_t reconcile_interval_ms; /* 0: reconciler off */
        uint32_t reclaim_grace_ms;
        /* A pod whose spec.priority is at least this is latency-critical
         * (docs/compute.md). */
        uint32_t compute_latency_priority;
        /* The API-server watch of the node's pods (agent/services/gs_watch.h). */
        enum gs_pod_watch pod_watch;
        char api_server[GS_CONFIG_API_SERVER_MAX]; /* "": from the environment */
        char api_token_file[PATH_MAX];             /* "": no token */
        char api_ca_file[PATH_MAX];                /* "": the system's CAs */
        char node_name[GS_CONFIG_NODE_NAME_MAX];   /* "": $NODE_NAME */
        /* The agent's worker pool and connection caps (agent/base/gs_workers.h). */
        uint32_t worker_threads;
        uint32_t max_conns;
        uint32_t max_conns_per_alloc;
        uint32_t max_conns_per_proc;
};

#define GS_CONFIG_MAX_WORKERS 256u
#define GS_CONFIG_MAX_CONNS 65536u

/* Fills c with the defaults above. */
void gs_config_defaults(struct gs_config *c);

/* Reads the YAML file at path on top of what c holds (call
 * gs_config_defaults first).  Returns 0, or a negative errno with a message
 * in err like "config.yaml:7: chunkSize: must be a power of two, got 3Mi";
 * on failure c is left exactly as it was. */
int gs_config_load(struct gs_config *c, const char *path, char *err, size_t errlen) GS_WUR;

/* Sets one key from text, as a command-line flag does: name is a YAML key
 * ("chunkSize") or its flag ("--chunk-size", gs_config_keys.c); a list of
 * devices is comma-separated.  The key accepts what it accepts in the file.
 * Returns 0, or a negative errno with a message in err like
 * "--chunk-size: must be a power of two, got 3Mi"; on failure c is left
 * exactly as it was. */
int gs_config_set(struct gs_config *c, const char *name, const char *value, char *err, size_t errlen) GS_WUR;

/* As gs_config_set, for the key k (gs_config_keys.h), with what (a flag,
 * "--agent-socket") before the problem in err. */
struct gs_config_key;
int gs_config_set_key(struct gs_config *c, const struct gs_config_key *k, const char *what, const char *value,
                      char *err, size_t errlen) GS_WUR;

/* Checks the relations between values (unit a multiple of the chunk, ...).
 * Returns 0 or -EINVAL with a message in err. */
int gs_config_validate(const struct gs_config *c, char *err, size_t errlen) GS_WUR;

/* Units (gs_config_units.c). */

/* "256Mi" -> 268435456.  -EINVAL for anything else (negative, empty, junk,
 * unknown suffix); -ERANGE on overflow. */
int gs_parse_size(const char *s, uint64_t *ret_bytes) GS_WUR;

/* "10s", "0.2s", "250ms", "1m", "1h", "5" (seconds) -> milliseconds, rounded
 * to the nearest.  -EINVAL for anything else (negative, empty, junk, unknown
 * unit); -ERANGE above 24h. */
int gs_parse_duration_ms(const char *s, uint32_t *ret_ms) GS_WUR;

/* 268435456 -> "256Mi" (the largest exact suffix). */
void gs_format_size(uint64_t bytes, char *buf, size_t n);

#endif
