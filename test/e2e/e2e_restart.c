/* e2e_restart.c — a CUDA driver-API client that keeps allocating, freeing
 * and checking its data while the agent is killed, stopped and started
 * again (issue 18).  Linked against libcuda like e2e_cuda; run under
 * LD_PRELOAD=libgshare.so (GSHARE_SOCKET set) with the fake driver on
 * LD_LIBRARY_PATH, or on a GPU.
 *
 *   e2e_restart [options]
 *     --hold MIB          hold MIB in blocks of --hold-block MIB (default 8),
 *                         each filled with this process's pattern
 *                         (cuMemsetD32, a stamp by cuMemcpyHtoD at its start,
 *                         cuMemcpyHtoD of the odd tail bytes) and read back
 *                         whole (cuMemcpyDtoH) every --verify-ms (default 500)
 *     --churn K           keep 1 to K live blocks of random sizes 256 B ..
 *                         8 MiB (log-uniform), each written when allocated
 *                         and read back whole before it is freed (after a
 *                         refused allocation: allocate again 10 ms later,
 *                         free nothing meanwhile); one alloc in
 *                         --big-every (default 64) is of a size from --big
 *                         (MiB, comma-separated, default 40: over a 32 MiB
 *                         chunk), at most one such block live; one alloc in
 *                         4 goes through cuMemAllocAsync/cuMemFreeAsync
 *     --vmm N             keep up to N cuMemCreate allocations (2 or 4 MiB)
 *                         live too: reserved, mapped, made read-write, written,
 *                         read back, unmapped, released
 *     --sleep-us US       pause between churn steps (default 500)
 *     --duration S        stop after S seconds (default: until stopped)
 *     --stop-file PATH    stop once PATH exists; SIGTERM and SIGINT stop too
 *     --pause-file PATH   while PATH exists: free every churn block and VMM
 *                         allocation, then only check the hold; print a
 *                         "paused" line once there, "resumed" when it is gone
 *     --grow              after the hold, allocate 64 MiB blocks, halving the
 *                         step on CUDA_ERROR_OUT_OF_MEMORY down to 1 MiB, until
 *                         a 1 MiB block is refused (each block's first 64 KiB
 *                         written and checked); print a "grown" line with
 *                         grow_bytes; then stop (with --grow-hold: keep the
 *                         blocks until stopped).  Those refusals are the
 *                         expected end of the growth, not failed calls.
 *     --seed N            random seed (mixed with the pid)
 *     --tick-ms MS        interval of the "tick" lines (default 1000)
 *
 * stdout is one JSON object per line, each with "event" and the counters
 * below: "ready" once the hold is allocated, written and read back;
 * "tick" every --tick-ms, from a thread of its own so that it goes on while
 * a call blocks (inflight_ms: how long the call in flight has run;
 * interval_max_ms, interval_max_hooked_ms: the longest calls that ended
 * since the last tick); "paused", "resumed", "grown" as above; "summary"
 * at the end, after every block was checked once more and freed, with
 * also failed {call: n}, errors {call: {error name: n}}, calls_by_call
 * {call: n}, max_ms_by_call {call: ms}, seconds and grow_refusals.  The
 * counters:
 *
 *   calls, failed_calls, max_ms (longest single call), max_call,
 *   max_hooked_ms, max_hooked_call (the same over the calls the agent
 *   serves: alloc, free, cuMemCreate, cuMemRelease, cuMemGetInfo; the
 *   fake driver's memset of fresh memory is slow for reasons of its own),
 *   verify_failures (bytes read back wrong, blocks counted once each),
 *   faults (SIGSEGV/SIGBUS inside a memcpy/memset: counted, not fatal),
 *   bytes_held (hold + churn + VMM live when it stopped), hold_bytes,
 *   grow_bytes, allocs_ok, allocs_failed (cuMemAlloc, cuMemAllocAsync,
 *   cuMemCreate), frees_ok, frees_failed (cuMemFree, cuMemFreeAsync,
 *   cuMemRelease), first_alloc_fail_unix_ms, last_alloc_fail_unix_ms (when
 *   the first and the last failed allocation returned; 0: none),
 *   free_max_ms, meminfo_free, meminfo_total (the last cuMemGetInfo), pid,
 *   t_ms (since start), unix_ms
 *
 * A failed call is counted and the program goes on; it never exits on one.
 * Exit 0 when no call failed and every byte read back right, 1 otherwise,
 * 2 on bad arguments, 3 if the driver could not be initialised. */
#include <cuda.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MiB (1024ull * 1024ull)
#define PIECE (4 * MiB) /* verification reads, host buffer size */
#define MAX_CHURN 256
#define MAX_VMM 64
#define MAX_HOLD 4096
#define MAX_GROW 65536
#define MAX_ERRS 6
#define R_FAULT ((CUresult)-1) /* a signal inside a device access */

enum call {
        C_ALLOC,
        C_FREE,
        C_ALLOC_ASYNC,
        C_FREE_ASYNC,
        C_MEMSET,
        C_HTOD,
        C_DTOH,
        C_CREATE,
        C_RESERVE,
        C_MAP,
        C_SETACCESS,
        C_UNMAP,
        C_RELEASE,
        C_ADDRFREE,
        C_GETINFO,
        C_SYNC,
        C_N
};

static const char *const call_name[C_N] = {
        "cuMemAlloc",          "cuMemFree",        "cuMemAllocAsync", "cuMemFreeAsync",
        "cuMemsetD32",         "cuMemcpyHtoD",     "cuMemcpyDtoH",    "cuMemCreate",
        "cuMemAddressReserve", "cuMemMap",         "cuMemSetAccess",  "cuMemUnmap",
        "cuMemRelease",        "cuMemAddressFree", "cuMemGetInfo",    "cuStreamSynchronize",
};

struct callstat {
        uint64_t calls, failed;
        double max_ms;
        struct {
                CUresult r;
                uint64_t n;
        } err[MAX_ERRS];
        uint64_t err_other;
};

/* Everything the tick thread reads, under g_mu. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct callstat g_st[C_N];
static uint64_t g_calls, g_failed, g_verify_failures, g_faults;
static uint64_t g_allocs_ok, g_allocs_failed, g_frees_ok, g_frees_failed;
static uint64_t g_first_alloc_fail_ms, g_last_alloc_fail_ms; /* unix ms; 0: none */
static double g_max_ms, g_interval_max_ms, g_max_hooked_ms, g_interval_max_hooked_ms;
static int g_max_call = -1, g_max_hooked_call = -1;
static uint64_t g_inflight_since; /* ns; 0: no call in flight */
static uint64_t g_bytes_held, g_hold_bytes, g_grow_bytes, g_grow_refusals;
static size_t g_info_free, g_info_total;
static uint64_t g_t0;

static volatile sig_atomic_t g_stop_sig;
static sigjmp_buf g_jb;
static volatile sig_atomic_t g_guarded;

static uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t unix_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}

static const char *err_name(CUresult r)
{
        const char *n = NULL;

        if (r == R_FAULT)
                return "SIGSEGV_OR_SIGBUS";
        if (cuGetErrorName(r, &n) != CUDA_SUCCESS || !n)
                return "CUDA_ERROR_UNRECOGNIZED";
        return n;
}

static uint64_t call_begin(void)
{
        uint64_t t = now_ns();

        pthread_mutex_lock(&g_mu);
        g_inflight_since = t;
        pthread_mutex_unlock(&g_mu);
        return t;
}

/* The calls the hook serves through the agent (the others go straight to
 * the driver): their latency is what an agent restart can stall. */
static int hooked(enum call c)
{
        return c == C_ALLOC || c == C_FREE || c == C_ALLOC_ASYNC || c == C_FREE_ASYNC || c == C_CREATE ||
               c == C_RELEASE || c == C_GETINFO;
}

/* counted: 0 for the refusals that end --grow (expected, not failures). */
static void call_end_ex(enum call c, uint64_t t0, CUresult r, int counted)
{
        double ms = (double)(now_ns() - t0) / 1e6;
        struct callstat *s = &g_st[c];
        int fail = r != CUDA_SUCCESS && counted;

        pthread_mutex_lock(&g_mu);
        g_inflight_since = 0;
        g_calls++;
        s->calls++;
        if (ms > s->max_ms)
                s->max_ms = ms;
        if (ms > g_max_ms) {
                g_max_ms = ms;
                g_max_call = (int)c;
        }
        if (ms > g_interval_max_ms)
                g_interval_max_ms = ms;
        if (hooked(c)) {
                if (ms > g_max_hooked_ms) {
                        g_max_hooked_ms = ms;
                        g_max_hooked_call = (int)c;
                }
                if (ms > g_interval_max_hooked_ms)
                        g_interval_max_hooked_ms = ms;
        }
        if (fail) {
                int i;
                g_failed++;
                s->failed++;
                for (i = 0; i < MAX_ERRS; i++)
                        if (s->err[i].n == 0 || s->err[i].r == r)
                                break;
                if (i < MAX_ERRS) {
                        s->err[i].r = r;
                        s->err[i].n++;
                } else {
                        s->err_other++;
                }
                if (r == R_FAULT)
                        g_faults++;
        }
        if (c == C_ALLOC || c == C_ALLOC_ASYNC || c == C_CREATE) {
                if (r == CUDA_SUCCESS) {
                        g_allocs_ok++;
                } else if (counted) {
                        g_allocs_failed++;
                        g_last_alloc_fail_ms = unix_ms();
                        if (!g_first_alloc_fail_ms)
                                g_first_alloc_fail_ms = g_last_alloc_fail_ms;
                }
        }
        if (c == C_FREE || c == C_FREE_ASYNC || c == C_RELEASE) {
                if (r == CUDA_SUCCESS)
                        g_frees_ok++;
                else
                        g_frees_failed++;
        }
        pthread_mutex_unlock(&g_mu);
}

static void call_end(enum call c, uint64_t t0, CUresult r)
{
        call_end_ex(c, t0, r, 1);
}

/* A timed, counted driver call; the result is the expression's value. */
#define CU(c, expr)                          \
        ({                                   \
                uint64_t t0_ = call_begin(); \
                CUresult r_ = (expr);        \
                call_end((c), t0_, r_);      \
                r_;                          \
        })

static void held_add(int64_t d)
{
        pthread_mutex_lock(&g_mu);
        g_bytes_held += (uint64_t)d;
        pthread_mutex_unlock(&g_mu);
}

static void verify_failed(void)
{
        pthread_mutex_lock(&g_mu);
        g_verify_failures++;
        pthread_mutex_unlock(&g_mu);
}

/* Device accesses are guarded: memory the hook lost (unmapped under the
 * program) faults inside the fake driver's memcpy; that is counted as a
 * failed call, and this program goes on to report it. */
static void on_fault(int sig)
{
        if (g_guarded) {
                g_guarded = 0;
                siglongjmp(g_jb, sig);
        }
        signal(sig, SIG_DFL);
        raise(sig);
}

static CUresult d_access(enum call c, void *host, CUdeviceptr dev, size_t n, uint32_t word)
{
        uint64_t t0 = call_begin();
        CUresult r;

        if (sigsetjmp(g_jb, 1) == 0) {
                g_guarded = 1;
                if (c == C_MEMSET)
                        r = cuMemsetD32(dev, word, n / 4);
                else if (c == C_HTOD)
                        r = cuMemcpyHtoD(dev, host, n);
                else
                        r = cuMemcpyDtoH(host, dev, n);
                g_guarded = 0;
        } else {
                r = R_FAULT;
        }
        call_end(c, t0, r);
        return r;
}

/* ---- randomness and patterns ---- */

static uint64_t g_rng;

static uint64_t rnd(void)
{
        uint64_t x = g_rng;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return g_rng = x;
}

static uint32_t mix32(uint64_t a)
{
        a ^= a >> 33;
        a *= 0xff51afd7ed558ccdull;
        a ^= a >> 33;
        a *= 0xc4ceb9fe1a85ec53ull;
        a ^= a >> 33;
        return (uint32_t)a;
}

static uint64_t g_tag;       /* this process's: pid and seed */
static unsigned char *g_buf; /* PIECE bytes read back */
static uint32_t *g_exp;      /* PIECE bytes of the expected word */
static uint32_t g_exp_word;
static int g_exp_valid;

struct block {
        CUdeviceptr p;
        size_t size;
        size_t span; /* bytes written and checked: size, or a prefix (--grow) */
        uint64_t serial;
        int async, big, bad;
};

static uint32_t block_word(uint64_t serial)
{
        return mix32(g_tag ^ (serial * 0x9e3779b97f4a7c15ull)) | 1u;
}

/* The stamp over the first 16 bytes (or fewer) and the tail bytes after the
 * last whole word. */
static void block_stamp(uint64_t serial, unsigned char st[16])
{
        uint64_t v[2] = { g_tag ^ serial, ~serial };

        memcpy(st, v, 16);
}

static unsigned char tail_byte(uint64_t serial, size_t i)
{
        return (unsigned char)(serial * 31 + i * 7 + 1);
}

/* Writes the block's pattern; a failed call leaves it marked bad (not
 * checked later: the failure is counted already). */
static void block_write(struct block *b)
{
        unsigned char st[16], tail[4];
        size_t words = b->span / 4 * 4, nst = b->span < 16 ? b->span : 16;

        b->bad = 0;
        if (words && d_access(C_MEMSET, NULL, b->p, words, block_word(b->serial)) != CUDA_SUCCESS)
                b->bad = 1;
        block_stamp(b->serial, st);
        if (!b->bad && d_access(C_HTOD, st, b->p, nst, 0) != CUDA_SUCCESS)
                b->bad = 1;
        if (b->span <= 16)
                return; /* the stamp covered every byte */
        for (size_t i = words; i < b->span; i++)
                tail[i - words] = tail_byte(b->serial, i);
        if (!b->bad && b->span > words && d_access(C_HTOD, tail, b->p + words, b->span - words, 0) != CUDA_SUCCESS)
                b->bad = 1;
}

static unsigned char expected_byte(const struct block *b, size_t i, const unsigned char st[16])
{
        size_t words = b->span / 4 * 4;
        uint32_t w = block_word(b->serial);

        if (i < 16 && i < b->span)
                return st[i];
        if (i >= words)
                return tail_byte(b->serial, i);
        return ((const unsigned char *)&w)[i % 4];
}

/* Reads the block back whole; a mismatch counts one verification failure
 * (and is reported once on stderr). */
static void block_check(struct block *b, const char *what)
{
        unsigned char st[16];
        uint32_t w = block_word(b->serial);
        size_t off, n;

        if (b->bad)
                return;
        block_stamp(b->serial, st);
        if (!g_exp_valid || g_exp_word != w) {
                for (size_t k = 0; k < PIECE / 4; k++)
                        g_exp[k] = w;
                g_exp_word = w;
                g_exp_valid = 1;
        }
        for (off = 0; off < b->span; off += n) {
                size_t lo, hi;
                n = b->span - off < PIECE ? b->span - off : PIECE;
                if (d_access(C_DTOH, g_buf, b->p + off, n, 0) != CUDA_SUCCESS)
                        return; /* counted as a failed call */
                /* The plain word region of this piece, compared at once;
                 * the stamp and the tail byte by byte. */
                lo = off < 16 ? 16 - off : 0;
                hi = b->span / 4 * 4 > off ? b->span / 4 * 4 - off : 0;
                if (hi > n)
                        hi = n;
                lo = (lo + 3) & ~(size_t)3;
                for (size_t i = 0; i < n; i++) {
                        if (i == lo && lo < hi) {
                                if (memcmp(g_buf + lo, (unsigned char *)g_exp + lo, hi - lo) != 0)
                                        goto bad;
                                i = hi - 1;
                                continue;
                        }
                        if (g_buf[i] != expected_byte(b, off + i, st))
                                goto bad;
                }
        }
        return;
bad:
        fprintf(stderr, "e2e_restart: %s block of %zu bytes at %#llx (serial %llu) read back wrong near +%zu\n", what,
                b->size, (unsigned long long)b->p, (unsigned long long)b->serial, off);
        b->bad = 1;
        verify_failed();
}

/* ---- the program's state ---- */

static struct block g_hold[MAX_HOLD];
static int g_nhold;
static struct block g_churn[MAX_CHURN];
static int g_nchurn;
static uint64_t g_serial = 1;
static CUstream g_stream;

struct vmm {
        CUmemGenericAllocationHandle h;
        struct block b;
        int mapped, reserved;
};
static struct vmm g_vmm[MAX_VMM];
static int g_nvmm;

static struct block g_grow[MAX_GROW];
static int g_ngrow;

struct opts {
        uint64_t hold_mib, hold_block_mib;
        int churn, vmm, grow, grow_hold;
        uint64_t big_mib[8];
        int nbig, big_every;
        unsigned sleep_us, verify_ms, tick_ms;
        double duration;
        const char *stop_file, *pause_file;
        uint64_t seed;
};
static struct opts o = {
        .hold_block_mib = 8,
        .big_mib = { 40 },
        .nbig = 1,
        .big_every = 64,
        .sleep_us = 500,
        .verify_ms = 500,
        .tick_ms = 1000,
};

static int exists(const char *path)
{
        struct stat st;

        return path && stat(path, &st) == 0;
}

static int stopping(void)
{
        if (g_stop_sig || exists(o.stop_file))
                return 1;
        return o.duration > 0 && (double)(now_ns() - g_t0) / 1e9 >= o.duration;
}

static CUresult block_alloc(struct block *b, size_t size, int async, enum call c_alloc)
{
        CUresult r;

        memset(b, 0, sizeof(*b));
        b->size = b->span = size;
        b->async = async;
        b->serial = g_serial++;
        if (async)
                r = CU(C_ALLOC_ASYNC, cuMemAllocAsync(&b->p, size, g_stream));
        else if (c_alloc == C_ALLOC)
                r = CU(C_ALLOC, cuMemAlloc(&b->p, size));
        else
                r = cuMemAlloc(&b->p, size); /* timed by the caller */
        if (r != CUDA_SUCCESS)
                return r;
        held_add((int64_t)size);
        return CUDA_SUCCESS;
}

static void block_free(struct block *b, const char *what)
{
        CUresult r;

        block_check(b, what);
        if (b->async)
                r = CU(C_FREE_ASYNC, cuMemFreeAsync(b->p, g_stream));
        else
                r = CU(C_FREE, cuMemFree(b->p));
        (void)r;
        /* Counted as held no more either way: a failed free is reported. */
        held_add(-(int64_t)b->size);
}

static size_t churn_size(int *big)
{
        int k;
        size_t lo;

        *big = 0;
        if (o.nbig && o.big_every > 0 && rnd() % (uint64_t)o.big_every == 0) {
                int have = 0;
                for (int i = 0; i < g_nchurn; i++)
                        have |= g_churn[i].big;
                if (!have) {
                        *big = 1;
                        return o.big_mib[rnd() % (uint64_t)o.nbig] * MiB;
                }
        }
        k = (int)(rnd() % 16); /* 256 B << 0..15: up to 8 MiB */
        lo = (size_t)256 << k;
        if (lo >= 8 * MiB)
                return 8 * MiB;
        return lo + (size_t)(rnd() % lo);
}

/* A step: allocate (and write) or check and free.  At least one block stays
 * live, and after a refused allocation the next step allocates again (after
 * 10 ms) rather than freeing: like an application, the client keeps its
 * working set while allocations fail, so it still has blocks to free when
 * no agent runs. */
static void churn_step(void)
{
        static int refused;
        int alloc;

        if (g_nchurn >= o.churn)
                alloc = 0;
        else if (g_nchurn <= 1 || refused)
                alloc = 1;
        else
                alloc = rnd() % 100 < 55;
        if (alloc) {
                struct block *b = &g_churn[g_nchurn];
                int big;
                size_t size = churn_size(&big);
                int async = rnd() % 4 == 0;
                refused = block_alloc(b, size, async, C_ALLOC) != CUDA_SUCCESS;
                if (refused) {
                        usleep(10000);
                        return;
                }
                b->big = big;
                block_write(b);
                g_nchurn++;
        } else {
                int i = (int)(rnd() % (uint64_t)g_nchurn);
                block_free(&g_churn[i], "churn");
                g_churn[i] = g_churn[--g_nchurn];
        }
}

static void vmm_free(struct vmm *v)
{
        if (v->mapped) {
                block_check(&v->b, "vmm");
                (void)CU(C_UNMAP, cuMemUnmap(v->b.p, v->b.size));
        }
        (void)CU(C_RELEASE, cuMemRelease(v->h));
        if (v->reserved)
                (void)CU(C_ADDRFREE, cuMemAddressFree(v->b.p, v->b.size));
        held_add(-(int64_t)v->b.size);
}

static void vmm_step(void)
{
        CUmemAllocationProp prop;
        CUmemAccessDesc acc;
        struct vmm *v;

        if (g_nvmm > 0 && (g_nvmm >= o.vmm || rnd() % 2)) {
                int i = (int)(rnd() % (uint64_t)g_nvmm);
                vmm_free(&g_vmm[i]);
                g_vmm[i] = g_vmm[--g_nvmm];
                return;
        }
        v = &g_vmm[g_nvmm];
        memset(v, 0, sizeof(*v));
        memset(&prop, 0, sizeof(prop));
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 0;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        v->b.size = v->b.span = (rnd() % 2 ? 4 : 2) * MiB;
        v->b.serial = g_serial++;
        if (CU(C_CREATE, cuMemCreate(&v->h, v->b.size, &prop, 0)) != CUDA_SUCCESS)
                return;
        held_add((int64_t)v->b.size);
        g_nvmm++;
        if (CU(C_RESERVE, cuMemAddressReserve(&v->b.p, v->b.size, 2 * MiB, 0, 0)) != CUDA_SUCCESS) {
                v->b.bad = 1;
                return;
        }
        v->reserved = 1;
        if (CU(C_MAP, cuMemMap(v->b.p, v->b.size, 0, v->h, 0)) != CUDA_SUCCESS) {
                v->b.bad = 1;
                return;
        }
        v->mapped = 1;
        memset(&acc, 0, sizeof(acc));
        acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc.location.id = 0;
        acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        if (CU(C_SETACCESS, cuMemSetAccess(v->b.p, v->b.size, &acc, 1)) != CUDA_SUCCESS) {
                v->b.bad = 1;
                return;
        }
        block_write(&v->b);
}

static void release_churn(void)
{
        while (g_nchurn > 0) {
                g_nchurn--;
                block_free(&g_churn[g_nchurn], "churn");
        }
        while (g_nvmm > 0) {
                g_nvmm--;
                vmm_free(&g_vmm[g_nvmm]);
        }
        if (g_stream)
                (void)CU(C_SYNC, cuStreamSynchronize(g_stream));
}

static void check_all(void)
{
        size_t fr = 0, total = 0;

        for (int i = 0; i < g_nhold; i++)
                block_check(&g_hold[i], "hold");
        for (int i = 0; i < g_nchurn; i++)
                block_check(&g_churn[i], "churn");
        for (int i = 0; i < g_nvmm; i++)
                if (g_vmm[i].mapped)
                        block_check(&g_vmm[i].b, "vmm");
        if (CU(C_GETINFO, cuMemGetInfo(&fr, &total)) == CUDA_SUCCESS) {
                pthread_mutex_lock(&g_mu);
                g_info_free = fr;
                g_info_total = total;
                pthread_mutex_unlock(&g_mu);
        }
}

/* ---- output ---- */

/* The common counters, as JSON members (no braces); under g_mu. */
static void print_counters(FILE *f)
{
        fprintf(f,
                "\"pid\":%d,\"t_ms\":%llu,\"unix_ms\":%llu,\"calls\":%llu,\"failed_calls\":%llu,"
                "\"verify_failures\":%llu,\"faults\":%llu,\"max_ms\":%.3f,\"max_call\":\"%s\","
                "\"bytes_held\":%llu,\"hold_bytes\":%llu,\"grow_bytes\":%llu,\"allocs_ok\":%llu,"
                "\"allocs_failed\":%llu,\"frees_ok\":%llu,\"frees_failed\":%llu,\"free_max_ms\":%.3f,"
                "\"meminfo_free\":%zu,\"meminfo_total\":%zu,\"max_hooked_ms\":%.3f,\"max_hooked_call\":\"%s\","
                "\"first_alloc_fail_unix_ms\":%llu,\"last_alloc_fail_unix_ms\":%llu",
                (int)getpid(), (unsigned long long)((now_ns() - g_t0) / 1000000ull), (unsigned long long)unix_ms(),
                (unsigned long long)g_calls, (unsigned long long)g_failed, (unsigned long long)g_verify_failures,
                (unsigned long long)g_faults, g_max_ms, g_max_call >= 0 ? call_name[g_max_call] : "",
                (unsigned long long)g_bytes_held, (unsigned long long)g_hold_bytes, (unsigned long long)g_grow_bytes,
                (unsigned long long)g_allocs_ok, (unsigned long long)g_allocs_failed, (unsigned long long)g_frees_ok,
                (unsigned long long)g_frees_failed,
                g_st[C_FREE].max_ms > g_st[C_FREE_ASYNC].max_ms ? g_st[C_FREE].max_ms : g_st[C_FREE_ASYNC].max_ms,
                g_info_free, g_info_total, g_max_hooked_ms, g_max_hooked_call >= 0 ? call_name[g_max_hooked_call] : "",
                (unsigned long long)g_first_alloc_fail_ms, (unsigned long long)g_last_alloc_fail_ms);
}

static void print_event(const char *event)
{
        pthread_mutex_lock(&g_mu);
        printf("{\"event\":\"%s\",", event);
        print_counters(stdout);
        printf("}\n");
        fflush(stdout);
        pthread_mutex_unlock(&g_mu);
}

static void print_summary(double seconds)
{
        int first;

        pthread_mutex_lock(&g_mu);
        printf("{\"event\":\"summary\",");
        print_counters(stdout);
        printf(",\"seconds\":%.3f,\"grow_refusals\":%llu,\"failed\":{", seconds, (unsigned long long)g_grow_refusals);
        first = 1;
        for (int c = 0; c < C_N; c++)
                if (g_st[c].failed) {
                        printf("%s\"%s\":%llu", first ? "" : ",", call_name[c], (unsigned long long)g_st[c].failed);
                        first = 0;
                }
        printf("},\"errors\":{");
        first = 1;
        for (int c = 0; c < C_N; c++) {
                if (!g_st[c].failed)
                        continue;
                printf("%s\"%s\":{", first ? "" : ",", call_name[c]);
                first = 0;
                for (int i = 0; i < MAX_ERRS && g_st[c].err[i].n; i++)
                        printf("%s\"%s\":%llu", i ? "," : "", err_name(g_st[c].err[i].r),
                               (unsigned long long)g_st[c].err[i].n);
                if (g_st[c].err_other)
                        printf("%s\"other\":%llu", g_st[c].err[0].n ? "," : "", (unsigned long long)g_st[c].err_other);
                printf("}");
        }
        printf("},\"calls_by_call\":{");
        first = 1;
        for (int c = 0; c < C_N; c++)
                if (g_st[c].calls) {
                        printf("%s\"%s\":%llu", first ? "" : ",", call_name[c], (unsigned long long)g_st[c].calls);
                        first = 0;
                }
        printf("},\"max_ms_by_call\":{");
        first = 1;
        for (int c = 0; c < C_N; c++)
                if (g_st[c].calls) {
                        printf("%s\"%s\":%.3f", first ? "" : ",", call_name[c], g_st[c].max_ms);
                        first = 0;
                }
        printf("}}\n");
        fflush(stdout);
        pthread_mutex_unlock(&g_mu);
}

/* The ticker sleeps on g_tick_cv (CLOCK_MONOTONIC) so that a stop ends it
 * at once; g_ticker_stop is under g_mu. */
static pthread_cond_t g_tick_cv;
static int g_ticker_stop;

static void *ticker(void *arg)
{
        struct timespec at;

        (void)arg;
        clock_gettime(CLOCK_MONOTONIC, &at);
        pthread_mutex_lock(&g_mu);
        for (;;) {
                uint64_t now;
                at.tv_nsec += (long)(o.tick_ms % 1000) * 1000000L;
                at.tv_sec += o.tick_ms / 1000 + at.tv_nsec / 1000000000L;
                at.tv_nsec %= 1000000000L;
                while (!g_ticker_stop && pthread_cond_timedwait(&g_tick_cv, &g_mu, &at) != ETIMEDOUT)
                        ;
                if (g_ticker_stop)
                        break;
                now = now_ns();
                printf("{\"event\":\"tick\",");
                print_counters(stdout);
                printf(",\"interval_max_ms\":%.3f,\"interval_max_hooked_ms\":%.3f,\"inflight_ms\":%.3f}\n",
                       g_interval_max_ms, g_interval_max_hooked_ms,
                       g_inflight_since ? (double)(now - g_inflight_since) / 1e6 : 0.0);
                fflush(stdout);
                g_interval_max_ms = 0;
                g_interval_max_hooked_ms = 0;
        }
        pthread_mutex_unlock(&g_mu);
        return NULL;
}

static int ticker_start(pthread_t *t)
{
        pthread_condattr_t ca;

        if (pthread_condattr_init(&ca) != 0 || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
            pthread_cond_init(&g_tick_cv, &ca) != 0)
                return -1;
        pthread_condattr_destroy(&ca);
        return pthread_create(t, NULL, ticker, NULL) == 0 ? 0 : -1;
}

static void ticker_stop(pthread_t t)
{
        pthread_mutex_lock(&g_mu);
        g_ticker_stop = 1;
        pthread_cond_signal(&g_tick_cv);
        pthread_mutex_unlock(&g_mu);
        pthread_join(t, NULL);
}

/* ---- the modes ---- */

static void hold(void)
{
        uint64_t left = o.hold_mib * MiB;

        while (left > 0 && g_nhold < MAX_HOLD && !stopping()) {
                struct block *b = &g_hold[g_nhold];
                size_t size = left < o.hold_block_mib * MiB ? left : o.hold_block_mib * MiB;
                if (block_alloc(b, size, 0, C_ALLOC) != CUDA_SUCCESS) {
                        /* Counted; try again in a moment (the agent may be
                         * on its way back). */
                        usleep(100000);
                        continue;
                }
                block_write(b);
                g_nhold++;
                left -= size;
                pthread_mutex_lock(&g_mu);
                g_hold_bytes += size;
                pthread_mutex_unlock(&g_mu);
        }
        for (int i = 0; i < g_nhold; i++)
                block_check(&g_hold[i], "hold");
}

static void grow(void)
{
        uint64_t step = 64 * MiB;

        while (step >= MiB && g_ngrow < MAX_GROW && !stopping()) {
                struct block *b = &g_grow[g_ngrow];
                uint64_t t0 = call_begin();
                CUresult r = block_alloc(b, step, 0, C_N);
                int refused = r == CUDA_ERROR_OUT_OF_MEMORY;
                call_end_ex(C_ALLOC, t0, r, !refused);
                if (refused) {
                        pthread_mutex_lock(&g_mu);
                        g_grow_refusals++;
                        pthread_mutex_unlock(&g_mu);
                        step /= 2;
                        continue;
                }
                if (r != CUDA_SUCCESS)
                        break;
                /* Its first 64 KiB only: the growth may be most of a GPU. */
                b->span = step < 64 * 1024 ? step : 64 * 1024;
                block_write(b);
                g_ngrow++;
                pthread_mutex_lock(&g_mu);
                g_grow_bytes += step;
                pthread_mutex_unlock(&g_mu);
        }
        for (int i = 0; i < g_ngrow; i++)
                block_check(&g_grow[i], "grow");
        print_event("grown");
}

static int parse_mib_list(const char *s)
{
        char *end;

        o.nbig = 0;
        while (*s && o.nbig < 8) {
                o.big_mib[o.nbig++] = strtoull(s, &end, 0);
                if (end == s)
                        return -1;
                s = *end == ',' ? end + 1 : end;
        }
        return 0;
}

static void usage(void)
{
        fprintf(stderr, "usage: e2e_restart [--hold MIB] [--hold-block MIB] [--churn K] [--vmm N] [--big MIB,..]\n"
                        "       [--big-every N] [--sleep-us US] [--verify-ms MS] [--duration S] [--stop-file PATH]\n"
                        "       [--pause-file PATH] [--grow] [--grow-hold] [--seed N] [--tick-ms MS]\n");
}

static int parse(int argc, char **argv)
{
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
                int takes = 1;
                if (strcmp(a, "--grow") == 0) {
                        o.grow = 1;
                        takes = 0;
                } else if (strcmp(a, "--grow-hold") == 0) {
                        o.grow = o.grow_hold = 1;
                        takes = 0;
                } else if (!v) {
                        return -1;
                } else if (strcmp(a, "--hold") == 0) {
                        o.hold_mib = strtoull(v, NULL, 0);
                } else if (strcmp(a, "--hold-block") == 0) {
                        o.hold_block_mib = strtoull(v, NULL, 0);
                } else if (strcmp(a, "--churn") == 0) {
                        o.churn = atoi(v);
                } else if (strcmp(a, "--vmm") == 0) {
                        o.vmm = atoi(v);
                } else if (strcmp(a, "--big") == 0) {
                        if (parse_mib_list(v) < 0)
                                return -1;
                } else if (strcmp(a, "--big-every") == 0) {
                        o.big_every = atoi(v);
                } else if (strcmp(a, "--sleep-us") == 0) {
                        o.sleep_us = (unsigned)strtoul(v, NULL, 0);
                } else if (strcmp(a, "--verify-ms") == 0) {
                        o.verify_ms = (unsigned)strtoul(v, NULL, 0);
                } else if (strcmp(a, "--tick-ms") == 0) {
                        o.tick_ms = (unsigned)strtoul(v, NULL, 0);
                } else if (strcmp(a, "--duration") == 0) {
                        o.duration = strtod(v, NULL);
                } else if (strcmp(a, "--stop-file") == 0) {
                        o.stop_file = v;
                } else if (strcmp(a, "--pause-file") == 0) {
                        o.pause_file = v;
                } else if (strcmp(a, "--seed") == 0) {
                        o.seed = strtoull(v, NULL, 0);
                } else {
                        return -1;
                }
                i += takes;
        }
        if (o.churn < 0 || o.churn > MAX_CHURN || o.vmm < 0 || o.vmm > MAX_VMM || o.hold_block_mib == 0 ||
            o.tick_ms == 0 || o.hold_mib / o.hold_block_mib >= MAX_HOLD)
                return -1;
        return 0;
}

static void on_stop(int sig)
{
        (void)sig;
        g_stop_sig = 1;
}

int main(int argc, char **argv)
{
        struct sigaction sa;
        pthread_t tick;
        CUcontext ctx;
        CUdevice dev;
        CUresult r;
        uint64_t next_check, held_at_stop;
        int paused = 0, ok;

        if (parse(argc, argv) < 0) {
                usage();
                return 2;
        }
        g_t0 = now_ns();
        g_tag = ((uint64_t)getpid() << 32) ^ (o.seed * 0x2545f4914f6cdd1dull) ^ 0x5ca1ab1e;
        g_rng = g_tag | 1;
        g_buf = malloc(PIECE);
        g_exp = malloc(PIECE);
        if (!g_buf || !g_exp)
                return 3;

        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_stop;
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sa.sa_handler = on_fault;
        sa.sa_flags = SA_NODEFER;
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);

        if ((r = cuInit(0)) != CUDA_SUCCESS || (r = cuDeviceGet(&dev, 0)) != CUDA_SUCCESS ||
            (r = cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS || (r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS) {
                fprintf(stderr, "e2e_restart: driver init: %s\n", err_name(r));
                return 3;
        }
        if (o.churn && (r = cuStreamCreate(&g_stream, 0)) != CUDA_SUCCESS) {
                fprintf(stderr, "e2e_restart: cuStreamCreate: %s\n", err_name(r));
                return 3;
        }
        if (ticker_start(&tick) < 0)
                return 3;

        hold();
        check_all();
        print_event("ready");
        if (o.grow)
                grow();

        next_check = now_ns() + (uint64_t)o.verify_ms * 1000000ull;
        while (!stopping() && (!o.grow || o.grow_hold)) {
                if (o.pause_file && exists(o.pause_file)) {
                        if (!paused) {
                                release_churn();
                                check_all();
                                paused = 1;
                                print_event("paused");
                        }
                } else if (paused) {
                        paused = 0;
                        print_event("resumed");
                } else {
                        if (o.churn)
                                churn_step();
                        if (o.vmm && rnd() % 8 == 0)
                                vmm_step();
                }
                if (now_ns() >= next_check) {
                        check_all();
                        next_check = now_ns() + (uint64_t)o.verify_ms * 1000000ull;
                }
                if (paused || (!o.churn && !o.vmm))
                        usleep(10000);
                else if (o.sleep_us)
                        usleep(o.sleep_us);
        }

        /* Stop: everything is checked once more, then freed; the summary
         * gives what was held when it stopped. */
        pthread_mutex_lock(&g_mu);
        held_at_stop = g_bytes_held;
        pthread_mutex_unlock(&g_mu);
        check_all();
        release_churn();
        for (int i = 0; i < g_ngrow; i++)
                block_free(&g_grow[i], "grow");
        for (int i = 0; i < g_nhold; i++)
                block_free(&g_hold[i], "hold");
        pthread_mutex_lock(&g_mu);
        g_bytes_held = held_at_stop;
        pthread_mutex_unlock(&g_mu);
        ticker_stop(tick);
        print_summary((double)(now_ns() - g_t0) / 1e9);
        pthread_mutex_lock(&g_mu);
        ok = g_failed == 0 && g_verify_failures == 0;
        pthread_mutex_unlock(&g_mu);
        return ok ? 0 : 1;
}
