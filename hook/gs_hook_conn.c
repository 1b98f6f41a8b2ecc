/* gs_hook_conn.c — the connection to the agent: registration (HELLO,
 * WELCOME, the sealed segment), the request/reply exchange on the rings
 * with its doorbells, and what a fork does to it.  See gs_hook_conn.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "gs_hook_conn.h"
#include "gs_ring.h"

#define GS_DEFAULT_SOCKET "/var/run/gshare/agent.sock"
#define GS_SPIN_NS 30000ull                 /* spin this long before sleeping */
#define GS_SLEEP_SLICE_NS 50000000ull       /* re-check the socket this often */
#define GS_REPLY_TIMEOUT_NS 60000000000ull  /* give up on a silent agent */
#define GS_WELCOME_TIMEOUT_MS 10000
#define GS_MAX_VA (UINT64_C(1) << 47)

struct gs_conn gs_conn = { .mu = PTHREAD_MUTEX_INITIALIZER, .sock = -1, .wake = -1 };
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

/* pre: gs_conn.mu held.  Forgets the connection (the agent reclaims our memory
 * when we exit; chunks still mapped stay usable until freed). */
static void gs_conn_drop(void)
{
        gs_closep(&gs_conn.sock);
        gs_closep(&gs_conn.wake);
        if (gs_conn.shm)
                munmap(gs_conn.shm, sizeof(*gs_conn.shm));
        gs_conn.shm = NULL;
        gs_conn.state = GS_CONN_DOWN;
}

/* pre: gs_conn.mu held. */
void gs_conn_lost(const char *why)
{
        gs_hook_say_once(GS_ONCE_AGENT, "lost the connection to the gshare agent at %s (%s); "
                         "GPU memory allocation is disabled for this process", gs_conn.sock_path, why);
        gs_conn_drop();
}

/* ---- fork ---------------------------------------------------------- */

static void gs_atfork_prepare(void) { pthread_mutex_lock(&gs_conn.mu); }
static void gs_atfork_parent(void) { pthread_mutex_unlock(&gs_conn.mu); }

/* The child is a new process for the agent: drop the parent's connection
 * (without telling the agent anything: the socket is the parent's too) and
 * register again at the next call.  Its copy of the parent's mappings is
 * left alone; it reserves fresh ranges. */
static void gs_atfork_child(void)
{
        pthread_mutex_init(&gs_conn.mu, NULL);
        gs_closep(&gs_conn.sock);
        gs_closep(&gs_conn.wake);
        if (gs_conn.shm)
                munmap(gs_conn.shm, sizeof(*gs_conn.shm));
        gs_conn.shm = NULL;
        for (uint32_t i = 0; i < gs_conn.ngpus; i++) {
                free(gs_conn.gpus[i].mapped);
                gs_conn.gpus[i].mapped = NULL;
                gs_conn.gpus[i].va_base = 0;
                gs_conn.gpus[i].ctx_charged = 0;
                gs_conn.gpus[i].ctx_done = 0;
        }
        gs_conn.ngpus = 0;
        gs_conn.state = GS_CONN_NEW;
        gs_hook_once_reset();
}

static void gs_atfork_register(void) { (void)pthread_atfork(gs_atfork_prepare, gs_atfork_parent, gs_atfork_child); }

/* ---- registration -------------------------------------------------- */

/* Receives one message and at most max (1 or 2) fds into ret_fds[0..max),
 * -1 where none came.  Returns the length or a negative errno (-EPROTO, all
 * fds closed, if more came or the message was cut). */
static ssize_t gs_recv_fds(int sock, void *buf, size_t len, int *ret_fds, int max, int flags)
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

ssize_t gs_conn_recv_fd(void *buf, size_t len, int *ret_fd)
{
        return gs_recv_fds(gs_conn.sock, buf, len, ret_fd, 1, MSG_DONTWAIT);
}

int gs_conn_hdr_ok(const struct gs_sock_hdr *h, uint16_t type, size_t len, ssize_t got)
{
        return got == (ssize_t)len && h->magic == GS_WIRE_MAGIC && h->version == GS_WIRE_VERSION &&
               h->type == type && h->len == len;
}

/* pre: gs_conn.mu held.  Validates the welcome and maps the segment. */
static int gs_conn_welcome(const struct gs_sock_welcome *w, int fd, const char **why)
{
        struct stat st;
        struct gs_shm *s;
        int seals;

        *why = "malformed welcome";
        if (w->ngpus < 1 || w->ngpus > GS_MAX_GPUS_PER_ALLOC || w->shm_bytes < sizeof(struct gs_shm))
                return -EPROTO;
        for (uint32_t i = 0; i < w->ngpus; i++) {
                const struct gs_wire_gpu *g = &w->gpus[i];
                if (!gs_is_pow2(g->chunk_bytes) || g->chunk_bytes < 2 * GS_MiB || g->max_slots < 1 ||
                    g->chunk_bytes > GS_MAX_VA / g->max_slots)
                        return -EPROTO;
        }
        /* The segment must be sealed against shrinking, or the agent could
         * make our reads fault. */
        seals = fcntl(fd, F_GET_SEALS);
        if (fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof(*s) || seals < 0 || !(seals & F_SEAL_SHRINK)) {
                *why = "the shared segment is not a sealed memfd of the right size";
                return -EPROTO;
        }
        s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (s == MAP_FAILED) {
                *why = "cannot map the shared segment";
                return gs_neg_errno();
        }
        if (s->magic != GS_WIRE_MAGIC || s->version != GS_WIRE_VERSION || s->size != sizeof(*s) ||
            s->ring_slots != GS_RING_SLOTS) {
                *why = "the shared segment has the wrong magic, version or size";
                munmap(s, sizeof(*s));
                return -EPROTO;
        }
        gs_conn.shm = s;
        gs_conn.req_head = __atomic_load_n(&s->req.head, __ATOMIC_ACQUIRE);
        gs_conn.rep_tail = __atomic_load_n(&s->rep.tail, __ATOMIC_ACQUIRE);
        gs_conn.ngpus = w->ngpus;
        for (uint32_t i = 0; i < w->ngpus; i++) {
                memset(&gs_conn.gpus[i], 0, sizeof(gs_conn.gpus[i]));
                memcpy(gs_conn.gpus[i].uuid, w->gpus[i].uuid, 16);
                gs_conn.gpus[i].quota = w->gpus[i].quota_bytes;
                gs_conn.gpus[i].chunk = w->gpus[i].chunk_bytes;
                gs_conn.gpus[i].max_slots = w->gpus[i].max_slots;
        }
        for (int d = 0; d < GS_MAX_DEVICES; d++)
                gs_conn.devmap[d] = -2;
        gs_hook_debug("registered with the agent at %s: process %llu, %u GPU(s)", gs_conn.sock_path,
                      (unsigned long long)w->proc_id, w->ngpus);
        return 0;
}

/* pre: gs_conn.mu held, gs_conn.state == GS_CONN_NEW. */
static int gs_conn_connect(void)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct gs_sock_hello hello = { 0 };
        union {
                struct gs_sock_welcome w;
                struct gs_sock_error e;
                struct gs_sock_hdr h;
        } m;
        struct pollfd pfd;
        const char *why = NULL;
        ssize_t n;
        int fds[2] = { -1, -1 }, r;

        pthread_once(&g_atfork_once, gs_atfork_register);
        gs_conn.sock_path = secure_getenv("GSHARE_SOCKET");
        if (!gs_conn.sock_path || !*gs_conn.sock_path)
                gs_conn.sock_path = GS_DEFAULT_SOCKET;
        if (strlen(gs_conn.sock_path) >= sizeof(sa.sun_path)) {
                errno = ENAMETOOLONG;
                goto fail_errno;
        }
        strcpy(sa.sun_path, gs_conn.sock_path);
        gs_conn.sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (gs_conn.sock < 0 || connect(gs_conn.sock, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                goto fail_errno;
        hello.h = (struct gs_sock_hdr){ GS_WIRE_MAGIC, GS_WIRE_VERSION, GS_SOCK_HELLO, sizeof(hello), 0 };
        hello.pid = (uint32_t)getpid();
        if (prctl(PR_GET_NAME, hello.comm) < 0)
                memset(hello.comm, 0, sizeof(hello.comm));
        /* An agent refusing this connection (its caps) sends ERROR and
         * closes, maybe before our HELLO: read the ERROR all the same. */
        if (send(gs_conn.sock, &hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello) &&
            errno != EPIPE && errno != ECONNRESET)
                goto fail_errno;
        pfd = (struct pollfd){ .fd = gs_conn.sock, .events = POLLIN };
        do
                r = poll(&pfd, 1, GS_WELCOME_TIMEOUT_MS);
        while (r < 0 && errno == EINTR);
        if (r == 0) {
                why = "no welcome from the agent";
                goto fail;
        }
        memset(&m, 0, sizeof(m));
        n = gs_recv_fds(gs_conn.sock, &m, sizeof(m), fds, 2, MSG_DONTWAIT);
        if (n < 0) {
                errno = (int)-n;
                goto fail_errno;
        }
        if (gs_conn_hdr_ok(&m.h, GS_SOCK_ERROR, sizeof(m.e), n)) {
                m.e.msg[sizeof(m.e.msg) - 1] = '\0';
                gs_hook_say_once(GS_ONCE_AGENT, "the gshare agent at %s refused this process: %s; "
                                 "GPU memory allocation is disabled for this process", gs_conn.sock_path, m.e.msg);
                gs_closep(&fds[0]);
                gs_closep(&fds[1]);
                gs_conn_drop();
                return -EPERM;
        }
        if (!gs_conn_hdr_ok(&m.h, GS_SOCK_WELCOME, sizeof(m.w), n) || fds[0] < 0 || fds[1] < 0) {
                why = "unexpected reply to HELLO";
                goto fail;
        }
        r = gs_conn_welcome(&m.w, fds[0], &why);
        gs_closep(&fds[0]);
        if (r < 0)
                goto fail;
        gs_conn.wake = fds[1];
        gs_conn.state = GS_CONN_UP;
        return 0;
fail_errno:
        why = strerror(errno);
fail:
        gs_closep(&fds[0]);
        gs_closep(&fds[1]);
        gs_hook_say_once(GS_ONCE_AGENT, "cannot reach the gshare agent at %s (%s); "
                         "GPU memory allocation is disabled for this process", gs_conn.sock_path, why);
        gs_conn_drop();
        return -ECONNREFUSED;
}

int gs_conn_ensure(void)
{
        int r;

        pthread_mutex_lock(&gs_conn.mu);
        if (gs_conn.state == GS_CONN_NEW)
                (void)gs_conn_connect();
        r = gs_conn.state == GS_CONN_UP ? 0 : -ENOTCONN;
        pthread_mutex_unlock(&gs_conn.mu);
        return r;
}

int gs_conn_up(void)
{
        if (gs_conn.state == GS_CONN_NEW)
                (void)gs_conn_connect();
        return gs_conn.state == GS_CONN_UP;
}

/* pre: gs_conn.mu held.  Connects if needed; the driver table or NULL. */
const struct gs_cu *gs_conn_ready(void)
{
        const struct gs_cu *cu = gs_cu_get();

        if (!cu)
                return NULL;
        if (gs_conn.state == GS_CONN_NEW)
                (void)gs_conn_connect();
        return gs_conn.state == GS_CONN_UP ? cu : NULL;
}

/* ---- requests ------------------------------------------------------ */

/* pre: gs_conn.mu held, connected.  Sends one request and waits for its reply.
 * Returns 0 with *ret filled (ret->status is the agent's verdict), or a
 * negative errno after which the connection is gone. */
int gs_conn_call(uint32_t op, uint32_t gpu, uint64_t a0, uint64_t a1, struct gs_ring_msg *ret)
{
        struct gs_ring_msg m = { 0 };
        uint64_t start = (uint64_t)gs_mono_ns(), now;
        int r;

        m.seq = ++gs_conn.seq;
        m.op = op;
        m.gpu = gpu;
        m.arg[0] = a0;
        m.arg[1] = a1;
        r = gs_ring_push(&gs_conn.shm->req, &gs_conn.req_head, &m);
        if (r < 0) {
                /* One request outstanding: a full ring means a broken peer. */
                gs_conn_lost("request ring full or corrupt");
                return -EPROTO;
        }
        gs_doorbell_ring_fd(&gs_conn.shm->agent_wake, &gs_conn.shm->agent_sleeping, gs_conn.wake);
        for (;;) {
                r = gs_ring_pop(&gs_conn.shm->rep, &gs_conn.rep_tail, ret);
                if (r < 0) {
                        gs_conn_lost("reply ring corrupt");
                        return r;
                }
                if (r == 1)
                        break;
                now = (uint64_t)gs_mono_ns();
                if (now - start < GS_SPIN_NS) {
                        gs_cpu_relax();
                        continue;
                }
                if (now - start > GS_REPLY_TIMEOUT_NS) {
                        gs_conn_lost("no reply within 60 s");
                        return -ETIMEDOUT;
                }
                r = gs_doorbell_sleep(&gs_conn.shm->rep, gs_conn.rep_tail, &gs_conn.shm->hook_wake, &gs_conn.shm->hook_sleeping,
                                      GS_SLEEP_SLICE_NS);
                if (r == -ETIMEDOUT || r == 0) {
                        struct pollfd pfd = { .fd = gs_conn.sock, .events = POLLRDHUP };
                        if (!gs_ring_ready(&gs_conn.shm->rep, gs_conn.rep_tail) && poll(&pfd, 1, 0) > 0 &&
                            (pfd.revents & (POLLHUP | POLLRDHUP | POLLERR))) {
                                gs_conn_lost("the agent closed the connection");
                                return -ECONNRESET;
                        }
                        /* Still no reply after a whole slice: ring again, so
                         * that a wake-up lost anywhere costs one slice, not
                         * the request. */
                        if (r == -ETIMEDOUT && gs_conn.wake >= 0 && !gs_ring_ready(&gs_conn.shm->rep, gs_conn.rep_tail)) {
                                uint64_t one = 1;
                                if (write(gs_conn.wake, &one, sizeof(one)) < 0) {
                                        /* EAGAIN: a wake-up is pending anyway */
                                }
                        }
                }
        }
        if (ret->seq != m.seq || ret->op != op) {
                gs_conn_lost("reply does not match the request");
                return -EPROTO;
        }
        return 0;
}

/* The agent's verdict on a request as the error the hook gives: what the
 * API layer turns into the driver's codes (gs_hook_api.c). */
int gs_conn_status(int32_t st)
{
        switch (st) {
        case 0: return 0;
        case -ENOMEM: return -ENOMEM;
        case -ENOENT:
        case -EINVAL: return -EINVAL;
        case -EOPNOTSUPP: return -EOPNOTSUPP;
        default: return -EIO;
        }
}
