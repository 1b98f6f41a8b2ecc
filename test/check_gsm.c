/* check_gsm.c — the chunk level on its own (agent/alloc/gs_gsm.h). */
#include <check.h>

#include "gs_check.h"
#include <stdlib.h>

#include "gs_gsm.h"

#define CHUNK (UINT64_C(1) << 20)

static struct gs_gsm g;
static struct gs_gsm_alloc a1, a2, a3;
static struct gs_gsm_proc p1, p2;

static void setup(void)
{
        ck_assert_int_eq(gs_gsm_init(&g, 8, CHUNK), 0);
}
static void teardown(void)
{
        gs_gsm_fini(&g);
}

static void valid(void)
{
        char why[256] = "";
        int r = gs_gsm_validate(&g, why, sizeof(why));
        ck_assert_msg(r == 0, "validate: %s", why);
}

static uint32_t take_at_next(struct gs_gsm_proc *p, uint32_t *ret_slot)
{
        uint32_t slot, id;
        ck_assert_int_eq(gs_gsm_find_slots(p, 1, &slot), 0);
        ck_assert_int_eq(gs_gsm_take(p, slot, &id), 0);
        valid();
        if (ret_slot)
                *ret_slot = slot;
        return id;
}

static int nreturned;
static uint32_t last_returned;
static int fail_return;
static int on_return(void *ctx, uint32_t chunk)
{
        (void)ctx;
        nreturned++;
        last_returned = chunk;
        return fail_return || chunk >= g.nreal ? -EIO : 0; /* a spare has no memory to make: retired */
}

/* Moves: a record without memory takes a held chunk's place (spill), the
 * chunk repays what is owed, first to the allocation that asked; a
 * reserved system chunk takes the spare's place again (back). */
/* After an agent restart (gs_gsm_alloc_lent_before, gs_gsm_adopt_spare,
 * gs_gsm_make_borrowed): adopted borrowed chunks come from the system list,
 * then from the allocation owed chunks before (not the idle one with the
 * most); a slot whose data was in host memory holds a spare; a slot in a
 * move that the process says is in host memory trades its chunk for one. */
START_TEST(test_restore_spilled)
{
        uint32_t c[5];

        g.lend_owned = true;
        g.return_fn = on_return;
        g.nreal = 6; /* records 6 and 7 are spares */
        ck_assert_int_eq(gs_gsm_retire(&g, 6), 0);
        ck_assert_int_eq(gs_gsm_retire(&g, 7), 0);
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a2, 2, 0), 0); /* the owner */
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a3, 2, 0), 0); /* idle, as many free */
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a1, 1, 6), 0); /* the borrower */
        ck_assert_int_eq(gs_gsm_proc_init(&a1, &p1, 16), 0);
        gs_gsm_alloc_lent_before(&a2, 2);
        for (uint32_t s = 0; s < 4; s++)
                ck_assert_int_eq(gs_gsm_take_at(&p1, s, &c[s]), 0);
        ck_assert_uint_eq(a2.owed, 2); /* owed again, not a3 */
        ck_assert_uint_eq(a3.owed, 0);
        ck_assert_uint_eq(a2.lent_before, 0);
        ck_assert_int_eq(gs_gsm_adopt_spare(&p1, 3, 6), -EBUSY);
        ck_assert_int_eq(gs_gsm_adopt_spare(&p1, 4, 2), -EINVAL); /* not a spare */
        ck_assert_int_eq(gs_gsm_adopt_spare(&p1, 4, 6), 0);
        ck_assert_int_eq(gs_gsm_adopt_spare(&p1, 5, 6), -EINVAL); /* held */
        ck_assert_uint_eq(g.spilled, 1);
        ck_assert_uint_eq(a1.spilled, 1);
        ck_assert_uint_eq(g.chunks[6].borrowed, 1);
        valid();
        gs_gsm_adopted(&g);
        /* slot 0 holds a1's own chunk: made borrowed, then spilled */
        ck_assert_uint_eq(g.chunks[c[0]].borrowed, 0);
        ck_assert_int_eq(gs_gsm_make_borrowed(&g, 6), -EINVAL); /* a spare */
        ck_assert_int_eq(gs_gsm_make_borrowed(&g, c[0]), 0);
        valid();
        ck_assert_int_eq(gs_gsm_exchange(&g, c[0], 7), 0);
        ck_assert_uint_eq(g.spilled, 2);
        ck_assert_uint_eq(a2.owed, 1); /* its chunk went to whom it is owed */
        valid();
        gs_gsm_put(&p1, 4); /* the spare goes back to being a spare */
        ck_assert_uint_eq(g.chunks[6].state, GS_GSM_RETIRED);
        ck_assert_uint_eq(g.spilled, 1);
        valid();
        gs_gsm_proc_fini(&p1);
        ck_assert_uint_eq(g.spilled, 0);
        ck_assert_uint_eq(g.owed, 0);
        valid();
}
END_TEST

START_TEST(test_exchange)
{
        uint32_t slots[8], ids[8], id, id2, spare;

        g.lend_owned = true;
        g.return_fn = on_return;
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a1, 2, 4), 0);
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a2, 1, 0), 0);
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a3, 1, 0), 0);
        /* two spare records: retired, no memory */
        ck_assert_int_eq(gs_gsm_retire(&g, g.sys.head), 0);
        spare = g.sys.head;
        ck_assert_int_eq(gs_gsm_retire(&g, spare), 0);
        ck_assert_int_eq(gs_gsm_proc_init(&a1, &p1, 16), 0);
        /* 2 own + 2 from the system list + a2's and a3's idle chunks */
        ck_assert_uint_eq(gs_gsm_alloc_obtainable(&a1), 6);
        gs_gsm_want(&a1, 1); /* nothing owed: nothing wanted */
        ck_assert_uint_eq(a1.wants, 0);
        for (int i = 0; i < 6; i++)
                ids[i] = take_at_next(&p1, &slots[i]);
        ck_assert_int_eq(gs_gsm_find_slots(&p1, 1, &slots[6]), 0);
        ck_assert_int_eq(gs_gsm_take(&p1, slots[6], &id), -ENOMEM); /* the cap */
        ck_assert_uint_eq(a2.owed, 1);
        ck_assert_uint_eq(a3.owed, 1);
        ck_assert_uint_eq(g.owed, 2);
        /* a3 (the newer) asks: it is repaid first */
        gs_gsm_want(&a3, 5);
        ck_assert_uint_eq(a3.wants, 1);
        ck_assert_int_eq(gs_gsm_exchange(&g, ids[5], ids[0]), -EINVAL); /* not retired */
        ck_assert_int_eq(gs_gsm_exchange(&g, spare, spare), -EINVAL);   /* not held */
        uint32_t held = ids[5];
        nreturned = 0;
        ck_assert_int_eq(gs_gsm_exchange(&g, held, spare), 0);
        ck_assert_int_eq(nreturned, 1); /* made anew */
        ck_assert_uint_eq(gs_gsm_slot_chunk(&p1, slots[5]), spare);
        ck_assert_uint_eq(a3.owed, 0);
        ck_assert_uint_eq(a3.own.count, 1);
        ck_assert_uint_eq(a3.wants, 0);
        ck_assert_uint_eq(a2.owed, 1);
        ck_assert_uint_eq(g.chunks[held].state, GS_GSM_OWN);
        ck_assert_uint_eq(g.chunks[spare].state, GS_GSM_HELD);
        ck_assert_uint_eq(g.chunks[spare].borrowed, 1);
        valid();
        /* back: the system list lends nothing while a2 is owed, but a3's
         * chunk, free again, may be reserved: a3 is owed it then; undone,
         * it repays the oldest owed (a2) */
        ck_assert_uint_eq(gs_gsm_lendable(&g), 1);
        ck_assert_int_eq(gs_gsm_reserve(&g, &id), 0);
        ck_assert_uint_eq(a3.owed, 1);
        ck_assert_uint_eq(gs_gsm_lendable(&g), 0);
        ck_assert_int_eq(gs_gsm_reserve(&g, &id2), -ENOMEM);
        valid();
        ck_assert_int_eq(gs_gsm_unretire(&g, id), 0);
        ck_assert_uint_eq(a2.owed, 0);
        ck_assert_uint_eq(a3.owed, 1);
        valid();
        gs_gsm_put(&p1, slots[4]); /* a borrowed one: repays a3 */
        ck_assert_uint_eq(a3.owed, 0);
        gs_gsm_put(&p1, slots[3]);
        ck_assert_int_eq(gs_gsm_reserve(&g, &id), 0); /* the system list's, first */
        ck_assert_uint_eq(g.chunks[id].state, GS_GSM_RETIRED);
        ck_assert_uint_eq(a2.owed + a3.owed, 0);
        valid();
        nreturned = 0;
        fail_return = 1; /* the spare has no memory to make: retired again */
        ck_assert_int_eq(gs_gsm_exchange(&g, spare, id), 0);
        fail_return = 0;
        ck_assert_uint_eq(gs_gsm_slot_chunk(&p1, slots[5]), id);
        ck_assert_uint_eq(g.chunks[spare].state, GS_GSM_RETIRED);
        valid();
        gs_gsm_proc_fini(&p1);
        valid();
        ck_assert_uint_eq(g.borrowed, 0);
        ck_assert_uint_eq(g.owed, 0);
}
END_TEST

/* An idle owner's dirty free chunk (on its last holder's list) is lent as
 * any other: it leaves that list too (zeroed by the agent at its grant). */
START_TEST(test_lend_dirty)
{
        uint32_t slot, id;

        g.lend_owned = true;
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a1, 1, 7), 0);
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a2, 2, 0), 0);
        ck_assert_int_eq(gs_gsm_proc_init(&a2, &p2, 4), 0);
        id = take_at_next(&p2, &slot);
        gs_gsm_put(&p2, slot); /* dirty, on p2's list */
        ck_assert_uint_eq(p2.mine.count, 1);
        ck_assert_int_eq(gs_gsm_proc_init(&a1, &p1, 16), 0);
        for (int i = 0; i < 8; i++)
                take_at_next(&p1, NULL); /* 1 own, 5 free, then a2's 2 */
        ck_assert_uint_eq(a2.owed, 2);
        ck_assert_uint_eq(p2.mine.count, 0);
        ck_assert_ptr_eq(g.chunks[id].proc, &p1);
        valid();
        gs_gsm_proc_fini(&p1);
        gs_gsm_proc_fini(&p2);
        valid();
        ck_assert_uint_eq(a2.owed, 0);
}
END_TEST

START_TEST(test_bad_args)
{
        struct gs_gsm z;
        ck_assert_int_eq(gs_gsm_init(&z, 0, CHUNK), -EINVAL);
        ck_assert_int_eq(gs_gsm_init(&z, 4, CHUNK + 1), -EINVAL);
        ck_assert_int_eq(gs_gsm_init(&z, 4, 4096), -EINVAL);
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a1, 0, 0), -EINVAL);
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a1, 9, 0), -ENOSPC);
        ck_assert_int_eq(g.sys.count, 8);
        ck_assert_int_eq(gs_gsm_retire(&g, 8), -EINVAL);
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a1, 2, 0), 0);
        ck_assert_int_eq(gs_gsm_proc_init(&a1, &p1, 0), -EINVAL);
        ck_assert_int_eq(gs_gsm_proc_init(&a1, &p1, GS_GSM_MAX_SLOTS + 1), -EINVAL);
        ck_assert_int_eq(gs_gsm_retire(&g, a1.own.head), -EBUSY);
        valid();
}
END_TEST

/* An allocation made while its chunks are lent is owed them: it is made,
 * nothing is lent while it is owed, and every chunk that comes back goes
 * to it (docs/burst.md). */
START_TEST(test_owed)
{
        uint32_t slots[8], id;

        /* Not without lend_owned (no spill): the create fails. */
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a1, 2, 6), 0); /* 2 own, may borrow 6 */
        ck_assert_int_eq(gs_gsm_proc_init(&a1, &p1, 16), 0);
        for (int i = 0; i < 8; i++)
                take_at_next(&p1, &slots[i]);
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a2, 4, 0), -ENOSPC);
        gs_gsm_proc_fini(&p1);
        ck_assert_int_eq(gs_gsm_alloc_fini(&a1), 0);
        valid();
        g.lend_owned = true;
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a1, 2, 6), 0);
        ck_assert_int_eq(gs_gsm_proc_init(&a1, &p1, 16), 0);
        for (int i = 0; i < 8; i++)
                take_at_next(&p1, &slots[i]);
        ck_assert_uint_eq(g.sys.count, 0);
        ck_assert_uint_eq(g.borrowed, 6);
        /* 4 of the 6 lent: made, owed 4. */
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a2, 4, 0), 0);
        ck_assert_uint_eq(a2.owed, 4);
        ck_assert_uint_eq(a2.own.count, 0);
        ck_assert_uint_eq(gs_gsm_alloc_obtainable(&a2), 0);
        valid();
        /* 3 more: only 2 lent chunks are not owed yet. */
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a3, 3, 0), -ENOSPC);
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a3, 2, 0), 0);
        ck_assert_uint_eq(g.owed, 6);
        valid();
        /* A borrowed chunk comes back: to an owed allocation, not the
         * system list. */
        gs_gsm_put(&p1, slots[7]);
        ck_assert_uint_eq(g.sys.count, 0);
        ck_assert_uint_eq(g.owed, 5);
        ck_assert_uint_eq(a2.owed, 3); /* the oldest first */
        valid();
        /* An own chunk of the borrower comes back: it repays a loan (to the
         * system list), and that chunk goes to an owed allocation too. */
        gs_gsm_put(&p1, slots[0]);
        ck_assert_uint_eq(g.owed, 4);
        ck_assert_uint_eq(g.sys.count, 0);
        valid();
        /* The system list lends nothing while chunks are owed; the
         * borrower gets the clean free chunks of others, owed them then. */
        uint32_t owed2 = a2.owed, free2 = a2.own.count;
        ck_assert_uint_eq(free2, 2);
        ck_assert_uint_eq(gs_gsm_alloc_obtainable(&a1), 2);
        ck_assert_int_eq(gs_gsm_find_slots(&p1, 1, &slots[0]), 0);
        ck_assert_int_eq(gs_gsm_take(&p1, slots[0], &id), 0);
        ck_assert_uint_eq(a2.owed, owed2 + 1);
        ck_assert_uint_eq(a2.own.count, free2 - 1);
        valid();
        gs_gsm_put(&p1, slots[0]); /* and back to it */
        ck_assert_uint_eq(a2.owed, owed2);
        valid();
        /* The owed allocation's process takes what came back. */
        ck_assert_int_eq(gs_gsm_proc_init(&a2, &p2, 16), 0);
        while (a2.own.count)
                take_at_next(&p2, NULL);
        /* An owed allocation deleted: what it is owed goes with it. */
        ck_assert_uint_eq(a3.owed, 2);
        ck_assert_uint_eq(g.owed, 4);
        ck_assert_int_eq(gs_gsm_alloc_fini(&a3), 0);
        ck_assert_uint_eq(g.owed, 2);
        valid();
        /* Everything back: nothing owed, nothing lent. */
        for (int i = 1; i < 7; i++)
                gs_gsm_put(&p1, slots[i]);
        ck_assert_uint_eq(g.owed, 0);
        ck_assert_uint_eq(g.borrowed, 0);
        ck_assert_uint_eq(a2.own.count + a2.held, 4);
        valid();
        gs_gsm_proc_fini(&p2);
        gs_gsm_proc_fini(&p1);
        valid();
        ck_assert_int_eq(gs_gsm_alloc_fini(&a2), 0);
        ck_assert_int_eq(gs_gsm_alloc_fini(&a1), 0);
        ck_assert_uint_eq(g.sys.count, 8);
        valid();
}
END_TEST

START_TEST(test_quota_take_put)
{
        uint32_t slot;
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a1, 3, 0), 0);
        ck_assert_uint_eq(g.sys.count, 5);
        ck_assert_uint_eq(g.reserved, 3);
        ck_assert_int_eq(gs_gsm_proc_init(&a1, &p1, 16), 0);
        ck_assert_uint_eq(gs_gsm_alloc_obtainable(&a1), 3);
        uint32_t c0 = take_at_next(&p1, &slot);
        ck_assert_uint_eq(slot, 0);
        ck_assert_uint_eq(gs_gsm_slot_chunk(&p1, 0), c0);
        take_at_next(&p1, &slot);
        ck_assert_uint_eq(slot, 1);
        take_at_next(&p1, &slot);
        ck_assert_uint_eq(slot, 2);
        ck_assert_int_eq(gs_gsm_find_slots(&p1, 1, &slot), 0);
        uint32_t id;
        ck_assert_int_eq(gs_gsm_take(&p1, slot, &id), -ENOMEM);
        valid();
        gs_gsm_put(&p1, 1);
        valid();
        ck_assert_uint_eq(a1.own.count, 1);
        ck_assert_uint_eq(gs_gsm_slot_chunk(&p1, 1), GS_GSM_NONE);
        take_at_next(&p1, &slot);
        ck_assert_uint_eq(slot, 1); /* lowest free slot reused */
        gs_gsm_proc_fini(&p1);
        valid();
        ck_assert_uint_eq(a1.own.count, 3);
        ck_assert_int_eq(gs_gsm_alloc_fini(&a1), 0);
        ck_assert_uint_eq(g.sys.count, 8);
        valid();
}
END_TEST

START_TEST(test_consecutive_slots)
{
        uint32_t first, id;
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a1, 8, 0), 0);
        ck_assert_int_eq(gs_gsm_proc_init(&a1, &p1, 6), 0);
        take_at_next(&p1, NULL); /* slot 0 */
        ck_assert_int_eq(gs_gsm_find_slots(&p1, 2, &first), 0);
        ck_assert_uint_eq(first, 1);
        ck_assert_int_eq(gs_gsm_take(&p1, 2, &id), 0); /* slots 0, 2 used */
        ck_assert_int_eq(gs_gsm_find_slots(&p1, 3, &first), 0);
        ck_assert_uint_eq(first, 3);
        ck_assert_int_eq(gs_gsm_find_slots(&p1, 4, &first), -ENOSPC);
        ck_assert_int_eq(gs_gsm_find_slots(&p1, 1, &first), 0);
        ck_assert_uint_eq(first, 1);
        valid();
        gs_gsm_proc_fini(&p1);
        ck_assert_int_eq(gs_gsm_alloc_fini(&a1), 0);
}
END_TEST

START_TEST(test_balloon_and_repay)
{
        uint32_t slot, id;
        g.return_fn = on_return;
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a1, 1, 2), 0);
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a2, 4, 0), 0);
        ck_assert_int_eq(gs_gsm_proc_init(&a1, &p1, 16), 0);
        ck_assert_int_eq(gs_gsm_proc_init(&a1, &p2, 16), 0);
        ck_assert_uint_eq(gs_gsm_alloc_obtainable(&a1), 3);
        take_at_next(&p1, NULL);               /* own */
        uint32_t b1 = take_at_next(&p1, NULL); /* borrowed */
        take_at_next(&p2, &slot);              /* borrowed */
        ck_assert_uint_eq(a1.borrowed.count, 2);
        ck_assert_uint_eq(g.borrowed, 2);
        ck_assert_uint_eq(g.chunks[b1].borrowed, 1);
        ck_assert_int_eq(gs_gsm_find_slots(&p1, 1, &slot), 0);
        ck_assert_int_eq(gs_gsm_take(&p1, slot, &id), -ENOMEM); /* cap reached */
        /* p1 gives back its own chunk at slot 0: it repays a loan */
        gs_gsm_put(&p1, 0);
        valid();
        ck_assert_uint_eq(a1.borrowed.count, 1);
        ck_assert_uint_eq(a1.own.count, 0);
        ck_assert_int_eq(nreturned, 1);
        /* p2 exits: its chunk is whichever remains borrowed or own */
        gs_gsm_proc_fini(&p2);
        valid();
        ck_assert_uint_eq(a1.borrowed.count, 0);
        ck_assert_uint_eq(a1.held + a1.own.count, 1);
        ck_assert_int_eq(nreturned, 2);
        ck_assert_uint_eq(g.sys.count, 8 - 4 - 1);
        gs_gsm_proc_fini(&p1);
        ck_assert_int_eq(gs_gsm_alloc_fini(&a1), 0);
        ck_assert_int_eq(nreturned, 3);              /* the granted own chunk too */
        ck_assert_int_eq(gs_gsm_alloc_fini(&a2), 0); /* never granted: no call */
        ck_assert_int_eq(nreturned, 3);
        valid();
}
END_TEST

START_TEST(test_return_failure_retires)
{
        uint32_t id;
        g.return_fn = on_return;
        fail_return = 1;
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a1, 2, 0), 0);
        ck_assert_int_eq(gs_gsm_proc_init(&a1, &p1, 4), 0);
        id = take_at_next(&p1, NULL);
        ck_assert_int_eq(gs_gsm_proc_init(&a1, &p2, 4), 0);
        ck_assert_int_eq(gs_gsm_alloc_fini(&a1), -EBUSY);
        gs_gsm_proc_fini(&p1);
        gs_gsm_proc_fini(&p2);
        ck_assert_int_eq(gs_gsm_alloc_fini(&a1), 0);
        ck_assert_uint_eq(last_returned, id);
        ck_assert_uint_eq(g.nretired, 1);
        ck_assert_uint_eq(gs_gsm_usable(&g), 7);
        ck_assert_uint_eq(g.chunks[id].state, GS_GSM_RETIRED);
        ck_assert_int_eq(gs_gsm_retire(&g, id), -EBUSY);
        ck_assert_int_eq(gs_gsm_retire(&g, g.sys.head), 0);
        ck_assert_uint_eq(gs_gsm_usable(&g), 6);
        valid();
}
END_TEST

START_TEST(test_validate_catches)
{
        ck_assert_int_eq(gs_gsm_alloc_init(&g, &a1, 2, 0), 0);
        valid();
        g.reserved++;
        ck_assert_int_eq(gs_gsm_validate(&g, NULL, 0), -EUCLEAN);
        g.reserved--;
        g.chunks[g.sys.head].state = GS_GSM_OWN;
        ck_assert_int_eq(gs_gsm_validate(&g, NULL, 0), -EUCLEAN);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("gsm");
        TCase *tc = tcase_create("core");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_bad_args);
        tcase_add_test(tc, test_quota_take_put);
        tcase_add_test(tc, test_consecutive_slots);
        tcase_add_test(tc, test_balloon_and_repay);
        tcase_add_test(tc, test_return_failure_retires);
        tcase_add_test(tc, test_owed);
        tcase_add_test(tc, test_exchange);
        tcase_add_test(tc, test_restore_spilled);
        tcase_add_test(tc, test_lend_dirty);
        tcase_add_test(tc, test_validate_catches);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
