/* e2e_vmm.c — the application's cuMemCreate under the hook, the way
 * PyTorch's expandable segments and XLA use it: pieces of 2 and 20 MiB.
 *
 *   e2e_vmm ROUNDS SEED   each round: cuMemCreate random 2/20 MiB pieces
 *                         (a 2 MiB one when a 20 MiB one is refused) until
 *                         OUT_OF_MEMORY, each mapped in its own reserved
 *                         range and stamped; check every live piece's
 *                         stamps; unmap and release a random half.
 *                         Print "vmm refill lowest N MiB highest M MiB".
 * Exit 0 when every stamp read back right and every error was
 * OUT_OF_MEMORY. */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB (1024ull * 1024ull)
#define MAXP 1024

struct piece {
        CUmemGenericAllocationHandle h;
        CUdeviceptr va;
        uint64_t size, stamp;
};

static struct piece ps[MAXP];

static void die(const char *what, CUresult r)
{
        const char *n = NULL;
        cuGetErrorName(r, &n);
        fprintf(stderr, "FAIL: %s: %s\n", what, n ? n : "?");
        exit(1);
}

/* The stamp goes at both ends of the piece. */
static void stamp_io(const struct piece *p, int write)
{
        uint64_t v[2] = { p->stamp, ~p->stamp }, got[2];
        CUdeviceptr at[2] = { p->va, p->va + p->size - sizeof(v) };
        CUresult r;

        for (int i = 0; i < 2; i++) {
                r = write ? cuMemcpyHtoD(at[i], v, sizeof(v)) : cuMemcpyDtoH(got, at[i], sizeof(got));
                if (r != CUDA_SUCCESS)
                        die("cuMemcpy", r);
                if (!write && memcmp(got, v, sizeof(v)) != 0) {
                        fprintf(stderr, "FAIL: piece of %llu MiB lost its stamp\n",
                                (unsigned long long)(p->size / MiB));
                        exit(1);
                }
        }
}

static CUresult piece_new(struct piece *p, uint64_t size, uint64_t stamp)
{
        CUmemAllocationProp prop = { 0 };
        CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        CUresult r;

        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 0;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        r = cuMemCreate(&p->h, size, &prop, 0);
        if (r != CUDA_SUCCESS)
                return r;
        if ((r = cuMemAddressReserve(&p->va, size, 2 * MiB, 0, 0)) != CUDA_SUCCESS)
                die("cuMemAddressReserve", r);
        if ((r = cuMemMap(p->va, size, 0, p->h, 0)) != CUDA_SUCCESS)
                die("cuMemMap", r);
        if ((r = cuMemSetAccess(p->va, size, &acc, 1)) != CUDA_SUCCESS)
                die("cuMemSetAccess", r);
        p->size = size;
        p->stamp = stamp;
        stamp_io(p, 1);
        return CUDA_SUCCESS;
}

static void piece_free(struct piece *p)
{
        CUresult r;

        stamp_io(p, 0);
        if ((r = cuMemUnmap(p->va, p->size)) != CUDA_SUCCESS)
                die("cuMemUnmap", r);
        if ((r = cuMemRelease(p->h)) != CUDA_SUCCESS)
                die("cuMemRelease", r);
        if ((r = cuMemAddressFree(p->va, p->size)) != CUDA_SUCCESS)
                die("cuMemAddressFree", r);
}

int main(int argc, char **argv)
{
        uint64_t live = 0, lowest = UINT64_MAX, highest = 0, next = 1;
        int rounds, n = 0;
        CUcontext ctx;
        CUresult r;

        if (argc != 3) {
                fprintf(stderr, "usage: e2e_vmm ROUNDS SEED\n");
                return 2;
        }
        rounds = atoi(argv[1]);
        srand((unsigned)atoi(argv[2]));
        if ((r = cuInit(0)) != CUDA_SUCCESS)
                die("cuInit", r);
        if ((r = cuDevicePrimaryCtxRetain(&ctx, 0)) != CUDA_SUCCESS || (r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS)
                die("context", r);
        for (int round = 0; round < rounds; round++) {
                while (n < MAXP) {
                        uint64_t size = rand() % 2 ? 20 * MiB : 2 * MiB;
                        r = piece_new(&ps[n], size, next);
                        if (r == CUDA_ERROR_OUT_OF_MEMORY && size > 2 * MiB)
                                r = piece_new(&ps[n], size = 2 * MiB, next);
                        if (r == CUDA_ERROR_OUT_OF_MEMORY)
                                break;
                        if (r != CUDA_SUCCESS)
                                die("cuMemCreate", r);
                        next++;
                        live += ps[n++].size;
                }
                lowest = live < lowest ? live : lowest;
                highest = live > highest ? live : highest;
                for (int i = 0; i < n; i++)
                        stamp_io(&ps[i], 0);
                for (int i = 0; i < n;) {
                        if (rand() % 2) {
                                i++;
                                continue;
                        }
                        piece_free(&ps[i]);
                        live -= ps[i].size;
                        ps[i] = ps[--n];
                }
        }
        printf("vmm refill lowest %llu MiB highest %llu MiB\n", (unsigned long long)(lowest / MiB),
               (unsigned long long)(highest / MiB));
        return 0;
}
