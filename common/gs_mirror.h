/* gs_mirror.h — both plugins' mirror of the agent's GPUs: a thread keeps a
 * control Watch stream open (gshare.proto) and publishes each GPU list it
 * receives, with every unit that must not be scheduled on marked: lent to
 * ballooning (the highest-numbered free units, chosen with a ListAllocations
 * on the client's kept connection), held by an allocation the agent has yet
 * to restore, or still used by processes of a gone pod.  When the agent is
 * unreachable for longer than GS_MIRROR_GRACE_MS the last list stays with
 * agent_up false (the device plugin then reports every unit Unhealthy; the
 * DRA plugin's ResourceSlice stays as it was).  Readers take mu; gen is
 * bumped (and cv broadcast) whenever the list changes in anything but the
 * allocation counts. */
#ifndef GS_MIRROR_H
#define GS_MIRROR_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gs_agentcli.h"
#include "gs_ctrspec.h"
#include "gs_devid.h"
#include "gs_util.h"

/* A list with more GPUs is refused as corrupt. */
#define GS_MIRROR_MAX_GPUS 64

struct gs_mirror_gpu {
        char uuid[GS_UUID_STR_LEN + 1];
        char pci[32];
        char name[256]; /* product name */
        uint32_t index;
        int32_t numa;
        uint32_t units; /* units_total */
        uint32_t lent;
        uint32_t draining; /* units of gone pods still in use */
        uint64_t unit_bytes;
        uint64_t total_bytes; /* the GPU's memory */
        bool healthy;
        uint8_t *unhealthy; /* per unit: reported Unhealthy (lent, draining) */
};

struct gs_mirror {
        struct gs_agentcli *cli; /* the agent; outlives the mirror */
        pthread_mutex_t mu;
        pthread_cond_t cv;
        struct gs_mirror_gpu *gpus; /* under mu */
        size_t ngpus;
        bool agent_up, agent_seen;
        bool lost;    /* the watcher's: the stream broke, not yet back */
        uint64_t gen; /* bumped on every change (see above) */
        bool stopping;
        pthread_t watcher;
        bool started;
};

/* How long the agent may be unreachable (a restart, an upgrade's
 * handover; a killed agent's container restarts in about a second) before
 * agent_up goes false. */
#define GS_MIRROR_GRACE_MS 5000

/* Starts the watcher on cli's agent and waits up to wait_ms for the first
 * list.  0 or a negative errno. */
int gs_mirror_start(struct gs_mirror *m, struct gs_agentcli *cli, int wait_ms) GS_WUR;
/* Sets stopping and wakes every waiter on cv (readers return). */
void gs_mirror_shutdown(struct gs_mirror *m);
/* Joins the watcher and frees everything (after gs_mirror_shutdown). */
void gs_mirror_free(struct gs_mirror *m);

/* config deviceNodes: adds the device nodes of allocation al's GPUs to s
 * (gs_ctrspec_add_devices), their PCI bus IDs from the list.  Takes mu. */
void gs_mirror_add_devices(struct gs_mirror *m, struct gs_ctrspec *s, const char *nvidia_proc,
                           const Gshare__Ctl__V1__Allocation *al);

/* The following: pre: mu held. */
/* Waits until gen differs from seen, the mirror stops, or ms pass. */
void gs_mirror_wait(struct gs_mirror *m, uint64_t seen, int ms);
const struct gs_mirror_gpu *gs_mirror_find(const struct gs_mirror *m, const char *uuid);
/* Parses a device ID and checks that it is a unit of a GPU of the list.
 * 0, or -EINVAL / -ENOENT with msg naming the ID (and resource). */
int gs_mirror_check_id(const struct gs_mirror *m, const char *id, const char *resource,
                       const struct gs_mirror_gpu **ret_gpu, uint32_t *ret_unit, char *msg, size_t n) GS_WUR;
/* The most units of one GPU. */
uint32_t gs_mirror_largest(const struct gs_mirror *m);

#endif
