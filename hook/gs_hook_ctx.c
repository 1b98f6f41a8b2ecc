/* gs_hook_ctx.c — the contexts the application made with cuCtxCreate*,
 * for the mover (gs_hook_spill.h), which synchronizes every context the
 * process may run work in before it moves memory, and for the hook's
 * thread, which does so before it gives chunks back (gs_hook_thread.h);
 * and those sets of contexts (gs_ctx_collect).  The interposed
 * cuCtxCreate* record them, the interposed cuCtxDestroy forgets them.
 * Primary contexts are not kept here: the mover asks the driver for their
 * state each time.
 *
 * Bounded: GS_CTX_MAX contexts.  One that finds the table full is only
 * counted (g_unrecorded), and the mover refuses to move while any such
 * context lives: it could not synchronize it. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

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

static void gs_ctx_fork_register(void)
{
        (void)pthread_atfork(NULL, NULL, gs_ctx_child);
}

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

void gs_ctx_unlock(void)
{
        pthread_mutex_unlock(&g_ctx_mu);
}

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

static void gs_ctx_set_add(struct gs_ctx_set *s, CUcontext c, CUdevice d, CUdevice dev)
{
        s->ctx[s->n++] = c;
        if (d == dev && !s->copy)
                s->copy = c;
}

int gs_ctx_collect(const struct gs_cu *cu, uint64_t devs, CUdevice dev, struct gs_ctx_set *s)
{
        CUcontext app[GS_CTX_MAX];
        CUdevice adev[GS_CTX_MAX];
        int count = 0, n;

        memset(s, 0, sizeof(*s));
        if (!cu->device_get_count || !cu->device_primary_ctx_get_state || !cu->device_primary_ctx_retain ||
            cu->device_get_count(&count) != CUDA_SUCCESS)
                return -ENODEV;
        for (CUdevice d = 0; d < count && d < GS_MAX_DEVICES; d++) {
                unsigned int flags = 0;
                int active = 0;
                CUcontext c = NULL;

                if (!(devs >> d & 1) || cu->device_primary_ctx_get_state(d, &flags, &active) != CUDA_SUCCESS ||
                    !active || cu->device_primary_ctx_retain(&c, d) != CUDA_SUCCESS)
                        continue;
                s->prim[s->nprim++] = d;
                gs_ctx_set_add(s, c, d, dev);
        }
        n = gs_ctx_list(app, adev, GS_CTX_MAX);
        if (n < 0) {
                gs_hook_say_once(GS_ONCE_MOVER,
                                 "more than %d CUDA contexts: the memory this process borrowed "
                                 "or cached cannot be given back while they live",
                                 GS_CTX_MAX);
                return -EBUSY;
        }
        for (int i = 0; i < n; i++)
                if (adev[i] >= 0 && adev[i] < GS_MAX_DEVICES && (devs >> adev[i] & 1))
                        gs_ctx_set_add(s, app[i], adev[i], dev);
        return dev < 0 || s->copy ? 0 : -ENODEV;
}

void gs_ctx_set_sync(const struct gs_cu *cu, const struct gs_ctx_set *s)
{
        CUcontext popped;

        if (!cu->ctx_push_current_v2 || !cu->ctx_pop_current_v2 || !cu->ctx_synchronize)
                return;
        for (int i = 0; i < s->n; i++)
                if (cu->ctx_push_current_v2(s->ctx[i]) == CUDA_SUCCESS) {
                        (void)cu->ctx_synchronize();
                        (void)cu->ctx_pop_current_v2(&popped);
                }
}

void gs_ctx_set_release(const struct gs_cu *cu, struct gs_ctx_set *s)
{
        for (int i = 0; i < s->nprim; i++)
                if (cu->device_primary_ctx_release_v2)
                        (void)cu->device_primary_ctx_release_v2(s->prim[i]);
        s->nprim = 0;
}

int gs_ctx_sync_devices(const struct gs_cu *cu, uint64_t devs)
{
        struct gs_ctx_set s;
        int r;

        gs_ctx_lock();
        r = gs_ctx_collect(cu, devs, -1, &s);
        if (r == 0)
                gs_ctx_set_sync(cu, &s);
        gs_ctx_set_release(cu, &s);
        gs_ctx_unlock();
        return r == -ENODEV ? 0 : r; /* no device: no work */
}
