/* e2e_wire_ipc.c — e2e_wire ipcforge (e2e_wire.c): hostile reclaims of
 * CUDA IPC exports (gs_wire.h GS_RECLAIM_IPC, _IPC_FD). */
#include <stdarg.h>
#include <stddef.h>

#include "e2e_wire.h"

static int bad;

static void expect(int cond, const char *fmt, ...)
{
        va_list ap;

        if (cond)
                return;
        va_start(ap, fmt);
        fprintf(stderr, "FAIL ipcforge: ");
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
        bad++;
}

/* One reclaim message of kind with items, and fd attached if >= 0. */
static int send_reclaim(int sock, uint32_t kind, const uint64_t *items, uint32_t count, uint32_t flags, int fd)
{
        static struct gs_sock_reclaim m;
        size_t len = offsetof(struct gs_sock_reclaim, item) + 8 * (size_t)count;
        union {
                struct cmsghdr c;
                char b[CMSG_SPACE(sizeof(int))];
        } u;
        struct iovec iov = { .iov_base = &m, .iov_len = len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

        memset(&m, 0, sizeof(m));
        m.h = (struct gs_sock_hdr){ GS_WIRE_MAGIC, GS_WIRE_VERSION, GS_SOCK_RECLAIM, (uint32_t)len, 0 };
        m.kind = kind;
        m.count = count;
        m.flags = flags;
        if (count)
                memcpy(m.item, items, 8 * (size_t)count);
        if (fd >= 0) {
                memset(&u, 0, sizeof(u));
                mh.msg_control = u.b;
                mh.msg_controllen = sizeof(u.b);
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(c), &fd, sizeof(int));
        }
        return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -errno;
}

/* The type of the agent's answer to a reclaim (RECLAIM_DONE or ERROR). */
static int reclaim_answer(struct e2e_conn *c)
{
        struct gs_sock_error e;
        int fd = -1;
        ssize_t n = e2e_recv(c->sock, &e, sizeof(e), &fd, 10000);

        if (fd >= 0)
                close(fd);
        return n >= (ssize_t)sizeof(struct gs_sock_hdr) ? e.h.type : -1;
}

/* A reclaim names its own live blocks only (docs/agent.md, "Restarts"). */
int e2e_wire_ipcforge(const char *sock)
{
        struct e2e_conn a, h;
        struct gs_ring_msg rep, ex;
        const uint64_t forged[2] = { 0x0123456789abcdefull, 0xfedcba9876543210ull };
        int r;

        if (e2e_open(&a, sock) < 0) {
                fprintf(stderr, "FAIL: cannot register on %s\n", sock);
                return 1;
        }
        expect((a.w.h.reserved & GS_FEAT_IPC_KEEP) != 0, "the agent announces GS_FEAT_IPC_KEEP");
        r = e2e_call(&a, GS_OP_ALLOC, 0, 3 * GS_MiB, 0, &rep, NULL, 0, NULL);
        expect(r == 0, "ALLOC: %d", r);
        r = e2e_call(&a, GS_OP_IPC_EXPORT, 0, rep.arg[0], 0, &ex, NULL, 0, NULL);
        expect(r == 0, "IPC_EXPORT: %d", r);
        /* Another "process" reclaims: a's token and a forged one, at a's
         * offset, where it has no block. */
        r = e2e_open_flags(&h, sock, GS_HELLO_RECLAIM);
        expect(r == 0, "a reclaiming HELLO: %d", r);
        const uint64_t items[6] = { ex.arg[0], ex.arg[1], ex.arg[3], forged[0], forged[1], ex.arg[3] };
        expect(send_reclaim(h.sock, GS_RECLAIM_IPC, items, 6, 0, -1) == 0 &&
                       send_reclaim(h.sock, GS_RECLAIM_END, NULL, 0, 1, -1) == 0,
               "sending the reclaim");
        expect(reclaim_answer(&h) == GS_SOCK_RECLAIM_DONE, "the reclaim is answered RECLAIM_DONE");
        r = e2e_call(&a, GS_OP_IPC_OPEN, 0, forged[0], forged[1], NULL, NULL, 0, NULL);
        expect(r == -ENOENT, "a token reclaimed for no block opens: %d", r);
        r = e2e_call(&h, GS_OP_IPC_OPEN, 0, ex.arg[0], ex.arg[1], &rep, NULL, 0, NULL);
        expect(r == 0 && rep.arg[2] == 3 * GS_MiB, "a's token, reclaimed by another, still names a's block: %d", r);
        e2e_close(&h);
        /* Memory for a slot it does not hold ends the reclaim. */
        r = e2e_open_flags(&h, sock, GS_HELLO_RECLAIM);
        expect(r == 0, "a reclaiming HELLO: %d", r);
        const uint64_t slot = 0;
        expect(send_reclaim(h.sock, GS_RECLAIM_IPC_FD, &slot, 1, 0, h.shmfd) == 0, "sending IPC memory");
        /* The agent answers that message with ERROR and closes at once; no
         * END after it: a message it never read when it closed would turn
         * our read of its ERROR into ECONNRESET (AF_UNIX). */
        expect(reclaim_answer(&h) == GS_SOCK_ERROR, "memory for a slot not held is refused");
        e2e_close(&h);
        e2e_close(&a);
        return bad != 0;
}
