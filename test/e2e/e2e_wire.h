/* e2e_wire.h — a minimal client of the agent's process protocol (gs_wire.h)
 * for the end-to-end tests: what the hook does, without CUDA, and with the
 * freedom to misbehave.  Header-only; test code. */
#ifndef E2E_WIRE_H
#define E2E_WIRE_H

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "gs_ring.h"
#include "gs_util.h"
#include "gs_wire.h"

struct e2e_conn {
        int sock;
        int shmfd;
        int wakefd; /* the agent's doorbell */
        struct gs_shm *shm;
        struct gs_sock_welcome w;
        uint32_t head, tail;
        uint64_t seq;
};

static inline int e2e_connect(const char *path)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

        if (fd < 0 || strlen(path) >= sizeof(sa.sun_path))
                return -1;
        strcpy(sa.sun_path, path);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

static inline void e2e_hello(struct gs_sock_hello *h)
{
        memset(h, 0, sizeof(*h));
        h->h.magic = GS_WIRE_MAGIC;
        h->h.version = GS_WIRE_VERSION;
        h->h.type = GS_SOCK_HELLO;
        h->h.len = sizeof(*h);
        h->pid = (uint32_t)getpid();
        memcpy(h->comm, "e2e", 3);
}

/* Receives one message (and at most two fds: the first in *ret_fd, the
 * second in *ret_fd2 if given, else closed) waiting timeout_ms.  Returns its
 * length, 0 on EOF, -ETIMEDOUT, or -errno. */
static inline ssize_t e2e_recv2(int sock, void *buf, size_t n, int *ret_fd, int *ret_fd2, int timeout_ms)
{
        union {
                struct cmsghdr c;
                char b[CMSG_SPACE(2 * sizeof(int))];
        } u;
        struct iovec iov = { .iov_base = buf, .iov_len = n };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b) };
        struct pollfd p = { .fd = sock, .events = POLLIN };
        ssize_t r;

        if (ret_fd)
                *ret_fd = -1;
        if (ret_fd2)
                *ret_fd2 = -1;
        if (poll(&p, 1, timeout_ms) == 0)
                return -ETIMEDOUT;
        r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
        if (r < 0)
                return -errno;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
                if (c->cmsg_type == SCM_RIGHTS) {
                        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                        for (size_t i = 0; i < k; i++) {
                                int fd, **dst = (int *[]){ ret_fd, ret_fd2 };
                                memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
                                if (i < 2 && dst[i])
                                        *dst[i] = fd;
                                else
                                        close(fd);
                        }
                }
        return r;
}

static inline ssize_t e2e_recv(int sock, void *buf, size_t n, int *ret_fd, int timeout_ms)
{
        return e2e_recv2(sock, buf, n, ret_fd, NULL, timeout_ms);
}

/* Connects and registers.  Returns 0 or a negative errno (or the agent's
 * error from an ERROR message). */
static inline int e2e_open_flags(struct e2e_conn *c, const char *path, uint32_t flags)
{
        struct gs_sock_hello h;
        ssize_t n;
        int fd;

        memset(c, 0, sizeof(*c));
        c->sock = e2e_connect(path);
        if (c->sock < 0)
                return -errno;
        e2e_hello(&h);
        h.flags = flags;
        /* A refused connection may be closed before our HELLO: its ERROR
         * is still there to read. */
        if (send(c->sock, &h, sizeof(h), MSG_NOSIGNAL) != sizeof(h) && errno != EPIPE && errno != ECONNRESET)
                return -errno;
        n = e2e_recv2(c->sock, &c->w, sizeof(c->w), &fd, &c->wakefd, 5000);
        if (n != (ssize_t)sizeof(c->w) || c->w.h.type != GS_SOCK_WELCOME || fd < 0 || c->wakefd < 0) {
                if (n >= (ssize_t)sizeof(struct gs_sock_hdr) && c->w.h.type == GS_SOCK_ERROR)
                        return ((struct gs_sock_error *)&c->w)->err;
                return n < 0 ? (int)n : -EPROTO;
        }
        c->shmfd = fd;
        c->shm = mmap(NULL, c->w.shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (c->shm == MAP_FAILED)
                return -errno;
        return 0;
}

static inline int e2e_open(struct e2e_conn *c, const char *path)
{
        return e2e_open_flags(c, path, 0);
}

static inline void e2e_close(struct e2e_conn *c)
{
        if (c->shm && c->shm != MAP_FAILED)
                munmap(c->shm, c->w.shm_bytes);
        if (c->shmfd > 0)
                close(c->shmfd);
        if (c->wakefd > 0)
                close(c->wakefd);
        if (c->sock >= 0)
                close(c->sock);
        memset(c, 0, sizeof(*c));
        c->sock = -1;
}

static inline int e2e_push(struct e2e_conn *c, uint32_t op, uint32_t gpu, uint64_t a0, uint64_t a1)
{
        struct gs_ring_msg m = { .seq = ++c->seq, .op = op, .gpu = gpu, .arg = { a0, a1, 0, 0 } };
        int r = gs_ring_push(&c->shm->req, &c->head, &m);

        if (r == 0)
                gs_doorbell_ring_fd(&c->shm->agent_wake, &c->shm->agent_sleeping, c->wakefd);
        return r;
}

/* Waits for the next reply.  Returns 0, -ETIMEDOUT. */
static inline int e2e_reply(struct e2e_conn *c, struct gs_ring_msg *rep, int timeout_ms)
{
        int64_t end = gs_mono_ms() + timeout_ms;

        for (;;) {
                int r = gs_ring_pop(&c->shm->rep, &c->tail, rep);
                if (r == 1)
                        return 0;
                if (r < 0)
                        return r;
                if (gs_mono_ms() >= end)
                        return -ETIMEDOUT;
                (void)gs_doorbell_sleep(&c->shm->rep, c->tail, &c->shm->hook_wake, &c->shm->hook_sleeping, 10000000);
        }
}

/* One request; for ALLOC the grants' fds are stored in fds[0..*nfds) (or
 * closed if fds is NULL).  Returns the reply's status, or -ETIMEDOUT etc. */
static inline int e2e_call(struct e2e_conn *c, uint32_t op, uint32_t gpu, uint64_t a0, uint64_t a1,
                           struct gs_ring_msg *ret, int *fds, uint32_t maxfds, uint32_t *nfds)
{
        struct gs_ring_msg rep;
        int r = e2e_push(c, op, gpu, a0, a1);

        if (nfds)
                *nfds = 0;
        if (r < 0)
                return r;
        r = e2e_reply(c, &rep, 5000);
        if (r < 0)
                return r;
        if ((rep.op == GS_OP_ALLOC || rep.op == GS_OP_IPC_OPEN) && rep.status == 0)
                for (uint64_t i = 0; i < rep.arg[1]; i++) {
                        struct gs_sock_grant g;
                        int fd;
                        ssize_t n = e2e_recv(c->sock, &g, sizeof(g), &fd, 5000);
                        if (n != (ssize_t)sizeof(g) || fd < 0 ||
                            g.h.type != (rep.op == GS_OP_ALLOC ? GS_SOCK_GRANT : GS_SOCK_IPC_GRANT) ||
                            (rep.op == GS_OP_IPC_OPEN && g.slot != i))
                                return -EPROTO;
                        if (fds && nfds && *nfds < maxfds)
                                fds[(*nfds)++] = fd;
                        else
                                close(fd);
                }
        if (ret)
                *ret = rep;
        return rep.status;
}

/* e2e_wire_ipc.c: the ipcforge check; 0 when it holds. */
int e2e_wire_ipcforge(const char *sock);

#endif
