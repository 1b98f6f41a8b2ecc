/* gs_sockdir.c — see gs_sockdir.h. */
#include "gs_sockdir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "gs_log.h"
#include "gs_sock.h"

/* Makes directory path (mode, owned by us) or, if exclusive is false,
 * accepts an existing one that is a real directory owned by us; its mode is
 * then set to mode.  Through an O_NOFOLLOW fd: a symlink planted in our
 * place is refused, never followed. */
static int mkdir_owned(const char *path, mode_t mode, bool exclusive, char *err, size_t errlen)
{
        struct stat st;
        int fd, r = 0;

        if (mkdir(path, mode) < 0 && (errno != EEXIST || exclusive)) {
                r = gs_neg_errno();
                snprintf(err, errlen, "cannot create directory %s: %s", path, strerror(-r));
                return r;
        }
        fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode)) {
                snprintf(err, errlen, "%s exists and is not a directory", path);
                r = -ENOTDIR;
        } else if (st.st_uid != geteuid()) {
                snprintf(err, errlen, "%s is owned by uid %u, not by the agent", path, (unsigned)st.st_uid);
                r = -EPERM;
        } else if ((st.st_mode & 07777) != mode && fchmod(fd, mode) < 0) {
                r = gs_neg_errno();
                snprintf(err, errlen, "cannot chmod %s: %s", path, strerror(-r));
        }
        gs_closep(&fd);
        return r;
}

/* A directory name no allocation has had: "<id>-<8 random hex digits>". */
static int fresh_dir_name(const char *id, char out[GS_ALLOCS_DIR_MAX])
{
        uint32_t x;

        if (getrandom(&x, sizeof(x), 0) != (ssize_t)sizeof(x))
                return gs_neg_errno();
        snprintf(out, GS_ALLOCS_DIR_MAX, "%s-%08x", id, x);
        return 0;
}

/* Creates <socketRoot>/<dir>/agent.sock, listening, watched by the main
 * loop.  socketRoot is 0700: no host user but root reaches anything under
 * it; a container reaches its own directory (0755) through the mount.
 * dir: the directory of a restored allocation (it may exist: it is
 * mounted into containers), or NULL for a fresh one, created here, that no
 * allocation ever had. */
int gs_sockdir_open(struct gs_node *ag, struct gs_allocation *a, const char *dir, char *err, size_t errlen)
{
        struct sockaddr_un sa;
        bool bound = false;
        int fd = -1, r;

        r = mkdir_owned(ag->cfg.socket_root, 0700, false, err, errlen);
        if (r < 0)
                return r;
        for (int tries = 0;; tries++) {
                if (dir)
                        snprintf(a->dir_name, sizeof(a->dir_name), "%s", dir);
                else if ((r = fresh_dir_name(a->id, a->dir_name)) < 0) {
                        snprintf(err, errlen, "getrandom: %s", strerror(-r));
                        return r;
                }
                if (snprintf(a->socket_dir, sizeof(a->socket_dir), "%s/%s", ag->cfg.socket_root, a->dir_name) >=
                            (int)sizeof(a->socket_dir) ||
                    snprintf(a->socket_path, sizeof(a->socket_path), "%s/%s", a->socket_dir, GS_SOCKET_NAME) >=
                            (int)sizeof(sa.sun_path)) {
                        snprintf(err, errlen, "socket path under %s is too long", ag->cfg.socket_root);
                        return -ENAMETOOLONG;
                }
                r = mkdir_owned(a->socket_dir, 0755, dir == NULL, err, errlen);
                if (r != -EEXIST || dir || tries == 8)
                        break;
        }
        if (r < 0)
                return r;
        if (dir)
                (void)unlink(a->socket_path); /* a stale one from a previous agent */
        /* Born 0666 (gs_sock_listen): a chmod by path afterwards would
         * follow a symlink swapped in meanwhile.  Only the main thread
         * creates files, so the umask is ours. */
        fd = r = gs_sock_listen(a->socket_path, SOCK_SEQPACKET, 0666, 128);
        if (r < 0) {
                snprintf(err, errlen, "cannot listen on %s: %s", a->socket_path, strerror(-r));
                goto fail;
        }
        bound = true;
        r = gs_loop_io_add(ag->loop, &a->listen_io, fd, EPOLLIN, ag->on_alloc_conn, a);
        if (r < 0) {
                snprintf(err, errlen, "epoll: %s", strerror(-r));
                goto fail;
        }
        a->listen_fd = fd;
        return 0;
fail:
        if (bound)
                (void)unlink(a->socket_path);
        if (!dir)
                (void)rmdir(a->socket_dir);
        gs_closep(&fd);
        return r;
}

void gs_sockdir_close(struct gs_node *ag, struct gs_allocation *a)
{
        if (a->listen_fd < 0)
                return;
        gs_loop_io_del(ag->loop, &a->listen_io);
        gs_closep(&a->listen_fd);
        /* Not another agent's path (gs_node_handover). */
        if (gs_node_paths_ours(ag))
                (void)unlink(a->socket_path);
}

void gs_sockdir_rebind(struct gs_node *ag)
{
        char err[256];

        for (struct gs_allocation *a = ag->allocs; a; a = a->next) {
                if (a->listen_fd < 0)
                        continue;
                gs_loop_io_del(ag->loop, &a->listen_io);
                gs_closep(&a->listen_fd);
                char dir[GS_ALLOCS_DIR_MAX];
                snprintf(dir, sizeof(dir), "%s", a->dir_name);
                if (gs_sockdir_open(ag, a, dir, err, sizeof(err)) < 0)
                        log_error("allocation %s: cannot listen again: %s", a->id, err);
        }
}

void gs_sockdir_listen(struct gs_node *ag, bool on)
{
        for (struct gs_allocation *a = ag->allocs; a; a = a->next) {
                if (a->listen_fd < 0)
                        continue;
                if (!on)
                        gs_loop_io_del(ag->loop, &a->listen_io);
                else if (a->listen_io.dead &&
                         gs_loop_io_add(ag->loop, &a->listen_io, a->listen_fd, EPOLLIN, ag->on_alloc_conn, a) < 0)
                        log_error("allocation %s: cannot accept on its socket again", a->id);
        }
}
