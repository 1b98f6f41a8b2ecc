/* check_foresee.c — hook/gs_hook_qos_foresee.c: a latency-critical
 * process's rhythm learnt from its arrivals, and what its neighbours do
 * with a launch before its next request foreseen.  Times in ns. */
#include <check.h>

#include "../gs_check.h"
#include <stdint.h>

#include "gs_hook_qos_foresee.h"

#define US 1000ull
#define MS 1000000ull

/* n arrivals period apart (plus jitter[i % njit] µs) from t0: the last
 * publication. */
static struct gs_foresee_next arrive(struct gs_foresee *f, uint64_t *t, uint64_t period, int n, const int *jit,
                                     int njit)
{
        struct gs_foresee_next nx = { 0 };

        for (int i = 0; i < n; i++) {
                *t += period;
                gs_foresee_arrival(f, (uint64_t)((int64_t)*t + (njit ? jit[i % njit] * (int64_t)US : 0)), &nx);
        }
        return nx;
}

/* A learner that took 100 arrivals period apart (from t = 1 s). */
static struct gs_foresee_next learnt(struct gs_foresee *f, uint64_t *t, uint64_t period)
{
        *f = (struct gs_foresee){ 0 };
        *t = 1000 * MS;
        return arrive(f, t, period, 100, NULL, 0);
}

START_TEST(test_regular)
{
        struct gs_foresee f = { 0 };
        struct gs_foresee_next nx;
        uint64_t t = 1000 * MS;
        int i;

        /* Regularity is shown: nothing before GS_FORESEE_MIN_INTERVALS
         * intervals, and the deviation starts at a quarter of the period. */
        for (i = 0; i < GS_FORESEE_MIN_INTERVALS; i++) {
                nx = arrive(&f, &t, 10 * MS, 1, NULL, 0);
                ck_assert_uint_eq(nx.next_ns, 0);
        }
        for (i = 0; i < 20 && !nx.next_ns; i++)
                nx = arrive(&f, &t, 10 * MS, 1, NULL, 0);
        ck_assert_uint_ne(nx.next_ns, 0);
        ck_assert_uint_eq(nx.next_ns, t + 10 * MS);
        ck_assert_uint_eq(nx.period_us, 10000);
        ck_assert_uint_ge(nx.lead_us, GS_FORESEE_SLACK_US);
        ck_assert_uint_le(nx.lead_us, 10000 / 4 + GS_FORESEE_SLACK_US);
        /* Steady: the lead shrinks to the slack. */
        nx = arrive(&f, &t, 10 * MS, 200, NULL, 0);
        ck_assert_uint_eq(nx.next_ns, t + 10 * MS);
        ck_assert_uint_le(nx.lead_us, GS_FORESEE_SLACK_US + 1);
}
END_TEST

START_TEST(test_jitter)
{
        struct gs_foresee f = { 0 };
        struct gs_foresee_next nx;
        uint64_t t = 1000 * MS;
        static const int small[] = { 40, -30, 10, -50, 20 };
        static const int wild[] = { 3000, -2500, 4000, -3500, 500 };

        /* ±50 µs on 10 ms: foreseen, with a lead of about twice it. */
        nx = arrive(&f, &t, 10 * MS, 100, small, 5);
        ck_assert_uint_ne(nx.next_ns, 0);
        ck_assert_uint_ge(nx.lead_us, GS_FORESEE_SLACK_US + 20);
        ck_assert_uint_le(nx.lead_us, GS_FORESEE_SLACK_US + 200);
        /* ±3 ms on 10 ms (a server fed at random): nothing, within a few
         * requests of the change. */
        nx = arrive(&f, &t, 10 * MS, 30, wild, 5);
        ck_assert_uint_eq(nx.next_ns, 0);
        ck_assert_uint_eq(nx.period_us, 0);
}
END_TEST

START_TEST(test_schedule)
{
        struct gs_foresee f;
        struct gs_foresee_next nx;
        uint64_t t;

        nx = learnt(&f, &t, 10 * MS);
        ck_assert_uint_eq(nx.next_ns, t + 10 * MS);
        /* Woken 600 µs late: the next is still expected on the schedule,
         * not 600 µs later. */
        t += 10 * MS;
        gs_foresee_arrival(&f, t + 600 * US, &nx);
        ck_assert_uint_eq(nx.next_ns, t + f.period_ns);
        ck_assert_uint_le(f.period_ns, 10 * MS + 600 * US / 8);
        /* On time again (the period estimate within what the late one
         * moved it). */
        t += 10 * MS;
        gs_foresee_arrival(&f, t, &nx);
        ck_assert_uint_ge(nx.next_ns, t + 10 * MS - 100 * US);
        ck_assert_uint_le(nx.next_ns, t + 10 * MS + 100 * US);
        /* Early: from the arrival. */
        t += 10 * MS;
        gs_foresee_arrival(&f, t - 300 * US, &nx);
        ck_assert_uint_eq(nx.next_ns, t - 300 * US + f.period_ns);
        /* Late twice running (a server that waits for its last answer
         * before the next: its rhythm moved): the second from the arrival. */
        t = nx.next_ns;
        gs_foresee_arrival(&f, t + 700 * US, &nx);
        ck_assert_uint_eq(nx.next_ns, t + f.period_ns);
        t = nx.next_ns;
        gs_foresee_arrival(&f, t + 700 * US, &nx);
        ck_assert_uint_eq(nx.next_ns, t + 700 * US + f.period_ns);
        /* Late within the lead: from the arrival (the jitter the lead
         * covers). */
        t = nx.next_ns;
        gs_foresee_arrival(&f, t + 10 * US, &nx);
        ck_assert_uint_eq(nx.next_ns, t + 10 * US + f.period_ns);
        /* Later than the late window (the rhythm moved): from the arrival. */
        t = nx.next_ns + 3 * MS;
        gs_foresee_arrival(&f, t, &nx);
        ck_assert(nx.next_ns == 0 || nx.next_ns == t + f.period_ns);
}
END_TEST

START_TEST(test_out_of_range)
{
        struct gs_foresee f;
        struct gs_foresee_next nx;
        uint64_t t;

        nx = learnt(&f, &t, 5 * MS);
        ck_assert_uint_ne(nx.next_ns, 0);
        /* A pause of a few periods (requests that did not come) keeps
         * the rhythm: foreseen again from the next arrival. */
        t += 23 * MS;
        gs_foresee_arrival(&f, t, &nx);
        ck_assert_uint_eq(nx.next_ns, t + 5 * MS);
        ck_assert_uint_eq(f.period_ns, 5 * MS);
        /* A pause longer than the longest period starts over. */
        t += 5 * 1000 * MS;
        gs_foresee_arrival(&f, t, &nx);
        ck_assert_uint_eq(nx.next_ns, 0);
        ck_assert_uint_eq(f.n, 0);
        /* Arrivals closer than the shortest period: no rhythm. */
        nx = arrive(&f, &t, 200 * US, 50, NULL, 0);
        ck_assert_uint_eq(nx.next_ns, 0);
        /* A clock that goes back, or the same time: taken as an arrival,
         * no interval. */
        gs_foresee_arrival(&f, t - 1 * MS, &nx);
        ck_assert_uint_eq(nx.next_ns, 0);
}
END_TEST

static const struct gs_foresee_next PUB = { .next_ns = 100 * MS, .period_us = 10000, .lead_us = 200 };

START_TEST(test_decide)
{
        uint64_t h = PUB.next_ns - 200 * US;

        /* Far ahead: what ends before the lead goes (the caller's plain
         * bound still applies). */
        ck_assert_int_eq(gs_foresee_decide(&PUB, 92 * MS, 0, 700 * US), GS_FORESEE_ADMIT);
        ck_assert_int_eq(gs_foresee_decide(&PUB, 92 * MS, 2000 * US, 700 * US), GS_FORESEE_ADMIT);
        ck_assert_int_eq(gs_foresee_decide(&PUB, 92 * MS, 7099 * US, 700 * US), GS_FORESEE_ADMIT);
        ck_assert_int_eq(gs_foresee_decide(&PUB, 92 * MS, 7101 * US, 700 * US), GS_FORESEE_DRAIN);
        ck_assert_int_eq(gs_foresee_decide(&PUB, 92 * MS, 0, 2400 * US), GS_FORESEE_ADMIT);
        /* Just fits, just does not. */
        ck_assert_int_eq(gs_foresee_decide(&PUB, h - 700 * US, 0, 700 * US), GS_FORESEE_ADMIT);
        ck_assert_int_eq(gs_foresee_decide(&PUB, h - 699 * US, 0, 700 * US), GS_FORESEE_HOLD);
        ck_assert_int_eq(gs_foresee_decide(&PUB, h - 699 * US, 100 * US, 600 * US), GS_FORESEE_DRAIN);
        /* Inside the lead, before the request and until it is late by
         * the lead and an eighth of the period: hold, whatever the launch. */
        ck_assert_int_eq(gs_foresee_decide(&PUB, h, 0, 1 * US), GS_FORESEE_HOLD);
        ck_assert_int_eq(gs_foresee_decide(&PUB, PUB.next_ns + 1449 * US, 0, 1 * US), GS_FORESEE_HOLD);
        /* The request later than that: no foresight (the plain bound). */
        ck_assert_int_eq(gs_foresee_decide(&PUB, PUB.next_ns + 1450 * US, 0, 1 * US), GS_FORESEE_NONE);
        /* A launch longer than a quarter of the period runs as without. */
        ck_assert_int_eq(gs_foresee_decide(&PUB, 92 * MS, 0, 2501 * US), GS_FORESEE_NONE);
        ck_assert_int_eq(gs_foresee_decide(&PUB, 92 * MS, 0, 2500 * US), GS_FORESEE_ADMIT);
}
END_TEST

START_TEST(test_hostile)
{
        struct gs_foresee_next p;
        uint64_t now = 95 * MS;

        /* Nothing published (an earlier hook, irregular requests). */
        p = (struct gs_foresee_next){ 0 };
        ck_assert_int_eq(gs_foresee_decide(&p, now, 0, 100 * US), GS_FORESEE_NONE);
        ck_assert(!gs_foresee_soon(&p, now, 100 * MS));
        /* A time far ahead (another clock, or a writer that would hold
         * its neighbours for ever): ignored. */
        p = PUB;
        p.next_ns = now + 60 * 1000 * MS;
        ck_assert_int_eq(gs_foresee_decide(&p, now, 0, 100 * US), GS_FORESEE_NONE);
        ck_assert(!gs_foresee_soon(&p, now, 100 * MS));
        /* A lead that covers the period: ignored. */
        p = PUB;
        p.lead_us = 9000;
        ck_assert_int_eq(gs_foresee_decide(&p, now, 0, 100 * US), GS_FORESEE_NONE);
        /* Periods outside what is learnt. */
        p = PUB;
        p.period_us = GS_FORESEE_MIN_PERIOD_US - 1;
        ck_assert_int_eq(gs_foresee_decide(&p, now, 0, 10 * US), GS_FORESEE_NONE);
        p.period_us = GS_FORESEE_MAX_PERIOD_US + 1;
        ck_assert_int_eq(gs_foresee_decide(&p, now, 0, 10 * US), GS_FORESEE_NONE);
        /* Times near 0 and the top of the range do not wrap. */
        p = PUB;
        p.next_ns = 100 * US;
        ck_assert_int_eq(gs_foresee_decide(&p, 0, 0, 10 * US), GS_FORESEE_HOLD);
        p.next_ns = UINT64_MAX - 10 * MS;
        ck_assert_int_eq(gs_foresee_decide(&p, UINT64_MAX - 20 * MS, 0, 10 * US), GS_FORESEE_ADMIT);
}
END_TEST

START_TEST(test_soon)
{
        struct gs_foresee_next p = { .next_ns = 600 * MS, .period_us = 500000, .lead_us = 200 };

        /* A slow rhythm (500 ms): soon once its request is within the
         * window; a period's worth ahead is not. */
        ck_assert(!gs_foresee_soon(&p, 450 * MS, 100 * MS));
        ck_assert(gs_foresee_soon(&p, 505 * MS, 100 * MS));
        /* A request gone past its late window is not soon. */
        ck_assert(gs_foresee_soon(&p, p.next_ns + 200 * US, 100 * MS));
        ck_assert(!gs_foresee_soon(&p, p.next_ns + 200 * US + 500 * MS / 8, 100 * MS));
        /* Within a period of 10 ms, the next is always within 100 ms. */
        ck_assert(gs_foresee_soon(&PUB, 92 * MS, 100 * MS));
}
END_TEST

int main(void)
{
        Suite *s = suite_create("foresee");
        TCase *tc = tcase_create("foresee");

        tcase_add_test(tc, test_regular);
        tcase_add_test(tc, test_jitter);
        tcase_add_test(tc, test_schedule);
        tcase_add_test(tc, test_out_of_range);
        tcase_add_test(tc, test_decide);
        tcase_add_test(tc, test_hostile);
        tcase_add_test(tc, test_soon);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
