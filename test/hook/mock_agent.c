/* mock_agent.c — a minimal agent for the hook's tests (a test double; the
 * real agent is agent/).  Speaks gs_wire.h on one GPU of the fake driver:
 * a pool of nchunks chunks made with cuMemCreate and exported as POSIX fds,
 * a bump allocator per process, FREE asking to release a chunk as soon as
 * it is empty (unless the bump pointer is in it).  Single-threaded; polls
 * the rings every millisecond.
 *
 * With "spill" it announces GS_FEAT_SPILL (issue 22): SIGUSR1 asks every
 * process's mover to move its chunks to host memory (new HOST_NUMA chunks),
 * SIGUSR2 to move them back to the device chunks they came from, at most
 * GS_MOVE_MAX a GS_OP_SPILL reply.
 *
 * With "qos=W" it announces GS_FEAT_QOS (issue 30) and answers GS_OP_QOS:
 * standard, no cap, a read-only board, and W (any number, however bad) as
 * the weight (ret4): the hook must keep its weight within 1..100.  With
 * "lc=old" or "lc=idle" it answers latency-critical, slot 0 of a writable
 * board: "old" never writes the board's idle_until_ns (as an agent of an
 * earlier release), "idle" renews it each millisecond (nobody to hold:
 * docs/compute.md "Nobody to hold").
 *
 *   mock_agent <socket path> <nchunks> [max_slots [spill|qos=W|lc=old|lc=idle]]      (chunk = 2 MiB) */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gs_cudadecl.h"
#include "gs_ring.h"
#include "gs_util.h"
#include "gs_wire.h"

#define CHUNK (2 * GS_MiB)
#define MAX_CLIENTS 32
#define MAX_BLOCKS 4096
#define MAX_SLOTS 1024

struct block {
        uint64_t off, size;
};

struct client {
        int sock;
        struct gs_shm *shm;
        uint32_t req_tail, rep_head;
        struct block blocks[MAX_BLOCKS];
        int nblocks;
        int slot_chunk[MAX_SLOTS]; /* -1: none */
        int slot_live[MAX_SLOTS];
        uint32_t next_slot;
        uint64_t cur_off, cur_end;
        uint8_t slot_host[MAX_SLOTS]; /* moved to host memory */
        int spill_dir;                /* enum gs_move_dir asked, 0: none */
        uint32_t pend[GS_MOVE_MAX];   /* slots of the last GS_OP_SPILL reply */
        uint32_t npend;
};

static int g_nchunks, g_max_slots = 64, g_spill, g_qos, g_qos_board = -1;
static int g_qos_lc; /* 1: lc=old, 2: lc=idle */
static struct gs_qos_board *g_qos_map;
static uint64_t g_qos_weight;
static volatile sig_atomic_t g_spill_sig; /* enum gs_move_dir a signal asked for */
static int *g_chunk_fd, *g_chunk_free;
static CUuuid g_uuid;
static struct client *g_clients[MAX_CLIENTS];

static void die(const char *what)
{
        fprintf(stderr, "mock_agent: %s: %s\n", what, strerror(errno));
        exit(2);
}

/* Sends buf with fd and, if fd2 >= 0, fd2 too. */
static int send_fd2(int sock, const void *buf, size_t len, int fd, int fd2)
{
        union {
                struct cmsghdr h;
                char b[CMSG_SPACE(2 * sizeof(int))];
        } cb;
        int fds[2] = { fd, fd2 }, n = fd2 >= 0 ? 2 : 1;
        struct iovec iov = { (void *)buf, len };
        struct msghdr mh = { 0 };

        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        if (fd >= 0) {
                mh.msg_control = cb.b;
                mh.msg_controllen = CMSG_SPACE(n * sizeof(int));
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(n * sizeof(int));
                memcpy(CMSG_DATA(c), fds, n * sizeof(int));
        }
        return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

static int send_fd(int sock, const void *buf, size_t len, int fd)
{
        return send_fd2(sock, buf, len, fd, -1);
}

static void hdr(struct gs_sock_hdr *h, uint16_t type, uint32_t len)
{
        *h = (struct gs_sock_hdr){ GS_WIRE_MAGIC, GS_WIRE_VERSION, type, len, 0 };
}

static void client_close(int i)
{
        struct client *c = g_clients[i];

        for (int s = 0; s < MAX_SLOTS; s++)
                if (c->slot_chunk[s] >= 0)
                        g_chunk_free[c->slot_chunk[s]] = 1;
        close(c->sock);
        munmap(c->shm, sizeof(*c->shm));
        free(c);
        g_clients[i] = NULL;
}

static void client_accept(int lsock)
{
        struct gs_sock_hello hello;
        struct gs_sock_welcome w = { 0 };
        struct ucred cr;
        socklen_t crl = sizeof(cr);
        struct client *c;
        int sock, mfd, efd, i, r;

        sock = accept4(lsock, NULL, NULL, SOCK_CLOEXEC);
        if (sock < 0)
                return;
        for (i = 0; i < MAX_CLIENTS && g_clients[i]; i++)
                ;
        if (i == MAX_CLIENTS || getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &crl) < 0 ||
            recv(sock, &hello, sizeof(hello), 0) != sizeof(hello) || hello.h.magic != GS_WIRE_MAGIC ||
            hello.h.type != GS_SOCK_HELLO) {
                close(sock);
                return;
        }
        c = calloc(1, sizeof(*c));
        mfd = memfd_create("gshare-mock-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (!c || mfd < 0 || ftruncate(mfd, sizeof(struct gs_shm)) < 0 ||
            fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
                die("segment");
        c->shm = mmap(NULL, sizeof(*c->shm), PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
        if (c->shm == MAP_FAILED)
                die("mmap");
        gs_shm_init(c->shm);
        c->sock = sock;
        for (int s = 0; s < MAX_SLOTS; s++)
                c->slot_chunk[s] = -1;
        hdr(&w.h, GS_SOCK_WELCOME, sizeof(w));
        w.h.reserved = (g_spill ? GS_FEAT_SPILL : 0) | (g_qos ? GS_FEAT_QOS : 0);
        w.ngpus = 1;
        w.shm_bytes = sizeof(struct gs_shm);
        w.proc_id = (uint64_t)cr.pid;
        memcpy(w.gpus[0].uuid, g_uuid.bytes, 16);
        w.gpus[0].quota_bytes = (uint64_t)g_nchunks * CHUNK;
        w.gpus[0].chunk_bytes = CHUNK;
        w.gpus[0].max_slots = (uint32_t)g_max_slots;
        /* The doorbell: this mock polls the rings every millisecond and
         * never reads it, but the protocol hands the hook one. */
        efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (efd < 0)
                die("eventfd");
        r = send_fd2(sock, &w, sizeof(w), mfd, efd);
        close(efd);
        if (r < 0) {
                close(mfd);
                munmap(c->shm, sizeof(*c->shm));
                close(sock);
                free(c);
                return;
        }
        close(mfd);
        g_clients[i] = c;
}

static int free_chunks(void)
{
        int n = 0;

        for (int k = 0; k < g_nchunks; k++)
                n += g_chunk_free[k];
        return n;
}

static void op_alloc(struct client *c, const struct gs_ring_msg *m, struct gs_ring_msg *r)
{
        uint64_t sz = gs_align_up(m->arg[0], GS_MIN_ALIGN), k = 0, off;

        if (m->arg[0] == 0 || c->nblocks == MAX_BLOCKS || m->gpu != 0) {
                r->status = -EINVAL;
                return;
        }
        if (c->cur_end && c->cur_off + sz <= c->cur_end) {
                off = c->cur_off;
        } else {
                k = (sz + CHUNK - 1) / CHUNK;
                if ((int)k > free_chunks() || c->next_slot + k > (uint64_t)g_max_slots) {
                        r->status = -ENOMEM;
                        return;
                }
                for (uint64_t j = 0; j < k; j++) {
                        struct gs_sock_grant g = { 0 };
                        int ch = 0;
                        while (!g_chunk_free[ch])
                                ch++;
                        g_chunk_free[ch] = 0;
                        hdr(&g.h, GS_SOCK_GRANT, sizeof(g));
                        g.seq = m->seq;
                        g.gpu = 0;
                        g.slot = c->next_slot + (uint32_t)j;
                        g.chunk_bytes = CHUNK;
                        c->slot_chunk[g.slot] = ch;
                        if (send_fd(c->sock, &g, sizeof(g), g_chunk_fd[ch]) < 0)
                                die("grant");
                }
                off = (uint64_t)c->next_slot * CHUNK;
                c->next_slot += (uint32_t)k;
                c->cur_end = (uint64_t)c->next_slot * CHUNK;
        }
        c->cur_off = off + sz;
        c->blocks[c->nblocks++] = (struct block){ off, m->arg[0] };
        for (uint64_t s = off / CHUNK; s <= (off + sz - 1) / CHUNK; s++)
                c->slot_live[s]++;
        r->arg[0] = off;
        r->arg[1] = k;
}

static void op_free(struct client *c, const struct gs_ring_msg *m, struct gs_ring_msg *r)
{
        uint64_t first = 0, count = 0, cur_slot = c->cur_end ? c->cur_end / CHUNK - 1 : UINT64_MAX;
        int i;

        for (i = 0; i < c->nblocks && c->blocks[i].off != m->arg[0]; i++)
                ;
        if (i == c->nblocks) {
                r->status = -ENOENT;
                return;
        }
        struct block b = c->blocks[i];
        c->blocks[i] = c->blocks[--c->nblocks];
        for (uint64_t s = b.off / CHUNK; s <= (b.off + gs_align_up(b.size, GS_MIN_ALIGN) - 1) / CHUNK; s++) {
                if (--c->slot_live[s] == 0 && s != cur_slot) {
                        if (count == 0)
                                first = s;
                        if (s == first + count)
                                count++;
                }
        }
        r->arg[0] = first;
        r->arg[1] = count;
}

static void op_release(struct client *c, const struct gs_ring_msg *m, struct gs_ring_msg *r)
{
        if (m->arg[0] + m->arg[1] > (uint64_t)g_max_slots) {
                r->status = -EINVAL;
                return;
        }
        for (uint64_t s = m->arg[0]; s < m->arg[0] + m->arg[1]; s++)
                if (c->slot_chunk[s] < 0 || c->slot_live[s]) {
                        r->status = -EINVAL;
                        return;
                }
        for (uint64_t s = m->arg[0]; s < m->arg[0] + m->arg[1]; s++) {
                g_chunk_free[c->slot_chunk[s]] = 1;
                c->slot_chunk[s] = -1;
                c->slot_host[s] = 0;
        }
}

/* A new host chunk's fd. */
static int host_chunk_fd(void)
{
        CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                     .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR };
        CUmemGenericAllocationHandle h;
        int fd = -1;

        prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        prop.location.id = 0;
        if (cuMemCreate(&h, CHUNK, &prop, 0) ||
            cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) || cuMemRelease(h))
                die("host chunk");
        return fd;
}

/* The slots still to move in the direction asked, one MOVE each. */
static void op_spill(struct client *c, const struct gs_ring_msg *m, struct gs_ring_msg *r)
{
        int to_host = c->spill_dir == GS_MOVE_TO_HOST;
        uint32_t k = 0;

        if (!g_spill || m->gpu != 0 || c->npend) {
                r->status = -EPROTO;
                return;
        }
        for (int s = 0; s < g_max_slots && c->spill_dir && k < GS_MOVE_MAX; s++) {
                struct gs_sock_grant g = { 0 };
                int fd;

                if (c->slot_chunk[s] < 0 || c->slot_host[s] == to_host)
                        continue;
                fd = to_host ? host_chunk_fd() : g_chunk_fd[c->slot_chunk[s]];
                hdr(&g.h, GS_SOCK_MOVE, sizeof(g));
                g.seq = m->seq;
                g.slot = (uint32_t)s;
                g.chunk_bytes = CHUNK;
                if (send_fd(c->sock, &g, sizeof(g), fd) < 0)
                        die("move");
                if (to_host)
                        close(fd);
                c->pend[k++] = (uint32_t)s;
        }
        r->arg[0] = c->npend = k;
        r->arg[1] = (uint64_t)c->spill_dir;
        if (k == 0)
                c->spill_dir = 0;
}

static void op_spill_done(struct client *c, const struct gs_ring_msg *m, struct gs_ring_msg *r)
{
        if (!c->npend || m->arg[0] > c->npend || m->arg[1] != (uint64_t)c->spill_dir) {
                r->status = -EINVAL;
                return;
        }
        for (uint64_t i = 0; i < m->arg[0]; i++)
                c->slot_host[c->pend[i]] = c->spill_dir == GS_MOVE_TO_HOST;
        c->npend = 0;
}

/* GS_OP_QOS: the board (made once), then the reply with the weight asked
 * for on the command line. */
static void op_qos(struct client *c, const struct gs_ring_msg *m, struct gs_ring_msg *r)
{
        struct gs_sock_grant g = { 0 };

        if (!g_qos) {
                r->status = -EPROTO;
                return;
        }
        if (g_qos_board < 0) {
                struct gs_qos_board *b;
                g_qos_board = memfd_create("gshare-mock-qos", MFD_CLOEXEC);
                if (g_qos_board < 0 || ftruncate(g_qos_board, sizeof(*b)) < 0)
                        die("qos board");
                b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED, g_qos_board, 0);
                if (b == MAP_FAILED)
                        die("qos board");
                b->magic = GS_QOS_MAGIC;
                b->nslots = GS_QOS_SLOTS;
                g_qos_map = b;
        }
        hdr(&g.h, GS_SOCK_QOS, sizeof(g));
        g.seq = m->seq;
        g.slot = g_qos_lc ? 0 : GS_QOS_NO_SLOT;
        g.chunk_bytes = sizeof(struct gs_qos_board);
        if (send_fd(c->sock, &g, sizeof(g), g_qos_board) < 0)
                die("qos");
        r->arg[0] = g_qos_lc ? GS_QOS_LATENCY : GS_QOS_STANDARD;
        r->arg[1] = 0;
        r->arg[2] = g.slot;
        r->arg[3] = sizeof(struct gs_qos_board);
        r->ret4 = g_qos_weight;
}

static void on_signal(int sig)
{
        g_spill_sig = sig == SIGUSR1 ? GS_MOVE_TO_HOST : GS_MOVE_TO_DEVICE;
}

static void op_range(struct client *c, const struct gs_ring_msg *m, struct gs_ring_msg *r)
{
        for (int i = 0; i < c->nblocks; i++)
                if (m->arg[0] >= c->blocks[i].off && m->arg[0] < c->blocks[i].off + c->blocks[i].size) {
                        r->arg[0] = c->blocks[i].off;
                        r->arg[1] = c->blocks[i].size;
                        return;
                }
        r->status = -ENOENT;
}

/* Returns -1 to drop the client. */
static int client_serve(struct client *c)
{
        struct gs_ring_msg m, r;
        int n;

        while ((n = gs_ring_pop(&c->shm->req, &c->req_tail, &m)) == 1) {
                memset(&r, 0, sizeof(r));
                r.seq = m.seq;
                r.op = m.op;
                r.gpu = m.gpu;
                switch (m.op) {
                case GS_OP_ALLOC: op_alloc(c, &m, &r); break;
                case GS_OP_FREE: op_free(c, &m, &r); break;
                case GS_OP_RELEASE: op_release(c, &m, &r); break;
                case GS_OP_RANGE: op_range(c, &m, &r); break;
                case GS_OP_MEMINFO:
                        r.arg[0] = (uint64_t)free_chunks() * CHUNK + (c->cur_end - c->cur_off);
                        r.arg[1] = (uint64_t)g_nchunks * CHUNK;
                        break;
                case GS_OP_PING: r.arg[0] = m.arg[0]; break;
                case GS_OP_CTX: break; /* room for any context */
                case GS_OP_CTX_DONE: break;
                case GS_OP_VMM_CREATE:
                case GS_OP_VMM_RELEASE: r.status = -EOPNOTSUPP; break;
                case GS_OP_SPILL: op_spill(c, &m, &r); break;
                case GS_OP_SPILL_DONE: op_spill_done(c, &m, &r); break;
                case GS_OP_QOS: op_qos(c, &m, &r); break;
                default: r.status = -EPROTO; break;
                }
                if (gs_ring_push(&c->shm->rep, &c->rep_head, &r) < 0)
                        return -1;
                gs_doorbell_ring(&c->shm->hook_wake, &c->shm->hook_sleeping);
        }
        return n < 0 ? -1 : 0;
}

int main(int argc, char **argv)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        CUmemAllocationProp prop = { 0 };
        CUcontext ctx;
        int lsock;

        if (argc < 3 || strlen(argv[1]) >= sizeof(sa.sun_path)) {
                fprintf(stderr, "usage: mock_agent <socket> <nchunks> [max_slots [spill|qos=W|lc=old|lc=idle]]\n");
                return 2;
        }
        g_nchunks = atoi(argv[2]);
        if (argc > 3)
                g_max_slots = atoi(argv[3]);
        g_spill = argc > 4 && !strcmp(argv[4], "spill");
        g_qos_lc = argc > 4 && !strcmp(argv[4], "lc=old") ? 1 : argc > 4 && !strcmp(argv[4], "lc=idle") ? 2 : 0;
        g_qos = g_qos_lc || (argc > 4 && !strncmp(argv[4], "qos=", 4));
        if (g_qos && !g_qos_lc)
                g_qos_weight = strtoull(argv[4] + 4, NULL, 0);
        signal(SIGUSR1, on_signal);
        signal(SIGUSR2, on_signal);
        if (g_nchunks < 1 || g_max_slots < 1 || g_max_slots > MAX_SLOTS)
                return 2;
        signal(SIGPIPE, SIG_IGN);
        if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx) || cuDeviceGetUuid_v2(&g_uuid, 0))
                die("driver");
        g_chunk_fd = calloc((size_t)g_nchunks, sizeof(int));
        g_chunk_free = calloc((size_t)g_nchunks, sizeof(int));
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        for (int k = 0; k < g_nchunks; k++) {
                CUmemGenericAllocationHandle h;
                if (cuMemCreate(&h, CHUNK, &prop, 0) ||
                    cuMemExportToShareableHandle(&g_chunk_fd[k], h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))
                        die("chunk");
                g_chunk_free[k] = 1;
        }
        strcpy(sa.sun_path, argv[1]);
        unlink(argv[1]);
        lsock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (lsock < 0 || bind(lsock, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lsock, 16) < 0)
                die("listen");
        for (;;) {
                struct pollfd pfd[MAX_CLIENTS + 1];
                int n = 1;

                pfd[0] = (struct pollfd){ .fd = lsock, .events = POLLIN };
                for (int i = 0; i < MAX_CLIENTS; i++)
                        pfd[n++] = (struct pollfd){ .fd = g_clients[i] ? g_clients[i]->sock : -1, .events = POLLRDHUP };
                if (poll(pfd, (nfds_t)n, 1) < 0)
                        continue; /* a signal */
                if (g_qos_lc == 2 && g_qos_map)
                        __atomic_store_n(&g_qos_map->idle_until_ns,
                                         (uint64_t)gs_mono_ns() + GS_QOS_IDLE_LEASE_MS * 1000000ull, __ATOMIC_RELEASE);
                if (g_spill_sig) {
                        for (int i = 0; i < MAX_CLIENTS; i++)
                                if (g_clients[i]) {
                                        g_clients[i]->spill_dir = g_spill_sig;
                                        __atomic_add_fetch(&g_clients[i]->shm->spill, 1, __ATOMIC_SEQ_CST);
                                        gs_futex_wake(&g_clients[i]->shm->spill);
                                }
                        g_spill_sig = 0;
                }
                if (pfd[0].revents & POLLIN)
                        client_accept(lsock);
                for (int i = 0; i < MAX_CLIENTS; i++) {
                        if (!g_clients[i])
                                continue;
                        if ((pfd[i + 1].revents & (POLLHUP | POLLRDHUP | POLLERR)) || client_serve(g_clients[i]) < 0)
                                client_close(i);
                }
        }
}
