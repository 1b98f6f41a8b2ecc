/* gs_check_gpu.h — the agent's GPU on the fake driver (test/fakecuda,
 * dlopened as the agent does) for the unit suites that need a real pool:
 * the driver's table, then GPU 0 opened from ag->cfg.  After
 * gs_check_fakecuda_env (gs_check.h). */
#ifndef GS_CHECK_GPU_H
#define GS_CHECK_GPU_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "gs_gpu.h"

/* The fake driver's table into ag->cu, initialized. */
static inline void gs_check_cuda_open(struct gs_node *ag)
{
        char err[512], path[512];
        const char *b = getenv("B");

        snprintf(path, sizeof(path), "%s/test/fakecuda/libcuda.so.1", b ? b : "build");
        ck_assert_msg(gs_cuda_open(&ag->cu, path, err, sizeof(err)) == 0, "%s", err);
        ck_assert_int_eq(ag->cu.init(0), CUDA_SUCCESS);
}

/* GPU 0, healthy, of nchunks chunks: ag's only GPU (free it after
 * gs_gpu_close).  Opened as at a first start: no stateDir (a ledger a
 * real agent left in /var/lib/gshare, or another test, is not read). */
static inline struct gs_gpu *gs_check_gpu_open(struct gs_node *ag, uint32_t nchunks)
{
        char err[512];
        struct gs_gpu *g = calloc(1, sizeof(*g));

        ck_assert_ptr_nonnull(g);
        snprintf(ag->cfg.state_dir, sizeof(ag->cfg.state_dir), "/nonexistent/gs-check-%d", (int)getpid());
        g->node = ag;
        ag->gpus = g;
        ag->ngpus = 1;
        ck_assert_msg(gs_gpu_open(g, 0, &ag->cfg, err, sizeof(err)) == 0, "%s", err);
        ck_assert_msg(g->healthy, "%s", g->health_reason);
        ck_assert_uint_eq(g->nchunks, nchunks);
        return g;
}

#endif
