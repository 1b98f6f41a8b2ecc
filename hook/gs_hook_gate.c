/* gs_hook_gate.c — the launch gate (gs_hook_gate.h) and its wrappers of
 * the driver's launch, copy and memset entry points.
 *
 * State: g_inside counts the wrappers running (armed, counted); g_closed
 * the closes held.  A wrapper adds itself to g_inside and then reads
 * g_closed; a closer adds to g_closed and then reads g_inside.  Both are
 * sequentially consistent, so at least one of the two sees the other: the
 * wrapper backs out and waits, or the closer waits for it to leave.
 *
 * A thread inside a wrapper that closes the gate is "exempt": g_exempt
 * counts such closers, and a closer waits until g_inside <= g_exempt (the
 * counts of the closers themselves).  A thread that holds a close is not
 * counted when it calls a wrapper (t_closes), so it never waits for its
 * own gate. */
#include <pthread.h>

#include "gs_hook.h"
#include "gs_hook_gate.h"
#include "gs_hook_qos.h"

static int g_armed;
static int g_closed;  /* closes held (atomic; changed under g_mu) */
static long g_inside; /* counted wrappers running (atomic) */
static long g_exempt; /* closers counted in g_inside (g_mu) */
static int g_waiting; /* threads waiting at the closed gate (g_mu) */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;

/* initial-exec: no __tls_get_addr, so libgshare.so needs libc only (it is
 * preloaded: its TLS is static). */
#define GS_TLS __thread __attribute__((tls_model("initial-exec")))
static GS_TLS int t_depth;   /* armed wrappers this thread is in (nested) */
static GS_TLS int t_counted; /* its outermost one is counted in g_inside */
static GS_TLS int t_closes;  /* closes this thread holds */

/* Only the forking thread lives on: the counts are its own, and every
 * field is set again (so fork need not take g_mu first, and no lock order
 * with the hook's other fork handlers arises). */
static void gs_gate_child(void)
{
        __atomic_store_n(&g_inside, t_counted, __ATOMIC_SEQ_CST);
        __atomic_store_n(&g_closed, t_closes, __ATOMIC_SEQ_CST);
        g_exempt = t_counted && t_closes;
        g_waiting = 0;
        pthread_mutex_init(&g_mu, NULL);
        pthread_cond_init(&g_cv, NULL);
}

static void gs_gate_fork_register(void)
{
        (void)pthread_atfork(NULL, NULL, gs_gate_child);
}

void gs_gate_arm(void)
{
        pthread_once(&g_fork_once, gs_gate_fork_register);
        __atomic_store_n(&g_armed, 1, __ATOMIC_SEQ_CST);
}

int gs_gate_armed(void)
{
        return __atomic_load_n(&g_armed, __ATOMIC_SEQ_CST);
}

/* One counted wrapper less; wakes a closer if one waits. */
static void gs_gate_uncount(void)
{
        __atomic_sub_fetch(&g_inside, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&g_closed, __ATOMIC_SEQ_CST)) {
                pthread_mutex_lock(&g_mu);
                pthread_cond_broadcast(&g_cv);
                pthread_mutex_unlock(&g_mu);
        }
}

int gs_gate_enter(void)
{
        if (t_depth++ > 0 || t_closes > 0)
                return 0;
        for (;;) {
                __atomic_add_fetch(&g_inside, 1, __ATOMIC_SEQ_CST);
                if (!__atomic_load_n(&g_closed, __ATOMIC_SEQ_CST))
                        break;
                gs_gate_uncount();
                pthread_mutex_lock(&g_mu);
                g_waiting++;
                while (__atomic_load_n(&g_closed, __ATOMIC_SEQ_CST))
                        pthread_cond_wait(&g_cv, &g_mu);
                g_waiting--;
                pthread_mutex_unlock(&g_mu);
        }
        t_counted = 1;
        return 1;
}

void gs_gate_leave(int counted)
{
        t_depth--;
        if (!counted)
                return;
        t_counted = 0;
        if (t_closes > 0) {
                /* A closer leaving the wrapper it closed from. */
                pthread_mutex_lock(&g_mu);
                g_exempt--;
                __atomic_sub_fetch(&g_inside, 1, __ATOMIC_SEQ_CST);
                pthread_cond_broadcast(&g_cv);
                pthread_mutex_unlock(&g_mu);
                return;
        }
        gs_gate_uncount();
}

void gs_gate_close(void)
{
        pthread_mutex_lock(&g_mu);
        __atomic_add_fetch(&g_closed, 1, __ATOMIC_SEQ_CST);
        if (t_closes++ == 0 && t_counted)
                g_exempt++;
        while (__atomic_load_n(&g_inside, __ATOMIC_SEQ_CST) > g_exempt)
                pthread_cond_wait(&g_cv, &g_mu);
        pthread_mutex_unlock(&g_mu);
}

void gs_gate_open(void)
{
        pthread_mutex_lock(&g_mu);
        if (t_closes > 0) {
                __atomic_sub_fetch(&g_closed, 1, __ATOMIC_SEQ_CST);
                if (--t_closes == 0 && t_counted)
                        g_exempt--;
        }
        pthread_cond_broadcast(&g_cv);
        pthread_mutex_unlock(&g_mu);
}

int gs_gate_waiting(void)
{
        int n;

        pthread_mutex_lock(&g_mu);
        n = g_waiting;
        pthread_mutex_unlock(&g_mu);
        return n;
}

/* ---- the wrappers ---------------------------------------------------- */

#define GS_GATE_ENUM(n, b) GS_GI_##n,
enum { GS_GATED(GS_GATE_ENUM) GS_GI__N };
#define GS_GATE_NAME(n, b) #n,
static const char *const gs_gate_names[] = { GS_GATED(GS_GATE_NAME) };
static void *gs_gate_fns[GS_GI__N];

/* The driver's function i, resolved on first use (NULL if it lacks it). */
static void *gs_gate_real(int i)
{
        void *f = __atomic_load_n(&gs_gate_fns[i], __ATOMIC_ACQUIRE);

        if (__builtin_expect(f == NULL, 0)) {
                f = gs_cu_real(gs_gate_names[i]);
                __atomic_store_n(&gs_gate_fns[i], f, __ATOMIC_RELEASE);
        }
        return f;
}

/* Some are deprecated in cuda.h (cuLaunch, cuLaunchGrid, ...): comparing
 * their types is no use of them. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define GS_GATE_WRAP(n, b)                                                             \
        _Static_assert(__builtin_types_compatible_p(__typeof__(&n), __typeof__(&b)),   \
                       #n " has cuda.h's prototype of " #b);                           \
        GS_HOOK_API CUresult CUDAAPI n GS_P_##b(GS_GATE_PARAMS)                        \
        {                                                                              \
                CUresult(*real) GS_P_##b(GS_GATE_PARAMS) =                             \
                        (CUresult(*) GS_P_##b(GS_GATE_PARAMS))gs_gate_real(GS_GI_##n); \
                CUresult r;                                                            \
                int counted;                                                           \
                                                                                       \
                if (!real)                                                             \
                        return CUDA_ERROR_NOT_SUPPORTED;                               \
                if (!__atomic_load_n(&g_armed, __ATOMIC_RELAXED))                      \
                        return real GS_P_##b(GS_GATE_ARGS);                            \
                counted = gs_gate_enter();                                             \
                r = real GS_P_##b(GS_GATE_ARGS);                                       \
                gs_gate_leave(counted);                                                \
                return r;                                                              \
        }
GS_GATED_OTHER(GS_GATE_WRAP)

/* The stream of a launch, by the base function's parameters. */
#define GS_S_cuLaunchKernel hStream
#define GS_S_cuLaunchKernelEx (config ? config->hStream : NULL)
#define GS_S_cuLaunchCooperativeKernel hStream
#define GS_S_cuLaunchGridAsync hStream
#define GS_S_cuGraphLaunch hStream
/* Its kernel (NULL: a graph). */
#define GS_F_cuLaunchKernel f
#define GS_F_cuLaunchKernelEx f
#define GS_F_cuLaunchCooperativeKernel f
#define GS_F_cuLaunchGridAsync f
#define GS_F_cuGraphLaunch ((CUfunction)NULL)
/* What tells its launches apart (gs_qos_before): a kernel's grid, a
 * graph's exec. */
#define GS_K_cuLaunchKernel GS_QOS_SHAPE(gridDimX, gridDimY, gridDimZ)
#define GS_K_cuLaunchKernelEx (config ? GS_QOS_SHAPE(config->gridDimX, config->gridDimY, config->gridDimZ) : 0)
#define GS_K_cuLaunchCooperativeKernel GS_QOS_SHAPE(gridDimX, gridDimY, gridDimZ)
#define GS_K_cuLaunchGridAsync GS_QOS_SHAPE((unsigned)grid_width, (unsigned)grid_height, 1u)
#define GS_K_cuGraphLaunch ((uint64_t)(uintptr_t)hGraphExec)

/* A launch: compute QoS admits it (gs_hook_qos.h) before the gate, so a
 * launch waiting for its turn never holds a mover's close. */
#define GS_GATE_WRAP_LAUNCH(n, b)                                                      \
        _Static_assert(__builtin_types_compatible_p(__typeof__(&n), __typeof__(&b)),   \
                       #n " has cuda.h's prototype of " #b);                           \
        GS_HOOK_API CUresult CUDAAPI n GS_P_##b(GS_GATE_PARAMS)                        \
        {                                                                              \
                CUresult(*real) GS_P_##b(GS_GATE_PARAMS) =                             \
                        (CUresult(*) GS_P_##b(GS_GATE_PARAMS))gs_gate_real(GS_GI_##n); \
                CUresult r;                                                            \
                int counted, qc;                                                       \
                                                                                       \
                if (!real)                                                             \
                        return CUDA_ERROR_NOT_SUPPORTED;                               \
                qc = gs_qos_before(GS_S_##b, GS_F_##b, GS_K_##b);                      \
                if (!__atomic_load_n(&g_armed, __ATOMIC_RELAXED)) {                    \
                        r = real GS_P_##b(GS_GATE_ARGS);                               \
                } else {                                                               \
                        counted = gs_gate_enter();                                     \
                        r = real GS_P_##b(GS_GATE_ARGS);                               \
                        gs_gate_leave(counted);                                        \
                }                                                                      \
                gs_qos_after(qc, GS_S_##b, r);                                         \
                return r;                                                              \
        }
GS_GATED_LAUNCH(GS_GATE_WRAP_LAUNCH)

#pragma GCC diagnostic pop
