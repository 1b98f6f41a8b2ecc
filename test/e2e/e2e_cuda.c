/* e2e_cuda.c — an ordinary CUDA driver-API program for the end-to-end
 * tests and the demo.  Linked against libcuda the usual way; run under
 * LD_PRELOAD=libgshare.so (with GSHARE_SOCKET set) it exercises the hook
 * and the agent, run without it it is a process bypassing gshare.
 *
 *   e2e_cuda fill [BLOCK_MIB]   allocate until out of memory; print
 *                               "obtained N MiB limit L MiB"
 *   e2e_cuda bypass MIB         one cuMemAlloc of MIB: must fail with OOM
 *   e2e_cuda meminfo            print "free F total T" (bytes)
 *   e2e_cuda data MIB           allocate MIB in one block, write and read
 *                               all of it; check fresh memory holds no
 *                               "E2E-SECRET" left by anyone else
 *   e2e_cuda threads N MIB      N threads allocate 1 MiB blocks at once
 *                               until OOM; print the total
 *   e2e_cuda hold MIB           allocate, print "held", sleep until killed
 * Exit 0 when the mode's own check holds. */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB (1024ull * 1024ull)
static const char secret[16] = "E2E-SECRET-0042";

static void die(const char *what, CUresult r)
{
        const char *n = NULL;
        cuGetErrorName(r, &n);
        fprintf(stderr, "FAIL: %s: %s\n", what, n ? n : "?");
        exit(1);
}

static void init(CUcontext *ctx)
{
        CUdevice dev;
        CUresult r;

        if ((r = cuInit(0)) != CUDA_SUCCESS)
                die("cuInit", r);
        if ((r = cuDeviceGet(&dev, 0)) != CUDA_SUCCESS)
                die("cuDeviceGet", r);
        if ((r = cuDevicePrimaryCtxRetain(ctx, dev)) != CUDA_SUCCESS)
                die("cuDevicePrimaryCtxRetain", r);
        if ((r = cuCtxSetCurrent(*ctx)) != CUDA_SUCCESS)
                die("cuCtxSetCurrent", r);
}

static int fill(uint64_t block)
{
        size_t fr = 0, total = 0;
        uint64_t got = 0;
        CUdeviceptr p;
        CUresult r;

        cuMemGetInfo(&fr, &total);
        while ((r = cuMemAlloc(&p, block)) == CUDA_SUCCESS)
                got += block;
        printf("obtained %llu MiB limit %llu MiB (%s)\n", (unsigned long long)(got / MiB),
               (unsigned long long)(total / MiB),
               r == CUDA_ERROR_OUT_OF_MEMORY ? "then CUDA_ERROR_OUT_OF_MEMORY" : "other error");
        fflush(stdout);
        return r == CUDA_ERROR_OUT_OF_MEMORY ? 0 : 1;
}

struct targ {
        uint64_t got;
};

static CUcontext g_ctx;

static void *thr(void *arg)
{
        struct targ *t = arg;
        CUdeviceptr p;

        cuCtxSetCurrent(g_ctx);
        while (cuMemAlloc(&p, MiB) == CUDA_SUCCESS)
                t->got += MiB;
        return NULL;
}

/* Writes a pattern over n bytes at p and reads it all back. */
static int roundtrip(CUdeviceptr p, size_t n)
{
        unsigned char *buf = malloc(n), *back = malloc(n);
        int bad = 0;

        if (!buf || !back)
                return 1;
        /* Fresh memory must not carry another process's secret. */
        if (cuMemcpyDtoH(back, p, n) != CUDA_SUCCESS)
                return 1;
        for (size_t i = 0; i + sizeof(secret) <= n; i += 4096)
                if (memcmp(back + i, secret, sizeof(secret)) == 0) {
                        fprintf(stderr, "FAIL: found another process's data at +%zu\n", i);
                        bad = 1;
                        break;
                }
        for (size_t i = 0; i < n; i++)
                buf[i] = (unsigned char)(i * 131 + (i >> 20));
        for (size_t i = 0; i + sizeof(secret) <= n; i += 4096)
                memcpy(buf + i, secret, sizeof(secret));
        if (cuMemcpyHtoD(p, buf, n) != CUDA_SUCCESS || cuMemcpyDtoH(back, p, n) != CUDA_SUCCESS)
                return 1;
        if (memcmp(buf, back, n) != 0) {
                fprintf(stderr, "FAIL: read back differs from what was written\n");
                bad = 1;
        }
        free(buf);
        free(back);
        return bad;
}

int main(int argc, char **argv)
{
        CUcontext ctx;
        CUdeviceptr p;
        CUresult r;

        if (argc < 2) {
                fprintf(stderr, "usage: e2e_cuda fill|bypass|meminfo|data|threads|hold ...\n");
                return 2;
        }
        init(&ctx);
        g_ctx = ctx;
        if (strcmp(argv[1], "fill") == 0)
                return fill((argc > 2 ? strtoull(argv[2], NULL, 0) : 1) * MiB);
        if (strcmp(argv[1], "bypass") == 0 && argc == 3) {
                r = cuMemAlloc(&p, strtoull(argv[2], NULL, 0) * MiB);
                printf("bypass cuMemAlloc of %s MiB: %s\n", argv[2],
                       r == CUDA_SUCCESS ? "succeeded" : r == CUDA_ERROR_OUT_OF_MEMORY ?
                       "CUDA_ERROR_OUT_OF_MEMORY" : "other error");
                return r == CUDA_ERROR_OUT_OF_MEMORY ? 0 : 1;
        }
        if (strcmp(argv[1], "meminfo") == 0) {
                size_t fr = 0, total = 0, dt = 0;
                CUdevice dev;
                if ((r = cuMemGetInfo(&fr, &total)) != CUDA_SUCCESS)
                        die("cuMemGetInfo", r);
                cuDeviceGet(&dev, 0);
                cuDeviceTotalMem(&dt, dev);
                printf("free %zu total %zu devicetotal %zu\n", fr, total, dt);
                return 0;
        }
        if (strcmp(argv[1], "data") == 0 && argc == 3) {
                size_t n = strtoull(argv[2], NULL, 0) * MiB;
                CUdeviceptr base = 0;
                size_t size = 0;
                if ((r = cuMemAlloc(&p, n)) != CUDA_SUCCESS)
                        die("cuMemAlloc", r);
                if (p % 256) {
                        fprintf(stderr, "FAIL: pointer not 256-byte aligned\n");
                        return 1;
                }
                if ((r = cuMemGetAddressRange(&base, &size, p + n - 1)) != CUDA_SUCCESS)
                        die("cuMemGetAddressRange", r);
                if (base != p || size != n) {
                        fprintf(stderr, "FAIL: range of the last byte is %llx+%zu\n", (unsigned long long)base, size);
                        return 1;
                }
                if (roundtrip(p, n))
                        return 1;
                if ((r = cuMemFree(p)) != CUDA_SUCCESS)
                        die("cuMemFree", r);
                printf("data: %llu MiB written and read back in one block\n", (unsigned long long)(n / MiB));
                return 0;
        }
        if (strcmp(argv[1], "threads") == 0 && argc == 3) {
                int n = atoi(argv[2]);
                pthread_t t[64];
                struct targ a[64];
                uint64_t sum = 0;
                size_t fr = 0, total = 0;
                if (n < 1 || n > 64)
                        return 2;
                cuMemGetInfo(&fr, &total);
                memset(a, 0, sizeof(a));
                for (int i = 0; i < n; i++)
                        pthread_create(&t[i], NULL, thr, &a[i]);
                for (int i = 0; i < n; i++) {
                        pthread_join(t[i], NULL);
                        sum += a[i].got;
                }
                printf("threads: %d threads obtained %llu MiB, limit %llu MiB\n", n,
                       (unsigned long long)(sum / MiB), (unsigned long long)(total / MiB));
                return sum <= total ? 0 : 1;
        }
        if (strcmp(argv[1], "hold") == 0 && argc == 3) {
                if ((r = cuMemAlloc(&p, strtoull(argv[2], NULL, 0) * MiB)) != CUDA_SUCCESS)
                        die("cuMemAlloc", r);
                printf("held\n");
                fflush(stdout);
                for (;;)
                        pause();
        }
        fprintf(stderr, "e2e_cuda: bad arguments\n");
        return 2;
}
