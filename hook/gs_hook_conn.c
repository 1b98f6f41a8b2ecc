/* gs_hook_conn.c — the connection to the agent: registration (HELLO,
 * WELCOME, the sealed segment), the request/reply exchange on the rings
 * with its doorbells, and what a fork does to it.  See gs_hook_conn.h. */
#include <errno.h>
#include <stddef.h>
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
#include <time.h>
#include <unistd.h>

#include "gs_hook_conn.h"
#include "gs_hook_msg.h"
#include "gs_ring.h"

#define GS_DEFAULT_SOCKET "/var/run/gshare/agent.sock"
#define GS_SPIN_NS 30000ull                /* spin this long before sleeping */
#define GS_SLEEP_SLICE_NS 50000000ull      /* re-check the socket this often */
#define GS_REPLY_TIMEOUT_NS 60000000000ull /* give up on a silent agent */
#define GS_WELCOME_TIMEOUT_MS 10000
#define GS_MAX_VA (UINT64_C(1) << 47)

struct gs_conn gs_conn = { .mu = PTHREAD_MUTEX_INITIALIZER, .sock = -1, .wake = -1, .notify = -1 };
static gs_conn_vmm_list_fn g_vmm_list;
static gs_conn_ipc_reclaim_fn g_ipc_reclaim;
/* The hook's thread: a call of its never waits for a new agent (it holds
 * gs_conn.mu, and frees must not wait).  initial-exec, as in
 * gs_hook_gate.c. */
static __thread __attribute__((tls_model("initial-exec"))) int t_no_wait;

void gs_conn_no_wait(void)
{
        t_no_wait = 1;
}

static gs_conn_event_fn g_event;

void gs_conn_set_event_fn(gs_conn_event_fn fn)
{
        g_event = fn;
}

static void gs_conn_event(enum gs_conn_event ev)
{
        if (g_event)
                g_event(ev);
}

void gs_conn_set_vmm_lister(gs_conn_vmm_list_fn fn)
{
        g_vmm_list = fn;
}

void gs_conn_set_ipc_reclaimer(gs_conn_ipc_reclaim_fn fn)
{
        g_ipc_reclaim = fn;
}
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

/* pre: gs_conn.mu held.  Closes the socket, the doorbells and the segment
 * (the hook's thread, which may be polling those of a connection that was
 * up, is woken first; a failed try to connect wakes no one, or the thread
 * would try again at once). */
static void gs_conn_close(void)
{
        if (gs_conn.state == GS_CONN_UP)
                gs_conn_event(GS_CONN_EV_CLOSING);
        gs_closep(&gs_conn.notify);
        gs_closep(&gs_conn.sock);
        gs_closep(&gs_conn.wake);
        if (gs_conn.shm)
                munmap(gs_conn.shm, sizeof(*gs_conn.shm));
        gs_conn.shm = NULL;
}

/* pre: gs_conn.mu held.  DOWN: the hook's thread, which may be waiting to
 * try again, ends. */
static void gs_conn_down(void)
{
        gs_conn.state = GS_CONN_DOWN;
        gs_conn_event(GS_CONN_EV_DOWN);
}

/* pre: gs_conn.mu held.  Forgets the connection for good (the agent
 * reclaims our memory when we exit; chunks still mapped stay usable until
 * freed). */
static void gs_conn_drop(void)
{
        gs_conn_close();
        gs_conn_down();
}

/* pre: gs_conn.mu held. */
void gs_conn_lost(const char *why)
{
        gs_hook_say_once(GS_ONCE_AGENT,
                         "lost the connection to the gshare agent at %s (%s); "
                         "GPU memory allocation is disabled for this process",
                         gs_conn.sock_path, why);
        gs_conn_drop();
}

/* pre: gs_conn.mu held. */
void gs_conn_broken(const char *why)
{
        gs_conn_close();
        if (!(gs_conn.features & GS_FEAT_RECLAIM)) {
                gs_conn_lost(why);
                return;
        }
        gs_hook_say_once(GS_ONCE_AGENT,
                         "lost the connection to the gshare agent at %s (%s); waiting up to "
                         "%llu ms for an agent to take this process's memory back",
                         gs_conn.sock_path, why, (unsigned long long)(gs_conn.wait_ns / 1000000));
        gs_conn.state = GS_CONN_LOST;
        gs_conn.lost_ns = (uint64_t)gs_mono_ns();
}

/* ---- fork ---------------------------------------------------------- */

static void gs_atfork_prepare(void)
{
        pthread_mutex_lock(&gs_conn.mu);
}
static void gs_atfork_parent(void)
{
        pthread_mutex_unlock(&gs_conn.mu);
}

/* The child is a new process for the agent: drop the parent's connection
 * (without telling the agent anything: the socket is the parent's too) and
 * register again at the next call.  Its copy of the parent's mappings is
 * left alone; it reserves fresh ranges. */
static void gs_atfork_child(void)
{
        pthread_mutex_init(&gs_conn.mu, NULL);
        gs_closep(&gs_conn.sock);
        gs_closep(&gs_conn.wake);
        gs_closep(&gs_conn.notify);
        if (gs_conn.shm)
                munmap(gs_conn.shm, sizeof(*gs_conn.shm));
        gs_conn.shm = NULL;
        for (uint32_t i = 0; i < gs_conn.ngpus; i++) {
                free(gs_conn.gpus[i].mapped);
                gs_conn.gpus[i].mapped = NULL;
                gs_blocks_clear(&gs_conn.gpus[i].blocks);
                gs_conn.gpus[i].va_base = 0;
                gs_conn.gpus[i].ctx_charged = 0;
                gs_conn.gpus[i].ctx_done = 0;
        }
        gs_conn.ngpus = 0;
        gs_conn.state = GS_CONN_NEW;
        gs_hook_once_reset();
}

static void gs_atfork_register(void)
{
        (void)pthread_atfork(gs_atfork_prepare, gs_atfork_parent, gs_atfork_child);
}

/* ---- registration -------------------------------------------------- */

ssize_t gs_conn_recv_fd(void *buf, size_t len, int *ret_fd)
{
        return gs_msg_recv_fds(gs_conn.sock, buf, len, ret_fd, 1, MSG_DONTWAIT);
}

/* pre: gs_conn.mu held.  Validates the welcome and maps the segment.  For
 * a reclaim the GPUs must be those we have (same chunks, same ranges). */
static int gs_conn_welcome(const struct gs_sock_welcome *w, int fd, int reclaim, const char **why)
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
                if (reclaim && (w->ngpus != gs_conn.ngpus || memcmp(g->uuid, gs_conn.gpus[i].uuid, 16) ||
                                g->chunk_bytes != gs_conn.gpus[i].chunk || g->max_slots != gs_conn.gpus[i].max_slots)) {
                        *why = "the new agent's GPUs, chunks or ranges differ from the old one's";
                        return -EPROTO;
                }
        }
        if (reclaim && !(w->h.reserved & GS_FEAT_RECLAIM)) {
                *why = "the new agent cannot take memory back";
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
        gs_conn.features = w->h.reserved;
        gs_conn.give_back_seen = 0;
        if (reclaim) {
                for (uint32_t i = 0; i < w->ngpus; i++)
                        gs_conn.gpus[i].quota = w->gpus[i].quota_bytes;
                return 0;
        }
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

/* pre: gs_conn.mu held. */
int gs_conn_reclaim_send(struct gs_sock_reclaim *m, uint32_t gpu, uint32_t kind, uint32_t count, uint32_t flags, int fd)
{
        size_t len = offsetof(struct gs_sock_reclaim, item) + 8 * (size_t)count;
        union {
                struct cmsghdr c;
                char b[CMSG_SPACE(sizeof(int))];
        } u;
        struct iovec iov = { .iov_base = m, .iov_len = len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        ssize_t n;

        m->h = (struct gs_sock_hdr){ GS_WIRE_MAGIC, GS_WIRE_VERSION, GS_SOCK_RECLAIM, (uint32_t)len, 0 };
        m->gpu = gpu;
        m->kind = kind;
        m->count = count;
        m->flags = flags;
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
        do
                n = sendmsg(gs_conn.sock, &mh, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        return n == (ssize_t)len ? 0 : -EIO;
}

/* pre: gs_conn.mu held, WELCOME taken.  Tells the new agent what we map
 * and where our live blocks are, and waits for its answer: 0, -EPERM
 * (refused: for good), or another negative errno (try again). */
static int gs_reclaim(const char **why)
{
        struct gs_sock_reclaim *m = malloc(sizeof(*m));
        uint32_t complete = 0;
        int r = 0;

        if (!m) {
                *why = "out of memory";
                return -ENOMEM;
        }
        for (uint32_t gi = 0; gi < gs_conn.ngpus && r == 0; gi++) {
                struct gs_hook_gpu *g = &gs_conn.gpus[gi];
                uint32_t k = 0;

                for (size_t from = 0, next; r == 0 && g_vmm_list; from = next) {
                        size_t n = g_vmm_list(gi, from, m->item, GS_RECLAIM_MAX_ITEMS / 2, &next);
                        if (n == 0)
                                break;
                        r = gs_conn_reclaim_send(m, gi, GS_RECLAIM_VMM, (uint32_t)(2 * n), 0, -1);
                }
                if (!g->va_base)
                        continue;
                for (uint32_t s = 0; s < g->max_slots && r == 0; s++) {
                        if (!g->mapped[s])
                                continue;
                        m->item[k++] = s;
                        if (k == GS_RECLAIM_MAX_ITEMS) {
                                r = gs_conn_reclaim_send(m, gi, GS_RECLAIM_SLOTS, k, 0, -1);
                                k = 0;
                        }
                }
                if (r == 0 && k)
                        r = gs_conn_reclaim_send(m, gi, GS_RECLAIM_SLOTS, k, 0, -1);
                k = 0;
                /* Slots a move put in host memory: the new agent takes our
                 * word only for those its record has in a move. */
                for (uint32_t s = 0; s < g->max_slots && r == 0 && (gs_conn.features & GS_FEAT_HOST_SLOTS); s++) {
                        if (g->mapped[s] != GS_MAPPED_HOST)
                                continue;
                        m->item[k++] = s;
                        if (k == GS_RECLAIM_MAX_ITEMS) {
                                r = gs_conn_reclaim_send(m, gi, GS_RECLAIM_HOST, k, 0, -1);
                                k = 0;
                        }
                }
                if (r == 0 && k)
                        r = gs_conn_reclaim_send(m, gi, GS_RECLAIM_HOST, k, 0, -1);
                k = 0;
                for (size_t i = 0; i < g->blocks.cap && r == 0; i++) {
                        uint64_t off, size;
                        if (!gs_blocks_at(&g->blocks, i, &off, &size))
                                continue;
                        m->item[k++] = off;
                        m->item[k++] = size;
                        if (k == GS_RECLAIM_MAX_ITEMS) {
                                r = gs_conn_reclaim_send(m, gi, GS_RECLAIM_BLOCKS, k, 0, -1);
                                k = 0;
                        }
                }
                if (r == 0 && k)
                        r = gs_conn_reclaim_send(m, gi, GS_RECLAIM_BLOCKS, k, 0, -1);
                if (r == 0 && g_ipc_reclaim)
                        r = g_ipc_reclaim(gi, m);
                if (!g->blocks.broken)
                        complete |= 1u << gi;
        }
        for (uint32_t gi = 0; gi < gs_conn.ngpus; gi++)
                if (!gs_conn.gpus[gi].va_base)
                        complete |= 1u << gi; /* nothing there */
        if (r == 0)
                r = gs_conn_reclaim_send(m, 0, GS_RECLAIM_END, 0, complete, -1);
        free(m);
        if (r < 0) {
                *why = "cannot send the reclaim";
                return r;
        }
        union {
                struct gs_sock_error e;
                struct gs_sock_hdr h;
        } rep;
        struct pollfd pfd = { .fd = gs_conn.sock, .events = POLLIN };
        int fds[1];
        do
                r = poll(&pfd, 1, GS_WELCOME_TIMEOUT_MS);
        while (r < 0 && errno == EINTR);
        ssize_t n = r > 0 ? gs_msg_recv_fds(gs_conn.sock, &rep, sizeof(rep), fds, 1, MSG_DONTWAIT) : -ETIMEDOUT;
        if (n >= 0)
                gs_closep(&fds[0]);
        if (n >= 0 && gs_msg_hdr_ok(&rep.h, GS_SOCK_RECLAIM_DONE, sizeof(rep.e), n) && rep.e.err == 0)
                return 0;
        if (n >= 0 && gs_msg_hdr_ok(&rep.h, GS_SOCK_ERROR, sizeof(rep.e), n)) {
                rep.e.msg[sizeof(rep.e.msg) - 1] = '\0';
                gs_hook_say_once(GS_ONCE_RECLAIM, "the gshare agent at %s refused this process's reclaim: %s",
                                 gs_conn.sock_path, rep.e.msg);
                *why = "the agent refused to take our memory back";
                return -EPERM;
        }
        *why = "no answer to the reclaim";
        return n < 0 ? (int)n : -EPROTO;
}

/* pre: gs_conn.mu held.  A process never welcomed was refused for good:
 * why (an ERROR from the agent was said by gs_conn_open already). */
static void gs_conn_refused(const char *why)
{
        if (strcmp(why, "refused") != 0)
                gs_hook_say_once(GS_ONCE_AGENT,
                                 "cannot reach the gshare agent at %s (%s); "
                                 "GPU memory allocation is disabled for this process",
                                 gs_conn.sock_path, why);
        gs_conn_down();
}

/* Whether the directory of the agent's socket is gone: it does not exist,
 * or it was removed while mounted here (no links left).  The agent keeps
 * an allocation's directory across its restarts and removes it only when
 * the allocation is deleted: then no agent will ever answer there. */
static int gs_conn_dir_gone(void)
{
        char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
        const char *slash = strrchr(gs_conn.sock_path, '/');
        struct stat st;

        if (!slash)
                return 0; /* the working directory */
        if (slash == gs_conn.sock_path)
                return 0; /* "/" */
        if ((size_t)(slash - gs_conn.sock_path) >= sizeof(dir))
                return 0;
        memcpy(dir, gs_conn.sock_path, (size_t)(slash - gs_conn.sock_path));
        dir[slash - gs_conn.sock_path] = '\0';
        if (stat(dir, &st) < 0)
                return errno == ENOENT || errno == ENOTDIR;
        return st.st_nlink == 0;
}

/* pre: gs_conn.mu held, no connection.  Connects, HELLO (reclaim: with
 * GS_HELLO_RECLAIM), WELCOME, and for a reclaim the reclaim itself.
 * 0 when up; -EPERM when refused (for good: an ERROR, a protocol
 * violation, the socket's directory gone); another negative errno when no
 * agent answered (try again). */
static int gs_conn_open(int reclaim, const char **why)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct gs_sock_hello hello = { 0 };
        union {
                struct gs_sock_welcome w;
                struct gs_sock_error e;
                struct gs_sock_hdr h;
        } m;
        struct pollfd pfd;
        ssize_t n;
        int fds[2] = { -1, -1 }, r;

        if (strlen(gs_conn.sock_path) >= sizeof(sa.sun_path)) {
                *why = strerror(ENAMETOOLONG);
                return -EPERM;
        }
        strcpy(sa.sun_path, gs_conn.sock_path);
        gs_conn.sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (gs_conn.sock < 0 || connect(gs_conn.sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                r = gs_neg_errno();
                *why = strerror(-r);
                if (r == -ENOENT && gs_conn_dir_gone()) {
                        *why = "No such file or directory: its directory is gone (the allocation was deleted, "
                               "or its directory is not mounted here)";
                        r = -EPERM;
                }
                goto fail;
        }
        hello.h = (struct gs_sock_hdr){ GS_WIRE_MAGIC, GS_WIRE_VERSION, GS_SOCK_HELLO, sizeof(hello), 0 };
        hello.pid = (uint32_t)getpid();
        hello.flags = reclaim ? GS_HELLO_RECLAIM : 0;
        if (prctl(PR_GET_NAME, hello.comm) < 0)
                memset(hello.comm, 0, sizeof(hello.comm));
        /* An agent refusing this connection (its caps) sends ERROR and
         * closes, maybe before our HELLO: read the ERROR all the same. */
        if (send(gs_conn.sock, &hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello) && errno != EPIPE &&
            errno != ECONNRESET) {
                r = gs_neg_errno();
                *why = strerror(-r);
                goto fail;
        }
        pfd = (struct pollfd){ .fd = gs_conn.sock, .events = POLLIN };
        do
                r = poll(&pfd, 1, GS_WELCOME_TIMEOUT_MS);
        while (r < 0 && errno == EINTR);
        if (r == 0) {
                *why = "no welcome from the agent";
                r = -ETIMEDOUT;
                goto fail;
        }
        memset(&m, 0, sizeof(m));
        n = gs_msg_recv_fds(gs_conn.sock, &m, sizeof(m), fds, 2, MSG_DONTWAIT);
        if (n < 0) {
                r = (int)n;
                *why = strerror(-r);
                goto fail;
        }
        if (n == 0) {
                *why = "the agent closed the connection";
                r = -ECONNRESET;
                goto fail;
        }
        if (gs_msg_hdr_ok(&m.h, GS_SOCK_ERROR, sizeof(m.e), n)) {
                m.e.msg[sizeof(m.e.msg) - 1] = '\0';
                gs_hook_say_once(GS_ONCE_AGENT,
                                 "the gshare agent at %s refused this process: %s; "
                                 "GPU memory allocation is disabled for this process",
                                 gs_conn.sock_path, m.e.msg);
                *why = "refused";
                r = -EPERM;
                goto fail;
        }
        r = -EPERM;
        if (!gs_msg_hdr_ok(&m.h, GS_SOCK_WELCOME, sizeof(m.w), n) || fds[0] < 0 || fds[1] < 0) {
                *why = "unexpected reply to HELLO";
                goto fail;
        }
        r = gs_conn_welcome(&m.w, fds[0], reclaim, why);
        gs_closep(&fds[0]);
        if (r < 0) {
                r = -EPERM;
                goto fail;
        }
        gs_conn.wake = fds[1];
        fds[1] = -1;
        if (reclaim) {
                r = gs_reclaim(why);
                if (r < 0)
                        goto fail;
                gs_conn.reconnects++;
        }
        gs_conn.state = GS_CONN_UP;
        /* The hook's thread, waiting to try again, serves this connection;
         * a process that may borrow gets the gate armed before any chunk
         * is granted, and its mover (gs_hook_thread.c). */
        gs_conn_event(GS_CONN_EV_UP);
        return 0;
fail:
        gs_closep(&fds[0]);
        gs_closep(&fds[1]);
        gs_conn_close();
        return r;
}

static int gs_conn_reconnect(void);

/* pre: gs_conn.mu held, gs_conn.state == GS_CONN_NEW.  A first connection
 * that finds no agent answering (the agent restarts: no socket, refused,
 * no WELCOME yet) waits as a process that lost its agent does
 * (gs_conn_reconnect), and later calls try again. */
static int gs_conn_connect(void)
{
        const char *why = NULL, *w;
        int r;

        pthread_once(&g_atfork_once, gs_atfork_register);
        gs_conn.sock_path = secure_getenv("GSHARE_SOCKET");
        if (!gs_conn.sock_path || !*gs_conn.sock_path)
                gs_conn.sock_path = GS_DEFAULT_SOCKET;
        w = secure_getenv("GSHARE_AGENT_WAIT");
        gs_conn.wait_ns = (uint64_t)GS_AGENT_WAIT_S * 1000000000ull;
        if (w && *w) {
                char *end;
                double sec = strtod(w, &end);
                if (*end == '\0' && sec >= 0 && sec <= 86400)
                        gs_conn.wait_ns = (uint64_t)(sec * 1e9);
        }
        r = gs_conn_open(0, &why);
        if (r == 0)
                return 0;
        if (r == -EPERM) {
                gs_conn_refused(why);
                return -ECONNREFUSED;
        }
        gs_hook_say_once(GS_ONCE_WAIT,
                         "cannot reach the gshare agent at %s (%s); waiting up to %llu ms for it "
                         "(then memory calls fail, and each tries again)",
                         gs_conn.sock_path, why, (unsigned long long)(gs_conn.wait_ns / 1000000));
        gs_conn.state = GS_CONN_LOST;
        gs_conn.lost_ns = (uint64_t)gs_mono_ns();
        return gs_conn_reconnect() ? 0 : -ECONNREFUSED;
}

/* pre: gs_conn.mu held, gs_conn.state == GS_CONN_LOST.  One try: a
 * process that was welcomed before reclaims its memory, one that never
 * was registers.  1 when up; 0 when for good (DOWN, said once); -1 when
 * no agent answered. */
static int gs_conn_try(void)
{
        const char *why = NULL;
        int r = gs_conn_open(gs_conn.ngpus > 0, &why);

        if (r == 0) {
                gs_hook_debug("connected to the gshare agent at %s%s", gs_conn.sock_path,
                              gs_conn.reconnects ? "; memory reclaimed" : "");
                return 1;
        }
        if (r != -EPERM)
                return -1;
        if (gs_conn.ngpus > 0)
                gs_hook_say_once(GS_ONCE_RECLAIM,
                                 "the gshare agent at %s did not take this process's memory "
                                 "back (%s); GPU memory allocation is disabled for this process",
                                 gs_conn.sock_path, why);
        else
                gs_conn_refused(why);
        gs_conn_down();
        return 0;
}

int gs_conn_retry(void)
{
        return gs_conn.state == GS_CONN_LOST && gs_conn_try() == 1;
}

int gs_conn_hung_up(void)
{
        struct pollfd pfd = { .fd = gs_conn.sock, .events = POLLRDHUP };

        return gs_conn.state == GS_CONN_UP && gs_conn.sock >= 0 && poll(&pfd, 1, 0) > 0 &&
               (pfd.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL));
}

/* pre: gs_conn.mu held, gs_conn.state == GS_CONN_LOST.  Connects to the
 * new agent (and reclaims); while none answers, tries again until wait_ns
 * after the loss (after that, once per call).  Whether up. */
static int gs_conn_reconnect(void)
{
        uint64_t sleep_ns = 5000000;

        for (;;) {
                int r = gs_conn_try();
                if (r >= 0)
                        return r;
                uint64_t now = (uint64_t)gs_mono_ns();
                if (now - gs_conn.lost_ns >= gs_conn.wait_ns)
                        return 0;
                uint64_t left = gs_conn.wait_ns - (now - gs_conn.lost_ns);
                struct timespec ts;
                if (sleep_ns > left)
                        sleep_ns = left;
                ts.tv_sec = (time_t)(sleep_ns / 1000000000ull);
                ts.tv_nsec = (long)(sleep_ns % 1000000000ull);
                /* The lock stays held: this process's other memory calls
                 * wait for the agent too, as they must. */
                (void)nanosleep(&ts, NULL);
                if (sleep_ns < 100000000ull)
                        sleep_ns *= 2;
        }
}

/* pre: gs_conn.mu held.  Connects or reconnects as needed; whether up. */
static int gs_conn_upkeep(void)
{
        if (gs_conn.state == GS_CONN_NEW)
                (void)gs_conn_connect();
        else if (gs_conn.state == GS_CONN_LOST)
                (void)gs_conn_reconnect();
        return gs_conn.state == GS_CONN_UP;
}

int gs_conn_ensure(void)
{
        int r;

        pthread_mutex_lock(&gs_conn.mu);
        r = gs_conn_upkeep() ? 0 : -ENOTCONN;
        pthread_mutex_unlock(&gs_conn.mu);
        return r;
}

int gs_conn_up(void)
{
        return gs_conn_upkeep();
}

/* pre: gs_conn.mu held.  Connects if needed; the driver table or NULL. */
const struct gs_cu *gs_conn_ready(void)
{
        const struct gs_cu *cu = gs_cu_get();

        if (!cu)
                return NULL;
        return gs_conn_upkeep() ? cu : NULL;
}

/* ---- requests ------------------------------------------------------ */

/* pre: gs_conn.mu held, connected.  Sends one request and waits for its reply.
 * Returns 0 with *ret filled (ret->status is the agent's verdict), or a
 * negative errno after which the connection is gone. */
/* Requests that only give something back: after the agent went away they
 * are done (what the process no longer holds is not reclaimed), and never
 * wait for a new agent.  GS_OP_SPILL_DONE answers the agent that went
 * away: a new one never asked for that move. */
static int gs_op_gives_back(uint32_t op)
{
        return op == GS_OP_FREE || op == GS_OP_RELEASE || op == GS_OP_VMM_RELEASE || op == GS_OP_CTX_DONE ||
               op == GS_OP_SPILL_DONE;
}

/* pre: gs_conn.mu held.  The transport failed during a call: LOST, and
 * the request is either done (give-backs) or sent again to a new agent.
 * 1 to send again, 0 with *ret a success, or a negative errno. */
static int gs_conn_call_lost(uint32_t op, const char *why, struct gs_ring_msg *ret, int tries)
{
        gs_conn_broken(why);
        if (gs_op_gives_back(op)) {
                memset(ret, 0, sizeof(*ret));
                ret->op = op;
                return 0;
        }
        if (!t_no_wait && tries < 3 && gs_conn.state == GS_CONN_LOST && gs_conn_reconnect())
                return 1;
        return -ECONNRESET;
}

int gs_conn_call_during(uint32_t op, uint32_t gpu, uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3,
                        struct gs_ring_msg *ret, void (*during)(void *), void *data)
{
        struct gs_ring_msg m = { 0 };
        uint64_t start, now;
        int r, tries = 0;

again:
        start = (uint64_t)gs_mono_ns();
        m.seq = ++gs_conn.seq;
        m.op = op;
        m.gpu = gpu;
        m.arg[0] = a0;
        m.arg[1] = a1;
        m.arg[2] = a2;
        m.arg[3] = a3;
        r = gs_ring_push(&gs_conn.shm->req, &gs_conn.req_head, &m);
        if (r < 0) {
                /* One request outstanding: a full ring means a broken peer. */
                gs_conn_lost("request ring full or corrupt");
                return -EPROTO;
        }
        gs_doorbell_ring_fd(&gs_conn.shm->agent_wake, &gs_conn.shm->agent_sleeping, gs_conn.wake);
        if (during)
                during(data);
        during = NULL; /* once, not again after a reconnection */
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
                        r = gs_conn_call_lost(op, "no reply within 60 s", ret, ++tries);
                        if (r == 1)
                                goto again;
                        return r;
                }
                /* An agent that closed the connection (an upgrade hands us
                 * over, a stop) before we went to sleep wakes no one: look
                 * before sleeping, not a slice later. */
                {
                        struct pollfd hp = { .fd = gs_conn.sock, .events = POLLRDHUP };
                        if (poll(&hp, 1, 0) > 0 && (hp.revents & (POLLHUP | POLLRDHUP | POLLERR)) &&
                            !gs_ring_ready(&gs_conn.shm->rep, gs_conn.rep_tail)) {
                                r = gs_conn_call_lost(op, "the agent closed the connection", ret, ++tries);
                                if (r == 1)
                                        goto again;
                                return r;
                        }
                }
                r = gs_doorbell_sleep(&gs_conn.shm->rep, gs_conn.rep_tail, &gs_conn.shm->hook_wake,
                                      &gs_conn.shm->hook_sleeping, GS_SLEEP_SLICE_NS);
                if (r == -ETIMEDOUT || r == 0) {
                        struct pollfd pfd = { .fd = gs_conn.sock, .events = POLLRDHUP };
                        if (!gs_ring_ready(&gs_conn.shm->rep, gs_conn.rep_tail) && poll(&pfd, 1, 0) > 0 &&
                            (pfd.revents & (POLLHUP | POLLRDHUP | POLLERR))) {
                                r = gs_conn_call_lost(op, "the agent closed the connection", ret, ++tries);
                                if (r == 1)
                                        goto again;
                                return r;
                        }
                        /* Still no reply after a whole slice: ring again, so
                         * that a wake-up lost anywhere costs one slice, not
                         * the request. */
                        if (r == -ETIMEDOUT && gs_conn.wake >= 0 &&
                            !gs_ring_ready(&gs_conn.shm->rep, gs_conn.rep_tail)) {
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
