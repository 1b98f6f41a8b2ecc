/* gs_dp.h — the running device plugin's state, shared by its parts: the
 * DevicePlugin service (gs_dpsvc.c; Allocate in gs_allocate.c), serving our
 * socket and registering with the kubelet (gs_kubelet.c), and the main
 * loop that decides when to serve, register again or stand by
 * (gs_plugin.c). */
#ifndef GS_DP_H
#define GS_DP_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "deviceplugin_v1beta1.pb-c.h"
#include "gs_agentcli.h"
#include "gs_arena.h"
#include "gs_grpc.h"
#include "gs_mirror.h"
#include "gs_plugin.h"

struct gs_dp {
        const struct gs_plugin_opts *o;
        char sock_path[PATH_MAX];
        char kubelet_sock[PATH_MAX];

        struct gs_agentcli cli; /* the agent */
        struct gs_mirror m;     /* the agent's GPUs, and the stop flag */
        struct gs_grpc_server *server;
        ino_t server_ino;
        unsigned serial; /* names of private sockets */
        /* A newer instance (an upgrade's new pod, beside us until we are
         * stopped) serves our path: we neither serve nor register again. */
        bool standby;
        /* ListAndWatch streams open, and when the last one ended (atomics):
         * a kubelet that dropped us (it may disconnect the newer of two
         * instances of a resource when the older's stream ends) opens
         * none; we register again.  lw_opened counts the streams ever
         * opened: none since a Register means the kubelet never took it up
         * (seen on 1.36 after an upgrade: it dropped the new instance when
         * the old one's stream ended, 10 ms after the new one registered). */
        int lw_active;
        unsigned lw_opened;
        int64_t lw_ended_ms;
};

/* A reply message together with the arena that holds its pieces; base
 * first, so the gRPC layer's ProtobufCMessage * is this struct. */
struct gs_dp_reply {
        union {
                ProtobufCMessage base;
                V1beta1__AllocateResponse alloc;
                V1beta1__PreferredAllocationResponse pref;
                V1beta1__DevicePluginOptions opts;
                V1beta1__PreStartContainerResponse prestart;
        } m;
        struct gs_arena arena;
};

/* A zeroed reply, or NULL. */
struct gs_dp_reply *gs_dp_reply_new(void);
/* The methods' free_reply; NULL is fine. */
void gs_dp_reply_free(void *ctx, ProtobufCMessage *m);

/* gs_dpsvc.c: the v1beta1.DevicePlugin service (ctx: struct gs_dp). */
extern const struct gs_grpc_method gs_dp_methods[];
extern const size_t gs_dp_nmethods;

/* gs_allocate.c: Allocate. */
grpc_status_code gs_dp_allocate(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req,
                                ProtobufCMessage **ret, char *msg, size_t msglen);

/* gs_kubelet.c: our socket and the kubelet's. */
/* Serves a fresh socket at sock_path, then stops the old server. */
int gs_dp_serve(struct gs_dp *p) GS_WUR;
/* Stops serving; removes our socket unless a newer instance serves it. */
void gs_dp_unserve(struct gs_dp *p);
/* Registration.Register with the kubelet.  0 or a negative errno (logged). */
int gs_dp_register(struct gs_dp *p);
/* Whether the kubelet accepts connections on kubelet.sock. */
bool gs_dp_kubelet_accepts(const struct gs_dp *p);
/* Whether another live instance's socket is at our path. */
bool gs_dp_newer_serves(const struct gs_dp *p);
/* Whether our path still holds our server's socket. */
bool gs_dp_socket_ok(const struct gs_dp *p);
/* An inotify fd on the kubelet directory, or a negative errno. */
int gs_dp_watch_dir(const struct gs_dp *p) GS_WUR;
/* Reads its events (they only wake the main loop, which then looks at the
 * directory itself). */
void gs_dp_read_events(int fd);
/* Which kubelet.sock is there: a restarted kubelet makes a new one. */
struct gs_dp_kubelet_id {
        dev_t dev;
        ino_t ino;
};
/* 0 and *ret, or a negative errno (-ENOENT: no kubelet.sock). */
int gs_dp_kubelet_id(const struct gs_dp *p, struct gs_dp_kubelet_id *ret) GS_WUR;
bool gs_dp_kubelet_id_eq(const struct gs_dp_kubelet_id *a, const struct gs_dp_kubelet_id *b);

#endif
