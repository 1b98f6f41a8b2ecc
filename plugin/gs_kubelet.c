/* gs_kubelet.c — the device plugin and the kubelet's directory: serving
 * our socket there (bound under a private name and renamed into place),
 * Registration.Register, whether the kubelet accepts yet, whether our
 * socket is still ours or a newer instance's, and the directory's inotify
 * events.  See gs_dp.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "gs_dp.h"
#include "gs_log.h"

#define REGISTER_TIMEOUT_MS 5000

/* Serves a fresh socket at sock_path.  The server binds a private name and
 * the socket is then renamed into place: gRPC unlinks a unix socket's path
 * when its listener is torn down (asynchronously, after the server is
 * gone), which must never hit the new socket at the public path.  The old
 * server is stopped only once the new one serves, so there is no gap. */
int gs_dp_serve(struct gs_dp *p)
{
        struct gs_grpc_server *old = p->server, *s = NULL;
        char tmp[PATH_MAX];
        struct stat st;
        int r;

        snprintf(tmp, sizeof(tmp), "%.3000s/.%s.%d.%u", p->o->cfg.kubelet_dir, p->o->endpoint, (int)getpid(),
                 ++p->serial);
        r = gs_grpc_server_start(tmp, gs_dp_methods, gs_dp_nmethods, p, &s);
        if (r < 0) {
                log_error("cannot serve on %s: %s", tmp, strerror(-r));
                return r;
        }
        if (rename(tmp, p->sock_path) < 0 || stat(p->sock_path, &st) < 0) {
                r = gs_neg_errno();
                log_error("cannot move our socket to %s: %s", p->sock_path, strerror(-r));
                gs_grpc_server_stop(s);
                unlink(tmp);
                return r;
        }
        p->server = s;
        p->server_ino = st.st_ino;
        gs_grpc_server_stop(old);
        log_debug("serving on %s", p->sock_path);
        return 0;
}

int gs_dp_register(struct gs_dp *p)
{
        V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;
        V1beta1__DevicePluginOptions opts = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
        ProtobufCMessage *rep = NULL;
        grpc_status_code st;
        char msg[GS_GRPC_MSG_MAX];
        int r;

        req.version = (char *)GS_PLUGIN_API_VERSION;
        req.endpoint = (char *)p->o->endpoint;
        req.resource_name = (char *)p->o->cfg.resource_name;
        opts.pre_start_required = false;
        opts.get_preferred_allocation_available = true;
        req.options = &opts;
        r = gs_grpc_unary_call(p->kubelet_sock, "/v1beta1.Registration/Register", &req.base,
                               &v1beta1__empty__descriptor, REGISTER_TIMEOUT_MS, &rep, &st, msg, sizeof(msg));
        if (r < 0) {
                log_warn("Register with the kubelet at %s failed: %s", p->kubelet_sock, msg[0] ? msg : strerror(-r));
                return r;
        }
        protobuf_c_message_free_unpacked(rep, NULL);
        log_info("registered %s with the kubelet at %s (endpoint %s)", p->o->cfg.resource_name, p->kubelet_sock,
                 p->o->endpoint);
        return 0;
}

/* Whether the kubelet accepts connections on kubelet.sock.  The kubelet
 * creates the socket file a while before it accepts on it (about 0.3 s for
 * 1.36), and a Register sent in that window is refused; a bare connect()
 * costs nothing and tells us when to send it. */
static bool accepts(const char *path)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        bool ok;
        int fd;

        if (strlen(path) >= sizeof(sa.sun_path))
                return true; /* let Register report the problem */
        strcpy(sa.sun_path, path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return true;
        /* EAGAIN: listening, its backlog full for a moment. */
        ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno == EAGAIN;
        close(fd);
        return ok;
}

bool gs_dp_kubelet_accepts(const struct gs_dp *p)
{
        return accepts(p->kubelet_sock);
}

/* Another live instance's socket is at our path: a newer one renamed it
 * there (an upgrade with maxSurge), and the kubelet talks to it. */
bool gs_dp_newer_serves(const struct gs_dp *p)
{
        struct stat st;

        return p->server && stat(p->sock_path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino != p->server_ino &&
               accepts(p->sock_path);
}

bool gs_dp_socket_ok(const struct gs_dp *p)
{
        struct stat st;

        if (!p->server)
                return false;
        if (stat(p->sock_path, &st) < 0) {
                log_debug("stat %s: %m", p->sock_path);
                return false;
        }
        if (!S_ISSOCK(st.st_mode) || st.st_ino != p->server_ino) {
                log_debug("%s: inode %lu, ours %lu", p->sock_path, (unsigned long)st.st_ino,
                          (unsigned long)p->server_ino);
                return false;
        }
        return true;
}

int gs_dp_watch_dir(const struct gs_dp *p)
{
        int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);

        if (fd < 0)
                return gs_neg_errno();
        if (inotify_add_watch(fd, p->o->cfg.kubelet_dir,
                              IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE_SELF) < 0) {
                int r = gs_neg_errno();
                close(fd);
                return r;
        }
        return fd;
}

/* Drains the inotify events.  Our socket's fate is checked by inode
 * (gs_dp_socket_ok) and the kubelet's by gs_dp_kubelet_id, since serving a
 * new socket produces delete/create events of its own and a kubelet
 * restart several. */
void gs_dp_read_events(int fd)
{
        char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));

        while (read(fd, buf, sizeof(buf)) > 0)
                ;
}

/* The inode number alone: should a file system give the new kubelet.sock
 * the old one's number, the restart also removed our socket or ended its
 * stream, and either makes us register again (gs_plugin.c). */
int gs_dp_kubelet_id(const struct gs_dp *p, struct gs_dp_kubelet_id *ret)
{
        struct stat st;

        if (stat(p->kubelet_sock, &st) < 0)
                return gs_neg_errno();
        *ret = (struct gs_dp_kubelet_id){ .dev = st.st_dev, .ino = st.st_ino };
        return 0;
}

bool gs_dp_kubelet_id_eq(const struct gs_dp_kubelet_id *a, const struct gs_dp_kubelet_id *b)
{
        return a->dev == b->dev && a->ino == b->ino;
}

void gs_dp_unserve(struct gs_dp *p)
{
        struct stat st;

        gs_grpc_server_stop(p->server);
        if (!p->server)
                return;
        /* Remove our socket, but not one a newer instance serves. */
        if (stat(p->sock_path, &st) == 0 && st.st_ino == p->server_ino)
                unlink(p->sock_path);
        p->server = NULL;
}
