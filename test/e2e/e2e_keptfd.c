/* e2e_keptfd.c — a hostile process that keeps every fd the agent sends it
 * (test_keptfd.py), speaking the raw wire protocol as a process that does
 * not use the hook would.  On the fake driver an fd is the memory itself
 * (a memfd): the process maps what it keeps and writes its own pattern on
 * every page of its VMM allocations, so what it counts is memory it really
 * holds, each page its own.  On a GPU the fds are kept as they are.  (A
 * chunk it freed is its allocation's again:
 * the agent zeroes it and grants it to the allocation's processes; what A
 * wrote there is not checked.)
 *
 *   e2e_keptfd keepfd SOCK ROUNDS   keeps the fd of every chunk and VMM
 *                                   allocation it is sent, frees and
 *                                   releases them, asks again, ROUNDS times
 *   e2e_keptfd vmm SOCK ROUNDS ORDER
 *                                   ROUNDS times the steps of ORDER, each
 *                                   keeping every fd it is sent:
 *                                     v  a VMM allocation of the whole quota
 *                                        (GS_OP_VMM_CREATE), released
 *                                     h  a VMM allocation of one chunk,
 *                                        released
 *                                     c  chunks of the whole quota
 *                                        (GS_OP_ALLOC), freed and released
 *
 *   e2e_keptfd spill SOCK BYTES     a borrower's mover that never moves
 *                                   (test_spill.py "hostile_keep"):
 *                                   allocates BYTES in chunks and prints
 *                                   "ready N"; on each ask of the agent's
 *                                   (gs_shm.spill) asks GS_OP_SPILL, keeps
 *                                   the fd of every host memory it is sent
 *                                   (its pattern written) and answers
 *                                   GS_OP_SPILL_DONE with moved 0.  On
 *                                   stdin "report": prints "spill rounds R
 *                                   sent S", then reports as the others
 *
 * They print "kept N distinct M bytes created C refused R" (M: the memory
 * it can still reach; C, R: VMM creates and chunk allocations served and
 * refused), then wait for a line on stdin, check the pattern on every page
 * of the VMM allocations they kept, print "verified P pages, W wrong" and
 * exit (0 when every page
 * held its pattern). */
#include <linux/kcmp.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "e2e_wire.h"

#define KEEP_MAX 4096
#define PAGE 4096u

struct kept {
        int fd[KEEP_MAX];
        uint64_t ino[KEEP_MAX], size[KEEP_MAX];
        void *map[KEEP_MAX];
        bool mine[KEEP_MAX]; /* a VMM allocation's: the pattern is checked */
        uint32_t n;
        uint32_t created, refused;
};

static uint64_t pattern(uint32_t i, uint64_t page)
{
        return (UINT64_C(0x6b657074) << 32) ^ ((uint64_t)i << 20) ^ page;
}

/* Whether fds a and b are the same open file (the agent sends a chunk's
 * one exported fd each time it grants it). */
static bool same_file(int a, int b)
{
        pid_t me = getpid();

        return syscall(SYS_kcmp, me, me, KCMP_FILE, a, b) == 0;
}

/* Adds fd (memory of size bytes) to k.  On the fake driver (a memfd):
 * unless its memory is already there (same inode), mapped, its pattern
 * written on every page (mine: checked at the end).  A real driver's fd
 * cannot be mapped: it is kept as it is, counted unless the same file is
 * already kept. */
static void keep(struct kept *k, int fd, uint64_t size, bool mine)
{
        struct stat st;
        void *m = MAP_FAILED;

        if (fd < 0)
                return;
        if (k->n >= KEEP_MAX || fstat(fd, &st) < 0) {
                close(fd);
                return;
        }
        if (st.st_size > 0) {
                for (uint32_t i = 0; i < k->n; i++)
                        if (k->ino[i] == (uint64_t)st.st_ino) {
                                close(fd);
                                return;
                        }
                m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        }
        if (m == MAP_FAILED)
                for (uint32_t i = 0; i < k->n; i++)
                        if (!k->map[i] && same_file(k->fd[i], fd)) { /* sent again */
                                close(fd);
                                return;
                        }
        if (m != MAP_FAILED) {
                size = (uint64_t)st.st_size;
                for (uint64_t p = 0; p < size / PAGE; p++)
                        *(volatile uint64_t *)((char *)m + p * PAGE) = pattern(k->n, p);
        }
        k->fd[k->n] = fd;
        k->ino[k->n] = (uint64_t)st.st_ino;
        k->size[k->n] = size;
        k->mine[k->n] = mine && m != MAP_FAILED;
        k->map[k->n++] = m == MAP_FAILED ? NULL : m;
}

/* A VMM allocation of size bytes: its fd kept, then released. */
static void vmm_round(struct kept *k, struct e2e_conn *c, uint64_t size)
{
        struct gs_ring_msg rep;

        if (e2e_push(c, GS_OP_VMM_CREATE, 0, size, 0) < 0 || e2e_reply(c, &rep, 5000) < 0) {
                fprintf(stderr, "VMM_CREATE of %llu bytes: no reply\n", (unsigned long long)size);
                exit(1);
        }
        if (rep.status != 0) {
                k->refused++;
                return;
        }
        /* The grant was sent before the reply. */
        struct gs_sock_vmm_grant g;
        int fd = -1;
        if (e2e_recv(c->sock, &g, sizeof(g), &fd, 5000) == (ssize_t)sizeof(g))
                keep(k, fd, size, true);
        else if (fd >= 0)
                close(fd);
        k->created++;
        (void)e2e_call(c, GS_OP_VMM_RELEASE, 0, rep.arg[0], 0, NULL, NULL, 0, NULL);
}

/* size bytes of chunks: their fds kept, the block freed and its chunks
 * released. */
static void chunk_round(struct kept *k, struct e2e_conn *c, uint64_t size)
{
        struct gs_ring_msg rep;
        int fds[64];
        uint32_t n = 0;

        if (e2e_call(c, GS_OP_ALLOC, 0, size, 0, &rep, fds, 64, &n) != 0) {
                k->refused++;
                return;
        }
        k->created++;
        for (uint32_t i = 0; i < n; i++)
                keep(k, fds[i], c->w.gpus[0].chunk_bytes, false);
        if (e2e_call(c, GS_OP_FREE, 0, rep.arg[0], 0, &rep, NULL, 0, NULL) == 0 && rep.arg[1])
                (void)e2e_call(c, GS_OP_RELEASE, 0, rep.arg[0], rep.arg[1], NULL, NULL, 0, NULL);
}

/* Prints what it kept, waits for a line on stdin, checks every page. */
static int report(struct kept *k, struct e2e_conn *c)
{
        uint64_t total = 0, pages = 0, bad = 0;
        char line[16];

        for (uint32_t i = 0; i < k->n; i++)
                total += k->size[i];
        printf("kept %u distinct %llu bytes created %u refused %u\n", k->n, (unsigned long long)total, k->created,
               k->refused);
        fflush(stdout);
        (void)!fgets(line, sizeof(line), stdin);
        for (uint32_t i = 0; i < k->n; i++) {
                for (uint64_t p = 0; k->mine[i] && p < k->size[i] / PAGE; p++, pages++)
                        if (*(volatile uint64_t *)((char *)k->map[i] + p * PAGE) != pattern(i, p))
                                bad++;
                if (k->map[i])
                        munmap(k->map[i], (size_t)k->size[i]);
                close(k->fd[i]);
        }
        printf("verified %llu pages, %llu wrong\n", (unsigned long long)pages, (unsigned long long)bad);
        fflush(stdout);
        e2e_close(c);
        return bad != 0;
}

static void must_open(struct e2e_conn *c, const char *sock)
{
        int r = e2e_open(c, sock);

        if (r < 0) {
                fprintf(stderr, "FAIL: cannot register on %s: %s\n", sock, strerror(-r));
                exit(1);
        }
}

static int cmd_keepfd(const char *sock, int rounds)
{
        static struct kept k;
        struct e2e_conn c;
        uint64_t chunk;

        must_open(&c, sock);
        chunk = c.w.gpus[0].chunk_bytes;
        for (int i = 0; i < rounds; i++) {
                struct gs_ring_msg rep;
                int fds[8];
                uint32_t n = 0;

                /* Two chunks, so that freeing asks for one back (one stays cached). */
                if (e2e_call(&c, GS_OP_ALLOC, 0, 2 * chunk, 0, &rep, fds, 8, &n) == 0) {
                        uint64_t off = rep.arg[0];
                        for (uint32_t j = 0; j < n; j++)
                                keep(&k, fds[j], chunk, false);
                        if (e2e_call(&c, GS_OP_FREE, 0, off, 0, &rep, NULL, 0, NULL) == 0 && rep.arg[1])
                                (void)e2e_call(&c, GS_OP_RELEASE, 0, rep.arg[0], rep.arg[1], NULL, NULL, 0, NULL);
                }
                vmm_round(&k, &c, chunk);
        }
        return report(&k, &c);
}

static int cmd_vmm(const char *sock, int rounds, const char *order)
{
        static struct kept k;
        struct e2e_conn c;
        uint64_t chunk, quota;

        must_open(&c, sock);
        chunk = c.w.gpus[0].chunk_bytes;
        quota = c.w.gpus[0].quota_bytes;
        for (int i = 0; i < rounds; i++)
                for (const char *s = order; *s; s++) {
                        if (*s == 'v')
                                vmm_round(&k, &c, quota);
                        else if (*s == 'h')
                                vmm_round(&k, &c, chunk);
                        else if (*s == 'c')
                                chunk_round(&k, &c, quota);
                        else
                                return 2;
                }
        return report(&k, &c);
}

/* One ask of the agent's: GS_OP_SPILL until it names nothing, every fd
 * kept, nothing moved.  Adds the batches and fds to *rounds, *sent. */
static void spill_ask(struct kept *k, struct e2e_conn *c, uint32_t *rounds, uint32_t *sent)
{
        for (int r = 0; r < 8; r++) {
                struct gs_ring_msg rep;
                if (e2e_call(c, GS_OP_SPILL, 0, 0, 0, &rep, NULL, 0, NULL) != 0 || rep.arg[0] == 0 ||
                    rep.arg[0] > GS_MOVE_MAX)
                        return;
                /* The moves' fds were sent before the reply. */
                for (uint64_t i = 0; i < rep.arg[0]; i++) {
                        struct gs_sock_grant g;
                        int fd = -1;
                        if (e2e_recv(c->sock, &g, sizeof(g), &fd, 5000) == (ssize_t)sizeof(g) && fd >= 0) {
                                keep(k, fd, c->w.gpus[0].chunk_bytes, rep.arg[1] == GS_MOVE_TO_HOST);
                                (*sent)++;
                        } else if (fd >= 0) {
                                close(fd);
                        }
                }
                (*rounds)++;
                (void)e2e_call(c, GS_OP_SPILL_DONE, 0, 0, rep.arg[1], NULL, NULL, 0, NULL);
        }
}

static int cmd_spill(const char *sock, uint64_t bytes)
{
        static struct kept k;
        struct e2e_conn c;
        struct gs_ring_msg rep;
        int fds[64];
        uint32_t n = 0, rounds = 0, sent = 0, seen;
        char line[16];

        must_open(&c, sock);
        if (!(c.w.h.reserved & GS_FEAT_SPILL)) {
                fprintf(stderr, "FAIL: the agent offers no moves (GS_FEAT_SPILL)\n");
                return 1;
        }
        seen = __atomic_load_n(&c.shm->spill, __ATOMIC_ACQUIRE);
        if (e2e_call(&c, GS_OP_ALLOC, 0, bytes, 0, &rep, fds, 64, &n) != 0) {
                fprintf(stderr, "FAIL: %llu bytes refused\n", (unsigned long long)bytes);
                return 1;
        }
        for (uint32_t i = 0; i < n; i++)
                close(fds[i]); /* the chunks stay this process's in the agent's books */
        printf("ready %llu\n", (unsigned long long)(n * c.w.gpus[0].chunk_bytes));
        fflush(stdout);
        for (;;) {
                struct pollfd pf = { .fd = 0, .events = POLLIN };
                if (poll(&pf, 1, 10) > 0) {
                        if (!fgets(line, sizeof(line), stdin) || strncmp(line, "report", 6) != 0)
                                return 0;
                        printf("spill rounds %u sent %u\n", rounds, sent);
                        return report(&k, &c);
                }
                uint32_t v = __atomic_load_n(&c.shm->spill, __ATOMIC_ACQUIRE);
                if (v != seen) {
                        seen = v;
                        spill_ask(&k, &c, &rounds, &sent);
                }
        }
}

int main(int argc, char **argv)
{
        signal(SIGPIPE, SIG_IGN);
        if (argc == 4 && strcmp(argv[1], "keepfd") == 0)
                return cmd_keepfd(argv[2], atoi(argv[3]));
        if (argc == 5 && strcmp(argv[1], "vmm") == 0)
                return cmd_vmm(argv[2], atoi(argv[3]), argv[4]);
        if (argc == 4 && strcmp(argv[1], "spill") == 0)
                return cmd_spill(argv[2], strtoull(argv[3], NULL, 0));
        fprintf(stderr, "usage: e2e_keptfd keepfd SOCK ROUNDS | vmm SOCK ROUNDS ORDER | spill SOCK BYTES\n");
        return 2;
}
