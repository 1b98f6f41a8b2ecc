/* gs_sockmsg.c — see gs_sockmsg.h. */
#include "gs_sockmsg.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "gs_sock.h"

void gs_sockmsg_hdr(struct gs_sock_hdr *h, uint16_t type, uint32_t len)
{
        h->magic = GS_WIRE_MAGIC;
        h->version = GS_WIRE_VERSION;
        h->type = type;
        h->len = len;
        h->reserved = 0;
}

int gs_sockmsg_send_fds(int sock, const void *msg, size_t len, const int *fds, size_t nfds, const int *stop)
{
        int64_t deadline = gs_mono_ms() + GS_SOCKMSG_SEND_MS;

        for (;;) {
                ssize_t w = gs_sock_send_fds(sock, msg, len, fds, nfds, MSG_DONTWAIT);
                if (w == (ssize_t)len)
                        return 0;
                if (w >= 0)
                        return -EPROTO; /* SEQPACKET never sends part of a record */
                if (w != -EAGAIN && w != -EWOULDBLOCK)
                        return (int)w;
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

int gs_sockmsg_send_grant(int sock, uint16_t type, const struct gs_ring_msg *req, uint32_t slot, uint64_t chunk_bytes,
                          int fd, const int *stop)
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

/* A message with more fds than this is taken as cut (MSG_CTRUNC). */
#define RECV_MAX_FDS 8

ssize_t gs_sockmsg_recv_fd(int sock, void *buf, size_t len, bool *ret_trunc, int *ret_fd)
{
        int fds[RECV_MAX_FDS + 1];
        size_t nfds = 0;
        ssize_t n = gs_sock_recv_fds(sock, buf, len, MSG_DONTWAIT, fds, RECV_MAX_FDS + 1, &nfds, ret_trunc);

        if (ret_fd)
                *ret_fd = -1;
        if (n < 0)
                return n;
        if (nfds > RECV_MAX_FDS)
                *ret_trunc = true;
        /* Exactly one, or none kept. */
        if (ret_fd && nfds == 1 && !*ret_trunc)
                *ret_fd = fds[0];
        else
                for (size_t i = 0; i < nfds; i++)
                        close(fds[i]);
        return n;
}

ssize_t gs_sockmsg_recv(int sock, void *buf, size_t len, bool *ret_trunc)
{
        return gs_sockmsg_recv_fd(sock, buf, len, ret_trunc, NULL);
}
