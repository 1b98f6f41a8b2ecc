/* check_workers.c — the agent's worker pool (agent/base/gs_workers.h), by
 * its contract: every item whose doorbell is rung is served, never by two
 * threads at once; a turn that returns MORE is served again without a new
 * ring; no more than nthreads turns run at once, nor more than half of them
 * (rounded up) for one group, which leaves the others to the rest; a
 * removed item is never touched again; freeing the pool joins its threads.
 * The items here are a count of pending requests and an eventfd doorbell,
 * as a process's ring is.  Waits end on the event, with a deadline of 10 s
 * that only catches a hang; the stress also runs under TSan. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_util.h"
#include "gs_workers.h"

#define HANG_MS 10000

struct item {
        struct gs_wentry e;
        struct gs_wgroup *grp;
        int fd;           /* the doorbell */
        int stop;         /* set by gs_workers_remove */
        uint32_t pending; /* requests not served yet (atomic) */
        uint32_t served;  /* (atomic) */
        uint32_t turns;   /* (atomic) */
        int in_turn;      /* (atomic) a thread serves it now */
        int block;        /* (atomic) its turns wait until this is 0 */
};

/* Across the pool, atomics. */
static int overlap; /* an item served by two threads at once */
static int running, max_running;
static uint32_t budget_seen; /* a turn given another budget */
static int group_running[2], group_max[2];
static struct gs_wgroup groups[2];

static void note_max(int *max, int v)
{
        int m = __atomic_load_n(max, __ATOMIC_RELAXED);

        while (v > m && !__atomic_compare_exchange_n(max, &m, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        }
}

static void poke(struct item *it, uint32_t n)
{
        uint64_t one = 1;

        __atomic_add_fetch(&it->pending, n, __ATOMIC_RELEASE);
        ck_assert_int_eq(write(it->fd, &one, sizeof(one)), (ssize_t)sizeof(one));
}

/* A turn as gs_serve's: drain the doorbell, then serve up to budget of
 * what is pending; MORE if some is left. */
static enum gs_turn turn(void *arg, uint32_t budget, const uint32_t *others_waiting)
{
        struct item *it = arg;
        int g = (int)(it->grp - groups);
        uint64_t v;
        uint32_t p, take;
        enum gs_turn how;

        (void)others_waiting;
        if (__atomic_exchange_n(&it->in_turn, 1, __ATOMIC_ACQ_REL))
                __atomic_store_n(&overlap, 1, __ATOMIC_RELAXED);
        note_max(&max_running, __atomic_add_fetch(&running, 1, __ATOMIC_RELAXED));
        note_max(&group_max[g], __atomic_add_fetch(&group_running[g], 1, __ATOMIC_RELAXED));
        if (budget != GS_WORKERS_BUDGET)
                __atomic_store_n(&budget_seen, budget, __ATOMIC_RELAXED);
        __atomic_add_fetch(&it->turns, 1, __ATOMIC_RELAXED);
        while (__atomic_load_n(&it->block, __ATOMIC_ACQUIRE) && !__atomic_load_n(&it->stop, __ATOMIC_ACQUIRE))
                usleep(200);
        if (read(it->fd, &v, sizeof(v)) < 0) {
                /* EAGAIN: rung before the last turn drained it */
        }
        p = __atomic_load_n(&it->pending, __ATOMIC_ACQUIRE);
        take = p < budget ? p : budget;
        __atomic_sub_fetch(&it->pending, take, __ATOMIC_RELAXED);
        __atomic_add_fetch(&it->served, take, __ATOMIC_RELEASE);
        how = p > take ? GS_TURN_MORE : GS_TURN_IDLE;
        __atomic_sub_fetch(&group_running[g], 1, __ATOMIC_RELAXED);
        __atomic_sub_fetch(&running, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&it->in_turn, 0, __ATOMIC_RELEASE);
        return how;
}

static struct item *items;
static uint32_t nitems;
static struct gs_workers *pool;

static void start(uint32_t nthreads, uint32_t n)
{
        char err[256] = "";

        nitems = n;
        items = calloc(n, sizeof(*items));
        ck_assert_ptr_nonnull(items);
        ck_assert_msg(gs_workers_new(turn, nthreads, n, &pool, err, sizeof(err)) == 0, "%s", err);
        for (uint32_t i = 0; i < n; i++) {
                struct item *it = &items[i];

                it->grp = &groups[i % 2];
                it->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
                ck_assert_int_ge(it->fd, 0);
                ck_assert_int_eq(gs_workers_add(pool, &it->e, it, it->grp, it->fd, &it->stop), 0);
        }
}

static void finish(void)
{
        for (uint32_t i = 0; i < nitems; i++) {
                gs_workers_remove(pool, &items[i].e);
                close(items[i].fd);
        }
        gs_workers_free(pool);
        pool = NULL;
        free(items);
        ck_assert_msg(!__atomic_load_n(&overlap, __ATOMIC_RELAXED), "an item was served by two threads at once");
        ck_assert_uint_eq(budget_seen, 0);
}

/* Waits until every item served what it was given. */
static void wait_served(const uint32_t *want)
{
        int64_t until = gs_mono_ms() + HANG_MS;

        for (uint32_t i = 0; i < nitems; i++)
                while (__atomic_load_n(&items[i].served, __ATOMIC_ACQUIRE) < want[i]) {
                        ck_assert_msg(gs_mono_ms() < until, "item %u: served %u of %u after %d ms", i,
                                      __atomic_load_n(&items[i].served, __ATOMIC_RELAXED), want[i], HANG_MS);
                        usleep(1000);
                }
}

struct poker {
        uint32_t first, step, rounds;
        uint32_t *given;
};

static void *poker_main(void *arg)
{
        struct poker *pk = arg;
        unsigned seed = pk->first;

        for (uint32_t r = 0; r < pk->rounds; r++)
                for (uint32_t i = pk->first; i < nitems; i += pk->step) {
                        uint32_t n = 1 + (uint32_t)rand_r(&seed) % 100;
                        pk->given[i] += n;
                        poke(&items[i], n);
                }
        return NULL;
}

/* Two threads ring 64 items over and over, with bursts past the budget:
 * every request is served, exactly, and no item by two threads at once. */
START_TEST(test_every_poke_served)
{
        uint32_t given[64] = { 0 };
        struct poker pk[2] = { { 0, 2, 300, given }, { 1, 2, 300, given } };
        pthread_t th[2];

        start(4, 64);
        for (int i = 0; i < 2; i++)
                ck_assert_int_eq(pthread_create(&th[i], NULL, poker_main, &pk[i]), 0);
        for (int i = 0; i < 2; i++)
                ck_assert_int_eq(pthread_join(th[i], NULL), 0);
        wait_served(given);
        for (uint32_t i = 0; i < nitems; i++) {
                ck_assert_uint_eq(__atomic_load_n(&items[i].served, __ATOMIC_ACQUIRE), given[i]);
                ck_assert_uint_eq(__atomic_load_n(&items[i].pending, __ATOMIC_ACQUIRE), 0);
        }
        ck_assert_int_le(__atomic_load_n(&max_running, __ATOMIC_ACQUIRE), 4);
        finish();
}
END_TEST

/* One ring, three budgets of work: three turns, the last two on MORE. */
START_TEST(test_more_served_again)
{
        uint32_t want[1] = { 3 * GS_WORKERS_BUDGET };

        start(2, 1);
        poke(&items[0], 3 * GS_WORKERS_BUDGET);
        wait_served(want);
        ck_assert_uint_eq(__atomic_load_n(&items[0].served, __ATOMIC_ACQUIRE), 3 * GS_WORKERS_BUDGET);
        ck_assert_uint_eq(__atomic_load_n(&items[0].turns, __ATOMIC_ACQUIRE), 3);
        finish();
}
END_TEST

static void wait_running(int *counter, int want)
{
        int64_t until = gs_mono_ms() + HANG_MS;

        while (__atomic_load_n(counter, __ATOMIC_ACQUIRE) < want) {
                ck_assert_msg(gs_mono_ms() < until, "%d turns running, not %d, after %d ms",
                              __atomic_load_n(counter, __ATOMIC_RELAXED), want, HANG_MS);
                usleep(1000);
        }
}

/* 5 threads; group 0's items all stall in their turns: at most 3 of them
 * (half, rounded up) run at once, and group 1's items are still served by
 * the other 2 threads meanwhile. */
START_TEST(test_bounded_threads_and_groups)
{
        uint32_t want[16] = { 0 };

        start(5, 16);
        for (uint32_t i = 0; i < nitems; i += 2) {
                __atomic_store_n(&items[i].block, 1, __ATOMIC_RELEASE);
                poke(&items[i], 1);
                want[i] = 1;
        }
        wait_running(&group_running[0], 3);
        for (uint32_t i = 1; i < nitems; i += 2) {
                poke(&items[i], 5);
                want[i] = 5;
        }
        /* Group 1's items, served while group 0 stalls. */
        for (uint32_t i = 1; i < nitems; i += 2) {
                int64_t until = gs_mono_ms() + HANG_MS;
                while (__atomic_load_n(&items[i].served, __ATOMIC_ACQUIRE) < 5) {
                        ck_assert_msg(gs_mono_ms() < until, "group 1 starved by group 0's stalled turns");
                        usleep(1000);
                }
        }
        ck_assert_int_eq(__atomic_load_n(&group_running[0], __ATOMIC_ACQUIRE), 3);
        for (uint32_t i = 0; i < nitems; i += 2)
                __atomic_store_n(&items[i].block, 0, __ATOMIC_RELEASE);
        wait_served(want);
        ck_assert_int_eq(__atomic_load_n(&group_max[0], __ATOMIC_ACQUIRE), 3);
        ck_assert_int_le(__atomic_load_n(&max_running, __ATOMIC_ACQUIRE), 5);
        finish();
}
END_TEST

/* Removing an item in its turn sets *stop first; the turn gives up and
 * the removal returns only once it has; later rings wake nothing. */
START_TEST(test_remove_waits_for_turn)
{
        uint32_t want[2] = { 0, 1 };

        start(2, 2);
        __atomic_store_n(&items[0].block, 1, __ATOMIC_RELEASE);
        poke(&items[0], 1);
        wait_running(&group_running[0], 1);
        gs_workers_remove(pool, &items[0].e);
        ck_assert_int_eq(__atomic_load_n(&items[0].stop, __ATOMIC_ACQUIRE), 1);
        ck_assert_int_eq(__atomic_load_n(&items[0].in_turn, __ATOMIC_ACQUIRE), 0);
        ck_assert_uint_eq(__atomic_load_n(&items[0].turns, __ATOMIC_ACQUIRE), 1);
        /* Rung again: nothing serves it.  Item 1, rung after, is served. */
        poke(&items[0], 1);
        poke(&items[1], 1);
        wait_served(want);
        ck_assert_uint_eq(__atomic_load_n(&items[0].turns, __ATOMIC_ACQUIRE), 1);
        finish();
}
END_TEST

/* The pool is bounded: one more item than max_procs is refused. */
START_TEST(test_max_procs)
{
        struct gs_wentry e;
        int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), stop = 0;

        start(1, 3);
        ck_assert_int_eq(gs_workers_add(pool, &e, &e, &groups[0], fd, &stop), -ENOSPC);
        /* A slot freed is a slot for the next. */
        gs_workers_remove(pool, &items[2].e);
        ck_assert_int_eq(gs_workers_add(pool, &items[2].e, &items[2], items[2].grp, items[2].fd, &items[2].stop), 0);
        close(fd);
        finish();
}
END_TEST

static int count_threads(void)
{
        DIR *d = opendir("/proc/self/task");
        struct dirent *de;
        int n = 0;

        ck_assert_ptr_nonnull(d);
        while ((de = readdir(d)))
                if (de->d_name[0] != '.')
                        n++;
        closedir(d);
        return n;
}

static void *nothing(void *arg)
{
        return arg;
}

/* nthreads threads start with the pool and are joined by its free. */
START_TEST(test_free_joins)
{
        char err[256];
        pthread_t th;
        int before;

        /* A first thread may bring a runtime's own (TSan's): have it now. */
        ck_assert_int_eq(pthread_create(&th, NULL, nothing, NULL), 0);
        ck_assert_int_eq(pthread_join(th, NULL), 0);
        before = count_threads();

        ck_assert_int_eq(gs_workers_new(turn, 6, 8, &pool, err, sizeof(err)), 0);
        ck_assert_int_eq(count_threads(), before + 6);
        gs_workers_free(pool);
        pool = NULL;
        ck_assert_int_eq(count_threads(), before);
        gs_workers_free(NULL);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("workers");
        TCase *tc = tcase_create("workers");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_every_poke_served);
        tcase_add_test(tc, test_more_served_again);
        tcase_add_test(tc, test_bounded_threads_and_groups);
        tcase_add_test(tc, test_remove_waits_for_turn);
        tcase_add_test(tc, test_max_procs);
        tcase_add_test(tc, test_free_joins);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
