/* gs_hook_qos_est.c — see gs_hook_qos_est.h. */
#include <string.h>

#include "gs_hook_qos.h"
#include "gs_hook_qos_est.h"

static struct {
        CUfunction f;
        uint64_t shape;
        uint64_t ns; /* the least of its samples, rising slowly */
        uint64_t hi; /* the most of its samples, falling slowly */
        int nccl;
        int used;
} g_fn[GS_QOS_EST_KINDS];
static uint64_t g_mean_ns; /* all samples' moving mean (0: none yet) */

static size_t kind_slot(CUfunction f, uint64_t shape)
{
        uint64_t k = ((uint64_t)(uintptr_t)f >> 4) ^ shape * 0x9e3779b97f4a7c15ull;

        return (size_t)((k ^ k >> 29) % GS_QOS_EST_KINDS);
}

size_t gs_qos_est_kind(const struct gs_cu *c, CUfunction f, uint64_t shape)
{
        size_t h = kind_slot(f, shape);
        const char *name = NULL;

        if (g_fn[h].used && g_fn[h].f == f && g_fn[h].shape == shape)
                return h;
        g_fn[h].used = 1;
        g_fn[h].f = f;
        g_fn[h].shape = shape;
        g_fn[h].ns = g_fn[h].hi = 0;
        g_fn[h].nccl =
                f && c->func_get_name && c->func_get_name(&name, f) == CUDA_SUCCESS && name && strstr(name, "nccl");
        return h;
}

int gs_qos_est_nccl(size_t h)
{
        return g_fn[h].nccl;
}

uint64_t gs_qos_est_ns(size_t h)
{
        return g_fn[h].ns ? g_fn[h].ns : g_mean_ns;
}

uint64_t gs_qos_est_hi(size_t h)
{
        return g_fn[h].hi ? g_fn[h].hi : gs_qos_est_ns(h);
}

int gs_qos_est_sample_this(size_t h)
{
        static uint32_t x = 0x9e3779b9u; /* xorshift32 */

        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        return !g_fn[h].ns || x % GS_QOS_SAMPLE == 0;
}

/* A sample d taken into an estimate that follows the least of them: it
 * falls to a shorter one at once and rises by a sixteenth a sample. */
static uint64_t least_follow(uint64_t cur, uint64_t d)
{
        uint64_t up = cur + cur / 16 + 1;

        return !cur || d < up ? d : up;
}

void gs_qos_est_take(size_t h, CUfunction f, uint64_t shape, uint64_t d)
{
        g_mean_ns = g_mean_ns ? (7 * g_mean_ns + d) / 8 : d;
        if (h >= GS_QOS_EST_KINDS || !g_fn[h].used || g_fn[h].f != f || g_fn[h].shape != shape)
                return;
        g_fn[h].ns = least_follow(g_fn[h].ns, d);
        /* And the most: up at once, down by an eighth of the difference a
         * sample. */
        g_fn[h].hi = !g_fn[h].hi || d > g_fn[h].hi ? d : g_fn[h].hi - (g_fn[h].hi - d) / 8;
}
