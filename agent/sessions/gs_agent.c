/* gs_agent.c — the agent's shared services on the main loop (see
 * gs_agent.h); main() is in gs_agent_main.c. */
#include "gs_agent.h"

#include <time.h>

#include "gs_gpu_lock.h"

static void run_changed(void *data)
{
        struct gs_agent *ag = data;

        if (ag->on_changed)
                ag->on_changed(ag);
}

void gs_agent_changed(struct gs_agent *ag)
{
        ag->generation++;
        gs_loop_post(ag->node.loop, &ag->changed_post, run_changed, ag);
}

static void on_poke(void *data)
{
        gs_agent_changed(data);
}

static void on_scan_wanted(void *data)
{
        struct gs_agent *ag = data;

        gs_loop_timer_arm(&ag->usage_timer, 0);
}

void gs_agent_count(struct gs_agent *ag, unsigned *count)
{
        pthread_mutex_lock(&ag->done_mu);
        __atomic_add_fetch(count, 1, __ATOMIC_ACQ_REL);
        pthread_cond_broadcast(&ag->done_cv);
        pthread_mutex_unlock(&ag->done_mu);
}

bool gs_agent_await(struct gs_agent *ag, const unsigned *count, unsigned before, unsigned n, int ms)
{
        int64_t until = gs_mono_ms() + ms;
        bool got;

        gs_gpu_assert_none_locked(); /* the main loop may want it: docs/design.md "Locks" */
        pthread_mutex_lock(&ag->done_mu);
        /* Signed: before may be one past the count (gs_short: a kick begun). */
        while (!(got = (int)(__atomic_load_n(count, __ATOMIC_ACQUIRE) - before) >= (int)n)) {
                int64_t left = until - gs_mono_ms();
                struct timespec ts;

                if (left <= 0)
                        break;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                ts.tv_sec += left / 1000;
                ts.tv_nsec += (left % 1000) * 1000000;
                if (ts.tv_nsec >= 1000000000) {
                        ts.tv_sec++;
                        ts.tv_nsec -= 1000000000;
                }
                (void)pthread_cond_timedwait(&ag->done_cv, &ag->done_mu, &ts);
        }
        pthread_mutex_unlock(&ag->done_mu);
        return got;
}

static void node_changed(struct gs_node *n)
{
        gs_agent_changed(gs_agent_of(n));
}

static void node_poke(struct gs_node *n)
{
        gs_agent_poke(gs_agent_of(n));
}

void gs_agent_wire(struct gs_agent *ag, void (*on_changed)(struct gs_agent *ag))
{
        pthread_condattr_t ca;

        pthread_mutex_init(&ag->done_mu, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&ag->done_cv, &ca);
        pthread_condattr_destroy(&ca);
        ag->wired = true;
        ag->on_changed = on_changed;
        ag->node.on_changed = node_changed;
        ag->node.on_poke = node_poke;
        gs_loop_async_add(ag->node.loop, &ag->changed_async, on_poke, ag);
        gs_loop_async_add(ag->node.loop, &ag->scan_async, on_scan_wanted, ag);
}

void gs_agent_want_scan(struct gs_agent *ag)
{
        gs_loop_async_send(ag->node.loop, &ag->scan_async);
}

void gs_agent_wait_scan(struct gs_agent *ag, int ms)
{
        unsigned before = __atomic_load_n(&ag->usage_scans, __ATOMIC_ACQUIRE);

        gs_agent_want_scan(ag);
        /* Two scans: the one under way may have read NVML before the need. */
        (void)gs_agent_await(ag, &ag->usage_scans, before, 2, ms);
}

void gs_agent_poke(struct gs_agent *ag)
{
        gs_loop_async_send(ag->node.loop, &ag->changed_async);
}

void gs_agent_unwire(struct gs_agent *ag)
{
        if (!ag->wired)
                return;
        pthread_cond_destroy(&ag->done_cv);
        pthread_mutex_destroy(&ag->done_mu);
        ag->wired = false;
}
