/* check_gputime.c — the fake driver's model of GPU time (fc_engine.h):
 * kernels with durations, contexts of different processes time-sliced on
 * one engine, completion through the driver API.
 *
 * Every schedule asserted here is set up with the model's clock held
 * (fakecuda_engine_hold): all processes queue their work at the same model
 * time, so the model's figures are exact and the same however the OS runs
 * the test processes.  Nothing asserts on wall-clock time. */
#include <check.h>

#include "../gs_check.h"
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../hook/gs_cudadecl.h"
#include "fc_engine.h"

CUfunction fakecuda_fill_kernel(void);
CUfunction fakecuda_spin_kernel(void);
uint64_t fakecuda_launched(void);
uint64_t fakecuda_work_pending(void);

#define MS 1000000ull /* ns */

static char g_state[128];
static const char *g_self; /* argv[0]: this program, for its queuer children */

static void setup(const char *slice_us)
{
        CUcontext c;

        snprintf(g_state, sizeof(g_state), "/tmp/gshare-fakecuda-gputime-%d", (int)getpid());
        setenv("GSHARE_FAKECUDA_STATE", g_state, 1);
        if (slice_us)
                setenv("GSHARE_FAKECUDA_TIMESLICE_US", slice_us, 1);
        else
                unsetenv("GSHARE_FAKECUDA_TIMESLICE_US");
        ck_assert_int_eq(cuInit(0), CUDA_SUCCESS);
        ck_assert_int_eq(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuCtxSetCurrent(c), CUDA_SUCCESS);
}

static void teardown(void)
{
        char eng[160];

        snprintf(eng, sizeof(eng), "%s-engine", g_state);
        unlink(g_state);
        unlink(eng);
}

static CUresult spin(CUstream s, uint32_t us)
{
        void *params[] = { &us };

        return cuLaunchKernel(fakecuda_spin_kernel(), 1, 1, 1, 1, 1, 1, 0, s, params, NULL);
}

static CUresult fill(CUstream s, uint32_t *dst, size_t bytes, uint32_t value)
{
        CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst;
        uint32_t delay = 0;
        void *params[] = { &d, &bytes, &value, &delay };

        return cuLaunchKernel(fakecuda_fill_kernel(), 1, 1, 1, 1, 1, 1, 0, s, params, NULL);
}

static CUevent event(CUstream s)
{
        CUevent e;

        ck_assert_int_eq(cuEventCreate(&e, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuEventRecord(e, s), CUDA_SUCCESS);
        return e;
}

/* Model time between two completed events, ns (rounded from ms). */
static uint64_t elapsed_ns(CUevent a, CUevent b)
{
        float ms = -1;

        ck_assert_int_eq(cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
        return (uint64_t)((double)ms * 1e6 + 0.5);
}

/* Within 1 µs (float ms). */
#define ck_assert_ns(a, b)                                                                                            \
        ck_assert_msg((a) + 1000 >= (b) && (b) + 1000 >= (a), "%s = %llu ns, want %llu", #a, (unsigned long long)(a), \
                      (unsigned long long)(b))

/* The accounting of process pid's context on device 0. */
static struct fakecuda_engine_stat stat_of(pid_t pid)
{
        struct fakecuda_engine_stat st[32];
        int n = fakecuda_engine_stats(0, st, 32);

        ck_assert_int_ge(n, 0);
        for (int i = 0; i < n && i < 32; i++)
                if (st[i].pid == pid)
                        return st[i];
        ck_abort_msg("no context of pid %d", (int)pid);
        return st[0];
}

/* The queuer's body, in a process of its own: queues n kernels of us each
 * on its primary context, says so on fd, then synchronizes (or, hold:
 * holds the clock first and waits to be killed). */
static int queuer_main(int n, uint32_t us, int hold, int fd)
{
        CUcontext c;
        int ok = cuInit(0) == CUDA_SUCCESS && cuDevicePrimaryCtxRetain(&c, 0) == CUDA_SUCCESS &&
                 cuCtxSetCurrent(c) == CUDA_SUCCESS;

        ok = ok && (!hold || fakecuda_engine_hold(1) == 0);
        for (int i = 0; i < n; i++)
                ok = ok && spin(NULL, us) == CUDA_SUCCESS;
        (void)!write(fd, ok ? "y" : "n", 1);
        if (hold)
                for (;;)
                        pause();
        return ok && cuCtxSynchronize() == CUDA_SUCCESS ? 0 : 1;
}

/* A child process running queuer_main.  It is this program again, exec'd
 * (argv: queue N US HOLD FD): the test process has the driver's threads,
 * and a forked copy of a threaded process may not start threads of its
 * own (ThreadSanitizer refuses; POSIX allows only async-signal-safe calls).
 * By argv[0], not /proc/self/exe: under valgrind that is valgrind's tool. */
static pid_t queuer(int n, uint32_t us, int hold, int fd)
{
        char a[4][16];
        pid_t pid;

        snprintf(a[0], sizeof(a[0]), "%d", n);
        snprintf(a[1], sizeof(a[1]), "%u", us);
        snprintf(a[2], sizeof(a[2]), "%d", hold);
        snprintf(a[3], sizeof(a[3]), "%d", fd);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                execl(g_self, "check_gputime", "queue", a[0], a[1], a[2], a[3], (char *)NULL);
                _exit(127);
        }
        return pid;
}

static void wait_for(int fd)
{
        char c = 0;

        ck_assert_int_eq(read(fd, &c, 1), 1);
        ck_assert_int_eq(c, 'y');
}

static void reap_ok(pid_t pid)
{
        int status;

        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A lone context has the engine to itself: kernels longer than the slice
 * are not preempted, the time is all its own; while the clock is held its
 * work is pending, and a synchronize waits without burning a core. */
START_TEST(test_lone_context)
{
        struct fakecuda_engine_stat st;
        struct rusage r0, r1;
        CUevent e0, e1;
        CUstream s;
        float ms;

        setup(NULL);
        ck_assert_uint_eq(fakecuda_engine_timeslice_us(), FC_ENG_DEFAULT_SLICE_US);
        ck_assert_int_eq(cuStreamCreate(&s, 0), CUDA_SUCCESS);
        ck_assert_int_eq(fakecuda_engine_hold(1), 0);
        e0 = event(s);
        for (int i = 0; i < 4; i++)
                ck_assert_int_eq(spin(s, 3000), CUDA_SUCCESS);
        e1 = event(s);
        ck_assert_uint_eq(fakecuda_launched(), 4);
        ck_assert_int_eq(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
        ck_assert_int_eq(cuEventQuery(e0), CUDA_SUCCESS);
        ck_assert_int_eq(cuEventQuery(e1), CUDA_ERROR_NOT_READY);
        ck_assert_int_eq(cuEventElapsedTime(&ms, e0, e1), CUDA_ERROR_NOT_READY);
        st = stat_of(getpid());
        ck_assert_uint_eq(st.queued, 4);
        ck_assert_uint_eq(st.gpu_ns, 0);
        ck_assert_int_eq(fakecuda_engine_hold(0), 0);
        ck_assert_int_eq(cuEventSynchronize(e1), CUDA_SUCCESS);
        ck_assert_int_eq(cuStreamQuery(s), CUDA_SUCCESS);
        ck_assert_ns(elapsed_ns(e0, e1), 12 * MS);
        st = stat_of(getpid());
        ck_assert_uint_eq(st.gpu_ns, 12 * MS);
        ck_assert_uint_eq(st.kernels, 4);
        ck_assert_uint_eq(st.queued, 0);
        ck_assert_uint_eq(st.wait_ns, 0);
        ck_assert_uint_eq(st.contended_ns, 0);
        ck_assert_uint_eq(st.turns, 1);
        ck_assert_uint_eq(st.preempted, 0);
        ck_assert_uint_eq(st.latency_max_ns, 12 * MS);

        /* Half a second of GPU time waited for: the waiter sleeps (a spin
         * would use about that much CPU). */
        ck_assert_int_eq(getrusage(RUSAGE_SELF, &r0), 0);
        ck_assert_int_eq(spin(s, 500000), CUDA_SUCCESS);
        ck_assert_int_eq(cuCtxSynchronize(), CUDA_SUCCESS);
        ck_assert_int_eq(getrusage(RUSAGE_SELF, &r1), 0);
        {
                long us =
                        (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) * 1000000L +
                        (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec - r0.ru_stime.tv_usec);
                ck_assert_msg(us < 100000, "waiting 500 ms of GPU time used %ld us of CPU", us);
        }
        ck_assert_uint_eq(stat_of(getpid()).gpu_ns, 512 * MS);
        /* More kernels than a context's queue holds: the launch waits for
         * room, none is lost. */
        for (int i = 0; i < 700; i++)
                ck_assert_int_eq(spin(s, 10), CUDA_SUCCESS);
        ck_assert_int_eq(cuCtxSynchronize(), CUDA_SUCCESS);
        ck_assert_uint_eq(stat_of(getpid()).kernels, 705);
        ck_assert_uint_eq(stat_of(getpid()).gpu_ns, 519 * MS);
        ck_assert_int_eq(cuStreamDestroy_v2(s), CUDA_SUCCESS);
        teardown();
}
END_TEST

/* Two processes saturating the engine get half each: slices alternate. */
START_TEST(test_two_processes_half_each)
{
        struct fakecuda_engine_stat c, p;
        CUevent e0, e1;
        int fd[2];
        pid_t pid;

        setup("1000");
        ck_assert_uint_eq(fakecuda_engine_timeslice_us(), 1000);
        ck_assert_int_eq(pipe(fd), 0);
        ck_assert_int_eq(fakecuda_engine_hold(1), 0);
        pid = queuer(20, 5000, 0, fd[1]);
        wait_for(fd[0]);
        e0 = event(NULL);
        for (int i = 0; i < 20; i++)
                ck_assert_int_eq(spin(NULL, 5000), CUDA_SUCCESS);
        e1 = event(NULL);
        ck_assert_int_eq(fakecuda_engine_hold(0), 0);
        ck_assert_int_eq(cuEventSynchronize(e1), CUDA_SUCCESS);
        reap_ok(pid);
        /* 100 ms of work each, in 1 ms turns: ours ends after 200 ms. */
        ck_assert_ns(elapsed_ns(e0, e1), 200 * MS);
        c = stat_of(pid);
        p = stat_of(getpid());
        ck_assert_uint_eq(c.gpu_ns, 100 * MS);
        ck_assert_uint_eq(p.gpu_ns, 100 * MS);
        ck_assert_uint_eq(c.kernels, 20);
        ck_assert_uint_eq(p.kernels, 20);
        /* The child queued first and went first: it had the engine 100 ms
         * while we waited, we had it 99 ms while it waited (our last
         * slice ran alone). */
        ck_assert_uint_eq(c.contended_ns, 100 * MS);
        ck_assert_uint_eq(p.contended_ns, 99 * MS);
        ck_assert_uint_eq(p.wait_ns, 100 * MS);
        ck_assert_uint_eq(c.wait_ns, 99 * MS);
        ck_assert_uint_eq(c.turns, 100);
        ck_assert_uint_eq(p.turns, 100);
        ck_assert_uint_eq(c.preempted, 99);
        ck_assert_uint_eq(p.preempted, 99);
        ck_assert_uint_eq(c.live, 0); /* exited; its accounting stays */
        ck_assert_uint_eq(c.dropped, 0);
        teardown();
}
END_TEST

/* A short kernel beside another process's long queue waits for that
 * process's slice; a kernel longer than a slice is preempted and waits a
 * slice at each of its turns. */
START_TEST(test_latency_beside_a_queue)
{
        struct fakecuda_engine_stat p;
        CUevent e0, e1, e2;
        int fd[2];
        pid_t pid;

        setup("2000");
        ck_assert_int_eq(pipe(fd), 0);
        ck_assert_int_eq(fakecuda_engine_hold(1), 0);
        pid = queuer(50, 4000, 0, fd[1]);
        wait_for(fd[0]);
        e0 = event(NULL);
        ck_assert_int_eq(spin(NULL, 500), CUDA_SUCCESS);
        e1 = event(NULL);
        ck_assert_int_eq(spin(NULL, 7000), CUDA_SUCCESS);
        e2 = event(NULL);
        ck_assert_int_eq(fakecuda_engine_hold(0), 0);
        ck_assert_int_eq(cuEventSynchronize(e2), CUDA_SUCCESS);
        /* 0.5 ms alone; 2.5 ms behind the other's 2 ms slice. */
        ck_assert_ns(elapsed_ns(e0, e1), 2500000);
        /* 7 ms: 1.5 in the rest of that slice, then 2 + 2 + 1.5, each
         * behind another 2 ms of the other's. */
        ck_assert_ns(elapsed_ns(e1, e2), 13 * MS);
        p = stat_of(getpid());
        ck_assert_uint_eq(p.gpu_ns, 7500000);
        ck_assert_uint_eq(p.wait_ns, 8 * MS);
        ck_assert_uint_eq(p.latency_max_ns, 15500000);
        ck_assert_uint_eq(p.turns, 4);
        ck_assert_uint_eq(p.preempted, 3);
        ck_assert_int_eq(kill(pid, SIGKILL), 0);
        waitpid(pid, NULL, 0);
        teardown();
}
END_TEST

/* A process killed with work queued (and the clock held) does not wedge
 * the others: its queue is dropped, its hold let go. */
START_TEST(test_killed_process_dropped)
{
        struct fakecuda_engine_stat c, p;
        CUevent e0, e1;
        int fd[2];
        pid_t pid;

        setup(NULL);
        ck_assert_int_eq(pipe(fd), 0);
        pid = queuer(50, 100000, 1, fd[1]);
        wait_for(fd[0]);
        ck_assert_uint_eq(stat_of(pid).queued, 50);
        e0 = event(NULL);
        ck_assert_int_eq(spin(NULL, 1000), CUDA_SUCCESS);
        e1 = event(NULL);
        ck_assert_int_eq(cuEventQuery(e1), CUDA_ERROR_NOT_READY);
        ck_assert_int_eq(kill(pid, SIGKILL), 0);
        ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
        ck_assert_int_eq(cuCtxSynchronize(), CUDA_SUCCESS);
        /* It never ran (the clock was held until it died): ours ran alone. */
        ck_assert_ns(elapsed_ns(e0, e1), 1 * MS);
        c = stat_of(pid);
        p = stat_of(getpid());
        ck_assert_uint_eq(c.live, 0);
        ck_assert_uint_eq(c.dropped, 50);
        ck_assert_uint_eq(c.queued, 0);
        ck_assert_uint_eq(c.gpu_ns, 0);
        ck_assert_uint_eq(p.gpu_ns, 1 * MS);
        ck_assert_uint_eq(p.latency_max_ns, 1 * MS);
        teardown();
}
END_TEST

/* Within a context, each stream's work completes in order: a fill after a
 * spin kernel on a stream writes after it; events after each stream's
 * kernel complete when that kernel has. */
START_TEST(test_stream_order)
{
        static uint32_t buf[256];
        CUstream s1, s2;
        CUevent e0, e1, e2;

        setup("2000");
        ck_assert_int_eq(cuStreamCreate(&s1, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuStreamCreate(&s2, 0), CUDA_SUCCESS);
        ck_assert_int_eq(fakecuda_engine_hold(1), 0);
        e0 = event(s1);
        ck_assert_int_eq(spin(s1, 3000), CUDA_SUCCESS);
        ck_assert_int_eq(fill(s1, buf, sizeof(buf), 0x5a5a5a5a), CUDA_SUCCESS);
        e1 = event(s1);
        ck_assert_int_eq(spin(s2, 1000), CUDA_SUCCESS);
        e2 = event(s2);
        ck_assert_uint_eq(fakecuda_work_pending(), 5);
        ck_assert_int_eq(cuStreamQuery(s1), CUDA_ERROR_NOT_READY);
        ck_assert_int_eq(cuStreamQuery(s2), CUDA_ERROR_NOT_READY);
        ck_assert_uint_eq(buf[0], 0);
        ck_assert_int_eq(fakecuda_engine_hold(0), 0);
        ck_assert_int_eq(cuStreamSynchronize(s1), CUDA_SUCCESS);
        ck_assert_uint_eq(buf[0], 0x5a5a5a5a);
        ck_assert_uint_eq(buf[255], 0x5a5a5a5a);
        ck_assert_int_eq(cuStreamSynchronize(s2), CUDA_SUCCESS);
        ck_assert_ns(elapsed_ns(e0, e1), 3 * MS);
        ck_assert_ns(elapsed_ns(e0, e2), 4 * MS); /* one engine: after s1's */
        ck_assert_int_eq(cuStreamQuery(s1), CUDA_SUCCESS);
        ck_assert_int_eq(cuEventDestroy_v2(e1), CUDA_SUCCESS);
        ck_assert_int_eq(cuStreamDestroy_v2(s1), CUDA_SUCCESS);
        ck_assert_int_eq(cuStreamDestroy_v2(s2), CUDA_SUCCESS);
        teardown();
}
END_TEST

/* Two contexts of one process are two contexts of the engine (they
 * time-slice like any two); the process's figures are their sum. */
START_TEST(test_process_sums_contexts)
{
        struct fakecuda_engine_stat st[4], sum;
        CUcontext primary, other;
        CUevent e0, e1;

        setup("2000");
        ck_assert_int_eq(cuCtxGetCurrent(&primary), CUDA_SUCCESS);
        ck_assert_int_eq(fakecuda_engine_hold(1), 0);
        e0 = event(NULL);
        ck_assert_int_eq(spin(NULL, 3000), CUDA_SUCCESS);
        ck_assert_int_eq(cuCtxCreate(&other, 0, 0), CUDA_SUCCESS);
        ck_assert_int_eq(spin(NULL, 3000), CUDA_SUCCESS);
        e1 = event(NULL);
        ck_assert_int_eq(fakecuda_engine_hold(0), 0);
        ck_assert_int_eq(cuCtxSynchronize(), CUDA_SUCCESS);
        /* 2 + 2 + 1 (the first done) + 1 (the other, then alone). */
        ck_assert_ns(elapsed_ns(e0, e1), 6 * MS);
        ck_assert_int_eq(fakecuda_engine_stats(0, st, 4), 2);
        ck_assert_uint_eq(st[0].gpu_ns, 3 * MS);
        ck_assert_uint_eq(st[1].gpu_ns, 3 * MS);
        ck_assert_uint_eq(st[0].ctx, (uint64_t)(uintptr_t)primary);
        ck_assert_uint_eq(st[1].ctx, (uint64_t)(uintptr_t)other);
        ck_assert_int_eq(fakecuda_engine_pid_stat(0, getpid(), &sum), 2);
        ck_assert_uint_eq(sum.gpu_ns, 6 * MS);
        ck_assert_uint_eq(sum.kernels, 2);
        ck_assert_uint_eq(sum.contended_ns, 5 * MS); /* 2 + 1 of the first, 2 of the other */
        ck_assert_uint_eq(sum.wait_ns, 5 * MS);
        ck_assert_uint_eq(sum.latency_max_ns, 6 * MS);
        ck_assert_int_eq(fakecuda_engine_pid_stat(0, getpid() + 1, &sum), 0);
        ck_assert_int_eq(cuCtxDestroy_v2(other), CUDA_SUCCESS);
        teardown();
}
END_TEST

/* Events' errors; a captured graph charges its kernels' durations at each
 * launch, and its fill kernel runs in order. */
START_TEST(test_events_and_graphs)
{
        static uint32_t buf[64];
        CUevent a, b, nt, e0, e1;
        CUgraph g;
        CUgraphExec x;
        CUstream s;
        void *fn = NULL;
        float ms;

        setup(NULL);
        ck_assert_int_eq(cuStreamCreate(&s, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuEventCreate(&a, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuEventCreate(&b, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuEventCreate(&nt, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
        ck_assert_int_eq(cuEventQuery(a), CUDA_SUCCESS); /* never recorded: complete */
        ck_assert_int_eq(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE);
        ck_assert_int_eq(cuEventRecord(a, s), CUDA_SUCCESS);
        ck_assert_int_eq(cuEventRecord(nt, s), CUDA_SUCCESS);
        ck_assert_int_eq(cuEventElapsedTime(&ms, a, nt), CUDA_ERROR_INVALID_HANDLE);
        ck_assert_int_eq(cuEventElapsedTime(&ms, a, (CUevent)buf), CUDA_ERROR_INVALID_HANDLE);

        ck_assert_int_eq(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
        for (int i = 0; i < 3; i++)
                ck_assert_int_eq(spin(s, 1000), CUDA_SUCCESS);
        ck_assert_int_eq(fill(s, buf, sizeof(buf), 77), CUDA_SUCCESS);
        ck_assert_int_eq(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
        ck_assert_uint_eq(fakecuda_launched(), 0); /* captured, not run */
        ck_assert_int_eq(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);
        ck_assert_int_eq(cuGetProcAddress_v2("cuGraphLaunch", &fn, 12000, 0, NULL), CUDA_SUCCESS);
        ck_assert_ptr_eq(fn, (void *)cuGraphLaunch);
        ck_assert_int_eq(cuGraphLaunch((CUgraphExec)g, s), CUDA_ERROR_INVALID_HANDLE);

        ck_assert_int_eq(fakecuda_engine_hold(1), 0);
        ck_assert_int_eq(cuEventRecord(e0 = a, s), CUDA_SUCCESS);
        ck_assert_int_eq(cuGraphLaunch(x, s), CUDA_SUCCESS);
        ck_assert_int_eq(cuGraphLaunch(x, s), CUDA_SUCCESS);
        ck_assert_int_eq(cuEventRecord(e1 = b, s), CUDA_SUCCESS);
        ck_assert_int_eq(cuEventQuery(e1), CUDA_ERROR_NOT_READY);
        ck_assert_uint_eq(buf[0], 0);
        ck_assert_int_eq(fakecuda_engine_hold(0), 0);
        ck_assert_int_eq(cuEventSynchronize(e1), CUDA_SUCCESS);
        ck_assert_ns(elapsed_ns(e0, e1), 6 * MS);
        ck_assert_uint_eq(buf[63], 77);
        ck_assert_uint_eq(stat_of(getpid()).kernels, 6);
        ck_assert_uint_eq(stat_of(getpid()).gpu_ns, 6 * MS);
        ck_assert_uint_eq(fakecuda_launched(), 8);

        /* Recorded again on an idle stream while a record is pending: the
         * event is the latest record's (complete); destroying it waits for
         * the pending one, which leaves it alone. */
        {
                CUstream s2;
                CUevent ev;

                ck_assert_int_eq(cuStreamCreate(&s2, 0), CUDA_SUCCESS);
                ck_assert_int_eq(cuEventCreate(&ev, 0), CUDA_SUCCESS);
                ck_assert_int_eq(fakecuda_engine_hold(1), 0);
                ck_assert_int_eq(spin(s, 1000), CUDA_SUCCESS);
                ck_assert_int_eq(cuEventRecord(ev, s), CUDA_SUCCESS);
                ck_assert_int_eq(cuEventQuery(ev), CUDA_ERROR_NOT_READY);
                ck_assert_int_eq(cuEventRecord(ev, s2), CUDA_SUCCESS);
                ck_assert_int_eq(cuEventQuery(ev), CUDA_SUCCESS);
                ck_assert_int_eq(fakecuda_engine_hold(0), 0);
                ck_assert_int_eq(cuEventDestroy_v2(ev), CUDA_SUCCESS);
                ck_assert_int_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
                ck_assert_int_eq(cuStreamDestroy_v2(s2), CUDA_SUCCESS);
        }
        ck_assert_int_eq(cuGraphExecDestroy(x), CUDA_SUCCESS);
        ck_assert_int_eq(cuGraphExecDestroy(x), CUDA_ERROR_INVALID_HANDLE);
        ck_assert_int_eq(cuGraphDestroy(g), CUDA_SUCCESS);
        ck_assert_int_eq(cuEventDestroy_v2(nt), CUDA_SUCCESS);
        ck_assert_int_eq(cuStreamDestroy_v2(s), CUDA_SUCCESS);
        /* A duration past 10 s is refused. */
        ck_assert_int_eq(spin(NULL, FC_ENG_MAX_US + 1), CUDA_ERROR_INVALID_VALUE);
        teardown();
}
END_TEST

int main(int argc, char **argv)
{
        Suite *s;
        TCase *tc;

        g_self = argv[0];
        if (argc == 6 && strcmp(argv[1], "queue") == 0)
                return queuer_main(atoi(argv[2]), (uint32_t)strtoul(argv[3], NULL, 10), atoi(argv[4]), atoi(argv[5]));
        s = suite_create("gputime");
        tc = tcase_create("core");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_lone_context);
        tcase_add_test(tc, test_two_processes_half_each);
        tcase_add_test(tc, test_latency_beside_a_queue);
        tcase_add_test(tc, test_killed_process_dropped);
        tcase_add_test(tc, test_stream_order);
        tcase_add_test(tc, test_process_sums_contexts);
        tcase_add_test(tc, test_events_and_graphs);
        suite_add_tcase(s, tc);
        return gs_check_run(s);
}
