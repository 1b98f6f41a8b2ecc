/* gs_pending.c — the checkpoint's lines not restored yet; see gs_pending.h. */
#include "gs_pending.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gs_gpu.h"

void gs_pending_free(struct gs_pending *q)
{
        if (!q)
                return;
        gs_ckpt_rec_free(&q->rec);
        free(q);
}

void gs_pending_free_all(struct gs_node *ag)
{
        while (ag->pending) {
                struct gs_pending *q = ag->pending;
                ag->pending = q->next;
                gs_pending_free(q);
        }
}

void gs_pending_unlink(struct gs_node *ag, struct gs_pending *q)
{
        for (struct gs_pending **pp = &ag->pending; *pp; pp = &(*pp)->next)
                if (*pp == q) {
                        *pp = q->next;
                        return;
                }
}

void gs_pending_push(struct gs_node *ag, struct gs_pending *q)
{
        q->next = ag->pending;
        ag->pending = q;
}

/* Whether rec holds unit of the GPU of uuid. */
static bool rec_holds(const struct gs_ckpt_rec *r, const char *uuid, uint32_t unit)
{
        if (r->kind == GS_OWNER_CLAIM) {
                if (strcasecmp(r->claim.gpu_uuid, uuid) != 0)
                        return false;
                for (uint32_t i = 0; i < r->claim.units; i++)
                        if (r->units[i] == unit)
                                return true;
                return false;
        }
        for (size_t i = 0; i < r->nids; i++) {
                char u[GS_UUID_STR_LEN + 1];
                uint32_t k;
                if (gs_devid_parse(r->ids[i], u, &k) == 0 && k == unit && strcasecmp(u, uuid) == 0)
                        return true;
        }
        return false;
}

struct gs_pending *gs_pending_holding(struct gs_node *ag, const struct gs_gpu *g, uint32_t unit)
{
        for (struct gs_pending *q = ag->pending; q; q = q->next)
                if (!q->rec.kept && rec_holds(&q->rec, g->uuid, unit))
                        return q;
        return NULL;
}

struct gs_pending *gs_pending_of_ids(struct gs_node *ag, char *const *sorted, size_t n)
{
        for (struct gs_pending *q = ag->pending; q; q = q->next) {
                const struct gs_ckpt_rec *r = &q->rec;
                size_t i;
                if (r->kept || r->kind != GS_OWNER_DEVICES || r->nids != n)
                        continue;
                for (i = 0; i < n && strcmp(r->ids[i], sorted[i]) == 0; i++)
                        ;
                if (i == n)
                        return q;
        }
        return NULL;
}

struct gs_pending *gs_pending_of_id(struct gs_node *ag, const char *id)
{
        struct gs_pending *q;

        for (q = ag->pending; q && (q->rec.kept || strcmp(q->rec.id, id) != 0); q = q->next)
                ;
        return q;
}

struct gs_pending *gs_pending_of_claim(struct gs_node *ag, const char *uid)
{
        for (struct gs_pending *q = ag->pending; q; q = q->next)
                if (!q->rec.kept && q->rec.kind == GS_OWNER_CLAIM && strcmp(q->rec.claim.uid, uid) == 0)
                        return q;
        return NULL;
}

bool gs_pending_kept_names(const struct gs_node *ag, const char *id)
{
        size_t idlen = strlen(id);

        for (const struct gs_pending *q = ag->pending; q; q = q->next)
                if (q->rec.kept && idlen && memmem(q->rec.kept, q->rec.kept_len, id, idlen))
                        return true;
        return false;
}

int gs_pending_keep(struct gs_node *ag, struct gs_ckpt_rec *rec, const char *why)
{
        struct gs_pending *q = calloc(1, sizeof(*q)), **pp;

        if (!q)
                return -ENOMEM;
        q->rec = *rec;
        memset(rec, 0, sizeof(*rec));
        snprintf(q->why, sizeof(q->why), "%s", why);
        /* At the end: lines are written back in the order read. */
        for (pp = &ag->pending; *pp; pp = &(*pp)->next)
                ;
        *pp = q;
        if (!q->rec.kept)
                gs_loop_timer_arm(&ag->restore_timer, 0);
        return 0;
}

size_t gs_pending_units(struct gs_node *ag, const struct gs_gpu *g, uint32_t *ret_units, size_t max)
{
        size_t k = 0;

        for (const struct gs_pending *q = ag->pending; q; q = q->next) {
                const struct gs_ckpt_rec *r = &q->rec;
                if (r->kept)
                        continue;
                if (r->kind == GS_OWNER_CLAIM) {
                        if (strcasecmp(r->claim.gpu_uuid, g->uuid) != 0)
                                continue;
                        for (uint32_t i = 0; i < r->claim.units && k < max; i++)
                                if (r->units[i] < g->units_total)
                                        ret_units[k++] = r->units[i];
                        continue;
                }
                for (size_t i = 0; i < r->nids; i++) {
                        char uuid[GS_UUID_STR_LEN + 1];
                        uint32_t unit;
                        if (gs_devid_parse(r->ids[i], uuid, &unit) == 0 && strcasecmp(uuid, g->uuid) == 0 &&
                            unit < g->units_total && k < max)
                                ret_units[k++] = unit;
                }
        }
        return k;
}

void gs_pending_put_all(FILE *f, const struct gs_node *ag)
{
        for (const struct gs_pending *q = ag->pending; q; q = q->next)
                gs_ckpt_put(f, &q->rec);
}
