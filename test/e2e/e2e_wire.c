/* e2e_wire.c — end-to-end checks of gshare-agent through its process
 * protocol, speaking gs_wire.h directly (no hook, no CUDA): quotas,
 * coalescing, concurrent processes, and hostile clients.  Driven by
 * test/e2e/test_e2e.py, which checks the agent's accounting around it.
 *
 *   e2e_wire quota SOCK            allocate 1 MiB blocks until -ENOMEM
 *   e2e_wire hold SOCK BYTES       allocate, print "held", wait to be killed
 *   e2e_wire big SOCK              a request of 2.5 chunks: consecutive slots
 *   e2e_wire concurrent SOCK N     N processes allocating at once
 *   e2e_wire hostile SOCK          malformed and hostile messages
 *   e2e_wire ipcforge SOCK         hostile reclaims of IPC exports: a token
 *                                  said for no live block, or one in use by
 *                                  another process, resolves to nothing new;
 *                                  memory for a slot not held is refused
 *   e2e_wire flood SOCK            a flood does not starve another process
 *   e2e_wire floodx A B N          N connections flood allocation A while
 *                                  one process of B pings: B is served
 *   e2e_wire conns SOCK N          opens N connections, prints how many
 *                                  registered and how the others were
 *                                  refused, holds them until stdin closes
 *   e2e_wire wakeup SOCK T N       T threads, a connection each, make N
 *                                  requests each (256 B ALLOC, FREE), each
 *                                  rung exactly once: never rung again, a
 *                                  request the agent does not answer is a
 *                                  hang.  Prints the requests over 5 ms
 *                                  and the longest; fails on a request
 *                                  unanswered for WAKEUP_HANG_MS
 * Exit 0 when the check holds; a line on stderr says what failed. */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "e2e_wire.h"
#include "gs_util.h"

static int failures;

#define CHECK(cond, ...)                                                     \
        do {                                                                 \
                if (!(cond)) {                                               \
                        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
                        fprintf(stderr, __VA_ARGS__);                        \
                        fputc('\n', stderr);                                 \
                        failures++;                                          \
                }                                                            \
        } while (0)

static void must_open(struct e2e_conn *c, const char *sock)
{
        int r = e2e_open(c, sock);

        if (r < 0) {
                fprintf(stderr, "FAIL: cannot register on %s: %s\n", sock, strerror(-r));
                exit(1);
        }
}

static uint64_t fill(struct e2e_conn *c, uint64_t block)
{
        uint64_t got = 0;
        int r;

        while ((r = e2e_call(c, GS_OP_ALLOC, 0, block, 0, NULL, NULL, 0, NULL)) == 0)
                got += block;
        CHECK(r == -ENOMEM, "allocation ended with %d, not -ENOMEM", r);
        return got;
}

static int cmd_quota(const char *sock)
{
        struct e2e_conn c;
        struct gs_ring_msg rep;
        uint64_t got;

        must_open(&c, sock);
        CHECK(e2e_call(&c, GS_OP_MEMINFO, 0, 0, 0, &rep, NULL, 0, NULL) == 0, "MEMINFO failed");
        CHECK(rep.arg[1] == c.w.gpus[0].quota_bytes, "MEMINFO quota %llu != %llu", (unsigned long long)rep.arg[1],
              (unsigned long long)c.w.gpus[0].quota_bytes);
        CHECK(rep.arg[0] == c.w.gpus[0].quota_bytes, "fresh process may obtain %llu, quota %llu",
              (unsigned long long)rep.arg[0], (unsigned long long)c.w.gpus[0].quota_bytes);
        got = fill(&c, GS_MiB);
        printf("obtained %llu quota %llu\n", (unsigned long long)got, (unsigned long long)c.w.gpus[0].quota_bytes);
        CHECK(got == c.w.gpus[0].quota_bytes, "obtained %llu of a quota of %llu", (unsigned long long)got,
              (unsigned long long)c.w.gpus[0].quota_bytes);
        CHECK(e2e_call(&c, GS_OP_MEMINFO, 0, 0, 0, &rep, NULL, 0, NULL) == 0 && rep.arg[0] == 0,
              "MEMINFO after filling says %llu obtainable", (unsigned long long)rep.arg[0]);
        fflush(stdout);
        e2e_close(&c);
        return failures != 0;
}

static int cmd_hold(const char *sock, const char *bytes)
{
        struct e2e_conn c;
        int r;

        must_open(&c, sock);
        r = e2e_call(&c, GS_OP_ALLOC, 0, strtoull(bytes, NULL, 0), 0, NULL, NULL, 0, NULL);
        if (r < 0) {
                fprintf(stderr, "FAIL: hold: %s\n", strerror(-r));
                return 1;
        }
        printf("held\n");
        fflush(stdout);
        for (;;)
                pause();
}

static int cmd_big(const char *sock)
{
        struct e2e_conn c;
        struct gs_ring_msg rep;
        uint64_t chunk, size, base = 0, len = 0;
        int fds[64];
        uint32_t n = 0;
        int r;

        must_open(&c, sock);
        chunk = c.w.gpus[0].chunk_bytes;
        size = 2 * chunk + chunk / 2;
        r = e2e_call(&c, GS_OP_ALLOC, 0, size, 0, &rep, fds, 64, &n);
        CHECK(r == 0, "ALLOC of 2.5 chunks: %d", r);
        CHECK(n == 3 && rep.arg[1] == 3, "%u grants for 2.5 chunks", n);
        CHECK(rep.arg[0] % chunk == 0, "a multi-chunk block starts mid-chunk");
        /* The whole block is one range: RANGE from its last byte finds it. */
        r = e2e_call(&c, GS_OP_RANGE, 0, rep.arg[0] + size - 1, 0, NULL, NULL, 0, NULL);
        CHECK(r == 0, "RANGE of the last byte: %d", r);
        {
                struct gs_ring_msg rr;
                CHECK(e2e_call(&c, GS_OP_RANGE, 0, rep.arg[0] + size - 1, 0, &rr, NULL, 0, NULL) == 0 &&
                              rr.arg[0] == rep.arg[0] && rr.arg[1] == size,
                      "RANGE gives %llu+%llu", (unsigned long long)rr.arg[0], (unsigned long long)rr.arg[1]);
                base = rr.arg[0];
                len = rr.arg[1];
        }
        /* On the fake driver a chunk is a memfd: write each through its own
         * mapping and read it back through a fresh one. */
        for (uint32_t i = 0; i < n; i++) {
                unsigned char *m = mmap(NULL, chunk, PROT_READ | PROT_WRITE, MAP_SHARED, fds[i], 0);
                if (m == MAP_FAILED)
                        continue; /* not a memfd: a real driver's fd */
                memset(m, 0xA0 + (int)i, chunk);
                munmap(m, chunk);
                m = mmap(NULL, chunk, PROT_READ, MAP_SHARED, fds[i], 0);
                CHECK(m != MAP_FAILED && m[0] == 0xA0 + i && m[chunk - 1] == 0xA0 + i,
                      "chunk %u does not hold what was written", i);
                munmap(m, chunk);
                close(fds[i]);
        }
        r = e2e_call(&c, GS_OP_FREE, 0, base, 0, &rep, NULL, 0, NULL);
        CHECK(r == 0, "FREE of the big block: %d", r);
        (void)len;
        e2e_close(&c);
        return failures != 0;
}

static int cmd_concurrent(const char *sock, int n)
{
        int pipes[2], go[2], rel[2];
        uint64_t total = 0, quota = 0;

        /* go: one start byte per child; rel: EOF releases them all.  (One
         * pipe for both let a fast child take a slow one's start byte as
         * its release and the slow child never start.) */
        if (pipe(pipes) < 0 || pipe(go) < 0 || pipe(rel) < 0)
                return 1;
        for (int i = 0; i < n; i++) {
                if (fork() == 0) {
                        struct e2e_conn c;
                        uint64_t got[2];
                        char b;
                        close(go[1]);
                        close(rel[1]);
                        must_open(&c, sock);
                        if (read(go[0], &b, 1) < 0) /* start together */
                                _exit(1);
                        got[0] = fill(&c, GS_MiB);
                        got[1] = c.w.gpus[0].quota_bytes;
                        if (write(pipes[1], got, sizeof(got)) != sizeof(got))
                                _exit(1);
                        /* Hold the memory until the parent has counted. */
                        if (read(rel[0], &b, 1) < 0)
                                _exit(1);
                        _exit(failures != 0);
                }
        }
        close(go[0]);
        close(rel[0]);
        usleep(200000);
        for (int i = 0; i < n; i++)
                if (write(go[1], "g", 1) != 1)
                        return 1;
        for (int i = 0; i < n; i++) {
                uint64_t got[2];
                if (read(pipes[0], got, sizeof(got)) != sizeof(got))
                        return 1;
                total += got[0];
                quota = got[1];
        }
        close(go[1]);
        close(rel[1]);
        for (int i = 0; i < n; i++) {
                int st;
                wait(&st);
                CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a child failed");
        }
        printf("%d processes obtained %llu together, quota %llu\n", n, (unsigned long long)total,
               (unsigned long long)quota);
        CHECK(total == quota, "together %llu, quota %llu", (unsigned long long)total, (unsigned long long)quota);
        return failures != 0;
}

/* Sends raw bytes as the first message; expects an ERROR and a close. */
static void bad_hello(const char *sock, const void *msg, size_t len, const char *what)
{
        struct gs_sock_error e;
        int fd = e2e_connect(sock);
        ssize_t n;

        CHECK(fd >= 0, "%s: connect", what);
        if (fd < 0)
                return;
        CHECK(send(fd, msg, len, MSG_NOSIGNAL) == (ssize_t)len, "%s: send", what);
        n = e2e_recv(fd, &e, sizeof(e), NULL, 3000);
        CHECK(n == (ssize_t)sizeof(e) && e.h.type == GS_SOCK_ERROR && e.err < 0, "%s: no ERROR message (got %zd)", what,
              n);
        n = e2e_recv(fd, &e, sizeof(e), NULL, 3000);
        CHECK(n == 0, "%s: connection not closed (%zd)", what, n);
        close(fd);
}

static int cmd_hostile(const char *sock)
{
        struct gs_sock_hello h;
        struct e2e_conn c, d;
        struct gs_ring_msg rep;
        uint64_t off, dummy;
        int r;

        e2e_hello(&h);
        h.h.magic ^= 1;
        bad_hello(sock, &h, sizeof(h), "bad magic");
        e2e_hello(&h);
        h.h.version = 99;
        bad_hello(sock, &h, sizeof(h), "bad version");
        e2e_hello(&h);
        h.h.type = GS_SOCK_GRANT;
        bad_hello(sock, &h, sizeof(h), "wrong type");
        e2e_hello(&h);
        h.h.len = 1u << 30;
        bad_hello(sock, &h, sizeof(h), "lying length");
        e2e_hello(&h);
        bad_hello(sock, &h, 12, "short");
        {
                char big[4096];
                memset(big, 0, sizeof(big));
                memcpy(big, &h, sizeof(h));
                bad_hello(sock, big, sizeof(big), "oversized");
        }

        must_open(&c, sock);
        must_open(&d, sock);
        /* The segment is sealed: a truncation would SIGBUS the agent. */
        CHECK(ftruncate(c.shmfd, 4096) < 0 && errno == EPERM, "segment could be shrunk");
        CHECK(ftruncate(c.shmfd, 1 << 24) < 0 && errno == EPERM, "segment could be grown");
        CHECK(fcntl(c.shmfd, F_ADD_SEALS, F_SEAL_WRITE) < 0, "seals could be changed");

        r = e2e_call(&c, 99, 0, 0, 0, NULL, NULL, 0, NULL);
        CHECK(r == -EPROTO, "unknown op gave %d", r);
        r = e2e_call(&c, GS_OP_ALLOC, 7, GS_MiB, 0, NULL, NULL, 0, NULL);
        CHECK(r == -EINVAL, "gpu 7 gave %d", r);
        r = e2e_call(&c, GS_OP_ALLOC, 0xffffffffu, GS_MiB, 0, NULL, NULL, 0, NULL);
        CHECK(r == -EINVAL, "gpu 2^32-1 gave %d", r);
        r = e2e_call(&c, GS_OP_ALLOC, 0, 0, 0, NULL, NULL, 0, NULL);
        CHECK(r == -EINVAL, "size 0 gave %d", r);
        r = e2e_call(&c, GS_OP_ALLOC, 0, UINT64_MAX, 0, NULL, NULL, 0, NULL);
        CHECK(r == -ENOMEM, "size 2^64-1 gave %d", r);
        r = e2e_call(&c, GS_OP_ALLOC, 0, 1ull << 62, 0, NULL, NULL, 0, NULL);
        CHECK(r == -ENOMEM, "size 2^62 gave %d", r);
        r = e2e_call(&c, GS_OP_ALLOC, 0, GS_MiB, 5, NULL, NULL, 0, NULL);
        CHECK(r == -EINVAL, "flags 5 gave %d", r);
        r = e2e_call(&c, GS_OP_FREE, 0, 12345, 0, NULL, NULL, 0, NULL);
        CHECK(r == -ENOENT, "FREE of nothing gave %d", r);
        r = e2e_call(&c, GS_OP_RANGE, 0, UINT64_MAX, 0, NULL, NULL, 0, NULL);
        CHECK(r == -ENOENT, "RANGE of 2^64-1 gave %d", r);
        r = e2e_call(&c, GS_OP_RELEASE, 0, 0xffffffffull, 1, NULL, NULL, 0, NULL);
        CHECK(r == -EINVAL, "RELEASE of slot 2^32-1 gave %d", r);
        r = e2e_call(&c, GS_OP_RELEASE, 0, 0, UINT64_MAX, NULL, NULL, 0, NULL);
        CHECK(r == -EINVAL, "RELEASE of 2^64-1 slots gave %d", r);
        r = e2e_call(&c, GS_OP_RELEASE, 0, 0, 1, NULL, NULL, 0, NULL);
        CHECK(r == -ENOENT, "RELEASE of an empty slot gave %d", r);
        {
                /* The application's VMM ops: hostile ids and sizes change nothing. */
                struct gs_ring_msg m0, m1;
                CHECK(e2e_call(&c, GS_OP_MEMINFO, 0, 0, 0, &m0, NULL, 0, NULL) == 0, "MEMINFO failed");
                r = e2e_call(&c, GS_OP_VMM_RELEASE, 0, 12345, 0, NULL, NULL, 0, NULL);
                CHECK(r == -ENOENT, "VMM_RELEASE of an unknown id gave %d", r);
                r = e2e_call(&c, GS_OP_VMM_RELEASE, 0, UINT64_MAX, 0, NULL, NULL, 0, NULL);
                CHECK(r == -ENOENT, "VMM_RELEASE of id 2^64-1 gave %d", r);
                r = e2e_call(&c, GS_OP_VMM_CREATE, 0, 0, 0, NULL, NULL, 0, NULL);
                CHECK(r == -EINVAL, "VMM_CREATE of size 0 gave %d", r);
                r = e2e_call(&c, GS_OP_VMM_CREATE, 0, GS_MiB, 0, NULL, NULL, 0, NULL);
                CHECK(r == -EINVAL, "VMM_CREATE of 1 MiB (not a multiple of 2 MiB) gave %d", r);
                r = e2e_call(&c, GS_OP_VMM_CREATE, 0, UINT64_MAX, 0, NULL, NULL, 0, NULL);
                CHECK(r == -EINVAL, "VMM_CREATE of size 2^64-1 gave %d", r);
                r = e2e_call(&c, GS_OP_VMM_CREATE, 0, UINT64_MAX - GS_VMM_ALIGN + 1, 0, NULL, NULL, 0, NULL);
                CHECK(r == -ENOMEM, "VMM_CREATE of 2^64-2 MiB gave %d", r);
                r = e2e_call(&c, GS_OP_VMM_CREATE, 0, 2 * GS_MiB, 5, NULL, NULL, 0, NULL);
                CHECK(r == -EINVAL, "VMM_CREATE with flags 5 gave %d", r);
                r = e2e_call(&c, GS_OP_VMM_CREATE, 7, 2 * GS_MiB, 0, NULL, NULL, 0, NULL);
                CHECK(r == -EINVAL, "VMM_CREATE on gpu 7 gave %d", r);
                CHECK(e2e_call(&c, GS_OP_MEMINFO, 0, 0, 0, &m1, NULL, 0, NULL) == 0 && m1.arg[0] == m0.arg[0],
                      "hostile VMM ops changed the accounting");
        }

        /* Another process's offsets are not ours. */
        r = e2e_call(&c, GS_OP_ALLOC, 0, GS_MiB, 0, &rep, NULL, 0, NULL);
        CHECK(r == 0, "ALLOC 1 MiB: %d", r);
        off = rep.arg[0];
        r = e2e_call(&d, GS_OP_FREE, 0, off, 0, NULL, NULL, 0, NULL);
        CHECK(r == -ENOENT, "FREE of another process's block gave %d", r);
        r = e2e_call(&d, GS_OP_RANGE, 0, off, 0, NULL, NULL, 0, NULL);
        CHECK(r == -ENOENT, "RANGE of another process's block gave %d", r);
        r = e2e_call(&c, GS_OP_FREE, 0, off + 256, 0, NULL, NULL, 0, NULL);
        CHECK(r == -ENOENT, "FREE inside a block gave %d", r);
        {
                /* CUDA IPC: tokens name one live block, for the other
                 * processes of the allocation only. */
                struct gs_ring_msg ex, ex2, op;
                int fds[4];
                uint32_t nfds = 0;

                r = e2e_call(&c, GS_OP_IPC_EXPORT, 0, off + 2 * GS_MiB, 0, NULL, NULL, 0, NULL);
                CHECK(r == -ENOENT, "IPC_EXPORT of free space gave %d", r);
                r = e2e_call(&c, GS_OP_IPC_EXPORT, 0, UINT64_MAX, 0, NULL, NULL, 0, NULL);
                CHECK(r == -ENOENT, "IPC_EXPORT of offset 2^64-1 gave %d", r);
                r = e2e_call(&c, GS_OP_IPC_EXPORT, 7, off, 0, NULL, NULL, 0, NULL);
                CHECK(r == -EINVAL, "IPC_EXPORT on gpu 7 gave %d", r);
                r = e2e_call(&d, GS_OP_IPC_EXPORT, 0, off, 0, NULL, NULL, 0, NULL);
                CHECK(r == -ENOENT, "IPC_EXPORT of another process's block gave %d", r);
                r = e2e_call(&d, GS_OP_IPC_OPEN, 0, 0, 0, NULL, NULL, 0, NULL);
                CHECK(r == -ENOENT, "IPC_OPEN of token 0 gave %d", r);
                r = e2e_call(&c, GS_OP_IPC_EXPORT, 0, off + 4096, 0, &ex, NULL, 0, NULL);
                CHECK(r == 0 && ex.arg[2] == GS_MiB && ex.arg[3] == off && (ex.arg[0] | ex.arg[1]),
                      "IPC_EXPORT of an inner offset: %d, size %llu", r, (unsigned long long)ex.arg[2]);
                r = e2e_call(&c, GS_OP_IPC_EXPORT, 0, off, 0, &ex2, NULL, 0, NULL);
                CHECK(r == 0 && ex2.arg[0] == ex.arg[0] && ex2.arg[1] == ex.arg[1],
                      "a second IPC_EXPORT of the block gave another token");
                r = e2e_call(&d, GS_OP_IPC_OPEN, 0, ex.arg[0], ex.arg[1] ^ 1, NULL, NULL, 0, NULL);
                CHECK(r == -ENOENT, "IPC_OPEN of a token one bit off gave %d", r);
                r = e2e_call(&d, GS_OP_IPC_OPEN, 7, ex.arg[0], ex.arg[1], NULL, NULL, 0, NULL);
                CHECK(r == -EINVAL, "IPC_OPEN on gpu 7 gave %d", r);
                r = e2e_call(&c, GS_OP_IPC_OPEN, 0, ex.arg[0], ex.arg[1], NULL, NULL, 0, NULL);
                CHECK(r == -EINVAL, "IPC_OPEN of its own token gave %d", r);
                r = e2e_call(&d, GS_OP_IPC_OPEN, 0, ex.arg[0], ex.arg[1], &op, fds, 4, &nfds);
                CHECK(r == 0 && op.arg[1] == 1 && nfds == 1 && op.arg[0] == off % c.w.gpus[0].chunk_bytes &&
                              op.arg[2] == GS_MiB,
                      "IPC_OPEN by a sibling: %d, %u fds", r, nfds);
                for (uint32_t i = 0; i < nfds; i++)
                        close(fds[i]);
        }
        r = e2e_call(&c, GS_OP_RANGE, 0, off + 4096, 0, &rep, NULL, 0, NULL);
        CHECK(r == 0 && rep.arg[0] == off, "own block lost after the attempts");
        r = e2e_call(&c, GS_OP_IPC_EXPORT, 0, off, 0, &rep, NULL, 0, NULL);
        CHECK(r == 0, "IPC_EXPORT gave %d", r);
        r = e2e_call(&c, GS_OP_FREE, 0, off, 0, NULL, NULL, 0, NULL);
        CHECK(r == 0, "FREE of own block gave %d", r);
        r = e2e_call(&d, GS_OP_IPC_OPEN, 0, rep.arg[0], rep.arg[1], NULL, NULL, 0, NULL);
        CHECK(r == -ENOENT, "IPC_OPEN of a freed block's token gave %d", r);
        r = e2e_call(&c, GS_OP_FREE, 0, off, 0, NULL, NULL, 0, NULL);
        CHECK(r == -ENOENT, "double FREE gave %d", r);
        r = e2e_call(&c, GS_OP_PING, 0, 42, 0, &rep, NULL, 0, NULL);
        CHECK(r == 0 && rep.arg[0] == 42, "PING after all that: %d", r);

        /* Impossible ring indices: the agent drops the connection. */
        __atomic_store_n(&c.shm->req.head, c.head + 1000, __ATOMIC_RELEASE);
        gs_doorbell_ring_fd(&c.shm->agent_wake, &c.shm->agent_sleeping, c.wakefd);
        CHECK(e2e_recv(c.sock, &dummy, sizeof(dummy), NULL, 3000) == 0, "connection with a corrupt ring not dropped");
        e2e_close(&c);

        /* Data on the socket after HELLO: dropped too. */
        CHECK(send(d.sock, "junk", 4, MSG_NOSIGNAL) == 4, "send junk");
        CHECK(e2e_recv(d.sock, &dummy, sizeof(dummy), NULL, 3000) == 0, "connection sending junk not dropped");
        e2e_close(&d);

        /* Silence: no HELLO within the agent's time limit. */
        {
                int fd = e2e_connect(sock);
                struct gs_sock_error e;
                ssize_t n = e2e_recv(fd, &e, sizeof(e), NULL, 5000);
                CHECK(n == (ssize_t)sizeof(e) && e.h.type == GS_SOCK_ERROR, "silent client not told off (%zd)", n);
                close(fd);
        }
        /* The agent still serves. */
        must_open(&c, sock);
        r = e2e_call(&c, GS_OP_PING, 0, 7, 0, &rep, NULL, 0, NULL);
        CHECK(r == 0 && rep.arg[0] == 7, "agent no longer answers: %d", r);
        e2e_close(&c);
        return failures != 0;
}

/* A token of allocation A means nothing in allocation B, and nothing once
 * the exporting connection is gone. */
static int cmd_ipccross(const char *sock_a, const char *sock_b)
{
        struct e2e_conn a, a2, b;
        struct gs_ring_msg rep, ex;
        int r;

        must_open(&a, sock_a);
        must_open(&b, sock_b);
        r = e2e_call(&a, GS_OP_ALLOC, 0, 3 * GS_MiB, 0, &rep, NULL, 0, NULL);
        CHECK(r == 0, "ALLOC in A: %d", r);
        r = e2e_call(&a, GS_OP_IPC_EXPORT, 0, rep.arg[0], 0, &ex, NULL, 0, NULL);
        CHECK(r == 0, "IPC_EXPORT in A: %d", r);
        r = e2e_call(&b, GS_OP_IPC_OPEN, 0, ex.arg[0], ex.arg[1], NULL, NULL, 0, NULL);
        CHECK(r == -ENOENT, "A's token opened in allocation B: %d", r);
        must_open(&a2, sock_a);
        r = e2e_call(&a2, GS_OP_IPC_OPEN, 0, ex.arg[0], ex.arg[1], &rep, NULL, 0, NULL);
        CHECK(r == 0 && rep.arg[2] == 3 * GS_MiB, "A's token in A: %d", r);
        e2e_close(&a);
        /* The agent forgets a's exports when it sees the connection end
         * (no pidfd exit here: same process); give it a moment. */
        for (int i = 0; i < 100; i++) {
                r = e2e_call(&a2, GS_OP_IPC_OPEN, 0, ex.arg[0], ex.arg[1], NULL, NULL, 0, NULL);
                if (r == -ENOENT)
                        break;
                usleep(20000);
        }
        CHECK(r == -ENOENT, "token of a closed connection still opens: %d", r);
        e2e_close(&a2);
        e2e_close(&b);
        return failures != 0;
}

struct flood_arg {
        const char *sock;
        int stop; /* set by the main thread: __atomic accesses, not volatile (a data race) */
        uint64_t sent;
};

static void *flooder(void *arg)
{
        struct flood_arg *f = arg;
        struct e2e_conn c;
        struct gs_ring_msg rep;

        must_open(&c, f->sock);
        while (!__atomic_load_n(&f->stop, __ATOMIC_RELAXED)) {
                /* Keep the request ring full; drain replies as they come. */
                while (e2e_push(&c, GS_OP_PING, 0, 1, 0) == 0)
                        __atomic_add_fetch(&f->sent, 1, __ATOMIC_RELAXED);
                while (gs_ring_pop(&c.shm->rep, &c.tail, &rep) == 1)
                        ;
        }
        e2e_close(&c);
        return NULL;
}

static int cmd_flood(const char *sock)
{
        struct flood_arg f = { .sock = sock };
        struct e2e_conn c;
        struct gs_ring_msg rep;
        int64_t worst = 0;
        pthread_t t;

        pthread_create(&t, NULL, flooder, &f);
        usleep(100000);
        must_open(&c, sock);
        for (int i = 0; i < 200; i++) {
                int64_t t0 = gs_mono_ms();
                int r = e2e_call(&c, GS_OP_ALLOC, 0, 4096, 0, &rep, NULL, 0, NULL);
                CHECK(r == 0, "ALLOC during a flood: %d", r);
                if (r == 0)
                        CHECK(e2e_call(&c, GS_OP_FREE, 0, rep.arg[0], 0, NULL, NULL, 0, NULL) == 0,
                              "FREE during a flood");
                if (gs_mono_ms() - t0 > worst)
                        worst = gs_mono_ms() - t0;
        }
        __atomic_store_n(&f.stop, 1, __ATOMIC_RELAXED);
        pthread_join(t, NULL);
        /* Starvation shows as a call that gets no reply while the flood
         * goes on: e2e_call gives up after 5 s and the CHECKs above fail.
         * How long the calls took depends on how busy the machine is: it is
         * printed, not checked. */
        printf("flood: %llu pings pushed; worst alloc+free of the other process %lld ms (info)\n",
               (unsigned long long)f.sent, (long long)worst);
        e2e_close(&c);
        return failures != 0;
}

/* N flooders on allocation A; one process of B measures its PINGs. */
static int cmd_floodx(const char *sock_a, const char *sock_b, int n)
{
        struct flood_arg f = { .sock = sock_a };
        pthread_t t[256];
        struct e2e_conn c;
        struct gs_ring_msg rep;
        static int64_t us[2000];
        int64_t worst = 0;
        int k = 0;

        if (n < 1 || n > 256)
                return 2;
        for (k = 0; k < n; k++)
                pthread_create(&t[k], NULL, flooder, &f);
        usleep(200000);
        must_open(&c, sock_b);
        for (int i = 0; i < 2000; i++) {
                int64_t a = gs_mono_ns();
                int r = e2e_call(&c, GS_OP_PING, 0, (uint64_t)i, 0, &rep, NULL, 0, NULL);
                CHECK(r == 0 && rep.arg[0] == (uint64_t)i, "PING %d of B during A's flood: %d", i, r);
                us[i] = (gs_mono_ns() - a) / 1000;
                if (us[i] > worst)
                        worst = us[i];
                if (r)
                        break;
        }
        __atomic_store_n(&f.stop, 1, __ATOMIC_RELAXED);
        for (int i = 0; i < k; i++)
                pthread_join(t[i], NULL);
        for (int i = 1; i < 2000; i++) /* insertion sort for the percentile */
                for (int j = i; j > 0 && us[j - 1] > us[j]; j--) {
                        int64_t x = us[j];
                        us[j] = us[j - 1];
                        us[j - 1] = x;
                }
        printf("floodx: %d connections of A pushed %llu pings; B: 2000 pings, median %lld us, p99 %lld us, worst %lld us\n",
               n, (unsigned long long)__atomic_load_n(&f.sent, __ATOMIC_RELAXED), (long long)us[1000],
               (long long)us[1980], (long long)worst);
        /* Starved, B's pings time out (5 s): only a hang fails; the figures are printed. */
        CHECK(worst < 5000000, "a process of B waited %lld us during A's flood", (long long)worst);
        e2e_close(&c);
        return failures != 0;
}

/* Opens n connections; each either registers (WELCOME) or is refused with
 * an ERROR before any WELCOME.  Prints "registered K refused R err E" and
 * holds them until stdin closes. */
static int cmd_conns(const char *sock, int n)
{
        struct e2e_conn *c = calloc((size_t)(n > 0 ? n : 1), sizeof(*c));
        int ok = 0, refused = 0, err = 0;
        char b;

        if (!c)
                return 2;
        for (int i = 0; i < n; i++) {
                int r = e2e_open(&c[i], sock);
                if (r == 0) {
                        ok++;
                        continue;
                }
                /* e2e_open returns the ERROR's code; anything else (EOF,
                 * a WELCOME without fds) is a protocol failure. */
                refused++;
                if (!err)
                        err = r;
                CHECK(r == -EMFILE, "connection %d: %d (%s), not an ERROR with -EMFILE", i, r, strerror(-r));
                e2e_close(&c[i]);
        }
        printf("registered %d refused %d err %d\n", ok, refused, err);
        fflush(stdout);
        while (read(0, &b, 1) > 0)
                ;
        for (int i = 0; i < n; i++)
                if (c[i].sock > 0)
                        e2e_close(&c[i]);
        free(c);
        return failures != 0;
}

#define WAKEUP_HANG_MS 10000

struct wakeup_arg {
        const char *sock;
        int n;
        uint64_t over5, hangs, done;
        int64_t max_us;
        int err;
};

/* One request, rung once (e2e_push), its reply waited for without ever
 * ringing again.  Returns its status, or -ETIMEDOUT for a hang. */
static int ring_once(struct e2e_conn *c, uint32_t op, uint64_t a0, struct gs_ring_msg *rep, int64_t *us)
{
        int64_t t0 = gs_mono_ns();
        int r = e2e_push(c, op, 0, a0, 0);

        if (r == 0)
                r = e2e_reply(c, rep, WAKEUP_HANG_MS);
        *us = (gs_mono_ns() - t0) / 1000;
        if (r < 0)
                return r;
        if (op == GS_OP_ALLOC && rep->status == 0)
                for (uint64_t i = 0; i < rep->arg[1]; i++) {
                        struct gs_sock_grant g;
                        int fd;
                        if (e2e_recv(c->sock, &g, sizeof(g), &fd, WAKEUP_HANG_MS) != (ssize_t)sizeof(g) || fd < 0)
                                return -EPROTO;
                        close(fd);
                }
        return rep->status;
}

static void *waker(void *arg)
{
        struct wakeup_arg *w = arg;
        struct e2e_conn c;
        struct gs_ring_msg rep;

        must_open(&c, w->sock);
        for (int i = 0; i < w->n && !w->err; i++)
                for (int k = 0; k < 2; k++) {
                        int64_t us;
                        int r = k == 0 ? ring_once(&c, GS_OP_ALLOC, 256, &rep, &us)
                                       : ring_once(&c, GS_OP_FREE, rep.arg[0], &rep, &us);
                        if (r == -ETIMEDOUT) {
                                w->hangs++;
                                w->err = r;
                                break;
                        }
                        if (r != 0) {
                                w->err = r;
                                break;
                        }
                        w->done++;
                        w->over5 += us > 5000;
                        if (us > w->max_us)
                                w->max_us = us;
                }
        e2e_close(&c);
        return NULL;
}

static int cmd_wakeup(const char *sock, int nthreads, int n)
{
        struct wakeup_arg w[16];
        pthread_t t[16];
        uint64_t over5 = 0, hangs = 0, done = 0;
        int64_t max_us = 0;

        if (nthreads < 1 || nthreads > 16 || n < 1) {
                fprintf(stderr, "wakeup: 1 to 16 threads, at least 1 request\n");
                return 2;
        }
        for (int i = 0; i < nthreads; i++) {
                w[i] = (struct wakeup_arg){ .sock = sock, .n = n };
                pthread_create(&t[i], NULL, waker, &w[i]);
        }
        for (int i = 0; i < nthreads; i++) {
                pthread_join(t[i], NULL);
                over5 += w[i].over5;
                hangs += w[i].hangs;
                done += w[i].done;
                if (w[i].max_us > max_us)
                        max_us = w[i].max_us;
                CHECK(w[i].err == 0 || w[i].err == -ETIMEDOUT, "thread %d: a request failed: %d", i, w[i].err);
        }
        printf("wakeup: %llu requests, %llu over 5 ms, longest %.1f ms, %llu unanswered for %d ms\n",
               (unsigned long long)done, (unsigned long long)over5, max_us / 1000.0, (unsigned long long)hangs,
               WAKEUP_HANG_MS);
        CHECK(hangs == 0, "%llu requests rung once were never answered (a lost wake-up)", (unsigned long long)hangs);
        return failures != 0;
}

int main(int argc, char **argv)
{
        signal(SIGPIPE, SIG_IGN);
        if (argc == 3 && strcmp(argv[1], "quota") == 0)
                return cmd_quota(argv[2]);
        if (argc == 4 && strcmp(argv[1], "hold") == 0)
                return cmd_hold(argv[2], argv[3]);
        if (argc == 3 && strcmp(argv[1], "big") == 0)
                return cmd_big(argv[2]);
        if (argc == 4 && strcmp(argv[1], "concurrent") == 0)
                return cmd_concurrent(argv[2], atoi(argv[3]));
        if (argc == 3 && strcmp(argv[1], "hostile") == 0)
                return cmd_hostile(argv[2]);
        if (argc == 4 && strcmp(argv[1], "ipccross") == 0)
                return cmd_ipccross(argv[2], argv[3]);
        if (argc == 3 && strcmp(argv[1], "ipcforge") == 0)
                return e2e_wire_ipcforge(argv[2]);
        if (argc == 3 && strcmp(argv[1], "flood") == 0)
                return cmd_flood(argv[2]);
        if (argc == 5 && strcmp(argv[1], "floodx") == 0)
                return cmd_floodx(argv[2], argv[3], atoi(argv[4]));
        if (argc == 4 && strcmp(argv[1], "conns") == 0)
                return cmd_conns(argv[2], atoi(argv[3]));
        if (argc == 5 && strcmp(argv[1], "wakeup") == 0)
                return cmd_wakeup(argv[2], atoi(argv[3]), atoi(argv[4]));
        fprintf(stderr, "usage: e2e_wire quota|hold|big|concurrent|hostile|flood|floodx|conns|wakeup SOCK [ARG]\n");
        return 2;
}
