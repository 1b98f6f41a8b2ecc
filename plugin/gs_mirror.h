/* gs_mirror.h — the device plugin's mirror of the agent's GPUs: a thread
 * keeps a control Watch stream open (gshare.proto) and publishes each GPU
 * list it receives, with every unit that must not be scheduled on marked:
 * lent to ballooning (the highest-numbered free units), held by an
 * allocation the agent has yet to restore, or still used by processes of a
 * gone pod.  When the agent is unreachable the last list stays, all
 * Unhealthy.  Readers take mu; gen is bumped (and cv broadcast) whenever
 * what the kubelet would see changes. */
#ifndef GS_MIRROR_H
#define GS_MIRROR_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gs_devid.h"
#include "gs_util.h"

/* A list with more GPUs is refused as corrupt. */
#define GS_MIRROR_MAX_GPUS 64

struct gs_mirror_gpu {
        char uuid[GS_UUID_STR_LEN + 1];
        char pci[32];
        uint32_t index;
        int32_t numa;
        uint32_t units;        /* units_total */
        uint32_t lent;
        uint32_t draining;     /* units of gone pods still in use */
        uint64_t unit_bytes;
        bool healthy;
        uint8_t *unhealthy;    /* per unit: reported Unhealthy (lent, draining) */
};


struct gs_mirror {
        const char *agent_socket;
        int timeout_ms;          /* each call to the agent */
        pthread_mutex_t mu;
        pthread_cond_t cv;
        struct gs_mirror_gpu *gpus; /* under mu */
        size_t ngpus;
        bool agent_up, agent_seen;
        uint64_t gen;            /* bumped on every change the kubelet sees */
        bool stopping;
        pthread_t watcher;
        bool started;
};

/* Starts the watcher on agent_socket (which must outlive m) and waits up to
 * wait_ms for the first list.  0 or a negative errno. */
int gs_mirror_start(struct gs_mirror *m, const char *agent_socket, int timeout_ms,
                    int wait_ms) GS_WUR;
/* Sets stopping and wakes every waiter on cv (readers return). */
void gs_mirror_shutdown(struct gs_mirror *m);
/* Joins the watcher and frees everything (after gs_mirror_shutdown). */
void gs_mirror_free(struct gs_mirror *m);

/* The following: pre: mu held. */
const struct gs_mirror_gpu *gs_mirror_find(const struct gs_mirror *m, const char *uuid);
/* Parses a device ID and checks that it is a unit of a GPU of the list.
 * 0, or -EINVAL / -ENOENT with msg naming the ID (and resource). */
int gs_mirror_check_id(const struct gs_mirror *m, const char *id, const char *resource,
                       const struct gs_mirror_gpu **ret_gpu, uint32_t *ret_unit, char *msg,
                       size_t n) GS_WUR;
/* The most units of one GPU. */
uint32_t gs_mirror_largest(const struct gs_mirror *m);

#endif
