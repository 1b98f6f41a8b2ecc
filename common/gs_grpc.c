/* gs_grpc.c — see gs_grpc.h.
 *
 * Server structure: one completion queue (a "next" queue registered with the
 * server) receives only new-call notifications and the shutdown tag; a
 * dispatcher thread waits on it.  Each requested call is bound to its own
 * "pluck" queue, so the thread that handles the call can wait for exactly
 * the batch it started, with a deadline, without seeing anyone else's
 * events.  At the start of every call a RECV_CLOSE_ON_SERVER batch is left
 * pending: it completes when the call ends for any reason (status sent,
 * client cancelled, connection lost, server cancelling all calls), which is
 * how a streaming handler learns that its client went away. */
#include "gs_grpc.h"

#include <errno.h>
#include <limits.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* How long a call may take to send its request before it is dropped; the
 * kubelet sends at once, this only bounds a client that never does. */
#define RECV_REQUEST_TIMEOUT_MS 30000
#define CALL_THREAD_STACK (512u * 1024u)

/* Tags within one call's own queue. */
enum { TAG_RECV = 1, TAG_CLOSE, TAG_SEND, TAG_FINISH };
#define TAGP(t) ((void *)(uintptr_t)(t))

struct gs_grpc_server {
        grpc_server *server;
        grpc_completion_queue *cq;
        pthread_t dispatcher;
        const struct gs_grpc_method *methods;
        size_t nmethods;
        void *ctx;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        unsigned live_calls;
        int shutdown_tag; /* its address is the tag */
};

struct gs_grpc_call {
        struct gs_grpc_server *srv;
        grpc_call *call;
        grpc_call_details details;
        grpc_metadata_array md;
        grpc_completion_queue *cq; /* bound to this call, pluck type */
        int cancelled;             /* out of RECV_CLOSE_ON_SERVER */
        bool closed;               /* TAG_CLOSE has been plucked */
        bool md_sent;              /* initial metadata sent */
};

static gpr_timespec deadline_in(int timeout_ms)
{
        if (timeout_ms < 0)
                return gpr_inf_future(GPR_CLOCK_MONOTONIC);
        return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

/* Waits for tag on the pluck queue cq; true if it arrived with success. */
static grpc_event pluck(grpc_completion_queue *cq, int tag, int timeout_ms)
{
        return grpc_completion_queue_pluck(cq, TAGP(tag), deadline_in(timeout_ms), NULL);
}

static void destroy_cq(grpc_completion_queue *cq)
{
        if (!cq)
                return;
        grpc_completion_queue_shutdown(cq);
        grpc_completion_queue_destroy(cq);
}

int gs_grpc_status_to_errno(grpc_status_code s)
{
        switch (s) {
        case GRPC_STATUS_OK: return 0;
        case GRPC_STATUS_CANCELLED: return -ECANCELED;
        case GRPC_STATUS_INVALID_ARGUMENT: return -EINVAL;
        case GRPC_STATUS_DEADLINE_EXCEEDED: return -ETIMEDOUT;
        case GRPC_STATUS_NOT_FOUND: return -ENOENT;
        case GRPC_STATUS_ALREADY_EXISTS: return -EEXIST;
        case GRPC_STATUS_PERMISSION_DENIED: return -EPERM;
        case GRPC_STATUS_RESOURCE_EXHAUSTED: return -ENOSPC;
        case GRPC_STATUS_FAILED_PRECONDITION: return -EBUSY;
        case GRPC_STATUS_UNIMPLEMENTED: return -ENOSYS;
        case GRPC_STATUS_UNAVAILABLE: return -ECONNREFUSED;
        default: return -EPROTO;
        }
}

/* ---- messages <-> byte buffers ---- */

static grpc_byte_buffer *pack(const ProtobufCMessage *m)
{
        size_t len = protobuf_c_message_get_packed_size(m);
        grpc_slice slice = grpc_slice_malloc(len);
        grpc_byte_buffer *bb;

        protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(slice));
        bb = grpc_raw_byte_buffer_create(&slice, 1);
        grpc_slice_unref(slice);
        return bb;
}

static ProtobufCMessage *unpack(const ProtobufCMessageDescriptor *d, grpc_byte_buffer *bb)
{
        grpc_byte_buffer_reader rd;
        grpc_slice s;
        ProtobufCMessage *m;

        if (!grpc_byte_buffer_reader_init(&rd, bb))
                return NULL;
        s = grpc_byte_buffer_reader_readall(&rd);
        grpc_byte_buffer_reader_destroy(&rd);
        m = protobuf_c_message_unpack(d, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
        grpc_slice_unref(s);
        return m;
}

/* ---- server: one call ---- */

int64_t gs_grpc_call_deadline_left_ms(const struct gs_grpc_call *c)
{
        gpr_timespec d = gpr_convert_clock_type(c->details.deadline, GPR_CLOCK_MONOTONIC);
        gpr_timespec now = gpr_now(GPR_CLOCK_MONOTONIC);
        int64_t left;

        if (gpr_time_cmp(d, gpr_inf_future(GPR_CLOCK_MONOTONIC)) == 0 || d.tv_sec > now.tv_sec + 365 * 24 * 3600)
                return -1;
        left = gpr_time_to_millis(gpr_time_sub(d, now));
        return left < 0 ? 0 : left;
}

int gs_grpc_call_wait_closed(struct gs_grpc_call *c, int timeout_ms)
{
        grpc_event ev;

        if (c->closed)
                return 1;
        ev = pluck(c->cq, TAG_CLOSE, timeout_ms < 0 ? 0 : timeout_ms);
        if (ev.type != GRPC_OP_COMPLETE)
                return 0;
        c->closed = true;
        return 1;
}

int gs_grpc_call_send(struct gs_grpc_call *c, const ProtobufCMessage *msg, int timeout_ms)
{
        grpc_op ops[2];
        grpc_event ev;
        size_t n = 0;
        grpc_byte_buffer *bb;

        if (c->closed)
                return -ECANCELED;
        bb = pack(msg);
        if (!bb)
                return -ENOMEM;
        memset(ops, 0, sizeof(ops));
        if (!c->md_sent) {
                ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
                c->md_sent = true;
        }
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = bb;
        if (grpc_call_start_batch(c->call, ops, n, TAGP(TAG_SEND), NULL) != GRPC_CALL_OK) {
                grpc_byte_buffer_destroy(bb);
                return -ECANCELED;
        }
        ev = pluck(c->cq, TAG_SEND, timeout_ms);
        if (ev.type == GRPC_QUEUE_TIMEOUT) {
                /* A client that does not read: give up on it.  The batch then
                 * completes (unsuccessfully) at once. */
                grpc_call_cancel_with_status(c->call, GRPC_STATUS_DEADLINE_EXCEEDED, "client did not read the stream",
                                             NULL);
                pluck(c->cq, TAG_SEND, -1);
                grpc_byte_buffer_destroy(bb);
                return -ETIMEDOUT;
        }
        grpc_byte_buffer_destroy(bb);
        return ev.success ? 0 : -ECANCELED;
}

/* Sends the final status (and reply, if any).  Errors are not reported: the
 * client may be gone, which is fine. */
static void finish(struct gs_grpc_call *c, grpc_status_code code, const char *msg, const ProtobufCMessage *reply)
{
        grpc_op ops[3];
        size_t n = 0;
        grpc_byte_buffer *bb = reply ? pack(reply) : NULL;
        grpc_slice details = grpc_slice_from_copied_string(msg ? msg : "");

        memset(ops, 0, sizeof(ops));
        if (!c->md_sent) {
                ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
                c->md_sent = true;
        }
        if (bb) {
                ops[n].op = GRPC_OP_SEND_MESSAGE;
                ops[n++].data.send_message.send_message = bb;
        }
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = code;
        ops[n++].data.send_status_from_server.status_details = code == GRPC_STATUS_OK ? NULL : &details;
        if (grpc_call_start_batch(c->call, ops, n, TAGP(TAG_FINISH), NULL) == GRPC_CALL_OK)
                pluck(c->cq, TAG_FINISH, -1);
        grpc_slice_unref(details);
        if (bb)
                grpc_byte_buffer_destroy(bb);
}

static const struct gs_grpc_method *find_method(struct gs_grpc_server *s, grpc_slice path)
{
        size_t len = GRPC_SLICE_LENGTH(path);

        for (size_t i = 0; i < s->nmethods; i++)
                if (strlen(s->methods[i].path) == len &&
                    memcmp(s->methods[i].path, GRPC_SLICE_START_PTR(path), len) == 0)
                        return &s->methods[i];
        return NULL;
}

/* Asks to be told when the call ends (c->cancelled says whether the client
 * went away); every call does this first, so a vanished client is noticed. */
static void watch_close(struct gs_grpc_call *c)
{
        grpc_op op;

        memset(&op, 0, sizeof(op));
        op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        op.data.recv_close_on_server.cancelled = &c->cancelled;
        if (grpc_call_start_batch(c->call, &op, 1, TAGP(TAG_CLOSE), NULL) != GRPC_CALL_OK)
                c->closed = true;
}

/* Receives and decodes the request; on failure fills code/msg. */
static ProtobufCMessage *recv_request(struct gs_grpc_call *c, const struct gs_grpc_method *m, grpc_status_code *code,
                                      char *msg, size_t msglen)
{
        grpc_byte_buffer *bb = NULL;
        grpc_op op;
        grpc_event ev;
        ProtobufCMessage *req = NULL;

        memset(&op, 0, sizeof(op));
        op.op = GRPC_OP_RECV_MESSAGE;
        op.data.recv_message.recv_message = &bb;
        if (grpc_call_start_batch(c->call, &op, 1, TAGP(TAG_RECV), NULL) != GRPC_CALL_OK) {
                *code = GRPC_STATUS_INTERNAL;
                snprintf(msg, msglen, "cannot read the request");
                return NULL;
        }
        ev = pluck(c->cq, TAG_RECV, RECV_REQUEST_TIMEOUT_MS);
        if (ev.type == GRPC_QUEUE_TIMEOUT) {
                grpc_call_cancel_with_status(c->call, GRPC_STATUS_DEADLINE_EXCEEDED, "no request message", NULL);
                ev = pluck(c->cq, TAG_RECV, -1);
        }
        if (!ev.success || !bb) {
                *code = GRPC_STATUS_INVALID_ARGUMENT;
                snprintf(msg, msglen, "%s: the request message is missing", m->path);
                goto out;
        }
        req = unpack(m->request, bb);
        if (!req) {
                *code = GRPC_STATUS_INVALID_ARGUMENT;
                snprintf(msg, msglen, "%s: the request is not a valid %s", m->path, m->request->name);
        }
out:
        if (bb)
                grpc_byte_buffer_destroy(bb);
        return req;
}

static void handle_call(struct gs_grpc_call *c)
{
        struct gs_grpc_server *s = c->srv;
        const struct gs_grpc_method *m = find_method(s, c->details.method);
        grpc_status_code code = GRPC_STATUS_OK;
        char msg[GS_GRPC_MSG_MAX] = "";
        ProtobufCMessage *req = NULL, *reply = NULL;

        watch_close(c);
        if (!m) {
                char *p = grpc_slice_to_c_string(c->details.method);
                code = GRPC_STATUS_UNIMPLEMENTED;
                snprintf(msg, sizeof(msg), "unknown method %s", p);
                gpr_free(p);
                goto done;
        }
        req = recv_request(c, m, &code, msg, sizeof(msg));
        if (!req)
                goto done;
        if (m->unary) {
                code = m->unary(s->ctx, c, req, &reply, msg, sizeof(msg));
                if (code != GRPC_STATUS_OK && reply) {
                        if (m->free_reply)
                                m->free_reply(s->ctx, reply);
                        reply = NULL;
                }
                if (code == GRPC_STATUS_OK && !reply) {
                        code = GRPC_STATUS_INTERNAL;
                        snprintf(msg, sizeof(msg), "%s: handler gave no reply", m->path);
                }
        } else {
                code = m->stream(s->ctx, c, req, msg, sizeof(msg));
        }
done:
        if (!c->closed)
                finish(c, code, msg, reply);
        if (reply && m->free_reply)
                m->free_reply(s->ctx, reply);
        if (req)
                protobuf_c_message_free_unpacked(req, NULL);
        if (!c->closed)
                pluck(c->cq, TAG_CLOSE, -1);
}

static void call_free(struct gs_grpc_call *c)
{
        if (!c)
                return;
        if (c->call)
                grpc_call_unref(c->call);
        grpc_call_details_destroy(&c->details);
        grpc_metadata_array_destroy(&c->md);
        destroy_cq(c->cq);
        free(c);
}

static void *call_thread(void *arg)
{
        struct gs_grpc_call *c = arg;
        struct gs_grpc_server *s = c->srv;

        handle_call(c);
        call_free(c);
        pthread_mutex_lock(&s->mu);
        s->live_calls--;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        return NULL;
}

static struct gs_grpc_call *request_call(struct gs_grpc_server *s)
{
        struct gs_grpc_call *c = calloc(1, sizeof(*c));

        if (!c)
                return NULL;
        c->srv = s;
        grpc_call_details_init(&c->details);
        grpc_metadata_array_init(&c->md);
        c->cq = grpc_completion_queue_create_for_pluck(NULL);
        if (grpc_server_request_call(s->server, &c->call, &c->details, &c->md, c->cq, s->cq, c) != GRPC_CALL_OK) {
                call_free(c);
                return NULL;
        }
        return c;
}

static void start_call(struct gs_grpc_server *s, struct gs_grpc_call *c)
{
        pthread_attr_t attr;
        pthread_t t;
        bool ok = false;

        pthread_mutex_lock(&s->mu);
        if (s->live_calls < GS_GRPC_MAX_CALLS) {
                s->live_calls++;
                ok = true;
        }
        pthread_mutex_unlock(&s->mu);
        if (ok) {
                pthread_attr_init(&attr);
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                pthread_attr_setstacksize(&attr, CALL_THREAD_STACK);
                if (pthread_create(&t, &attr, call_thread, c) == 0) {
                        pthread_attr_destroy(&attr);
                        return;
                }
                pthread_attr_destroy(&attr);
                pthread_mutex_lock(&s->mu);
                s->live_calls--;
                pthread_mutex_unlock(&s->mu);
        }
        /* Too busy: answer here, without reading the request. */
        {
                watch_close(c);
                finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "server busy: too many calls in flight", NULL);
                if (!c->closed)
                        pluck(c->cq, TAG_CLOSE, -1);
                call_free(c);
        }
}

static void *dispatcher(void *arg)
{
        struct gs_grpc_server *s = arg;
        struct gs_grpc_call *pending = request_call(s);
        bool shut = false;

        for (;;) {
                grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);

                if (ev.type == GRPC_QUEUE_SHUTDOWN)
                        break;
                if (ev.type != GRPC_OP_COMPLETE)
                        continue;
                if (ev.tag == &s->shutdown_tag) {
                        shut = true;
                } else {
                        struct gs_grpc_call *c = ev.tag;
                        if (c == pending)
                                pending = NULL;
                        if (ev.success && !shut) {
                                pending = request_call(s);
                                start_call(s, c);
                        } else {
                                call_free(c);
                        }
                }
                if (shut && !pending)
                        break;
        }
        return NULL;
}

int gs_grpc_server_start(const char *path, const struct gs_grpc_method *methods, size_t n, void *ctx,
                         struct gs_grpc_server **ret_server)
{
        struct sockaddr_un sa;
        struct gs_grpc_server *s;
        grpc_server_credentials *creds;
        char addr[sizeof(sa.sun_path) + 8];
        struct stat st;
        int port;

        if (!path || strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        /* Replace a stale socket, but never a file of another kind. */
        if (lstat(path, &st) == 0) {
                if (!S_ISSOCK(st.st_mode))
                        return -EEXIST;
                if (unlink(path) < 0)
                        return gs_neg_errno();
        }
        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->methods = methods;
        s->nmethods = n;
        s->ctx = ctx;
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->cv, NULL);
        grpc_init();
        s->server = grpc_server_create(NULL, NULL);
        s->cq = grpc_completion_queue_create_for_next(NULL);
        grpc_server_register_completion_queue(s->server, s->cq, NULL);
        snprintf(addr, sizeof(addr), "unix:%s", path);
        creds = grpc_insecure_server_credentials_create();
        port = grpc_server_add_http2_port(s->server, addr, creds);
        grpc_server_credentials_release(creds);
        if (port == 0) {
                grpc_server_destroy(s->server);
                destroy_cq(s->cq);
                grpc_shutdown();
                pthread_mutex_destroy(&s->mu);
                pthread_cond_destroy(&s->cv);
                free(s);
                return -EADDRINUSE;
        }
        grpc_server_start(s->server);
        if (pthread_create(&s->dispatcher, NULL, dispatcher, s) != 0) {
                /* Without a dispatcher nothing can be served: tear down. */
                grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
                grpc_server_cancel_all_calls(s->server);
                grpc_completion_queue_pluck(s->cq, &s->shutdown_tag, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
                grpc_server_destroy(s->server);
                destroy_cq(s->cq);
                grpc_shutdown();
                free(s);
                return -EAGAIN;
        }
        *ret_server = s;
        return 0;
}

void gs_grpc_server_stop(struct gs_grpc_server *s)
{
        if (!s)
                return;
        grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
        grpc_server_cancel_all_calls(s->server);
        pthread_join(s->dispatcher, NULL);
        pthread_mutex_lock(&s->mu);
        while (s->live_calls > 0)
                pthread_cond_wait(&s->cv, &s->mu);
        pthread_mutex_unlock(&s->mu);
        grpc_server_destroy(s->server);
        grpc_completion_queue_shutdown(s->cq);
        while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type != GRPC_QUEUE_SHUTDOWN)
                ;
        grpc_completion_queue_destroy(s->cq);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        grpc_shutdown();
}

/* ---- client ---- */

static grpc_channel *open_channel(const char *path)
{
        char addr[PATH_MAX + 8];
        grpc_channel_credentials *creds = grpc_insecure_credentials_create();
        grpc_channel *ch;

        snprintf(addr, sizeof(addr), "unix:%s", path);
        ch = grpc_channel_create(addr, creds, NULL);
        grpc_channel_credentials_release(creds);
        return ch;
}

static void copy_details(grpc_slice details, char *msg, size_t msglen)
{
        size_t len = GRPC_SLICE_LENGTH(details);

        if (!msg || msglen == 0)
                return;
        if (len >= msglen)
                len = msglen - 1;
        memcpy(msg, GRPC_SLICE_START_PTR(details), len);
        msg[len] = '\0';
}

int gs_grpc_unary_call(const char *path, const char *method, const ProtobufCMessage *req,
                       const ProtobufCMessageDescriptor *reply_desc, int timeout_ms, ProtobufCMessage **ret_reply,
                       grpc_status_code *ret_status, char *msg, size_t msglen)
{
        grpc_channel *ch;
        grpc_completion_queue *cq;
        grpc_call *call;
        grpc_metadata_array md_init, md_trail;
        grpc_byte_buffer *send = NULL, *recv = NULL;
        grpc_status_code status = GRPC_STATUS_UNKNOWN;
        grpc_slice details = grpc_empty_slice();
        grpc_slice mslice = grpc_slice_from_copied_string(method);
        grpc_op ops[6];
        int r;

        if (msg && msglen)
                msg[0] = '\0';
        grpc_init();
        ch = open_channel(path);
        cq = grpc_completion_queue_create_for_pluck(NULL);
        grpc_metadata_array_init(&md_init);
        grpc_metadata_array_init(&md_trail);
        call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, mslice, NULL, deadline_in(timeout_ms),
                                        NULL);
        send = pack(req);
        memset(ops, 0, sizeof(ops));
        ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[1].op = GRPC_OP_SEND_MESSAGE;
        ops[1].data.send_message.send_message = send;
        ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_init;
        ops[4].op = GRPC_OP_RECV_MESSAGE;
        ops[4].data.recv_message.recv_message = &recv;
        ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        ops[5].data.recv_status_on_client.trailing_metadata = &md_trail;
        ops[5].data.recv_status_on_client.status = &status;
        ops[5].data.recv_status_on_client.status_details = &details;
        if (grpc_call_start_batch(call, ops, 6, TAGP(TAG_FINISH), NULL) != GRPC_CALL_OK) {
                status = GRPC_STATUS_INTERNAL;
                snprintf(msg, msglen, "cannot start the call");
        } else {
                pluck(cq, TAG_FINISH, -1); /* the call's deadline bounds it */
                copy_details(details, msg, msglen);
        }
        r = gs_grpc_status_to_errno(status);
        if (r == 0) {
                ProtobufCMessage *m = recv ? unpack(reply_desc, recv) : NULL;
                if (!m) {
                        status = GRPC_STATUS_INTERNAL;
                        snprintf(msg, msglen, "%s: the reply is not a valid %s", method, reply_desc->name);
                        r = -EPROTO;
                } else {
                        *ret_reply = m;
                }
        } else if (r != -ETIMEDOUT && r != -ECONNREFUSED) {
                r = -EPROTO;
        }
        if (ret_status)
                *ret_status = status;
        if (send)
                grpc_byte_buffer_destroy(send);
        if (recv)
                grpc_byte_buffer_destroy(recv);
        grpc_slice_unref(details);
        grpc_slice_unref(mslice);
        grpc_metadata_array_destroy(&md_init);
        grpc_metadata_array_destroy(&md_trail);
        grpc_call_unref(call);
        destroy_cq(cq);
        grpc_channel_destroy(ch);
        grpc_shutdown();
        return r;
}

struct gs_grpc_stream {
        grpc_channel *ch;
        grpc_completion_queue *cq;
        grpc_call *call;
        grpc_metadata_array md_init, md_trail;
        grpc_status_code status;
        grpc_slice details;
        grpc_byte_buffer *recv;
        bool recv_pending, done;
};

int gs_grpc_stream_open(const char *path, const char *method, const ProtobufCMessage *req,
                        struct gs_grpc_stream **ret_stream)
{
        struct gs_grpc_stream *st = calloc(1, sizeof(*st));
        grpc_slice mslice;
        grpc_byte_buffer *send;
        grpc_op ops[4];
        grpc_event ev;

        if (!st)
                return -ENOMEM;
        grpc_init();
        st->ch = open_channel(path);
        st->cq = grpc_completion_queue_create_for_pluck(NULL);
        grpc_metadata_array_init(&st->md_init);
        grpc_metadata_array_init(&st->md_trail);
        st->details = grpc_empty_slice();
        mslice = grpc_slice_from_copied_string(method);
        st->call = grpc_channel_create_call(st->ch, NULL, GRPC_PROPAGATE_DEFAULTS, st->cq, mslice, NULL,
                                            gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        grpc_slice_unref(mslice);
        send = pack(req);
        memset(ops, 0, sizeof(ops));
        ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[1].op = GRPC_OP_SEND_MESSAGE;
        ops[1].data.send_message.send_message = send;
        ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[3].data.recv_initial_metadata.recv_initial_metadata = &st->md_init;
        if (grpc_call_start_batch(st->call, ops, 4, TAGP(TAG_SEND), NULL) != GRPC_CALL_OK) {
                grpc_byte_buffer_destroy(send);
                st->done = true; /* nothing pending */
                gs_grpc_stream_close(st);
                return -EIO;
        }
        ev = pluck(st->cq, TAG_SEND, -1);
        grpc_byte_buffer_destroy(send);
        (void)ev; /* a failure shows up as the status at the first read */
        memset(ops, 0, sizeof(ops));
        ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        ops[0].data.recv_status_on_client.trailing_metadata = &st->md_trail;
        ops[0].data.recv_status_on_client.status = &st->status;
        ops[0].data.recv_status_on_client.status_details = &st->details;
        if (grpc_call_start_batch(st->call, ops, 1, TAGP(TAG_CLOSE), NULL) != GRPC_CALL_OK) {
                st->done = true; /* nothing pending */
                gs_grpc_stream_close(st);
                return -EIO;
        }
        *ret_stream = st;
        return 0;
}

int gs_grpc_stream_read(struct gs_grpc_stream *st, const ProtobufCMessageDescriptor *d, int timeout_ms,
                        ProtobufCMessage **ret_msg, grpc_status_code *ret_status, char *msg, size_t msglen)
{
        grpc_event ev;
        ProtobufCMessage *m;

        if (!st->done && !st->recv_pending) {
                grpc_op op;
                memset(&op, 0, sizeof(op));
                op.op = GRPC_OP_RECV_MESSAGE;
                op.data.recv_message.recv_message = &st->recv;
                if (grpc_call_start_batch(st->call, &op, 1, TAGP(TAG_RECV), NULL) != GRPC_CALL_OK)
                        return -EIO;
                st->recv_pending = true;
        }
        if (!st->done) {
                ev = pluck(st->cq, TAG_RECV, timeout_ms);
                if (ev.type == GRPC_QUEUE_TIMEOUT)
                        return -ETIMEDOUT;
                st->recv_pending = false;
                if (st->recv) {
                        m = unpack(d, st->recv);
                        grpc_byte_buffer_destroy(st->recv);
                        st->recv = NULL;
                        if (!m)
                                return -EBADMSG;
                        *ret_msg = m;
                        return 0;
                }
                /* End of stream: the status follows. */
                pluck(st->cq, TAG_CLOSE, -1);
                st->done = true;
        }
        if (ret_status)
                *ret_status = st->status;
        copy_details(st->details, msg, msglen);
        return -ENODATA;
}

void gs_grpc_stream_close(struct gs_grpc_stream *st)
{
        if (!st)
                return;
        if (st->call) {
                if (!st->done) {
                        grpc_call_cancel(st->call, NULL);
                        if (st->recv_pending)
                                pluck(st->cq, TAG_RECV, -1);
                        pluck(st->cq, TAG_CLOSE, -1);
                }
                grpc_call_unref(st->call);
        }
        if (st->recv)
                grpc_byte_buffer_destroy(st->recv);
        grpc_slice_unref(st->details);
        grpc_metadata_array_destroy(&st->md_init);
        grpc_metadata_array_destroy(&st->md_trail);
        destroy_cq(st->cq);
        grpc_channel_destroy(st->ch);
        free(st);
        grpc_shutdown();
}
