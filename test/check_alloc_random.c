/* check_alloc_random.c — the allocator against a simple reference model,
 * over a million random operations: mallocs across the slab, buddy and
 * coalesced ranges, frees (and bad frees), releases, process exits.
 *
 * After every step: no two live blocks of a process overlap, alignment,
 * every block lies in chunks the process holds, the counters equal the
 * model's, no allocation over quota + balloon cap, no process or allocation
 * over its live-block cap (and a request at a cap refused with -ENOMEM).  The full validator
 * runs every VALIDATE_EVERY steps (and inside the debug library every
 * GS_ALLOC_VALIDATE_EVERY mutations).  At the end every chunk is back on
 * the system list.
 *
 *   GS_RANDOM_SEED=n   seed (default fixed; printed on failure); shard k
 *                      runs seed + k
 *   GS_RANDOM_OPS=n    operations, all shards together (default 1e6, 300k
 *                      under ASan) */
#include <check.h>

#include "gs_check.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gs_pool.h"

#define CHUNK (4 * GS_MiB)
#define NCHUNKS 48
#define NALLOCS 3
#define NPROCS 3 /* per allocation */
#define NSLOTS 40
#define MAXLIVE 32
#define PROC_BLOCK_CAP 30  /* gs_pool_set_block_caps: below MAXLIVE */
#define ALLOC_BLOCK_CAP 72 /* and below NPROCS * PROC_BLOCK_CAP */
#define VALIDATE_EVERY 1000

#ifdef __SANITIZE_ADDRESS__
#define DEFAULT_OPS 300000
#else
#define DEFAULT_OPS 1000000
#endif

struct mblk {
        uint64_t off, size;
};

struct mproc {
        struct gs_pproc *p;
        struct mblk live[MAXLIVE];
        int nlive;
        uint64_t held; /* bit s: slot s holds a chunk */
        uint64_t req, inblocks;
};

static const uint32_t quota[NALLOCS] = { 10, 12, 8 };
static const uint32_t cap[NALLOCS] = { 6, 0, 4 };

static struct gs_pool *pool;
static struct gs_palloc *al[NALLOCS];
static struct mproc mp[NALLOCS][NPROCS];
static uint64_t seed, rng;
static long step;
/* what happened, printed at the end so a run that exercises nothing shows */
static long n_malloc, n_nomem, n_capped, n_coalesced, n_slab_sized, n_free, n_release, n_exit;

#define CHECK(cond, ...)                                                                           \
        do {                                                                                       \
                if (!(cond)) {                                                                     \
                        char m_[512];                                                              \
                        snprintf(m_, sizeof(m_), __VA_ARGS__);                                     \
                        ck_abort_msg("seed %" PRIu64 " step %ld: %s (%s)", seed, step, m_, #cond); \
                }                                                                                  \
        } while (0)

static uint64_t rnd(void)
{
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        return rng * UINT64_C(2685821657736338717);
}

static uint64_t rnd_range(uint64_t lo, uint64_t hi)
{
        return lo + rnd() % (hi - lo + 1);
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
        const char *e = getenv(name);
        return e && *e ? strtoull(e, NULL, 0) : dflt;
}

static uint64_t pick_size(void)
{
        static const uint64_t fav[] = { 256, 1000, 2049, 4096, 8192, 48 * 1024, 65536 };
        unsigned r = (unsigned)(rnd() % 100);

        if (r < 30)
                return fav[rnd() % GS_ARRAY_SIZE(fav)];
        if (r < 50)
                return rnd_range(1, GS_SLAB_MAX);
        if (r < 93) { /* log-uniform over the buddy range */
                unsigned sh = (unsigned)rnd_range(16, 21);
                return rnd_range((UINT64_C(1) << sh) + 1, UINT64_C(2) << sh);
        }
        return rnd_range(CHUNK + 1, 3 * CHUNK);
}

static int slot_busy(const struct mproc *m, uint64_t slot)
{
        for (int i = 0; i < m->nlive; i++)
                if (m->live[i].off / CHUNK <= slot && slot <= (m->live[i].off + m->live[i].size - 1) / CHUNK)
                        return 1;
        return 0;
}

static void check_counters(void)
{
        struct gs_pool_stats ps;
        uint32_t borrowed = 0;

        gs_pool_stats(pool, &ps);
        for (int a = 0; a < NALLOCS; a++) {
                struct gs_palloc_stats as;
                uint64_t req = 0, inb = 0;
                uint32_t held = 0, nprocs = 0;

                if (!al[a])
                        continue;
                gs_palloc_stats(al[a], &as);
                for (int i = 0; i < NPROCS; i++) {
                        const struct mproc *m = &mp[a][i];
                        struct gs_pproc_stats st;
                        if (!m->p)
                                continue;
                        nprocs++;
                        gs_pproc_stats(m->p, &st);
                        CHECK(st.nblocks == (uint64_t)m->nlive, "nblocks %" PRIu64 " model %d", st.nblocks, m->nlive);
                        CHECK(st.bytes_requested == m->req && st.bytes_in_blocks == m->inblocks,
                              "bytes %" PRIu64 "/%" PRIu64 " model %" PRIu64 "/%" PRIu64, st.bytes_requested,
                              st.bytes_in_blocks, m->req, m->inblocks);
                        CHECK(st.chunks_held == (uint32_t)__builtin_popcountll(m->held), "held %u model %d",
                              st.chunks_held, __builtin_popcountll(m->held));
                        held += st.chunks_held;
                        req += m->req;
                        inb += m->inblocks;
                }
                CHECK(as.nprocs == nprocs && as.chunks_held == held, "alloc %d: procs %u held %u", a, as.nprocs,
                      as.chunks_held);
                CHECK(as.bytes_requested == req && as.bytes_in_blocks == inb, "alloc %d bytes", a);
                CHECK(as.chunks_borrowed <= cap[a], "alloc %d borrowed %u over cap", a, as.chunks_borrowed);
                CHECK(as.chunks_held <= quota[a] + cap[a], "alloc %d holds %u", a, as.chunks_held);
                CHECK(as.chunks_held + as.chunks_free == quota[a] + as.chunks_borrowed, "alloc %d chunk sum", a);
                borrowed += as.chunks_borrowed;
        }
        CHECK(ps.chunks_borrowed == borrowed && ps.chunks_free + ps.chunks_reserved + borrowed == ps.nchunks,
              "pool: free %u reserved %u borrowed %u", ps.chunks_free, ps.chunks_reserved, ps.chunks_borrowed);
}

static void do_release(struct mproc *m, uint32_t first, uint32_t count)
{
        int expect = 0;

        for (uint64_t s = first; s < (uint64_t)first + count; s++) {
                if (s >= NSLOTS || !(m->held & (UINT64_C(1) << s))) {
                        expect = -ENOENT;
                        break;
                }
                if (slot_busy(m, s)) {
                        expect = -EBUSY;
                        break;
                }
        }
        int r = gs_pproc_release(m->p, first, count);
        CHECK(r == expect, "release %u+%u: %d, model %d", first, count, r, expect);
        n_release += r == 0;
        if (r == 0)
                for (uint64_t s = first; s < (uint64_t)first + count; s++)
                        m->held &= ~(UINT64_C(1) << s);
}

static void do_malloc(int a, struct mproc *m)
{
        uint64_t size = pick_size(), off = UINT64_MAX;
        uint32_t maxg = rnd() % 20 ? 8 : 1, ng = 0;
        struct gs_grant g[8];
        struct gs_palloc_stats as;
        struct gs_pool_stats ps;

        gs_palloc_stats(al[a], &as);
        gs_pool_stats(pool, &ps);
        uint32_t can_borrow = as.balloon_cap_chunks - as.chunks_borrowed;
        uint32_t obtainable = as.chunks_free + (can_borrow < ps.chunks_free ? can_borrow : ps.chunks_free);
        int alloc_live = 0;
        for (int i = 0; i < NPROCS; i++)
                alloc_live += mp[a][i].nlive;
        int capped = m->nlive >= PROC_BLOCK_CAP || alloc_live >= ALLOC_BLOCK_CAP;
        int r = gs_pproc_malloc(m->p, size, &off, g, maxg, &ng);
        uint64_t k = size > CHUNK ? (size + CHUNK - 1) / CHUNK : 1;
        CHECK(!capped || r == -ENOMEM, "malloc at the block cap (%d live, %d in the allocation): %d", m->nlive,
              alloc_live, r);
        n_capped += capped;
        if (r < 0) {
                n_nomem++;
                CHECK(r == -ENOMEM || r == -ENOSPC || r == -E2BIG, "malloc %" PRIu64 ": %d", size, r);
                if (r == -ENOMEM && !capped)
                        CHECK(obtainable < k, "ENOMEM with %u obtainable for %" PRIu64, obtainable, k);
                if (r == -E2BIG)
                        CHECK(k > maxg, "E2BIG for %" PRIu64 " chunks, max %u", k, maxg);
                if (r == -ENOSPC)
                        CHECK(__builtin_popcountll(m->held) + k > NSLOTS || size > CHUNK, "ENOSPC with %d slots held",
                              __builtin_popcountll(m->held));
                return;
        }
        n_malloc++;
        n_coalesced += size > CHUNK;
        n_slab_sized += size <= GS_SLAB_MAX;
        for (uint32_t i = 0; i < ng; i++) {
                CHECK(g[i].slot < NSLOTS && !(m->held & (UINT64_C(1) << g[i].slot)), "grant of slot %u", g[i].slot);
                CHECK(g[i].chunk < NCHUNKS, "grant of chunk %u", g[i].chunk);
                m->held |= UINT64_C(1) << g[i].slot;
        }
        /* exact everywhere: a coalesced block's last chunk holds only its tail */
        uint64_t bs = gs_align_up(size, GS_MIN_ALIGN);
        CHECK(off % GS_MIN_ALIGN == 0, "offset %#" PRIx64 " unaligned", off);
        /* a coalesced block takes k new chunks, or reuses k cached ones */
        if (size > CHUNK)
                CHECK((ng == k && off == (uint64_t)g[0].slot * CHUNK) || (ng == 0 && off % CHUNK == 0),
                      "coalesced: %u grants at %#" PRIx64, ng, off);
        for (uint64_t s = off / CHUNK; s <= (off + bs - 1) / CHUNK; s++)
                CHECK(s < NSLOTS && (m->held & (UINT64_C(1) << s)), "block %#" PRIx64 " in unheld slot %" PRIu64, off,
                      s);
        for (int i = 0; i < m->nlive; i++)
                CHECK(off + bs <= m->live[i].off || m->live[i].off + m->live[i].size <= off,
                      "block %#" PRIx64 "+%#" PRIx64 " overlaps %#" PRIx64 "+%#" PRIx64, off, bs, m->live[i].off,
                      m->live[i].size);
        m->live[m->nlive].off = off;
        m->live[m->nlive].size = bs;
        m->nlive++;
        m->req += size;
        m->inblocks += bs;
        uint64_t base = 0, rsz = 0;
        CHECK(gs_pproc_range(m->p, off + (size - 1), &base, &rsz) == 0 && base == off && rsz == size,
              "range of %#" PRIx64, off);
}

static uint64_t live_req(const struct mproc *m, int i)
{
        uint64_t base = 0, size = 0;
        int r = gs_pproc_range(m->p, m->live[i].off, &base, &size);
        CHECK(r == 0 && base == m->live[i].off, "range of live %#" PRIx64 ": %d", m->live[i].off, r);
        return size;
}

static void do_free(struct mproc *m)
{
        int i = (int)(rnd() % (uint64_t)m->nlive);
        struct gs_release rel = { 0, 0 };
        uint64_t req = live_req(m, i);
        int r = gs_pproc_free(m->p, m->live[i].off, &rel);

        CHECK(r == 0, "free %#" PRIx64 ": %d", m->live[i].off, r);
        n_free++;
        m->req -= req;
        m->inblocks -= m->live[i].size;
        m->live[i] = m->live[--m->nlive];
        if (rel.count) {
                for (uint64_t s = rel.first_slot; s < (uint64_t)rel.first_slot + rel.count; s++)
                        CHECK(s < NSLOTS && (m->held & (UINT64_C(1) << s)) && !slot_busy(m, s),
                              "release hint for slot %" PRIu64, s);
                if (rnd() % 5)
                        do_release(m, rel.first_slot, rel.count);
        }
}

static void do_bad_free(struct mproc *m)
{
        uint64_t off;
        struct gs_pproc_stats a, b;

        if (m->nlive && rnd() % 2) {
                int i = (int)(rnd() % (uint64_t)m->nlive);
                off = m->live[i].off + 256 * rnd_range(1, m->live[i].size / 256 > 1 ? m->live[i].size / 256 - 1 : 1);
                if (off >= m->live[i].off + m->live[i].size)
                        off = m->live[i].off + 1;
        } else {
                off = rnd() % ((uint64_t)NSLOTS * CHUNK + CHUNK);
                for (int i = 0; i < m->nlive; i++)
                        if (m->live[i].off == off)
                                return;
        }
        gs_pproc_stats(m->p, &a);
        int r = gs_pproc_free(m->p, off, NULL);
        CHECK(r == -ENOENT, "bad free %#" PRIx64 ": %d", off, r);
        gs_pproc_stats(m->p, &b);
        CHECK(memcmp(&a, &b, sizeof(a)) == 0, "bad free changed the stats");
}

static void proc_new(int a, struct mproc *m)
{
        memset(m, 0, sizeof(*m));
        CHECK(gs_pproc_new(al[a], NSLOTS, &m->p) == 0, "pproc_new");
}

static int returned;
static int on_return(void *ctx, uint32_t chunk)
{
        (void)ctx;
        CHECK(chunk < NCHUNKS, "returned chunk %u", chunk);
        returned++;
        return 0;
}

/* The operations are shared by NSHARDS cases of their own (shard0...),
 * each with its own seed (the base seed + its index), so that make test
 * runs them in parallel (tests.list: check_alloc_random:shardN). */
#define NSHARDS 4

START_TEST(test_random_model)
{
        char why[200];
        long nops = (long)env_u64("GS_RANDOM_OPS", DEFAULT_OPS) / NSHARDS;

        seed = env_u64("GS_RANDOM_SEED", UINT64_C(0x5eed2026)) + (uint64_t)_i;
        rng = seed ? seed : 1;
        pool = gs_pool_new(NCHUNKS, CHUNK);
        ck_assert_ptr_nonnull(pool);
        gs_pool_set_return_fn(pool, on_return, NULL);
        CHECK(gs_pool_set_block_caps(pool, PROC_BLOCK_CAP, ALLOC_BLOCK_CAP) == 0, "block caps");
        for (int a = 0; a < NALLOCS; a++) {
                CHECK(gs_palloc_new(pool, quota[a], cap[a], &al[a]) == 0, "palloc_new");
                for (int i = 0; i < NPROCS; i++)
                        proc_new(a, &mp[a][i]);
        }
        for (step = 0; step < nops; step++) {
                int a = (int)(rnd() % NALLOCS);
                struct mproc *m = &mp[a][rnd() % NPROCS];
                unsigned op = (unsigned)(rnd() % 1000);

                if (op < 2) { /* the process exits and a new one starts */
                        gs_pproc_del(m->p);
                        proc_new(a, m);
                        n_exit++;
                } else if (op < 20) {
                        uint32_t first = (uint32_t)rnd_range(0, NSLOTS + 1);
                        do_release(m, first, (uint32_t)rnd_range(1, 3));
                } else if (op < 40) {
                        do_bad_free(m);
                } else if (op < 520 && m->nlive < MAXLIVE) {
                        do_malloc(a, m);
                } else if (m->nlive) {
                        do_free(m);
                }
                check_counters();
                if (step % VALIDATE_EVERY == 0)
                        CHECK(gs_pool_validate(pool, why, sizeof(why)) == 0, "validate: %s", why);
        }
        CHECK(gs_pool_validate(pool, why, sizeof(why)) == 0, "validate: %s", why);
        for (int a = 0; a < NALLOCS; a++) {
                for (int i = 0; i < NPROCS; i++) {
                        gs_pproc_del(mp[a][i].p);
                        mp[a][i].p = NULL;
                        mp[a][i].nlive = 0;
                        mp[a][i].req = mp[a][i].inblocks = 0;
                        mp[a][i].held = 0;
                }
                check_counters();
                CHECK(gs_palloc_del(al[a]) == 0, "palloc_del");
                al[a] = NULL;
        }
        struct gs_pool_stats ps;
        gs_pool_stats(pool, &ps);
        CHECK(ps.chunks_free == NCHUNKS && ps.nchunks == NCHUNKS && ps.nallocs == 0 && ps.chunks_reserved == 0,
              "after the end: %u of %u chunks free", ps.chunks_free, ps.nchunks);
        CHECK(gs_pool_validate(pool, why, sizeof(why)) == 0, "validate: %s", why);
        CHECK(returned > 0, "no chunk went through the return callback");
        gs_pool_free(pool);
        printf("check_alloc_random: %ld operations, seed %" PRIu64 ": %ld mallocs (%ld slab-sized, %ld coalesced), "
               "%ld refused (%ld at a block cap), %ld frees, %ld releases, %ld exits, %d chunks recycled\n",
               nops, seed, n_malloc, n_slab_sized, n_coalesced, n_nomem, n_capped, n_free, n_release, n_exit, returned);
        CHECK(n_malloc > nops / 4 && n_coalesced > 0 && n_release > 0 && n_exit > 0 && n_capped > 0,
              "too little exercised");
}
END_TEST

/* A limit that only catches a hang: 10^6 operations took 121 s on a
 * loaded 2-core machine (plain build). */
static void add_shard(Suite *s, TCase *tc, int i)
{
        tcase_set_timeout(tc, 900);
        tcase_add_loop_test(tc, test_random_model, i, i + 1);
        suite_add_tcase(s, tc);
}

int main(void)
{
        Suite *s = suite_create("alloc_random");

        /* One literal name each: test/check-list.sh reads them here. */
        add_shard(s, tcase_create("shard0"), 0);
        add_shard(s, tcase_create("shard1"), 1);
        add_shard(s, tcase_create("shard2"), 2);
        add_shard(s, tcase_create("shard3"), 3);
        return gs_check_run(s);
}
