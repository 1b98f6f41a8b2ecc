/* check_gpu.c — the GPU's NUMA node lookup in sysfs (gs_gpu.h); its lock
 * (gs_gpu_lock.h): the owner recorded, the assertion in the functions that
 * require it, one GPU lock per thread; the handover's phase
 * (gs_gpu_phase.h): its moves and what each phase allows. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_gpu.h"

START_TEST(test_numa_node)
{
        char root[] = "/tmp/gsnumaXXXXXX", dir[256], file[300];
        FILE *f;

        ck_assert_ptr_nonnull(mkdtemp(root));
        ck_assert_int_eq(gs_gpu_numa_node(root, "0000:3B:00.0"), -1); /* absent */
        snprintf(dir, sizeof(dir), "%s/bus", root);
        mkdir(dir, 0755);
        snprintf(dir, sizeof(dir), "%s/bus/pci", root);
        mkdir(dir, 0755);
        snprintf(dir, sizeof(dir), "%s/bus/pci/devices", root);
        mkdir(dir, 0755);
        /* sysfs names devices in lower case; CUDA reports upper case. */
        snprintf(dir, sizeof(dir), "%s/bus/pci/devices/0000:3b:00.0", root);
        mkdir(dir, 0755);
        snprintf(file, sizeof(file), "%s/numa_node", dir);
        f = fopen(file, "w");
        fputs("1\n", f);
        fclose(f);
        ck_assert_int_eq(gs_gpu_numa_node(root, "0000:3B:00.0"), 1);
        f = fopen(file, "w");
        fputs("garbage\n", f);
        fclose(f);
        ck_assert_int_eq(gs_gpu_numa_node(root, "0000:3B:00.0"), -1);
        f = fopen(file, "w");
        fputs("-1\n", f);
        fclose(f);
        ck_assert_int_eq(gs_gpu_numa_node(root, "0000:3b:00.0"), -1);
        unlink(file);
}
END_TEST

/* A GPU without a device: the lock and the phase need none (ctx NULL:
 * nothing made current). */
static struct gs_gpu *bare_gpu(uint32_t index)
{
        struct gs_gpu *g = calloc(1, sizeof(*g));

        ck_assert_ptr_nonnull(g);
        g->index = index;
        g->nchunks = 0;
        gs_gpu_lock_init(g);
        return g;
}

static void *locked_elsewhere(void *arg)
{
        return (void *)(uintptr_t)gs_gpu_locked(arg);
}

START_TEST(test_lock_owner)
{
        struct gs_gpu *g = bare_gpu(0);
        pthread_t t;
        void *other;

        ck_assert(!gs_gpu_locked(g));
        ck_assert(gs_gpu_none_locked());
        gs_gpu_lock(g);
        ck_assert(gs_gpu_locked(g));
        ck_assert(!gs_gpu_none_locked());
        /* Another thread does not hold it. */
        ck_assert_int_eq(pthread_create(&t, NULL, locked_elsewhere, g), 0);
        pthread_join(t, &other);
        ck_assert_ptr_null(other);
        /* A condition wait gives it up and takes it back, owner and all. */
        pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ck_assert_int_eq(gs_gpu_cond_timedwait(g, &cv, &ts), ETIMEDOUT);
        ck_assert(gs_gpu_locked(g));
        gs_gpu_assert_locked(g);
        gs_gpu_unlock(g);
        ck_assert(!gs_gpu_locked(g));
        ck_assert(gs_gpu_none_locked());
        /* Two GPUs one after the other: fine. */
        struct gs_gpu *h = bare_gpu(1);
        gs_gpu_lock(g);
        gs_gpu_unlock(g);
        gs_gpu_lock(h);
        gs_gpu_unlock(h);
        gs_gpu_lock_destroy(g);
        gs_gpu_lock_destroy(h);
        free(g);
        free(h);
}
END_TEST

/* A function documented "under g->lock" called without it aborts. */
START_TEST(test_unlocked_call_aborts)
{
        struct gs_gpu *g = bare_gpu(0);

        gs_gpu_chunk_swap(g, 0, 1);
}
END_TEST

/* Held by another thread is not held by this one. */
static void *hold_forever(void *arg)
{
        gs_gpu_lock(arg);
        for (;;)
                pause();
        return NULL;
}

START_TEST(test_other_threads_lock_aborts)
{
        struct gs_gpu *g = bare_gpu(0);
        pthread_t t;

        ck_assert_int_eq(pthread_create(&t, NULL, hold_forever, g), 0);
        while (!__atomic_load_n(&g->lock.held, __ATOMIC_RELAXED))
                sched_yield();
        gs_gpu_spill_kick(g);
}
END_TEST

/* At most one GPU's lock per thread. */
START_TEST(test_second_gpu_lock_aborts)
{
        struct gs_gpu *g = bare_gpu(0), *h = bare_gpu(1);

        gs_gpu_lock(g);
        gs_gpu_lock(h);
}
END_TEST

START_TEST(test_phase_moves)
{
        struct gs_gpu *g = bare_gpu(0);
        static const struct {
                enum gs_gpu_phase to;
                bool makes, scrubs;
        } path[] = {
                { GS_GPU_PAUSED, true, false },                                          /* TAKE */
                { GS_GPU_SERVING, true, true },                                          /* the new agent failed */
                { GS_GPU_INHERITED, true, false },                                       /* (a new agent's pool) */
                { GS_GPU_SERVING, true, true },                                          /* restored */
                { GS_GPU_PAUSED, true, false },    { GS_GPU_HANDED_OVER, false, false }, /* READY, stop */
        };

        ck_assert_int_eq(gs_gpu_phase_get(g), GS_GPU_SERVING);
        ck_assert(gs_gpu_makes_memory(g) && gs_gpu_scrubs(g));
        gs_gpu_lock(g);
        for (size_t i = 0; i < sizeof(path) / sizeof(path[0]); i++) {
                gs_gpu_phase_set(g, path[i].to);
                ck_assert_int_eq(gs_gpu_phase_get(g), path[i].to);
                ck_assert_int_eq(gs_gpu_makes_memory(g), path[i].makes);
                ck_assert_int_eq(gs_gpu_scrubs(g), path[i].scrubs);
        }
        gs_gpu_unlock(g);
        ck_assert_str_eq(gs_gpu_phase_name(GS_GPU_HANDED_OVER), "handed over");
        /* gs_gpu_hand_over takes the lock itself; a GPU without a pool is
         * never paused. */
        struct gs_gpu *h = bare_gpu(1);
        gs_gpu_hand_over(h);
        ck_assert_int_eq(gs_gpu_phase_get(h), GS_GPU_HANDED_OVER);
        ck_assert(gs_gpu_none_locked());
        gs_gpu_lock_destroy(g);
        gs_gpu_lock_destroy(h);
        free(g);
        free(h);
}
END_TEST

/* A move the table lacks: a handed-over GPU never serves again. */
START_TEST(test_phase_bad_move_aborts)
{
        struct gs_gpu *g = bare_gpu(0);

        gs_gpu_lock(g);
        gs_gpu_phase_set(g, GS_GPU_HANDED_OVER);
        gs_gpu_phase_set(g, GS_GPU_SERVING);
}
END_TEST

START_TEST(test_phase_inherited_to_paused_aborts)
{
        struct gs_gpu *g = bare_gpu(0);

        gs_gpu_lock(g);
        gs_gpu_phase_set(g, GS_GPU_INHERITED);
        gs_gpu_phase_set(g, GS_GPU_PAUSED);
}
END_TEST

START_TEST(test_phase_unlocked_aborts)
{
        struct gs_gpu *g = bare_gpu(0);

        gs_gpu_phase_set(g, GS_GPU_PAUSED);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("gpu");
        TCase *t = tcase_create("gpu");

        tcase_add_test(t, test_numa_node);
        tcase_add_test(t, test_lock_owner);
        tcase_add_test(t, test_phase_moves);
        tcase_add_test_raise_signal(t, test_unlocked_call_aborts, SIGABRT);
        tcase_add_test_raise_signal(t, test_other_threads_lock_aborts, SIGABRT);
        tcase_add_test_raise_signal(t, test_second_gpu_lock_aborts, SIGABRT);
        tcase_add_test_raise_signal(t, test_phase_bad_move_aborts, SIGABRT);
        tcase_add_test_raise_signal(t, test_phase_inherited_to_paused_aborts, SIGABRT);
        tcase_add_test_raise_signal(t, test_phase_unlocked_aborts, SIGABRT);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}
