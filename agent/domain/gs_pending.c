/* gs_pending.c — restoring the checkpoint; see gs_pending.h. */
#include "gs_pending.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "gs_gpu.h"
#include "gs_log.h"

static void pending_free(struct gs_allocs_pending *q)
{
        if (!q)
                return;
        gs_ckpt_rec_free(&q->rec);
        free(q);
}

void gs_pending_free_all(struct gs_agent *ag)
{
        while (ag->pending) {
                struct gs_allocs_pending *q = ag->pending;
                ag->pending = q->next;
                pending_free(q);
        }
}

static void pending_unlink(struct gs_agent *ag, struct gs_allocs_pending *q)
{
        for (struct gs_allocs_pending **pp = &ag->pending; *pp; pp = &(*pp)->next)
                if (*pp == q) {
                        *pp = q->next;
                        return;
                }
}

static void pending_push(struct gs_agent *ag, struct gs_allocs_pending *q)
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

struct gs_allocs_pending *gs_pending_holding(struct gs_agent *ag, const struct gs_gpu *g, uint32_t unit)
{
        for (struct gs_allocs_pending *q = ag->pending; q; q = q->next)
                if (!q->rec.kept && rec_holds(&q->rec, g->uuid, unit))
                        return q;
        return NULL;
}

struct gs_allocs_pending *gs_pending_of_ids(struct gs_agent *ag, char *const *sorted, size_t n)
{
        for (struct gs_allocs_pending *q = ag->pending; q; q = q->next) {
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

struct gs_allocs_pending *gs_pending_of_claim(struct gs_agent *ag, const char *uid)
{
        for (struct gs_allocs_pending *q = ag->pending; q; q = q->next)
                if (!q->rec.kept && q->rec.kind == GS_OWNER_CLAIM && strcmp(q->rec.claim.uid, uid) == 0)
                        return q;
        return NULL;
}

bool gs_allocs_kept_names(const struct gs_agent *ag, const char *id)
{
        size_t idlen = strlen(id);

        for (const struct gs_allocs_pending *q = ag->pending; q; q = q->next)
                if (q->rec.kept && idlen && memmem(q->rec.kept, q->rec.kept_len, id, idlen))
                        return true;
        return false;
}

static void req_of(struct gs_alloc_req *req, const struct gs_ckpt_rec *r)
{
        *req = (struct gs_alloc_req){ .kind = r->kind, .restore = r };
        if (r->kind == GS_OWNER_DEVICES) {
                req->ids = (const char *const *)r->ids;
                req->nids = r->nids;
        } else {
                req->claim = r->claim;
        }
}

static size_t rec_units(const struct gs_ckpt_rec *r)
{
        return r->kind == GS_OWNER_CLAIM ? r->claim.units : r->nids;
}

int gs_pending_restore(struct gs_agent *ag, struct gs_allocs_pending *q, struct gs_allocation **ret,
                       bool *ret_created, char *err, size_t errlen)
{
        struct gs_alloc_req req;
        int r;

        pending_unlink(ag, q);
        req_of(&req, &q->rec);
        r = gs_allocs_create(ag, &req, ret, ret_created, err, errlen);
        if (r < 0) {
                snprintf(q->why, sizeof(q->why), "%s", err);
                pending_push(ag, q);
                return r;
        }
        log_info("allocation %s restored (%zu units), socket %s", (*ret)->id, rec_units(&q->rec),
                 (*ret)->socket_path);
        pending_free(q);
        return 0;
}

/* Keeps rec (moved into the list) as a line not restored. */
static int keep_pending(struct gs_agent *ag, struct gs_ckpt_rec *rec, const char *why)
{
        struct gs_allocs_pending *q = calloc(1, sizeof(*q)), **pp;

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

/* Removes v2's claims file, folded into the checkpoint just written. */
static void claims_file_gone(struct gs_agent *ag, const struct gs_ckpt *c)
{
        char path[PATH_MAX];

        if (snprintf(path, sizeof(path), "%s/%s", ag->cfg.state_dir, GS_CKPT_CLAIMS_NAME) >= (int)sizeof(path))
                return;
        if (unlink(path) < 0 && errno != ENOENT) {
                log_error("cannot remove %s (its claims are in the checkpoint now): %m", path);
                return;
        }
        log_info("%s migrated into the checkpoint: %zu claims kept, %zu without an allocation dropped", path,
                 c->claims_migrated, c->claims_dropped);
}

/* gs_allocs_restore, with the read's error in rerr. */
static int restore(struct gs_agent *ag, char *rerr, size_t rerrlen)
{
        char err[PATH_MAX + 512];
        struct gs_ckpt c;
        size_t restored = 0, kept = 0;
        int r;

        r = gs_ckpt_read(ag->cfg.state_dir, &c, rerr, rerrlen);
        if (r < 0) {
                /* Once per streak (and per kind of failure): it is read
                 * again at every use and by the timer. */
                if (r != ag->ckpt_err)
                        log_error("%s; the allocations are unknown: nothing is created, released or reclaimed until it is read",
                                  rerr);
                ag->ckpt_err = r;
                gs_loop_timer_arm(&ag->restore_timer, 0);
                return r;
        }
        if (ag->ckpt_err)
                log_info("the checkpoint in %s is read: the allocations are known again", ag->cfg.state_dir);
        ag->ckpt_err = 0;
        for (size_t i = 0; i < c.n && r == 0; i++) {
                struct gs_ckpt_rec *rec = &c.recs[i];
                struct gs_alloc_req req;
                struct gs_allocation *a;
                bool made;

                if (rec->kept) {
                        r = keep_pending(ag, rec, "malformed checkpoint line");
                        continue;
                }
                req_of(&req, rec);
                if (gs_allocs_create(ag, &req, &a, &made, err, sizeof(err)) == 0) {
                        restored++;
                        log_info("allocation %s restored (%zu units), socket %s", a->id, a->nunits, a->socket_path);
                        continue;
                }
                log_warn("allocation %s not restored: %s; kept, retried every %d ms, its units unhealthy meanwhile",
                         rec->id, err, GS_ALLOCS_RETRY_MS);
                r = keep_pending(ag, rec, err);
                kept++;
        }
        if (restored)
                log_info("restored %zu allocations from %s; their processes must register again", restored,
                         ag->cfg.state_dir);
        if (kept)
                log_warn("%zu allocations of the checkpoint wait to be restored", kept);
        if (r == 0) {
                r = gs_allocs_checkpoint(ag);
                /* Only once the claims are on disk in the checkpoint. */
                if (r == 0 && c.claims_file && !ag->paths_theirs)
                        claims_file_gone(ag, &c);
        }
        gs_ckpt_free(&c);
        return r;
}

int gs_allocs_restore(struct gs_agent *ag)
{
        char err[PATH_MAX + 512];

        return restore(ag, err, sizeof(err));
}

int gs_allocs_known(struct gs_agent *ag, char *err, size_t errlen)
{
        char why[PATH_MAX + 256];
        int r;

        if (ag->ckpt_err == 0)
                return 0;
        r = restore(ag, why, sizeof(why));
        if (ag->ckpt_err == 0)
                return 0;
        snprintf(err, errlen, "%s: the allocations are unknown until it is read", why);
        return r;
}

int64_t gs_allocs_tick(void *data, int64_t now)
{
        struct gs_agent *ag = data;
        struct gs_allocs_pending *q, *next;
        bool any = false, changed = false;
        char err[512];

        if (ag->ckpt_err) {
                if (gs_allocs_known(ag, err, sizeof(err)) < 0)
                        return now + GS_ALLOCS_RETRY_MS;
                changed = true;
        }
        for (q = ag->pending; q; q = q->next)
                any |= !q->rec.kept;
        for (q = ag->pending; any && q; q = next) {
                struct gs_allocation *a;
                bool made;
                next = q->next;
                if (!q->rec.kept && gs_pending_restore(ag, q, &a, &made, err, sizeof(err)) == 0)
                        changed = true;
        }
        if (changed)
                gs_agent_changed(ag);
        return any ? now + GS_ALLOCS_RETRY_MS : GS_LOOP_NEVER;
}

int gs_allocs_release_pending(struct gs_agent *ag, const char *id, const char *const *ids, size_t n,
                              const char *claim_uid, char *err, size_t errlen)
{
        struct gs_allocs_pending *q = NULL;
        char **v;
        int r;

        if (claim_uid && claim_uid[0]) {
                q = gs_pending_of_claim(ag, claim_uid);
        } else if (id && id[0]) {
                for (q = ag->pending; q && (q->rec.kept || strcmp(q->rec.id, id) != 0); q = q->next)
                        ;
        } else if (n && n <= GS_ALLOCS_MAX_IDS && (v = gs_ckpt_sorted_ids(ids, n))) {
                q = gs_pending_of_ids(ag, v, n);
                free(v);
        }
        if (!q)
                return -ENOENT;
        pending_unlink(ag, q);
        r = gs_allocs_checkpoint(ag);
        if (r < 0) {
                pending_push(ag, q);
                snprintf(err, errlen, "cannot write the checkpoint in %s: %s", ag->cfg.state_dir, strerror(-r));
                return r;
        }
        log_info("allocation %s released before it could be restored", q->rec.id);
        pending_free(q);
        return 0;
}

size_t gs_allocs_units_pending(struct gs_agent *ag, const struct gs_gpu *g, uint32_t *ret_units, size_t max)
{
        size_t k = 0;

        for (const struct gs_allocs_pending *q = ag->pending; q; q = q->next) {
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

void gs_pending_put_all(FILE *f, const struct gs_agent *ag)
{
        for (const struct gs_allocs_pending *q = ag->pending; q; q = q->next)
                gs_ckpt_put(f, &q->rec);
}
