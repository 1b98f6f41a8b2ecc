/* gs_restore.c — restoring the checkpoint: at start, on the retry timer,
 * and at the door of every create and release; see gs_restore.h. */
#include "gs_restore.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gs_log.h"
#include "gs_pending.h"

static void req_of(struct gs_alloc_req *req, const struct gs_ckpt_rec *r)
{
        *req = (struct gs_alloc_req){ .kind = r->kind, .burst_bytes = r->burst_bytes, .qos = r->qos, .restore = r };
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

/* Creates q's allocation now (q leaves the table), or puts q back with the
 * reason.  As gs_allocs_create. */
static int restore_line(struct gs_node *ag, struct gs_pending *q, struct gs_allocation **ret, bool *ret_created,
                        char *err, size_t errlen)
{
        struct gs_alloc_req req;
        int r;

        gs_pending_unlink(ag, q);
        req_of(&req, &q->rec);
        r = gs_allocs_create(ag, &req, ret, ret_created, err, errlen);
        if (r < 0) {
                snprintf(q->why, sizeof(q->why), "%s", err);
                gs_pending_push(ag, q);
                return r;
        }
        log_info("allocation %s restored (%zu units), socket %s", (*ret)->id, rec_units(&q->rec), (*ret)->socket_path);
        gs_pending_free(q);
        return 0;
}

/* Removes v2's claims file, folded into the checkpoint just written. */
static void claims_file_gone(struct gs_node *ag, const struct gs_ckpt *c)
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

/* gs_restore_start, with the read's error in rerr. */
static int restore(struct gs_node *ag, char *rerr, size_t rerrlen)
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
                        log_error(
                                "%s; the allocations are unknown: nothing is created, released or reclaimed until it is read",
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
                        r = gs_pending_keep(ag, rec, "malformed checkpoint line");
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
                r = gs_pending_keep(ag, rec, err);
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
                if (r == 0 && c.claims_file && gs_node_paths_ours(ag))
                        claims_file_gone(ag, &c);
        }
        gs_ckpt_free(&c);
        return r;
}

int gs_restore_start(struct gs_node *ag)
{
        char err[PATH_MAX + 512];

        return restore(ag, err, sizeof(err));
}

int gs_restore_known(struct gs_node *ag, char *err, size_t errlen)
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

int64_t gs_restore_tick(void *data, int64_t now)
{
        struct gs_node *ag = data;
        struct gs_pending *q, *next;
        bool any = false, changed = false;
        char err[512];

        if (ag->ckpt_err) {
                if (gs_restore_known(ag, err, sizeof(err)) < 0)
                        return now + GS_ALLOCS_RETRY_MS;
                changed = true;
        }
        for (q = ag->pending; q; q = q->next)
                any |= !q->rec.kept;
        for (q = ag->pending; any && q; q = next) {
                struct gs_allocation *a;
                bool made;
                next = q->next;
                if (!q->rec.kept && restore_line(ag, q, &a, &made, err, sizeof(err)) == 0)
                        changed = true;
        }
        if (changed)
                gs_node_changed(ag);
        return any ? now + GS_ALLOCS_RETRY_MS : GS_LOOP_NEVER;
}

int gs_restore_release_pending(struct gs_node *ag, const char *id, const char *const *ids, size_t n,
                               const char *claim_uid, char *err, size_t errlen)
{
        struct gs_pending *q = NULL;
        char **v;
        int r;

        if (claim_uid && claim_uid[0]) {
                q = gs_pending_of_claim(ag, claim_uid);
        } else if (id && id[0]) {
                q = gs_pending_of_id(ag, id);
        } else if (n && n <= GS_ALLOCS_MAX_IDS && (v = gs_ckpt_sorted_ids(ids, n))) {
                q = gs_pending_of_ids(ag, v, n);
                free(v);
        }
        if (!q)
                return -ENOENT;
        gs_pending_unlink(ag, q);
        r = gs_allocs_checkpoint(ag);
        if (r < 0) {
                gs_pending_push(ag, q);
                snprintf(err, errlen, "cannot write the checkpoint in %s: %s", ag->cfg.state_dir, strerror(-r));
                return r;
        }
        log_info("allocation %s released before it could be restored", q->rec.id);
        gs_pending_free(q);
        return 0;
}

int gs_restore_create(struct gs_node *ag, const struct gs_alloc_req *req, struct gs_allocation **ret, bool *ret_created,
                      char *err, size_t errlen)
{
        struct gs_pending *q;
        char **v;
        int r;

        if (!req->restore && (r = gs_restore_known(ag, err, errlen)) < 0)
                return r;
        r = gs_allocs_create(ag, req, ret, ret_created, err, errlen);
        if (r != 1)
                return r;
        /* The IDs of a checkpoint line (gs_allocs_create checked them):
         * restored now. */
        v = gs_ckpt_sorted_ids(req->ids, req->nids);
        if (!v) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        q = gs_pending_of_ids(ag, v, req->nids);
        free(v);
        return restore_line(ag, q, ret, ret_created, err, errlen);
}

int gs_restore_release_claim(struct gs_node *ag, const char *uid, char *err, size_t errlen)
{
        int r;

        /* Unknown allocations: "no such claim" would be a guess, and the
         * kubelet retries an unprepare that fails. */
        r = gs_restore_known(ag, err, errlen);
        if (r < 0)
                return r;
        if (gs_allocs_find_claim(ag, uid))
                return gs_allocs_release_claim(ag, uid, err, errlen);
        r = gs_restore_release_pending(ag, NULL, NULL, 0, uid, err, errlen);
        return r == -ENOENT ? 0 : r;
}
