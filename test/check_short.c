/* check_short.c — a request short of memory (sessions/gs_short.h) on a
 * real pool and a real loop, without a driver or sockets: who give-back
 * asks; the kick runs once after a batch however often it was asked for;
 * a worker's short request waits for the kick (blocked, not napping) and
 * reads what it asked, and the end of a kick begun before it asked does
 * not count; a request that was not short asks nothing; a loop that does
 * not answer leaves the request waiting a bounded time. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_agent.h"
#include "gs_gpu_lock.h"
#include "gs_proc.h"
#include "gs_short.h"

#define CHUNK (2u << 20)

/* One GPU with a real pool of 8 chunks, one allocation of 4 on it, and
 * two served processes: A holds a chunk with no live block (it has one
 * to give back), B a chunk with a live block. */
struct fixture {
        struct gs_agent ag;
        struct gs_gpu g;
        struct gs_allocation a;
        struct gs_proc pa, pb;
        struct gs_shm sa, sb;
        struct gs_loop_async stop;
};

static void make_proc(struct fixture *f, struct gs_proc *p, struct gs_shm *s, bool keep_block)
{
        struct gs_grant grants[4];
        uint64_t off;
        uint32_t n;

        p->agent = &f->ag;
        p->alloc = &f->a;
        p->state = GS_PROC_ACTIVE;
        p->shm = s;
        p->ngpus = 1;
        p->pidfd = -1;
        p->notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        ck_assert_int_ge(p->notify_fd, 0);
        p->gpus[0].g = &f->g;
        ck_assert_int_eq(gs_pproc_new(f->a.parts[0].pa, 16, &p->gpus[0].pp), 0);
        ck_assert_int_eq(gs_pproc_malloc(p->gpus[0].pp, CHUNK, &off, grants, 4, &n), 0);
        ck_assert_uint_eq(n, 1);
        if (!keep_block)
                ck_assert_int_eq(gs_pproc_free(p->gpus[0].pp, off, NULL), 0);
        p->next = f->a.procs;
        f->a.procs = p;
}

static void stop_loop(void *data)
{
        gs_loop_stop(data);
}

static struct fixture *setup(void)
{
        struct fixture *f = calloc(1, sizeof(*f));

        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(gs_loop_new(&f->ag.node.loop), 0);
        gs_gpu_lock_init(&f->g);
        f->g.chunk_bytes = CHUNK;
        f->g.pool = gs_pool_new(8, CHUNK);
        ck_assert_ptr_nonnull(f->g.pool);
        f->ag.node.gpus = &f->g;
        f->ag.node.ngpus = 1;
        f->a.nparts = 1;
        f->a.parts[0].gpu = 0;
        f->a.parts[0].quota_chunks = 4;
        ck_assert_int_eq(gs_palloc_new(f->g.pool, 4, 0, &f->a.parts[0].pa), 0);
        f->ag.node.allocs = &f->a;
        gs_agent_wire(&f->ag, NULL);
        gs_short_wire(&f->ag);
        gs_loop_async_add(f->ag.node.loop, &f->stop, stop_loop, f->ag.node.loop);
        make_proc(f, &f->pa, &f->sa, false);
        make_proc(f, &f->pb, &f->sb, true);
        return f;
}

static void teardown(struct fixture *f)
{
        struct gs_proc *ps[] = { &f->pa, &f->pb };

        for (int i = 0; i < 2; i++) {
                gs_pproc_del(ps[i]->gpus[0].pp);
                close(ps[i]->notify_fd);
        }
        ck_assert_int_eq(gs_palloc_del(f->a.parts[0].pa), 0);
        gs_pool_free(f->g.pool);
        gs_agent_unwire(&f->ag);
        gs_loop_free(f->ag.node.loop);
        free(f);
}

/* Whether p's hook thread was woken (its notification eventfd written). */
static bool notified(struct gs_proc *p)
{
        uint64_t v = 0;

        return read(p->notify_fd, &v, sizeof(v)) == sizeof(v) && v > 0;
}

static unsigned kicks(struct fixture *f)
{
        return __atomic_load_n(&f->ag.shortmem.kicks, __ATOMIC_ACQUIRE);
}

START_TEST(test_ask_give_back)
{
        struct fixture *f = setup();

        gs_gpu_lock(&f->g);
        ck_assert_uint_eq(gs_short_ask_give_back(&f->a, 0), 1);
        gs_gpu_unlock(&f->g);
        ck_assert_uint_eq(f->sa.give_back, 1);
        ck_assert(notified(&f->pa));
        ck_assert_uint_eq(f->sb.give_back, 0); /* its chunk has a live block */
        ck_assert(!notified(&f->pb));
        /* A process not served (registering, closed) is not asked. */
        f->pa.state = GS_PROC_HELLO;
        gs_gpu_lock(&f->g);
        ck_assert_uint_eq(gs_short_ask_give_back(&f->a, 0), 0);
        gs_gpu_unlock(&f->g);
        ck_assert_uint_eq(f->sa.give_back, 1);
        /* Nothing borrowed: a create's ask of the borrowers asks none. */
        f->pa.state = GS_PROC_ACTIVE;
        ck_assert_uint_eq(gs_short_ask_borrowers(&f->ag), 0);
        ck_assert_uint_eq(f->sa.give_back, 1);
        teardown(f);
}
END_TEST

START_TEST(test_kick_once_per_batch)
{
        struct fixture *f = setup();
        struct gs_loop_post stop = { 0 };

        f->a.parts[0].give_back_wanted = true;
        /* Asked three times in one batch (a change, a scan, a worker). */
        gs_short_kick(&f->ag);
        gs_short_kick(&f->ag);
        gs_short_kick(&f->ag);
        gs_loop_post(f->ag.node.loop, &stop, stop_loop, f->ag.node.loop);
        ck_assert_int_eq(gs_loop_run(f->ag.node.loop), 0);
        ck_assert_uint_eq(kicks(f), 1);
        ck_assert(!f->a.parts[0].give_back_wanted);
        ck_assert_uint_eq(f->a.parts[0].others_asked, 1);
        ck_assert_uint_eq(f->sa.give_back, 1);
        teardown(f);
}
END_TEST

START_TEST(test_kick_nothing_marked)
{
        struct fixture *f = setup();
        struct gs_loop_post stop = { 0 };

        /* A kick (a change Watch clients see, a scan) with no part marked
         * asks nobody, and still counts itself for the waiting workers. */
        gs_short_kick(&f->ag);
        gs_loop_post(f->ag.node.loop, &stop, stop_loop, f->ag.node.loop);
        ck_assert_int_eq(gs_loop_run(f->ag.node.loop), 0);
        ck_assert_uint_eq(kicks(f), 1);
        ck_assert_uint_eq(f->sa.give_back, 0);
        ck_assert(!notified(&f->pa));
        teardown(f);
}
END_TEST

struct short_req {
        struct fixture *f;
        struct gs_ring_msg req, rep;
        int r;
};

/* A worker's part: B's request was short; then the loop is stopped. */
static void *worker(void *arg)
{
        struct short_req *s = arg;
        struct fixture *f = s->f;

        s->r = gs_short_request(&f->pb, &s->req, &s->rep, 0, gs_palloc_returned(f->a.parts[0].pa));
        gs_loop_async_send(f->ag.node.loop, &f->stop);
        return NULL;
}

static void short_alloc(struct short_req *s, struct fixture *f)
{
        memset(s, 0, sizeof(*s));
        s->f = f;
        s->req.op = GS_OP_ALLOC;
        s->req.gpu = 0;
        s->req.arg[0] = 4ull * CHUNK;
        s->rep.op = GS_OP_ALLOC;
        s->rep.status = -ENOMEM;
}

START_TEST(test_request_waits_for_kick)
{
        struct fixture *f = setup();
        struct short_req s;
        pthread_t t;

        short_alloc(&s, f);
        ck_assert_int_eq(pthread_create(&t, NULL, worker, &s), 0);
        ck_assert_int_eq(gs_loop_run(f->ag.node.loop), 0);
        pthread_join(t, NULL);
        ck_assert_int_eq(s.r, 0);
        ck_assert_int_eq(s.rep.status, -ENOMEM);
        ck_assert_uint_ge(kicks(f), 1);
        /* The kick asked A (B's own chunk is its hook's to give back). */
        ck_assert_uint_eq(s.rep.others_asked, 1);
        ck_assert_uint_eq(f->sa.give_back, 1);
        ck_assert(notified(&f->pa));
        ck_assert_uint_eq(f->sb.give_back, 0);
        ck_assert(!f->a.parts[0].give_back_wanted);
        teardown(f);
}
END_TEST

START_TEST(test_request_not_short)
{
        struct fixture *f = setup();
        struct short_req s;

        short_alloc(&s, f);
        s.rep.status = 0;
        ck_assert_int_eq(gs_short_request(&f->pb, &s.req, &s.rep, 0, 0), 0);
        ck_assert(!f->a.parts[0].give_back_wanted);
        ck_assert_uint_eq(s.rep.others_asked, 0);
        /* The connection must go: passed through, nothing asked. */
        s.rep.status = -ENOMEM;
        ck_assert_int_eq(gs_short_request(&f->pb, &s.req, &s.rep, -EPIPE, 0), -EPIPE);
        ck_assert(!f->a.parts[0].give_back_wanted);
        teardown(f);
}
END_TEST

START_TEST(test_request_loop_away)
{
        struct fixture *f = setup();
        struct short_req s;

        /* The main loop does not run: the wait ends (bounded), the hook is
         * told more may come, and the part stays marked for the next kick. */
        short_alloc(&s, f);
        ck_assert_int_eq(gs_short_request(&f->pb, &s.req, &s.rep, 0, gs_palloc_returned(f->a.parts[0].pa)), 0);
        ck_assert_uint_eq(s.rep.others_asked, 1);
        ck_assert(f->a.parts[0].give_back_wanted);
        ck_assert_uint_eq(kicks(f), 0);
        ck_assert_uint_eq(f->sa.give_back, 0);
        /* A second short request while one is pending waits for nothing. */
        short_alloc(&s, f);
        ck_assert_int_eq(gs_short_request(&f->pb, &s.req, &s.rep, 0, gs_palloc_returned(f->a.parts[0].pa)), 0);
        ck_assert_uint_eq(s.rep.others_asked, 1);
        teardown(f);
}
END_TEST

/* A kick under way (begun, not done) passed B's part before the request
 * marked it; it ends while the request waits.  Its end must not count:
 * the request was not answered by it, so the hook is told more may come,
 * not "nobody asked" (others_asked 0 from an older kick). */
static void *kick_ends(void *arg)
{
        struct fixture *f = arg;
        int64_t until = gs_mono_ms() + 10000;

        for (bool marked = false; !marked && gs_mono_ms() < until;) {
                gs_gpu_lock(&f->g);
                marked = f->a.parts[0].give_back_wanted;
                gs_gpu_unlock(&f->g);
                if (!marked)
                        sched_yield();
        }
        gs_agent_count(&f->ag, &f->ag.shortmem.kicks);
        return NULL;
}

START_TEST(test_request_kick_under_way)
{
        struct fixture *f = setup();
        struct short_req s;
        pthread_t t;

        f->a.parts[0].others_asked = 0; /* what an older kick found */
        __atomic_store_n(&f->ag.shortmem.started, 1, __ATOMIC_SEQ_CST);
        short_alloc(&s, f);
        ck_assert_int_eq(pthread_create(&t, NULL, kick_ends, f), 0);
        ck_assert_int_eq(gs_short_request(&f->pb, &s.req, &s.rep, 0, gs_palloc_returned(f->a.parts[0].pa)), 0);
        pthread_join(t, NULL);
        ck_assert_uint_eq(kicks(f), 1);
        ck_assert_uint_eq(s.rep.others_asked, 1);
        ck_assert(f->a.parts[0].give_back_wanted); /* for the next kick */
        teardown(f);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("short");
        TCase *t = tcase_create("short");

        tcase_add_test(t, test_ask_give_back);
        tcase_add_test(t, test_kick_once_per_batch);
        tcase_add_test(t, test_kick_nothing_marked);
        tcase_add_test(t, test_request_waits_for_kick);
        tcase_add_test(t, test_request_not_short);
        tcase_add_test(t, test_request_loop_away);
        tcase_add_test(t, test_request_kick_under_way);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}
