/* check_handover_codec.c — the handover's messages (gs_handover_codec.h)
 * against hostile and malformed input: frames cut short, of another magic
 * or version or type, counts past their bounds, fds that do not match the
 * entries, indices out of range or given twice.  Each is refused or
 * dropped, and no fd is left open behind it (every test ends with as many
 * descriptors as it began with; ASan finds the memory); valid messages
 * round-trip.  Frames go over a real SOCK_SEQPACKET socketpair, the
 * hostile ones written raw. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_handover.h"
#include "gs_handover_codec.h"
#include "gs_ledger.h"
#include "gs_log.h"

#define HDR offsetof(struct gs_ho_msg, ent)
#define CHUNK_BYTES (UINT64_C(64) << 20)

static int sv[2] = { -1, -1 }; /* [0] the peer (raw frames), [1] the codec's */
static int fds_at_start;
static struct gs_ho_msg m; /* what the codec received */

static void setup(void)
{
        gs_log_init("check_handover_codec", GS_LOG_ERROR);
        fds_at_start = gs_check_count_fds();
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
}

/* Every test: nothing left open once the socket is closed. */
static void teardown(void)
{
        close(sv[0]);
        close(sv[1]);
        ck_assert_int_eq(gs_check_count_fds(), fds_at_start);
}

/* n fresh descriptors (memfds of one page: "chunks"), each its own file. */
static void new_fds(int *fds, uint32_t n)
{
        for (uint32_t i = 0; i < n; i++) {
                fds[i] = memfd_create("chunk", MFD_CLOEXEC);
                ck_assert_int_ge(fds[i], 0);
        }
}

static void close_fds(const int *fds, uint32_t n)
{
        for (uint32_t i = 0; i < n; i++)
                close(fds[i]);
}

/* A frame of len bytes as is, with nfds of the fds (SCM_RIGHTS); the
 * sender's copies are closed after (as if they were in flight only). */
static void send_raw(const void *buf, size_t len, const int *fds, uint32_t nfds)
{
        char cbuf[CMSG_SPACE(sizeof(int) * 256)];
        struct iovec iov = { (void *)buf, len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

        ck_assert_uint_le(nfds, 253);
        if (nfds) {
                memset(cbuf, 0, sizeof(cbuf));
                mh.msg_control = cbuf;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
                memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
        }
        ck_assert_int_eq(sendmsg(sv[0], &mh, MSG_NOSIGNAL), (ssize_t)len);
        close_fds(fds, nfds);
}

/* A well-formed header of type; a CHUNKS of n entries, the first nfd
 * flagged as carrying their fd, chunk ids first, first + 1, ... */
static struct gs_ho_msg *frame(uint16_t type, uint32_t n, uint32_t nfd, uint32_t first)
{
        static struct gs_ho_msg f;

        memset(&f, 0, sizeof(f));
        f.magic = GS_HO_MAGIC;
        f.version = GS_HO_VERSION;
        f.type = type;
        f.n = n;
        for (uint32_t i = 0; i < n && i < GS_HO_MAX_FDS; i++)
                f.ent[i] = (struct gs_ho_ent){ first + i, i < nfd ? GS_HO_FD : 0, 1000 + first + i };
        return &f;
}

/* Sends len bytes of f with nfds new fds; what the codec says of it (a
 * message of type want) into m, got and ngot: on an error, no fd. */
static int relay(const struct gs_ho_msg *f, size_t len, uint32_t nfds, uint16_t want, int *got, uint32_t *ngot)
{
        int fds[256];

        new_fds(fds, nfds);
        send_raw(f, len, fds, nfds);
        *ngot = 99;
        int r = gs_ho_recv(sv[1], &m, want, got, ngot, 1000);
        if (r < 0)
                ck_assert_uint_eq(*ngot, 0);
        return r;
}

/* The same, the fds received closed. */
static int hostile(const struct gs_ho_msg *f, size_t len, uint32_t nfds, uint16_t want)
{
        int got[GS_HO_MAX_FDS];
        uint32_t ngot;
        int r = relay(f, len, nfds, want, got, &ngot);

        close_fds(got, ngot);
        return r;
}

static bool same_file(int a, int b)
{
        struct stat sa, sb;

        ck_assert_int_eq(fstat(a, &sa), 0);
        ck_assert_int_eq(fstat(b, &sb), 0);
        return sa.st_ino == sb.st_ino && sa.st_dev == sb.st_dev;
}

/* ---- frames ---- */

START_TEST(test_roundtrip)
{
        struct gs_ho_msg out;
        int fds[2], got[GS_HO_MAX_FDS];
        uint32_t ngot;

        memset(&out, 0, sizeof(out));
        out.type = GS_HO_GPU;
        out.nchunks = 7;
        out.arg = CHUNK_BYTES;
        memset(out.uuid, 0xab, 16);
        ck_assert_int_eq(gs_ho_send(sv[0], &out, NULL, 0), 0);
        ck_assert_int_eq(gs_ho_recv(sv[1], &m, GS_HO_GPU, got, &ngot, 1000), 0);
        ck_assert_uint_eq(ngot, 0);
        ck_assert_uint_eq(m.nchunks, 7);
        ck_assert_uint_eq(m.arg, CHUNK_BYTES);
        ck_assert_mem_eq(m.uuid, out.uuid, 16);

        memset(&out, 0, sizeof(out));
        out.type = GS_HO_CHUNKS;
        out.n = 3;
        out.ent[0] = (struct gs_ho_ent){ 4, GS_HO_FD | GS_HO_WRITTEN, 41 };
        out.ent[1] = (struct gs_ho_ent){ 5, 0, 51 };
        out.ent[2] = (struct gs_ho_ent){ 6, GS_HO_FD, 61 };
        new_fds(fds, 2);
        ck_assert_int_eq(gs_ho_send(sv[0], &out, fds, 2), 0);
        ck_assert_int_eq(gs_ho_recv(sv[1], &m, 0, got, &ngot, 1000), 0);
        ck_assert_uint_eq(m.type, GS_HO_CHUNKS);
        ck_assert_uint_eq(m.n, 3);
        ck_assert_mem_eq(m.ent, out.ent, 3 * sizeof(out.ent[0]));
        ck_assert_uint_eq(ngot, 2);
        ck_assert(same_file(got[0], fds[0]));
        ck_assert(same_file(got[1], fds[1]));
        close_fds(got, 2);
        close_fds(fds, 2);
}
END_TEST

START_TEST(test_truncated)
{
        for (size_t len = 1; len < HDR; len += 7)
                ck_assert_int_eq(hostile(frame(GS_HO_SENT, 0, 0, 0), len, 0, 0), -EPROTO);
        /* A CHUNKS whose entries are cut: shorter than its count says, or
         * longer (a count too small for the bytes). */
        ck_assert_int_eq(hostile(frame(GS_HO_CHUNKS, 3, 3, 0), HDR + 2 * sizeof(struct gs_ho_ent), 3, 0), -EPROTO);
        ck_assert_int_eq(hostile(frame(GS_HO_CHUNKS, 3, 3, 0), HDR + 3 * sizeof(struct gs_ho_ent) - 1, 3, 0), -EPROTO);
        struct gs_ho_msg *f = frame(GS_HO_CHUNKS, 3, 2, 0);
        f->n = 2;
        ck_assert_int_eq(hostile(f, HDR + 3 * sizeof(struct gs_ho_ent), 2, 0), -EPROTO);
}
END_TEST

START_TEST(test_magic_version_type)
{
        struct gs_ho_msg *f = frame(GS_HO_CHUNKS, 2, 2, 0);
        f->magic ^= 1;
        ck_assert_int_eq(hostile(f, gs_ho_msg_len(f), 2, 0), -EPROTO);
        f = frame(GS_HO_CHUNKS, 2, 2, 0);
        f->version = GS_HO_VERSION + 1;
        ck_assert_int_eq(hostile(f, gs_ho_msg_len(f), 2, 0), -EPROTO);
        /* Not the type the step waits for; FAIL says the other gave up. */
        f = frame(GS_HO_CHUNKS, 2, 2, 0);
        ck_assert_int_eq(hostile(f, gs_ho_msg_len(f), 2, GS_HO_READY), -EPROTO);
        f = frame(GS_HO_FAIL, 0, 0, 0);
        ck_assert_int_eq(hostile(f, HDR, 0, GS_HO_READY), -ECANCELED);
        f = frame(GS_HO_ROOM, 0, 0, 0);
        ck_assert_int_eq(hostile(f, HDR, 0, GS_HO_ROOM), 0);
}
END_TEST

/* Counts past the bound, and frames past the message's size. */
START_TEST(test_huge)
{
        static char big[sizeof(struct gs_ho_msg) + 4096];
        struct gs_ho_msg *f = frame(GS_HO_CHUNKS, GS_HO_MAX_FDS + 1, 0, 0);

        ck_assert_int_eq(hostile(f, HDR, 0, 0), -EPROTO);
        f->n = UINT32_MAX;
        ck_assert_int_eq(hostile(f, HDR, 0, 0), -EPROTO);
        memcpy(big, frame(GS_HO_CHUNKS, GS_HO_MAX_FDS, 0, 0), sizeof(struct gs_ho_msg));
        ck_assert_int_eq(hostile((struct gs_ho_msg *)big, sizeof(big), 3, 0), -EPROTO);
        /* More fds than a message may carry (SCM_MAX_FD's worth): none kept. */
        f = frame(GS_HO_CHUNKS, GS_HO_MAX_FDS, GS_HO_MAX_FDS, 0);
        ck_assert_int_eq(hostile(f, gs_ho_msg_len(f), 253, 0), -EPROTO);
}
END_TEST

/* Fds that do not match the entries flagged GS_HO_FD; fds on a message
 * that carries none. */
START_TEST(test_fd_count)
{
        struct gs_ho_msg *f = frame(GS_HO_CHUNKS, 4, 2, 0);

        ck_assert_int_eq(hostile(f, gs_ho_msg_len(f), 1, 0), -EPROTO);
        ck_assert_int_eq(hostile(f, gs_ho_msg_len(f), 3, 0), -EPROTO);
        ck_assert_int_eq(hostile(f, gs_ho_msg_len(f), 0, 0), -EPROTO);
        ck_assert_int_eq(hostile(f, gs_ho_msg_len(f), 2, 0), 0);
        const uint16_t none[] = { GS_HO_PREPARE, GS_HO_ROOM, GS_HO_TAKE, GS_HO_GPU, GS_HO_SENT, GS_HO_READY };
        for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
                f = frame(none[i], 0, 0, 0);
                ck_assert_int_eq(hostile(f, HDR, 2, 0), -EPROTO);
        }
        /* A receiver that takes no fds: a CHUNKS with some is refused,
         * and those that came are closed (teardown counts). */
        int fds[2];
        uint32_t ngot = 7;
        f = frame(GS_HO_CHUNKS, 2, 2, 0);
        new_fds(fds, 2);
        send_raw(f, gs_ho_msg_len(f), fds, 2);
        ck_assert_int_eq(gs_ho_recv(sv[1], &m, 0, NULL, &ngot, 1000), -EPROTO);
        ck_assert_uint_eq(ngot, 0);
}
END_TEST

START_TEST(test_gone_and_silent)
{
        uint32_t ngot;
        int got[GS_HO_MAX_FDS];

        ck_assert_int_eq(gs_ho_recv(sv[1], &m, 0, got, &ngot, 0), -ETIMEDOUT);
        close(sv[0]);
        sv[0] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0); /* closed again by teardown */
        ck_assert_int_eq(gs_ho_recv(sv[1], &m, 0, got, &ngot, 1000), -ECONNRESET);
}
END_TEST

/* The sender refuses what it could not send whole. */
START_TEST(test_send_bounds)
{
        struct gs_ho_msg out;
        int fds[1] = { 0 };

        memset(&out, 0, sizeof(out));
        out.type = GS_HO_CHUNKS;
        out.n = GS_HO_MAX_FDS + 1;
        ck_assert_int_eq(gs_ho_send(sv[0], &out, fds, 0), -EINVAL);
        out.n = 1;
        ck_assert_int_eq(gs_ho_send(sv[0], &out, fds, GS_HO_MAX_FDS + 1), -EINVAL);
}
END_TEST

/* ---- PREPARE's answer: the snapshot ---- */

/* Receives f sent with nfds new fds and adds it to s. */
static int snap_msg(struct gs_ho_snapset *s, const struct gs_ho_msg *f, uint32_t nfds)
{
        int got[GS_HO_MAX_FDS];
        uint32_t ngot;

        ck_assert_int_eq(relay(f, gs_ho_msg_len(f), nfds, 0, got, &ngot), 0);
        return gs_ho_snap_add(s, &m, got, ngot);
}

static struct gs_ho_msg *gpu_frame(uint8_t id, uint32_t nchunks, uint64_t chunk_bytes)
{
        struct gs_ho_msg *f = frame(GS_HO_GPU, 0, 0, 0);

        memset(f->uuid, id, 16);
        f->nchunks = nchunks;
        f->arg = chunk_bytes;
        return f;
}

START_TEST(test_snapshot)
{
        struct gs_ho_snapset s = { 0 };
        uint8_t u1[16], u2[16];

        memset(u1, 1, 16);
        memset(u2, 2, 16);
        /* Chunks before any GPU. */
        ck_assert_int_eq(snap_msg(&s, frame(GS_HO_CHUNKS, 2, 2, 0), 2), -EPROTO);
        ck_assert_int_eq(snap_msg(&s, gpu_frame(1, 8, CHUNK_BYTES), 0), 0);
        ck_assert_int_eq(snap_msg(&s, frame(GS_HO_CHUNKS, 3, 3, 0), 3), 0);
        /* Every entry of a snapshot comes with its fd. */
        ck_assert_int_eq(snap_msg(&s, frame(GS_HO_CHUNKS, 3, 2, 3), 2), -EPROTO);
        ck_assert_int_eq(snap_msg(&s, gpu_frame(2, 8, CHUNK_BYTES), 0), 0);
        ck_assert_int_eq(snap_msg(&s, frame(GS_HO_CHUNKS, 1, 1, 0), 1), 0);
        /* Another message than GPU or CHUNKS. */
        ck_assert_int_eq(snap_msg(&s, frame(GS_HO_ROOM, 0, 0, 0), 0), -EPROTO);
        ck_assert_uint_eq(s.n, 2);

        /* By GPU and memid, once. */
        int fd = gs_ho_snap_take(&s, u1, 1001);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(gs_ho_snap_take(&s, u1, 1001), -1);
        close(fd);
        ck_assert_int_eq(gs_ho_snap_take(&s, u2, 1001), -1);
        fd = gs_ho_snap_take(&s, u2, 1000);
        ck_assert_int_ge(fd, 0);
        close(fd);
        ck_assert_int_eq(gs_ho_snap_take(&s, u1, 99), -1);
        gs_ho_snap_free(&s); /* the rest closed */
        ck_assert_uint_eq(s.n, 0);
        ck_assert_ptr_null(s.snap);
}
END_TEST

/* GPU messages without end: the set stops growing at its bound. */
START_TEST(test_snapshot_gpus_bounded)
{
        struct gs_ho_snapset s = { 0 };
        struct gs_ho_msg *f = gpu_frame(1, 8, CHUNK_BYTES);

        for (uint32_t i = 0; i < GS_HO_MAX_GPUS; i++)
                ck_assert_int_eq(gs_ho_snap_add(&s, f, NULL, 0), 0);
        ck_assert_int_eq(gs_ho_snap_add(&s, f, NULL, 0), -EPROTO);
        ck_assert_uint_eq(s.n, GS_HO_MAX_GPUS);
        gs_ho_snap_free(&s);
}
END_TEST

/* ---- TAKE's answer: each GPU's chunks ---- */

static struct gs_gpu gpus[2];
static struct gs_gpu_inherit *inh; /* freed by gs_handover_inherit_free */

static void take_setup(struct gs_ho_take *t, struct gs_ho_snapset *snap)
{
        memset(gpus, 0, sizeof(gpus));
        inh = calloc(2, sizeof(*inh));
        ck_assert_ptr_nonnull(inh);
        memset(gpus[0].uuid_raw, 1, 16);
        memset(gpus[1].uuid_raw, 2, 16);
        gpus[0].ctx_ready = true;
        gpus[1].ctx_ready = false; /* no context: not ours to take */
        *t = (struct gs_ho_take){ .inh = inh, .gpus = gpus, .ngpus = 2, .chunk_bytes = CHUNK_BYTES, .snap = snap };
}

/* Receives f sent with nfds new fds and gives it to t. */
static int take_msg(struct gs_ho_take *t, const struct gs_ho_msg *f, uint32_t nfds)
{
        int got[GS_HO_MAX_FDS];
        uint32_t ngot;

        ck_assert_int_eq(relay(f, gs_ho_msg_len(f), nfds, 0, got, &ngot), 0);
        return gs_ho_take_msg(t, &m, got, ngot);
}

static uint32_t fds_taken(const struct gs_gpu_inherit *i)
{
        uint32_t n = 0;

        for (uint32_t c = 0; c < i->nchunks; c++)
                n += i->fd[c] >= 0;
        return n;
}

START_TEST(test_take)
{
        struct gs_ho_take t;
        struct gs_ho_msg *f;

        take_setup(&t, NULL);
        ck_assert_int_eq(take_msg(&t, gpu_frame(1, 8, CHUNK_BYTES), 0), 0);
        ck_assert_uint_eq(inh[0].nchunks, 8);
        /* Chunks 0..3 with fds, 3 written. */
        f = frame(GS_HO_CHUNKS, 4, 4, 0);
        f->ent[3].flags |= GS_HO_WRITTEN;
        ck_assert_int_eq(take_msg(&t, f, 4), 0);
        /* Out of range (8, 1000, UINT32_MAX) and given twice (2): dropped. */
        f = frame(GS_HO_CHUNKS, 4, 4, 0);
        f->ent[0].chunk = 8;
        f->ent[1].chunk = 1000;
        f->ent[2].chunk = UINT32_MAX;
        f->ent[3].chunk = 2;
        ck_assert_int_eq(take_msg(&t, f, 4), 0);
        /* Without an fd and no snapshot to find it in: dropped. */
        ck_assert_int_eq(take_msg(&t, frame(GS_HO_CHUNKS, 2, 0, 5), 0), 0);
        /* Neither GPU nor CHUNKS; fds that do not match. */
        ck_assert_int_eq(take_msg(&t, frame(GS_HO_READY, 0, 0, 0), 0), -EPROTO);
        f = frame(GS_HO_CHUNKS, 2, 2, 6);
        ck_assert_int_eq(gs_ho_take_msg(&t, f, NULL, 0), -EPROTO);

        ck_assert_uint_eq(fds_taken(&inh[0]), 4);
        for (uint32_t c = 0; c < 4; c++) {
                ck_assert_int_ge(inh[0].fd[c], 0);
                ck_assert_uint_eq(inh[0].memid[c], 1000 + c);
                ck_assert_uint_eq(inh[0].written[c], c == 3);
        }
        ck_assert_uint_eq(inh[1].nchunks, 0);
        gs_handover_inherit_free(inh, 2);
}
END_TEST

/* GPUs that are not ours to take, or whose figures do not fit: their
 * chunks are dropped, fds closed. */
START_TEST(test_take_foreign_gpus)
{
        struct gs_ho_take t;

        take_setup(&t, NULL);
        const struct {
                uint8_t id;
                uint32_t nchunks;
                uint64_t chunk_bytes;
        } bad[] = {
                { 9, 8, CHUNK_BYTES },                        /* not on this node */
                { 2, 8, CHUNK_BYTES },                        /* its context is not ready */
                { 1, 0, CHUNK_BYTES },                        /* no chunks */
                { 1, GS_LEDGER_MAX_CHUNKS + 1, CHUNK_BYTES }, /* more than a pool may have */
                { 1, UINT32_MAX, CHUNK_BYTES },
                { 1, 8, CHUNK_BYTES / 2 }, /* other chunks */
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                ck_assert_int_eq(take_msg(&t, gpu_frame(bad[i].id, bad[i].nchunks, bad[i].chunk_bytes), 0), 0);
                ck_assert_ptr_null(t.cur);
                ck_assert_int_eq(take_msg(&t, frame(GS_HO_CHUNKS, 3, 3, 0), 3), 0);
        }
        ck_assert_uint_eq(inh[0].nchunks, 0);
        ck_assert_uint_eq(inh[1].nchunks, 0);
        /* Named twice: the second's chunks do not replace the first's. */
        ck_assert_int_eq(take_msg(&t, gpu_frame(1, 4, CHUNK_BYTES), 0), 0);
        ck_assert_int_eq(take_msg(&t, frame(GS_HO_CHUNKS, 1, 1, 0), 1), 0);
        ck_assert_int_eq(take_msg(&t, gpu_frame(1, 16, CHUNK_BYTES), 0), 0);
        ck_assert_ptr_null(t.cur);
        ck_assert_int_eq(take_msg(&t, frame(GS_HO_CHUNKS, 3, 3, 1), 3), 0);
        ck_assert_uint_eq(inh[0].nchunks, 4);
        ck_assert_uint_eq(fds_taken(&inh[0]), 1);
        gs_handover_inherit_free(inh, 2);
}
END_TEST

/* An entry without its fd takes the snapshot's for its memid, on its own
 * GPU only, once. */
START_TEST(test_take_from_snapshot)
{
        struct gs_ho_snapset s = { 0 };
        struct gs_ho_take t;

        ck_assert_int_eq(snap_msg(&s, gpu_frame(1, 8, CHUNK_BYTES), 0), 0);
        ck_assert_int_eq(snap_msg(&s, frame(GS_HO_CHUNKS, 4, 4, 0), 4), 0); /* memids 1000..1003 */
        ck_assert_int_eq(snap_msg(&s, gpu_frame(3, 8, CHUNK_BYTES), 0), 0);
        ck_assert_int_eq(snap_msg(&s, frame(GS_HO_CHUNKS, 2, 2, 6), 2), 0); /* 1006, 1007 elsewhere */
        take_setup(&t, &s);
        ck_assert_int_eq(take_msg(&t, gpu_frame(1, 8, CHUNK_BYTES), 0), 0);
        struct gs_ho_msg *f = frame(GS_HO_CHUNKS, 4, 0, 0);
        f->ent[2].memid = 1006; /* another GPU's */
        f->ent[3].memid = 1000; /* taken already by entry 0 */
        ck_assert_int_eq(take_msg(&t, f, 0), 0);
        ck_assert_uint_eq(fds_taken(&inh[0]), 2);
        ck_assert_int_ge(inh[0].fd[0], 0);
        ck_assert_int_ge(inh[0].fd[1], 0);
        ck_assert_int_lt(inh[0].fd[2], 0);
        ck_assert_int_lt(inh[0].fd[3], 0);
        gs_handover_inherit_free(inh, 2);
        gs_ho_snap_free(&s);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("handover_codec");
        TCase *tc = tcase_create("frames");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_roundtrip);
        tcase_add_test(tc, test_truncated);
        tcase_add_test(tc, test_magic_version_type);
        tcase_add_test(tc, test_huge);
        tcase_add_test(tc, test_fd_count);
        tcase_add_test(tc, test_gone_and_silent);
        tcase_add_test(tc, test_send_bounds);
        suite_add_tcase(s, tc);
        tc = tcase_create("snapshot");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_snapshot);
        tcase_add_test(tc, test_snapshot_gpus_bounded);
        suite_add_tcase(s, tc);
        tc = tcase_create("take");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_take);
        tcase_add_test(tc, test_take_foreign_gpus);
        tcase_add_test(tc, test_take_from_snapshot);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
