/* check_stream.c — the agent's bounded connection server
 * (agent/base/gs_stream.h), by its contract, on a real gs_loop (on a thread
 * of its own) and a unix socket: whole requests in, replies out; the
 * connection cap and its refuse hook; the bounded input (an over-long
 * request closes the connection) and output (out_max counts what is
 * queued, not what was written); a reply larger than the socket buffer to a
 * slow reader (EPOLLOUT on demand); the end (the reply, then our side shut
 * down, then the close once the peer closes or the linger passes); the
 * per-connection deadline; a half-closed peer still gets its reply.
 *
 * The protocol: lines.  "ping" -> "pong"; "big N" -> N pattern bytes;
 * "end" -> "bye" and gs_stream_end; "quit" -> closed at once; "bcast" ->
 * "hi" to every connection; "sndbuf N" -> our socket's SO_SNDBUF; anything
 * else -> "?".  Waits end on the event, with a deadline of 10 s that only
 * catches a hang. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_loop.h"
#include "gs_stream.h"
#include "gs_util.h"

#define HANG_MS 10000

/* Counted on the loop thread, read by the test (atomics). */
static int n_refused, n_timeouts, n_reserve_failed, n_lines, n_after_end;

static uint8_t pattern(size_t i)
{
        return (uint8_t)(i % 251);
}

static int reply(struct gs_stream *c, const void *p, size_t n)
{
        uint8_t *out = gs_stream_reserve(c, n);

        if (!out) {
                __atomic_add_fetch(&n_reserve_failed, 1, __ATOMIC_RELEASE);
                return -1;
        }
        memcpy(out, p, n);
        return 0;
}

static int on_line(struct gs_stream *c, const char *line)
{
        unsigned long n;

        if (strcmp(line, "ping") == 0)
                return reply(c, "pong\n", 5);
        if (strcmp(line, "end") == 0) {
                gs_stream_end(c);
                return reply(c, "bye\n", 4);
        }
        if (strcmp(line, "quit") == 0)
                return -1;
        if (strcmp(line, "bcast") == 0) {
                struct gs_stream *o = gs_stream_first(gs_stream_data(c));
                for (; o; o = gs_stream_next(o))
                        if (reply(o, "hi\n", 3) < 0 || (o != c && gs_stream_flush(o) < 0))
                                return -1;
                return 0;
        }
        if (sscanf(line, "big %lu", &n) == 1) {
                uint8_t *out = gs_stream_reserve(c, n);
                if (!out) {
                        __atomic_add_fetch(&n_reserve_failed, 1, __ATOMIC_RELEASE);
                        return -1;
                }
                for (size_t i = 0; i < n; i++)
                        out[i] = pattern(i);
                return 0;
        }
        if (sscanf(line, "sndbuf %lu", &n) == 1) {
                int v = (int)n;
                if (setsockopt(gs_stream_fd(c), SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) < 0)
                        return -1;
                return reply(c, "ok\n", 3);
        }
        return reply(c, "?\n", 2);
}

static struct gs_stream_srv *srv;

static int on_data(void *ctx, struct gs_stream *c)
{
        size_t len;
        const uint8_t *in = gs_stream_input(c, &len);
        const uint8_t *nl;

        (void)ctx;
        gs_stream_set_data(c, srv); /* for bcast */
        while ((nl = memchr(in, '\n', len))) {
                char line[128];
                size_t n = (size_t)(nl - in);

                if (gs_stream_ended(c)) {
                        __atomic_add_fetch(&n_after_end, 1, __ATOMIC_RELEASE);
                        return 0;
                }
                snprintf(line, sizeof(line), "%.*s", (int)n, (const char *)in);
                __atomic_add_fetch(&n_lines, 1, __ATOMIC_RELEASE);
                gs_stream_consume(c, n + 1);
                if (on_line(c, line) < 0)
                        return -1;
                in = gs_stream_input(c, &len);
        }
        return 0;
}

static void on_refuse(void *ctx, int fd)
{
        (void)ctx;
        __atomic_add_fetch(&n_refused, 1, __ATOMIC_RELEASE);
        if (write(fd, "busy\n", 5) < 0) {
                /* best effort */
        }
}

static void on_timeout(void *ctx, struct gs_stream *c)
{
        (void)ctx;
        (void)c;
        __atomic_add_fetch(&n_timeouts, 1, __ATOMIC_RELEASE);
}

static const struct gs_stream_ops ops = { on_data, on_refuse, on_timeout };

/* ---- the server, on a loop of its own thread ---- */

static struct gs_loop *loop;
static pthread_t loop_thread;
static struct gs_loop_async a_stop, a_query;
static struct sockaddr_un addr;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int query_done;
static uint32_t query_count;

static void do_stop(void *data)
{
        (void)data;
        gs_loop_stop(loop);
}

static void do_query(void *data)
{
        (void)data;
        pthread_mutex_lock(&mu);
        query_count = gs_stream_srv_count(srv);
        query_done = 1;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
}

static void *loop_main(void *arg)
{
        (void)arg;
        ck_assert_int_eq(gs_loop_run(loop), 0);
        return NULL;
}

static void srv_start(const struct gs_stream_limits *lim)
{
        static int seq;
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

        ck_assert_int_ge(fd, 0);
        memset(&addr, 0, sizeof(addr));
        addr.sun_family = AF_UNIX;
        /* abstract: nothing to clean up */
        snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1, "gs-check-stream-%d-%d", (int)getpid(), seq++);
        ck_assert_int_eq(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
        ck_assert_int_eq(listen(fd, 64), 0);
        ck_assert_int_eq(gs_loop_new(&loop), 0);
        ck_assert_int_eq(gs_stream_srv_new(loop, fd, "check", lim, &ops, NULL, &srv), 0);
        gs_loop_async_add(loop, &a_stop, do_stop, NULL);
        gs_loop_async_add(loop, &a_query, do_query, NULL);
        ck_assert_int_eq(pthread_create(&loop_thread, NULL, loop_main, NULL), 0);
}

static void srv_stop(void)
{
        gs_loop_async_send(loop, &a_stop);
        ck_assert_int_eq(pthread_join(loop_thread, NULL), 0);
        gs_stream_srv_free(srv);
        gs_loop_async_del(loop, &a_stop);
        gs_loop_async_del(loop, &a_query);
        gs_loop_free(loop);
        srv = NULL;
        loop = NULL;
}

/* The number of open connections, asked on the loop thread. */
static uint32_t srv_count(void)
{
        uint32_t n;

        pthread_mutex_lock(&mu);
        query_done = 0;
        gs_loop_async_send(loop, &a_query);
        while (!query_done)
                pthread_cond_wait(&cv, &mu);
        n = query_count;
        pthread_mutex_unlock(&mu);
        return n;
}

static void wait_count(uint32_t want)
{
        int64_t until = gs_mono_ms() + HANG_MS;
        uint32_t n;

        while ((n = srv_count()) != want) {
                ck_assert_msg(gs_mono_ms() < until, "%u connections, not %u, after %d ms", n, want, HANG_MS);
                usleep(1000);
        }
}

static int counter(int *c)
{
        return __atomic_load_n(c, __ATOMIC_ACQUIRE);
}

/* ---- the clients: blocking, a receive timeout that only catches a hang ---- */

static int client(int rcvbuf)
{
        struct timeval tv = { .tv_sec = HANG_MS / 1000 };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
        if (rcvbuf)
                ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), 0);
        ck_assert_int_eq(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
        return fd;
}

static void say(int fd, const char *s)
{
        ck_assert_int_eq(send(fd, s, strlen(s), MSG_NOSIGNAL), (ssize_t)strlen(s));
}

/* Reads exactly n bytes. */
static void read_n(int fd, void *buf, size_t n)
{
        size_t got = 0;

        while (got < n) {
                ssize_t r = recv(fd, (char *)buf + got, n - got, 0);
                ck_assert_msg(r > 0, "read %zu of %zu bytes, then %s", got, n, r == 0 ? "EOF" : strerror(errno));
                got += (size_t)r;
        }
}

static void expect(int fd, const char *want)
{
        char buf[64] = "";

        ck_assert_uint_lt(strlen(want), sizeof(buf));
        read_n(fd, buf, strlen(want));
        ck_assert_str_eq(buf, want);
}

/* The server closed (or shut down) its side: EOF, or a reset when it
 * closed with our input unread. */
static void expect_eof(int fd)
{
        char c;
        ssize_t r = recv(fd, &c, 1, 0);

        ck_assert_msg(r == 0 || (r < 0 && errno == ECONNRESET), "expected EOF, got %zd (%s)", r,
                      r < 0 ? strerror(errno) : "a byte");
}

/* Reads n bytes of the pattern, in pieces of at most piece bytes. */
static void expect_pattern(int fd, size_t n, size_t piece)
{
        static uint8_t buf[65536];
        size_t off = 0;

        ck_assert_uint_le(piece, sizeof(buf));
        while (off < n) {
                size_t k = n - off < piece ? n - off : piece;
                read_n(fd, buf, k);
                for (size_t i = 0; i < k; i++)
                        if (buf[i] != pattern(off + i))
                                ck_abort_msg("byte %zu of the reply is %u, not %u", off + i, buf[i], pattern(off + i));
                off += k;
        }
}

static const struct gs_stream_limits plain = {
        .max_conns = 16,
        .in_max = 4096,
        .out_max = 1 << 20,
        .linger_ms = 0,
};

/* ---- tests ---- */

START_TEST(test_requests)
{
        int fd;

        srv_start(&plain);
        fd = client(0);
        say(fd, "ping\n");
        expect(fd, "pong\n");
        say(fd, "ping\nping\nwhat\n"); /* pipelined, one read */
        expect(fd, "pong\npong\n?\n");
        say(fd, "pi"); /* one request in two reads */
        usleep(1000);
        say(fd, "ng\n");
        expect(fd, "pong\n");
        ck_assert_uint_eq(srv_count(), 1);
        say(fd, "quit\n"); /* on_data < 0: closed at once */
        expect_eof(fd);
        wait_count(0);
        close(fd);
        srv_stop();
}
END_TEST

/* max_conns: the next connection hears the refuse hook's word and is
 * closed; a closed one makes room. */
START_TEST(test_cap_and_refuse)
{
        struct gs_stream_limits lim = plain;
        int a, b, c, d;

        lim.max_conns = 2;
        srv_start(&lim);
        a = client(0);
        b = client(0);
        say(a, "ping\n");
        expect(a, "pong\n");
        say(b, "ping\n");
        expect(b, "pong\n");
        c = client(0);
        expect(c, "busy\n");
        expect_eof(c);
        ck_assert_int_eq(counter(&n_refused), 1);
        ck_assert_uint_eq(srv_count(), 2);
        close(a);
        wait_count(1);
        d = client(0);
        say(d, "ping\n");
        expect(d, "pong\n");
        ck_assert_int_eq(counter(&n_refused), 1);
        close(b);
        close(c);
        close(d);
        srv_stop();
}
END_TEST

/* in_max: a request that fits is served; one longer closes the
 * connection; others go on. */
START_TEST(test_input_bound)
{
        struct gs_stream_limits lim = plain;
        char line[512];
        int fd, other;

        lim.in_max = 256;
        srv_start(&lim);
        fd = client(0);
        other = client(0);
        memset(line, 'x', 255);
        line[255] = '\n'; /* 256 bytes: exactly in_max */
        line[256] = '\0';
        say(fd, line);
        expect(fd, "?\n");
        memset(line, 'x', 300);
        line[300] = '\0'; /* no end in sight */
        say(fd, line);
        expect_eof(fd);
        say(other, "ping\n");
        expect(other, "pong\n");
        wait_count(1);
        close(fd);
        close(other);
        srv_stop();
}
END_TEST

/* A 4 MiB reply, far above the socket buffer, to a reader that takes it
 * in small pieces: it all comes, in order, and the connection still
 * serves requests after it. */
START_TEST(test_big_reply_slow_reader)
{
        struct gs_stream_limits lim = plain;
        int fd;

        lim.out_max = 8 << 20;
        srv_start(&lim);
        fd = client(8192);
        say(fd, "big 4194304\n");
        usleep(20000); /* let the server fill the socket first */
        expect_pattern(fd, 4194304, 4096);
        say(fd, "ping\n");
        expect(fd, "pong\n");
        close(fd);
        srv_stop();
}
END_TEST

/* out_max bounds what is queued: a reply beyond it fails (the protocol
 * closes); one of exactly out_max is fine. */
START_TEST(test_output_bound)
{
        struct gs_stream_limits lim = plain;
        int fd;

        lim.out_max = 65536;
        srv_start(&lim);
        fd = client(0);
        say(fd, "big 65536\n");
        expect_pattern(fd, 65536, 65536);
        say(fd, "big 65537\n");
        expect_eof(fd);
        ck_assert_int_eq(counter(&n_reserve_failed), 1);
        close(fd);
        srv_stop();
}
END_TEST

/* out_max counts what is still queued, not what the peer already read: a
 * reader that took part of a large reply may ask for another that fits
 * beside the rest. */
START_TEST(test_output_bound_counts_queued)
{
        struct gs_stream_limits lim = plain;
        static uint8_t buf[100000];
        int fd;

        lim.out_max = 256 << 10;
        srv_start(&lim);
        fd = client(4096);
        say(fd, "sndbuf 4096\n");
        expect(fd, "ok\n");
        say(fd, "big 200000\n");
        read_n(fd, buf, sizeof(buf)); /* 100000 read: at most 100000 queued */
        for (size_t i = 0; i < sizeof(buf); i++)
                ck_assert_uint_eq(buf[i], pattern(i));
        say(fd, "big 150000\n"); /* 250000 at most queued with it */
        read_n(fd, buf, sizeof(buf));
        for (size_t i = 0; i < sizeof(buf); i++)
                ck_assert_uint_eq(buf[i], pattern(100000 + i));
        expect_pattern(fd, 150000, 4096);
        ck_assert_int_eq(counter(&n_reserve_failed), 0);
        close(fd);
        srv_stop();
}
END_TEST

/* The end: the reply, then our side shut down (EOF); input after it is
 * not handed to the protocol; closed once the peer closes. */
START_TEST(test_end)
{
        int fd;

        srv_start(&plain);
        fd = client(0);
        say(fd, "end\n");
        expect(fd, "bye\n");
        expect_eof(fd);
        say(fd, "ping\n");
        ck_assert_uint_eq(srv_count(), 1); /* waits for the peer (no linger) */
        close(fd);
        wait_count(0);
        ck_assert_int_eq(counter(&n_lines), 1);
        ck_assert_int_eq(counter(&n_after_end), 0);
        ck_assert_int_eq(counter(&n_timeouts), 0);
        srv_stop();
}
END_TEST

/* One request and its reply; then, with the client doing nothing more,
 * the server closes the connection, with timeouts calls of on_timeout. */
static void closed_by_server(const struct gs_stream_limits *lim, const char *req, const char *rep, int timeouts)
{
        int fd;

        srv_start(lim);
        fd = client(0);
        say(fd, req);
        expect(fd, rep);
        expect_eof(fd);
        wait_count(0);
        ck_assert_int_eq(counter(&n_timeouts), timeouts);
        close(fd);
        srv_stop();
}

/* linger_ms: a peer that never closes is closed after it, without the
 * timeout hook (the connection had ended). */
START_TEST(test_linger)
{
        struct gs_stream_limits lim = plain;

        lim.linger_ms = 50;
        closed_by_server(&lim, "end\n", "bye\n", 0);
}
END_TEST

/* deadline_ms bounds a connection's life: on_timeout, then the close. */
START_TEST(test_deadline)
{
        struct gs_stream_limits lim = plain;

        lim.deadline_ms = 100;
        closed_by_server(&lim, "ping\n", "pong\n", 1);
}
END_TEST

/* A peer that sends a request and shuts its side down still gets the
 * whole reply, then EOF; a peer that closes with nothing queued is closed. */
START_TEST(test_half_close)
{
        int fd, idle;

        srv_start(&plain);
        fd = client(8192);
        idle = client(0);
        say(fd, "big 1000000\n");
        ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
        usleep(20000);
        expect_pattern(fd, 1000000, 4096);
        expect_eof(fd);
        say(idle, "ping\n");
        expect(idle, "pong\n");
        close(idle);
        wait_count(0);
        close(fd);
        srv_stop();
}
END_TEST

/* Iteration over the open connections reaches every one. */
START_TEST(test_broadcast)
{
        int fd[3];

        srv_start(&plain);
        for (int i = 0; i < 3; i++) {
                fd[i] = client(0);
                say(fd[i], "ping\n");
                expect(fd[i], "pong\n");
        }
        say(fd[1], "bcast\n");
        for (int i = 0; i < 3; i++) {
                expect(fd[i], "hi\n");
                close(fd[i]);
        }
        wait_count(0);
        srv_stop();
}
END_TEST

int main(void)
{
        Suite *s = suite_create("stream");
        TCase *tc = tcase_create("stream");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_requests);
        tcase_add_test(tc, test_cap_and_refuse);
        tcase_add_test(tc, test_input_bound);
        tcase_add_test(tc, test_big_reply_slow_reader);
        tcase_add_test(tc, test_output_bound);
        tcase_add_test(tc, test_output_bound_counts_queued);
        tcase_add_test(tc, test_end);
        tcase_add_test(tc, test_linger);
        tcase_add_test(tc, test_deadline);
        tcase_add_test(tc, test_half_close);
        tcase_add_test(tc, test_broadcast);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
