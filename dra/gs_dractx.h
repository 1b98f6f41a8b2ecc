/* gs_dractx.h — the running DRA plugin's state, shared by its parts: the
 * DRAPlugin service (gs_prepare.c), the ResourceSlice publisher
 * (gs_publish.c) and the start, registration and stop (gs_dra.c).  The
 * agent's GPUs are the shared mirror's (common/gs_mirror.h); the plugin
 * keeps no copy of its own. */
#ifndef GS_DRACTX_H
#define GS_DRACTX_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "gs_agentcli.h"
#include "gs_dra.h"
#include "gs_grpc.h"
#include "gs_kapi.h"
#include "gs_mirror.h"
#include "gs_slice.h"

struct gs_dractx {
        const struct gs_dra_opts *o;
        struct gs_kapi kapi;
        char driver_version[64];
        char endpoint[PATH_MAX];   /* <plugin_dir>/dra.sock */
        char reg_socket[PATH_MAX]; /* <registry_dir>/<driver>-reg.sock */
        struct gs_agentcli cli;    /* the agent */
        struct gs_mirror m;        /* its GPUs, and the stop flag */
        atomic_bool check_slice;   /* check at the publisher's next tick */
        pthread_t publisher;
        bool publisher_started;
        /* The publisher's: what was last published, and when to retry. */
        struct gs_slice_gpu published[GS_MIRROR_MAX_GPUS];
        size_t npublished;
        bool is_published;
        uint64_t generation;
        bool dirty;                 /* to publish */
        int64_t retry_at, check_at; /* CLOCK_MONOTONIC ms */
        int backoff;
};

/* gs_prepare.c: the dra/v1 DRAPlugin service (and v1beta1's, the same
 * handlers; ctx: struct gs_dractx). */
extern const struct gs_grpc_method gs_dra_methods[];
extern const size_t gs_dra_nmethods;
/* The free_reply of every method of the plugin: a reply in one block. */
void gs_dra_free_reply(void *ctx, ProtobufCMessage *m);

/* gs_publish.c: starts the thread that publishes the ResourceSlice from
 * the mirror and checks that it still exists; it ends when the mirror
 * stops.  0 or a negative errno. */
int gs_dra_publisher_start(struct gs_dractx *d) GS_WUR;
void gs_dra_publisher_join(struct gs_dractx *d);

#endif
