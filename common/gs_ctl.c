/* gs_ctl.c — see gs_ctl.h. */
#include "gs_ctl.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* Milliseconds left until deadline (-1: no deadline). */
static int left_ms(int64_t deadline)
{
        int64_t left;

        if (deadline < 0)
                return -1;
        left = deadline - gs_mono_ms();
        return left < 0 ? 0 : (int)left;
}

static int wait_fd(int fd, short events, int64_t deadline)
{
        struct pollfd p = { .fd = fd, .events = events };
        int r;

        do
                r = poll(&p, 1, left_ms(deadline));
        while (r < 0 && errno == EINTR);
        if (r < 0)
                return gs_neg_errno();
        if (r == 0)
                return -ETIMEDOUT;
        return 0;
}

int gs_ctl_connect(const char *path)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd;

        if (!path || strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return gs_neg_errno();
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int r = gs_neg_errno();
                close(fd);
                return r;
        }
        return fd;
}

static int write_all(int fd, const uint8_t *p, size_t n, int64_t deadline)
{
        while (n > 0) {
                ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN || errno == EWOULDBLOCK) {
                                int r = wait_fd(fd, POLLOUT, deadline);
                                if (r < 0)
                                        return r;
                                continue;
                        }
                        return gs_neg_errno();
                }
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

static int read_all(int fd, uint8_t *p, size_t n, int64_t deadline)
{
        while (n > 0) {
                ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
                if (r == 0)
                        return -ECONNRESET;
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN || errno == EWOULDBLOCK) {
                                int w = wait_fd(fd, POLLIN, deadline);
                                if (w < 0)
                                        return w;
                                continue;
                        }
                        return gs_neg_errno();
                }
                p += r;
                n -= (size_t)r;
        }
        return 0;
}

int gs_ctl_frame_size(const ProtobufCMessage *msg, size_t *ret_size)
{
        size_t len = protobuf_c_message_get_packed_size(msg);

        if (len == 0)
                return -EINVAL;
        if (len > GS_CTL_MAX_MSG)
                return -EMSGSIZE;
        *ret_size = GS_CTL_HDR + len;
        return 0;
}

void gs_ctl_frame_pack(const ProtobufCMessage *msg, uint8_t *buf, size_t size)
{
        size_t len = size - GS_CTL_HDR;

        buf[0] = (uint8_t)len;
        buf[1] = (uint8_t)(len >> 8);
        buf[2] = (uint8_t)(len >> 16);
        buf[3] = (uint8_t)(len >> 24);
        protobuf_c_message_pack(msg, buf + GS_CTL_HDR);
}

int gs_ctl_frame_len(const uint8_t hdr[GS_CTL_HDR], uint32_t *ret_len)
{
        uint32_t len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;

        if (len == 0 || len > GS_CTL_MAX_MSG)
                return -EMSGSIZE;
        *ret_len = len;
        return 0;
}

int gs_ctl_send(int fd, const ProtobufCMessage *msg, int timeout_ms)
{
        int64_t deadline = timeout_ms < 0 ? -1 : gs_mono_ms() + timeout_ms;
        uint8_t *buf;
        size_t size;
        int r;

        r = gs_ctl_frame_size(msg, &size);
        if (r < 0)
                return r;
        buf = malloc(size);
        if (!buf)
                return -ENOMEM;
        gs_ctl_frame_pack(msg, buf, size);
        r = write_all(fd, buf, size, deadline);
        free(buf);
        return r;
}

int gs_ctl_recv_frame(int fd, int timeout_ms, uint8_t **ret_buf, size_t *ret_len)
{
        int64_t deadline = timeout_ms < 0 ? -1 : gs_mono_ms() + timeout_ms;
        uint8_t hdr[GS_CTL_HDR];
        uint32_t len;
        uint8_t *buf;
        int r;

        r = read_all(fd, hdr, sizeof(hdr), deadline);
        if (r == 0)
                r = gs_ctl_frame_len(hdr, &len);
        if (r < 0)
                return r;
        buf = malloc(len);
        if (!buf)
                return -ENOMEM;
        r = read_all(fd, buf, len, deadline);
        if (r < 0) {
                free(buf);
                return r;
        }
        *ret_buf = buf;
        *ret_len = len;
        return 0;
}

int gs_ctl_recv_reply(int fd, int timeout_ms, GsCtlReply **ret_reply)
{
        uint8_t *buf = NULL;
        size_t len = 0;
        GsCtlReply *rep;
        int r;

        r = gs_ctl_recv_frame(fd, timeout_ms, &buf, &len);
        if (r < 0)
                return r;
        rep = gshare__ctl__v1__reply__unpack(NULL, len, buf);
        free(buf);
        if (!rep)
                return -EBADMSG;
        *ret_reply = rep;
        return 0;
}

int gs_ctl_call(const char *path, const GsCtlRequest *req, int timeout_ms, GsCtlReply **ret_reply)
{
        int fd, r;

        fd = gs_ctl_connect(path);
        if (fd < 0)
                return fd;
        r = gs_ctl_send(fd, &req->base, timeout_ms);
        if (r == 0)
                r = gs_ctl_recv_reply(fd, timeout_ms, ret_reply);
        close(fd);
        return r;
}

void gs_ctl_reply_free(GsCtlReply *reply)
{
        if (reply)
                gshare__ctl__v1__reply__free_unpacked(reply, NULL);
}
