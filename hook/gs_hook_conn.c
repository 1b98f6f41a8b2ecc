/* gs_hook_conn.c — the hook's side of gs_wire.h.
 *
 * One connection per process, guarded by g_mu: one request outstanding at a
 * time, so replies come back in order and app threads are safe.  Whatever
 * the agent sends is checked before use; a violation drops the connection
 * and memory calls fail closed from then on (never the real allocator). */
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
#include <time.h>
#include <unistd.h>

#include "gs_hook.h"
#include "gs_ring.h"
#include "gs_wire.h"

#define GS_DEFAULT_SOCKET "/var/run/gshare/agent.sock"
#define GS_SPIN_NS 30000ull                 /* spin this long before sleeping */
#define GS_SLEEP_SLICE_NS 50000000ull       /* re-check the socket this often */
#define GS_REPLY_TIMEOUT_NS 60000000000ull  /* give up on a silent agent */
#define GS_WELCOME_TIMEOUT_MS 10000
#define GS_MAX_VA (UINT64_C(1) << 47)
#define GS_MAX_DEVICES 64

struct gs_gpu {
        uint8_t uuid[16];
        uint64_t quota, chunk;
        uint32_t max_slots;
        CUdeviceptr va_base;   /* 0 until reserved */
        uint8_t *mapped;       /* max_slots flags */
        int ctx_charged;       /* GS_OP_CTX done for this process */
        int ctx_done;          /* and GS_OP_CTX_DONE sent */
};

enum { GS_CONN_NEW = 0, GS_CONN_UP = 1, GS_CONN_DOWN = 2 };

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_state = GS_CONN_NEW;
static int g_sock = -1;
static int g_wake = -1;          /* the agent's doorbell (eventfd of WELCOME) */
static struct gs_shm *g_shm;
static uint32_t g_req_head, g_rep_tail;
static uint64_t g_seq;
static uint32_t g_ngpus;
static struct gs_gpu g_gpus[GS_MAX_GPUS_PER_ALLOC];
/* CUdevice -> index into g_gpus; -1: not in the allocation; -2: unknown. */
static int g_devmap[GS_MAX_DEVICES];
static const char *g_sock_path;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
/* The application's VMM handles that the agent made: handle -> id. */
struct gs_vmm_ent {
        CUmemGenericAllocationHandle h;
        uint64_t id;
        uint32_t gpu;
        int fd;        /* the agent's fd, kept: an imported handle cannot be
                          exported again, so cuMemExportToShareableHandle
                          hands out duplicates of this */
};
static struct gs_vmm_ent *g_vmm;
static size_t g_nvmm, g_capvmm;
/* Blocks of other processes opened with cuIpcOpenMemHandle. */
struct gs_ipc_ent {
        uint64_t token[2];
        CUdeviceptr va;        /* our reservation: nchunks * chunk */
        uint32_t nchunks, refs;
        uint64_t chunk;
        CUdeviceptr ptr;       /* the block, as handed to the application */
        uint64_t size;
};
static struct gs_ipc_ent *g_ipc;
static size_t g_nipc, g_capipc;

static uint64_t gs_now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* pre: g_mu held.  Forgets the connection (the agent reclaims our memory
 * when we exit; chunks still mapped stay usable until freed). */
static void gs_conn_drop(void)
{
        gs_closep(&g_sock);
        gs_closep(&g_wake);
        if (g_shm)
                munmap(g_shm, sizeof(*g_shm));
        g_shm = NULL;
        g_state = GS_CONN_DOWN;
}

/* pre: g_mu held. */
static void gs_conn_lost(const char *why)
{
        gs_hook_say_once(GS_ONCE_AGENT, "lost the connection to the gshare agent at %s (%s); "
                         "GPU memory allocation is disabled for this process", g_sock_path, why);
        gs_conn_drop();
}

/* ---- fork ---------------------------------------------------------- */

static void gs_atfork_prepare(void) { pthread_mutex_lock(&g_mu); }
static void gs_atfork_parent(void) { pthread_mutex_unlock(&g_mu); }

/* The child is a new process for the agent: drop the parent's connection
 * (without telling the agent anything: the socket is the parent's too) and
 * register again at the next call.  Its copy of the parent's mappings is
 * left alone; it reserves fresh ranges. */
static void gs_atfork_child(void)
{
        pthread_mutex_init(&g_mu, NULL);
        gs_closep(&g_sock);
        gs_closep(&g_wake);
        if (g_shm)
                munmap(g_shm, sizeof(*g_shm));
        g_shm = NULL;
        for (uint32_t i = 0; i < g_ngpus; i++) {
                free(g_gpus[i].mapped);
                g_gpus[i].mapped = NULL;
                g_gpus[i].va_base = 0;
                g_gpus[i].ctx_charged = 0;
                g_gpus[i].ctx_done = 0;
        }
        g_ngpus = 0;
        /* The parent's VMM allocations are the parent's to release. */
        for (size_t i = 0; i < g_nvmm; i++)
                close(g_vmm[i].fd);
        free(g_vmm);
        g_vmm = NULL;
        g_nvmm = g_capvmm = 0;
        /* The parent's opened IPC blocks are the parent's to close. */
        free(g_ipc);
        g_ipc = NULL;
        g_nipc = g_capipc = 0;
        g_state = GS_CONN_NEW;
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

/* One message and at most one fd (*ret_fd, -1 if none). */
static ssize_t gs_recv_fd(int sock, void *buf, size_t len, int *ret_fd, int flags)
{
        return gs_recv_fds(sock, buf, len, ret_fd, 1, flags);
}

static int gs_hdr_ok(const struct gs_sock_hdr *h, uint16_t type, size_t len, ssize_t got)
{
        return got == (ssize_t)len && h->magic == GS_WIRE_MAGIC && h->version == GS_WIRE_VERSION &&
               h->type == type && h->len == len;
}

/* pre: g_mu held.  Validates the welcome and maps the segment. */
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
        g_shm = s;
        g_req_head = __atomic_load_n(&s->req.head, __ATOMIC_ACQUIRE);
        g_rep_tail = __atomic_load_n(&s->rep.tail, __ATOMIC_ACQUIRE);
        g_ngpus = w->ngpus;
        for (uint32_t i = 0; i < w->ngpus; i++) {
                memset(&g_gpus[i], 0, sizeof(g_gpus[i]));
                memcpy(g_gpus[i].uuid, w->gpus[i].uuid, 16);
                g_gpus[i].quota = w->gpus[i].quota_bytes;
                g_gpus[i].chunk = w->gpus[i].chunk_bytes;
                g_gpus[i].max_slots = w->gpus[i].max_slots;
        }
        for (int d = 0; d < GS_MAX_DEVICES; d++)
                g_devmap[d] = -2;
        gs_hook_debug("registered with the agent at %s: process %llu, %u GPU(s)", g_sock_path,
                      (unsigned long long)w->proc_id, w->ngpus);
        return 0;
}

/* pre: g_mu held, g_state == GS_CONN_NEW. */
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
        g_sock_path = secure_getenv("GSHARE_SOCKET");
        if (!g_sock_path || !*g_sock_path)
                g_sock_path = GS_DEFAULT_SOCKET;
        if (strlen(g_sock_path) >= sizeof(sa.sun_path)) {
                errno = ENAMETOOLONG;
                goto fail_errno;
        }
        strcpy(sa.sun_path, g_sock_path);
        g_sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (g_sock < 0 || connect(g_sock, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                goto fail_errno;
        hello.h = (struct gs_sock_hdr){ GS_WIRE_MAGIC, GS_WIRE_VERSION, GS_SOCK_HELLO, sizeof(hello), 0 };
        hello.pid = (uint32_t)getpid();
        if (prctl(PR_GET_NAME, hello.comm) < 0)
                memset(hello.comm, 0, sizeof(hello.comm));
        /* An agent refusing this connection (its caps) sends ERROR and
         * closes, maybe before our HELLO: read the ERROR all the same. */
        if (send(g_sock, &hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello) &&
            errno != EPIPE && errno != ECONNRESET)
                goto fail_errno;
        pfd = (struct pollfd){ .fd = g_sock, .events = POLLIN };
        do
                r = poll(&pfd, 1, GS_WELCOME_TIMEOUT_MS);
        while (r < 0 && errno == EINTR);
        if (r == 0) {
                why = "no welcome from the agent";
                goto fail;
        }
        memset(&m, 0, sizeof(m));
        n = gs_recv_fds(g_sock, &m, sizeof(m), fds, 2, MSG_DONTWAIT);
        if (n < 0) {
                errno = (int)-n;
                goto fail_errno;
        }
        if (gs_hdr_ok(&m.h, GS_SOCK_ERROR, sizeof(m.e), n)) {
                m.e.msg[sizeof(m.e.msg) - 1] = '\0';
                gs_hook_say_once(GS_ONCE_AGENT, "the gshare agent at %s refused this process: %s; "
                                 "GPU memory allocation is disabled for this process", g_sock_path, m.e.msg);
                gs_closep(&fds[0]);
                gs_closep(&fds[1]);
                gs_conn_drop();
                return -EPERM;
        }
        if (!gs_hdr_ok(&m.h, GS_SOCK_WELCOME, sizeof(m.w), n) || fds[0] < 0 || fds[1] < 0) {
                why = "unexpected reply to HELLO";
                goto fail;
        }
        r = gs_conn_welcome(&m.w, fds[0], &why);
        gs_closep(&fds[0]);
        if (r < 0)
                goto fail;
        g_wake = fds[1];
        g_state = GS_CONN_UP;
        return 0;
fail_errno:
        why = strerror(errno);
fail:
        gs_closep(&fds[0]);
        gs_closep(&fds[1]);
        gs_hook_say_once(GS_ONCE_AGENT, "cannot reach the gshare agent at %s (%s); "
                         "GPU memory allocation is disabled for this process", g_sock_path, why);
        gs_conn_drop();
        return -ECONNREFUSED;
}

int gs_conn_ensure(void)
{
        int r;

        pthread_mutex_lock(&g_mu);
        if (g_state == GS_CONN_NEW)
                (void)gs_conn_connect();
        r = g_state == GS_CONN_UP ? 0 : -ENOTCONN;
        pthread_mutex_unlock(&g_mu);
        return r;
}

/* ---- requests ------------------------------------------------------ */

/* pre: g_mu held, connected.  Sends one request and waits for its reply.
 * Returns 0 with *ret filled (ret->status is the agent's verdict), or a
 * negative errno after which the connection is gone. */
static int gs_call(uint32_t op, uint32_t gpu, uint64_t a0, uint64_t a1, struct gs_ring_msg *ret)
{
        struct gs_ring_msg m = { 0 };
        uint64_t start = gs_now_ns(), now;
        int r;

        m.seq = ++g_seq;
        m.op = op;
        m.gpu = gpu;
        m.arg[0] = a0;
        m.arg[1] = a1;
        r = gs_ring_push(&g_shm->req, &g_req_head, &m);
        if (r < 0) {
                /* One request outstanding: a full ring means a broken peer. */
                gs_conn_lost("request ring full or corrupt");
                return -EPROTO;
        }
        gs_doorbell_ring_fd(&g_shm->agent_wake, &g_shm->agent_sleeping, g_wake);
        for (;;) {
                r = gs_ring_pop(&g_shm->rep, &g_rep_tail, ret);
                if (r < 0) {
                        gs_conn_lost("reply ring corrupt");
                        return r;
                }
                if (r == 1)
                        break;
                now = gs_now_ns();
                if (now - start < GS_SPIN_NS) {
#if defined(__x86_64__) || defined(__i386__)
                        __builtin_ia32_pause();
#endif
                        continue;
                }
                if (now - start > GS_REPLY_TIMEOUT_NS) {
                        gs_conn_lost("no reply within 60 s");
                        return -ETIMEDOUT;
                }
                r = gs_doorbell_sleep(&g_shm->rep, g_rep_tail, &g_shm->hook_wake, &g_shm->hook_sleeping,
                                      GS_SLEEP_SLICE_NS);
                if (r == -ETIMEDOUT || r == 0) {
                        struct pollfd pfd = { .fd = g_sock, .events = POLLRDHUP };
                        if (!gs_ring_ready(&g_shm->rep, g_rep_tail) && poll(&pfd, 1, 0) > 0 &&
                            (pfd.revents & (POLLHUP | POLLRDHUP | POLLERR))) {
                                gs_conn_lost("the agent closed the connection");
                                return -ECONNRESET;
                        }
                        /* Still no reply after a whole slice: ring again, so
                         * that a wake-up lost anywhere costs one slice, not
                         * the request. */
                        if (r == -ETIMEDOUT && g_wake >= 0 && !gs_ring_ready(&g_shm->rep, g_rep_tail)) {
                                uint64_t one = 1;
                                if (write(g_wake, &one, sizeof(one)) < 0) {
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

/* pre: g_mu held.  The g_gpus index of the current context's device, or a
 * negative errno (-ENODEV: the device is not in the allocation). */
static int gs_dev_gpu(const struct gs_cu *cu, CUdevice dev)
{
        CUuuid u;

        if (dev < 0 || dev >= GS_MAX_DEVICES)
                return -ENODEV;
        if (g_devmap[dev] == -2) {
                g_devmap[dev] = -1;
                if (cu->cuDeviceGetUuid_v2 && cu->cuDeviceGetUuid_v2(&u, dev) == CUDA_SUCCESS)
                        for (uint32_t i = 0; i < g_ngpus; i++)
                                if (!memcmp(g_gpus[i].uuid, u.bytes, 16))
                                        g_devmap[dev] = (int)i;
        }
        return g_devmap[dev] >= 0 ? g_devmap[dev] : -ENODEV;
}

/* pre: g_mu held.  The same for the current context's device. */
static int gs_cur_gpu(const struct gs_cu *cu, CUdevice *ret_dev)
{
        CUdevice dev = -1;

        if (!cu->cuCtxGetDevice || cu->cuCtxGetDevice(&dev) != CUDA_SUCCESS)
                return -EBADR; /* no current context */
        *ret_dev = dev;
        return gs_dev_gpu(cu, dev);
}

/* pre: g_mu held.  Reserves the GPU's range on first use. */
static CUresult gs_reserve(const struct gs_cu *cu, struct gs_gpu *g)
{
        CUdeviceptr va = 0;
        CUresult r;

        if (g->va_base)
                return CUDA_SUCCESS;
        if (!cu->cuMemAddressReserve)
                return CUDA_ERROR_NOT_SUPPORTED;
        g->mapped = calloc(g->max_slots, 1);
        if (!g->mapped)
                return CUDA_ERROR_OUT_OF_MEMORY;
        r = cu->cuMemAddressReserve(&va, (size_t)g->chunk * g->max_slots, g->chunk, 0, 0);
        if (r != CUDA_SUCCESS || !va) {
                free(g->mapped);
                g->mapped = NULL;
                return r != CUDA_SUCCESS ? r : CUDA_ERROR_OUT_OF_MEMORY;
        }
        g->va_base = va;
        return CUDA_SUCCESS;
}

/* Imports a chunk's fd and maps it read-write for dev at [at, at + size).
 * Closes fd.  0, or -EIO with nothing left mapped. */
static int gs_dev_gpu(const struct gs_cu *cu, CUdevice dev);

/* Read-write access to [at, at+size) for dev, whose memory it is, and for
 * every other device of this allocation that can reach dev's memory (peer
 * access: cudaMemcpyPeer, t.to("cuda:1"), a kernel on one GPU reading the
 * other's memory work on gshare memory as natively).  Devices outside the
 * allocation get nothing.  One call may span several mappings, which is
 * what makes a k-chunk grant cheap.  pre: g_mu held. */
static int gs_set_access(const struct gs_cu *cu, CUdeviceptr at, size_t size, CUdevice dev)
{
        CUmemAccessDesc acc[GS_MAX_GPUS_PER_ALLOC];
        size_t n = 0;
        int count = 0;

        acc[n++] = (CUmemAccessDesc){ { CU_MEM_LOCATION_TYPE_DEVICE, dev }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        if (g_ngpus > 1 && cu->cuDeviceGetCount && cu->cuDeviceCanAccessPeer &&
            cu->cuDeviceGetCount(&count) == CUDA_SUCCESS)
                for (CUdevice d = 0; d < count && d < GS_MAX_DEVICES && n < GS_ARRAY_SIZE(acc); d++) {
                        int can = 0;
                        if (d == dev || gs_dev_gpu(cu, d) < 0 ||
                            cu->cuDeviceCanAccessPeer(&can, d, dev) != CUDA_SUCCESS || !can)
                                continue;
                        acc[n++] = (CUmemAccessDesc){ { CU_MEM_LOCATION_TYPE_DEVICE, d },
                                                      CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
                }
        return cu->cuMemSetAccess(at, size, acc, n) == CUDA_SUCCESS ? 0 : -EIO;
}

/* Imports fd and maps it at `at`; access is set too unless the caller sets
 * it for a larger range afterwards (access = 0).  Closes fd. */
static int gs_map_fd_access(const struct gs_cu *cu, CUdeviceptr at, size_t size, CUdevice dev, int fd,
                            int access)
{
        CUmemGenericAllocationHandle h;
        int r = -EIO;

        if (!cu->cuMemImportFromShareableHandle || !cu->cuMemMap || !cu->cuMemSetAccess || !cu->cuMemRelease ||
            !cu->cuMemUnmap)
                goto out;
        if (cu->cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) !=
            CUDA_SUCCESS)
                goto out;
        if (cu->cuMemMap(at, size, 0, h, 0) != CUDA_SUCCESS) {
                (void)cu->cuMemRelease(h);
                goto out;
        }
        /* The mapping keeps the memory; our handle is not needed. */
        (void)cu->cuMemRelease(h);
        if (access && gs_set_access(cu, at, size, dev) < 0) {
                (void)cu->cuMemUnmap(at, size);
                goto out;
        }
        r = 0;
out:
        close(fd);
        return r;
}

static int gs_map_fd(const struct gs_cu *cu, CUdeviceptr at, size_t size, CUdevice dev, int fd)
{
        return gs_map_fd_access(cu, at, size, dev, fd, 1);
}

/* pre: g_mu held.  Imports and maps one granted chunk at its slot, without
 * access (gs_take_grants sets it per run of slots).  Closes fd. */
static int gs_map_grant(const struct gs_cu *cu, struct gs_gpu *g, CUdevice dev, uint32_t slot, int fd)
{
        int r = gs_map_fd_access(cu, g->va_base + (CUdeviceptr)slot * g->chunk, g->chunk, dev, fd, 0);

        if (r == 0)
                g->mapped[slot] = 1;
        return r;
}

/* pre: g_mu held.  Access for the slots mapped by one grant, one call per run
 * of consecutive slots (a coalesced block is one run).  On failure every
 * slot of the grant is unmapped again. */
static int gs_grant_access(const struct gs_cu *cu, struct gs_gpu *g, CUdevice dev, const uint32_t *slots,
                           uint32_t n)
{
        uint32_t i = 0;

        while (i < n) {
                uint32_t j = i + 1;
                while (j < n && slots[j] == slots[j - 1] + 1)
                        j++;
                if (gs_set_access(cu, g->va_base + (CUdeviceptr)slots[i] * g->chunk,
                                  (size_t)(j - i) * g->chunk, dev) < 0) {
                        for (uint32_t k = 0; k < n; k++) {
                                (void)cu->cuMemUnmap(g->va_base + (CUdeviceptr)slots[k] * g->chunk, g->chunk);
                                g->mapped[slots[k]] = 0;
                        }
                        return -EIO;
                }
                i = j;
        }
        return 0;
}

/* pre: g_mu held.  Reads and maps the k grants that precede an ALLOC reply.
 * Every fd received is closed, whatever happens. */
static int gs_take_grants(const struct gs_cu *cu, uint32_t gi, CUdevice dev, uint64_t seq, uint64_t k,
                          const char **why)
{
        struct gs_gpu *g = &g_gpus[gi];
        uint32_t slots[64], nslots = 0;
        int r = 0;

        for (uint64_t i = 0; i < k; i++) {
                struct gs_sock_grant gr;
                int fd;
                ssize_t n = gs_recv_fd(g_sock, &gr, sizeof(gr), &fd, MSG_DONTWAIT);

                if (n < 0) {
                        *why = "a promised chunk grant did not arrive";
                        return -EPROTO;
                }
                if (r < 0) {
                        gs_closep(&fd);
                        continue;
                }
                if (!gs_hdr_ok(&gr.h, GS_SOCK_GRANT, sizeof(gr), n) || fd < 0 || gr.seq != seq || gr.gpu != gi ||
                    gr.slot >= g->max_slots || gr.chunk_bytes != g->chunk || g->mapped[gr.slot]) {
                        gs_closep(&fd);
                        *why = "malformed chunk grant";
                        r = -EPROTO;
                        continue;
                }
                if (gs_map_grant(cu, g, dev, gr.slot, fd) < 0) {
                        *why = "cannot map a granted chunk";
                        r = -EIO;
                        continue;
                }
                slots[nslots++] = gr.slot;
                if (nslots == GS_ARRAY_SIZE(slots) && gs_grant_access(cu, g, dev, slots, nslots) < 0) {
                        *why = "cannot set access to granted chunks";
                        r = -EIO;
                }
                if (nslots == GS_ARRAY_SIZE(slots))
                        nslots = 0;
        }
        /* Also after a failure: what is mapped is usable, as the agent
         * counts it held. */
        if (nslots && gs_grant_access(cu, g, dev, slots, nslots) < 0 && r == 0) {
                *why = "cannot set access to granted chunks";
                r = -EIO;
        }
        return r;
}

static CUresult gs_status_cu(int32_t st)
{
        switch (st) {
        case 0: return CUDA_SUCCESS;
        case -ENOMEM: return CUDA_ERROR_OUT_OF_MEMORY;
        case -ENOENT:
        case -EINVAL: return CUDA_ERROR_INVALID_VALUE;
        case -EOPNOTSUPP: return CUDA_ERROR_NOT_SUPPORTED;
        default: return CUDA_ERROR_UNKNOWN;
        }
}

/* pre: g_mu held.  Connects if needed; the driver table or NULL. */
static const struct gs_cu *gs_ready(void)
{
        const struct gs_cu *cu = gs_cu_get();

        if (!cu)
                return NULL;
        if (g_state == GS_CONN_NEW)
                (void)gs_conn_connect();
        return g_state == GS_CONN_UP ? cu : NULL;
}

/* pre: g_mu held. */
static CUresult gs_gpu_err(int gi, CUdevice dev)
{
        if (gi == -EBADR)
                return CUDA_ERROR_INVALID_CONTEXT;
        gs_hook_say_once(GS_ONCE_DEVICE, "CUDA device %d is not part of this container's gshare allocation; "
                         "memory allocation on it is refused", dev);
        return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult gs_conn_alloc(CUdeviceptr *ret_ptr, size_t size)
{
        const struct gs_cu *cu;
        struct gs_ring_msg rep;
        struct gs_gpu *g;
        const char *why = NULL;
        CUdevice dev = -1;
        CUresult res;
        int gi;

        if (!ret_ptr || size == 0)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&g_mu);
        cu = gs_ready();
        if (!cu) {
                res = CUDA_ERROR_OUT_OF_MEMORY;
                goto out;
        }
        gi = gs_cur_gpu(cu, &dev);
        if (gi < 0) {
                res = gs_gpu_err(gi, dev);
                goto out;
        }
        g = &g_gpus[gi];
        if (size > (uint64_t)g->chunk * g->max_slots) {
                res = CUDA_ERROR_OUT_OF_MEMORY;
                goto out;
        }
        res = gs_reserve(cu, g);
        if (res != CUDA_SUCCESS)
                goto out;
        if (gs_call(GS_OP_ALLOC, (uint32_t)gi, size, 0, &rep) < 0) {
                res = CUDA_ERROR_OUT_OF_MEMORY;
                goto out;
        }
        if (rep.arg[1] > GS_MAX_GRANTS_PER_REPLY || rep.arg[1] > g->max_slots) {
                gs_conn_lost("too many chunk grants in one reply");
                res = CUDA_ERROR_OUT_OF_MEMORY;
                goto out;
        }
        if (gs_take_grants(cu, (uint32_t)gi, dev, rep.seq, rep.arg[1], &why) < 0) {
                gs_conn_lost(why);
                res = CUDA_ERROR_OUT_OF_MEMORY;
                goto out;
        }
        if (rep.status != 0) {
                res = gs_status_cu(rep.status);
                goto out;
        }
        /* The block must lie in chunks we have mapped. */
        uint64_t off = rep.arg[0], span = (uint64_t)g->chunk * g->max_slots;
        if (off % GS_MIN_ALIGN || off >= span || size > span - off) {
                gs_conn_lost("the agent returned an offset outside our range");
                res = CUDA_ERROR_OUT_OF_MEMORY;
                goto out;
        }
        for (uint64_t s = off / g->chunk; s <= (off + size - 1) / g->chunk; s++)
                if (!g->mapped[s]) {
                        gs_conn_lost("the agent returned an offset in an unmapped chunk");
                        res = CUDA_ERROR_OUT_OF_MEMORY;
                        goto out;
                }
        *ret_ptr = g->va_base + off;
        res = CUDA_SUCCESS;
out:
        pthread_mutex_unlock(&g_mu);
        return res;
}

/* pre: g_mu held.  The GPU whose range holds ptr, or -1. */
static int gs_owner(CUdeviceptr ptr)
{
        for (uint32_t i = 0; i < g_ngpus; i++) {
                struct gs_gpu *g = &g_gpus[i];
                if (g->va_base && ptr >= g->va_base && ptr - g->va_base < (uint64_t)g->chunk * g->max_slots)
                        return (int)i;
        }
        return -1;
}

int gs_conn_owns(CUdeviceptr ptr)
{
        int r;

        pthread_mutex_lock(&g_mu);
        r = gs_owner(ptr) >= 0;
        pthread_mutex_unlock(&g_mu);
        return r;
}

CUresult gs_conn_free(CUdeviceptr ptr)
{
        const struct gs_cu *cu = gs_cu_get();
        struct gs_ring_msg rep, rel;
        struct gs_gpu *g;
        CUresult res;
        int gi;

        pthread_mutex_lock(&g_mu);
        gi = gs_owner(ptr);
        if (gi < 0) {
                res = CUDA_ERROR_INVALID_VALUE;
                goto out;
        }
        if (g_state != GS_CONN_UP || !cu) {
                /* Lost agent: nothing to give back to; the memory returns
                 * when the process exits. */
                res = CUDA_SUCCESS;
                goto out;
        }
        g = &g_gpus[gi];
        if (gs_call(GS_OP_FREE, (uint32_t)gi, ptr - g->va_base, 0, &rep) < 0) {
                res = CUDA_SUCCESS;
                goto out;
        }
        res = gs_status_cu(rep.status);
        if (res != CUDA_SUCCESS || rep.arg[1] == 0)
                goto out;
        uint64_t first = rep.arg[0], count = rep.arg[1];
        if (first >= g->max_slots || count > g->max_slots - first) {
                gs_conn_lost("the agent asked to release slots outside our range");
                goto out;
        }
        for (uint64_t s = first; s < first + count; s++) {
                if (!g->mapped[s])
                        continue;
                if (cu->cuMemUnmap && cu->cuMemUnmap(g->va_base + s * g->chunk, g->chunk) == CUDA_SUCCESS) {
                        g->mapped[s] = 0;
                } else {
                        /* Still mapped here: the chunk must not go back. */
                        gs_conn_lost("cannot unmap a released chunk");
                        goto out;
                }
        }
        if (gs_call(GS_OP_RELEASE, (uint32_t)gi, first, count, &rel) == 0 && rel.status != 0)
                gs_hook_debug("the agent refused RELEASE of slots %llu+%llu: %d", (unsigned long long)first,
                              (unsigned long long)count, rel.status);
out:
        pthread_mutex_unlock(&g_mu);
        return res;
}

CUresult gs_conn_range(CUdeviceptr ptr, CUdeviceptr *ret_base, size_t *ret_size)
{
        struct gs_ring_msg rep;
        CUresult res;
        int gi;

        pthread_mutex_lock(&g_mu);
        gi = gs_owner(ptr);
        if (gi < 0 || g_state != GS_CONN_UP) {
                res = CUDA_ERROR_NOT_FOUND;
                goto out;
        }
        if (gs_call(GS_OP_RANGE, (uint32_t)gi, ptr - g_gpus[gi].va_base, 0, &rep) < 0) {
                res = CUDA_ERROR_NOT_FOUND;
                goto out;
        }
        if (rep.status != 0) {
                res = CUDA_ERROR_NOT_FOUND;
                goto out;
        }
        uint64_t span = (uint64_t)g_gpus[gi].chunk * g_gpus[gi].max_slots;
        if (rep.arg[0] >= span || rep.arg[1] > span - rep.arg[0]) {
                gs_conn_lost("the agent returned a range outside our range");
                res = CUDA_ERROR_NOT_FOUND;
                goto out;
        }
        if (ret_base)
                *ret_base = g_gpus[gi].va_base + rep.arg[0];
        if (ret_size)
                *ret_size = rep.arg[1];
        res = CUDA_SUCCESS;
out:
        pthread_mutex_unlock(&g_mu);
        return res;
}

CUresult gs_conn_meminfo(size_t *ret_free, size_t *ret_total)
{
        const struct gs_cu *cu;
        struct gs_ring_msg rep;
        CUdevice dev = -1;
        CUresult res = CUDA_ERROR_OUT_OF_MEMORY;
        int gi;

        if (!ret_free || !ret_total)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&g_mu);
        cu = gs_ready();
        if (!cu)
                goto out;
        gi = gs_cur_gpu(cu, &dev);
        if (gi == -EBADR) {
                res = CUDA_ERROR_INVALID_CONTEXT;
                goto out;
        }
        if (gi < 0) {
                /* Not ours: nothing can be allocated there. */
                *ret_free = 0;
                *ret_total = 0;
                res = CUDA_SUCCESS;
                goto out;
        }
        if (gs_call(GS_OP_MEMINFO, (uint32_t)gi, 0, 0, &rep) < 0 || rep.status != 0)
                goto out;
        *ret_total = rep.arg[1];
        *ret_free = rep.arg[0] > rep.arg[1] ? rep.arg[1] : rep.arg[0];
        res = CUDA_SUCCESS;
out:
        pthread_mutex_unlock(&g_mu);
        return res;
}

CUresult gs_conn_ctx(CUdevice dev)
{
        const struct gs_cu *cu;
        struct gs_ring_msg rep;
        CUresult res = CUDA_ERROR_OUT_OF_MEMORY;
        int gi;

        pthread_mutex_lock(&g_mu);
        cu = gs_ready();
        if (!cu) {
                /* No agent: memory calls fail closed (and say so); the
                 * context itself is no way around that, and a process
                 * that wanted one could bypass the hook anyway. */
                res = CUDA_SUCCESS;
                goto out;
        }
        gi = gs_dev_gpu(cu, dev);
        if (gi < 0 || g_gpus[gi].ctx_charged) {
                /* Not ours (memory calls on it are refused), or done. */
                res = CUDA_SUCCESS;
                goto out;
        }
        if (gs_call(GS_OP_CTX, (uint32_t)gi, 0, 0, &rep) < 0)
                goto out;
        if (rep.status == 0) {
                g_gpus[gi].ctx_charged = 1;
                res = CUDA_SUCCESS;
                goto out;
        }
        gs_hook_say_once(GS_ONCE_CTX, "no room for a CUDA context on device %d: gshare allocation %016llx "
                         "uses %llu of %llu MiB (%llu MiB of it outside the pool: contexts, modules); "
                         "CUDA_ERROR_OUT_OF_MEMORY", dev, (unsigned long long)rep.arg[3],
                         (unsigned long long)(rep.arg[1] >> 20), (unsigned long long)(rep.arg[0] >> 20),
                         (unsigned long long)(rep.arg[2] >> 20));
        res = rep.status == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : gs_status_cu(rep.status);
out:
        pthread_mutex_unlock(&g_mu);
        return res;
}

void gs_conn_ctx_done(CUdevice dev)
{
        const struct gs_cu *cu;
        struct gs_ring_msg rep;
        int gi;

        pthread_mutex_lock(&g_mu);
        cu = g_state == GS_CONN_UP ? gs_cu_get() : NULL;
        gi = cu ? gs_dev_gpu(cu, dev) : -ENODEV;
        if (gi >= 0 && g_gpus[gi].ctx_charged && !g_gpus[gi].ctx_done) {
                g_gpus[gi].ctx_done = 1;
                (void)gs_call(GS_OP_CTX_DONE, (uint32_t)gi, 0, 0, &rep);
        }
        pthread_mutex_unlock(&g_mu);
}

CUresult gs_conn_total(CUdevice dev, size_t *ret_bytes)
{
        const struct gs_cu *cu;
        CUuuid u;
        CUresult res = CUDA_ERROR_OUT_OF_MEMORY;

        if (!ret_bytes)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&g_mu);
        cu = gs_ready();
        if (!cu)
                goto out;
        if (!cu->cuDeviceGetUuid_v2 || cu->cuDeviceGetUuid_v2(&u, dev) != CUDA_SUCCESS) {
                res = CUDA_ERROR_INVALID_DEVICE;
                goto out;
        }
        *ret_bytes = 0;
        for (uint32_t i = 0; i < g_ngpus; i++)
                if (!memcmp(g_gpus[i].uuid, u.bytes, 16))
                        *ret_bytes = g_gpus[i].quota;
        res = CUDA_SUCCESS;
out:
        pthread_mutex_unlock(&g_mu);
        return res;
}

/* For NVML (no CUDA context, maybe no cuInit): the device is named by its
 * UUID, and registration may happen here. */
int gs_conn_meminfo_uuid(const uint8_t uuid[16], uint64_t *ret_obtainable, uint64_t *ret_quota)
{
        struct gs_ring_msg rep;
        uint32_t gi;
        int r = -ENOTCONN;

        pthread_mutex_lock(&g_mu);
        if (g_state == GS_CONN_NEW)
                (void)gs_conn_connect();
        if (g_state != GS_CONN_UP)
                goto out;
        for (gi = 0; gi < g_ngpus && memcmp(g_gpus[gi].uuid, uuid, 16); gi++)
                ;
        if (gi == g_ngpus) {
                r = -ENODEV;
                goto out;
        }
        if (gs_call(GS_OP_MEMINFO, gi, 0, 0, &rep) < 0)
                goto out; /* the connection is gone */
        if (rep.status != 0) {
                r = -EIO;
                goto out;
        }
        *ret_quota = rep.arg[1];
        *ret_obtainable = rep.arg[0] > rep.arg[1] ? rep.arg[1] : rep.arg[0];
        r = 0;
out:
        pthread_mutex_unlock(&g_mu);
        return r;
}

/* ---- the application's VMM allocations ------------------------------ */

/* pre: g_mu held.  Reads the VMM_GRANT that precedes a VMM_CREATE reply and
 * imports its fd into *ret_h; on success the fd is *ret_fd, else closed. */
static int gs_take_vmm_grant(const struct gs_cu *cu, uint32_t gi, const struct gs_ring_msg *rep, uint64_t size,
                             CUmemGenericAllocationHandle *ret_h, int *ret_fd, const char **why)
{
        struct gs_sock_vmm_grant gr;
        int fd, r = 0;
        ssize_t n = gs_recv_fd(g_sock, &gr, sizeof(gr), &fd, MSG_DONTWAIT);

        if (n < 0) {
                *why = "a promised VMM grant did not arrive";
                return -EPROTO;
        }
        if (!gs_hdr_ok(&gr.h, GS_SOCK_VMM_GRANT, sizeof(gr), n) || fd < 0 || gr.seq != rep->seq ||
            gr.gpu != gi || gr.id != rep->arg[0] || gr.size != size || gr.reserved) {
                *why = "malformed VMM grant";
                r = -EPROTO;
        } else if (!cu->cuMemImportFromShareableHandle ||
                   cu->cuMemImportFromShareableHandle(ret_h, (void *)(intptr_t)fd,
                                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS) {
                *why = "cannot import a VMM allocation";
                r = -EIO;
        }
        if (r == 0)
                *ret_fd = fd;
        else
                gs_closep(&fd);
        return r;
}

CUresult gs_conn_vmm_create(CUmemGenericAllocationHandle *ret_h, size_t size, CUdevice dev)
{
        const struct gs_cu *cu;
        struct gs_ring_msg rep;
        CUmemGenericAllocationHandle h;
        const char *why = NULL;
        CUresult res;
        int gi, fd = -1;

        pthread_mutex_lock(&g_mu);
        cu = gs_ready();
        if (!cu) {
                res = CUDA_ERROR_OUT_OF_MEMORY;
                goto out;
        }
        gi = gs_dev_gpu(cu, dev);
        if (gi < 0) {
                res = gs_gpu_err(gi, dev);
                goto out;
        }
        if (g_nvmm == g_capvmm) {
                size_t cap = g_capvmm ? 2 * g_capvmm : 64;
                struct gs_vmm_ent *t = realloc(g_vmm, cap * sizeof(*t));
                if (!t) {
                        res = CUDA_ERROR_OUT_OF_MEMORY;
                        goto out;
                }
                g_vmm = t;
                g_capvmm = cap;
        }
        if (gs_call(GS_OP_VMM_CREATE, (uint32_t)gi, size, 0, &rep) < 0) {
                res = CUDA_ERROR_OUT_OF_MEMORY;
                goto out;
        }
        if (rep.status != 0 || rep.arg[1] == 0) {
                res = rep.status == 0 ? CUDA_ERROR_UNKNOWN : gs_status_cu(rep.status);
                if (rep.status == 0 || rep.arg[1] != 0)
                        gs_conn_lost("VMM reply without exactly one grant");
                goto out;
        }
        if (rep.arg[1] != 1 || gs_take_vmm_grant(cu, (uint32_t)gi, &rep, size, &h, &fd, &why) < 0) {
                /* The agent frees the allocation when we go. */
                gs_conn_lost(why ? why : "VMM reply with more than one grant");
                res = CUDA_ERROR_OUT_OF_MEMORY;
                goto out;
        }
        g_vmm[g_nvmm++] = (struct gs_vmm_ent){ h, rep.arg[0], (uint32_t)gi, fd };
        *ret_h = h;
        res = CUDA_SUCCESS;
out:
        pthread_mutex_unlock(&g_mu);
        return res;
}

void gs_conn_vmm_released(CUmemGenericAllocationHandle h)
{
        struct gs_ring_msg rep;
        struct gs_vmm_ent e;
        size_t i;

        pthread_mutex_lock(&g_mu);
        for (i = 0; i < g_nvmm && g_vmm[i].h != h; i++)
                ;
        if (i == g_nvmm)
                goto out;
        e = g_vmm[i];
        g_vmm[i] = g_vmm[--g_nvmm];
        close(e.fd);
        if (g_state == GS_CONN_UP && gs_call(GS_OP_VMM_RELEASE, e.gpu, e.id, 0, &rep) == 0 && rep.status != 0)
                gs_hook_debug("the agent refused VMM_RELEASE of %llu: %d", (unsigned long long)e.id, rep.status);
out:
        pthread_mutex_unlock(&g_mu);
}

int gs_conn_vmm_export(CUmemGenericAllocationHandle h, int *ret_fd)
{
        int r = -ENOENT;

        pthread_mutex_lock(&g_mu);
        for (size_t i = 0; i < g_nvmm; i++)
                if (g_vmm[i].h == h) {
                        int fd = fcntl(g_vmm[i].fd, F_DUPFD_CLOEXEC, 0);
                        r = fd < 0 ? gs_neg_errno() : 0;
                        if (fd >= 0)
                                *ret_fd = fd;
                        break;
                }
        pthread_mutex_unlock(&g_mu);
        return r;
}

/* ---- CUDA IPC between processes of the allocation ------------------ */

int gs_conn_ipc_is_ours(const CUipcMemHandle *h)
{
        return memcmp(h->reserved, GS_IPC_MAGIC, 8) == 0;
}

CUresult gs_conn_ipc_get(CUipcMemHandle *h, CUdeviceptr dptr)
{
        struct gs_ipc_handle ih;
        struct gs_ring_msg rep;
        CUresult res;
        int gi;

        if (!h)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&g_mu);
        gi = gs_owner(dptr);
        if (gi < 0) {
                res = CUDA_ERROR_INVALID_VALUE;
                goto out;
        }
        if (g_state != GS_CONN_UP || gs_call(GS_OP_IPC_EXPORT, (uint32_t)gi, dptr - g_gpus[gi].va_base, 0, &rep) < 0) {
                res = CUDA_ERROR_NOT_SUPPORTED;
                goto out;
        }
        /* An agent that does not know the op answers -EPROTO. */
        res = rep.status == -EPROTO ? CUDA_ERROR_NOT_SUPPORTED : gs_status_cu(rep.status);
        if (res != CUDA_SUCCESS)
                goto out;
        memset(&ih, 0, sizeof(ih));
        memcpy(ih.magic, GS_IPC_MAGIC, sizeof(ih.magic));
        ih.token[0] = rep.arg[0];
        ih.token[1] = rep.arg[1];
        ih.size = rep.arg[2];
        memcpy(h->reserved, &ih, sizeof(ih));
out:
        pthread_mutex_unlock(&g_mu);
        return res;
}

/* pre: g_mu held.  Unmaps the first n chunks of e's range and frees it. */
static void gs_ipc_unmap(const struct gs_cu *cu, const struct gs_ipc_ent *e, uint32_t n)
{
        for (uint32_t i = 0; i < n; i++)
                if (cu->cuMemUnmap)
                        (void)cu->cuMemUnmap(e->va + (CUdeviceptr)i * e->chunk, e->chunk);
        if (cu->cuMemAddressFree)
                (void)cu->cuMemAddressFree(e->va, (size_t)e->nchunks * e->chunk);
}

/* pre: g_mu held.  Receives the k IPC grants of reply rep and maps them in
 * a new range of *e (nchunks, chunk set).  Every fd is closed. */
static int gs_take_ipc_grants(const struct gs_cu *cu, uint32_t gi, CUdevice dev, const struct gs_ring_msg *rep,
                              struct gs_ipc_ent *e, const char **why)
{
        uint32_t mapped = 0;
        int r = 0;

        *why = "cannot map an opened IPC block";
        if (!cu->cuMemAddressReserve || !cu->cuMemAddressFree ||
            cu->cuMemAddressReserve(&e->va, (size_t)e->nchunks * e->chunk, e->chunk, 0, 0) != CUDA_SUCCESS)
                e->va = 0;
        for (uint32_t i = 0; i < e->nchunks; i++) {
                struct gs_sock_grant gr;
                int fd;
                ssize_t n = gs_recv_fd(g_sock, &gr, sizeof(gr), &fd, MSG_DONTWAIT);

                if (n < 0) {
                        *why = "a promised IPC grant did not arrive";
                        r = -EPROTO;
                        break;
                }
                if (!gs_hdr_ok(&gr.h, GS_SOCK_IPC_GRANT, sizeof(gr), n) || fd < 0 || gr.seq != rep->seq ||
                    gr.gpu != gi || gr.slot != i || gr.chunk_bytes != e->chunk) {
                        *why = "malformed IPC grant";
                        r = -EPROTO;
                } else if (r == 0 && e->va) {
                        r = gs_map_fd(cu, e->va + (CUdeviceptr)i * e->chunk, e->chunk, dev, fd);
                        fd = -1; /* closed */
                        mapped += r == 0;
                } else if (r == 0) {
                        r = -EIO;
                }
                gs_closep(&fd);
                if (r == -EPROTO)
                        break;
        }
        if (r < 0 && e->va) {
                gs_ipc_unmap(cu, e, mapped);
                e->va = 0;
        }
        return r;
}

CUresult gs_conn_ipc_open(CUdeviceptr *ret_ptr, const CUipcMemHandle *h)
{
        const struct gs_cu *cu;
        struct gs_ipc_handle ih;
        struct gs_ring_msg rep;
        struct gs_ipc_ent e = { 0 };
        const char *why = NULL;
        CUdevice dev = -1;
        CUresult res;
        int gi, r;

        if (!ret_ptr)
                return CUDA_ERROR_INVALID_VALUE;
        memcpy(&ih, h->reserved, sizeof(ih));
        pthread_mutex_lock(&g_mu);
        for (size_t i = 0; i < g_nipc; i++)
                if (g_ipc[i].token[0] == ih.token[0] && g_ipc[i].token[1] == ih.token[1]) {
                        g_ipc[i].refs++;
                        *ret_ptr = g_ipc[i].ptr;
                        res = CUDA_SUCCESS;
                        goto out;
                }
        cu = gs_ready();
        if (!cu) {
                res = CUDA_ERROR_INVALID_VALUE;
                goto out;
        }
        gi = gs_cur_gpu(cu, &dev);
        if (gi < 0) {
                res = gi == -EBADR ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_DEVICE;
                goto out;
        }
        if (g_nipc == g_capipc) {
                size_t cap = g_capipc ? 2 * g_capipc : 16;
                struct gs_ipc_ent *t = realloc(g_ipc, cap * sizeof(*t));
                if (!t) {
                        res = CUDA_ERROR_OUT_OF_MEMORY;
                        goto out;
                }
                g_ipc = t;
                g_capipc = cap;
        }
        if (gs_call(GS_OP_IPC_OPEN, (uint32_t)gi, ih.token[0], ih.token[1], &rep) < 0) {
                res = CUDA_ERROR_INVALID_VALUE;
                goto out;
        }
        /* The grants come before the reply whatever it says; bound them. */
        if (rep.arg[1] > GS_MAX_GRANTS_PER_REPLY || rep.arg[1] > g_gpus[gi].max_slots ||
            (rep.status != 0 && rep.arg[1] != 0) ||
            (rep.status == 0 && (rep.arg[1] == 0 || rep.arg[0] >= g_gpus[gi].chunk || rep.arg[2] == 0 ||
                                 rep.arg[2] > rep.arg[1] * g_gpus[gi].chunk - rep.arg[0]))) {
                gs_conn_lost("malformed reply to IPC_OPEN");
                res = CUDA_ERROR_INVALID_VALUE;
                goto out;
        }
        if (rep.status != 0) {
                /* Unknown token, our own, or another GPU's. */
                res = rep.status == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
                goto out;
        }
        e.token[0] = ih.token[0];
        e.token[1] = ih.token[1];
        e.nchunks = (uint32_t)rep.arg[1];
        e.chunk = g_gpus[gi].chunk;
        e.refs = 1;
        e.size = rep.arg[2];
        r = gs_take_ipc_grants(cu, (uint32_t)gi, dev, &rep, &e, &why);
        if (r == -EPROTO) {
                gs_conn_lost(why);
                res = CUDA_ERROR_INVALID_VALUE;
                goto out;
        }
        if (r < 0) {
                gs_hook_debug("%s", why);
                res = CUDA_ERROR_OUT_OF_MEMORY;
                goto out;
        }
        e.ptr = e.va + rep.arg[0];
        g_ipc[g_nipc++] = e;
        *ret_ptr = e.ptr;
        res = CUDA_SUCCESS;
out:
        pthread_mutex_unlock(&g_mu);
        return res;
}

CUresult gs_conn_ipc_close(CUdeviceptr dptr)
{
        const struct gs_cu *cu = gs_cu_get();
        CUresult res = CUDA_ERROR_NOT_FOUND;

        pthread_mutex_lock(&g_mu);
        for (size_t i = 0; i < g_nipc; i++) {
                struct gs_ipc_ent *e = &g_ipc[i];
                if (e->ptr != dptr)
                        continue;
                if (--e->refs == 0) {
                        if (cu)
                                gs_ipc_unmap(cu, e, e->nchunks);
                        *e = g_ipc[--g_nipc];
                }
                res = CUDA_SUCCESS;
                break;
        }
        pthread_mutex_unlock(&g_mu);
        return res;
}

CUresult gs_conn_ipc_range(CUdeviceptr ptr, CUdeviceptr *ret_base, size_t *ret_size)
{
        CUresult res = CUDA_ERROR_NOT_FOUND;

        pthread_mutex_lock(&g_mu);
        for (size_t i = 0; i < g_nipc; i++)
                if (ptr >= g_ipc[i].ptr && ptr - g_ipc[i].ptr < g_ipc[i].size) {
                        if (ret_base)
                                *ret_base = g_ipc[i].ptr;
                        if (ret_size)
                                *ret_size = g_ipc[i].size;
                        res = CUDA_SUCCESS;
                        break;
                }
        pthread_mutex_unlock(&g_mu);
        return res;
}
