/* check_serve_spill.c — the mover's requests (GS_OP_SPILL,
 * GS_OP_SPILL_DONE; sessions/gs_serve_spill.c) through the request switch
 * gs_serve_one (fixture: gs_check_serve.h), on a GPU with spillMax 2
 * chunks: the served process p, of quota 4, may borrow 4 more; an owner
 * allocation o of quota 26 leaves 2 chunks free on the system list, so p
 * holding 8 has borrowed 2 of o's.  A batch planned and settled, and
 * against hostile requests (a SPILL before the last batch was answered,
 * a SPILL_DONE with no batch, for more slots than the batch named, or the
 * other direction), the books unchanged: the batch in flight, the spares,
 * what o is owed and p has spilled. */
#include "gs_check_serve.h"

#include "gs_gpu_int.h"
#include "gs_serve_spill.h"

#define NSPARE 2u
#define BORROW 4u
#define QUOTA_O (NCHUNKS - QUOTA - 2u)

static struct gs_allocation o;

static void setup(void)
{
        opt_spill_max = NSPARE * CHUNK;
        opt_borrow = BORROW;
        serve_setup();
        ck_assert_uint_eq(g->moves.nspare, NSPARE);
        gs_gpu_scrub_stop(g); /* host memory made in the plan, not ahead */
        serve_alloc_init(&o, "00000000000000c3", QUOTA_O, 0);
        p.move_feature = true;
}

static void teardown(void)
{
        serve_teardown();
}

/* The owner asks for n of what it is owed, as gs_move_want does. */
static void want(uint32_t n)
{
        gs_gpu_lock(g);
        gs_palloc_want(o.parts[0].pa, n);
        g->moves.last_want_ms = gs_mono_ms();
        g->moves.spill_want = n;
        gs_gpu_unlock(g);
}

/* The books: the pool sound; p holds held chunks, spilled of them in host
 * memory, nmove in a batch; o is owed owed. */
#define spill_books(held, spilled, nmove, owed) spill_books_at(__LINE__, held, spilled, nmove, owed)
static void spill_books_at(int line, uint32_t held, uint32_t spilled, uint32_t nmove, uint32_t owed)
{
        struct gs_palloc_stats ps;
        struct gs_pproc_stats st;
        char why[256] = "";

        gs_gpu_lock(g);
        ck_assert_msg(gs_pool_validate(g->pool, why, sizeof(why)) == 0, "line %d: %s", line, why);
        gs_palloc_stats(a.parts[0].pa, &ps);
        gs_pproc_stats(p.gpus[0].pp, &st);
        ck_assert_msg(st.chunks_held == held && ps.chunks_held == held, "line %d: %u, %u held, %u expected", line,
                      st.chunks_held, ps.chunks_held, held);
        ck_assert_msg(ps.chunks_spilled == spilled && gs_gpu_spilled(g) == spilled,
                      "line %d: %u, %u spilled, %u expected", line, ps.chunks_spilled, gs_gpu_spilled(g), spilled);
        ck_assert_msg(p.gpus[0].nmove == nmove, "line %d: %u in the batch, %u expected", line, p.gpus[0].nmove, nmove);
        ck_assert_uint_eq(g->moves.moving_out + g->moves.moving_back, nmove);
        ck_assert_msg(gs_palloc_owed(o.parts[0].pa) == owed, "line %d: o owed %u, %u expected", line,
                      gs_palloc_owed(o.parts[0].pa), owed);
        ck_assert_uint_eq(gs_pool_owed(g->pool), owed);
        gs_gpu_unlock(g);
}

/* p holds its quota and all it may borrow, a block in each chunk. */
static void fill(uint64_t *offs)
{
        for (uint32_t i = 0; i < QUOTA + BORROW; i++)
                offs[i] = alloc_ok(CHUNK, 1);
        gs_gpu_lock(g);
        gs_gpu_check_lending(g);
        gs_gpu_unlock(g);
        spill_books(QUOTA + BORROW, 0, 0, 2);
}

/* SPILL_DONEs that no batch, or not the batch in flight, asked for:
 * refused, nothing changed. */
static void done_refused(uint32_t held, uint32_t spilled, uint32_t nmove, uint32_t owed, uint32_t dir)
{
        const uint64_t moved[] = { nmove + 1, UINT64_MAX, (UINT64_C(1) << 32) + 0, (UINT64_C(1) << 32) + nmove };
        const uint64_t dirs[] = { 0, 3, UINT64_MAX, (UINT64_C(1) << 32) | dir,
                                  dir == GS_MOVE_TO_HOST ? GS_MOVE_TO_DEVICE : GS_MOVE_TO_HOST };

        for (size_t i = 0; i < sizeof(moved) / sizeof(moved[0]); i++) {
                ck_assert_int_eq(serve(GS_OP_SPILL_DONE, 0, moved[i], dir).status, -EPROTO);
                spill_books(held, spilled, nmove, owed);
        }
        for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
                ck_assert_int_eq(serve(GS_OP_SPILL_DONE, 0, 0, dirs[i]).status, -EPROTO);
                spill_books(held, spilled, nmove, owed);
        }
        if (!nmove) {
                ck_assert_int_eq(serve(GS_OP_SPILL_DONE, 0, 0, GS_MOVE_TO_HOST).status, -EPROTO);
                ck_assert_int_eq(serve(GS_OP_SPILL_DONE, 0, 0, GS_MOVE_TO_DEVICE).status, -EPROTO);
                spill_books(held, spilled, nmove, owed);
        }
        nothing_sent(peer);
}

/* Nothing to move: SPILL names no slot and starts no batch, whether p
 * holds nothing or its borrowed chunks are not wanted; a SPILL_DONE
 * after it is refused. */
START_TEST(test_spill_nothing)
{
        uint64_t offs[QUOTA + BORROW];

        for (int round = 0; round < 2; round++) {
                struct gs_ring_msg rep = serve(GS_OP_SPILL, 0, UINT64_MAX, UINT64_MAX);

                ck_assert_int_eq(rep.status, 0);
                ck_assert_uint_eq(rep.arg[0], 0);
                nothing_sent(peer);
                spill_books(round ? QUOTA + BORROW : 0, 0, 0, round ? 2 : 0);
                done_refused(round ? QUOTA + BORROW : 0, 0, 0, round ? 2 : 0, GS_MOVE_TO_HOST);
                if (!round)
                        fill(offs);
        }
}
END_TEST

/* A batch to host memory: the two chunks o wants, each slot sent the fd
 * of a spare's host memory.  Until it is answered no other batch, and only
 * its own answer, is taken; answered, o is repaid and p's data is in host
 * memory.  Once nothing is wanted, a batch brings it back. */
START_TEST(test_spill_batch)
{
        uint64_t offs[QUOTA + BORROW];
        uint32_t slots[NSPARE];

        fill(offs);
        want(2);
        struct gs_ring_msg rep = serve(GS_OP_SPILL, 0, 0, 0);
        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[0], NSPARE);
        ck_assert_uint_eq(rep.arg[1], GS_MOVE_TO_HOST);
        take_sent(peer, GS_SOCK_MOVE, NSPARE, CHUNK, slots);
        ck_assert_uint_ne(slots[0], slots[1]);
        for (uint32_t i = 0; i < NSPARE; i++) {
                ck_assert_uint_lt(slots[i], p.gpus[0].nslots);
                ck_assert_uint_eq(p.gpus[0].move[i].slot, slots[i]);
        }
        spill_books(QUOTA + BORROW, 0, NSPARE, 2);
        /* A second SPILL before the answer: refused, the batch stands. */
        rep = serve(GS_OP_SPILL, 0, 0, 0);
        ck_assert_int_eq(rep.status, -EPROTO);
        ck_assert_uint_eq(rep.arg[0], 0);
        spill_books(QUOTA + BORROW, 0, NSPARE, 2);
        done_refused(QUOTA + BORROW, 0, NSPARE, 2, GS_MOVE_TO_HOST);
        /* The answer: both moved, their device chunks made anew (none
         * pending: nobody kept them) and o repaid. */
        ck_assert_int_eq(serve(GS_OP_SPILL_DONE, 0, NSPARE, GS_MOVE_TO_HOST).status, 0);
        spill_books(QUOTA + BORROW, NSPARE, 0, 0);
        gs_gpu_lock(g);
        ck_assert_uint_eq(g->chunks_pending, 0);
        gs_gpu_unlock(g);
        /* Answered twice: refused. */
        done_refused(QUOTA + BORROW, NSPARE, 0, 0, GS_MOVE_TO_HOST);
        /* Nothing wanted any more, nothing more to move out; the blocks in
         * device memory freed and given back, the spilled ones come back
         * to the free chunks. */
        gs_gpu_lock(g);
        g->moves.spill_want = 0;
        g->moves.move_back_quiet_ms = 0;
        gs_gpu_unlock(g);
        for (uint32_t i = 0; i < QUOTA + BORROW; i++)
                if (offs[i] / CHUNK != slots[0] && offs[i] / CHUNK != slots[1])
                        ck_assert_int_eq(serve(GS_OP_FREE, 0, offs[i], 0).status, 0);
        give_back_all();
        spill_books(NSPARE, NSPARE, 0, 0);
        rep = serve(GS_OP_SPILL, 0, 0, 0);
        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[0], NSPARE);
        ck_assert_uint_eq(rep.arg[1], GS_MOVE_TO_DEVICE);
        take_sent(peer, GS_SOCK_MOVE, NSPARE, CHUNK, NULL);
        spill_books(NSPARE, NSPARE, NSPARE, 0);
        done_refused(NSPARE, NSPARE, NSPARE, 0, GS_MOVE_TO_DEVICE);
        ck_assert_int_eq(serve(GS_OP_SPILL_DONE, 0, NSPARE, GS_MOVE_TO_DEVICE).status, 0);
        spill_books(NSPARE, 0, 0, 0);
        for (uint32_t i = 0; i < QUOTA + BORROW; i++)
                if (offs[i] / CHUNK == slots[0] || offs[i] / CHUNK == slots[1])
                        ck_assert_int_eq(serve(GS_OP_FREE, 0, offs[i], 0).status, 0);
        give_back_all();
        spill_books(0, 0, 0, 0);
}
END_TEST

/* p full, o wants 2: a batch of both spares sent (read off the socket). */
static void both_sent(void)
{
        uint64_t offs[QUOTA + BORROW];

        fill(offs);
        want(2);
        struct gs_ring_msg rep = serve(GS_OP_SPILL, 0, 0, 0);
        ck_assert_uint_eq(rep.arg[0], NSPARE);
        take_sent(peer, GS_SOCK_MOVE, NSPARE, CHUNK, NULL);
}

/* A mover that moves nothing it was sent keeps the spares' host memory,
 * charged to spillMax: the next SPILL has no spare left to offer, and o
 * stays owed. */
START_TEST(test_spill_none_moved)
{
        struct gs_ring_msg rep;

        both_sent();
        ck_assert_int_eq(serve(GS_OP_SPILL_DONE, 0, 0, GS_MOVE_TO_HOST).status, 0);
        spill_books(QUOTA + BORROW, 0, 0, 2);
        gs_gpu_lock(g);
        ck_assert_uint_eq(gs_gpu_spill_held(g), NSPARE);
        gs_gpu_unlock(g);
        want(2);
        rep = serve(GS_OP_SPILL, 0, 0, 0);
        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[0], 0);
        nothing_sent(peer);
        spill_books(QUOTA + BORROW, 0, 0, 2);
        done_refused(QUOTA + BORROW, 0, 0, 2, GS_MOVE_TO_HOST);
}
END_TEST

/* A batch answered with GS_MOVE_CHAIN: the reply names the next batch,
 * planned before the first is settled and never one of its slots; the
 * first is settled once gs_serve_spill_settle runs (after the reply, in
 * the worker's turn), and the chain ends when nothing more is wanted.  A
 * chained answer for a batch not all moved settles it as before. */
START_TEST(test_spill_chain)
{
        uint64_t offs[QUOTA + BORROW];
        uint32_t s0, s1;

        fill(offs);
        want(1);
        struct gs_ring_msg rep = serve(GS_OP_SPILL, 0, 0, 0);
        ck_assert_uint_eq(rep.arg[0], 1);
        take_sent(peer, GS_SOCK_MOVE, 1, CHUNK, &s0);
        /* Another chunk wanted while the batch moves. */
        want(2);
        gs_gpu_lock(g);
        g->moves.moving_out = 1; /* want() does not know of the batch */
        gs_gpu_unlock(g);
        rep = serve(GS_OP_SPILL_DONE, 0, 1, GS_MOVE_TO_HOST | GS_MOVE_CHAIN);
        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[0], 1);
        ck_assert_uint_eq(rep.arg[1], GS_MOVE_TO_HOST);
        take_sent(peer, GS_SOCK_MOVE, 1, CHUNK, &s1);
        ck_assert_uint_ne(s0, s1);
        /* Not settled yet: nothing spilled, both batches moving. */
        ck_assert_uint_eq(p.gpus[0].nsettle, 1);
        ck_assert_uint_eq(p.gpus[0].nmove, 1);
        gs_gpu_lock(g);
        ck_assert_uint_eq(gs_gpu_spilled(g), 0);
        ck_assert_uint_eq(g->moves.moving_out, 2);
        gs_gpu_unlock(g);
        /* A SPILL while the next batch is out: refused. */
        ck_assert_int_eq(serve(GS_OP_SPILL, 0, 0, 0).status, -EPROTO);
        gs_serve_spill_settle(&p);
        ck_assert_uint_eq(p.gpus[0].nsettle, 0);
        spill_books(QUOTA + BORROW, 1, 1, 1);
        /* The last batch: nothing more wanted, nothing chained. */
        rep = serve(GS_OP_SPILL_DONE, 0, 1, GS_MOVE_TO_HOST | GS_MOVE_CHAIN);
        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[0], 0);
        nothing_sent(peer);
        gs_serve_spill_settle(&p);
        spill_books(QUOTA + BORROW, 2, 0, 0);
        gs_gpu_lock(g);
        ck_assert_uint_eq(g->chunks_pending, 0);
        gs_gpu_unlock(g);
}
END_TEST

/* GS_MOVE_CHAIN on an answer that moved less than its batch: settled at
 * once, nothing chained. */
START_TEST(test_spill_chain_partial)
{
        struct gs_ring_msg rep;

        both_sent();
        rep = serve(GS_OP_SPILL_DONE, 0, 1, GS_MOVE_TO_HOST | GS_MOVE_CHAIN);
        ck_assert_int_eq(rep.status, 0);
        ck_assert_uint_eq(rep.arg[0], 0);
        nothing_sent(peer);
        ck_assert_uint_eq(p.gpus[0].nsettle, 0);
        spill_books(QUOTA + BORROW, 1, 0, 1);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("serve_spill");
        TCase *t = tcase_create("spill");

        tcase_add_checked_fixture(t, setup, teardown);
        tcase_set_timeout(t, 60);
        tcase_add_test(t, test_spill_nothing);
        tcase_add_test(t, test_spill_batch);
        tcase_add_test(t, test_spill_none_moved);
        tcase_add_test(t, test_spill_chain);
        tcase_add_test(t, test_spill_chain_partial);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}
