/* hook_bench_prog.c — times cuMemAlloc + cuMemFree pairs for each size given,
 * through whatever libcuda.so.1 the loader finds (the fake driver's
 * directory on LD_LIBRARY_PATH, or the real driver), with or without the hook
 * preloaded.  Driven by bench/hook_bench.py.
 *
 *   hook_bench_prog meminfo                 print "free F total T"
 *   hook_bench_prog SIZE:ITERS ...          for each, ITERS timed pairs after
 *                                           a few untimed ones; prints
 *                                           "size S ns N N N ..." */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int fail(const char *what, CUresult r)
{
        const char *n = NULL;
        cuGetErrorName(r, &n);
        fprintf(stderr, "hook_bench_prog: %s: %s\n", what, n ? n : "?");
        return 1;
}

int main(int argc, char **argv)
{
        CUcontext ctx;
        CUdevice dev;
        CUresult r;

        if ((r = cuInit(0)) != CUDA_SUCCESS)
                return fail("cuInit", r);
        if ((r = cuDeviceGet(&dev, 0)) != CUDA_SUCCESS)
                return fail("cuDeviceGet", r);
        if ((r = cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS || (r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS)
                return fail("context", r);
        if (argc == 2 && strcmp(argv[1], "meminfo") == 0) {
                size_t fr = 0, total = 0;
                if ((r = cuMemGetInfo(&fr, &total)) != CUDA_SUCCESS)
                        return fail("cuMemGetInfo", r);
                printf("free %zu total %zu\n", fr, total);
                return 0;
        }
        for (int a = 1; a < argc; a++) {
                unsigned long long size = 0, iters = 0;
                uint64_t *ns;
                CUdeviceptr p;

                if (sscanf(argv[a], "%llu:%llu", &size, &iters) != 2 || !size || !iters || iters > 1000000)
                        return 2;
                ns = calloc(iters, sizeof(*ns));
                if (!ns)
                        return 1;
                for (int w = 0; w < 3; w++) { /* warm-up: first grants, caches */
                        if ((r = cuMemAlloc(&p, size)) != CUDA_SUCCESS)
                                return fail("cuMemAlloc (warm-up)", r);
                        if ((r = cuMemFree(p)) != CUDA_SUCCESS)
                                return fail("cuMemFree (warm-up)", r);
                }
                for (unsigned long long i = 0; i < iters; i++) {
                        uint64_t t0 = now_ns();
                        if ((r = cuMemAlloc(&p, size)) != CUDA_SUCCESS)
                                return fail("cuMemAlloc", r);
                        if ((r = cuMemFree(p)) != CUDA_SUCCESS)
                                return fail("cuMemFree", r);
                        ns[i] = now_ns() - t0;
                }
                printf("size %llu ns", size);
                for (unsigned long long i = 0; i < iters; i++)
                        printf(" %llu", (unsigned long long)ns[i]);
                printf("\n");
                free(ns);
        }
        return 0;
}
