/* check_ring.c — the SPSC ring and doorbell of every request
 * (common/gs_ring.h): order, full and empty, index wrap-around, a hostile
 * peer's published index refused, copy-out, the futex doorbell; and a
 * two-thread stress (millions of messages, order and content checked) that
 * also runs under ThreadSanitizer (make tsan). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "gs_check.h"
#include "gs_ring.h"
#include "gs_util.h"

static struct gs_ring *ring_new(void)
{
        struct gs_ring *r = aligned_alloc(64, sizeof(*r));

        ck_assert_ptr_nonnull(r);
        memset(r, 0, sizeof(*r));
        return r;
}

static struct gs_ring_msg msg(uint64_t seq)
{
        struct gs_ring_msg m = { 0 };

        m.seq = seq;
        m.op = (uint32_t)(seq * 7);
        m.gpu = (uint32_t)(seq % 8);
        for (int i = 0; i < 4; i++)
                m.arg[i] = seq * 1000003u + (uint64_t)i;
        m.status = -(int32_t)(seq & 0xff);
        return m;
}

static void check_msg(const struct gs_ring_msg *m, uint64_t seq)
{
        struct gs_ring_msg want = msg(seq);

        ck_assert_msg(memcmp(m, &want, sizeof(want)) == 0, "message %llu corrupted", (unsigned long long)seq);
}

START_TEST(test_fifo_full_empty)
{
        struct gs_ring *r = ring_new();
        uint32_t head = 0, tail = 0;
        struct gs_ring_msg m, out;

        ck_assert_int_eq(gs_ring_pop(r, &tail, &out), 0);
        ck_assert(!gs_ring_ready(r, tail));
        for (uint64_t i = 0; i < GS_RING_SLOTS; i++) {
                m = msg(i);
                ck_assert_int_eq(gs_ring_push(r, &head, &m), 0);
        }
        ck_assert_uint_eq(__atomic_load_n(&r->head, __ATOMIC_RELAXED), GS_RING_SLOTS);
        m = msg(999);
        ck_assert_int_eq(gs_ring_push(r, &head, &m), -EAGAIN); /* full */
        ck_assert_uint_eq(head, GS_RING_SLOTS);
        ck_assert(gs_ring_ready(r, tail));
        for (uint64_t i = 0; i < GS_RING_SLOTS; i++) {
                ck_assert_int_eq(gs_ring_pop(r, &tail, &out), 1);
                check_msg(&out, i);
        }
        ck_assert_int_eq(gs_ring_pop(r, &tail, &out), 0);
        ck_assert_uint_eq(__atomic_load_n(&r->tail, __ATOMIC_RELAXED), GS_RING_SLOTS);
        free(r);
}
END_TEST

START_TEST(test_wrap_around)
{
        struct gs_ring *r = ring_new();
        /* Start just below the 32-bit wrap: indices run freely. */
        uint32_t head = UINT32_MAX - 5, tail = UINT32_MAX - 5;
        struct gs_ring_msg m, out;
        uint64_t next = 0, got = 0;

        r->head = r->tail = head;
        for (uint32_t round = 0; round < 3 * GS_RING_SLOTS; round++) {
                for (int k = 0; k < 3; k++) {
                        m = msg(next);
                        if (gs_ring_push(r, &head, &m) == 0)
                                next++;
                }
                ck_assert_int_eq(gs_ring_pop(r, &tail, &out), 1);
                check_msg(&out, got++);
        }
        while (gs_ring_pop(r, &tail, &out) == 1)
                check_msg(&out, got++);
        ck_assert_uint_eq(got, next);
        ck_assert_uint_eq(head, tail);
        ck_assert_uint_lt(head, UINT32_MAX - 5); /* it did wrap */
        free(r);
}
END_TEST

START_TEST(test_hostile_indices)
{
        struct gs_ring *r = ring_new();
        uint32_t head = 0, tail = 0;
        struct gs_ring_msg m = msg(1), out;

        /* A producer that publishes a head more than a ring ahead. */
        r->head = GS_RING_SLOTS + 1;
        ck_assert_int_eq(gs_ring_pop(r, &tail, &out), -EPROTO);
        ck_assert_uint_eq(tail, 0);
        r->head = (uint32_t)-1; /* behind the tail */
        ck_assert_int_eq(gs_ring_pop(r, &tail, &out), -EPROTO);
        /* A consumer that publishes a tail ahead of what was produced. */
        r->head = 0;
        r->tail = 5;
        ck_assert_int_eq(gs_ring_push(r, &head, &m), -EPROTO);
        ck_assert_uint_eq(head, 0);
        /* Our private index is what counts, not the shared copy: a peer
         * rewinding our published index cannot make us re-read a slot. */
        r->tail = 0;
        ck_assert_int_eq(gs_ring_push(r, &head, &m), 0);
        ck_assert_int_eq(gs_ring_pop(r, &tail, &out), 1);
        r->tail = 0; /* the producer scribbles on the consumer's tail */
        ck_assert_int_eq(gs_ring_pop(r, &tail, &out), 0);
        free(r);
}
END_TEST

START_TEST(test_copy_out)
{
        struct gs_ring *r = ring_new();
        uint32_t head = 0, tail = 0;
        struct gs_ring_msg m = msg(7), out;

        ck_assert_int_eq(gs_ring_push(r, &head, &m), 0);
        ck_assert_int_eq(gs_ring_pop(r, &tail, &out), 1);
        /* The peer rewrites the slot after we popped: our copy stands. */
        memset(&r->msg[0], 0xff, sizeof(r->msg[0]));
        check_msg(&out, 7);
        free(r);
}
END_TEST

START_TEST(test_doorbell)
{
        struct gs_ring *r = ring_new();
        uint32_t word = 0, sleeping = 0, head = 0;
        struct gs_ring_msg m = msg(3);

        /* Nobody sleeps: the word moves, no syscall needed. */
        gs_doorbell_ring(&word, &sleeping);
        ck_assert_uint_eq(word, 1);
        /* Empty ring: a sleep times out and clears the flag. */
        ck_assert_int_eq(gs_doorbell_sleep(r, 0, &word, &sleeping, 2000000), -ETIMEDOUT);
        ck_assert_uint_eq(sleeping, 0);
        /* Work already there: no wait at all. */
        ck_assert_int_eq(gs_ring_push(r, &head, &m), 0);
        ck_assert_int_eq(gs_doorbell_sleep(r, 0, &word, &sleeping, 0), 0);
        /* A changed word returns at once. */
        ck_assert_int_eq(gs_futex_wait(&word, word + 1, 0), 0);
        free(r);
}
END_TEST

/* ---- two threads ---- */

/* Built with a sanitizer (make asan, make tsan): GCC says so with
 * __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__, clang with __has_feature. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define GS_SANITIZED 1
#endif
#endif

/* Two threads that spin on each other: ASan and TSan run them 10 to 20
 * times slower, and on a busy 2-core machine a spinning thread often waits
 * for the other to be scheduled (2e6 took 210 s under ASan there).  The
 * sanitizer builds check the memory accesses and the ordering, which 2e5
 * messages (about 3,000 trips round the 64-slot ring, a few doorbell sleeps)
 * exercise as well; the plain build keeps 2e6. */
#ifdef GS_SANITIZED
#define STRESS_MSGS 200000u
#else
#define STRESS_MSGS 2000000u
#endif

struct stress {
        struct gs_ring *r;
        struct gs_shm *s; /* doorbells */
        uint64_t n;
        int failed;
};

/* A full or empty ring waits for the other thread: spin a little, then
 * give the CPU up, so that on a busy machine the other thread runs (pure
 * spinning took 85 s for 2e6 messages on two busy cores, 28 s of it CPU). */
static void spin_or_yield(unsigned spins)
{
        if (spins % 64 == 0)
                sched_yield();
        else
                gs_cpu_relax();
}

static void *producer(void *arg)
{
        struct stress *st = arg;
        uint32_t head = 0;

        for (uint64_t i = 0; i < st->n; i++) {
                struct gs_ring_msg m = msg(i);
                int r;

                for (unsigned spins = 1; (r = gs_ring_push(st->r, &head, &m)) == -EAGAIN; spins++)
                        spin_or_yield(spins);
                if (r < 0) {
                        __atomic_store_n(&st->failed, 1, __ATOMIC_RELAXED);
                        break;
                }
                gs_doorbell_ring(&st->s->agent_wake, &st->s->agent_sleeping);
        }
        return NULL;
}

START_TEST(test_two_threads)
{
        struct stress st = { .r = ring_new(), .n = STRESS_MSGS };
        uint32_t tail = 0;
        uint64_t got = 0, sleeps = 0;
        pthread_t t;

        if (getenv("VALGRIND")) /* make valgrind: about 50 times slower */
                st.n = 100000;
        if (getenv("GS_RING_STRESS_MSGS"))
                st.n = strtoull(getenv("GS_RING_STRESS_MSGS"), NULL, 10);
        st.s = aligned_alloc(64, sizeof(*st.s));
        ck_assert_ptr_nonnull(st.s);
        gs_shm_init(st.s);
        ck_assert_int_eq(pthread_create(&t, NULL, producer, &st), 0);
        for (unsigned spins = 1; got < st.n && !__atomic_load_n(&st.failed, __ATOMIC_RELAXED); spins++) {
                struct gs_ring_msg out;
                int r = gs_ring_pop(st.r, &tail, &out);

                ck_assert_int_ge(r, 0);
                if (r == 0) {
                        spin_or_yield(spins);
                        /* Sleep on the doorbell now and then, so the lost
                         * wake-up race is exercised too (bounded wait). */
                        if ((got & 0xffff) == 0) {
                                sleeps++;
                                (void)gs_doorbell_sleep(st.r, tail, &st.s->agent_wake, &st.s->agent_sleeping, 50000000);
                        }
                        continue;
                }
                if (out.seq != got)
                        ck_abort_msg("message %llu arrived as %llu", (unsigned long long)got,
                                     (unsigned long long)out.seq);
                check_msg(&out, got);
                got++;
        }
        pthread_join(t, NULL);
        ck_assert_int_eq(st.failed, 0);
        ck_assert_uint_eq(got, st.n);
        free(st.r);
        free(st.s);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("ring");
        TCase *t = tcase_create("ring");

        tcase_add_test(t, test_fifo_full_empty);
        tcase_add_test(t, test_wrap_around);
        tcase_add_test(t, test_hostile_indices);
        tcase_add_test(t, test_copy_out);
        tcase_add_test(t, test_doorbell);
        suite_add_tcase(s, t);
        t = tcase_create("stress");
        tcase_set_timeout(t, 300);
        tcase_add_test(t, test_two_threads);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}
