/* gs_gpu_phase.c — a GPU's phase in an upgrade's handover (gs_gpu_phase.h). */
#include "gs_gpu_phase.h"

#include <stdlib.h>

#include "gs_gpu.h"
#include "gs_log.h"

/* allowed[from] has bit `to` set: the table of gs_gpu_phase.h. */
static const unsigned allowed[] = {
        [GS_GPU_SERVING] = 1u << GS_GPU_INHERITED | 1u << GS_GPU_PAUSED | 1u << GS_GPU_HANDED_OVER,
        [GS_GPU_INHERITED] = 1u << GS_GPU_SERVING,
        [GS_GPU_PAUSED] = 1u << GS_GPU_SERVING | 1u << GS_GPU_HANDED_OVER,
        [GS_GPU_HANDED_OVER] = 0,
};

const char *gs_gpu_phase_name(enum gs_gpu_phase p)
{
        static const char *const names[] = {
                [GS_GPU_SERVING] = "serving",
                [GS_GPU_INHERITED] = "inherited",
                [GS_GPU_PAUSED] = "paused",
                [GS_GPU_HANDED_OVER] = "handed over",
        };
        return (unsigned)p < sizeof(names) / sizeof(names[0]) ? names[p] : "?";
}

void gs_gpu_phase_set(struct gs_gpu *g, enum gs_gpu_phase to)
{
        gs_gpu_assert_locked(g);
        if (g->restart.phase == to)
                return;
        enum gs_gpu_phase from = g->restart.phase;
        if ((unsigned)from >= sizeof(allowed) / sizeof(allowed[0]) || !(allowed[from] & 1u << to)) {
                log_error("GPU %u: no move from %s to %s (a bug): stays %s", g->index, gs_gpu_phase_name(from),
                          gs_gpu_phase_name(to), gs_gpu_phase_name(from));
#ifndef NDEBUG
                abort(); /* as gs_gpu_assert_locked: the tests find it */
#endif
                return;
        }
        log_debug("GPU %u: %s -> %s", g->index, gs_gpu_phase_name(g->restart.phase), gs_gpu_phase_name(to));
        g->restart.phase = to;
}

enum gs_gpu_phase gs_gpu_phase_get(const struct gs_gpu *g)
{
        return g->restart.phase;
}

bool gs_gpu_makes_memory(const struct gs_gpu *g)
{
        return g->restart.phase != GS_GPU_HANDED_OVER;
}

bool gs_gpu_scrubs(const struct gs_gpu *g)
{
        return g->restart.phase == GS_GPU_SERVING;
}

void gs_gpu_hand_over(struct gs_gpu *g)
{
        gs_gpu_lock(g);
        gs_gpu_phase_set(g, GS_GPU_HANDED_OVER);
        gs_gpu_unlock(g);
}
