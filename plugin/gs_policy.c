/* gs_policy.c — see gs_policy.h. */
#include "gs_policy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- GetPreferredAllocation ---- */

struct cand {
        const char *id;
        size_t gpu; /* index into m->gpus */
        uint32_t unit;
        bool must;
        bool taken;
};

static int cand_cmp(const void *a, const void *b)
{
        const struct cand *x = a, *y = b;

        if (x->gpu != y->gpu)
                return x->gpu < y->gpu ? -1 : 1;
        return x->unit < y->unit ? -1 : x->unit > y->unit;
}

/* Chooses size IDs for one container; pre: mu held.  Writes pointers to the
 * chosen IDs (strings of the request) to out. */
grpc_status_code gs_policy_prefer(const struct gs_mirror *m, const char *resource,
                                  const V1beta1__ContainerPreferredAllocationRequest *r, const char **out, char *msg,
                                  size_t n)
{
        size_t nc = 0, size, nmust = 0, ng = m->ngpus, got = 0;
        struct cand *c = NULL;
        size_t *avail = NULL;
        uint32_t big = gs_mirror_largest(m);
        grpc_status_code code = GRPC_STATUS_OK;
        size_t best = SIZE_MAX, must_gpu = SIZE_MAX;
        bool one_gpu_must = true;

        if (r->allocation_size <= 0) {
                snprintf(msg, n, "allocation_size must be positive, got %d", r->allocation_size);
                return GRPC_STATUS_INVALID_ARGUMENT;
        }
        size = (size_t)r->allocation_size;
        if (size > big) {
                snprintf(msg, n, "a request of %zu units is larger than any GPU of this node (at most %u units)", size,
                         big);
                return GRPC_STATUS_INVALID_ARGUMENT;
        }
        c = calloc(r->n_available_deviceids + r->n_must_include_deviceids + 1, sizeof(*c));
        avail = calloc(ng + 1, sizeof(*avail));
        if (!c || !avail) {
                code = GRPC_STATUS_RESOURCE_EXHAUSTED;
                snprintf(msg, n, "out of memory");
                goto out;
        }
        /* must_include first, then the rest of available; duplicates dropped */
        for (size_t pass = 0; pass < 2; pass++) {
                size_t cnt = pass == 0 ? r->n_must_include_deviceids : r->n_available_deviceids;
                char **ids = pass == 0 ? r->must_include_deviceids : r->available_deviceids;
                for (size_t i = 0; i < cnt; i++) {
                        const struct gs_mirror_gpu *g;
                        uint32_t unit;
                        bool dup = false;
                        if (gs_mirror_check_id(m, ids[i], resource, &g, &unit, msg, n) < 0) {
                                code = GRPC_STATUS_INVALID_ARGUMENT;
                                goto out;
                        }
                        for (size_t j = 0; j < nc && !dup; j++)
                                dup = c[j].gpu == (size_t)(g - m->gpus) && c[j].unit == unit;
                        if (dup)
                                continue;
                        c[nc].id = ids[i];
                        c[nc].gpu = (size_t)(g - m->gpus);
                        c[nc].unit = unit;
                        c[nc].must = pass == 0;
                        if (c[nc].must) {
                                nmust++;
                                if (must_gpu != SIZE_MAX && must_gpu != c[nc].gpu)
                                        one_gpu_must = false;
                                must_gpu = c[nc].gpu;
                        }
                        avail[c[nc].gpu]++;
                        nc++;
                }
        }
        if (nmust > size) {
                snprintf(msg, n, "must_include_deviceIDs has %zu devices, more than allocation_size %zu", nmust, size);
                code = GRPC_STATUS_INVALID_ARGUMENT;
                goto out;
        }
        if (nc < size) {
                snprintf(msg, n, "allocation_size %zu is more than the %zu devices available", size, nc);
                code = GRPC_STATUS_INVALID_ARGUMENT;
                goto out;
        }
        qsort(c, nc, sizeof(*c), cand_cmp);
        /* Best fit: one GPU with the fewest available units that still fits
         * (the one holding must_include devices, if any). */
        if (nmust == 0) {
                for (size_t g = 0; g < ng; g++)
                        if (avail[g] >= size && (best == SIZE_MAX || avail[g] < avail[best]))
                                best = g;
        } else if (one_gpu_must && avail[must_gpu] >= size) {
                best = must_gpu;
        }
        for (size_t i = 0; i < nc; i++) /* must_include always */
                if (c[i].must) {
                        c[i].taken = true;
                        out[got++] = c[i].id;
                }
        if (best != SIZE_MAX) {
                for (size_t i = 0; i < nc && got < size; i++)
                        if (c[i].gpu == best && !c[i].taken) {
                                c[i].taken = true;
                                out[got++] = c[i].id;
                        }
        } else {
                /* No single GPU fits: fill from the fewest GPUs, largest
                 * availability first (GPUs of must_include devices first). */
                while (got < size) {
                        size_t g_best = SIZE_MAX, left_best = 0;
                        for (size_t g = 0; g < ng; g++) {
                                size_t left = 0;
                                bool has_must = false;
                                for (size_t i = 0; i < nc; i++)
                                        if (c[i].gpu == g) {
                                                left += !c[i].taken;
                                                has_must |= c[i].must;
                                        }
                                if (!left)
                                        continue;
                                left += has_must ? nc : 0; /* prefer */
                                if (left > left_best) {
                                        left_best = left;
                                        g_best = g;
                                }
                        }
                        if (g_best == SIZE_MAX)
                                break;
                        for (size_t i = 0; i < nc && got < size; i++)
                                if (c[i].gpu == g_best && !c[i].taken) {
                                        c[i].taken = true;
                                        out[got++] = c[i].id;
                                }
                }
        }
out:
        free(c);
        free(avail);
        return code;
}
