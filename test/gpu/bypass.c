/* A hostile process: no hook, the real driver called directly. While the
 * agent holds the pool it must find only the reserve free and fail to take
 * a large allocation. Prints what it saw; exits 0 when the bypass failed
 * as it must. Usage: bypass BYTES */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
        unsigned long long want = argc > 1 ? strtoull(argv[1], NULL, 0) : 8ull << 30;
        CUdevice d;
        CUcontext c;
        CUdeviceptr p;
        size_t fr = 0, tot = 0;
        CUresult r;

        if (cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&c, d) || cuCtxSetCurrent(c)) {
                printf("FAIL bypass could not set up a context\n");
                return 2;
        }
        cuMemGetInfo(&fr, &tot);
        r = cuMemAlloc(&p, want);
        printf("bypass: cuMemGetInfo free=%zu MiB total=%zu MiB; cuMemAlloc(%llu MiB) -> %d\n", fr >> 20, tot >> 20,
               want >> 20, (int)r);
        if (r == CUDA_SUCCESS) {
                printf("FAIL bypass got memory past the pool\n");
                return 1;
        }
        printf("PASS bypass refused with %s\n",
               r == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" : "an error");
        return 0;
}
