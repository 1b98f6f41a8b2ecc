/* gs_gpu_lock.h — the lock of one GPU (struct gs_gpu's lock).
 *
 * One lock per GPU serializes every call on its pool and every access to
 * its chunk records, spares, scrubber state and restart books (gs_gpu.h
 * says per part what it covers).  It is taken only through these calls,
 * never by hand:
 *
 *   gs_gpu_lock(g)      takes it, records the calling thread as its owner
 *                       and makes g's primary context current on that
 *                       thread (every CUDA call under the lock is on g);
 *   gs_gpu_unlock(g)    lets it go;
 *   gs_gpu_cond_wait(g, cv) / gs_gpu_cond_timedwait(g, cv, ts)
 *                       a condition wait on it (the scrubber's), which
 *                       keeps the owner right across the wait.
 *
 * gs_gpu_assert_locked(g) stands at the top of every function whose
 * comment says "under g->lock": it aborts, naming the function, when the
 * calling thread does not hold the lock.  It compares the recorded owner
 * with pthread_self() and is compiled in unless NDEBUG is defined (the
 * build never defines it: plain, ASan and TSan builds all check).
 *
 * No function lets go of a lock its caller holds: where work must run
 * without it (the scrubber's wait for its batch, host memory pinned for
 * spills), the function is split and the caller unlocks between the parts
 * (gs_gpu_spill_prepare_pick / _work / _end).  docs/design.md "Locks"
 * gives the lock order and which thread takes which lock. */
#ifndef GS_GPU_LOCK_H
#define GS_GPU_LOCK_H

#include <pthread.h>
#include <stdbool.h>
#include <time.h>

struct gs_gpu;

struct gs_gpu_lock {
        pthread_mutex_t mu;
        /* The thread holding mu, valid while held is true; both written
         * by the holder, read atomically (the assertion may run in a
         * thread that does not hold it: then it fails). */
        pthread_t owner;
        bool held;
};

void gs_gpu_lock_init(struct gs_gpu *g);
void gs_gpu_lock_destroy(struct gs_gpu *g);
void gs_gpu_lock(struct gs_gpu *g);
void gs_gpu_unlock(struct gs_gpu *g);
/* pthread_cond_wait / _timedwait (ts absolute, the cond's clock) on g's
 * lock, held by the caller and held again on return. */
void gs_gpu_cond_wait(struct gs_gpu *g, pthread_cond_t *cv);
int gs_gpu_cond_timedwait(struct gs_gpu *g, pthread_cond_t *cv, const struct timespec *ts);
/* Whether the calling thread holds g's lock; whether it holds none. */
bool gs_gpu_locked(const struct gs_gpu *g);
bool gs_gpu_none_locked(void);
/* Aborts with func's name: the caller does not hold g's lock (g NULL:
 * it holds one it must not). */
void gs_gpu_lock_fail(const struct gs_gpu *g, const char *func) __attribute__((noreturn));

#ifndef NDEBUG
#define gs_gpu_assert_locked(g)                          \
        do {                                             \
                if (!gs_gpu_locked(g))                   \
                        gs_gpu_lock_fail((g), __func__); \
        } while (0)
/* Before waiting on another thread that may take a GPU's lock (the
 * main loop, gs_agent_wait_*): aborts if the caller holds one. */
#define gs_gpu_assert_none_locked()                       \
        do {                                              \
                if (!gs_gpu_none_locked())                \
                        gs_gpu_lock_fail(NULL, __func__); \
        } while (0)
#else
#define gs_gpu_assert_locked(g) ((void)(g))
#define gs_gpu_assert_none_locked() ((void)0)
#endif

#endif
