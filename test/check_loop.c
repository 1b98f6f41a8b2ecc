/* check_loop.c — the agent's reactor (agent/base/gs_loop.h), by its
 * contract: fd sources get what is ready, timers run again at the deadline
 * they return (an earlier arm stands), posts run once after the batch
 * however often posted, async sources sent from another thread wake the
 * loop and are never lost, a source removed during a batch gets nothing
 * more from it, and memory handed to gs_loop_defer_free outlives the
 * batch.  Every wait has a watchdog timer of 10 s that only catches a
 * hang. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_loop.h"
#include "gs_util.h"

#define HANG_MS 10000

static struct gs_loop *loop;
static struct gs_loop_timer watchdog;
static int hung;

static int64_t on_watchdog(void *data, int64_t now)
{
        (void)data;
        (void)now;
        hung = 1;
        gs_loop_stop(loop);
        return GS_LOOP_NEVER;
}

static void setup(void)
{
        ck_assert_int_eq(gs_loop_new(&loop), 0);
        hung = 0;
        gs_loop_timer_add(loop, &watchdog, on_watchdog, NULL);
        gs_loop_timer_arm(&watchdog, gs_mono_ms() + HANG_MS);
}

static void teardown(void)
{
        gs_loop_timer_del(loop, &watchdog);
        gs_loop_free(loop);
        loop = NULL;
}

/* Runs the loop until a callback stops it; fails on a hang. */
static void run_loop(void)
{
        ck_assert_int_eq(gs_loop_run(loop), 0);
        ck_assert_msg(!hung, "the loop did not stop within %d ms", HANG_MS);
}

static void make_pipe(int p[2])
{
        ck_assert_int_eq(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
}

static void put(int fd, const char *s)
{
        ck_assert_int_eq(write(fd, s, strlen(s)), (ssize_t)strlen(s));
}

/* ---- fd sources ---- */

struct reader {
        struct gs_loop_io io;
        int fd;
        char got[64];
        size_t len;
        int calls;
        uint32_t events;
        size_t stop_at; /* stop the loop once this much was read */
};

static void on_read(void *data, uint32_t events)
{
        struct reader *r = data;
        ssize_t n = read(r->fd, r->got + r->len, sizeof(r->got) - 1 - r->len);

        r->calls++;
        r->events |= events;
        if (n > 0)
                r->len += (size_t)n;
        if (r->len >= r->stop_at)
                gs_loop_stop(loop);
}

START_TEST(test_io_read)
{
        struct reader r = { .stop_at = 5 };
        int p[2];

        make_pipe(p);
        r.fd = p[0];
        ck_assert_int_eq(gs_loop_io_add(loop, &r.io, p[0], EPOLLIN, on_read, &r), 0);
        put(p[1], "hel");
        put(p[1], "lo");
        run_loop();
        ck_assert_str_eq(r.got, "hello");
        ck_assert(r.events & EPOLLIN);
        gs_loop_io_del(loop, &r.io);
        close(p[0]);
        close(p[1]);
}
END_TEST

struct writer {
        struct gs_loop_io io;
        uint32_t events_seen[2];
        int calls;
};

/* First EPOLLIN (the peer's byte), then, asked from the callback,
 * EPOLLOUT alone (the byte is still unread). */
static void on_writable(void *data, uint32_t events)
{
        struct writer *w = data;

        w->events_seen[w->calls++] = events;
        if (w->calls == 1) {
                ck_assert_int_eq(gs_loop_io_set(loop, &w->io, EPOLLOUT), 0);
                ck_assert_int_eq(gs_loop_io_set(loop, &w->io, EPOLLOUT), 0); /* the same: a no-op */
        } else {
                gs_loop_stop(loop);
        }
}

/* gs_loop_io_set: the events asked for are the events delivered. */
START_TEST(test_io_set)
{
        struct writer w = { 0 };
        int sv[2];

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
        /* Writable from the start, but only EPOLLIN asked: a byte from the
         * peer is the first thing to come. */
        ck_assert_int_eq(gs_loop_io_add(loop, &w.io, sv[0], EPOLLIN, on_writable, &w), 0);
        put(sv[1], "x");
        run_loop();
        ck_assert_int_eq(w.calls, 2);
        ck_assert_uint_eq(w.events_seen[0] & (EPOLLIN | EPOLLOUT), EPOLLIN);
        ck_assert_uint_eq(w.events_seen[1] & (EPOLLIN | EPOLLOUT), EPOLLOUT);
        gs_loop_io_del(loop, &w.io);
        close(sv[0]);
        close(sv[1]);
}
END_TEST

/* ---- removal inside a batch, deferred frees ---- */

#define CANARY "0123456789abcdef0123456789abcdef"

struct victim {
        char canary[sizeof(CANARY)]; /* where malloc puts its own data once freed */
        struct gs_loop_io io;
        int fd;
        struct victim **peer; /* the other victim, NULL once gone */
        struct victim **self;
};

static int victim_calls, witness_calls, witness_saw_bad;
static struct victim *va, *vb;

/* Whichever victim comes first removes both (itself in its own callback)
 * and hands both to gs_loop_defer_free: the other gets no event from this
 * batch, and both stay readable until the batch ends. */
static void on_victim(void *data, uint32_t events)
{
        struct victim *v = data, *other = *v->peer;

        (void)events;
        victim_calls++;
        ck_assert_str_eq(v->canary, CANARY);
        gs_loop_io_del(loop, &v->io);
        gs_loop_defer_free(loop, v);
        if (other) {
                gs_loop_io_del(loop, &other->io);
                gs_loop_defer_free(loop, other);
        }
        *v->self = NULL;
        *v->peer = NULL;
}

static struct victim *saved_a, *saved_b; /* the witness's view, freed or not */
static struct gs_loop_post stop_post;

static int pa[2], pb[2], pw[2];
static struct victim fresh = { .canary = CANARY };

/* After the batch: the removed fds, readable again, must wake nothing;
 * the witness's next event stops the loop. */
static void second_round(void *data)
{
        char c;

        (void)data;
        saved_a = saved_b = &fresh; /* the victims are freed by now */
        ck_assert_int_eq(read(pw[0], &c, 1), 1);
        put(pa[1], "a");
        put(pb[1], "b");
        put(pw[1], "w");
}

/* A third source of the same batch, before or after the victims: their
 * memory is still theirs. */
static void on_witness(void *data, uint32_t events)
{
        (void)data;
        (void)events;
        if (strcmp(saved_a->canary, CANARY) != 0 || strcmp(saved_b->canary, CANARY) != 0)
                witness_saw_bad = 1;
        if (++witness_calls == 1)
                gs_loop_post(loop, &stop_post, second_round, NULL);
        else
                gs_loop_stop(loop);
}

START_TEST(test_remove_in_batch)
{
        struct gs_loop_io wio;

        make_pipe(pa);
        make_pipe(pb);
        make_pipe(pw);
        va = malloc(sizeof(*va));
        vb = malloc(sizeof(*vb));
        ck_assert(va && vb);
        *va = (struct victim){ .canary = CANARY, .fd = pa[0], .peer = &vb, .self = &va };
        *vb = (struct victim){ .canary = CANARY, .fd = pb[0], .peer = &va, .self = &vb };
        saved_a = va;
        saved_b = vb;
        ck_assert_int_eq(gs_loop_io_add(loop, &va->io, pa[0], EPOLLIN, on_victim, va), 0);
        ck_assert_int_eq(gs_loop_io_add(loop, &vb->io, pb[0], EPOLLIN, on_victim, vb), 0);
        ck_assert_int_eq(gs_loop_io_add(loop, &wio, pw[0], EPOLLIN, on_witness, NULL), 0);
        /* All three ready before the loop waits: one batch. */
        put(pa[1], "a");
        put(pb[1], "b");
        put(pw[1], "w");
        run_loop();
        ck_assert_int_eq(victim_calls, 1);
        ck_assert_int_eq(witness_calls, 2);
        ck_assert_msg(!witness_saw_bad, "memory handed to gs_loop_defer_free was freed within the batch");
        ck_assert_ptr_null(va);
        ck_assert_ptr_null(vb);
        gs_loop_io_del(loop, &wio);
        for (int i = 0; i < 2; i++) {
                close(pa[i]);
                close(pb[i]);
                close(pw[i]);
        }
        /* Freed by now (LeakSanitizer would say otherwise under ASan). */
}
END_TEST

/* ---- timers ---- */

struct ticker {
        struct gs_loop_timer t;
        int calls, limit;
        int64_t due;  /* what it last returned */
        int64_t late; /* a call before its deadline: its now */
};

/* Runs limit times, each time asking for the next run 20 ms on. */
static int64_t on_tick(void *data, int64_t now)
{
        struct ticker *k = data;

        if (now < k->due)
                k->late = now;
        if (++k->calls == k->limit) {
                gs_loop_stop(loop);
                return GS_LOOP_NEVER;
        }
        k->due = now + 20;
        return k->due;
}

START_TEST(test_timer_rearmed_by_its_return)
{
        struct ticker k = { .limit = 4, .late = -1 };

        gs_loop_timer_add(loop, &k.t, on_tick, &k);
        k.due = gs_mono_ms() + 20;
        gs_loop_timer_arm(&k.t, k.due);
        run_loop();
        ck_assert_int_eq(k.calls, 4);
        ck_assert_msg(k.late < 0, "a timer ran at %lld, before its deadline %lld", (long long)k.late, (long long)k.due);
        ck_assert_int_eq(k.t.due, GS_LOOP_NEVER); /* NEVER returned: disarmed */
        gs_loop_timer_del(loop, &k.t);
}
END_TEST

static int64_t stop_timer(void *data, int64_t now)
{
        int *calls = data;

        (void)now;
        ++*calls;
        gs_loop_stop(loop);
        return GS_LOOP_NEVER;
}

/* The earliest deadline armed stands: a later arm does not delay it, an
 * earlier one brings it forward. */
START_TEST(test_timer_earliest_arm)
{
        struct gs_loop_timer a, b;
        int64_t now = gs_mono_ms();
        int ca = 0, cb = 0;

        gs_loop_timer_add(loop, &a, stop_timer, &ca);
        gs_loop_timer_add(loop, &b, stop_timer, &cb);
        ck_assert_int_eq(a.due, GS_LOOP_NEVER); /* added disarmed */
        gs_loop_timer_arm(&a, now + 5 * HANG_MS);
        gs_loop_timer_arm(&a, now + 10); /* earlier: brought forward */
        gs_loop_timer_arm(&b, now + 10);
        gs_loop_timer_arm(&b, now + 5 * HANG_MS); /* later: ignored */
        /* Both run at +10 ms, in the same pass; the watchdog (+10 s) is
         * the only other deadline. */
        run_loop();
        ck_assert_int_eq(ca, 1);
        ck_assert_int_eq(cb, 1);
        gs_loop_timer_del(loop, &a);
        gs_loop_timer_del(loop, &b);
}
END_TEST

/* A timer deleted never runs. */
START_TEST(test_timer_del)
{
        struct gs_loop_timer a, b;
        int ca = 0, cb = 0;

        gs_loop_timer_add(loop, &a, stop_timer, &ca);
        gs_loop_timer_add(loop, &b, stop_timer, &cb);
        gs_loop_timer_arm(&a, gs_mono_ms());
        gs_loop_timer_arm(&b, gs_mono_ms() + 30);
        gs_loop_timer_del(loop, &a);
        run_loop();
        ck_assert_int_eq(ca, 0);
        ck_assert_int_eq(cb, 1);
        gs_loop_timer_del(loop, &b);
}
END_TEST

/* ---- posts ---- */

struct poster {
        struct gs_loop_io io;
        int fd;
};

static struct gs_loop_post post_p, post_q, post_cancelled, post_chained;
static int p_runs, q_runs, cancelled_runs, chained_runs, p_seen_in_batch;

static void on_p(void *data);

/* The first time, posts p again: it ran, so it may be posted again, and
 * runs in this pass too. */
static void on_chained(void *data)
{
        (void)data;
        if (++chained_runs == 1)
                gs_loop_post(loop, &post_p, on_p, NULL);
        else
                gs_loop_stop(loop);
}

static void on_p(void *data)
{
        (void)data;
        p_runs++;
        /* A post made by a post runs in the same pass. */
        gs_loop_post(loop, &post_chained, on_chained, NULL);
}

static void on_q(void *data)
{
        (void)data;
        q_runs++;
}

static void on_cancelled(void *data)
{
        (void)data;
        cancelled_runs++;
}

/* Each fd of the batch posts p (three times) and q, and cancels one: none
 * runs before the batch ends, then each once. */
static void on_poster(void *data, uint32_t events)
{
        struct poster *ps = data;
        char c;

        (void)events;
        ck_assert_int_eq(read(ps->fd, &c, 1), 1);
        p_seen_in_batch += p_runs;
        for (int i = 0; i < 3; i++)
                gs_loop_post(loop, &post_p, on_p, NULL);
        gs_loop_post(loop, &post_q, on_q, NULL);
        gs_loop_post(loop, &post_cancelled, on_cancelled, NULL);
        gs_loop_post_cancel(loop, &post_cancelled);
}

START_TEST(test_posts_once_after_batch)
{
        struct poster ps[3];
        int p[3][2];

        for (int i = 0; i < 3; i++) {
                make_pipe(p[i]);
                ps[i].fd = p[i][0];
                ck_assert_int_eq(gs_loop_io_add(loop, &ps[i].io, p[i][0], EPOLLIN, on_poster, &ps[i]), 0);
                put(p[i][1], "x");
        }
        run_loop();
        ck_assert_int_eq(p_seen_in_batch, 0);
        ck_assert_int_eq(p_runs, 2);
        ck_assert_int_eq(q_runs, 1);
        ck_assert_int_eq(cancelled_runs, 0);
        ck_assert_int_eq(chained_runs, 2);
        for (int i = 0; i < 3; i++) {
                gs_loop_io_del(loop, &ps[i].io);
                close(p[i][0]);
                close(p[i][1]);
        }
}
END_TEST

/* ---- async sources ---- */

#define SENDS 200000u

static struct gs_loop_async as_count, as_done;
static uint32_t sent_value; /* atomic: the sender's last value */
static uint32_t seen_value, async_runs, done_runs;

static void on_async_count(void *data)
{
        (void)data;
        async_runs++;
        seen_value = __atomic_load_n(&sent_value, __ATOMIC_ACQUIRE);
        if (seen_value == SENDS)
                gs_loop_stop(loop);
}

static void on_async_done(void *data)
{
        (void)data;
        done_runs++;
}

static void *sender(void *arg)
{
        (void)arg;
        for (uint32_t i = 1; i <= SENDS; i++) {
                __atomic_store_n(&sent_value, i, __ATOMIC_RELEASE);
                gs_loop_async_send(loop, &as_count);
                if (i % 1000 == 0)
                        gs_loop_async_send(loop, &as_done);
        }
        return NULL;
}

/* Another thread's sends wake a loop that has nothing else to do (but the
 * watchdog), each send is followed by a run that sees it (the last one
 * too: no lost wake-up), and sends coalesce. */
START_TEST(test_async_from_thread)
{
        pthread_t th;

        gs_loop_async_add(loop, &as_count, on_async_count, NULL);
        gs_loop_async_add(loop, &as_done, on_async_done, NULL);
        ck_assert_int_eq(pthread_create(&th, NULL, sender, NULL), 0);
        run_loop();
        ck_assert_int_eq(pthread_join(th, NULL), 0);
        ck_assert_uint_eq(seen_value, SENDS);
        ck_assert_uint_ge(async_runs, 1);
        ck_assert_uint_le(async_runs, SENDS);
        ck_assert_uint_le(done_runs, SENDS / 1000);
        gs_loop_async_del(loop, &as_count);
        gs_loop_async_del(loop, &as_done);
}
END_TEST

/* Sent before the loop runs: runs once, at the first batch. */
START_TEST(test_async_before_run)
{
        gs_loop_async_add(loop, &as_count, on_async_count, NULL);
        __atomic_store_n(&sent_value, SENDS, __ATOMIC_RELEASE);
        gs_loop_async_send(loop, &as_count);
        gs_loop_async_send(loop, &as_count);
        run_loop();
        ck_assert_uint_eq(async_runs, 1);
        gs_loop_async_del(loop, &as_count);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("loop");
        TCase *tc = tcase_create("loop");

        tcase_set_timeout(tc, 60); /* the watchdog (10 s) names a hang first */
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_io_read);
        tcase_add_test(tc, test_io_set);
        tcase_add_test(tc, test_remove_in_batch);
        tcase_add_test(tc, test_timer_rearmed_by_its_return);
        tcase_add_test(tc, test_timer_earliest_arm);
        tcase_add_test(tc, test_timer_del);
        tcase_add_test(tc, test_posts_once_after_batch);
        tcase_add_test(tc, test_async_from_thread);
        tcase_add_test(tc, test_async_before_run);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
