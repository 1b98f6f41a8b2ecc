/* e2e_qos.c — the workloads of compute QoS's test (test_qos.py,
 * docs/compute.md) on the fake driver's model of GPU time: an ordinary
 * driver-API program run under the hook.  Each mode first allocates 1 MiB
 * (the hook registers with the agent; its thread then asks for the
 * compute policy, which GSHARE_HOOK_DEBUG=1 shows on stderr: "compute:
 * class ..."), prints "ready", and waits for a line on stdin.
 *
 *   e2e_qos serve N GAP_US KERNEL_US [poll|jitter|steady]
 *       N requests, GAP_US apart (jitter: a fifth to 1.8 times GAP_US,
 *       at random; steady: one every GAP_US + KERNEL_US, open loop): an
 *       event, a spin kernel of KERNEL_US, an event,
 *       cuEventSynchronize (poll: cuEventQuery until done); prints
 *       "lat P50 P90 MAX RECORDS QUERIES" (model µs, cuEventElapsedTime;
 *       the event records and queries the process made meanwhile beyond
 *       its own: the hook's, fakecuda_event_calls), then serves N more at
 *       each further line on stdin, and exits when stdin closes
 *   e2e_qos train KERNEL_US [SHORT_US [same]]
 *       launches spin kernels of KERNEL_US (grid 2) until stdin closes,
 *       each followed by one of SHORT_US (grid 1; same: grid 2, as a GEMM
 *       kernel of one grid and another K) if given; prints
 *       "trained K" (kernels of KERNEL_US launched)
 *   e2e_qos capped KERNEL_US N [nccl]
 *       N spin kernels of KERNEL_US one after another, then a
 *       synchronize; prints "capped FIRST LAST" (model ns: the start of
 *       the first, the end of the last); nccl: the kernel named as one of
 *       NCCL's (fakecuda_nccl_kernel)
 *   e2e_qos stat PID
 *       the model's accounting of process PID on device 0 (no CUDA call,
 *       no hook needed): "kernels K gpu_ns G now T queued Q" (T: the
 *       model's clock; Q: its kernels queued now, the running one included) */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static CUfunction (*spin_fn)(void);

static void die(const char *what, CUresult r)
{
        printf("error %s %d\n", what, (int)r);
        fflush(stdout);
        exit(1);
}

/* A spin kernel of us (the fake driver's model ignores the grid, which
 * the hook's estimates tell apart: gx). */
static CUresult spin_grid(CUstream s, uint32_t us, unsigned gx)
{
        void *params[] = { &us };

        return cuLaunchKernel(spin_fn(), gx, 1, 1, 1, 1, 1, 0, s, params, NULL);
}

static CUresult spin(CUstream s, uint32_t us)
{
        return spin_grid(s, us, 1);
}

static void setup(void)
{
        CUcontext c;
        CUdeviceptr p;
        CUresult r;

        spin_fn = (CUfunction(*)(void))dlsym(RTLD_DEFAULT, "fakecuda_spin_kernel");
        if (!spin_fn)
                die("no fakecuda_spin_kernel", CUDA_ERROR_NOT_FOUND);
        if ((r = cuInit(0)) != CUDA_SUCCESS)
                die("cuInit", r);
        if ((r = cuDevicePrimaryCtxRetain(&c, 0)) != CUDA_SUCCESS)
                die("retain", r);
        if ((r = cuCtxSetCurrent(c)) != CUDA_SUCCESS)
                die("set current", r);
        if ((r = cuMemAlloc(&p, 1 << 20)) != CUDA_SUCCESS)
                die("alloc", r);
}

static void nap_us(long us)
{
        struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

        nanosleep(&ts, NULL);
}

/* Whether a line came on stdin (0: it closed). */
static int next_line(void)
{
        char line[64];

        return fgets(line, sizeof(line), stdin) != NULL;
}

static void ready(void)
{
        printf("ready\n");
        fflush(stdout);
        if (!next_line())
                exit(0);
}

static int cmp_f(const void *a, const void *b)
{
        float x = *(const float *)a, y = *(const float *)b;

        return x < y ? -1 : x > y;
}

/* A request's end: cuEventSynchronize (a wrapper the hook sees), or with
 * poll, cuEventQuery until done, as an application whose synchronize goes
 * by a path the hook does not see (PyTorch's). */
static CUresult finish(CUevent e, int poll, uint64_t *queries)
{
        CUresult r;

        if (!poll)
                return cuEventSynchronize(e);
        while (++*queries, (r = cuEventQuery(e)) == CUDA_ERROR_NOT_READY)
                nap_us(20);
        return r;
}

static void serve(int n, long gap_us, uint32_t kern_us, int poll, int jitter, int steady)
{
        unsigned seed = 30;
        void (*calls)(uint64_t *, uint64_t *) =
                (void (*)(uint64_t *, uint64_t *))dlsym(RTLD_DEFAULT, "fakecuda_event_calls");
        float *lat = calloc((size_t)n, sizeof(*lat));
        CUevent a, b;
        CUresult r;

        if (!calls)
                die("no fakecuda_event_calls", CUDA_ERROR_NOT_FOUND);
        if (!lat || cuEventCreate(&a, 0) != CUDA_SUCCESS || cuEventCreate(&b, 0) != CUDA_SUCCESS)
                die("events", CUDA_ERROR_OUT_OF_MEMORY);
        ready();
        do {
                uint64_t r0, q0, r1, q1, own = 0;

                struct timespec at;

                calls(&r0, &q0);
                clock_gettime(CLOCK_MONOTONIC, &at);
                for (int i = 0; i < n; i++) {
                        cuEventRecord(a, NULL);
                        if ((r = spin(NULL, kern_us)) != CUDA_SUCCESS)
                                die("launch", r);
                        cuEventRecord(b, NULL);
                        if ((r = finish(b, poll, &own)) != CUDA_SUCCESS)
                                die("sync", r);
                        cuEventElapsedTime(&lat[i], a, b);
                        /* steady: a request every GAP_US + KERNEL_US (a
                         * server fed at a steady rate), whatever this one
                         * took.  jitter: after each, a gap anywhere from a
                         * fifth of GAP_US to 1.8 times it (fed at random). */
                        if (!steady) {
                                nap_us(jitter ? gap_us / 5 + (long)(rand_r(&seed) % (unsigned)(gap_us * 8 / 5 + 1))
                                              : gap_us);
                                continue;
                        }
                        at.tv_nsec += (gap_us + (long)kern_us) * 1000;
                        at.tv_sec += at.tv_nsec / 1000000000;
                        at.tv_nsec %= 1000000000;
                        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
                }
                calls(&r1, &q1);
                qsort(lat, (size_t)n, sizeof(*lat), cmp_f);
                printf("lat %.0f %.0f %.0f %llu %llu\n", lat[n / 2] * 1000, lat[n * 9 / 10] * 1000, lat[n - 1] * 1000,
                       (unsigned long long)(r1 - r0 - 2 * (uint64_t)n), (unsigned long long)(q1 - q0 - own));
                fflush(stdout);
        } while (next_line());
}

static atomic_int g_stop;

static void *stdin_watch(void *arg)
{
        char line[64];

        (void)arg;
        while (fgets(line, sizeof(line), stdin))
                ;
        atomic_store(&g_stop, 1);
        return NULL;
}

static void train(uint32_t kern_us, uint32_t short_us, unsigned short_grid)
{
        unsigned long long k = 0;
        pthread_t t;
        CUresult r;

        ready();
        if (pthread_create(&t, NULL, stdin_watch, NULL) != 0)
                die("thread", CUDA_ERROR_OUT_OF_MEMORY);
        while (!atomic_load(&g_stop)) {
                if ((r = spin_grid(NULL, kern_us, 2)) != CUDA_SUCCESS)
                        die("launch", r);
                k++;
                /* With SHORT_US: each kernel followed by a short one of
                 * the same function, another grid (as cuBLAS runs GEMMs
                 * of every size with one kernel). */
                if (short_us && (r = spin_grid(NULL, short_us, short_grid)) != CUDA_SUCCESS)
                        die("launch", r);
        }
        pthread_join(t, NULL);
        printf("trained %llu\n", k);
        fflush(stdout);
}

static void capped(uint32_t kern_us, int n)
{
        uint64_t (*now)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "fakecuda_engine_now");
        CUevent a, b;
        float ms = 0;
        uint64_t t0;
        CUresult r;

        if (!now || cuEventCreate(&a, 0) != CUDA_SUCCESS || cuEventCreate(&b, 0) != CUDA_SUCCESS)
                die("events", CUDA_ERROR_OUT_OF_MEMORY);
        ready();
        t0 = now();
        cuEventRecord(a, NULL);
        for (int i = 0; i < n; i++)
                if ((r = spin(NULL, kern_us)) != CUDA_SUCCESS)
                        die("launch", r);
        cuEventRecord(b, NULL);
        if ((r = cuCtxSynchronize()) != CUDA_SUCCESS)
                die("sync", r);
        cuEventElapsedTime(&ms, a, b);
        printf("capped %llu %llu\n", (unsigned long long)t0, (unsigned long long)(t0 + (uint64_t)(ms * 1e6)));
        fflush(stdout);
}

/* Work in flight on one stream (20 kernels of kern_us) while a graph is
 * captured on another in the default, global mode, as PyTorch captures:
 * nothing another thread of the process does (the hook's poller of a
 * latency-critical process) may break the capture.  Launches a 100 µs
 * kernel at a time first until the hook tracks them. */
static void capture(uint32_t kern_us)
{
        void (*calls)(uint64_t *, uint64_t *) =
                (void (*)(uint64_t *, uint64_t *))dlsym(RTLD_DEFAULT, "fakecuda_event_calls");
        uint64_t r0, r1, q;
        CUstream busy, cap;
        CUgraph g;
        CUgraphExec x;
        CUresult r;

        if (!calls)
                die("no fakecuda_event_calls", CUDA_ERROR_NOT_FOUND);
        if (cuStreamCreate(&busy, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
            cuStreamCreate(&cap, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
                die("streams", CUDA_ERROR_OUT_OF_MEMORY);
        ready();
        /* Until the hook tracks our launches (an event recorded after
         * one: a latency-critical process beside a process its flag
         * holds), so that its poller runs during the capture. */
        for (;;) {
                calls(&r0, &q);
                if ((r = spin(busy, 100)) != CUDA_SUCCESS || (r = cuStreamSynchronize(busy)) != CUDA_SUCCESS)
                        die("launch", r);
                calls(&r1, &q);
                if (r1 != r0)
                        break;
                nap_us(1000);
        }
        for (int i = 0; i < 20; i++)
                if ((r = spin(busy, kern_us)) != CUDA_SUCCESS)
                        die("launch", r);
        if ((r = cuStreamBeginCapture(cap, CU_STREAM_CAPTURE_MODE_GLOBAL)) != CUDA_SUCCESS)
                die("begin capture", r);
        if ((r = spin(cap, 100)) != CUDA_SUCCESS)
                die("captured launch", r);
        /* The other stream's work is still running: a poller looks at it
         * meanwhile. */
        nap_us(20 * (long)kern_us / 4);
        if ((r = cuStreamEndCapture(cap, &g)) != CUDA_SUCCESS)
                die("end capture", r);
        if ((r = cuGraphInstantiateWithFlags(&x, g, 0)) != CUDA_SUCCESS ||
            (r = cuGraphLaunch(x, cap)) != CUDA_SUCCESS || (r = cuStreamSynchronize(cap)) != CUDA_SUCCESS ||
            (r = cuStreamSynchronize(busy)) != CUDA_SUCCESS)
                die("graph", r);
        printf("captured\n");
        fflush(stdout);
}

/* fc_engine.h's struct fakecuda_engine_stat. */
struct engine_stat {
        int32_t pid;
        uint32_t live;
        uint64_t ctx, gpu_ns, contended_ns, wait_ns, kernels, queued, dropped, turns, preempted, latency_max_ns;
};

static int stat_of(int pid)
{
        int (*fn)(int, int32_t, struct engine_stat *) =
                (int (*)(int, int32_t, struct engine_stat *))dlsym(RTLD_DEFAULT, "fakecuda_engine_pid_stat");
        uint64_t (*now)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "fakecuda_engine_now");
        struct engine_stat st = { 0 };

        if (!fn || !now || fn(0, pid, &st) < 0)
                return 1;
        printf("kernels %llu gpu_ns %llu now %llu queued %llu\n", (unsigned long long)st.kernels,
               (unsigned long long)st.gpu_ns, (unsigned long long)now(), (unsigned long long)st.queued);
        return 0;
}

int main(int argc, char **argv)
{
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (argc == 3 && strcmp(argv[1], "stat") == 0)
                return stat_of(atoi(argv[2]));
        if ((argc == 5 || (argc == 6 && (strcmp(argv[5], "poll") == 0 || strcmp(argv[5], "jitter") == 0 ||
                                         strcmp(argv[5], "steady") == 0))) &&
            strcmp(argv[1], "serve") == 0) {
                setup();
                serve(atoi(argv[2]), atol(argv[3]), (uint32_t)atoi(argv[4]), argc == 6 && argv[5][0] == 'p',
                      argc == 6 && argv[5][0] == 'j', argc == 6 && argv[5][0] == 's');
        } else if ((argc == 3 || argc == 4 || (argc == 5 && strcmp(argv[4], "same") == 0)) &&
                   strcmp(argv[1], "train") == 0) {
                setup();
                train((uint32_t)atoi(argv[2]), argc >= 4 ? (uint32_t)atoi(argv[3]) : 0, argc == 5 ? 2 : 1);
        } else if (argc == 3 && strcmp(argv[1], "capture") == 0) {
                setup();
                capture((uint32_t)atoi(argv[2]));
        } else if ((argc == 4 || (argc == 5 && strcmp(argv[4], "nccl") == 0)) && strcmp(argv[1], "capped") == 0) {
                setup();
                if (argc == 5 && !(spin_fn = (CUfunction(*)(void))dlsym(RTLD_DEFAULT, "fakecuda_nccl_kernel")))
                        die("no fakecuda_nccl_kernel", CUDA_ERROR_NOT_FOUND);
                capped((uint32_t)atoi(argv[2]), atoi(argv[3]));
        } else {
                fprintf(stderr,
                        "usage: e2e_qos serve N GAP_US KERNEL_US [poll|jitter|steady] | train KERNEL_US [SHORT_US [same]] | capped KERNEL_US N [nccl] | capture KERNEL_US\n");
                return 2;
        }
        return 0;
}
