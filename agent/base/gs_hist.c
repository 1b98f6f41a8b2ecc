/* gs_hist.c — see gs_hist.h. */
#include "gs_hist.h"

#include <string.h>

#define US 1000ull
#define MS 1000000ull
#define S 1000000000ull

/* 1-2.5-5 steps: fine where requests are (microseconds), coarse where
 * only a stall would be (seconds). */
const struct gs_hist_scale gs_hist_seconds = {
        .n = 22,
        .le = { 1 * US, 2500,    5 * US,  10 * US, 25 * US,  50 * US,  100 * US, 250 * US, 500 * US,  1 * MS, 2500 * US,
                5 * MS, 10 * MS, 25 * MS, 50 * MS, 100 * MS, 250 * MS, 500 * MS, 1 * S,    2500 * MS, 5 * S,  10 * S },
        .le_div = 1e9,
};

const struct gs_hist_scale gs_hist_bytes = {
        .n = 13,
        .le = { 4ull << 10, 16ull << 10, 64ull << 10, 256ull << 10, 1ull << 20, 4ull << 20, 16ull << 20, 64ull << 20,
                256ull << 20, 1ull << 30, 4ull << 30, 16ull << 30, 64ull << 30 },
        .le_div = 1,
};

void gs_hist_observe(struct gs_hist *h, const struct gs_hist_scale *s, uint64_t v)
{
        uint32_t lo = 0, hi = s->n;

        /* The first bound >= v (hi == n: above them all). */
        while (lo < hi) {
                uint32_t mid = (lo + hi) / 2;
                if (s->le[mid] < v)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        __atomic_add_fetch(&h->bucket[lo], 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&h->sum, v, __ATOMIC_RELAXED);
}

void gs_hist_read(const struct gs_hist *h, const struct gs_hist_scale *s, struct gs_hist_snap *ret)
{
        uint64_t c = 0;

        memset(ret, 0, sizeof(*ret));
        for (uint32_t i = 0; i < s->n; i++) {
                c += __atomic_load_n(&h->bucket[i], __ATOMIC_RELAXED);
                ret->cum[i] = c;
        }
        ret->count = c + __atomic_load_n(&h->bucket[s->n], __ATOMIC_RELAXED);
        ret->sum = __atomic_load_n(&h->sum, __ATOMIC_RELAXED);
}
