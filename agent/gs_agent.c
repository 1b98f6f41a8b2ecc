/* gs_agent.c — the agent's shared services on the main loop (see
 * gs_agent.h); main() is in gs_agent_main.c. */
#include "gs_agent.h"

#include <time.h>


static void run_changed(void *data)
{
        struct gs_agent *ag = data;

        if (ag->on_changed)
                ag->on_changed(ag);
}

void gs_agent_changed(struct gs_agent *ag)
{
        ag->generation++;
        gs_loop_post(ag->loop, &ag->changed_post, run_changed, ag);
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

void gs_agent_wire(struct gs_agent *ag, void (*on_changed)(struct gs_agent *ag))
{
        ag->on_changed = on_changed;
        gs_loop_async_add(ag->loop, &ag->changed_async, on_poke, ag);
        gs_loop_async_add(ag->loop, &ag->scan_async, on_scan_wanted, ag);
}

void gs_agent_want_scan(struct gs_agent *ag)
{
        gs_loop_async_send(ag->loop, &ag->scan_async);
}

void gs_agent_wait_scan(struct gs_agent *ag, int ms)
{
        unsigned before = __atomic_load_n(&ag->usage_scans, __ATOMIC_ACQUIRE);
        int64_t until = gs_mono_ms() + ms;

        gs_agent_want_scan(ag);
        /* Two scans: the one under way may have read NVML before the need. */
        while (__atomic_load_n(&ag->usage_scans, __ATOMIC_ACQUIRE) - before < 2 && gs_mono_ms() < until) {
                struct timespec ts = { 0, 2000000 };
                nanosleep(&ts, NULL);
        }
}

void gs_agent_poke(struct gs_agent *ag)
{
        gs_loop_async_send(ag->loop, &ag->changed_async);
}
