/* gs_hook_msg.c — messages on the agent's socket: see gs_hook_msg.h. */
#include "gs_hook_msg.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gs_util.h"

ssize_t gs_msg_recv_fds(int sock, void *buf, size_t len, int *ret_fds, int max, int flags)
{
        union {
                struct cmsghdr h;
                char b[CMSG_SPACE(sizeof(int) * 4)];
        } cb;
        struct iovec iov = { buf, len };
        struct msghdr mh = { 0 };
        ssize_t n;
        int nfds = 0;

        for (int i = 0; i < max; i++)
                ret_fds[i] = -1;
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cb.b;
        mh.msg_controllen = sizeof(cb.b);
        do
                n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | flags);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return gs_neg_errno();
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < k; i++) {
                        int fd;
                        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                        if (nfds < max)
                                ret_fds[nfds] = fd;
                        else
                                close(fd); /* more fds than the protocol allows */
                        nfds++;
                }
        }
        if (nfds > max || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
                for (int i = 0; i < max; i++)
                        gs_closep(&ret_fds[i]);
                return -EPROTO;
        }
        return n;
}

int gs_msg_hdr_ok(const struct gs_sock_hdr *h, uint16_t type, size_t len, ssize_t got)
{
        return got == (ssize_t)len && h->magic == GS_WIRE_MAGIC && h->version == GS_WIRE_VERSION && h->type == type &&
               h->len == len;
}
