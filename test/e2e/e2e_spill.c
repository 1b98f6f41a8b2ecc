/* e2e_spill.c — a borrower and an owner for the moves of issue 22
 * (docs/burst.md "Giving it back"), on the fake driver: an ordinary
 * driver-API program run under the hook, driven by commands on stdin.
 *
 *   e2e_spill borrow MIB BLOCK_MIB
 *       allocate BLOCK_MIB blocks up to MIB or out of memory, each filled
 *       with its own 32-bit pattern; print "ready N" (MiB obtained); then:
 *         check     read every block back: "check ok host H all T" (H:
 *                   bytes of host memory under its blocks, its data moved
 *                   there; T: all the host memory this process maps,
 *                   fakecuda_host_bytes, prepared ahead by its mover too)
 *                   or "check bad block I"
 *         hold      hold the fake driver's work queue, launch the fake
 *                   kernel writing 0x5EED0001 over block 0 (queued, not
 *                   run: a move's synchronization waits for it): "held"
 *         release   let the queue go, synchronize: block 0's pattern is
 *                   the kernel's from now on: "released"
 *         free      free every block: "freed all T"
 *         host      "host H all T" (as check, without reading the blocks)
 *         quit
 *   e2e_spill own MIB BLOCK_MIB
 *       allocate BLOCK_MIB blocks up to MIB: "own got N ms T" (T: the
 *       milliseconds it took) or "own short N" at the first failure; then
 *       "free" frees them all ("freed"), "quit" */
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MiB (UINT64_C(1) << 20)
#define MAXB 4096
#define KERNEL_VALUE 0x5EED0001u

static CUdeviceptr blk[MAXB];
static uint32_t pat[MAXB];
static size_t nblk;
static uint64_t bsize;

static void die(const char *what, CUresult r)
{
        printf("error %s %d\n", what, (int)r);
        fflush(stdout);
        exit(1);
}

static double now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int fill_block(size_t i, uint32_t v)
{
        uint32_t *buf = malloc(bsize);

        if (!buf)
                return -1;
        for (uint64_t k = 0; k < bsize / 4; k++)
                buf[k] = v ^ (uint32_t)k;
        CUresult r = cuMemcpyHtoD(blk[i], buf, bsize);
        free(buf);
        return r == CUDA_SUCCESS ? 0 : -1;
}

/* Block i holds its pattern (or, kernel, KERNEL_VALUE everywhere). */
static int block_ok(size_t i, int kernel)
{
        uint32_t *buf = malloc(bsize);
        int ok = buf && cuMemcpyDtoH(buf, blk[i], bsize) == CUDA_SUCCESS;

        for (uint64_t k = 0; ok && k < bsize / 4; k++)
                ok = buf[k] == (kernel ? KERNEL_VALUE : (pat[i] ^ (uint32_t)k));
        free(buf);
        return ok;
}

static uint64_t host_bytes(void)
{
        uint64_t (*f)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "fakecuda_host_bytes");

        return f ? f() : UINT64_MAX;
}

/* Of it, the bytes under this process's blocks (its data in host memory;
 * the rest is host memory its mover prepared ahead). */
static uint64_t data_host_bytes(void)
{
        uint64_t (*f)(CUdeviceptr, size_t) =
                (uint64_t(*)(CUdeviceptr, size_t))dlsym(RTLD_DEFAULT, "fakecuda_host_bytes_in");
        uint64_t n = 0;

        for (size_t i = 0; f && i < nblk; i++)
                n += f(blk[i], bsize);
        return f ? n : UINT64_MAX;
}

static size_t alloc_upto(uint64_t mib)
{
        size_t n = 0;

        while (n < MAXB && (uint64_t)(n + 1) * bsize <= mib * MiB && cuMemAlloc(&blk[n], bsize) == CUDA_SUCCESS)
                n++;
        return n;
}

static int borrow(uint64_t mib)
{
        void (*hold)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "fakecuda_hold_work");
        CUfunction (*kern)(void) = (CUfunction(*)(void))dlsym(RTLD_DEFAULT, "fakecuda_fill_kernel");
        int kernel0 = 0;
        char line[64];

        nblk = alloc_upto(mib);
        for (size_t i = 0; i < nblk; i++) {
                pat[i] = 0xB0000000u + (uint32_t)i * 0x10001u;
                if (fill_block(i, pat[i]) < 0)
                        die("fill", CUDA_ERROR_UNKNOWN);
        }
        printf("ready %llu\n", (unsigned long long)(nblk * bsize / MiB));
        fflush(stdout);
        while (fgets(line, sizeof(line), stdin)) {
                if (strncmp(line, "check", 5) == 0) {
                        size_t bad = SIZE_MAX;
                        for (size_t i = 0; i < nblk && bad == SIZE_MAX; i++)
                                if (!block_ok(i, i == 0 && kernel0))
                                        bad = i;
                        if (bad == SIZE_MAX)
                                printf("check ok host %llu all %llu\n", (unsigned long long)data_host_bytes(),
                                       (unsigned long long)host_bytes());
                        else
                                printf("check bad block %zu\n", bad);
                } else if (strncmp(line, "hold", 4) == 0 && hold && kern && nblk) {
                        CUdeviceptr dst = blk[0];
                        size_t bytes = bsize;
                        uint32_t value = KERNEL_VALUE, delay = 0;
                        void *params[] = { &dst, &bytes, &value, &delay };
                        hold(1);
                        CUresult r = cuLaunchKernel(kern(), 1, 1, 1, 64, 1, 1, 0, NULL, params, NULL);
                        if (r != CUDA_SUCCESS)
                                die("cuLaunchKernel", r);
                        kernel0 = 1;
                        printf("held\n");
                } else if (strncmp(line, "release", 7) == 0 && hold) {
                        hold(0);
                        CUresult r = cuCtxSynchronize();
                        if (r != CUDA_SUCCESS)
                                die("cuCtxSynchronize", r);
                        printf("released\n");
                } else if (strncmp(line, "free", 4) == 0) {
                        for (size_t i = 0; i < nblk; i++)
                                if (cuMemFree(blk[i]) != CUDA_SUCCESS)
                                        die("cuMemFree", CUDA_ERROR_UNKNOWN);
                        nblk = 0;
                        printf("freed all %llu\n", (unsigned long long)host_bytes());
                } else if (strncmp(line, "host", 4) == 0) {
                        printf("host %llu all %llu\n", (unsigned long long)data_host_bytes(),
                               (unsigned long long)host_bytes());
                } else if (strncmp(line, "quit", 4) == 0) {
                        return 0;
                } else {
                        printf("unknown command\n");
                }
                fflush(stdout);
        }
        return 0;
}

static int own(uint64_t mib)
{
        char line[64];
        double t0 = now_ms();

        nblk = alloc_upto(mib);
        if (nblk * bsize < mib * MiB)
                printf("own short %llu\n", (unsigned long long)(nblk * bsize / MiB));
        else
                printf("own got %llu ms %.1f\n", (unsigned long long)(nblk * bsize / MiB), now_ms() - t0);
        fflush(stdout);
        while (fgets(line, sizeof(line), stdin)) {
                if (strncmp(line, "free", 4) == 0) {
                        for (size_t i = 0; i < nblk; i++)
                                if (cuMemFree(blk[i]) != CUDA_SUCCESS)
                                        die("cuMemFree", CUDA_ERROR_UNKNOWN);
                        nblk = 0;
                        printf("freed\n");
                } else if (strncmp(line, "quit", 4) == 0) {
                        return 0;
                }
                fflush(stdout);
        }
        return 0;
}

int main(int argc, char **argv)
{
        CUcontext ctx;
        CUdevice dev;
        CUresult r;

        if (argc != 4 || (strcmp(argv[1], "borrow") != 0 && strcmp(argv[1], "own") != 0)) {
                fprintf(stderr, "usage: e2e_spill borrow|own MIB BLOCK_MIB\n");
                return 2;
        }
        bsize = strtoull(argv[3], NULL, 0) * MiB;
        if (bsize == 0 || bsize % 4)
                return 2;
        if ((r = cuInit(0)) != CUDA_SUCCESS)
                die("cuInit", r);
        if ((r = cuDeviceGet(&dev, 0)) != CUDA_SUCCESS || (r = cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS ||
            (r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS)
                die("context", r);
        return strcmp(argv[1], "borrow") == 0 ? borrow(strtoull(argv[2], NULL, 0)) : own(strtoull(argv[2], NULL, 0));
}
