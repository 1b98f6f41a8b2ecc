/* check_gate.c — the hook's launch gate (hook/gs_hook_gate.h) on the fake
 * driver.
 *
 * The program is linked with the hook's objects themselves (not the .so),
 * so it reaches gs_gate_* (hidden in libgshare.so, where only the CUDA
 * entry points are exported) and is, for the dynamic linker, an
 * application with the hook built in: its cuLaunchKernel, dlsym and
 * cuGetProcAddress are the hook's, ahead of the fake libcuda.  No agent:
 * the kernels write plain host buffers, which the fake driver reaches. */
#include <check.h>

#include "../gs_check.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gs_hook.h"
#include "gs_hook_gate.h"
#include "../fakecuda/fc_engine.h"

/* The fake driver's test functions (test/fakecuda/fakecuda.c). */
CUfunction fakecuda_fill_kernel(void);
CUfunction fakecuda_spin_kernel(void);
void fakecuda_hold_work(int hold);
uint64_t fakecuda_work_pending(void);
uint64_t fakecuda_launched(void);

static char g_state[128];

static void setup(void)
{
        CUcontext c = NULL;

        snprintf(g_state, sizeof(g_state), "/tmp/gshare-gate-check-%d", (int)getpid());
        unlink(g_state);
        setenv("GSHARE_FAKECUDA_STATE", g_state, 1);
        setenv("GSHARE_FAKECUDA_MEM", "64Mi", 1);
        setenv("GSHARE_FAKECUDA_DEVICES", "1", 1);
        /* No agent: cuInit says so once; nothing here allocates. */
        setenv("GSHARE_SOCKET", "/nonexistent/gshare-check-gate.sock", 1);
        ck_assert_int_eq(cuInit(0), CUDA_SUCCESS);
        ck_assert_int_eq(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuCtxSetCurrent(c), CUDA_SUCCESS);
}

static void teardown(void)
{
        char eng[160];

        snprintf(eng, sizeof(eng), "%s-engine", g_state); /* the fake's model of GPU time */
        unlink(g_state);
        unlink(eng);
}

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);

static CUresult fill_with(launch_fn launch, uint32_t *dst, size_t bytes, uint32_t value, uint32_t delay_us)
{
        CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst;
        void *params[] = { &d, &bytes, &value, &delay_us };

        return launch(fakecuda_fill_kernel(), 1, 1, 1, 64, 1, 1, 0, NULL, params, NULL);
}

static int all_words(const uint32_t *p, size_t n, uint32_t v)
{
        for (size_t i = 0; i < n; i++)
                if (p[i] != v)
                        return 0;
        return 1;
}

/* Joins t; its call returned success and wrote v to buf[0..n). */
static void joined(pthread_t t, const CUresult *r, const uint32_t *buf, size_t n, uint32_t v)
{
        ck_assert_int_eq(pthread_join(t, NULL), 0);
        ck_assert_int_eq(*r, CUDA_SUCCESS);
        ck_assert(all_words(buf, n, v));
}

static void pause_ms(long ms)
{
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

        nanosleep(&ts, NULL);
}

/* Waits (deadline 20 s: only a hang) until n threads wait at the gate. */
static void wait_for_waiting(int n)
{
        for (int i = 0; i < 20000 && gs_gate_waiting() != n; i++)
                pause_ms(1);
        ck_assert_int_eq(gs_gate_waiting(), n);
}

/* A launch from another thread, through one of the ways an application
 * finds the function. */
struct launcher {
        pthread_t t;
        CUcontext ctx;
        launch_fn launch;
        uint32_t *buf;
        uint32_t value;
        CUresult r;
};

static void *launch_thread(void *arg)
{
        struct launcher *l = arg;

        cuCtxSetCurrent(l->ctx);
        l->r = fill_with(l->launch, l->buf, 1024, l->value, 0);
        if (l->r == CUDA_SUCCESS)
                l->r = cuCtxSynchronize();
        return NULL;
}

static void start_launcher(struct launcher *l, launch_fn launch, uint32_t *buf, uint32_t value)
{
        memset(l, 0, sizeof(*l));
        ck_assert_int_eq(cuCtxGetCurrent(&l->ctx), CUDA_SUCCESS);
        l->launch = launch;
        l->buf = buf;
        l->value = value;
        l->r = CUDA_ERROR_UNKNOWN;
        ck_assert_int_eq(pthread_create(&l->t, NULL, launch_thread, l), 0);
}

/* The ways in: the symbol, dlsym on libcuda, cuGetProcAddress (plain and
 * per-thread stream). */
static launch_fn way(int i)
{
        void *fn = NULL, *cuda;

        switch (i) {
        case 0: return cuLaunchKernel;
        case 1:
                cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
                ck_assert_ptr_nonnull(cuda);
                fn = dlsym(cuda, "cuLaunchKernel");
                dlclose(cuda);
                ck_assert_ptr_eq(fn, (void *)cuLaunchKernel);
                break;
        case 2:
                ck_assert_int_eq(cuGetProcAddress_v2("cuLaunchKernel", &fn, 12000, 0, NULL), CUDA_SUCCESS);
                ck_assert_ptr_eq(fn, (void *)cuLaunchKernel);
                break;
        default:
                ck_assert_int_eq(cuGetProcAddress_v2("cuLaunchKernel", &fn, 12000,
                                                     CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL),
                                 CUDA_SUCCESS);
                ck_assert_ptr_eq(fn, (void *)cuLaunchKernel_ptsz);
                break;
        }
        return (launch_fn)fn;
}

/* Not armed: a closed gate holds nothing back. */
START_TEST(test_unarmed_nothing_blocks)
{
        static uint32_t buf[256];
        struct launcher l;
        uint64_t n0;

        setup();
        n0 = fakecuda_launched();
        gs_gate_close();
        for (int i = 0; i < 4; i++) {
                start_launcher(&l, way(i), buf, (uint32_t)i + 1);
                joined(l.t, &l.r, buf, 256, (uint32_t)i + 1);
        }
        ck_assert_uint_eq(fakecuda_launched(), n0 + 4);
        ck_assert_int_eq(gs_gate_waiting(), 0);
        gs_gate_open();
        ck_assert(!gs_gate_armed());
        teardown();
}
END_TEST

/* Armed and closed: a launch from another thread, whichever way it found
 * the function, waits at the gate (it never reaches the driver) until the
 * gate opens. */
START_TEST(test_closed_blocks_launch)
{
        static uint32_t buf[4][256];
        struct launcher l[4];
        uint64_t n0;

        setup();
        gs_gate_arm();
        n0 = fakecuda_launched();
        gs_gate_close();
        for (int i = 0; i < 4; i++)
                start_launcher(&l[i], way(i), buf[i], 0x100u + (uint32_t)i);
        wait_for_waiting(4);
        ck_assert_uint_eq(fakecuda_launched(), n0);
        for (int i = 0; i < 4; i++)
                ck_assert_uint_eq(buf[i][0], 0);
        gs_gate_open();
        for (int i = 0; i < 4; i++)
                joined(l[i].t, &l[i].r, buf[i], 256, 0x100u + (uint32_t)i);
        ck_assert_uint_eq(fakecuda_launched(), n0 + 4);
        ck_assert_int_eq(gs_gate_waiting(), 0);
        teardown();
}
END_TEST

/* A graph launch from another thread, then its stream's synchronize. */
struct grapher {
        pthread_t t;
        CUcontext ctx;
        CUgraphExec x;
        CUstream s;
        CUresult r;
};

static void *graph_thread(void *arg)
{
        struct grapher *g = arg;

        cuCtxSetCurrent(g->ctx);
        g->r = cuGraphLaunch(g->x, g->s);
        if (g->r == CUDA_SUCCESS)
                g->r = cuStreamSynchronize(g->s);
        return NULL;
}

/* cuGraphLaunch is gated too: closed, a graph's launch waits (none of its
 * kernels reaches the driver) until the gate opens; then its kernels run,
 * its spin kernel charged its duration on the fake's engine. */
START_TEST(test_closed_blocks_graph_launch)
{
        static uint32_t buf[256];
        CUdeviceptr d = (CUdeviceptr)(uintptr_t)buf;
        size_t bytes = sizeof(buf);
        uint32_t value = 0x600d, delay = 0, us = 1000;
        void *fillp[] = { &d, &bytes, &value, &delay }, *spinp[] = { &us };
        struct fakecuda_engine_stat st;
        struct grapher g = { .r = CUDA_ERROR_UNKNOWN };
        CUgraph graph;
        uint64_t n0;

        setup();
        ck_assert_int_eq(cuCtxGetCurrent(&g.ctx), CUDA_SUCCESS);
        ck_assert_int_eq(cuStreamCreate(&g.s, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuStreamBeginCapture(g.s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
        ck_assert_int_eq(cuLaunchKernel(fakecuda_spin_kernel(), 1, 1, 1, 1, 1, 1, 0, g.s, spinp, NULL), CUDA_SUCCESS);
        ck_assert_int_eq(cuLaunchKernel(fakecuda_fill_kernel(), 1, 1, 1, 64, 1, 1, 0, g.s, fillp, NULL), CUDA_SUCCESS);
        ck_assert_int_eq(cuStreamEndCapture(g.s, &graph), CUDA_SUCCESS);
        ck_assert_int_eq(cuGraphInstantiate(&g.x, graph, 0), CUDA_SUCCESS);
        gs_gate_arm();
        n0 = fakecuda_launched();
        gs_gate_close();
        ck_assert_int_eq(pthread_create(&g.t, NULL, graph_thread, &g), 0);
        wait_for_waiting(1);
        ck_assert_uint_eq(fakecuda_launched(), n0);
        ck_assert_uint_eq(buf[0], 0);
        gs_gate_open();
        joined(g.t, &g.r, buf, 256, 0x600d);
        ck_assert_uint_eq(fakecuda_launched(), n0 + 2);
        ck_assert_int_eq(fakecuda_engine_stats(0, &st, 1), 1);
        ck_assert_uint_eq(st.kernels, 1);
        ck_assert_uint_eq(st.gpu_ns, 1000000);
        ck_assert_int_eq(cuGraphExecDestroy(g.x), CUDA_SUCCESS);
        ck_assert_int_eq(cuGraphDestroy(graph), CUDA_SUCCESS);
        ck_assert_int_eq(cuStreamDestroy_v2(g.s), CUDA_SUCCESS);
        teardown();
}
END_TEST

struct copier {
        pthread_t t;
        CUcontext ctx;
        uint32_t *buf;
        CUresult r;
};

static void *memset_thread(void *arg)
{
        struct copier *c = arg;
        void *fn = NULL;

        cuCtxSetCurrent(c->ctx);
        /* The versioned name a runtime asks for, through cuGetProcAddress. */
        c->r = cuGetProcAddress_v2("cuMemsetD32", &fn, 12000, 0, NULL);
        if (c->r == CUDA_SUCCESS)
                c->r = fn == (void *)cuMemsetD32_v2 ? ((CUresult(*)(CUdeviceptr, unsigned, size_t))fn)(
                                                              (CUdeviceptr)(uintptr_t)c->buf, 0x77, 16)
                                                    : CUDA_ERROR_NOT_FOUND;
        return NULL;
}

/* Copies and memsets are gated too. */
START_TEST(test_closed_blocks_memset)
{
        static uint32_t buf[16];
        struct copier c = { .buf = buf, .r = CUDA_ERROR_UNKNOWN };

        setup();
        gs_gate_arm();
        ck_assert_int_eq(cuCtxGetCurrent(&c.ctx), CUDA_SUCCESS);
        gs_gate_close();
        ck_assert_int_eq(pthread_create(&c.t, NULL, memset_thread, &c), 0);
        wait_for_waiting(1);
        ck_assert_uint_eq(buf[15], 0);
        gs_gate_open();
        joined(c.t, &c.r, buf, 16, 0x77);
        teardown();
}
END_TEST

/* A kernel launched before the close may still run after it: close does
 * not wait for the GPU, cuCtxSynchronize does.  The kernel is held in the
 * fake driver's queue (so "still running" is certain) and then sleeps
 * delay_us before it writes. */
START_TEST(test_in_flight_until_sync)
{
        static uint32_t buf[1024];

        setup();
        gs_gate_arm();
        fakecuda_hold_work(1);
        ck_assert_int_eq(fill_with(cuLaunchKernel, buf, sizeof(buf), 0xabcd, 100000), CUDA_SUCCESS);
        gs_gate_close();
        ck_assert_uint_eq(fakecuda_work_pending(), 1);
        ck_assert_uint_eq(buf[0], 0);
        fakecuda_hold_work(0);
        ck_assert_int_eq(cuCtxSynchronize(), CUDA_SUCCESS);
        ck_assert_uint_eq(fakecuda_work_pending(), 0);
        ck_assert(all_words(buf, 1024, 0xabcd));
        gs_gate_open();
        teardown();
}
END_TEST

/* The closer's own calls pass its closed gate; a closer inside a wrapper
 * does not wait for itself; closes nest. */
START_TEST(test_closer_inside)
{
        static uint32_t buf[256], mine[256];
        struct launcher l;
        int counted;

        setup();
        gs_gate_arm();
        counted = gs_gate_enter(); /* as if the driver called back into us */
        ck_assert_int_eq(counted, 1);
        gs_gate_close();
        gs_gate_close();
        start_launcher(&l, cuLaunchKernel, buf, 5);
        wait_for_waiting(1);
        ck_assert_int_eq(fill_with(cuLaunchKernel, mine, sizeof(mine), 6, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuMemsetD32_v2((CUdeviceptr)(uintptr_t)mine, 7, 128), CUDA_SUCCESS);
        ck_assert(all_words(mine, 128, 7) && all_words(mine + 128, 128, 6));
        gs_gate_leave(counted);
        gs_gate_open();
        ck_assert_int_eq(gs_gate_waiting(), 1); /* one close still held */
        gs_gate_open();
        joined(l.t, &l.r, buf, 256, 5);
        teardown();
}
END_TEST

/* Many threads launch and memset while the gate closes and opens: while
 * it is closed, no call reaches the driver. */
#define STRESS_THREADS 6
#define STRESS_CALLS 3000
static int g_stop;

static void *stress_thread(void *arg)
{
        struct launcher *l = arg;
        uint32_t *mine = l->buf;

        cuCtxSetCurrent(l->ctx);
        for (int i = 0; i < STRESS_CALLS && l->r == CUDA_SUCCESS; i++) {
                l->r = fill_with(i % 2 ? cuLaunchKernel : cuLaunchKernel_ptsz, mine, 64, (uint32_t)i, 0);
                if (l->r == CUDA_SUCCESS)
                        l->r = cuMemsetD8_v2((CUdeviceptr)(uintptr_t)(mine + 16), 1, 1);
        }
        if (l->r == CUDA_SUCCESS)
                l->r = cuCtxSynchronize();
        __atomic_add_fetch(&g_stop, 1, __ATOMIC_SEQ_CST);
        return NULL;
}

START_TEST(test_many_threads)
{
        static uint32_t bufs[STRESS_THREADS][32];
        struct launcher l[STRESS_THREADS];
        int closes = 0;

        setup();
        gs_gate_arm();
        for (int i = 0; i < STRESS_THREADS; i++) {
                memset(&l[i], 0, sizeof(l[i]));
                ck_assert_int_eq(cuCtxGetCurrent(&l[i].ctx), CUDA_SUCCESS);
                l[i].buf = bufs[i];
                ck_assert_int_eq(pthread_create(&l[i].t, NULL, stress_thread, &l[i]), 0);
        }
        while (__atomic_load_n(&g_stop, __ATOMIC_SEQ_CST) < STRESS_THREADS) {
                uint64_t n;

                gs_gate_close();
                n = fakecuda_launched();
                pause_ms(1);
                ck_assert_uint_eq(fakecuda_launched(), n);
                gs_gate_open();
                closes++;
                /* Closing again at once would keep the waiters out (they
                 * wake to a closed gate): a mover holds it now and then. */
                pause_ms(1);
        }
        for (int i = 0; i < STRESS_THREADS; i++)
                joined(l[i].t, &l[i].r, bufs[i], 16, STRESS_CALLS - 1);
        printf("info: %d closes while %d threads made %d launches and memsets each\n", closes, STRESS_THREADS,
               STRESS_CALLS);
        teardown();
}
END_TEST

/* After fork the child's gate is open and usable. */
START_TEST(test_fork_child_open)
{
        static uint32_t buf[64];
        pid_t pid;
        int status;

        setup();
        gs_gate_arm();
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                gs_gate_close();
                gs_gate_open();
                _exit(gs_gate_armed() && gs_gate_waiting() == 0 ? 0 : 1);
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        ck_assert_int_eq(fill_with(cuLaunchKernel, buf, sizeof(buf), 3, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuCtxSynchronize(), CUDA_SUCCESS);
        ck_assert(all_words(buf, 64, 3));
        teardown();
}
END_TEST

/* The cost of a wrapper over the driver's function: cuMemsetD8_v2 of one
 * byte, direct, through the unarmed wrapper, through the armed open one
 * (ns per call, printed; the figures are the benchmark, not a test). */
static double ns_per_call(CUresult (*fn)(CUdeviceptr, unsigned char, size_t), CUdeviceptr p, int n)
{
        struct timespec a, b;

        clock_gettime(CLOCK_MONOTONIC, &a);
        for (int i = 0; i < n; i++)
                if (fn(p, (unsigned char)i, 1) != CUDA_SUCCESS)
                        return -1;
        clock_gettime(CLOCK_MONOTONIC, &b);
        return ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / n;
}

START_TEST(test_cost)
{
        static unsigned char byte[8];
        CUresult (*direct)(CUdeviceptr, unsigned char, size_t);
        CUdeviceptr p = (CUdeviceptr)(uintptr_t)byte;
        double d[3] = { 1e9, 1e9, 1e9 }, x;
        int n = 500000;

        setup();
        *(void **)&direct = gs_cu_real("cuMemsetD8_v2");
        ck_assert_ptr_nonnull(direct);
        ck_assert_ptr_ne((void *)direct, (void *)cuMemsetD8_v2);
        for (int rep = 0; rep < 5; rep++) {
                x = ns_per_call(direct, p, n);
                d[0] = x < d[0] ? x : d[0];
                x = ns_per_call(cuMemsetD8_v2, p, n);
                d[1] = x < d[1] ? x : d[1];
        }
        gs_gate_arm();
        for (int rep = 0; rep < 5; rep++) {
                x = ns_per_call(cuMemsetD8_v2, p, n);
                d[2] = x < d[2] ? x : d[2];
        }
        ck_assert(d[0] > 0 && d[1] > 0 && d[2] > 0);
        printf("info: cuMemsetD8_v2 of 1 byte on the fake driver, ns per call (best of 5 x %d): direct %.1f, "
               "gate unarmed %.1f (+%.1f), armed open %.1f (+%.1f)\n",
               n, d[0], d[1], d[1] - d[0], d[2], d[2] - d[0]);
        teardown();
}
END_TEST

int main(void)
{
        Suite *s = suite_create("gate");
        TCase *tc = tcase_create("core");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_unarmed_nothing_blocks);
        tcase_add_test(tc, test_closed_blocks_launch);
        tcase_add_test(tc, test_closed_blocks_memset);
        tcase_add_test(tc, test_closed_blocks_graph_launch);
        tcase_add_test(tc, test_in_flight_until_sync);
        tcase_add_test(tc, test_closer_inside);
        tcase_add_test(tc, test_many_threads);
        tcase_add_test(tc, test_fork_child_open);
        tcase_add_test(tc, test_cost);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
