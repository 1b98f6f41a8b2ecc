/* check_movespill.c — a GPU's moves (gs_gpu_spill.c) on a real pool over
 * the fake driver, driven directly as the sessions drive them
 * (gs_serve_spill.c): an owner owed chunks that a borrower holds, a plan
 * that moves the borrower's borrowed chunks to spare records (host
 * memory), the batch settled with all, some or none moved, spillMax
 * reached, and the move back once nothing is wanted.  After every step
 * the books must agree: the pool validates, every device chunk is in one
 * place, what is owed and spilled is what the moves made it, and the
 * agent keeps no host memory of a spare a process was given.
 *
 * The GPU: 1 GiB in 32 chunks of 32 MiB, spillMax 2 chunks.  The owner A
 * has a quota of 26; the borrower B a quota of 2 and may borrow the 4
 * free chunks and `owed` of A's (then A is owed them).  The scrubber
 * thread is stopped: its part (host memory made ahead) is driven here. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_check_gpu.h"
#include "gs_gpu.h"
#include "gs_allocs.h"
#include "gs_gpu_int.h"
#include "gs_log.h"

#define MiB (UINT64_C(1) << 20)
#define CHUNK (32 * MiB)
#define NCHUNKS 32u
#define NSPARE 2u
#define QUOTA_A 26u
#define QUOTA_B 2u
#define FREE_SYS (NCHUNKS - QUOTA_A - QUOTA_B)
#define PROC_A 11u
#define PROC_B 22u

static struct gs_node ag;
static struct gs_gpu *g;
static struct gs_palloc *pa, *pb;
static struct gs_pproc *ppa, *ppb;
/* B as the agent knows it: its chunks' owner, charged for what a process
 * of it may still hold. */
static struct gs_allocation balloc;
static char state[64];
static uint32_t pokes; /* the main thread told that what is lent changed */
static int fds_at_start;

static void on_poke(struct gs_node *n)
{
        (void)n;
        pokes++;
}

/* The GPU, A and B; B holds all it may: its quota, the free chunks and
 * owed of A's. */
static int64_t open_ms; /* when the GPU was opened */

static void open_gpu(uint32_t owed, uint32_t quiet_ms)
{
        char err[512];

        fds_at_start = gs_check_count_fds();
        open_ms = gs_mono_ms();
        gs_check_fakecuda_env(state, sizeof(state), "movespill", "1Gi");
        gs_log_init("check_movespill", GS_LOG_ERROR);
        gs_config_defaults(&ag.cfg);
        ag.cfg.chunk_bytes = CHUNK;
        ag.cfg.unit_bytes = 2 * CHUNK;
        ag.cfg.reserve_bytes = 0;
        ag.cfg.spill_max_bytes = NSPARE * CHUNK;
        ag.cfg.move_back_quiet_ms = quiet_ms;
        gs_check_cuda_open(&ag);
        g = gs_check_gpu_open(&ag, NCHUNKS);
        ag.on_poke = on_poke;
        ck_assert_uint_eq(g->moves.nspare, NSPARE);
        gs_gpu_scrub_stop(g);

        gs_gpu_lock(g);
        ck_assert_int_eq(gs_palloc_new(g->pool, QUOTA_A, 0, &pa), 0);
        ck_assert_int_eq(gs_palloc_new(g->pool, QUOTA_B, FREE_SYS + owed, &pb), 0);
        ck_assert_int_eq(gs_pproc_new(pa, 64, &ppa), 0);
        ck_assert_int_eq(gs_pproc_new(pb, 64, &ppb), 0);
        balloc = (struct gs_allocation){ .nparts = 1 };
        balloc.parts[0] = (struct gs_part){ .gpu = g->index, .pa = pb };
        for (uint32_t i = 0; i < QUOTA_B + FREE_SYS + owed; i++) {
                struct gs_grant gr[4];
                uint64_t off;
                uint32_t n;
                int fd;
                ck_assert_int_eq(gs_pproc_malloc(ppb, CHUNK, &off, gr, 4, &n), 0);
                ck_assert_uint_eq(n, 1);
                ck_assert_int_eq(gs_gpu_chunks_hand_out(g, gr, 1, &balloc, PROC_B, &fd, err, sizeof(err)), 0);
                ck_assert_int_ge(fd, 0);
        }
        gs_gpu_check_lending(g);
        ck_assert_uint_eq(gs_palloc_owed(pa), owed);
        ck_assert_uint_eq(gs_pool_owed(g->pool), owed);
        gs_gpu_unlock(g);
}

static void close_gpu(void)
{
        gs_gpu_lock(g);
        gs_pproc_del(ppa);
        gs_pproc_del(ppb);
        gs_gpu_unlock(g);
        gs_gpu_close(g);
        free(g);
        g = NULL;
        unlink(state);
        /* Every chunk's and every spare's fd went with the GPU. */
        ck_assert_int_eq(gs_check_count_fds(), fds_at_start);
}

/* The owner asks for n of what it is owed, as gs_move_want does. */
static void want(uint32_t n)
{
        gs_gpu_lock(g);
        gs_palloc_want(pa, n);
        g->moves.last_want_ms = gs_mono_ms();
        g->moves.spill_want = n;
        gs_gpu_unlock(g);
}

static struct gs_palloc_stats palloc_stats(struct gs_palloc *a)
{
        struct gs_palloc_stats st;

        gs_palloc_stats(a, &st);
        return st;
}

/* The books, under the lock: the pool validates; every device chunk is on
 * one list or held (a reserved one, in a move back, on none); a spare
 * record held by a process is spilled data, and the agent keeps no host
 * memory for it. */
#define check_books(reserved) check_books_at(__LINE__, reserved)
static void check_books_at(int line, uint32_t reserved)
{
        char why[256] = "";
        struct gs_pool_stats ps;

        gs_gpu_assert_locked(g);
        ck_assert_msg(gs_pool_validate(g->pool, why, sizeof(why)) == 0, "line %d: %s", line, why);
        gs_pool_stats(g->pool, &ps);
        struct gs_palloc_stats a = pa ? palloc_stats(pa) : (struct gs_palloc_stats){ 0 }, b = palloc_stats(pb);
        uint32_t held_dev = 0, held_spare = 0;
        for (uint32_t c = 0; c < NCHUNKS + NSPARE; c++)
                if (gs_pool_chunk_held(g->pool, c))
                        *(c < NCHUNKS ? &held_dev : &held_spare) += 1;
        ck_assert_msg(ps.chunks_free + a.chunks_free + b.chunks_free + held_dev + reserved == NCHUNKS,
                      "line %d: %u on the system list + %u + %u on the allocations' + %u held + %u in moves back "
                      "!= %u chunks",
                      line, ps.chunks_free, a.chunks_free, b.chunks_free, held_dev, reserved, NCHUNKS);
        ck_assert_uint_eq(a.chunks_held + b.chunks_held, held_dev + held_spare);
        ck_assert_uint_eq(gs_gpu_spilled(g), held_spare);
        ck_assert_uint_eq(b.chunks_spilled, held_spare);
        ck_assert_uint_eq(gs_pool_owed(g->pool), a.chunks_owed + b.chunks_owed);
        for (uint32_t i = 0; i < NSPARE; i++)
                if (gs_pool_chunk_held(g->pool, NCHUNKS + i)) {
                        ck_assert_msg(g->moves.spares[i].fd < 0, "line %d: spare %u spilled, its host memory kept",
                                      line, i);
                        ck_assert_uint_eq(g->moves.spares[i].holder, 0);
                }
}

/* A plan to host memory: n entries, each one of B's borrowed slots and a
 * distinct spare with host memory; the slots' chunks in moves. */
static int plan_out(struct gs_move_ent *e, char *err, size_t errlen)
{
        gs_gpu_lock(g);
        err[0] = '\0';
        int n = gs_gpu_move_plan(g, ppb, GS_MOVE_TO_HOST, e, GS_MOVE_MAX, NULL, PROC_B, err, errlen);
        for (int i = 0; i < n; i++) {
                ck_assert_uint_eq(e[i].from, gs_pproc_slot_chunk(ppb, e[i].slot));
                ck_assert_uint_lt(e[i].from, NCHUNKS);
                ck_assert_uint_ge(e[i].to, NCHUNKS);
                ck_assert_uint_lt(e[i].to, NCHUNKS + NSPARE);
                ck_assert_int_ge(e[i].fd, 0);
                ck_assert(g->moves.spares[e[i].to - NCHUNKS].busy);
                for (int k = 0; k < i; k++) {
                        ck_assert_uint_ne(e[k].to, e[i].to);
                        ck_assert_uint_ne(e[k].slot, e[i].slot);
                }
        }
        ck_assert_uint_eq(g->moves.moving_out, (uint32_t)n);
        check_books(0);
        gs_gpu_unlock(g);
        return n;
}

/* Settles a batch; the lending check after it: the main thread is told
 * (poked) exactly when what is lent changed.  The device chunks a spill
 * frees are made anew at once: kept of them (a process of B kept their
 * fds) are pending and charged to B. */
static void end_kept(enum gs_move_dir dir, const struct gs_move_ent *e, uint32_t n, uint32_t moved, uint64_t proc,
                     uint32_t kept)
{
        struct gs_pool_stats ps;

        if (moved > n)
                moved = n; /* as gs_gpu_move_end counts it */
        gs_gpu_lock(g);
        uint32_t pending0 = g->chunks_pending, debt0 = palloc_stats(pb).chunks_debt;
        uint32_t lent = g->last_borrowed, pokes0 = pokes;
        gs_gpu_move_end(g, dir, e, n, moved, NULL, proc);
        gs_pool_stats(g->pool, &ps);
        ck_assert_uint_eq(g->last_borrowed, ps.chunks_borrowed);
        ck_assert_uint_eq(pokes, pokes0 + (ps.chunks_borrowed != lent));
        /* Made anew at once; those a process kept the fd of pending
         * and charged to B (the driver has no room for them). */
        if (dir == GS_MOVE_TO_HOST) {
                ck_assert_uint_eq(g->chunks_pending, pending0 + kept);
                ck_assert_uint_eq(palloc_stats(pb).chunks_debt, debt0 + kept);
        }
        gs_gpu_unlock(g);
}

static void end(enum gs_move_dir dir, const struct gs_move_ent *e, uint32_t n, uint32_t moved, uint64_t proc)
{
        end_kept(dir, e, n, moved, proc, 0);
}

/* The owner wants want_n (0: what it wanted stands); a batch out of n
 * planned, moved of them settled by proc; the books; the lock stays held
 * for the caller's own assertions. */
static void spill_out(struct gs_move_ent *e, uint32_t want_n, int n, uint32_t moved, uint64_t proc)
{
        char err[256];

        if (want_n)
                want(want_n);
        ck_assert_int_eq(plan_out(e, err, sizeof(err)), n);
        end(GS_MOVE_TO_HOST, e, (uint32_t)n, moved, proc);
        gs_gpu_lock(g);
        check_books(0);
}

static void setup_owed2(void)
{
        open_gpu(2, 0);
}
static void setup_owed3(void)
{
        open_gpu(3, 0);
}
static void setup_quiet(void)
{
        open_gpu(2, 3600 * 1000);
}
static void teardown(void)
{
        close_gpu();
}

/* Nothing wanted: no move either way (nothing is owed that is wanted, and
 * nothing is spilled to bring back). */
START_TEST(test_nothing_wanted)
{
        struct gs_move_ent e[GS_MOVE_MAX];
        char err[256];

        ck_assert_int_eq(plan_out(e, err, sizeof(err)), 0);
        gs_gpu_lock(g);
        ck_assert_int_eq(gs_gpu_move_plan(g, ppb, GS_MOVE_TO_DEVICE, e, GS_MOVE_MAX, NULL, PROC_B, err, sizeof(err)),
                         0);
        check_books(0);
        gs_gpu_unlock(g);
}
END_TEST

/* All moved: the chunks go to A (repaid, counted as come back to it), B's
 * slots hold spares. */
START_TEST(test_out_all)
{
        struct gs_move_ent e[GS_MOVE_MAX];
        char err[256];

        want(2);
        int n = plan_out(e, err, sizeof(err));
        ck_assert_int_eq(n, 2);
        ck_assert_str_eq(err, "");
        uint32_t a_free = palloc_stats(pa).chunks_free, a_returned = gs_palloc_returned(pa);
        end(GS_MOVE_TO_HOST, e, 2, 2, PROC_B);
        gs_gpu_lock(g);
        check_books(0);
        ck_assert_uint_eq(gs_gpu_spilled(g), 2);
        ck_assert_uint_eq(gs_palloc_owed(pa), 0);
        ck_assert_uint_eq(palloc_stats(pa).chunks_free, a_free + 2);
        /* Memory came back to A: a request of its that failed just
         * before is told to try again (gs_short_request). */
        ck_assert_uint_eq(gs_palloc_returned(pa), a_returned + 2);
        ck_assert_uint_eq(palloc_stats(pb).chunks_held, QUOTA_B + FREE_SYS + 2);
        for (int i = 0; i < n; i++)
                ck_assert_uint_eq(gs_pproc_slot_chunk(ppb, e[i].slot), e[i].to);
        ck_assert_uint_eq(g->moves.spill_want, 0);
        ck_assert_uint_eq(g->moves.moving_out, 0);
        ck_assert_uint_eq(g->moves.st.chunks_out, 2);
        ck_assert_uint_eq(gs_gpu_spill_held(g), 0);
        /* Nothing more to move out; no spare is left for another. */
        ck_assert_uint_eq(gs_gpu_spare_record_free(g), UINT32_MAX);
        gs_gpu_unlock(g);
        ck_assert_int_eq(plan_out(e, err, sizeof(err)), 0);
}
END_TEST

/* B's process kept the fd of a chunk it moved out (a hostile hook): the
 * driver has no room to make that chunk anew while the memory lives, so it
 * stays pending and charged to B from the settling on (never handed to A
 * with B still able to reach it, never free for B to take again); the
 * other is made anew and repays A.  The fd closed: made, charged to
 * nobody, A repaid. */
START_TEST(test_out_kept_fd)
{
        struct gs_move_ent e[GS_MOVE_MAX];
        char err[256];

        want(2);
        ck_assert_int_eq(plan_out(e, err, sizeof(err)), 2);
        gs_gpu_lock(g);
        int kept = dup(g->chunks[e[0].from].fd);
        gs_gpu_unlock(g);
        ck_assert_int_ge(kept, 0);
        end_kept(GS_MOVE_TO_HOST, e, 2, 2, PROC_B, 1);
        gs_gpu_lock(g);
        /* One of the two records is pending, without memory (the driver
         * had room for one: which record gets it does not matter). */
        ck_assert_uint_eq(
                (g->chunks[e[0].from].state == GS_CHUNK_PENDING) + (g->chunks[e[1].from].state == GS_CHUNK_PENDING), 1);
        ck_assert_uint_eq((g->chunks[e[0].from].fd < 0) + (g->chunks[e[1].from].fd < 0), 1);
        ck_assert_uint_eq(gs_palloc_owed(pa), 1);
        /* Still held: the usage scan's retry finds no room either. */
        gs_gpu_retry_pending(g);
        ck_assert_uint_eq(g->chunks_pending, 1);
        ck_assert_uint_eq(palloc_stats(pb).chunks_debt, 1);
        gs_gpu_unlock(g);
        ck_assert_int_eq(close(kept), 0);
        gs_gpu_lock(g);
        gs_gpu_retry_pending(g);
        ck_assert_uint_eq(g->chunks_pending, 0);
        ck_assert_uint_eq(palloc_stats(pb).chunks_debt, 0);
        ck_assert_uint_eq(gs_palloc_owed(pa), 0);
        check_books(0);
        gs_gpu_unlock(g);
}
END_TEST

/* Some moved: the rest stays where it was, its spare held by the process
 * (it had the fd) until it is gone. */
START_TEST(test_out_some)
{
        struct gs_move_ent e[GS_MOVE_MAX];

        spill_out(e, 2, 2, 1, PROC_B);
        ck_assert_uint_eq(gs_gpu_spilled(g), 1);
        ck_assert_uint_eq(gs_palloc_owed(pa), 1);
        ck_assert_uint_eq(g->moves.spill_want, 1);
        ck_assert_uint_eq(gs_pproc_slot_chunk(ppb, e[0].slot), e[0].to);
        ck_assert_uint_eq(gs_pproc_slot_chunk(ppb, e[1].slot), e[1].from);
        struct gs_spare *s = &g->moves.spares[e[1].to - NCHUNKS];
        ck_assert_uint_eq(s->holder, PROC_B);
        ck_assert_int_lt(s->fd, 0);
        ck_assert(!s->busy);
        ck_assert_uint_eq(gs_gpu_spill_held(g), 1);
        ck_assert_uint_eq(gs_gpu_spare_record_free(g), UINT32_MAX);
        ck_assert_uint_eq(g->moves.st.chunks_out, 1);
        /* Its process is gone: the spare is free again. */
        ck_assert_uint_eq(gs_gpu_spill_release_holder(g, PROC_B), 1);
        ck_assert_uint_eq(gs_gpu_spill_held(g), 0);
        ck_assert_uint_eq(gs_gpu_spare_record_free(g), e[1].to);
        check_books(0);
        gs_gpu_unlock(g);
        /* and the rest of what is wanted can move. */
        spill_out(e, 0, 1, 1, PROC_B);
        ck_assert_uint_eq(gs_palloc_owed(pa), 0);
        ck_assert_uint_eq(g->moves.spill_want, 0);
        gs_gpu_unlock(g);
}
END_TEST

/* A hostile "moved 0" from a live process: nothing exchanged, nothing
 * repaid; the spares stay charged to it, so it cannot take more host
 * memory by saying so again. */
START_TEST(test_out_none)
{
        struct gs_move_ent e[GS_MOVE_MAX];
        char err[256];

        spill_out(e, 2, 2, 0, PROC_B);
        ck_assert_uint_eq(gs_gpu_spilled(g), 0);
        ck_assert_uint_eq(gs_palloc_owed(pa), 2);
        ck_assert_uint_eq(g->moves.spill_want, 2);
        ck_assert_uint_eq(g->moves.moving_out, 0);
        ck_assert_uint_eq(g->moves.st.chunks_out, 0);
        ck_assert_uint_eq(gs_gpu_spill_held(g), 2);
        for (int i = 0; i < 2; i++)
                ck_assert_uint_eq(gs_pproc_slot_chunk(ppb, e[i].slot), e[i].from);
        uint64_t refused = g->moves.st.refused;
        gs_gpu_unlock(g);
        ck_assert_int_eq(plan_out(e, err, sizeof(err)), 0);
        ck_assert_ptr_nonnull(strstr(err, "spillMax reached"));
        gs_gpu_lock(g);
        ck_assert_uint_eq(g->moves.st.refused, refused + 1);
        gs_gpu_unlock(g);
}
END_TEST

/* The process went away with its batch in flight (proc 0): the batch is
 * undone and the spares are free, not held by anyone. */
START_TEST(test_out_gone)
{
        struct gs_move_ent e[GS_MOVE_MAX];

        spill_out(e, 2, 2, 0, 0);
        ck_assert_uint_eq(gs_gpu_spill_held(g), 0);
        ck_assert_uint_ne(gs_gpu_spare_record_free(g), UINT32_MAX);
        ck_assert_uint_eq(g->moves.spill_want, 2);
        gs_gpu_unlock(g);
        spill_out(e, 0, 2, 2, PROC_B);
        ck_assert_uint_eq(gs_palloc_owed(pa), 0);
        gs_gpu_unlock(g);
}
END_TEST

/* A count past the batch (the sessions refuse it: gs_serve_spill_done)
 * counts as the batch: no more chunks settled or counted than planned. */
START_TEST(test_out_more_than_planned)
{
        struct gs_move_ent e[GS_MOVE_MAX];

        spill_out(e, 2, 2, 1000, PROC_B);
        ck_assert_uint_eq(gs_gpu_spilled(g), 2);
        ck_assert_uint_eq(g->moves.st.chunks_out, 2);
        ck_assert_uint_eq(g->moves.spill_want, 0);
        ck_assert_uint_eq(gs_gpu_spill_held(g), 0);
        gs_gpu_unlock(g);
}
END_TEST

/* Owed 3, spillMax 2: the batch stops at the spares, the refusal is said
 * and counted; the third chunk stays owed. */
START_TEST(test_spill_max)
{
        struct gs_move_ent e[GS_MOVE_MAX];
        char err[256];

        want(3);
        ck_assert_int_eq(plan_out(e, err, sizeof(err)), 2);
        ck_assert_ptr_nonnull(strstr(err, "spillMax reached"));
        gs_gpu_lock(g);
        ck_assert_uint_eq(g->moves.st.refused, 1);
        gs_gpu_unlock(g);
        end(GS_MOVE_TO_HOST, e, 2, 2, PROC_B);
        gs_gpu_lock(g);
        check_books(0);
        ck_assert_uint_eq(gs_palloc_owed(pa), 1);
        ck_assert_uint_eq(g->moves.spill_want, 1);
        gs_gpu_unlock(g);
        ck_assert_int_eq(plan_out(e, err, sizeof(err)), 0);
        gs_gpu_lock(g);
        ck_assert_uint_eq(g->moves.st.refused, 2);
        ck_assert_uint_eq(gs_palloc_owed(pa), 1);
        check_books(0);
        gs_gpu_unlock(g);
}
END_TEST

/* Spill both, then nothing is wanted: a plan back takes lendable chunks
 * (A's free ones, owed to it again) for B's spilled slots; moved of them
 * settled; the books; the lock stays held. */
static void spill_back(struct gs_move_ent *e, uint32_t moved)
{
        char err[256];

        spill_out(e, 2, 2, 2, PROC_B);
        ck_assert_uint_eq(gs_palloc_owed(pa), 0);
        ck_assert_uint_eq(g->moves.spill_want, 0);
        int n = gs_gpu_move_plan(g, ppb, GS_MOVE_TO_DEVICE, e, GS_MOVE_MAX, NULL, PROC_B, err, sizeof(err));
        ck_assert_int_eq(n, 2);
        for (int i = 0; i < n; i++) {
                ck_assert_uint_eq(e[i].from, gs_pproc_slot_chunk(ppb, e[i].slot));
                ck_assert_uint_ge(e[i].from, NCHUNKS);
                ck_assert_uint_lt(e[i].to, NCHUNKS);
                ck_assert_int_eq(e[i].fd, g->chunks[e[i].to].fd);
                ck_assert_int_ge(e[i].fd, 0);
                ck_assert(!gs_pool_chunk_held(g->pool, e[i].to));
                ck_assert(!gs_pool_chunk_in_sys(g->pool, e[i].to));
        }
        ck_assert_uint_eq(g->moves.moving_back, 2);
        check_books(2);
        gs_gpu_unlock(g);
        end(GS_MOVE_TO_DEVICE, e, 2, moved, PROC_B);
        gs_gpu_lock(g);
        check_books(0);
        ck_assert_uint_eq(g->moves.moving_back, 0);
        ck_assert_uint_eq(g->moves.st.chunks_back, moved);
}

START_TEST(test_back_all)
{
        struct gs_move_ent e[GS_MOVE_MAX];

        spill_back(e, 2);
        ck_assert_uint_eq(gs_gpu_spilled(g), 0);
        ck_assert_uint_eq(gs_palloc_owed(pa), 2); /* lent again */
        for (int i = 0; i < 2; i++) {
                ck_assert_uint_eq(gs_pproc_slot_chunk(ppb, e[i].slot), e[i].to);
                ck_assert_uint_eq(g->chunks[e[i].to].writer, PROC_B);
        }
        /* The spares are free for the next spill. */
        ck_assert_uint_ne(gs_gpu_spare_record_free(g), UINT32_MAX);
        gs_gpu_unlock(g);
}
END_TEST

/* Nothing moved back: the spills stand; the chunks reserved (whose fds
 * the process had) go back, and nothing stays lent for them. */
START_TEST(test_back_none)
{
        struct gs_move_ent e[GS_MOVE_MAX];

        spill_back(e, 0);
        ck_assert_uint_eq(gs_gpu_spilled(g), 2);
        ck_assert_uint_eq(gs_palloc_owed(pa), 0);
        for (int i = 0; i < 2; i++)
                ck_assert_uint_eq(gs_pproc_slot_chunk(ppb, e[i].slot), e[i].from);
        gs_gpu_unlock(g);
}
END_TEST

/* The owner is deleted once repaid: a move back takes chunks of the
 * system list, borrowed by ballooning from then on (what is lent changed:
 * the main thread is told, end()). */
START_TEST(test_back_from_system)
{
        struct gs_move_ent e[GS_MOVE_MAX];
        struct gs_pool_stats ps;
        char err[256];

        spill_out(e, 2, 2, 2, PROC_B);
        gs_pproc_del(ppa);
        ppa = NULL;
        ck_assert_int_eq(gs_palloc_del(pa), 0);
        pa = NULL;
        g->moves.spill_want = 0;
        check_books(0);
        gs_pool_stats(g->pool, &ps);
        uint32_t sys = ps.chunks_free, lent = ps.chunks_borrowed, pokes0 = pokes;
        ck_assert_int_eq(gs_gpu_move_plan(g, ppb, GS_MOVE_TO_DEVICE, e, GS_MOVE_MAX, NULL, PROC_B, err, sizeof(err)),
                         2);
        check_books(2);
        gs_gpu_unlock(g);
        end(GS_MOVE_TO_DEVICE, e, 2, 2, PROC_B);
        gs_gpu_lock(g);
        check_books(0);
        gs_pool_stats(g->pool, &ps);
        ck_assert_uint_eq(ps.chunks_free, sys - 2);
        ck_assert_uint_eq(ps.chunks_borrowed, lent + 2);
        ck_assert_uint_eq(pokes, pokes0 + 1);
        ck_assert_uint_eq(gs_gpu_spilled(g), 0);
        ck_assert_uint_eq(gs_pool_owed(g->pool), 0);
        gs_gpu_unlock(g);
}
END_TEST

/* No move back while an owner wants lent memory, nor within moveBackQuiet
 * of its last request. */
START_TEST(test_back_waits)
{
        struct gs_move_ent e[GS_MOVE_MAX];
        char err[256];

        spill_out(e, 2, 2, 1, PROC_B);
        ck_assert_uint_eq(g->moves.spill_want, 1);
        ck_assert_int_eq(gs_gpu_move_plan(g, ppb, GS_MOVE_TO_DEVICE, e, GS_MOVE_MAX, NULL, PROC_B, err, sizeof(err)),
                         0);
        g->moves.spill_want = 0; /* satisfied otherwise; the quiet still runs */
        ck_assert_int_eq(gs_gpu_move_plan(g, ppb, GS_MOVE_TO_DEVICE, e, GS_MOVE_MAX, NULL, PROC_B, err, sizeof(err)),
                         0);
        ck_assert_uint_eq(gs_gpu_spilled(g), 1);
        ck_assert_uint_eq(g->moves.moving_back, 0);
        check_books(0);
        gs_gpu_unlock(g);
}
END_TEST

/* An agent that opens the GPU (a restart: spilled data adopted) counts
 * moveBackQuiet from then, as if an owner had just asked: it does not
 * know when one last did. */
START_TEST(test_back_quiet_from_open)
{
        ck_assert_int_ge(g->moves.last_want_ms, open_ms);
        ck_assert_int_le(g->moves.last_want_ms, gs_mono_ms());
}
END_TEST

/* Host memory made ahead for what is owed (the scrubber's steps), and
 * dropped once nothing is owed. */
START_TEST(test_prepare_ahead)
{
        struct gs_spill_job j;
        struct gs_move_ent e[GS_MOVE_MAX];

        gs_gpu_lock(g);
        for (uint32_t k = 0; k < NSPARE; k++) {
                ck_assert(gs_gpu_spill_prepare_pick(g, &j));
                ck_assert(!j.drop);
                gs_gpu_spill_prepare_work(g, &j);
                ck_assert(gs_gpu_spill_prepare_end(g, &j));
        }
        ck_assert(!gs_gpu_spill_prepare_pick(g, &j)); /* as many ready as owed */
        ck_assert_uint_eq(gs_gpu_spill_ready(g), NSPARE);
        gs_gpu_unlock(g);
        /* The plan takes the ready ones; spilled, the agent keeps none. */
        spill_out(e, 1, 1, 1, PROC_B);
        ck_assert_uint_eq(gs_gpu_spill_ready(g), 1);
        ck_assert(!gs_gpu_spill_prepare_pick(g, &j)); /* owed 1, 1 ready */
        /* Nothing owed (the borrower is gone): the rest is dropped. */
        gs_pproc_del(ppb);
        ppb = NULL;
        ck_assert_uint_eq(gs_pool_owed(g->pool), 0);
        ck_assert(gs_gpu_spill_prepare_pick(g, &j));
        ck_assert(j.drop);
        gs_gpu_spill_prepare_work(g, &j);
        ck_assert(gs_gpu_spill_prepare_end(g, &j));
        ck_assert_uint_eq(gs_gpu_spill_ready(g), 0);
        ck_assert(!gs_gpu_spill_prepare_pick(g, &j));
        check_books(0);
        gs_gpu_unlock(g);
}
END_TEST

/* Host memory made ahead and prepared in B's mover (GS_OP_SPILL_PREP):
 * as many as are made (spillMax: 2), never for a reclaim in progress;
 * B's move takes its prepared spares first, without an fd to send; what
 * is left is B's alone; not needed (B borrows nothing), it is held by B
 * and the agent keeps none of it; B gone, nothing is left. */
START_TEST(test_prepared_in_process)
{
        struct gs_move_ent e[GS_MOVE_MAX];
        struct gs_pproc *ppc;
        struct gs_spill_job j;
        uint32_t ids[GS_MOVE_MAX];
        int fds[GS_MOVE_MAX];
        bool release;

        gs_gpu_lock(g);
        ck_assert_uint_eq(gs_gpu_spill_prep_plan(g, ppb, PROC_B, ids, fds, GS_MOVE_MAX, &release), 0);
        while (gs_gpu_spill_prepare_pick(g, &j)) {
                gs_gpu_spill_prepare_work(g, &j);
                ck_assert(gs_gpu_spill_prepare_end(g, &j));
        }
        ck_assert(gs_gpu_spill_prep_due(g, ppb, PROC_B));
        ck_assert_uint_eq(gs_gpu_spill_prep_plan(g, ppb, PROC_B, ids, fds, GS_MOVE_MAX, &release), NSPARE);
        ck_assert(!release);
        for (uint32_t i = 0; i < NSPARE; i++) {
                ck_assert_int_ge(fds[i], 0);
                ck_assert_int_ne(fds[i], g->moves.spares[ids[i]].fd); /* a copy to send */
                close(fds[i]);
        }
        ck_assert_uint_eq(gs_gpu_spill_prepared(g), NSPARE);
        ck_assert(!gs_gpu_spill_prep_due(g, ppb, PROC_B));
        ck_assert(!gs_gpu_spill_prepare_pick(g, &j)); /* prepared counts as made */
        ck_assert_uint_eq(gs_gpu_spare_record_free(g), UINT32_MAX);
        gs_gpu_unlock(g);
        spill_out(e, 1, 1, 1, PROC_B);
        ck_assert(e[0].prep);
        ck_assert_uint_eq(gs_gpu_spill_prepared(g), 1);
        /* B borrows nothing any more (a record of B's that holds nothing
         * stands for it): the prepared one is held by B, no memory kept. */
        ck_assert_int_eq(gs_pproc_new(pb, 64, &ppc), 0);
        ck_assert(gs_gpu_spill_prep_due(g, ppc, PROC_B));
        ck_assert_uint_eq(gs_gpu_spill_prep_plan(g, ppc, PROC_B, ids, fds, GS_MOVE_MAX, &release), 0);
        ck_assert(release);
        ck_assert_uint_eq(gs_gpu_spill_prepared(g), 0);
        ck_assert_uint_eq(gs_gpu_spill_held(g), 1);
        ck_assert_uint_eq(gs_gpu_spill_ready(g), 0);
        ck_assert(!gs_gpu_spill_prep_due(g, ppc, PROC_B));
        gs_pproc_del(ppc);
        /* B gone: nothing held. */
        ck_assert_uint_eq(gs_gpu_spill_release_holder(g, PROC_B), 1);
        ck_assert_uint_eq(gs_gpu_spill_held(g), 0);
        check_books(0);
        gs_gpu_unlock(g);
}
END_TEST

/* Prepared in a process that exits: ready again for anyone. */
START_TEST(test_prepared_gone)
{
        struct gs_spill_job j;
        uint32_t ids[GS_MOVE_MAX];
        int fds[GS_MOVE_MAX];
        bool release;

        gs_gpu_lock(g);
        while (gs_gpu_spill_prepare_pick(g, &j)) {
                gs_gpu_spill_prepare_work(g, &j);
                ck_assert(gs_gpu_spill_prepare_end(g, &j));
        }
        ck_assert_uint_eq(gs_gpu_spill_prep_plan(g, ppb, PROC_B, ids, fds, 1, &release), 1);
        close(fds[0]);
        ck_assert_uint_eq(gs_gpu_spill_release_holder(g, PROC_B), 0);
        ck_assert_uint_eq(gs_gpu_spill_prepared(g), 0);
        ck_assert_uint_eq(gs_gpu_spill_ready(g), NSPARE);
        ck_assert_int_ge(g->moves.spares[ids[0]].fd, 0);
        check_books(0);
        gs_gpu_unlock(g);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("movespill");
        struct {
                const char *name;
                void (*setup)(void);
                const TTest *t[12];
        } cases[] = {
                { "owed2",
                  setup_owed2,
                  { test_nothing_wanted, test_out_all, test_out_some, test_out_none, test_out_gone,
                    test_out_more_than_planned, test_back_all, test_back_none, test_prepare_ahead,
                    test_back_from_system, test_prepared_in_process } },
                { "kept", setup_owed2, { test_out_kept_fd } },
                { "owed2b", setup_owed2, { test_prepared_gone } },
                { "owed3", setup_owed3, { test_spill_max } },
                { "quiet", setup_quiet, { test_back_waits, test_back_quiet_from_open } },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                TCase *tc = tcase_create(cases[i].name);
                tcase_add_checked_fixture(tc, cases[i].setup, teardown);
                tcase_set_timeout(tc, 60);
                for (size_t k = 0; k < 12 && cases[i].t[k]; k++)
                        tcase_add_test(tc, cases[i].t[k]);
                suite_add_tcase(s, tc);
        }
        return gs_check_run(s);
}
