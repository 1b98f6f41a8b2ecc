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

static void on_give_back_wanted(void *data)
{
        struct gs_agent *ag = data;

        if (ag->on_give_back)
                ag->on_give_back(ag);
}

void gs_agent_want_give_back(struct gs_agent *ag)
{
        gs_loop_async_send(ag->node.loop, &ag->give_back_async);
}

/* Waits until the main loop's counter *count is n past before, polling
 * every step_us, at most until (gs_mono_ms); whether it got there. */
static bool await_count(const unsigned *count, unsigned before, unsigned n, int64_t until, long step_us)
{
        while (__atomic_load_n(count, __ATOMIC_ACQUIRE) - before < n) {
                struct timespec ts = { 0, step_us * 1000 };
                if (gs_mono_ms() >= until)
                        return false;
                nanosleep(&ts, NULL);
        }
        return true;
}

bool gs_agent_wait_give_back(struct gs_agent *ag, int ms)
{
        unsigned before = __atomic_load_n(&ag->give_back_sweeps, __ATOMIC_ACQUIRE);

        gs_agent_want_give_back(ag);
        return await_count(&ag->give_back_sweeps, before, 1, gs_mono_ms() + ms, 200);
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
        ag->on_changed = on_changed;
        ag->node.on_changed = node_changed;
        ag->node.on_poke = node_poke;
        gs_loop_async_add(ag->node.loop, &ag->changed_async, on_poke, ag);
        gs_loop_async_add(ag->node.loop, &ag->scan_async, on_scan_wanted, ag);
        gs_loop_async_add(ag->node.loop, &ag->give_back_async, on_give_back_wanted, ag);
}

void gs_agent_want_scan(struct gs_agent *ag)
{
        gs_loop_async_send(ag->node.loop, &ag->scan_async);
}

void gs_agent_wait_scan(struct gs_agent *ag, int ms)
{
        unsigned before = __atomic_load_n(&ag->usage_scans, __ATOMIC_ACQUIRE);
        int64_t until = gs_mono_ms() + ms;

        gs_agent_want_scan(ag);
        /* Two scans: the one under way may have read NVML before the need. */
        (void)await_count(&ag->usage_scans, before, 2, until, 2000);
}

void gs_agent_poke(struct gs_agent *ag)
{
        gs_loop_async_send(ag->node.loop, &ag->changed_async);
}
