/* nvml_client.c — NVML memory queries as nvidia-smi and pynvml make them,
 * for test_nvml.py.  Linked against libnvidia-ml (the fake one in tests)
 * and libcuda; run under LD_PRELOAD=libgshare.so.
 *
 *   nvml_client query IDX...        for each device index: the memory
 *                                   queries called directly and through
 *                                   dlopen("libnvidia-ml.so.1") + dlsym
 *   nvml_client alloc MIB IDX...    cuMemAlloc MIB on CUDA device 0 first
 *                                   (kept), print "cuda FREE TOTAL" from
 *                                   cuMemGetInfo, then the same queries
 *
 * One line per query: "HOW IDX v1 RC TOTAL FREE USED" and
 * "HOW IDX v2 RC TOTAL FREE USED RESERVED" (HOW: direct or dlsym), and
 * "HOW IDX v2-badversion RC" (a wrong struct version).  "dlsym-same 1"
 * when dlsym on the library handle gave the same address as the program's
 * own binding for both memory queries, "dlsym-uuid-real 1" when it gave
 * the library's own nvmlDeviceGetUUID (a name the hook does not
 * interpose).  Exit 0 unless a setup call failed. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gs_nvmldecl.h"

typedef nvmlReturn_t (*mem1_fn)(nvmlDevice_t, nvmlMemory_t *);
typedef nvmlReturn_t (*mem2_fn)(nvmlDevice_t, nvmlMemory_v2_t *);

static void query(const char *how, unsigned int idx, mem1_fn m1, mem2_fn m2)
{
        nvmlDevice_t d;
        nvmlMemory_t a;
        nvmlMemory_v2_t b;
        nvmlReturn_t r;

        if (nvmlDeviceGetHandleByIndex_v2(idx, &d) != NVML_SUCCESS) {
                printf("%s %u nodevice\n", how, idx);
                return;
        }
        memset(&a, 0, sizeof(a));
        r = m1(d, &a);
        printf("%s %u v1 %d %llu %llu %llu\n", how, idx, (int)r, a.total, a.free, a.used);
        memset(&b, 0, sizeof(b));
        b.version = nvmlMemory_v2;
        r = m2(d, &b);
        printf("%s %u v2 %d %llu %llu %llu %llu\n", how, idx, (int)r, b.total, b.free, b.used, b.reserved);
        memset(&b, 0, sizeof(b));
        b.version = 1;
        printf("%s %u v2-badversion %d\n", how, idx, (int)m2(d, &b));
}

int main(int argc, char **argv)
{
        mem1_fn d1, d2 = NULL;
        mem2_fn e1, e2 = NULL;
        void *h;
        int first = 2;

        if (argc < 3 || (strcmp(argv[1], "query") && strcmp(argv[1], "alloc"))) {
                fprintf(stderr, "usage: nvml_client query IDX... | alloc MIB IDX...\n");
                return 2;
        }
        if (!strcmp(argv[1], "alloc")) {
                CUdevice dev;
                CUcontext ctx;
                CUdeviceptr p;
                size_t f = 0, t = 0;
                CUresult cr;

                if (argc < 4)
                        return 2;
                first = 3;
                if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
                    cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
                        fprintf(stderr, "nvml_client: CUDA setup failed\n");
                        return 1;
                }
                cr = cuMemAlloc(&p, strtoull(argv[2], NULL, 10) << 20);
                if (cr != CUDA_SUCCESS) {
                        fprintf(stderr, "nvml_client: cuMemAlloc: %d\n", (int)cr);
                        return 1;
                }
                cr = cuMemGetInfo(&f, &t);
                printf("cuda %d %zu %zu\n", (int)cr, f, t);
        }
        if (nvmlInit_v2() != NVML_SUCCESS) {
                fprintf(stderr, "nvml_client: nvmlInit_v2 failed\n");
                return 1;
        }
        /* As nvidia-smi and pynvml do: the library by soname, then dlsym. */
        h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        if (h) {
                d2 = (mem1_fn)dlsym(h, "nvmlDeviceGetMemoryInfo");
                e2 = (mem2_fn)dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
        }
        if (!d2 || !e2) {
                fprintf(stderr, "nvml_client: dlopen/dlsym of libnvidia-ml.so.1 failed\n");
                return 1;
        }
        d1 = nvmlDeviceGetMemoryInfo;
        e1 = nvmlDeviceGetMemoryInfo_v2;
        printf("dlsym-same %d\n", d1 == d2 && e1 == e2);
        printf("dlsym-uuid-real %d\n", dlsym(h, "nvmlDeviceGetUUID") == (void *)nvmlDeviceGetUUID);
        for (int i = first; i < argc; i++) {
                unsigned int idx = (unsigned int)strtoul(argv[i], NULL, 10);
                query("direct", idx, d1, e1);
                query("dlsym", idx, d2, e2);
        }
        nvmlShutdown();
        return 0;
}
