/* gs_burst.c — see gs_burst.h. */
#include "gs_burst.h"

#include <errno.h>
#include <stdio.h>

int gs_burst_cap(const struct gs_config *c, const struct gs_gpu *g, uint64_t quota, uint64_t bytes, bool restore,
                 uint64_t *ret_cap, char *err, size_t errlen)
{
        uint64_t burst, most = c->burst_max_bytes > c->balloon_cap_bytes ? c->burst_max_bytes : c->balloon_cap_bytes;
        char b[32], q[32], m[32];

        *ret_cap = c->balloon_cap_bytes / g->chunk_bytes;
        if (!bytes)
                return 0;
        burst = (bytes + g->chunk_bytes - 1) / g->chunk_bytes;
        gs_format_size(bytes, b, sizeof(b));
        gs_format_size(quota * g->chunk_bytes, q, sizeof(q));
        gs_format_size((uint64_t)g->nchunks * g->chunk_bytes, m, sizeof(m));
        if (burst < quota || burst > g->nchunks) {
                snprintf(err, errlen, "burst %s is %s GPU %s's %s", b,
                         burst < quota ? "below the quota on" : "more than the pool of", g->uuid,
                         burst < quota ? q : m);
                return -EINVAL;
        }
        /* What a burst may borrow is the node's to allow. */
        if ((burst - quota) * g->chunk_bytes > most && !restore) {
                gs_format_size((burst - quota) * g->chunk_bytes, q, sizeof(q));
                gs_format_size(most, m, sizeof(m));
                snprintf(err, errlen, "burst %s borrows %s past the quota on GPU %s; this node allows %s (burstMax)", b,
                         q, g->uuid, m);
                return -EINVAL;
        }
        *ret_cap = burst - quota;
        return 0;
}
