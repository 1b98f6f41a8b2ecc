/* scrub_bench.c — what the agent's scrubbing costs (issue 10 item 9, issue
 * 19 item 3), on GPU 0 of the CUDA driver given (default libcuda.so.1);
 * where none loads or no GPU answers it says so and exits 0 (make bench
 * runs everywhere).  Two parts:
 *
 *   1. One chunk: the time to zero it through a mapping made for the call
 *      (gs_gpu_scrub: reserve, map, access, cuMemsetD32, wait, unmap,
 *      free), and the memset alone on a mapping kept for the run (what a
 *      chunk's scrub costs now that the agent keeps every chunk mapped).
 *   2. Noisy neighbour: the agent's own pool code (gs_gpu_open: every chunk
 *      made, the scrubber running) and one allocation whose --procs
 *      "processes" (threads, as the agent's workers serve them) each keep
 *      --live blocks of random sizes (4 KiB .. 64 MiB, --dist uniform or
 *      log-uniform) within the allocation's --quota chunks (default: the
 *      whole pool) and allocate and free in a loop, without a caching
 *      allocator, --ops times each: gs_pproc_malloc and
 *      gs_gpu_chunks_hand_out under the GPU's lock as gs_serve does, frees
 *      and chunk releases as the hook asks for them.  Counts how each chunk
 *      sent to a process was made ready (clean, back to its writer, zeroed
 *      on the request path, waited for the scrubber) and times the
 *      request path (the lock held for a request that got chunks).  On
 *      the fake driver (the device's name says so) each process also maps
 *      every chunk it is sent, checks that it holds nothing another
 *      process wrote, and writes its own mark (leaks=... counts words of
 *      another's).
 *
 *   scrub_bench [--noisy-only] [--ops N] [--procs P] [--live L]
 *               [--quota CHUNKS] [--dist uniform|log] [--seed S]
 *               [CUDA_LIBRARY [CHUNK_MIB [ROUNDS]]]
 *
 * Ends with "RESULT scrub_ms_per_chunk=... memset_ms_per_chunk=...
 * scrub_GBps=... chunk_mib=..." (part 1) and "RESULT noisy_grants=...
 * grants_scrubbed_sync=... grants_waited=... grants_clean=...
 * grants_same=... scrubbed_bg=... bg_batches=... req_us_mean=...
 * req_us_p99=... leaks=..." (part 2), or "RESULT scrub=skipped ...". */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "gs_node.h"
#include "gs_gpu.h"
#include "gs_log.h"
#include "gs_pool.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define MAX_LIVE 1024
#define MAX_GRANTS 64
/* A process's mark in the words it checks: never 0. */
#define MARK(id) ((UINT64_C(0x5C2B) << 48) | (uint64_t)(id))

static double now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int skip(const char *why)
{
        printf("scrub_bench: %s\nRESULT scrub=skipped reason=%s\n", why, "no-gpu");
        return 0;
}

/* ---- part 1: one chunk ---- */

static int one_chunk(struct gs_node *ag, uint64_t chunk, int rounds)
{
        struct gs_gpu g = { .node = ag };
        const struct gs_cuda *cu = &ag->cu;
        CUmemGenericAllocationHandle h;
        CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE },
                                .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        CUdeviceptr va = 0;
        double t0, scrub_ms, memset_ms;
        char err[256];
        int fd;

        if (cu->device_get(&g.dev, 0) != CUDA_SUCCESS || cu->primary_ctx_retain(&g.ctx, g.dev) != CUDA_SUCCESS ||
            cu->ctx_set_current(g.ctx) != CUDA_SUCCESS)
                return skip("no GPU answers");
        (void)cu->device_get_name(g.name, (int)sizeof(g.name), g.dev);
        if (gs_gpu_mem_make(&g, chunk, false, &h, &fd, err, sizeof(err)) < 0) {
                fprintf(stderr, "scrub_bench: %s\n", err);
                return 1;
        }
        if (gs_gpu_scrub(&g, h, chunk, err, sizeof(err)) < 0) { /* warm-up */
                fprintf(stderr, "scrub_bench: %s\n", err);
                return 1;
        }
        t0 = now_ms();
        for (int i = 0; i < rounds; i++)
                if (gs_gpu_scrub(&g, h, chunk, err, sizeof(err)) < 0) {
                        fprintf(stderr, "scrub_bench: %s\n", err);
                        return 1;
                }
        scrub_ms = (now_ms() - t0) / rounds;
        acc.location.id = (int)g.dev;
        if (cu->mem_address_reserve(&va, chunk, 0, 0, 0) != CUDA_SUCCESS ||
            cu->mem_map(va, chunk, 0, h, 0) != CUDA_SUCCESS || cu->mem_set_access(va, chunk, &acc, 1) != CUDA_SUCCESS) {
                fprintf(stderr, "scrub_bench: cannot map the chunk\n");
                return 1;
        }
        t0 = now_ms();
        for (int i = 0; i < rounds; i++)
                if (cu->memset_d32(va, 0, chunk / 4) != CUDA_SUCCESS || cu->ctx_synchronize() != CUDA_SUCCESS) {
                        fprintf(stderr, "scrub_bench: cuMemsetD32 failed\n");
                        return 1;
                }
        memset_ms = (now_ms() - t0) / rounds;
        (void)cu->mem_unmap(va, chunk);
        (void)cu->mem_address_free(va, chunk);
        gs_gpu_mem_drop(&g, h, &fd);
        (void)cu->primary_ctx_release(g.dev);
        printf("scrub_bench: %s, %d rounds of a %llu MiB chunk\n", g.name, rounds, (unsigned long long)(chunk >> 20));
        printf("RESULT scrub_ms_per_chunk=%.3f memset_ms_per_chunk=%.3f scrub_GBps=%.0f chunk_mib=%llu\n", scrub_ms,
               memset_ms, (double)chunk / 1e6 / scrub_ms, (unsigned long long)(chunk >> 20));
        return 0;
}

/* ---- part 2: noisy neighbour ---- */

struct noisy {
        struct gs_gpu *g;
        struct gs_palloc *pa;
        uint64_t ops, min_size, max_size;
        uint32_t live, nslots, quota;
        bool log_dist, verify;
};

struct nproc {
        struct noisy *n;
        uint64_t id;
        unsigned seed;
        struct gs_pproc *pp;
        uint64_t off[MAX_LIVE];
        uint32_t nlive;
        struct gs_grant gr[MAX_GRANTS];
        int fds[MAX_GRANTS];
        /* results */
        uint64_t grants, clean, same, sync, waited, ooms, leaks, failed;
        double *req_us;
        size_t nreq;
        int err;
};

static uint64_t rnd64(unsigned *seed)
{
        return (uint64_t)rand_r(seed) << 31 ^ (uint64_t)rand_r(seed);
}

static uint64_t pick_size(struct nproc *p)
{
        const struct noisy *n = p->n;

        if (n->log_dist) {
                /* An octave at random, then uniform within it. */
                unsigned octaves = 0;
                while ((n->min_size << (octaves + 1)) <= n->max_size)
                        octaves++;
                uint64_t lo = n->min_size << (rnd64(&p->seed) % (octaves + 1));
                uint64_t s = lo + rnd64(&p->seed) % lo;
                return s > n->max_size ? n->max_size : s;
        }
        return n->min_size + rnd64(&p->seed) % (n->max_size - n->min_size + 1);
}

/* The fake driver only: the process maps the chunk it was sent, finds at
 * most its own mark in it (or zeros), and leaves its mark. */
static void touch(struct nproc *p, int fd)
{
        uint64_t cb = p->n->g->chunk_bytes;
        uint64_t *m = mmap(NULL, cb, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

        if (m == MAP_FAILED) {
                p->failed++;
                return;
        }
        for (uint64_t w = 0; w < cb / 8; w += MiB / 8) {
                if (m[w] != 0 && m[w] != MARK(p->id))
                        p->leaks++;
                m[w] = MARK(p->id);
        }
        if (m[cb / 8 - 1] != 0 && m[cb / 8 - 1] != MARK(p->id))
                p->leaks++;
        m[cb / 8 - 1] = MARK(p->id);
        munmap(m, cb);
}

static void free_one(struct nproc *p)
{
        struct gs_gpu *g = p->n->g;
        uint32_t i = (uint32_t)(rnd64(&p->seed) % p->nlive);
        struct gs_release rel = { 0 };
        int r;

        pthread_mutex_lock(&g->lock);
        r = gs_pproc_free(p->pp, p->off[i], &rel);
        pthread_mutex_unlock(&g->lock);
        if (r < 0) {
                p->failed++;
                return;
        }
        p->off[i] = p->off[--p->nlive];
        if (rel.count == 0)
                return;
        /* The hook unmaps the slots, then gives them back. */
        pthread_mutex_lock(&g->lock);
        r = gs_pproc_release(p->pp, rel.first_slot, rel.count);
        gs_gpu_check_lending(g);
        pthread_mutex_unlock(&g->lock);
        if (r < 0)
                p->failed++;
}

static void alloc_one(struct nproc *p)
{
        struct gs_gpu *g = p->n->g;
        uint64_t size = pick_size(p), off = 0;
        uint32_t n = 0;
        char err[256];
        int r;

        pthread_mutex_lock(&g->lock);
        double t0 = now_ms();
        r = gs_pproc_malloc(p->pp, size, &off, p->gr, MAX_GRANTS, &n);
        if (r == 0 && n) {
                for (uint32_t i = 0; i < n; i++) {
                        const struct gs_chunk *c = &g->chunks[p->gr[i].chunk];
#ifdef GS_GPU_SCRUB_AHEAD
                        if (c->scrubbing)
                                p->waited++;
                        else
#endif
                                if (c->writer == 0 || c->recycle || c->fd < 0)
                                p->clean++;
                        else if (c->writer == p->id)
                                p->same++;
                        else
                                p->sync++;
                }
                r = gs_gpu_chunks_hand_out(g, p->gr, n, NULL, p->id, p->fds, err, sizeof(err));
                if (r < 0) {
                        fprintf(stderr, "scrub_bench: hand out: %s\n", err);
                        p->failed++;
                        if (gs_pproc_free(p->pp, off, NULL) < 0)
                                p->failed++;
                        for (uint32_t i = 0; i < n; i++)
                                (void)!gs_pproc_release(p->pp, p->gr[i].slot, 1);
                        n = 0;
                }
                gs_gpu_check_lending(g);
        }
        double t1 = now_ms();
        pthread_mutex_unlock(&g->lock);
        if (r == -ENOMEM) {
                p->ooms++;
                if (p->nlive)
                        free_one(p);
                return;
        }
        if (r < 0) {
                p->failed++;
                return;
        }
        if (n) {
                p->req_us[p->nreq++] = (t1 - t0) * 1e3;
                p->grants += n;
        }
        for (uint32_t i = 0; i < n; i++) {
                if (p->fds[i] < 0)
                        p->failed++;
                else if (p->n->verify)
                        touch(p, p->fds[i]);
        }
        p->off[p->nlive++] = off;
}

static void *nproc_main(void *arg)
{
        struct nproc *p = arg;

        for (uint64_t op = 0; op < p->n->ops; op++) {
                if (p->nlive < p->n->live)
                        alloc_one(p);
                else
                        free_one(p);
        }
        while (p->nlive)
                free_one(p);
        return NULL;
}

static int cmp_dbl(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return x < y ? -1 : x > y;
}

static int noisy(struct gs_node *ag, const char *lib, struct noisy *n, int nprocs, unsigned seed)
{
        static struct gs_gpu g;
        struct nproc *ps = calloc((size_t)nprocs, sizeof(*ps));
        char err[512], dir[] = "/tmp/gs-scrub-bench-XXXXXX";
        struct gs_pool_stats st;
        pthread_t thr[64];
        int rc = 1;

        if (!ps || nprocs > 64 || !mkdtemp(dir))
                return 1;
        gs_config_defaults(&ag->cfg);
        snprintf(ag->cfg.state_dir, sizeof(ag->cfg.state_dir), "%s", dir);
        g.node = ag;
        ag->gpus = &g;
        ag->ngpus = 1;
        if (gs_gpu_open(&g, 0, &ag->cfg, err, sizeof(err)) < 0 || !g.healthy) {
                fprintf(stderr, "scrub_bench: GPU 0: %s\n", g.healthy ? err : g.health_reason);
                goto out;
        }
        n->g = &g;
        n->verify = strstr(g.name, "fake") != NULL;
        gs_pool_stats(g.pool, &st);
        /* The allocation's quota (default: the whole pool): what it cannot
         * hold is out of memory for it (a process frees one of its blocks
         * and goes on), as for a program without a caching allocator. */
        if (!n->quota || n->quota > st.chunks_free)
                n->quota = st.chunks_free;
        if (gs_palloc_new(g.pool, n->quota, 0, &n->pa) < 0) {
                fprintf(stderr, "scrub_bench: no allocation of %u chunks\n", n->quota);
                goto out;
        }
        n->nslots = 2 * n->quota;
        for (int i = 0; i < nprocs; i++) {
                ps[i].n = n;
                ps[i].id = (uint64_t)i + 1;
                ps[i].seed = seed + (unsigned)i * 7919u;
                ps[i].req_us = calloc(n->ops + 1, sizeof(double));
                if (!ps[i].req_us || gs_pproc_new(n->pa, n->nslots, &ps[i].pp) < 0)
                        goto out;
        }
        double t0 = now_ms();
        for (int i = 0; i < nprocs; i++)
                if (pthread_create(&thr[i], NULL, nproc_main, &ps[i]) != 0)
                        goto out;
        for (int i = 0; i < nprocs; i++)
                pthread_join(thr[i], NULL);
        double secs = (now_ms() - t0) / 1e3;

        struct nproc sum = { 0 };
        size_t nreq = 0;
        for (int i = 0; i < nprocs; i++) {
                sum.grants += ps[i].grants;
                sum.clean += ps[i].clean;
                sum.same += ps[i].same;
                sum.sync += ps[i].sync;
                sum.waited += ps[i].waited;
                sum.ooms += ps[i].ooms;
                sum.leaks += ps[i].leaks;
                sum.failed += ps[i].failed;
                nreq += ps[i].nreq;
        }
        double *all = calloc(nreq + 1, sizeof(double)), total = 0;
        size_t k = 0;
        for (int i = 0; all && i < nprocs; i++)
                for (size_t j = 0; j < ps[i].nreq; j++) {
                        all[k++] = ps[i].req_us[j];
                        total += ps[i].req_us[j];
                }
        if (all && k)
                qsort(all, k, sizeof(*all), cmp_dbl);
        uint64_t bg = 0, batches = 0;
#ifdef GS_GPU_SCRUB_AHEAD
        struct gs_gpu_scrub_stats ss;
        gs_gpu_scrub_stats(&g, &ss);
        bg = ss.scrubbed_bg;
        batches = ss.batches_bg;
#endif
        printf("scrub_bench: noisy neighbour on %s (%s): %d processes of one allocation of %u chunks of %llu MiB, "
               "%u live blocks of %llu KiB .. %llu MiB (%s), %llu operations each in %.1f s%s\n",
               g.name, lib, nprocs, n->quota, (unsigned long long)(g.chunk_bytes >> 20), n->live,
               (unsigned long long)(n->min_size >> 10), (unsigned long long)(n->max_size >> 20),
               n->log_dist ? "log-uniform" : "uniform", (unsigned long long)n->ops, secs,
               n->verify ? "; every chunk sent checked" : "");
        printf("scrub_bench: %llu chunks sent in %zu requests: %llu clean, %llu back to their writer, %llu zeroed on "
               "the request path, %llu waited for the scrubber; %llu zeroed in %llu background batches; %llu out of "
               "memory, %llu failed\n",
               (unsigned long long)sum.grants, k, (unsigned long long)sum.clean, (unsigned long long)sum.same,
               (unsigned long long)sum.sync, (unsigned long long)sum.waited, (unsigned long long)bg,
               (unsigned long long)batches, (unsigned long long)sum.ooms, (unsigned long long)sum.failed);
        printf("RESULT noisy_grants=%llu grants_scrubbed_sync=%llu grants_waited=%llu grants_clean=%llu "
               "grants_same=%llu scrubbed_bg=%llu bg_batches=%llu req_us_mean=%.1f req_us_p50=%.1f "
               "req_us_p99=%.1f leaks=%llu failed=%llu\n",
               (unsigned long long)sum.grants, (unsigned long long)sum.sync, (unsigned long long)sum.waited,
               (unsigned long long)sum.clean, (unsigned long long)sum.same, (unsigned long long)bg,
               (unsigned long long)batches, k ? total / (double)k : 0.0, k ? all[k / 2] : 0.0,
               k ? all[k * 99 / 100] : 0.0, (unsigned long long)sum.leaks, (unsigned long long)sum.failed);
        free(all);
        rc = sum.leaks || sum.failed ? 1 : 0;
out:
        for (int i = 0; i < nprocs; i++) {
                if (ps[i].pp) {
                        pthread_mutex_lock(&g.lock);
                        gs_pproc_del(ps[i].pp);
                        pthread_mutex_unlock(&g.lock);
                }
                free(ps[i].req_us);
        }
        if (n->pa) {
                pthread_mutex_lock(&g.lock);
                (void)!gs_palloc_del(n->pa);
                pthread_mutex_unlock(&g.lock);
        }
        free(ps);
        gs_gpu_close(&g);
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/held-%s", dir, g.uuid);
        unlink(path);
        rmdir(dir);
        return rc;
}

int main(int argc, char **argv)
{
        struct noisy n = { .ops = 20000, .min_size = 4 * KiB, .max_size = 64 * MiB, .live = 32 };
        const char *pos[3] = { "libcuda.so.1", "256", "50" };
        int npos = 0, nprocs = 4, count = 0, rc;
        bool noisy_only = false;
        unsigned seed = 1;
        static struct gs_node ag;
        char err[256], state[64] = "";

        for (int i = 1; i < argc; i++) {
                const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
                if (!strcmp(a, "--noisy-only"))
                        noisy_only = true;
                else if (!strcmp(a, "--ops") && v)
                        n.ops = strtoull(argv[++i], NULL, 0);
                else if (!strcmp(a, "--procs") && v)
                        nprocs = atoi(argv[++i]);
                else if (!strcmp(a, "--quota") && v)
                        n.quota = (uint32_t)atoi(argv[++i]);
                else if (!strcmp(a, "--live") && v)
                        n.live = (uint32_t)atoi(argv[++i]);
                else if (!strcmp(a, "--dist") && v)
                        n.log_dist = !strcmp(argv[++i], "log");
                else if (!strcmp(a, "--seed") && v)
                        seed = (unsigned)atoi(argv[++i]);
                else if (a[0] == '-' || npos == 3)
                        return fprintf(stderr, "usage: see bench/scrub_bench.c\n"), 2;
                else
                        pos[npos++] = a;
        }
        uint64_t chunk = strtoull(pos[1], NULL, 0) << 20;
        int rounds = atoi(pos[2]);
        if (rounds < 1 || chunk == 0 || nprocs < 1 || nprocs > 64 || n.live < 1 || n.live > MAX_LIVE || n.ops < 1)
                return 2;
        gs_log_init("scrub_bench", GS_LOG_WARN);
        /* The fake driver: a state file of our own, unless one is given. */
        if (strstr(pos[0], "fakecuda") && !getenv("GSHARE_FAKECUDA_STATE")) {
                snprintf(state, sizeof(state), "/dev/shm/gs-scrub-bench-%d", (int)getpid());
                setenv("GSHARE_FAKECUDA_STATE", state, 1);
        }
        if (gs_cuda_open(&ag.cu, pos[0], err, sizeof(err)) < 0)
                return skip(err);
        if (ag.cu.init(0) != CUDA_SUCCESS || ag.cu.device_get_count(&count) != CUDA_SUCCESS || count < 1)
                return skip("no GPU answers");
        rc = noisy_only ? 0 : one_chunk(&ag, chunk, rounds);
        if (rc == 0)
                rc = noisy(&ag, pos[0], &n, nprocs, seed);
        gs_cuda_close(&ag.cu);
        if (state[0])
                unlink(state);
        return rc;
}
