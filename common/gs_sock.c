/* gs_sock.c — see gs_sock.h. */
#include "gs_sock.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

int gs_sock_listen(const char *path, int type, mode_t mode, int backlog)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        mode_t old;
        int fd, r;

        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        fd = socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return gs_neg_errno();
        old = umask(~mode & 0777);
        r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
        umask(old);
        if (r < 0) {
                r = gs_neg_errno();
                close(fd);
                return r;
        }
        if (listen(fd, backlog) < 0) {
                r = gs_neg_errno();
                (void)unlink(path);
                close(fd);
                return r;
        }
        return fd;
}

ssize_t gs_sock_send_fds(int sock, const void *buf, size_t len, const int *fds, size_t nfds, int flags)
{
        union {
                struct cmsghdr c;
                char b[CMSG_SPACE(sizeof(int) * GS_SOCK_MAX_FDS)];
        } u;
        struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        ssize_t n;

        if (nfds > GS_SOCK_MAX_FDS)
                return -EINVAL;
        if (nfds) {
                memset(&u, 0, sizeof(u));
                mh.msg_control = u.b;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
                memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
        }
        do
                n = sendmsg(sock, &mh, flags | MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        return n < 0 ? gs_neg_errno() : n;
}

ssize_t gs_sock_recv_fds(int sock, void *buf, size_t len, int flags, int *fds, size_t max_fds, size_t *ret_nfds,
                         bool *ret_trunc)
{
        union {
                struct cmsghdr c;
                char b[CMSG_SPACE(sizeof(int) * GS_SOCK_MAX_FDS)];
        } u;
        struct iovec iov = { .iov_base = buf, .iov_len = len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b) };
        size_t got = 0;
        ssize_t n;

        if (max_fds > GS_SOCK_MAX_FDS)
                max_fds = GS_SOCK_MAX_FDS;
        *ret_nfds = 0;
        *ret_trunc = false;
        do
                n = recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return gs_neg_errno();
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0))
                        continue;
                for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                        int fd;

                        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                        if (got < max_fds)
                                fds[got++] = fd;
                        else
                                close(fd);
                }
        }
        *ret_nfds = got;
        *ret_trunc = (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
        return n;
}
