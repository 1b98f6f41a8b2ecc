/* gs_sockmsg.c — see gs_sockmsg.h. */
#include "gs_sockmsg.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

void gs_sockmsg_hdr(struct gs_sock_hdr *h, uint16_t type, uint32_t len)
{
        h->magic = GS_WIRE_MAGIC;
        h->version = GS_WIRE_VERSION;
        h->type = type;
        h->len = len;
        h->reserved = 0;
}

int gs_sockmsg_send_fds(int sock, const void *msg, size_t len, const int *fds, size_t nfds,
                        const int *stop)
{
        union {
                struct cmsghdr c;
                char buf[CMSG_SPACE(2 * sizeof(int))];
        } u;
        struct iovec iov = { .iov_base = (void *)msg, .iov_len = len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        int64_t deadline = gs_mono_ms() + GS_SOCKMSG_SEND_MS;

        if (nfds) {
                memset(&u, 0, sizeof(u));
                mh.msg_control = u.buf;
                mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
                memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
        }
        for (;;) {
                ssize_t w = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w == (ssize_t)len)
                        return 0;
                if (w >= 0)
                        return -EPROTO; /* SEQPACKET never sends part of a record */
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN && errno != EWOULDBLOCK)
                        return gs_neg_errno();
                if (gs_mono_ms() >= deadline || (stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE)))
                        return -ETIMEDOUT;
                struct pollfd pfd = { .fd = sock, .events = POLLOUT };
                (void)poll(&pfd, 1, 20);
        }
}

int gs_sockmsg_send(int sock, const void *msg, size_t len, int fd, const int *stop)
{
        return gs_sockmsg_send_fds(sock, msg, len, &fd, fd >= 0, stop);
}

int gs_sockmsg_send_grant(int sock, uint16_t type, const struct gs_ring_msg *req, uint32_t slot,
                          uint64_t chunk_bytes, int fd, const int *stop)
{
        struct gs_sock_grant m;

        memset(&m, 0, sizeof(m));
        gs_sockmsg_hdr(&m.h, type, sizeof(m));
        m.seq = req->seq;
        m.gpu = req->gpu;
        m.slot = slot;
        m.chunk_bytes = chunk_bytes;
        return gs_sockmsg_send(sock, &m, sizeof(m), fd, stop);
}

void gs_sockmsg_error(int sock, int err, const char *msg)
{
        struct gs_sock_error e;

        memset(&e, 0, sizeof(e));
        gs_sockmsg_hdr(&e.h, GS_SOCK_ERROR, sizeof(e));
        e.err = err;
        snprintf(e.msg, sizeof(e.msg), "%s", msg);
        (void)!gs_sockmsg_send(sock, &e, sizeof(e), -1, NULL);
}

ssize_t gs_sockmsg_recv_fd(int sock, void *buf, size_t len, bool *ret_trunc, int *ret_fd)
{
        union {
                struct cmsghdr c;
                char b[CMSG_SPACE(sizeof(int) * 8)];
        } u;
        struct iovec iov = { .iov_base = buf, .iov_len = len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b) };
        ssize_t n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        int kept = -1, seen = 0;

        if (ret_fd)
                *ret_fd = -1;
        if (n < 0)
                return errno == EINTR ? -EAGAIN : gs_neg_errno();
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
                        for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                                int fd;
                                memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                                if (seen++ == 0 && ret_fd)
                                        kept = fd;
                                else
                                        close(fd);
                        }
        *ret_trunc = (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
        /* Exactly one, or none kept. */
        if (kept >= 0 && (seen > 1 || *ret_trunc))
                gs_closep(&kept);
        if (ret_fd)
                *ret_fd = kept;
        return n;
}

ssize_t gs_sockmsg_recv(int sock, void *buf, size_t len, bool *ret_trunc)
{
        return gs_sockmsg_recv_fd(sock, buf, len, ret_trunc, NULL);
}
