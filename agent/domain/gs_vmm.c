/* gs_vmm.c — see gs_vmm.h. */
#include "gs_vmm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gs_chunkset.h"
#include "gs_gpu.h"
#include "gs_log.h"
#include "gs_logrep.h"
#include "gs_wire.h"

struct gs_vmm_filler {
        CUmemGenericAllocationHandle h;
        uint64_t size;
};

struct gs_vmm {
        struct gs_vmm *next;
        uint64_t id, size;
        CUmemGenericAllocationHandle h;
        int fd;
};

static uint64_t set_total(const struct gs_gpu *g, const struct gs_vmm_set *s)
{
        return (uint64_t)s->cs.nheld * g->chunk_bytes;
}

/* Bytes of the set covered by nothing of the agent's in the driver. */
static uint64_t set_debt(const struct gs_gpu *g, const struct gs_vmm_set *s)
{
        return set_total(g, s) - s->live_bytes - s->filler_bytes;
}

/* Bytes of the set known to be free for it: fillers and the debt the agent
 * dropped itself.  Released bytes (pending) are not: the process was sent
 * their fd and may keep it (DESIGN: "What was sent cannot be taken back"),
 * so they stay charged until a filler takes their place, which the driver
 * has room for only once they are free (fill_debt), or the process is
 * gone (gs_vmm_clear). */
static uint64_t set_free(const struct gs_gpu *g, const struct gs_vmm_set *s)
{
        return set_total(g, s) - s->live_bytes - s->pending;
}

/* The debt fell (something took its place): pending cannot exceed it. */
static void pending_clamp(const struct gs_gpu *g, struct gs_vmm_set *s)
{
        uint64_t d = set_debt(g, s);

        if (s->pending > d)
                s->pending = d;
}

static int filler_add(struct gs_gpu *g, struct gs_vmm_set *s, uint64_t size, char *err, size_t errlen)
{
        struct gs_vmm_filler *f;
        int nofd = -1, r;

        if (!s->fillers) {
                /* fill_debt merges them before they pass GS_VMM_MAX_FILLERS. */
                s->fillers = calloc(GS_VMM_MAX_FILLERS, sizeof(*f));
                if (!s->fillers) {
                        snprintf(err, errlen, "out of memory for fillers");
                        return -ENOMEM;
                }
        }
        if (s->nfillers >= GS_VMM_MAX_FILLERS) {
                snprintf(err, errlen, "too many fillers");
                return -ENOSPC;
        }
        f = &s->fillers[s->nfillers];
        r = gs_gpu_mem_make(g, size, false, &f->h, &nofd, err, errlen);
        if (r < 0)
                return r;
        f->size = size;
        s->nfillers++;
        s->filler_bytes += size;
        return 0;
}

static void filler_drop(struct gs_gpu *g, struct gs_vmm_set *s, uint32_t i)
{
        int nofd = -1;

        gs_gpu_mem_drop(g, s->fillers[i].h, &nofd);
        s->filler_bytes -= s->fillers[i].size;
        s->fillers[i] = s->fillers[--s->nfillers];
}

/* Drops fillers until the debt the agent dropped itself (not pending) is
 * at least need: the smallest one that is enough, else the largest, again.
 * *ret_dropped: bytes dropped (known free in the driver now).
 * pre: set_free >= need. */
static void free_up(struct gs_gpu *g, struct gs_vmm_set *s, uint64_t need, uint64_t *ret_dropped)
{
        uint64_t dropped = 0;

        need += s->pending;
        while (set_debt(g, s) < need && s->nfillers) {
                uint64_t want = need - set_debt(g, s);
                uint32_t fit = UINT32_MAX, big = 0;

                for (uint32_t i = 0; i < s->nfillers; i++) {
                        if (s->fillers[i].size >= want &&
                            (fit == UINT32_MAX || s->fillers[i].size < s->fillers[fit].size))
                                fit = i;
                        if (s->fillers[i].size > s->fillers[big].size)
                                big = i;
                }
                if (fit == UINT32_MAX)
                        fit = big;
                dropped += s->fillers[fit].size;
                filler_drop(g, s, fit);
        }
        *ret_dropped = dropped;
}

/* Covers the debt with one filler (merging all fillers first once there
 * are too many).  If that fails, as much of it as the driver has room for,
 * at least the part known to be free (not pending): released bytes are
 * taken as free only as far as a filler could be made for them (the
 * driver's free bytes, whichever allocation let go of them).  0, or the
 * error of the whole. */
static int fill_debt(struct gs_gpu *g, struct gs_vmm_set *s, char *err, size_t errlen)
{
        uint64_t d, sure, part;
        char e2[256];
        int r;

        if (set_debt(g, s) == 0)
                return 0;
        if (s->nfillers >= GS_VMM_MAX_FILLERS)
                while (s->nfillers)
                        filler_drop(g, s, 0);
        d = set_debt(g, s);
        r = filler_add(g, s, d, err, errlen);
        if (r == 0) {
                s->pending = 0;
                return 0;
        }
        sure = d - s->pending;
        if (!s->pending)
                return r;
        part = gs_gpu_room_left(g) / GS_VMM_ALIGN * GS_VMM_ALIGN;
        if (part > sure && part < d && filler_add(g, s, part, e2, sizeof(e2)) == 0) {
                s->pending = d - part;
                return r;
        }
        if (sure > 0 && filler_add(g, s, sure, e2, sizeof(e2)) < 0)
                log_warn_rep(g->index, "GPU %u: %llu bytes of VMM space left uncovered: %s", g->index,
                             (unsigned long long)sure, e2);
        return r;
}

/* The set's chunk i goes back to the allocation with fresh memory.
 * pre: debt - pending >= chunk_bytes.  On failure the chunk stays; with force it goes
 * back without memory (1), re-created when next granted. */
static int chunk_give(struct gs_gpu *g, struct gs_vmm_set *s, uint32_t i, bool force, char *err, size_t errlen)
{
        int r = gs_chunkset_give(g, &s->cs, i, force, err, errlen);

        if (r >= 0)
                pending_clamp(g, s);
        return r;
}

static struct gs_logrep not_recreated = GS_LOGREP_INIT;

/* Gives back chunks the set does not need (see gs_vmm.h), then covers the
 * debt.  Failures are logged (once, then counted) and retried by the next
 * operation. */
static void settle(struct gs_gpu *g, struct gs_vmm_set *s)
{
        const uint64_t c = g->chunk_bytes;
        char err[256];

        /* Released bytes serve again, or go back, only once a filler took
         * their place: the driver has room for it only if they are free. */
        if (s->pending && fill_debt(g, s, err, sizeof(err)) < 0)
                log_debug("GPU %u: %llu bytes released but maybe still held: %s", g->index,
                          (unsigned long long)s->pending, err);

        while (s->cs.nheld) {
                uint64_t free_b = set_free(g, s), dropped = 0;

                if (free_b < c || (s->live_bytes && free_b < 2 * c))
                        break;
                uint32_t chunk = s->cs.held[s->cs.nheld - 1].chunk;
                uint64_t key = (uint64_t)g->index << 32 | chunk;

                free_up(g, s, c, &dropped);
                if (chunk_give(g, s, s->cs.nheld - 1, false, err, sizeof(err)) < 0) {
                        /* Every operation retries: logged once, then counted. */
                        gs_logrep(&not_recreated, GS_LOG_WARN, key,
                                  "GPU %u: chunk %u behind VMM allocations "
                                  "not re-created yet (retried later): %s",
                                  g->index, chunk, err);
                        break;
                }
                gs_logrep_clear(&not_recreated, key);
        }
        if (fill_debt(g, s, err, sizeof(err)) < 0)
                log_debug("GPU %u: %llu bytes of VMM space not covered yet (%llu released, maybe "
                          "still mapped): %s",
                          g->index, (unsigned long long)set_debt(g, s), (unsigned long long)s->pending, err);
}

int gs_vmm_create(struct gs_gpu *g, struct gs_vmm_set *s, uint64_t size, uint64_t *ret_id, int *ret_fd)
{
        gs_gpu_assert_locked(g);
        const uint64_t c = g->chunk_bytes;
        struct gs_vmm *v;
        uint64_t free_b, dropped = 0;
        char err[256] = "";
        int r;

        if (size == 0 || size % GS_VMM_ALIGN || size > (uint64_t)s->nslots * c)
                return size && size % GS_VMM_ALIGN == 0 ? -ENOMEM : -EINVAL;
        if (s->count >= GS_VMM_MAX_PER_PROC)
                return -ENOMEM;
        v = calloc(1, sizeof(*v));
        if (!v)
                return -ENOMEM;
        v->fd = -1;
        if (set_debt(g, s) && fill_debt(g, s, err, sizeof(err)) < 0)
                err[0] = '\0'; /* retried below; the create may still fit */
        free_b = set_free(g, s);
        if (free_b < size) {
                /* Their memory becomes the set's debt, covered below. */
                r = gs_chunkset_take(g, &s->cs, s->pa, s->nslots, (uint32_t)((size - free_b + c - 1) / c), true);
                if (r < 0)
                        goto fail;
        }
        free_up(g, s, size, &dropped);
        r = gs_gpu_mem_make(g, size, true, &v->h, &v->fd, err, sizeof(err));
        if (r == 0) {
                s->live_bytes += size;
                pending_clamp(g, s);
        }
        settle(g, s); /* the remainder's filler; or, on failure, the chunks back */
        if (r < 0)
                goto fail;
        v->id = ++s->next_id;
        v->size = size;
        v->next = s->list;
        s->list = v;
        s->count++;
        *ret_id = v->id;
        *ret_fd = v->fd;
        return 0;
fail:
        if (err[0])
                log_warn_rep(g->index, "GPU %u: VMM allocation of %llu bytes failed: %s", g->index,
                             (unsigned long long)size, err);
        free(v);
        return r;
}

int gs_vmm_release(struct gs_gpu *g, struct gs_vmm_set *s, uint64_t id)
{
        gs_gpu_assert_locked(g);
        struct gs_vmm **pv, *v;

        for (pv = &s->list; *pv && (*pv)->id != id; pv = &(*pv)->next)
                ;
        v = *pv;
        if (!v)
                return -ENOENT;
        *pv = v->next;
        s->count--;
        gs_gpu_mem_drop(g, v->h, &v->fd);
        s->live_bytes -= v->size;
        /* The application may still map it: until a filler takes its place
         * it is not known to be free. */
        s->pending += v->size;
        free(v);
        settle(g, s);
        return 0;
}

void gs_vmm_clear(struct gs_gpu *g, struct gs_vmm_set *s)
{
        gs_gpu_assert_locked(g);
        struct gs_vmm_set empty = { .pa = s->pa, .nslots = s->nslots };
        char err[256];

        while (s->list) {
                struct gs_vmm *v = s->list;
                s->list = v->next;
                gs_gpu_mem_drop(g, v->h, &v->fd);
                free(v);
        }
        s->live_bytes = 0;
        while (s->nfillers)
                filler_drop(g, s, 0);
        /* The process is gone, and its mappings with it: all of T is free. */
        s->pending = 0;
        while (s->cs.nheld) {
                uint32_t x = s->cs.held[s->cs.nheld - 1].chunk;

                /* A chunk that cannot be re-created goes back without
                 * memory: it is re-created when next granted, or when the
                 * allocation is deleted (pending until the driver has
                 * room), never lost. */
                if (chunk_give(g, s, s->cs.nheld - 1, true, err, sizeof(err)) > 0)
                        log_info("GPU %u: chunk %u behind VMM allocations back without memory "
                                 "for now: %s",
                                 g->index, x, err);
        }
        gs_chunkset_fini(&s->cs);
        free(s->fillers);
        *s = empty;
}

void gs_vmm_stats(const struct gs_vmm_set *s, struct gs_pproc_stats *st)
{
        struct gs_pproc_stats v;

        if (!s->cs.pp)
                return;
        gs_pproc_stats(s->cs.pp, &v);
        st->chunks_held += v.chunks_held;
        st->bytes_requested += v.bytes_requested;
        st->bytes_in_blocks += v.bytes_in_blocks;
}

int gs_vmm_validate(const struct gs_gpu *g, const struct gs_vmm_set *s, char *why, size_t whylen)
{
        gs_gpu_assert_locked(g);
        uint64_t live = 0, fill = 0;
        uint32_t n = 0;

        for (const struct gs_vmm *v = s->list; v; v = v->next, n++)
                live += v->size;
        for (uint32_t i = 0; i < s->nfillers; i++)
                fill += s->fillers[i].size;
        if (n != s->count || live != s->live_bytes || fill != s->filler_bytes)
                snprintf(why, whylen, "counts: %u allocations (%u counted), %llu live (%llu), %llu in fillers (%llu)",
                         n, s->count, (unsigned long long)live, (unsigned long long)s->live_bytes,
                         (unsigned long long)fill, (unsigned long long)s->filler_bytes);
        else if (live + fill > set_total(g, s))
                snprintf(why, whylen, "%llu live + %llu in fillers over the %u chunks held", (unsigned long long)live,
                         (unsigned long long)fill, s->cs.nheld);
        else if (s->pending > set_debt(g, s))
                snprintf(why, whylen, "%llu pending over a debt of %llu", (unsigned long long)s->pending,
                         (unsigned long long)set_debt(g, s));
        else if (s->nfillers > GS_VMM_MAX_FILLERS)
                snprintf(why, whylen, "%u fillers", s->nfillers);
        else if (s->cs.pp == NULL && (s->cs.nheld || s->count))
                snprintf(why, whylen, "chunks or allocations without a pproc");
        else
                return 0;
        return -EUCLEAN;
}
