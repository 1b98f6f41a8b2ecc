/* gs_dra.c — gshare-dra-plugin's start, registration and stop: the agent
 * client and the mirror, the ResourceSlice publisher, the DRAPlugin socket
 * and then the registration socket (pluginregistration/v1: GetInfo,
 * NotifyRegistrationStatus), until SIGTERM or SIGINT.  See gs_dra.h. */
#include "gs_dra.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "gs_dractx.h"
#include "gs_log.h"
#include "gs_mkdir.h"
#include "pluginregistration_v1.pb-c.h"

/* How long the start waits for the agent's first GPU list. */
#define FIRST_LIST_MS 2000

/* ---- registration ---- */

static grpc_status_code get_info(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req,
                                 ProtobufCMessage **ret, char *msg, size_t msglen)
{
        struct gs_dractx *d = ctx;
        Pluginregistration__PluginInfo *info = calloc(1, sizeof(*info) + 2 * sizeof(char *));
        (void)call;
        (void)req;

        if (!info) {
                snprintf(msg, msglen, "out of memory");
                return GRPC_STATUS_RESOURCE_EXHAUSTED;
        }
        pluginregistration__plugin_info__init(info);
        info->type = (char *)"DRAPlugin";
        info->name = (char *)d->o->driver;
        info->endpoint = d->endpoint;
        info->supported_versions = (char **)(info + 1);
        info->supported_versions[0] = (char *)GS_DRA_SERVICE;
        info->supported_versions[1] = (char *)GS_DRA_SERVICE_BETA;
        info->n_supported_versions = 2;
        log_info("kubelet asked for the plugin's info");
        *ret = &info->base;
        return GRPC_STATUS_OK;
}

static grpc_status_code notify_status(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req,
                                      ProtobufCMessage **ret, char *msg, size_t msglen)
{
        const Pluginregistration__RegistrationStatus *st = (const void *)req;
        Pluginregistration__RegistrationStatusResponse *r = calloc(1, sizeof(*r));
        struct gs_dractx *d = ctx;
        (void)call;

        if (!r) {
                snprintf(msg, msglen, "out of memory");
                return GRPC_STATUS_RESOURCE_EXHAUSTED;
        }
        pluginregistration__registration_status_response__init(r);
        if (st->plugin_registered)
                log_info("registered %s with the kubelet (%s)", d->o->driver, GS_DRA_SERVICE);
        else
                log_error("the kubelet refused %s: %.300s", d->o->driver, st->error ? st->error : "");
        /* A kubelet that just started deletes the node's slices. */
        atomic_store(&d->check_slice, true);
        *ret = &r->base;
        return GRPC_STATUS_OK;
}

/* ---- run ---- */

/* Sockets named <prefix>[-<uid>]<suffix> in dir that nothing serves any
 * more (an instance that died): removed, so that the kubelet does not keep
 * probing them.  Live ones (another instance's) are left alone. */
static void remove_stale(const char *dir, const char *prefix, const char *suffix)
{
        DIR *dh = opendir(dir);
        struct dirent *e;
        size_t pl = strlen(prefix), sl = strlen(suffix);

        if (!dh)
                return;
        while ((e = readdir(dh))) {
                size_t n = strlen(e->d_name);
                char path[PATH_MAX];
                struct sockaddr_un sa = { .sun_family = AF_UNIX };
                struct stat st;
                int fd;

                if (n < pl + sl || strncmp(e->d_name, prefix, pl) || strcmp(e->d_name + n - sl, suffix) ||
                    (n > pl + sl && e->d_name[pl] != '-'))
                        continue;
                if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(sa.sun_path) ||
                    lstat(path, &st) < 0 || !S_ISSOCK(st.st_mode))
                        continue;
                strcpy(sa.sun_path, path);
                /* Non-blocking: a live listener with a full backlog says
                 * EAGAIN and is left alone. */
                fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                if (fd < 0)
                        continue;
                if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno == ECONNREFUSED) {
                        log_info("removing %s: nothing serves it", path);
                        (void)unlink(path);
                }
                close(fd);
        }
        closedir(dh);
}

int gs_dra_run(const struct gs_dra_opts *o)
{
        static const struct gs_grpc_method reg_methods[] = {
                { "/pluginregistration.Registration/GetInfo", &pluginregistration__info_request__descriptor, get_info,
                  gs_dra_free_reply, NULL },
                { "/pluginregistration.Registration/NotifyRegistrationStatus",
                  &pluginregistration__registration_status__descriptor, notify_status, gs_dra_free_reply, NULL },
        };
        struct gs_grpc_server *dsrv = NULL, *rsrv = NULL;
        struct gs_dractx *d = calloc(1, sizeof(*d));
        char err[512], vfile[PATH_MAX + 16];
        sigset_t mask;
        int r, sig;

        if (!d)
                return -ENOMEM;
        d->o = o;
        gs_agentcli_init(&d->cli, o->cfg.agent_socket, o->agent_timeout_ms);
        /* Seeded from the clock: a restarted plugin's pool is newer. */
        d->generation = (uint64_t)time(NULL);
        r = gs_kapi_init(&d->kapi, &o->cfg, "gshare-dra-plugin", err, sizeof(err));
        if (r < 0) {
                log_error("%s", err);
                goto out;
        }
        if (!d->kapi.base[0])
                log_warn(
                        "no API server (apiServer, KUBERNETES_SERVICE_HOST): no ResourceSlice, no claim can be prepared");
        snprintf(vfile, sizeof(vfile), "%s/version", o->nvidia_proc);
        gs_slice_driver_version(vfile, d->driver_version, sizeof(d->driver_version));
        /* Per pod with $POD_UID (the chart sets it): an upgrade's new pod
         * serves beside the old one, and the kubelet (1.33 and later) moves
         * to the newer registration without a gap, each instance removing
         * only its own sockets. */
        const char *uid = getenv("POD_UID");
        char sfx[80] = "";
        if (uid && *uid && strlen(uid) <= 64 && strspn(uid, "0123456789abcdef-") == strlen(uid))
                snprintf(sfx, sizeof(sfx), "-%s", uid);
        else if (uid && *uid)
                log_warn("POD_UID '%.64s' is not a pod UID: sockets without it (no rolling update beside another "
                         "instance)",
                         uid);
        if (snprintf(d->endpoint, sizeof(d->endpoint), "%s/dra%s.sock", o->plugin_dir, sfx) >=
                    (int)sizeof(d->endpoint) ||
            snprintf(d->reg_socket, sizeof(d->reg_socket), "%s/%s%s-reg.sock", o->registry_dir, o->driver, sfx) >=
                    (int)sizeof(d->reg_socket)) {
                log_error("socket paths too long");
                r = -ENAMETOOLONG;
                goto out;
        }
        if ((r = gs_mkdir_p(o->plugin_dir, 0755, 0750, err, sizeof(err))) < 0 ||
            (r = gs_mkdir_p(o->registry_dir, 0755, 0750, err, sizeof(err))) < 0) {
                log_error("%s", err);
                goto out;
        }
        remove_stale(o->registry_dir, o->driver, "-reg.sock");
        remove_stale(o->plugin_dir, "dra", ".sock");
        /* The agent's GPUs first (a claim is prepared on one of them),
         * waiting a moment for the first list. */
        if ((r = gs_mirror_start(&d->m, &d->cli, FIRST_LIST_MS)) < 0 || (r = gs_dra_publisher_start(d)) < 0) {
                log_error("cannot start a thread: %s", strerror(-r));
                goto stop;
        }
        /* The plugin's socket first: the kubelet calls it as soon as it
         * sees the registration socket. */
        r = gs_grpc_server_start(d->endpoint, gs_dra_methods, gs_dra_nmethods, d, &dsrv);
        if (r == 0)
                r = gs_grpc_server_start(d->reg_socket, reg_methods, GS_ARRAY_SIZE(reg_methods), d, &rsrv);
        if (r < 0) {
                log_error("cannot serve %s / %s: %s", d->endpoint, d->reg_socket, strerror(-r));
        } else {
                log_info("driver %s, node %s, agent %s, CDI %s, serving %s, registration %s%s%s", o->driver, o->node,
                         o->cfg.agent_socket, o->cdi_dir, d->endpoint, d->reg_socket,
                         d->driver_version[0] ? ", NVIDIA driver " : "", d->driver_version);
                sigemptyset(&mask);
                sigaddset(&mask, SIGTERM);
                sigaddset(&mask, SIGINT);
                while (sigwait(&mask, &sig) != 0)
                        ;
                log_info("signal %d: stopping", sig);
        }
        /* Registration first, so the kubelet stops calling. */
        gs_grpc_server_stop(rsrv);
        (void)unlink(d->reg_socket);
        gs_grpc_server_stop(dsrv);
        (void)unlink(d->endpoint);
stop:
        gs_mirror_shutdown(&d->m);
        gs_dra_publisher_join(d);
out:
        gs_mirror_free(&d->m);
        gs_agentcli_free(&d->cli);
        free(d);
        return r;
}
