/* alloc_ops — single-thread alloc+free pairs per second through gs_pool.h,
 * for slab-sized (256 B-4 KiB), buddy-sized (64 KiB-64 MiB) and coalesced
 * (512 MiB-4 GiB) requests, with 256 MiB chunks and a 64 GiB pool.
 *
 * Each pair frees a random block of a working set and allocates a new one
 * in its place (so the trees stay fragmented, as in a real process), and
 * follows the release hints as the agent would.  Prints one RESULT line. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gs_pool.h"

#define CHUNK (256 * GS_MiB)
#define NCHUNKS 256

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t rnd(void)
{
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        return rng * UINT64_C(2685821657736338717);
}

static double now(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Log-uniform in [lo, hi]. */
static uint64_t pick(uint64_t lo, uint64_t hi)
{
        unsigned a = 63u - (unsigned)__builtin_clzll(lo), b = 63u - (unsigned)__builtin_clzll(hi);
        unsigned sh = a + (unsigned)(rnd() % (b - a + 1));
        uint64_t x = (UINT64_C(1) << sh) + rnd() % (UINT64_C(1) << sh);
        return x < lo ? lo : x > hi ? hi : x;
}

static void die(const char *what, int r)
{
        fprintf(stderr, "alloc_ops: %s: %d\n", what, r);
        exit(1);
}

static void do_free(struct gs_pproc *p, uint64_t off)
{
        struct gs_release rel;
        int r = gs_pproc_free(p, off, &rel);
        if (r < 0)
                die("free", r);
        if (rel.count && (r = gs_pproc_release(p, rel.first_slot, rel.count)) < 0)
                die("release", r);
}

static double run(uint64_t lo, uint64_t hi, unsigned working, long pairs)
{
        struct gs_pool *pool = gs_pool_new(NCHUNKS, CHUNK);
        struct gs_palloc *a;
        struct gs_pproc *p;
        struct gs_grant g[NCHUNKS];
        uint32_t ng;
        uint64_t *live = calloc(working, sizeof(*live));
        int r;

        if (!pool || !live)
                die("setup", -ENOMEM);
        if ((r = gs_palloc_new(pool, NCHUNKS, 0, &a)) < 0 || (r = gs_pproc_new(a, 4 * NCHUNKS, &p)) < 0)
                die("setup", r);
        for (unsigned i = 0; i < working; i++)
                if ((r = gs_pproc_malloc(p, pick(lo, hi), &live[i], g, NCHUNKS, &ng)) < 0)
                        die("fill", r);
        double t0 = now();
        for (long n = 0; n < pairs; n++) {
                unsigned i = (unsigned)(rnd() % working);
                do_free(p, live[i]);
                if ((r = gs_pproc_malloc(p, pick(lo, hi), &live[i], g, NCHUNKS, &ng)) < 0)
                        die("malloc", r);
        }
        double dt = now() - t0;
        for (unsigned i = 0; i < working; i++)
                do_free(p, live[i]);
        gs_pproc_del(p);
        if (gs_palloc_del(a) < 0)
                die("palloc_del", -EBUSY);
        gs_pool_free(pool);
        free(live);
        return (double)pairs / dt;
}

int main(void)
{
        double slab = run(256, 4 * GS_KiB, 4096, 5000000);
        printf("slab      256 B-4 KiB, 4096 live:   %.2f M pairs/s\n", slab / 1e6);
        double buddy = run(64 * GS_KiB + 1, 64 * GS_MiB, 256, 3000000);
        printf("buddy     64 KiB-64 MiB, 256 live:  %.2f M pairs/s\n", buddy / 1e6);
        double coal = run(512 * GS_MiB, 4 * GS_GiB, 8, 300000);
        printf("coalesced 512 MiB-4 GiB, 8 live:    %.2f M pairs/s\n", coal / 1e6);
        printf("RESULT slab_pairs_per_s=%.0f buddy_pairs_per_s=%.0f coalesced_pairs_per_s=%.0f\n", slab, buddy, coal);
        return 0;
}
