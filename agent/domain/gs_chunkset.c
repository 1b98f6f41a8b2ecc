/* gs_chunkset.c — see gs_chunkset.h. */
#include "gs_chunkset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gs_pool.h"
#include "gs_gpu.h"
#include "gs_log.h"

/* The block at off and its slot go back to the set's pproc. */
static void put_back(struct gs_gpu *g, struct gs_chunkset *s, uint64_t off)
{
        if (gs_pproc_free(s->pp, off, NULL) < 0 || gs_pproc_release(s->pp, (uint32_t)(off / g->chunk_bytes), 1) < 0)
                log_error("GPU %u: set block at %llu not given back to the allocator", g->index,
                          (unsigned long long)off);
}

/* The set's pproc made (on first use) and room for k more entries. */
static int prepare(struct gs_chunkset *s, struct gs_palloc *pa, uint32_t nslots, uint32_t k)
{
        int r;

        if (!s->pp) {
                r = gs_pproc_new(pa, nslots, &s->pp);
                if (r < 0)
                        return r;
                gs_pproc_set_tag(s->pp, s->tag);
        }
        if (s->nheld + k > s->capheld) {
                uint32_t cap = s->nheld + k > 2 * s->capheld ? s->nheld + k : 2 * s->capheld;
                struct gs_chunkset_ent *t = realloc(s->held, (size_t)cap * sizeof(*t));
                if (!t)
                        return -ENOMEM;
                s->held = t;
                s->capheld = cap;
        }
        return 0;
}

int gs_chunkset_take(struct gs_gpu *g, struct gs_chunkset *s, struct gs_palloc *pa, uint32_t nslots, uint32_t k,
                     bool all)
{
        gs_gpu_assert_locked(g);
        uint32_t got = 0;
        int r = 0;

        if (k > nslots - s->nheld) {
                if (all || s->nheld >= nslots)
                        return -ENOMEM;
                k = nslots - s->nheld;
        }
        r = prepare(s, pa, nslots, k);
        if (r < 0)
                return r;
        while (got < k) {
                struct gs_chunkset_ent *h = &s->held[s->nheld + got];
                struct gs_grant gr;
                uint32_t n = 0;

                r = gs_pproc_malloc(s->pp, g->chunk_bytes, &h->off, &gr, 1, &n);
                if (r < 0) {
                        r = (r == -ENOSPC || r == -E2BIG) ? -ENOMEM : r;
                        break;
                }
                if (n != 1) { /* the set's pproc never keeps a chunk with room: cannot happen */
                        log_error("GPU %u: a set chunk came with %u new ones", g->index, n);
                        if (gs_pproc_free(s->pp, h->off, NULL) < 0)
                                log_error("GPU %u: set block at %llu not freed", g->index, (unsigned long long)h->off);
                        r = -EIO;
                        break;
                }
                h->chunk = gr.chunk;
                got++;
        }
        if (r < 0 && (all || got == 0)) {
                while (got--)
                        put_back(g, s, s->held[s->nheld + got].off);
                return r;
        }
        for (uint32_t i = 0; i < got; i++) {
                uint32_t c = s->held[s->nheld + i].chunk;
                /* Its memory is what the set gives the driver: a chunk
                 * without any for no process's sake (a restart) takes a
                 * free chunk's first. */
                (void)gs_gpu_chunk_fill(g, c);
                gs_gpu_chunk_drop(g, c);
                /* What stands in its place is a process's (a VMM allocation
                 * whose fd is sent, contexts): given back, the chunk is made
                 * anew once the driver has room, never filled with a free
                 * chunk's memory (which would let that process keep both). */
                g->chunks[c].state = GS_CHUNK_KEPT;
        }
        s->nheld += got;
        return (int)got;
}

int gs_chunkset_adopt(struct gs_gpu *g, struct gs_chunkset *s, struct gs_palloc *pa, uint32_t nslots,
                      const uint32_t *slots, uint32_t n)
{
        gs_gpu_assert_locked(g);
        uint64_t cb = g->chunk_bytes;
        uint32_t got = 0;
        int r;

        if (s->nheld || n > nslots)
                return -EINVAL;
        r = prepare(s, pa, nslots, n);
        if (r < 0)
                return r;
        /* Adopted chunks are opaque (legacy) until a block covers them:
         * one block per chunk, the list complete, as the set's own
         * gs_pproc_malloc would have left it. */
        for (uint32_t k = 0; k < n; k++) {
                uint32_t chunk, c;
                r = gs_pproc_adopt(s->pp, slots[k], &chunk);
                if (r == 0)
                        r = gs_pproc_legacy_claim(s->pp, slots[k], &c);
                if (r == 0)
                        r = gs_pproc_legacy_block(s->pp, (uint64_t)slots[k] * cb, cb);
                if (r < 0) {
                        log_warn("GPU %u: slot %u of a set not taken again: %s", g->index, slots[k], strerror(-r));
                        continue;
                }
                s->held[got++] = (struct gs_chunkset_ent){ (uint64_t)slots[k] * cb, chunk };
        }
        r = gs_pproc_legacy_seal(s->pp, true);
        if (r < 0)
                log_error("GPU %u: a set's chunks taken again, not sealed: %s", g->index, strerror(-r));
        for (uint32_t k = 0; k < got; k++) {
                uint32_t c = s->held[k].chunk;
                /* Its memory is what the driver gave the processes: a
                 * record without memory stands for it, else this one's
                 * memory goes (the driver frees it). */
                if (g->chunks[c].fd >= 0 && gs_gpu_chunk_orphan(g, c) < 0)
                        gs_gpu_chunk_drop(g, c);
                g->chunks[c].state = GS_CHUNK_KEPT;
        }
        s->nheld = got;
        return (int)got;
}

int gs_chunkset_give(struct gs_gpu *g, struct gs_chunkset *s, uint32_t i, bool force, char *err, size_t errlen)
{
        gs_gpu_assert_locked(g);
        struct gs_chunkset_ent h = s->held[i];
        int r = gs_gpu_chunk_remake(g, h.chunk, err, errlen);

        if (r < 0 && !force)
                return r;
        if (r < 0)
                g->chunks[h.chunk].state = GS_CHUNK_KEPT; /* its process may still hold the memory */
        put_back(g, s, h.off);
        s->held[i] = s->held[--s->nheld];
        return r < 0 ? 1 : 0;
}

void gs_chunkset_fini(struct gs_chunkset *s)
{
        free(s->held);
        gs_pproc_del(s->pp);
        *s = (struct gs_chunkset){ .tag = s->tag };
}
