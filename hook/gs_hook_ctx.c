/* gs_hook_ctx.c — the contexts the application made with cuCtxCreate*,
 * for the mover (gs_hook_spill.h), which synchronizes every context the
 * process may run work in before it moves memory.  The interposed
 * cuCtxCreate* record them, the interposed cuCtxDestroy forgets them.
 * Primary contexts are not kept here: the mover asks the driver for their
 * state each time.
 *
 * Bounded: GS_CTX_MAX contexts.  One that finds the table full is only
 * counted (g_unrecorded), and the mover refuses to move while any such
 * context lives: it could not synchronize it. */
#include <pthread.h>

#include "gs_hook.h"

static pthread_mutex_t g_ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
        CUcontext ctx;
        CUdevice dev;
} g_ctxs[GS_CTX_MAX];
static int g_unrecorded; /* live contexts not in g_ctxs */
static pthread_once_t g_ctx_once = PTHREAD_ONCE_INIT;
/* This thread is inside gs_ctx_destroy: a driver whose cuCtxDestroy calls
 * its exported cuCtxDestroy_v2 (ours, interposed) must not wait for the
 * lock this thread holds.  initial-exec, as in gs_hook_gate.c. */
static __thread __attribute__((tls_model("initial-exec"))) int t_destroying;

/* The child has none of the parent's contexts (CUDA does not survive a
 * fork), and a lock held by another thread of the parent stays held. */
static void gs_ctx_child(void)
{
        pthread_mutex_init(&g_ctx_mu, NULL);
        for (size_t i = 0; i < GS_ARRAY_SIZE(g_ctxs); i++)
                g_ctxs[i].ctx = NULL;
        g_unrecorded = 0;
}

static void gs_ctx_fork_register(void) { (void)pthread_atfork(NULL, NULL, gs_ctx_child); }

void gs_ctx_created(CUcontext ctx, CUdevice dev)
{
        size_t i;

        if (!ctx)
                return;
        pthread_once(&g_ctx_once, gs_ctx_fork_register);
        pthread_mutex_lock(&g_ctx_mu);
        for (i = 0; i < GS_ARRAY_SIZE(g_ctxs) && g_ctxs[i].ctx && g_ctxs[i].ctx != ctx; i++)
                ;
        if (i < GS_ARRAY_SIZE(g_ctxs)) {
                g_ctxs[i].ctx = ctx;
                g_ctxs[i].dev = dev;
        } else {
                g_unrecorded++;
        }
        pthread_mutex_unlock(&g_ctx_mu);
}

CUresult gs_ctx_destroy(CUcontext ctx, CUresult (*destroy)(CUcontext))
{
        CUresult r;
        size_t i;

        if (t_destroying)
                return destroy(ctx); /* the outer call forgets it */
        pthread_once(&g_ctx_once, gs_ctx_fork_register);
        /* Held across the driver's call: the mover, which holds it while
         * it uses the contexts, never sees one half destroyed. */
        pthread_mutex_lock(&g_ctx_mu);
        t_destroying = 1;
        r = destroy(ctx);
        t_destroying = 0;
        if (r == CUDA_SUCCESS && ctx) {
                for (i = 0; i < GS_ARRAY_SIZE(g_ctxs) && g_ctxs[i].ctx != ctx; i++)
                        ;
                if (i < GS_ARRAY_SIZE(g_ctxs))
                        g_ctxs[i].ctx = NULL;
                else if (g_unrecorded > 0)
                        g_unrecorded--;
        }
        pthread_mutex_unlock(&g_ctx_mu);
        return r;
}

void gs_ctx_lock(void)
{
        pthread_once(&g_ctx_once, gs_ctx_fork_register);
        pthread_mutex_lock(&g_ctx_mu);
}

void gs_ctx_unlock(void) { pthread_mutex_unlock(&g_ctx_mu); }

int gs_ctx_list(CUcontext *ctxs, CUdevice *devs, int max)
{
        int n = 0;

        if (g_unrecorded > 0)
                return -1;
        for (size_t i = 0; i < GS_ARRAY_SIZE(g_ctxs) && n < max; i++)
                if (g_ctxs[i].ctx) {
                        ctxs[n] = g_ctxs[i].ctx;
                        devs[n++] = g_ctxs[i].dev;
                }
        return n;
}
