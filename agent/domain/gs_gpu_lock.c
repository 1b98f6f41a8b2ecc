/* gs_gpu_lock.c — the GPU's lock (gs_gpu_lock.h). */
#include "gs_gpu_lock.h"

#include <stdlib.h>

#include "gs_gpu.h"
#include "gs_log.h"

void gs_gpu_lock_init(struct gs_gpu *g)
{
        pthread_mutex_init(&g->lock.mu, NULL);
        g->lock.held = false;
}

void gs_gpu_lock_destroy(struct gs_gpu *g)
{
        pthread_mutex_destroy(&g->lock.mu);
}

#ifndef NDEBUG
/* GPU locks the thread holds: at most one (docs/design.md "Locks"), which
 * is also what keeps the current context the locked GPU's. */
static __thread unsigned t_held;
#endif

static void took(struct gs_gpu *g)
{
#ifndef NDEBUG
        if (t_held++) {
                log_error("GPU %u: gs_gpu_lock: this thread holds another GPU's lock already", g->index);
                abort();
        }
#endif
        __atomic_store_n(&g->lock.owner, pthread_self(), __ATOMIC_RELAXED);
        __atomic_store_n(&g->lock.held, true, __ATOMIC_RELAXED);
}

static void leaving(struct gs_gpu *g)
{
        gs_gpu_assert_locked(g);
#ifndef NDEBUG
        t_held--;
#endif
        __atomic_store_n(&g->lock.held, false, __ATOMIC_RELAXED);
}

void gs_gpu_lock(struct gs_gpu *g)
{
        pthread_mutex_lock(&g->lock.mu);
        took(g);
        if (g->ctx)
                (void)g->node->cu.ctx_set_current(g->ctx);
}

void gs_gpu_unlock(struct gs_gpu *g)
{
        leaving(g);
        pthread_mutex_unlock(&g->lock.mu);
}

void gs_gpu_cond_wait(struct gs_gpu *g, pthread_cond_t *cv)
{
        leaving(g);
        pthread_cond_wait(cv, &g->lock.mu);
        took(g);
}

int gs_gpu_cond_timedwait(struct gs_gpu *g, pthread_cond_t *cv, const struct timespec *ts)
{
        leaving(g);
        int r = pthread_cond_timedwait(cv, &g->lock.mu, ts);
        took(g);
        return r;
}

bool gs_gpu_locked(const struct gs_gpu *g)
{
        return __atomic_load_n(&g->lock.held, __ATOMIC_RELAXED) &&
               pthread_equal(__atomic_load_n(&g->lock.owner, __ATOMIC_RELAXED), pthread_self());
}

bool gs_gpu_none_locked(void)
{
#ifndef NDEBUG
        return t_held == 0;
#else
        return true;
#endif
}

void gs_gpu_lock_fail(const struct gs_gpu *g, const char *func)
{
        if (!g)
                log_error("%s: waits for another thread with a GPU's lock held", func);
        else
                log_error("GPU %u: %s: the GPU's lock is not held as required by this thread", g->index, func);
        abort();
}
