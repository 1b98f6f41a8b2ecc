/* check_grpc.c — gs_grpc: server and client in one process over a unix
 * socket: unary round trip, errors, unknown method, bad request, deadlines,
 * parallel calls, streams whose client cancels or vanishes, clean shutdown.
 *
 * No test depends on how fast the machine is: each waits for the event it
 * expects (a handler entered, a flag set by the server's call thread), with
 * a deadline of seconds that only catches a hang, and prints the time it
 * measured as information. */
#include <check.h>

#include "gs_check.h"
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "deviceplugin_v1beta1.pb-c.h"
#include "gs_grpc.h"

static char sock[64];
static atomic_int stream_closed_seen, stream_sent;
/* The Block handler: how many are inside, whether the test let them go. */
static atomic_int blocked_in, blocked_done, released;

/* Catches a hang only: far beyond anything a busy machine, a sanitizer or
 * valgrind stretches an event to, and below the test case's 30 s. */
#define HANG_MS 10000

/* Waits until *flag == want or HANG_MS pass; returns how long it took. */
static int64_t wait_for(atomic_int *flag, int want, const char *what)
{
        int64_t t0 = gs_mono_ms();

        while (atomic_load(flag) != want && gs_mono_ms() - t0 < HANG_MS)
                usleep(2 * 1000);
        ck_assert_msg(atomic_load(flag) == want, "%s: %d, expected %d after %d ms", what, atomic_load(flag), want,
                      HANG_MS);
        return gs_mono_ms() - t0;
}

/* Echo: RegisterRequest -> RegisterRequest with version + "!" */
static grpc_status_code echo(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req, ProtobufCMessage **ret,
                             char *msg, size_t msglen)
{
        const V1beta1__RegisterRequest *in = (const V1beta1__RegisterRequest *)req;
        V1beta1__RegisterRequest *out = malloc(sizeof(*out));
        char *v = malloc(strlen(in->version) + 2);

        (void)ctx;
        (void)call;
        (void)msg;
        (void)msglen;
        v1beta1__register_request__init(out);
        sprintf(v, "%s!", in->version);
        out->version = v;
        *ret = &out->base;
        return GRPC_STATUS_OK;
}

static void echo_free(void *ctx, ProtobufCMessage *m)
{
        (void)ctx;
        free(((V1beta1__RegisterRequest *)m)->version);
        free(m);
}

static grpc_status_code fail_call(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req,
                                  ProtobufCMessage **ret, char *msg, size_t msglen)
{
        (void)ctx;
        (void)call;
        (void)req;
        (void)ret;
        snprintf(msg, msglen, "device ID 'x' is bad");
        return GRPC_STATUS_INVALID_ARGUMENT;
}

/* Waits until the test releases it (HANG_MS at most), then echoes: a call
 * still being handled for as long as the test wants. */
static grpc_status_code block(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req, ProtobufCMessage **ret,
                              char *msg, size_t msglen)
{
        int64_t t0 = gs_mono_ms();

        atomic_fetch_add(&blocked_in, 1);
        while (!atomic_load(&released) && gs_mono_ms() - t0 < HANG_MS)
                usleep(2 * 1000);
        atomic_fetch_add(&blocked_done, 1);
        return echo(ctx, call, req, ret, msg, msglen);
}

/* Returns OK only once PARALLEL of its calls are inside at the same time:
 * the calls succeed only if the server runs them in parallel. */
#define PARALLEL 4
static grpc_status_code meet(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req, ProtobufCMessage **ret,
                             char *msg, size_t msglen)
{
        int64_t t0 = gs_mono_ms();

        atomic_fetch_add(&blocked_in, 1);
        while (atomic_load(&blocked_in) < PARALLEL && gs_mono_ms() - t0 < HANG_MS)
                usleep(2 * 1000);
        if (atomic_load(&blocked_in) < PARALLEL) {
                snprintf(msg, msglen, "only %d calls ran at once", atomic_load(&blocked_in));
                return GRPC_STATUS_FAILED_PRECONDITION;
        }
        return echo(ctx, call, req, ret, msg, msglen);
}

/* Sends one Device list, then waits for the client to go away. */
static grpc_status_code stream(void *ctx, struct gs_grpc_call *call, const ProtobufCMessage *req, char *msg,
                               size_t msglen)
{
        V1beta1__ListAndWatchResponse resp = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
        V1beta1__Device dev = V1BETA1__DEVICE__INIT, *devs[1] = { &dev };

        (void)ctx;
        (void)req;
        (void)msg;
        (void)msglen;
        dev.id = (char *)"dev0";
        dev.health = (char *)"Healthy";
        resp.n_devices = 1;
        resp.devices = devs;
        if (gs_grpc_call_send(call, &resp.base, 5000) < 0)
                return GRPC_STATUS_CANCELLED;
        atomic_fetch_add(&stream_sent, 1);
        for (int i = 0; i < 100; i++) /* at most 10 s */
                if (gs_grpc_call_wait_closed(call, 100)) {
                        atomic_store(&stream_closed_seen, 1);
                        /* a send on a closed call fails instead of hanging */
                        ck_assert_int_eq(gs_grpc_call_send(call, &resp.base, 1000), -ECANCELED);
                        return GRPC_STATUS_CANCELLED;
                }
        return GRPC_STATUS_OK;
}

static const struct gs_grpc_method methods[] = {
        { "/test.Svc/Echo", &v1beta1__register_request__descriptor, echo, echo_free, NULL },
        { "/test.Svc/Fail", &v1beta1__register_request__descriptor, fail_call, NULL, NULL },
        { "/test.Svc/Block", &v1beta1__register_request__descriptor, block, echo_free, NULL },
        { "/test.Svc/Meet", &v1beta1__register_request__descriptor, meet, echo_free, NULL },
        { "/test.Svc/Stream", &v1beta1__empty__descriptor, NULL, NULL, stream },
};

static struct gs_grpc_server *srv;

static void start(void)
{
        /* fresh for each test, also with CK_FORK=no */
        atomic_store(&blocked_in, 0);
        atomic_store(&blocked_done, 0);
        atomic_store(&released, 0);
        snprintf(sock, sizeof(sock), "/tmp/gsgrpc-%d.sock", (int)getpid());
        ck_assert_int_eq(gs_grpc_server_start(sock, methods, GS_ARRAY_SIZE(methods), NULL, &srv), 0);
}

static void stop(void)
{
        gs_grpc_server_stop(srv);
        srv = NULL;
        unlink(sock);
}

static int call_echo(const char *method, const char *version, int timeout_ms, char **ret_version, grpc_status_code *st,
                     char *msg, size_t msglen)
{
        V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;
        ProtobufCMessage *rep = NULL;
        int r;

        req.version = (char *)version;
        r = gs_grpc_unary_call(sock, method, &req.base, &v1beta1__register_request__descriptor, timeout_ms, &rep, st,
                               msg, msglen);
        if (r == 0) {
                *ret_version = strdup(((V1beta1__RegisterRequest *)rep)->version);
                protobuf_c_message_free_unpacked(rep, NULL);
        }
        return r;
}

START_TEST(test_unary_round_trip)
{
        char *v = NULL, msg[256];
        grpc_status_code st = GRPC_STATUS_UNKNOWN;

        start();
        ck_assert_int_eq(call_echo("/test.Svc/Echo", "v1beta1", 2000, &v, &st, msg, sizeof(msg)), 0);
        ck_assert_int_eq(st, GRPC_STATUS_OK);
        ck_assert_str_eq(v, "v1beta1!");
        free(v);
        /* many in a row on fresh channels */
        for (int i = 0; i < 20; i++) {
                ck_assert_int_eq(call_echo("/test.Svc/Echo", "x", 2000, &v, &st, msg, sizeof(msg)), 0);
                ck_assert_str_eq(v, "x!");
                free(v);
        }
        stop();
}
END_TEST

START_TEST(test_error_status)
{
        char *v = NULL, msg[256];
        grpc_status_code st = GRPC_STATUS_OK;

        start();
        ck_assert_int_eq(call_echo("/test.Svc/Fail", "a", 2000, &v, &st, msg, sizeof(msg)), -EPROTO);
        ck_assert_int_eq(st, GRPC_STATUS_INVALID_ARGUMENT);
        ck_assert_str_eq(msg, "device ID 'x' is bad");
        stop();
}
END_TEST

START_TEST(test_unknown_method)
{
        char *v = NULL, msg[256];
        grpc_status_code st = GRPC_STATUS_OK;

        start();
        ck_assert_int_eq(call_echo("/test.Svc/Nope", "a", 2000, &v, &st, msg, sizeof(msg)), -EPROTO);
        ck_assert_int_eq(st, GRPC_STATUS_UNIMPLEMENTED);
        ck_assert_ptr_nonnull(strstr(msg, "/test.Svc/Nope"));
        /* the server still serves */
        ck_assert_int_eq(call_echo("/test.Svc/Echo", "b", 2000, &v, &st, msg, sizeof(msg)), 0);
        free(v);
        stop();
}
END_TEST

START_TEST(test_bad_request)
{
        /* A NUMANode (field 1 a varint) where a RegisterRequest (field 1 a
         * string) is expected: wrong wire type, does not decode. */
        V1beta1__NUMANode n = V1BETA1__NUMANODE__INIT;
        ProtobufCMessage *rep = NULL;
        grpc_status_code st = GRPC_STATUS_OK;
        char msg[256];

        start();
        n.id = 5;
        ck_assert_int_eq(gs_grpc_unary_call(sock, "/test.Svc/Echo", &n.base, &v1beta1__register_request__descriptor,
                                            2000, &rep, &st, msg, sizeof(msg)),
                         -EPROTO);
        ck_assert_int_eq(st, GRPC_STATUS_INVALID_ARGUMENT);
        ck_assert_ptr_nonnull(strstr(msg, "not a valid"));
        stop();
}
END_TEST

START_TEST(test_no_server)
{
        char *v = NULL, msg[256];
        grpc_status_code st = GRPC_STATUS_OK;

        snprintf(sock, sizeof(sock), "/tmp/gsgrpc-none-%d.sock", (int)getpid());
        ck_assert_int_eq(call_echo("/test.Svc/Echo", "a", 2000, &v, &st, msg, sizeof(msg)), -ECONNREFUSED);
        ck_assert_int_eq(st, GRPC_STATUS_UNAVAILABLE);
}
END_TEST

START_TEST(test_deadline)
{
        char *v = NULL, msg[256];
        grpc_status_code st = GRPC_STATUS_OK;
        int64_t t0;

        start();
        t0 = gs_mono_ms();
        /* 2 s: long enough for the request to reach the handler under
         * valgrind (with 100 ms it expired before, and the handler never
         * went in). */
        ck_assert_int_eq(call_echo("/test.Svc/Block", "a", 2000, &v, &st, msg, sizeof(msg)), -ETIMEDOUT);
        ck_assert_int_eq(st, GRPC_STATUS_DEADLINE_EXCEEDED);
        /* the deadline ended the call, not the handler: it is still inside
         * (it went in, and the test has not let it go) */
        wait_for(&blocked_in, 1, "Block handlers entered");
        ck_assert_int_eq(atomic_load(&blocked_done), 0);
        printf("info: test_deadline: a 2000 ms deadline returned after %lld ms\n", (long long)(gs_mono_ms() - t0));
        atomic_store(&released, 1);
        wait_for(&blocked_done, 1, "Block handlers returned");
        /* the server survives the abandoned call */
        ck_assert_int_eq(call_echo("/test.Svc/Echo", "b", 5000, &v, &st, msg, sizeof(msg)), 0);
        free(v);
        stop();
}
END_TEST

static void *meet_thread(void *arg)
{
        char *v = NULL, msg[256];
        grpc_status_code st;
        intptr_t r = call_echo("/test.Svc/Meet", "p", 2 * HANG_MS, &v, &st, msg, sizeof(msg));

        (void)arg;
        free(v);
        return (void *)r;
}

START_TEST(test_parallel_calls)
{
        pthread_t t[PARALLEL];
        int64_t t0;

        /* Each Meet call returns OK only once all PARALLEL are inside at
         * once: a server that ran them one after another fails them all. */
        start();
        t0 = gs_mono_ms();
        for (int i = 0; i < PARALLEL; i++)
                ck_assert_int_eq(pthread_create(&t[i], NULL, meet_thread, NULL), 0);
        for (int i = 0; i < PARALLEL; i++) {
                void *r;
                pthread_join(t[i], &r);
                ck_assert_int_eq((intptr_t)r, 0);
        }
        printf("info: test_parallel_calls: %d calls met in %lld ms\n", PARALLEL, (long long)(gs_mono_ms() - t0));
        stop();
}
END_TEST

static void wait_closed_seen(void)
{
        wait_for(&stream_closed_seen, 1, "stream handler saw the close");
}

START_TEST(test_stream_cancel)
{
        V1beta1__Empty e = V1BETA1__EMPTY__INIT;
        struct gs_grpc_stream *st = NULL;
        ProtobufCMessage *m = NULL;
        V1beta1__ListAndWatchResponse *r;
        char *v = NULL, msg[256];
        grpc_status_code code;

        start();
        ck_assert_int_eq(gs_grpc_stream_open(sock, "/test.Svc/Stream", &e.base, &st), 0);
        ck_assert_int_eq(gs_grpc_stream_read(st, &v1beta1__list_and_watch_response__descriptor, 2000, &m, &code, msg,
                                             sizeof(msg)),
                         0);
        r = (V1beta1__ListAndWatchResponse *)m;
        ck_assert_uint_eq(r->n_devices, 1);
        ck_assert_str_eq(r->devices[0]->id, "dev0");
        protobuf_c_message_free_unpacked(m, NULL);
        /* nothing more comes until something changes */
        ck_assert_int_eq(gs_grpc_stream_read(st, &v1beta1__list_and_watch_response__descriptor, 100, &m, &code, msg,
                                             sizeof(msg)),
                         -ETIMEDOUT);
        ck_assert_int_eq(atomic_load(&stream_closed_seen), 0);
        gs_grpc_stream_close(st); /* cancels */
        wait_closed_seen();
        ck_assert_int_eq(call_echo("/test.Svc/Echo", "b", 2000, &v, &code, msg, sizeof(msg)), 0);
        free(v);
        stop();
}
END_TEST

START_TEST(test_stream_client_vanishes)
{
        int go[2];
        pid_t pid;
        int status;
        char c;

        /* Fork before this process initializes gRPC: the child is a clean
         * client, started once the server is up. */
        ck_assert_int_eq(pipe(go), 0);
        snprintf(sock, sizeof(sock), "/tmp/gsgrpc-%d.sock", (int)getpid());
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                /* A client that dies without cancelling: the connection just drops. */
                V1beta1__Empty e = V1BETA1__EMPTY__INIT;
                struct gs_grpc_stream *st = NULL;
                ProtobufCMessage *m = NULL;
                grpc_status_code code;
                close(go[1]);
                if (read(go[0], &c, 1) != 1)
                        _exit(1);
                if (gs_grpc_stream_open(sock, "/test.Svc/Stream", &e.base, &st) < 0)
                        _exit(2);
                if (gs_grpc_stream_read(st, &v1beta1__list_and_watch_response__descriptor, 2000, &m, &code, NULL, 0) <
                    0)
                        _exit(3);
                _exit(0);
        }
        close(go[0]);
        start();
        ck_assert_int_eq(write(go[1], "x", 1), 1);
        close(go[1]);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status));
        ck_assert_int_eq(WEXITSTATUS(status), 0);
        /* The child read the message, so the server sent it; but the
         * server's stream thread may not have returned from the send yet
         * (the child can read and exit first): wait for it. */
        wait_for(&stream_sent, 1, "stream messages sent");
        wait_closed_seen();
        stop();
}
END_TEST

START_TEST(test_shutdown_with_open_stream)
{
        V1beta1__Empty e = V1BETA1__EMPTY__INIT;
        struct gs_grpc_stream *st = NULL;
        ProtobufCMessage *m = NULL;
        grpc_status_code code = GRPC_STATUS_OK;
        char msg[256];
        int64_t t0;
        int r;

        start();
        ck_assert_int_eq(gs_grpc_stream_open(sock, "/test.Svc/Stream", &e.base, &st), 0);
        ck_assert_int_eq(gs_grpc_stream_read(st, &v1beta1__list_and_watch_response__descriptor, 2000, &m, &code, msg,
                                             sizeof(msg)),
                         0);
        protobuf_c_message_free_unpacked(m, NULL);
        t0 = gs_mono_ms();
        /* Must not wait for the client, which never closes: stop returns
         * once the stream handler has seen the call end (the shutdown
         * cancels it), not when the handler gives up after 10 s. */
        stop();
        printf("info: test_shutdown_with_open_stream: stop took %lld ms\n", (long long)(gs_mono_ms() - t0));
        ck_assert_int_eq(atomic_load(&stream_closed_seen), 1);
        do
                r = gs_grpc_stream_read(st, &v1beta1__list_and_watch_response__descriptor, 2000, &m, &code, msg,
                                        sizeof(msg));
        while (r == 0 && (protobuf_c_message_free_unpacked(m, NULL), 1));
        ck_assert_int_eq(r, -ENODATA);
        ck_assert_int_ne(code, GRPC_STATUS_OK);
        gs_grpc_stream_close(st);
        /* and a new server can take the same path */
        start();
        stop();
}
END_TEST

START_TEST(test_refuses_non_socket)
{
        struct gs_grpc_server *s = NULL;
        char path[64];
        FILE *f;

        snprintf(path, sizeof(path), "/tmp/gsgrpc-file-%d", (int)getpid());
        f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fclose(f);
        ck_assert_int_eq(gs_grpc_server_start(path, methods, 1, NULL, &s), -EEXIST);
        unlink(path);
        ck_assert_int_eq(
                gs_grpc_server_start(
                        "/tmp/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                        methods, 1, NULL, &s),
                -ENAMETOOLONG);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("grpc");
        TCase *tc = tcase_create("grpc");

        tcase_set_timeout(tc, 30);
        tcase_add_test(tc, test_unary_round_trip);
        tcase_add_test(tc, test_error_status);
        tcase_add_test(tc, test_unknown_method);
        tcase_add_test(tc, test_bad_request);
        tcase_add_test(tc, test_no_server);
        tcase_add_test(tc, test_deadline);
        tcase_add_test(tc, test_parallel_calls);
        tcase_add_test(tc, test_stream_cancel);
        tcase_add_test(tc, test_stream_client_vanishes);
        tcase_add_test(tc, test_shutdown_with_open_stream);
        tcase_add_test(tc, test_refuses_non_socket);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
