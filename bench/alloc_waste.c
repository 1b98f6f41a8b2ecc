/* alloc_waste — replays the driver-level allocation streams of real
 * frameworks (what the hook forwards to the agent) through gs_pool.h and
 * reports, at the peak of bytes requested:
 *
 *   waste     = (bytes in blocks handed out - bytes requested) / bytes in blocks
 *   occupancy = bytes requested / bytes in the chunks the process holds
 *
 * Traces (256 MiB chunks, 64 GiB quota, fixed seed):
 *   pytorch  tensors through a model of the CUDA caching allocator: the
 *            driver sees 2 MiB / 20 MiB / 2 MiB-rounded segments, freed only
 *            when a cudaMalloc fails (all cached empty segments at once);
 *            also the occupancy at every failed cudaMalloc (_oom).
 *   tf       tensors through a model of BFC with allow_growth: the driver
 *            sees only regions, doubling from 2 MiB, never freed.
 *   direct   no caching allocator (cuda_malloc_async, plain CUDA): 1, 2
 *            and 4 GiB buffers and a stream of 8 B-1 MiB requests with
 *            frees, all reaching the driver.
 *   2049     100000 live 2049 B requests (slab: 2304 B slots).
 * Prints one RESULT line. */
#include <stdio.h>
#include <stdlib.h>

#include "gs_pool.h"

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
        /* at the peak of bytes requested */
        double peak_req, waste, occupancy;
        uint64_t unaligned4k; /* blocks not 4 KiB aligned: only slabs do that */
        /* at each failed driver allocation: bytes requested / chunks held */
        double oom_sum, oom_min;
        unsigned noom;
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
        t->peak_req = t->waste = t->occupancy = 0;
        t->unaligned4k = 0;
        t->oom_sum = t->noom = 0;
        t->oom_min = 100;
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

/* One driver allocation: 0, or -ENOMEM / -ENOSPC (the pool is used up). */
static int t_malloc(struct trace *t, uint64_t size, uint64_t *ret_off)
{
        struct gs_grant g[NCHUNKS];
        uint32_t ng;
        int r = gs_pproc_malloc(t->p, size, ret_off, g, NCHUNKS, &ng);
        if (r == -ENOMEM || r == -ENOSPC) {
                struct gs_pproc_stats st;
                gs_pproc_stats(t->p, &st);
                double occ = st.chunks_held ? 100.0 * (double)st.bytes_requested / ((double)st.chunks_held * CHUNK) : 0;
                t->oom_sum += occ;
                t->oom_min = occ < t->oom_min ? occ : t->oom_min;
                t->noom++;
                return r;
        }
        if (r < 0)
                die(size ? "malloc" : "malloc 0", r);
        t->unaligned4k += *ret_off % 4096 != 0;
        sample(t);
        return 0;
}

/* One driver free; the chunks it empties are given back as the hook does. */
static void t_free_off(struct trace *t, uint64_t off)
{
        struct gs_release rel;
        int r = gs_pproc_free(t->p, off, &rel);
        if (r < 0)
                die("free", r);
        if (rel.count && (r = gs_pproc_release(t->p, rel.first_slot, rel.count)) < 0)
                die("release", r);
}

static void finish(struct trace *t)
{
        gs_pproc_del(t->p);
        if (gs_palloc_del(t->a) < 0)
                die("palloc_del", -EBUSY);
        gs_pool_free(t->pool);
}

/* ---- PyTorch: the CUDA caching allocator's driver calls ----
 *
 * Tensors are served from cached segments; only when no segment of the
 * pool has room does the caching allocator call cudaMalloc: a 2 MiB
 * segment for tensors <= 1 MiB (small pool), 20 MiB for 1-10 MiB,
 * larger ones rounded up to 2 MiB.  Freed tensors go back to their
 * segment; segments are not cudaFree'd until a cudaMalloc fails: then
 * every wholly free cached segment is released (release_cached_blocks,
 * the default with max_split_size unlimited) and the cudaMalloc retried.
 * If that fails too the application sees OutOfMemoryError; here it drops
 * a random tensor and goes on.  Room in a segment is modelled by its free
 * bytes (no intra-segment fragmentation), best fit over the pool's
 * segments as get_free_block does. */
#define MAXSEG 16384
#define MAXTENSOR 8192

struct pt {
        struct {
                uint64_t off, cap, used;
                unsigned ntensors;
                int small, live;
        } seg[MAXSEG];
        struct {
                unsigned seg;
                uint64_t size;
        } ten[MAXTENSOR];
        unsigned nseg, nten;
};
static struct pt ptm;

static void pt_release_cached(struct trace *t)
{
        for (unsigned i = 0; i < ptm.nseg; i++)
                if (ptm.seg[i].live && ptm.seg[i].ntensors == 0) {
                        t_free_off(t, ptm.seg[i].off);
                        ptm.seg[i].live = 0;
                }
}

static int pt_segment(struct trace *t, uint64_t tensor, unsigned *ret)
{
        int small = tensor <= GS_MiB;
        uint64_t cap = small ? 2 * GS_MiB : tensor <= 10 * GS_MiB ? 20 * GS_MiB : gs_align_up(tensor, 2 * GS_MiB);
        unsigned best = MAXSEG, slot = MAXSEG;
        uint64_t off;

        for (unsigned i = 0; i < ptm.nseg; i++) {
                if (!ptm.seg[i].live) {
                        slot = slot == MAXSEG ? i : slot;
                        continue;
                }
                if (ptm.seg[i].small == small && ptm.seg[i].cap - ptm.seg[i].used >= tensor &&
                    (best == MAXSEG || ptm.seg[i].cap - ptm.seg[i].used < ptm.seg[best].cap - ptm.seg[best].used))
                        best = i;
        }
        if (best != MAXSEG) {
                *ret = best;
                return 0;
        }
        if (t_malloc(t, cap, &off) < 0) {
                pt_release_cached(t);
                if (t_malloc(t, cap, &off) < 0)
                        return -ENOMEM;
        }
        if (slot == MAXSEG) {
                for (slot = 0; slot < ptm.nseg && ptm.seg[slot].live; slot++)
                        ;
                if (slot == MAXSEG)
                        die("too many segments", -E2BIG);
                if (slot == ptm.nseg)
                        ptm.nseg++;
        }
        ptm.seg[slot].off = off;
        ptm.seg[slot].cap = cap;
        ptm.seg[slot].used = 0;
        ptm.seg[slot].ntensors = 0;
        ptm.seg[slot].small = small;
        ptm.seg[slot].live = 1;
        *ret = slot;
        return 0;
}

static void pt_tensor_free(unsigned i)
{
        ptm.seg[ptm.ten[i].seg].used -= ptm.ten[i].size;
        ptm.seg[ptm.ten[i].seg].ntensors--;
        ptm.ten[i] = ptm.ten[--ptm.nten];
}

static void trace_pytorch(struct trace *t)
{
        start(t);
        ptm.nseg = ptm.nten = 0;
        for (int n = 0; n < 20000; n++) {
                if (ptm.nten && (rnd() % 100 < 35 || ptm.nten == MAXTENSOR)) {
                        pt_tensor_free((unsigned)(rnd() % ptm.nten));
                        continue;
                }
                uint64_t tensor = gs_align_up(rnd() % 2 ? pick(512, GS_MiB) : pick(GS_MiB, 2 * GS_GiB), 512);
                unsigned s = 0;
                /* OutOfMemoryError: the application drops a tensor */
                while (pt_segment(t, tensor, &s) < 0) {
                        if (!ptm.nten)
                                die("pytorch", -ENOMEM);
                        pt_tensor_free((unsigned)(rnd() % ptm.nten));
                }
                ptm.seg[s].used += tensor;
                ptm.seg[s].ntensors++;
                ptm.ten[ptm.nten].seg = s;
                ptm.ten[ptm.nten++].size = tensor;
        }
        while (ptm.nten)
                pt_tensor_free(ptm.nten - 1);
        pt_release_cached(t);
        finish(t);
}

/* ---- TensorFlow: the BFC allocator's driver calls ----
 *
 * BFC (allow_growth) serves every tensor from its regions; the driver sees
 * only the regions: the first one 2 MiB, each next one double the last
 * (or the request's size if larger) within memory_limit, and when a region cannot be had it
 * backs off by 10 % steps (kBackpedalFactor) down to what the request
 * needs.  Regions are never freed.  The tensors: a stream of 8 B-1 MiB
 * requests with some 1 MiB-1 GiB ones, their live bytes growing towards
 * the quota; room in the regions is modelled by free bytes. */
static uint64_t tf_extend(struct trace *t, uint64_t *region, uint64_t have, uint64_t size)
{
        /* memory_limit: what cuMemGetInfo reports, the allocation's quota */
        uint64_t avail = (uint64_t)NCHUNKS * CHUNK - have, want, off;

        while (*region < size)
                *region *= 2;
        if (size > avail)
                return 0;
        for (want = *region < avail ? *region : avail; t_malloc(t, want, &off) < 0;) {
                if (want == size)
                        return 0;
                want = gs_align_up(want / 10 * 9, 256);
                want = want < size ? size : want;
        }
        *region *= 2;
        return want;
}

static void trace_tf(struct trace *t)
{
        static uint64_t live[MAXLIVE];
        unsigned nlive = 0;
        uint64_t region = 2 * GS_MiB, have = 0, used = 0;

        start(t);
        for (int n = 0; n < 60000; n++) {
                if (nlive && (nlive == MAXLIVE || rnd() % 100 < 45)) {
                        unsigned i = (unsigned)(rnd() % nlive);
                        used -= live[i];
                        live[i] = live[--nlive];
                        continue;
                }
                uint64_t size = gs_align_up(rnd() % 16 ? pick(8, GS_MiB) : pick(GS_MiB, GS_GiB), 256);
                if (used + size > have) {
                        uint64_t got = tf_extend(t, &region, have, size);
                        if (!got)
                                continue; /* OOM: the request fails */
                        have += got;
                }
                used += size;
                live[nlive++] = size;
        }
        finish(t);
}

/* Without a caching allocator (TF_GPU_ALLOCATOR=cuda_malloc_async, JAX's
 * platform allocator, plain CUDA programs) every request reaches the
 * driver: a few large buffers and a stream of 8 B-1 MiB ones. */
static void trace_direct(struct trace *t)
{
        static const uint64_t region[] = { GS_GiB, 2 * GS_GiB, 4 * GS_GiB };
        static uint64_t live[MAXLIVE];
        unsigned nlive = 0, nregions = 0;
        uint64_t off;

        start(t);
        for (int n = 0; n < 60000; n++) {
                if (n % 20000 == 0) {
                        /* the large buffers stay for the whole run: keep them at the front */
                        if (t_malloc(t, region[n / 20000], &off) < 0)
                                die("direct region", -ENOMEM);
                        live[nlive++] = live[nregions];
                        live[nregions++] = off;
                }
                if (nlive > nregions && (nlive > 8000 || rnd() % 100 < 45)) {
                        unsigned i = nregions + (unsigned)(rnd() % (nlive - nregions));
                        t_free_off(t, live[i]);
                        live[i] = live[--nlive];
                        continue;
                }
                if (t_malloc(t, pick(8, GS_MiB), &live[nlive]) < 0)
                        die("direct small", -ENOMEM);
                nlive++;
        }
        finish(t);
}

static void trace_2049(struct trace *t)
{
        uint64_t off;

        start(t);
        for (int n = 0; n < 100000; n++)
                if (t_malloc(t, 2049, &off) < 0)
                        die("2049", -ENOMEM);
        finish(t);
}

static struct trace tr;

int main(void)
{
        trace_pytorch(&tr);
        double wp = tr.waste, op = tr.occupancy, pp = tr.peak_req;
        double oomp = tr.noom ? tr.oom_sum / tr.noom : 0, oommin = tr.oom_min;
        unsigned noom = tr.noom;
        trace_tf(&tr);
        double wt = tr.waste, ot = tr.occupancy, pt = tr.peak_req;
        trace_direct(&tr);
        double wd = tr.waste, od = tr.occupancy, pd = tr.peak_req;
        trace_2049(&tr);
        double w2 = tr.waste, slab2 = 100.0 * (double)tr.unaligned4k / 100000;
        printf("pytorch: peak %.2f GiB requested, waste %.3f %%, occupancy %.2f %%\n", pp / GS_GiB, wp, op);
        printf("pytorch: %u failed cudaMalloc, occupancy then %.2f %% on average, %.2f %% at worst\n", noom, oomp,
               oommin);
        printf("tf:      peak %.2f GiB requested, waste %.3f %%, occupancy %.2f %%\n", pt / GS_GiB, wt, ot);
        printf("direct:  peak %.2f GiB requested, waste %.3f %%, occupancy %.2f %%\n", pd / GS_GiB, wd, od);
        printf("2049 B:  waste %.2f %% (2304 B slots: %.2f %%; buddy alone: 50 %%), %.1f %% of blocks in slabs\n", w2,
               100.0 * (2304 - 2049) / 2304, slab2);
        printf("RESULT waste_pytorch_pct=%.3f waste_tf_pct=%.3f waste_direct_pct=%.3f waste_2049_pct=%.2f "
               "occupancy_pytorch_pct=%.2f occupancy_pytorch_oom_pct=%.2f occupancy_tf_pct=%.2f "
               "occupancy_direct_pct=%.2f\n",
               wp, wt, wd, w2, op, oomp, ot, od);
        return 0;
}
