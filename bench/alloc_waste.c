/* alloc_waste — replays request traces shaped like real frameworks through
 * gs_alloc.h and reports, at the peak of bytes requested:
 *
 *   waste     = (bytes in blocks handed out - bytes requested) / bytes in blocks
 *   occupancy = bytes requested / bytes in the chunks the process holds
 *
 * Traces (256 MiB chunks, 64 GiB pool, fixed seed):
 *   pytorch  the caching allocator's cudaMalloc calls: 2 MiB small-pool
 *            segments, 20 MiB segments for 1-10 MiB tensors, larger tensors
 *            rounded up to 2 MiB (up to 2 GiB), with segment frees
 *            (emptyCache / OOM retry) in between.
 *   tf       BFC: regions of 1, 2 and 4 GiB (its doubling growth), with a
 *            stream of 8 B-1 MiB requests and frees alongside.
 *   2049     100000 live 2049 B requests (slab: 2304 B slots).
 * Prints one RESULT line. */
#include <stdio.h>
#include <stdlib.h>

#include "gs_alloc.h"

#define CHUNK (256 * GS_MiB)
#define NCHUNKS 256
#define MAXLIVE 200000

static uint64_t rng = 0x2545F4914F6CDD1Du;
static uint64_t rnd(void)
{
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        return rng * UINT64_C(2685821657736338717);
}

static uint64_t pick(uint64_t lo, uint64_t hi)
{
        unsigned a = 63u - (unsigned)__builtin_clzll(lo), b = 63u - (unsigned)__builtin_clzll(hi);
        unsigned sh = a + (unsigned)(rnd() % (b - a + 1));
        uint64_t x = (UINT64_C(1) << sh) + rnd() % (UINT64_C(1) << sh);
        return x < lo ? lo : x > hi ? hi : x;
}

struct trace {
        struct gs_pool *pool;
        struct gs_palloc *a;
        struct gs_pproc *p;
        uint64_t live[MAXLIVE];
        unsigned nlive;
        /* at the peak of bytes requested */
        double peak_req, waste, occupancy;
        uint64_t unaligned4k; /* blocks not 4 KiB aligned: only slabs do that */
};

static void die(const char *what, int r)
{
        fprintf(stderr, "alloc_waste: %s: %d\n", what, r);
        exit(1);
}

static void start(struct trace *t)
{
        int r;
        t->pool = gs_pool_new(NCHUNKS, CHUNK);
        if (!t->pool)
                die("pool", -ENOMEM);
        if ((r = gs_palloc_new(t->pool, NCHUNKS, 0, &t->a)) < 0 || (r = gs_pproc_new(t->a, 2 * NCHUNKS, &t->p)) < 0)
                die("setup", r);
        t->nlive = 0;
        t->peak_req = t->waste = t->occupancy = 0;
        t->unaligned4k = 0;
}

static void sample(struct trace *t)
{
        struct gs_pproc_stats st;
        gs_pproc_stats(t->p, &st);
        if ((double)st.bytes_requested <= t->peak_req)
                return;
        t->peak_req = (double)st.bytes_requested;
        t->waste = 100.0 * (double)(st.bytes_in_blocks - st.bytes_requested) / (double)st.bytes_in_blocks;
        t->occupancy = 100.0 * (double)st.bytes_requested / ((double)st.chunks_held * CHUNK);
}

static int t_malloc(struct trace *t, uint64_t size)
{
        struct gs_grant g[NCHUNKS];
        uint32_t ng;
        uint64_t off;
        int r = gs_pproc_malloc(t->p, size, &off, g, NCHUNKS, &ng);
        if (r == -ENOMEM || r == -ENOSPC)
                return r;
        if (r < 0)
                die("malloc", r);
        if (t->nlive == MAXLIVE)
                die("trace too long", -E2BIG);
        t->live[t->nlive++] = off;
        t->unaligned4k += off % 4096 != 0;
        sample(t);
        return 0;
}

static void t_free(struct trace *t, unsigned i)
{
        struct gs_release rel;
        int r = gs_pproc_free(t->p, t->live[i], &rel);
        if (r < 0)
                die("free", r);
        if (rel.count && (r = gs_pproc_release(t->p, rel.first_slot, rel.count)) < 0)
                die("release", r);
        t->live[i] = t->live[--t->nlive];
}

static void finish(struct trace *t)
{
        while (t->nlive)
                t_free(t, t->nlive - 1);
        gs_pproc_del(t->p);
        if (gs_palloc_del(t->a) < 0)
                die("palloc_del", -EBUSY);
        gs_pool_free(t->pool);
}

static uint64_t pytorch_segment(void)
{
        uint64_t tensor = rnd() % 2 ? pick(512, GS_MiB) : pick(GS_MiB, 2 * GS_GiB);
        if (tensor <= GS_MiB)
                return 2 * GS_MiB;  /* kSmallBuffer */
        if (tensor <= 10 * GS_MiB)
                return 20 * GS_MiB; /* kLargeBuffer */
        return gs_align_up(tensor, 2 * GS_MiB); /* kRoundLarge */
}

static void trace_pytorch(struct trace *t)
{
        start(t);
        for (int n = 0; n < 20000; n++) {
                if (t->nlive && rnd() % 100 < 35) {
                        t_free(t, (unsigned)(rnd() % t->nlive));
                        continue;
                }
                /* on OOM the caching allocator frees cached segments and retries */
                while (t_malloc(t, pytorch_segment()) < 0 && t->nlive)
                        t_free(t, (unsigned)(rnd() % t->nlive));
        }
        finish(t);
}

static void trace_tf(struct trace *t)
{
        static const uint64_t region[] = { GS_GiB, 2 * GS_GiB, 4 * GS_GiB };
        unsigned nregions = 0;
        start(t);
        for (int n = 0; n < 60000; n++) {
                if (n % 20000 == 0) {
                        /* regions stay for the whole run: keep them at the front */
                        if (t_malloc(t, region[n / 20000]) < 0)
                                die("tf region", -ENOMEM);
                        uint64_t x = t->live[nregions];
                        t->live[nregions++] = t->live[t->nlive - 1];
                        t->live[t->nlive - 1] = x;
                }
                if (t->nlive > nregions && (t->nlive > 8000 || rnd() % 100 < 45)) {
                        t_free(t, nregions + (unsigned)(rnd() % (t->nlive - nregions)));
                        continue;
                }
                if (t_malloc(t, pick(8, GS_MiB)) < 0)
                        die("tf small", -ENOMEM);
        }
        finish(t);
}

static void trace_2049(struct trace *t)
{
        start(t);
        for (int n = 0; n < 100000; n++)
                if (t_malloc(t, 2049) < 0)
                        die("2049", -ENOMEM);
        finish(t);
}

static struct trace tr;

int main(void)
{
        trace_pytorch(&tr);
        double wp = tr.waste, op = tr.occupancy, pp = tr.peak_req;
        trace_tf(&tr);
        double wt = tr.waste, ot = tr.occupancy, pt = tr.peak_req;
        trace_2049(&tr);
        double w2 = tr.waste, slab2 = 100.0 * (double)tr.unaligned4k / 100000;
        printf("pytorch: peak %.2f GiB requested, waste %.3f %%, occupancy %.2f %%\n", pp / GS_GiB, wp, op);
        printf("tf:      peak %.2f GiB requested, waste %.3f %%, occupancy %.2f %%\n", pt / GS_GiB, wt, ot);
        printf("2049 B:  waste %.2f %% (2304 B slots: %.2f %%; buddy alone: 50 %%), %.1f %% of blocks in slabs\n",
               w2, 100.0 * (2304 - 2049) / 2304, slab2);
        printf("RESULT waste_pytorch_pct=%.3f waste_tf_pct=%.3f waste_2049_pct=%.2f occupancy_pytorch_pct=%.2f "
               "occupancy_tf_pct=%.2f\n",
               wp, wt, w2, op, ot);
        return 0;
}
