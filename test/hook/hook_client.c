/* hook_client.c — a CUDA program for the hook's tests, linked against the
 * fake driver and run with libgshare.so preloaded (test/hook/test_hook.sh).
 * One scenario per argument; exits 0 when every expectation held, else
 * prints the failed check and exits 1. */
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gs_cudadecl.h"

#define MiB (1ull << 20)
#define CHUNK (2 * MiB)

static int g_failed;

#define EXPECT(cond)                                                                                   \
        do {                                                                                           \
                if (!(cond)) {                                                                         \
                        fprintf(stdout, "%s:%d: expectation failed: %s\n", __FILE__, __LINE__, #cond); \
                        g_failed = 1;                                                                  \
                }                                                                                      \
        } while (0)

static void init_ctx(void)
{
        CUcontext c;

        EXPECT(cuInit(0) == CUDA_SUCCESS);
        EXPECT(cuDevicePrimaryCtxRetain(&c, 0) == CUDA_SUCCESS);
        EXPECT(cuCtxSetCurrent(c) == CUDA_SUCCESS);
}

static void t_failclosed(void)
{
        CUdeviceptr p;
        size_t f, t;

        init_ctx();
        EXPECT(cuMemAlloc_v2(&p, 4096) == CUDA_ERROR_OUT_OF_MEMORY);
        EXPECT(cuMemAlloc_v2(&p, 1) == CUDA_ERROR_OUT_OF_MEMORY);
        EXPECT(cuMemGetInfo_v2(&f, &t) == CUDA_ERROR_OUT_OF_MEMORY);
        EXPECT(cuMemAllocAsync(&p, 4096, NULL) == CUDA_ERROR_OUT_OF_MEMORY);
}

/* Lookups through dlsym and cuGetProcAddress give the hook's functions for
 * what it interposes and the driver's for the rest. */
static void t_lookup(void)
{
        static const char *const hooked[] = { "cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2", "cuInit",
                                              "cuGetProcAddress_v2", "cuMemAllocAsync", "cuDeviceTotalMem_v2",
                                              "cuMemGetAddressRange_v2", "cuMemAllocPitch_v2",
                                              /* the launch gate's (gs_hook_gate.h) */
                                              "cuMemcpyHtoD_v2", "cuLaunchKernel", "cuLaunchKernel_ptsz" };
        static const char *const passed[] = { "cuStreamCreate", "cuCtxSetCurrent", "cuMemMap", "cuDeviceGet" };
        void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
        void *hook = dlopen("libgshare.so", RTLD_NOW | RTLD_NOLOAD);
        CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
        CUdriverProcAddressQueryResult st;
        Dl_info info;
        void *fn;

        EXPECT(cuda && hook);
        if (!cuda || !hook)
                return;
        for (size_t i = 0; i < sizeof(hooked) / sizeof(hooked[0]); i++) {
                fn = dlsym(cuda, hooked[i]);
                EXPECT(fn && fn == dlsym(hook, hooked[i]));
        }
        for (size_t i = 0; i < sizeof(passed) / sizeof(passed[0]); i++) {
                fn = dlsym(cuda, passed[i]);
                EXPECT(fn && dladdr(fn, &info) && strstr(info.dli_fname, "libcuda"));
        }
        *(void **)&gpa = dlsym(cuda, "cuGetProcAddress_v2");
        EXPECT(gpa && (void *)gpa == dlsym(hook, "cuGetProcAddress_v2"));
        if (!gpa)
                return;
        EXPECT(gpa("cuMemAlloc", &fn, 12000, 0, &st) == CUDA_SUCCESS && fn == dlsym(hook, "cuMemAlloc_v2"));
        EXPECT(gpa("cuMemAlloc", &fn, 3000, 0, &st) == CUDA_SUCCESS && fn == dlsym(hook, "cuMemAlloc"));
        EXPECT(gpa("cuMemGetInfo", &fn, 13000, 0, &st) == CUDA_SUCCESS && fn == dlsym(hook, "cuMemGetInfo_v2"));
        EXPECT(gpa("cuMemAllocAsync", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st) == CUDA_SUCCESS &&
               fn == dlsym(hook, "cuMemAllocAsync_ptsz"));
        EXPECT(gpa("cuGetProcAddress", &fn, 12000, 0, &st) == CUDA_SUCCESS && fn == (void *)gpa);
        EXPECT(gpa("cuMemcpyHtoD", &fn, 12000, 0, &st) == CUDA_SUCCESS && fn == dlsym(hook, "cuMemcpyHtoD_v2"));
        EXPECT(gpa("cuLaunchKernel", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st) == CUDA_SUCCESS &&
               fn == dlsym(hook, "cuLaunchKernel_ptsz"));
        EXPECT(gpa("cuCtxSetCurrent", &fn, 12000, 0, &st) == CUDA_SUCCESS && fn == dlsym(cuda, "cuCtxSetCurrent") &&
               dladdr(fn, &info) && strstr(info.dli_fname, "libcuda"));
        EXPECT(gpa("cuNoSuchFunction", &fn, 12000, 0, &st) == CUDA_ERROR_NOT_FOUND);
        /* The legacy entry point too. */
        CUresult (*gpa1)(const char *, void **, int, cuuint64_t);
        *(void **)&gpa1 = dlsym(cuda, "cuGetProcAddress");
        EXPECT(gpa1 && gpa1("cuMemFree", &fn, 12000, 0) == CUDA_SUCCESS && fn == dlsym(hook, "cuMemFree_v2"));
        /* RTLD_NEXT still means "after the caller" (here the program). */
        EXPECT(dlsym(RTLD_NEXT, "malloc") == dlsym(RTLD_DEFAULT, "malloc"));
        EXPECT(dlsym(RTLD_NEXT, "cuMemAlloc_v2") == dlsym(hook, "cuMemAlloc_v2"));
        EXPECT(dlsym(RTLD_NEXT, "gshare_no_such_symbol") == NULL);
        EXPECT(dlsym(cuda, "gshare_no_such_symbol") == NULL);
}

static void t_roundtrip(void)
{
        CUdeviceptr p, q, base = 0;
        size_t size = 0, pitch = 0;
        char in[1000], out[1000];
        int local;

        init_ctx();
        EXPECT(cuMemAlloc_v2(&p, sizeof(in)) == CUDA_SUCCESS);
        EXPECT(p % 256 == 0);
        memset(in, 'g', sizeof(in));
        EXPECT(cuMemcpyHtoD_v2(p, in, sizeof(in)) == CUDA_SUCCESS);
        EXPECT(cuMemcpyDtoH_v2(out, p, sizeof(out)) == CUDA_SUCCESS);
        EXPECT(memcmp(in, out, sizeof(in)) == 0);
        EXPECT(cuMemGetAddressRange_v2(&base, &size, p + 999) == CUDA_SUCCESS && base == p && size == 1000);
        EXPECT(cuMemAlloc_v2(&q, 3000) == CUDA_SUCCESS && q % 256 == 0 && (q >= p + 1000 || q + 3000 <= p));
        EXPECT(cuMemsetD32_v2(q, 0x01020304, 750) == CUDA_SUCCESS && ((unsigned *)q)[749] == 0x01020304);
        EXPECT(cuMemFree_v2(p) == CUDA_SUCCESS);
        EXPECT(cuMemFree_v2(p) == CUDA_ERROR_INVALID_VALUE);
        EXPECT(cuMemFree_v2((CUdeviceptr)&local) == CUDA_ERROR_INVALID_VALUE);
        EXPECT(cuMemFree_v2(0) == CUDA_SUCCESS);
        EXPECT(cuMemFree_v2(q) == CUDA_SUCCESS);
        EXPECT(cuMemAllocPitch_v2(&p, &pitch, 1000, 3, 4) == CUDA_SUCCESS && pitch == 1024);
        EXPECT(cuMemsetD8_v2(p, 1, pitch * 3) == CUDA_SUCCESS);
        EXPECT(cuMemFree_v2(p) == CUDA_SUCCESS);
        EXPECT(cuMemAllocAsync(&p, 5000, NULL) == CUDA_SUCCESS && cuMemFreeAsync(p, NULL) == CUDA_SUCCESS);
}

/* Quota 3 chunks (6 MiB). */
static void t_meminfo(void)
{
        CUdeviceptr p, q;
        size_t f = 0, t = 0, f2 = 0, tot = 0;
        unsigned int f32 = 0, t32 = 0;

        init_ctx();
        EXPECT(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && t == 3 * CHUNK && f == 3 * CHUNK);
        EXPECT(cuMemGetInfo(&f32, &t32) == CUDA_SUCCESS && t32 == 3 * CHUNK);
        EXPECT(cuDeviceTotalMem_v2(&tot, 0) == CUDA_SUCCESS && tot == 3 * CHUNK);
        EXPECT(cuMemAlloc_v2(&p, MiB) == CUDA_SUCCESS);
        EXPECT(cuMemGetInfo_v2(&f2, &t) == CUDA_SUCCESS && f2 == 2 * CHUNK + MiB);
        EXPECT(cuMemAlloc_v2(&q, 6 * MiB) == CUDA_ERROR_OUT_OF_MEMORY);
        EXPECT(cuMemAlloc_v2(&q, 4 * MiB) == CUDA_SUCCESS);
        EXPECT(cuMemFree_v2(q) == CUDA_SUCCESS && cuMemFree_v2(p) == CUDA_SUCCESS);
}

/* Quota 3 chunks: a 2-chunk block, then a small one in the third chunk;
 * freeing the big one releases its chunks, so it fits again. */
static void t_release(void)
{
        CUdeviceptr big, small, again;

        init_ctx();
        EXPECT(cuMemAlloc_v2(&big, 4 * MiB) == CUDA_SUCCESS);
        memset((void *)big, 0x11, 4 * MiB); /* one contiguous range over two chunks */
        EXPECT(cuMemAlloc_v2(&small, 3 * MiB / 2) == CUDA_SUCCESS);
        EXPECT(cuMemAlloc_v2(&again, MiB) == CUDA_ERROR_OUT_OF_MEMORY);
        EXPECT(cuMemFree_v2(big) == CUDA_SUCCESS);
        EXPECT(cuMemAlloc_v2(&again, 4 * MiB) == CUDA_SUCCESS);
        memset((void *)again, 0x22, 4 * MiB);
        EXPECT(cuMemFree_v2(again) == CUDA_SUCCESS && cuMemFree_v2(small) == CUDA_SUCCESS);
}

static void t_fork(void)
{
        CUdeviceptr p, q;
        int status;
        pid_t pid;

        init_ctx();
        EXPECT(cuMemAlloc_v2(&p, 4096) == CUDA_SUCCESS);
        pid = fork();
        if (pid == 0) {
                /* A new process for the agent: registers again. */
                CUdeviceptr c;
                int ok = cuMemAlloc_v2(&c, 8192) == CUDA_SUCCESS;
                if (ok) {
                        memset((void *)c, 3, 8192);
                        ok = cuMemFree_v2(c) == CUDA_SUCCESS;
                }
                _exit(ok ? 0 : 1);
        }
        EXPECT(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
        EXPECT(cuMemAlloc_v2(&q, 4096) == CUDA_SUCCESS);
        EXPECT(cuMemFree_v2(q) == CUDA_SUCCESS && cuMemFree_v2(p) == CUDA_SUCCESS);
}

static void *thread_main(void *arg)
{
        unsigned seed = (unsigned)(uintptr_t)arg;
        CUcontext c;
        int bad = 0;

        if (cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS)
                return (void *)1;
        for (int i = 0; i < 100; i++) {
                size_t sz = 1 + (size_t)(rand_r(&seed) % 100000);
                CUdeviceptr p;
                if (cuMemAlloc_v2(&p, sz) != CUDA_SUCCESS) {
                        bad = 1;
                        break;
                }
                memset((void *)p, (int)(seed & 0xff), sz);
                for (size_t k = 0; k < sz; k += 997)
                        bad |= ((unsigned char *)p)[k] != (seed & 0xff);
                bad |= cuMemFree_v2(p) != CUDA_SUCCESS;
        }
        return (void *)(uintptr_t)bad;
}

static void t_threads(void)
{
        pthread_t th[8];
        void *ret;

        init_ctx();
        for (int i = 0; i < 8; i++)
                EXPECT(pthread_create(&th[i], NULL, thread_main, (void *)(uintptr_t)(i + 1)) == 0);
        for (int i = 0; i < 8; i++) {
                EXPECT(pthread_join(th[i], &ret) == 0);
                EXPECT(ret == NULL);
        }
}

static void t_unsupported(void)
{
        CUdeviceptr p;
        CUmemGenericAllocationHandle h;
        CUmemAllocationProp prop = { 0 };
        CUipcMemHandle ih;

        init_ctx();
        EXPECT(cuMemAllocManaged(&p, 4096, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_NOT_SUPPORTED);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        EXPECT(cuMemCreate(&h, CHUNK, &prop, 0) == CUDA_ERROR_NOT_SUPPORTED);
        EXPECT(cuMemAlloc_v2(&p, 4096) == CUDA_SUCCESS);
        EXPECT(cuIpcGetMemHandle(&ih, p) == CUDA_ERROR_NOT_SUPPORTED);
        EXPECT(cuMemAlloc(NULL, 10) == CUDA_ERROR_NOT_SUPPORTED);
        EXPECT(cuMemFree_v2(p) == CUDA_SUCCESS);
}

/* The fake driver's count of host memory this process holds. */
uint64_t fakecuda_host_bytes(void);

/* Waits until this process holds bytes of host memory (deadline 20 s:
 * only a hang). */
static int host_bytes_become(uint64_t bytes)
{
        struct timespec ms = { 0, 1000000 };

        for (int i = 0; i < 20000 && fakecuda_host_bytes() != bytes; i++)
                nanosleep(&ms, NULL);
        return fakecuda_host_bytes() == bytes;
}

/* Whether a thread of this process is named gshare-hook (the hook's
 * thread, the mover's work among its). */
static int mover_running(void)
{
        char path[300], comm[32];
        struct dirent *e;
        DIR *d = opendir("/proc/self/task");
        int found = 0;

        while (d && (e = readdir(d)) && !found) {
                FILE *f;
                snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
                f = fopen(path, "re");
                if (f && fgets(comm, sizeof(comm), f))
                        found = !strcmp(comm, "gshare-hook\n");
                if (f)
                        fclose(f);
        }
        if (d)
                closedir(d);
        return found;
}

/* Against mock_agent ... spill (test_hook.sh signals it): the process's two
 * chunks move to host memory when the agent asks, at the same address, and
 * back to the device; the data reads the same throughout. */
static void t_spill(void)
{
        size_t n = 3 * MiB, words = n / 4;
        unsigned *in = malloc(n), *out = malloc(n);
        CUdeviceptr p;

        init_ctx();
        EXPECT(in && out && cuMemAlloc_v2(&p, n) == CUDA_SUCCESS);
        if (g_failed)
                return;
        for (size_t i = 0; i < words; i++)
                in[i] = (unsigned)(i * 2654435761u);
        EXPECT(cuMemcpyHtoD_v2(p, in, n) == CUDA_SUCCESS);
        EXPECT(mover_running());
        EXPECT(fakecuda_host_bytes() == 0);
        printf("ready\n");
        fflush(stdout);
        EXPECT(host_bytes_become(2 * CHUNK));
        EXPECT(cuMemcpyDtoH_v2(out, p, n) == CUDA_SUCCESS && !memcmp(in, out, n));
        EXPECT(cuMemsetD32_v2(p + n - 4, 0x5a5a5a5a, 1) == CUDA_SUCCESS);
        in[words - 1] = 0x5a5a5a5a;
        printf("host\n");
        fflush(stdout);
        EXPECT(host_bytes_become(0));
        EXPECT(cuMemcpyDtoH_v2(out, p, n) == CUDA_SUCCESS && !memcmp(in, out, n));
        EXPECT(cuMemFree_v2(p) == CUDA_SUCCESS);
        free(in);
        free(out);
}

/* Registered with some memory, until stdin ends (test_hook.sh reads the
 * hook's debug lines meanwhile: its compute policy). */
static void t_stay(void)
{
        char line[64];
        CUdeviceptr p;

        init_ctx();
        EXPECT(cuMemAlloc_v2(&p, MiB) == CUDA_SUCCESS);
        printf("ready\n");
        fflush(stdout);
        while (fgets(line, sizeof(line), stdin))
                ;
        EXPECT(g_failed || cuMemFree_v2(p) == CUDA_SUCCESS);
}

/* A latency-critical process's launches (docs/compute.md "Nobody to
 * hold"): at each line on stdin, 20 spin kernels of the fake driver and a
 * synchronize; prints "records N", the event records the process made
 * meanwhile (the hook's: fakecuda_event_calls). */
static void t_lclaunch(void)
{
        void (*calls)(uint64_t *, uint64_t *) =
                (void (*)(uint64_t *, uint64_t *))dlsym(RTLD_DEFAULT, "fakecuda_event_calls");
        CUfunction (*spin_fn)(void) = (CUfunction(*)(void))dlsym(RTLD_DEFAULT, "fakecuda_spin_kernel");
        char line[64];
        CUdeviceptr p;

        init_ctx();
        EXPECT(calls && spin_fn);
        EXPECT(cuMemAlloc_v2(&p, MiB) == CUDA_SUCCESS);
        printf("ready\n");
        fflush(stdout);
        while (calls && spin_fn && fgets(line, sizeof(line), stdin)) {
                uint64_t r0, r1, q;
                uint32_t us = 10;
                void *params[] = { &us };

                calls(&r0, &q);
                for (int i = 0; i < 20; i++)
                        EXPECT(cuLaunchKernel(spin_fn(), 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) == CUDA_SUCCESS);
                EXPECT(cuCtxSynchronize() == CUDA_SUCCESS);
                calls(&r1, &q);
                printf("records %llu\n", (unsigned long long)(r1 - r0));
                fflush(stdout);
        }
        EXPECT(g_failed || cuMemFree_v2(p) == CUDA_SUCCESS);
}

int main(int argc, char **argv)
{
        static const struct {
                const char *name;
                void (*fn)(void);
        } tests[] = {
                { "failclosed", t_failclosed }, { "lookup", t_lookup },
                { "roundtrip", t_roundtrip },   { "meminfo", t_meminfo },
                { "release", t_release },       { "fork", t_fork },
                { "threads", t_threads },       { "unsupported", t_unsupported },
                { "spill", t_spill },           { "stay", t_stay },
                { "lclaunch", t_lclaunch },
        };

        if (argc != 2)
                return 2;
        for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
                if (!strcmp(argv[1], tests[i].name)) {
                        tests[i].fn();
                        return g_failed;
                }
        fprintf(stderr, "hook_client: unknown scenario %s\n", argv[1]);
        return 2;
}
