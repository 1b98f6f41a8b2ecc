/* scrub_bench.c — what the agent's scrub costs (gs_gpu_scrub, issue 10
 * item 9): the time to zero one chunk before it goes to another process,
 * through the agent's own path (reserve, map, access, cuMemsetD32,
 * synchronize, unmap, free), and the memset alone on a mapping kept for the
 * run.  Runs on GPU 0 of the CUDA driver given (default libcuda.so.1);
 * where none loads or no GPU answers it says so and exits 0 (make bench
 * runs everywhere).
 *
 *   scrub_bench [CUDA_LIBRARY [CHUNK_MIB [ROUNDS]]]
 *
 * Ends with "RESULT scrub_ms_per_chunk=... memset_ms_per_chunk=...
 * scrub_GBps=... chunk_mib=..." (or "RESULT scrub=skipped ..."). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gs_agent.h"
#include "gs_gpu.h"

static double now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int skip(const char *why)
{
        printf("scrub_bench: %s\nRESULT scrub=skipped reason=%s\n", why, "no-gpu");
        return 0;
}

int main(int argc, char **argv)
{
        const char *lib = argc > 1 ? argv[1] : "libcuda.so.1";
        uint64_t chunk = (argc > 2 ? strtoull(argv[2], NULL, 0) : 256) << 20;
        int rounds = argc > 3 ? atoi(argv[3]) : 50, count = 0;
        static struct gs_agent ag;
        struct gs_gpu g = { .agent = &ag };
        const struct gs_cuda *cu = &ag.cu;
        CUmemGenericAllocationHandle h;
        CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE },
                                .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        CUdeviceptr va = 0;
        double t0, scrub_ms, memset_ms;
        char err[256];
        int fd;

        if (rounds < 1 || chunk == 0)
                return 2;
        if (gs_cuda_open(&ag.cu, lib, err, sizeof(err)) < 0)
                return skip(err);
        if (cu->init(0) != CUDA_SUCCESS || cu->device_get_count(&count) != CUDA_SUCCESS || count < 1 ||
            cu->device_get(&g.dev, 0) != CUDA_SUCCESS ||
            cu->primary_ctx_retain(&g.ctx, g.dev) != CUDA_SUCCESS ||
            cu->ctx_set_current(g.ctx) != CUDA_SUCCESS)
                return skip("no GPU answers");
        (void)cu->device_get_name(g.name, (int)sizeof(g.name), g.dev);
        if (gs_gpu_mem_make(&g, chunk, false, &h, &fd, err, sizeof(err)) < 0) {
                fprintf(stderr, "scrub_bench: %s\n", err);
                return 1;
        }
        if (gs_gpu_scrub(&g, h, chunk, err, sizeof(err)) < 0) { /* warm-up */
                fprintf(stderr, "scrub_bench: %s\n", err);
                return 1;
        }
        t0 = now_ms();
        for (int i = 0; i < rounds; i++)
                if (gs_gpu_scrub(&g, h, chunk, err, sizeof(err)) < 0) {
                        fprintf(stderr, "scrub_bench: %s\n", err);
                        return 1;
                }
        scrub_ms = (now_ms() - t0) / rounds;
        acc.location.id = (int)g.dev;
        if (cu->mem_address_reserve(&va, chunk, 0, 0, 0) != CUDA_SUCCESS ||
            cu->mem_map(va, chunk, 0, h, 0) != CUDA_SUCCESS ||
            cu->mem_set_access(va, chunk, &acc, 1) != CUDA_SUCCESS) {
                fprintf(stderr, "scrub_bench: cannot map the chunk\n");
                return 1;
        }
        t0 = now_ms();
        for (int i = 0; i < rounds; i++)
                if (cu->memset_d32(va, 0, chunk / 4) != CUDA_SUCCESS ||
                    cu->ctx_synchronize() != CUDA_SUCCESS) {
                        fprintf(stderr, "scrub_bench: cuMemsetD32 failed\n");
                        return 1;
                }
        memset_ms = (now_ms() - t0) / rounds;
        (void)cu->mem_unmap(va, chunk);
        (void)cu->mem_address_free(va, chunk);
        gs_gpu_mem_drop(&g, h, &fd);
        (void)cu->primary_ctx_release(g.dev);
        printf("scrub_bench: %s, %d rounds of a %llu MiB chunk\n", g.name, rounds,
               (unsigned long long)(chunk >> 20));
        printf("RESULT scrub_ms_per_chunk=%.3f memset_ms_per_chunk=%.3f scrub_GBps=%.0f chunk_mib=%llu\n",
               scrub_ms, memset_ms, (double)chunk / 1e6 / scrub_ms, (unsigned long long)(chunk >> 20));
        gs_cuda_close(&ag.cu);
        return 0;
}
