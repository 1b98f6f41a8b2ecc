/* check_sock.c — common/gs_sock.h: a listening unix socket born with its
 * mode whatever the umask, and fds passed with a message: kept up to the
 * caller's bound in order, every other one closed (none leaked), cut
 * messages reported, bad arguments refused. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_sock.h"

static int open_fds(void)
{
        DIR *d = opendir("/proc/self/fd");
        int n = 0;

        ck_assert_ptr_nonnull(d);
        while (readdir(d))
                n++;
        closedir(d);
        return n;
}

static void tmpdir(char *dir, size_t n)
{
        snprintf(dir, n, "/tmp/check_sock.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void pair(int type, int sv[2])
{
        ck_assert_int_eq(socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, sv), 0);
}

START_TEST(test_listen_mode_whatever_umask)
{
        static const mode_t umasks[] = { 0, 022, 077, 0777 };
        static const mode_t modes[] = { 0600, 0666 };
        char dir[64], path[128];
        struct stat st;

        tmpdir(dir, sizeof(dir));
        for (size_t u = 0; u < GS_ARRAY_SIZE(umasks); u++)
                for (size_t m = 0; m < GS_ARRAY_SIZE(modes); m++) {
                        mode_t before = umask(umasks[u]);
                        snprintf(path, sizeof(path), "%s/s%zu%zu", dir, u, m);
                        int fd = gs_sock_listen(path, m ? SOCK_SEQPACKET : SOCK_STREAM, modes[m], 4);
                        ck_assert_int_ge(fd, 0);
                        ck_assert_int_eq(umask(before), umasks[u]); /* the umask is put back */
                        ck_assert_int_eq(stat(path, &st), 0);
                        ck_assert(S_ISSOCK(st.st_mode));
                        ck_assert_int_eq(st.st_mode & 0777, modes[m]);
                        ck_assert(fcntl(fd, F_GETFD) & FD_CLOEXEC);
                        ck_assert(fcntl(fd, F_GETFL) & O_NONBLOCK);
                        close(fd);
                        unlink(path);
                }
        rmdir(dir);
}
END_TEST

START_TEST(test_listen_accepts_and_keeps_type)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char dir[64];
        int fd, c, a, type;
        socklen_t tl = sizeof(type);

        tmpdir(dir, sizeof(dir));
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/s", dir);
        fd = gs_sock_listen(sa.sun_path, SOCK_SEQPACKET, 0600, 1);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl), 0);
        ck_assert_int_eq(type, SOCK_SEQPACKET);
        c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        ck_assert_int_eq(connect(c, (struct sockaddr *)&sa, sizeof(sa)), 0);
        a = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
        ck_assert_int_ge(a, 0);
        close(a);
        close(c);
        close(fd);
        unlink(sa.sun_path);
        rmdir(dir);
}
END_TEST

START_TEST(test_listen_refusals)
{
        struct sockaddr_un sa;
        char dir[64], path[sizeof(sa.sun_path) + 8], file[128];
        int before = open_fds(), fd;
        struct stat st;

        tmpdir(dir, sizeof(dir));
        /* One character too long for sun_path (it needs its NUL), and far too long. */
        memset(path, 'a', sizeof(path));
        path[0] = '/';
        path[sizeof(sa.sun_path)] = '\0';
        ck_assert_int_eq(gs_sock_listen(path, SOCK_STREAM, 0600, 1), -ENAMETOOLONG);
        path[sizeof(path) - 1] = '\0';
        ck_assert_int_eq(gs_sock_listen(path, SOCK_STREAM, 0600, 1), -ENAMETOOLONG);
        /* A missing directory: the bind's error, nothing left behind. */
        snprintf(file, sizeof(file), "%s/none/s", dir);
        ck_assert_int_eq(gs_sock_listen(file, SOCK_STREAM, 0600, 1), -ENOENT);
        /* Whatever stands at the path stays: the caller decides what may go. */
        snprintf(file, sizeof(file), "%s/f", dir);
        close(open(file, O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
        ck_assert_int_eq(gs_sock_listen(file, SOCK_STREAM, 0600, 1), -EADDRINUSE);
        ck_assert_int_eq(stat(file, &st), 0);
        ck_assert(S_ISREG(st.st_mode));
        unlink(file);
        /* A listening socket there: refused too, and it keeps working. */
        fd = gs_sock_listen(file, SOCK_STREAM, 0600, 1);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(gs_sock_listen(file, SOCK_STREAM, 0600, 1), -EADDRINUSE);
        ck_assert_int_eq(stat(file, &st), 0);
        close(fd);
        unlink(file);
        /* Not a socket type that listens. */
        ck_assert_int_lt(gs_sock_listen(file, SOCK_DGRAM, 0600, 1), 0);
        ck_assert_int_ne(access(file, F_OK), 0);
        rmdir(dir);
        ck_assert_int_eq(open_fds(), before); /* no fd leaked on any refusal */
}
END_TEST

static ino_t ino(int fd)
{
        struct stat st;

        ck_assert_int_eq(fstat(fd, &st), 0);
        return st.st_ino;
}

START_TEST(test_fds_kept_in_order)
{
        int sv[2], fds[3], got[4] = { -1, -1, -1, -1 };
        size_t n = 99;
        bool trunc = true;
        char buf[8];

        pair(SOCK_SEQPACKET, sv);
        for (int i = 0; i < 3; i++)
                fds[i] = memfd_create("x", MFD_CLOEXEC);
        ck_assert_int_eq(gs_sock_send_fds(sv[0], "hello", 5, fds, 3, 0), 5);
        ck_assert_int_eq(gs_sock_recv_fds(sv[1], buf, sizeof(buf), 0, got, 4, &n, &trunc), 5);
        ck_assert_uint_eq(n, 3);
        ck_assert(!trunc);
        ck_assert_int_eq(memcmp(buf, "hello", 5), 0);
        for (int i = 0; i < 3; i++) {
                ck_assert_int_eq(ino(got[i]), ino(fds[i]));
                ck_assert(fcntl(got[i], F_GETFD) & FD_CLOEXEC); /* MSG_CMSG_CLOEXEC */
                close(got[i]);
                close(fds[i]);
        }
        ck_assert_int_eq(got[3], -1);
        close(sv[0]);
        close(sv[1]);
}
END_TEST

/* A hostile peer sends more fds than the reader wants: the first are kept,
 * every other one is closed. */
START_TEST(test_fds_past_the_bound_closed)
{
        int sv[2], fds[GS_SOCK_MAX_FDS], got[2], before;
        size_t n;
        bool trunc;
        char buf[4];

        pair(SOCK_SEQPACKET, sv);
        fds[0] = memfd_create("x", MFD_CLOEXEC);
        for (int i = 1; i < GS_SOCK_MAX_FDS; i++)
                fds[i] = fds[0]; /* one file, many entries */
        before = open_fds();
        for (size_t keep = 0; keep <= 2; keep++) {
                ck_assert_int_eq(gs_sock_send_fds(sv[0], "m", 1, fds, GS_SOCK_MAX_FDS, 0), 1);
                ck_assert_int_eq(gs_sock_recv_fds(sv[1], buf, sizeof(buf), 0, got, keep, &n, &trunc), 1);
                ck_assert_uint_eq(n, keep);
                ck_assert(!trunc);
                ck_assert_int_eq(open_fds(), before + (int)keep);
                for (size_t i = 0; i < n; i++) {
                        ck_assert_int_eq(ino(got[i]), ino(fds[0]));
                        close(got[i]);
                }
        }
        /* More than the helper carries: refused before anything is sent. */
        int many[GS_SOCK_MAX_FDS + 1];
        for (int i = 0; i <= GS_SOCK_MAX_FDS; i++)
                many[i] = fds[0];
        ck_assert_int_eq(gs_sock_send_fds(sv[0], "m", 1, many, GS_SOCK_MAX_FDS + 1, 0), -EINVAL);
        ck_assert_int_eq(gs_sock_recv_fds(sv[1], buf, sizeof(buf), MSG_DONTWAIT, got, 2, &n, &trunc), -EAGAIN);
        ck_assert_uint_eq(n, 0);
        /* A bound over the most there can be is the most there can be. */
        ck_assert_int_eq(gs_sock_send_fds(sv[0], "m", 1, fds, 2, 0), 1);
        int all[GS_SOCK_MAX_FDS];
        ck_assert_int_eq(gs_sock_recv_fds(sv[1], buf, sizeof(buf), 0, all, GS_SOCK_MAX_FDS + 100, &n, &trunc), 1);
        ck_assert_uint_eq(n, 2);
        close(all[0]);
        close(all[1]);
        close(fds[0]);
        close(sv[0]);
        close(sv[1]);
}
END_TEST

START_TEST(test_cut_and_closed)
{
        int sv[2], fd, got = -1, before;
        char big[64] = "0123456789", small[4];
        size_t n;
        bool trunc;

        pair(SOCK_SEQPACKET, sv);
        before = open_fds();
        fd = memfd_create("x", MFD_CLOEXEC);
        /* A record longer than the buffer: cut, said so; its fd still comes. */
        ck_assert_int_eq(gs_sock_send_fds(sv[0], big, sizeof(big), &fd, 1, 0), (ssize_t)sizeof(big));
        ck_assert_int_eq(gs_sock_recv_fds(sv[1], small, sizeof(small), 0, &got, 1, &n, &trunc), (ssize_t)sizeof(small));
        ck_assert(trunc);
        ck_assert_uint_eq(n, 1);
        close(got);
        close(fd);
        ck_assert_int_eq(open_fds(), before);
        /* No fds, no data: an empty record is a record, not the end. */
        ck_assert_int_eq(gs_sock_send_fds(sv[0], "", 0, NULL, 0, 0), 0);
        ck_assert_int_eq(gs_sock_recv_fds(sv[1], small, sizeof(small), MSG_DONTWAIT, &got, 1, &n, &trunc), 0);
        ck_assert_uint_eq(n, 0);
        /* The peer gone: 0, nothing kept; sending to it: -EPIPE, no SIGPIPE. */
        close(sv[0]);
        ck_assert_int_eq(gs_sock_recv_fds(sv[1], small, sizeof(small), 0, &got, 1, &n, &trunc), 0);
        ck_assert_uint_eq(n, 0);
        ck_assert_int_eq(gs_sock_send_fds(sv[1], "x", 1, NULL, 0, 0), -EPIPE);
        /* A bad fd to send: the kernel's error, nothing sent. */
        ck_assert_int_eq(gs_sock_send_fds(sv[1], "x", 1, (int[]){ 12345 }, 1, 0), -EBADF);
        ck_assert_int_eq(gs_sock_recv_fds(-1, small, sizeof(small), 0, &got, 1, &n, &trunc), -EBADF);
        close(sv[1]);
}
END_TEST

/* A stream socket: the fds ride with the first byte of the message. */
START_TEST(test_stream)
{
        int sv[2], fd, got[2];
        char buf[16];
        size_t n;
        bool trunc;

        pair(SOCK_STREAM, sv);
        fd = memfd_create("x", MFD_CLOEXEC);
        ck_assert_int_eq(gs_sock_send_fds(sv[0], "abcdef", 6, &fd, 1, MSG_DONTWAIT), 6);
        ck_assert_int_eq(gs_sock_recv_fds(sv[1], buf, 3, 0, got, 2, &n, &trunc), 3);
        ck_assert_uint_eq(n, 1);
        ck_assert(!trunc); /* a stream has no records to cut */
        ck_assert_int_eq(ino(got[0]), ino(fd));
        close(got[0]);
        ck_assert_int_eq(gs_sock_recv_fds(sv[1], buf, sizeof(buf), 0, got, 2, &n, &trunc), 3);
        ck_assert_uint_eq(n, 0);
        close(fd);
        close(sv[0]);
        close(sv[1]);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("sock");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_listen_mode_whatever_umask);
        tcase_add_test(tc, test_listen_accepts_and_keeps_type);
        tcase_add_test(tc, test_listen_refusals);
        tcase_add_test(tc, test_fds_kept_in_order);
        tcase_add_test(tc, test_fds_past_the_bound_closed);
        tcase_add_test(tc, test_cut_and_closed);
        tcase_add_test(tc, test_stream);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return gs_check_run(suite());
}
