/* gs_allocs.c — the lifecycle of an allocation; see gs_allocs.h. */
#include "gs_allocs.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gs_burst.h"
#include "gs_file.h"
#include "gs_gpu.h"
#include "gs_k8sname.h"
#include "gs_log.h"
#include "gs_pending.h"
#include "gs_sockdir.h"

static void fnv(uint64_t *h, const char *s)
{
        for (const char *p = s; *p; p++) {
                *h ^= (uint8_t)*p;
                *h *= 0x100000001b3ull;
        }
        *h ^= '\n'; /* separator: {"ab","c"} != {"a","bc"} */
        *h *= 0x100000001b3ull;
}

void gs_allocs_id(const char *const *sorted_ids, size_t n, char out[17])
{
        uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */

        for (size_t i = 0; i < n; i++)
                fnv(&h, sorted_ids[i]);
        snprintf(out, 17, "%016" PRIx64, h);
}

static bool same_ids(const struct gs_allocation *a, char *const *sorted, size_t n)
{
        if (a->kind != GS_OWNER_DEVICES || a->ndevice_ids != n)
                return false;
        for (size_t i = 0; i < n; i++)
                if (strcmp(a->device_ids[i], sorted[i]) != 0)
                        return false;
        return true;
}

struct gs_allocation *gs_allocs_find(struct gs_node *ag, const char *id)
{
        for (struct gs_allocation *a = ag->allocs; a; a = a->next)
                if (strcmp(a->id, id) == 0)
                        return a;
        return NULL;
}

struct gs_allocation *gs_allocs_find_ids(struct gs_node *ag, const char *const *ids, size_t n)
{
        struct gs_allocation *a = NULL;
        char **v;
        char id[17];

        if (n == 0 || n > GS_ALLOCS_MAX_IDS)
                return NULL;
        v = gs_ckpt_sorted_ids(ids, n);
        if (!v)
                return NULL;
        gs_allocs_id((const char *const *)v, n, id);
        a = gs_allocs_find(ag, id);
        if (a && !same_ids(a, v, n))
                a = NULL;
        free(v);
        return a;
}

struct gs_allocation *gs_allocs_find_claim(struct gs_node *ag, const char *uid)
{
        for (struct gs_allocation *a = ag->allocs; a; a = a->next)
                if (a->kind == GS_OWNER_CLAIM && !a->releasing && strcmp(a->claim.uid, uid) == 0)
                        return a;
        return NULL;
}

const struct gs_claim *gs_allocs_claim(const struct gs_allocation *a)
{
        /* Released (unprepared): the claim is done with it; it only drains. */
        return a->kind == GS_OWNER_CLAIM && !a->releasing ? &a->claim : NULL;
}

struct gs_gpu *gs_allocs_gpu(struct gs_node *ag, const char *uuid)
{
        for (uint32_t i = 0; i < ag->ngpus; i++)
                if (strcasecmp(ag->gpus[i].uuid, uuid) == 0)
                        return &ag->gpus[i];
        return NULL;
}

/* Frees the parts and the memory of a; a has no process.  Leaves the list. */
static void destroy(struct gs_node *ag, struct gs_allocation *a)
{
        for (uint32_t i = 0; i < a->nparts; i++) {
                struct gs_gpu *g = &ag->gpus[a->parts[i].gpu];
                gs_gpu_lock(g);
                g->outside_measured -= a->parts[i].bypass_charge;
                a->parts[i].out.charged -= a->parts[i].bypass_charge;
                a->parts[i].bypass_charge = 0;
                gs_outside_clear(g, &a->parts[i].out);
                /* Its processes are gone: what they were sent is free to be
                 * re-created, and nothing is owed any more. */
                a->parts[i].gone = true;
                gs_gpu_forget_owner(g, a);
                if (gs_palloc_del(a->parts[i].pa) < 0)
                        log_error("allocation %s: part on GPU %u still busy", a->id, g->index);
                gs_gpu_unlock(g);
        }
        for (size_t i = 0; i < a->nunits; i++) {
                struct gs_gpu *g = &ag->gpus[a->units[i].gpu];
                if (g->unit_owner[a->units[i].unit] == a)
                        g->unit_owner[a->units[i].unit] = NULL;
        }
        free(a->device_ids);
        free(a->units);
        gs_ipc_table_fini(&a->ipc);
        gs_loop_defer_free(ag->loop, a);
}

static void unlink_alloc(struct gs_node *ag, struct gs_allocation *a)
{
        for (struct gs_allocation **pp = &ag->allocs; *pp; pp = &(*pp)->next)
                if (*pp == a) {
                        *pp = a->next;
                        ag->nallocs--;
                        return;
                }
}

/* What gs_allocs_create builds before anything changes. */
struct plan {
        char id[17];
        char **ids; /* DEVICES: sorted, handed to the allocation */
        size_t nids;
        struct gs_unit *units; /* handed to the allocation */
        size_t nunits;
        uint32_t nparts;
        struct gs_gpu *gp[GS_MAX_GPUS_PER_ALLOC];
        uint32_t per_part[GS_MAX_GPUS_PER_ALLOC];
};

/* Adds unit u of g to the plan (and its part). */
static int plan_unit(struct plan *pl, struct gs_node *ag, struct gs_gpu *g, uint32_t u, char *err, size_t errlen)
{
        uint32_t p;

        for (p = 0; p < pl->nparts && pl->gp[p] != g; p++)
                ;
        if (p == pl->nparts) {
                if (pl->nparts == GS_MAX_GPUS_PER_ALLOC) {
                        snprintf(err, errlen, "an allocation may span at most %d GPUs", GS_MAX_GPUS_PER_ALLOC);
                        return -E2BIG;
                }
                pl->gp[pl->nparts++] = g;
        }
        pl->per_part[p]++;
        pl->units[pl->nunits++] = (struct gs_unit){ .gpu = (uint32_t)(g - ag->gpus), .unit = u };
        return 0;
}

/* A device plugin's request: its IDs sorted, parsed into units, checked. */
static int plan_devices(struct gs_node *ag, const struct gs_alloc_req *req, struct plan *pl, struct gs_allocation **ret,
                        bool *ret_created, char *err, size_t errlen)
{
        struct gs_allocation *old;
        struct gs_pending *q;
        size_t n = req->nids;
        char **v;

        if (n == 0 || n > GS_ALLOCS_MAX_IDS) {
                snprintf(err, errlen, "an allocation needs 1 to %u device IDs, got %zu", GS_ALLOCS_MAX_IDS, n);
                return -EINVAL;
        }
        v = pl->ids = gs_ckpt_sorted_ids(req->ids, n);
        pl->units = malloc(n * sizeof(*pl->units));
        if (!v || !pl->units) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        pl->nids = n;
        gs_allocs_id((const char *const *)v, n, pl->id);
        old = gs_allocs_find(ag, pl->id);
        if (old && same_ids(old, v, n)) {
                if (old->releasing) {
                        snprintf(err, errlen, "allocation %s is being released (%u processes still running)", pl->id,
                                 old->nprocs);
                        return -EBUSY;
                }
                *ret = old;
                *ret_created = false;
                return 1;
        }
        for (size_t i = 0; i < n; i++) {
                char uuid[GS_UUID_STR_LEN + 1];
                struct gs_gpu *g;
                uint32_t unit;
                int r;

                if (i > 0 && strcmp(v[i], v[i - 1]) == 0) {
                        snprintf(err, errlen, "device ID '%.63s' appears more than once", v[i]);
                        return -EINVAL;
                }
                if (gs_devid_parse(v[i], uuid, &unit) < 0) {
                        snprintf(err, errlen, "device ID '%.63s' is not a gshare device ID", v[i]);
                        return -EINVAL;
                }
                g = gs_allocs_gpu(ag, uuid);
                if (!g || unit >= g->units_total) {
                        snprintf(err, errlen, "device ID '%.63s' is not a %s device of this node", v[i],
                                 ag->cfg.resource_name);
                        return -ENODEV;
                }
                if (g->unit_owner[unit]) {
                        snprintf(err, errlen, "device ID '%.63s' is part of allocation %s", v[i],
                                 g->unit_owner[unit]->id);
                        return -EBUSY;
                }
                if (!g->healthy) {
                        snprintf(err, errlen, "GPU %s is unhealthy: %s", g->uuid, g->health_reason);
                        return -EIO;
                }
                r = plan_unit(pl, ag, g, unit, err, errlen);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < pl->nunits && ag->pending; i++) {
                q = gs_pending_holding(ag, &ag->gpus[pl->units[i].gpu], pl->units[i].unit);
                if (!q || &q->rec == req->restore)
                        continue;
                if (!req->restore && gs_pending_of_ids(ag, v, n) == q)
                        return 2; /* asked for again: restore it now */
                snprintf(err, errlen, "device ID '%.63s' is part of allocation %s, not restored yet: %.200s", v[i],
                         q->rec.id, q->why);
                return -EBUSY;
        }
        if (old) { /* same hash, different set: never seen, but never merge them */
                snprintf(err, errlen, "allocation id %s collides with an existing allocation", pl->id);
                return -EEXIST;
        }
        return 0;
}

/* A claim's request: its units picked among g's free ones (lowest first),
 * or a restored claim's own. */
static int plan_claim(struct gs_node *ag, const struct gs_alloc_req *req, struct plan *pl, struct gs_allocation **ret,
                      bool *ret_created, char *err, size_t errlen)
{
        const struct gs_claim *c = &req->claim;
        struct gs_allocation *old;
        struct gs_pending *q;
        uint32_t nfree = 0;
        struct gs_gpu *g;
        int r = 0;

        if (!gs_k8s_uid_ok(c->uid) || !gs_k8s_label_ok(c->ns) || !gs_k8s_subdomain_ok(c->name)) {
                snprintf(err, errlen, "claim '%.40s' (%.64s/%.64s): not a claim UID, namespace and name", c->uid, c->ns,
                         c->name);
                return -EINVAL;
        }
        old = gs_allocs_find_claim(ag, c->uid);
        if (old) {
                if (strcasecmp(old->claim.gpu_uuid, c->gpu_uuid) || old->claim.units != c->units) {
                        snprintf(err, errlen,
                                 "claim %s already has allocation %s of %u units on GPU %s, not %u on %.40s", c->uid,
                                 old->id, old->claim.units, old->claim.gpu_uuid, c->units, c->gpu_uuid);
                        return -EEXIST;
                }
                *ret = old;
                *ret_created = false;
                return 1;
        }
        q = gs_pending_of_claim(ag, c->uid);
        if (q && &q->rec != req->restore) {
                snprintf(err, errlen, "the allocation %s of claim %s waits to be restored: %.200s", q->rec.id, c->uid,
                         q->why);
                return -EAGAIN;
        }
        g = gs_allocs_gpu(ag, c->gpu_uuid);
        if (!g) {
                snprintf(err, errlen, "GPU %.40s is not a GPU gshare manages on this node", c->gpu_uuid);
                return -ENODEV;
        }
        if (c->units == 0 || c->units > g->units_total) {
                snprintf(err, errlen, "claim %s asks for %u units of %llu bytes; GPU %s has %u", c->uid, c->units,
                         (unsigned long long)g->unit_bytes, g->uuid, g->units_total);
                return -EINVAL;
        }
        pl->units = malloc(c->units * sizeof(*pl->units));
        if (!pl->units) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        if (req->restore) {
                memcpy(pl->id, req->restore->id, sizeof(pl->id));
                for (uint32_t i = 0; i < c->units && r == 0; i++) {
                        uint32_t u = req->restore->units[i];
                        struct gs_pending *o = u < g->units_total ? gs_pending_holding(ag, g, u) : NULL;
                        if (u >= g->units_total || g->unit_owner[u] || (o && &o->rec != req->restore)) {
                                snprintf(err, errlen, "unit %u of GPU %s is %s", u, g->uuid,
                                         u >= g->units_total ? "not one of its units" : "part of another allocation");
                                return u >= g->units_total ? -ENODEV : -EBUSY;
                        }
                        r = plan_unit(pl, ag, g, u, err, errlen);
                }
        } else {
                uint64_t x;
                if (getrandom(&x, sizeof(x), 0) != (ssize_t)sizeof(x)) {
                        r = -errno;
                        snprintf(err, errlen, "getrandom: %s", strerror(errno));
                        return r;
                }
                snprintf(pl->id, sizeof(pl->id), "%016" PRIx64, x);
                for (uint32_t u = 0; u < g->units_total && r == 0; u++) {
                        if (g->unit_owner[u] || (ag->pending && gs_pending_holding(ag, g, u)))
                                continue;
                        nfree++;
                        if (pl->nunits < c->units)
                                r = plan_unit(pl, ag, g, u, err, errlen);
                }
                if (r == 0 && pl->nunits < c->units) {
                        snprintf(err, errlen,
                                 "GPU %s has %u of its %u units (%llu bytes each) free, the claim needs %u", g->uuid,
                                 nfree, g->units_total, (unsigned long long)g->unit_bytes, c->units);
                        return -ENOSPC;
                }
        }
        if (r == 0 && !g->healthy) {
                snprintf(err, errlen, "GPU %s is unhealthy: %s", g->uuid, g->health_reason);
                return -EIO;
        }
        if (r == 0 && gs_allocs_find(ag, pl->id)) {
                snprintf(err, errlen, "allocation id %s collides with an existing allocation", pl->id);
                return -EEXIST;
        }
        return r;
}

int gs_allocs_create(struct gs_node *ag, const struct gs_alloc_req *req, struct gs_allocation **ret, bool *ret_created,
                     char *err, size_t errlen)
{
        struct gs_allocation *a = NULL;
        struct plan pl = { .nparts = 0 };
        int r;

        if (req->kind == GS_OWNER_DEVICES)
                r = plan_devices(ag, req, &pl, ret, ret_created, err, errlen);
        else if (req->kind == GS_OWNER_CLAIM)
                r = plan_claim(ag, req, &pl, ret, ret_created, err, errlen);
        else {
                snprintf(err, errlen, "an allocation needs an owner: device IDs or a claim");
                r = -EINVAL;
        }
        if (r == 1 && req->burst_bytes && (*ret)->burst_bytes != req->burst_bytes) {
                char b[32], o[32];
                gs_format_size(req->burst_bytes, b, sizeof(b));
                gs_format_size((*ret)->burst_bytes, o, sizeof(o));
                snprintf(err, errlen, "allocation %s exists with burst %s, not %s", (*ret)->id,
                         (*ret)->burst_bytes ? o : "unset", b);
                r = -EEXIST;
        }
        if (r == 2) { /* a checkpoint line of these IDs: gs_restore_create restores it */
                free(pl.ids);
                free(pl.units);
                return 1;
        }
        if (r != 0)
                goto fail;
        a = calloc(1, sizeof(*a));
        if (!a) {
                snprintf(err, errlen, "out of memory");
                r = -ENOMEM;
                goto fail;
        }
        a->node = ag;
        a->listen_fd = -1;
        gs_ipc_table_init(&a->ipc);
        memcpy(a->id, pl.id, sizeof(a->id));
        a->kind = req->kind;
        a->burst_bytes = req->burst_bytes;
        a->qos = req->qos;
        if (req->kind == GS_OWNER_CLAIM) {
                a->claim = req->claim;
                snprintf(a->claim.gpu_uuid, sizeof(a->claim.gpu_uuid), "%s", pl.gp[0]->uuid);
        }
        a->created_unix =
                req->restore && req->restore->created_unix ? req->restore->created_unix : (uint64_t)time(NULL);
        for (uint32_t p = 0; p < pl.nparts; p++) {
                struct gs_gpu *g = pl.gp[p];
                struct gs_part *part = &a->parts[p];
                uint64_t quota = (uint64_t)pl.per_part[p] * g->unit_bytes / g->chunk_bytes;
                uint64_t cap;

                r = gs_burst_cap(&ag->cfg, g, quota, req->burst_bytes, req->restore != NULL, &cap, err, errlen);
                if (r < 0)
                        goto fail;
                part->gpu = (uint32_t)(g - ag->gpus);
                part->units = pl.per_part[p];
                part->quota_chunks = (uint32_t)quota;
                part->burst_chunks = (uint32_t)(quota + cap);
                gs_gpu_lock(g);
                r = gs_palloc_new(g->pool, (uint32_t)quota, (uint32_t)cap, &part->pa);
                if (r == 0) {
                        gs_palloc_set_tag(part->pa, strtoull(a->id, NULL, 16)); /* gs_gpu_spillrec.c */
                        gs_outside_init(&part->out, strtoull(a->id, NULL, 16));
                }
                gs_gpu_unlock(g);
                if (r < 0) {
                        struct gs_pool_stats ps;
                        gs_gpu_lock(g);
                        gs_pool_stats(g->pool, &ps);
                        gs_gpu_unlock(g);
                        if (r == -ENOSPC && ps.chunks_borrowed)
                                snprintf(err, errlen,
                                         "GPU %s has fewer than the %llu free chunks this allocation needs: "
                                         "%u are lent to allocations borrowing past their quota (docs/burst.md); "
                                         "those not in use are being given back, try again",
                                         g->uuid, (unsigned long long)quota, ps.chunks_borrowed);
                        else if (r == -ENOSPC)
                                snprintf(
                                        err, errlen,
                                        "GPU %s has fewer than the %llu free chunks this allocation needs (memory still held by released allocations?)",
                                        g->uuid, (unsigned long long)quota);
                        else
                                snprintf(err, errlen, "GPU %s: cannot reserve %llu chunks: %s", g->uuid,
                                         (unsigned long long)quota, strerror(-r));
                        goto fail;
                }
                a->nparts = p + 1;
        }
        r = gs_sockdir_open(ag, a, req->restore ? req->restore->dir : NULL, err, errlen);
        if (r < 0)
                goto fail;
        a->device_ids = pl.ids;
        a->ndevice_ids = pl.nids;
        a->units = pl.units;
        a->nunits = pl.nunits;
        for (size_t i = 0; i < a->nunits; i++)
                ag->gpus[a->units[i].gpu].unit_owner[a->units[i].unit] = a;
        a->next = ag->allocs;
        ag->allocs = a;
        ag->nallocs++;
        if (!req->restore && (r = gs_allocs_checkpoint(ag)) < 0) {
                snprintf(err, errlen, "cannot write the checkpoint in %s: %s", ag->cfg.state_dir, strerror(-r));
                unlink_alloc(ag, a);
                gs_sockdir_close(ag, a);
                (void)rmdir(a->socket_dir);
                destroy(ag, a);
                return r;
        }
        *ret = a;
        *ret_created = true;
        return 0;
fail:
        if (a)
                destroy(ag, a); /* it holds no units yet */
        free(pl.ids);
        free(pl.units);
        return r < 0 ? r : 0;
}

static void delete_now(struct gs_node *ag, struct gs_allocation *a)
{
        unlink_alloc(ag, a);
        gs_sockdir_close(ag, a);
        if (rmdir(a->socket_dir) < 0 && errno != ENOENT)
                log_warn("allocation %s: cannot remove %s: %m", a->id, a->socket_dir);
        log_info("allocation %s deleted, its %zu units are free", a->id, a->nunits);
        destroy(ag, a);
}

int gs_allocs_release(struct gs_node *ag, struct gs_allocation *a, char *err, size_t errlen)
{
        bool was = a->releasing;
        int r;

        a->releasing = true;
        gs_sockdir_close(ag, a);
        r = gs_allocs_checkpoint(ag);
        if (r < 0) {
                a->releasing = was;
                snprintf(err, errlen, "cannot write the checkpoint in %s: %s", ag->cfg.state_dir, strerror(-r));
                return r;
        }
        if (a->nprocs == 0)
                delete_now(ag, a);
        else
                log_info("allocation %s released; deleted when its %u processes exit", a->id, a->nprocs);
        return 0;
}

static bool pod_gone(const struct gs_allocation *a)
{
        return a->releasing || (a->unheld_since_ms != 0 && a->pod_name[0]);
}

bool gs_allocs_draining(const struct gs_allocation *a)
{
        return a->nprocs > 0 && pod_gone(a);
}

void gs_allocs_reap(struct gs_node *ag, struct gs_allocation *a)
{
        /* The last process of a gone pod's allocation exited: its units,
         * shown draining until now, are usable again. */
        bool drained = a->nprocs == 0 && pod_gone(a);

        if (a->releasing && a->nprocs == 0)
                delete_now(ag, a);
        if (drained && ag->watched)
                gs_node_changed(ag);
}

int gs_allocs_release_claim(struct gs_node *ag, const char *uid, char *err, size_t errlen)
{
        struct gs_allocation *a = gs_allocs_find_claim(ag, uid);
        int r;

        if (!a)
                return 0;
        r = gs_allocs_release(ag, a, err, errlen);
        if (r == 0)
                log_info("claim %s (%s/%s): allocation %s released", uid, a->claim.ns, a->claim.name, a->id);
        return r;
}

/* The allocation holding device ID id, or NULL; *ret_foreign set if id is
 * not a unit of this node. */
static struct gs_allocation *owner_of(struct gs_node *ag, const char *id, bool *ret_foreign)
{
        char uuid[GS_UUID_STR_LEN + 1];
        struct gs_gpu *g;
        uint32_t unit;

        if (gs_devid_parse(id, uuid, &unit) < 0 || !(g = gs_allocs_gpu(ag, uuid)) || unit >= g->units_total) {
                *ret_foreign = true;
                return NULL;
        }
        return g->unit_owner[unit];
}

int gs_allocs_take_over(struct gs_node *ag, const char *const *ids, size_t n, char *err, size_t errlen)
{
        bool foreign = false;

        if (n == 0 || n > GS_ALLOCS_MAX_IDS || gs_allocs_find_ids(ag, ids, n))
                return 0;
        for (size_t i = 0; i < n; i++) {
                struct gs_allocation *o = owner_of(ag, ids[i], &foreign);

                if (foreign)
                        return 0;
                if (o && o->nprocs > 0) {
                        if (o->pod_name[0])
                                snprintf(
                                        err, errlen,
                                        "device ID '%.63s' is part of allocation %s of pod %s/%s (container %s), which still has %u processes running; its units are free once they exit",
                                        ids[i], o->id, o->pod_namespace, o->pod_name, o->container_name, o->nprocs);
                        else
                                snprintf(
                                        err, errlen,
                                        "device ID '%.63s' is part of allocation %s (pod not yet known from PodResources), which still has %u processes running; its units are free once they exit",
                                        ids[i], o->id, o->nprocs);
                        return -EBUSY;
                }
        }
        for (size_t i = 0; i < n; i++) {
                struct gs_allocation *o = owner_of(ag, ids[i], &foreign);
                int r;

                if (!o)
                        continue;
                /* Deleting it at once (no process) clears its units' owner,
                 * so its other IDs in ids find none. */
                if (o->pod_name[0])
                        log_info(
                                "allocation %s of pod %s/%s released: the kubelet gave its device ID %s to a new container",
                                o->id, o->pod_namespace, o->pod_name, ids[i]);
                else
                        log_info("allocation %s released: the kubelet gave its device ID %s to a new container", o->id,
                                 ids[i]);
                r = gs_allocs_release(ag, o, err, errlen);
                if (r < 0)
                        return r;
        }
        return 0;
}

void gs_allocs_shutdown(struct gs_node *ag)
{
        gs_pending_free_all(ag);
        /* The pools go next: their chunks need no fresh memory. */
        for (uint32_t i = 0; i < ag->ngpus; i++)
                if (ag->gpus[i].pool)
                        gs_pool_set_return_fn(ag->gpus[i].pool, NULL, NULL);
        while (ag->allocs) {
                struct gs_allocation *a = ag->allocs;
                unlink_alloc(ag, a);
                gs_sockdir_close(ag, a);
                destroy(ag, a);
        }
}

static int checkpoint_fill(FILE *f, void *ctx)
{
        struct gs_node *ag = ctx;
        uint32_t *units = NULL;
        size_t cap = 0;

        fputs(GS_CKPT_HEADER, f);
        for (struct gs_allocation *a = ag->allocs; a; a = a->next) {
                if (a->releasing)
                        continue;
                if (a->kind == GS_OWNER_DEVICES) {
                        gs_ckpt_put_devices(f, a->id, a->created_unix, a->dir_name, a->burst_bytes, &a->qos,
                                            a->device_ids, a->ndevice_ids);
                        continue;
                }
                if (a->nunits > cap) {
                        uint32_t *u = realloc(units, a->nunits * sizeof(*u));
                        if (!u) {
                                free(units);
                                return -ENOMEM;
                        }
                        units = u;
                        cap = a->nunits;
                }
                for (size_t i = 0; i < a->nunits; i++)
                        units[i] = a->units[i].unit;
                gs_ckpt_put_claim(f, a->id, a->created_unix, a->dir_name, a->burst_bytes, &a->qos, &a->claim, units,
                                  a->nunits);
        }
        free(units);
        /* Lines not restored (yet) leave only by release. */
        gs_pending_put_all(f, ag);
        return 0;
}

int gs_allocs_checkpoint(struct gs_node *ag)
{
        char path[PATH_MAX];
        int r;

        /* Another agent's file (gs_node_handover). */
        if (!gs_node_paths_ours(ag))
                return 0;
        /* Unknown: a save would erase what could not be read. */
        if (ag->ckpt_err)
                return ag->ckpt_err;
        if (snprintf(path, sizeof(path), "%s/%s", ag->cfg.state_dir, GS_CKPT_NAME) >= (int)sizeof(path))
                return -ENAMETOOLONG;
        if (mkdir(ag->cfg.state_dir, 0700) < 0 && errno != EEXIST)
                return gs_neg_errno();
        r = gs_file_replace(path, 0600, checkpoint_fill, ag);
        if (r < 0)
                log_error("cannot write the checkpoint %s: %s", path, strerror(-r));
        return r;
}

uint32_t gs_allocs_outside_slots(const struct gs_node *ag, const struct gs_part *part)
{
        const struct gs_gpu *g = &ag->gpus[part->gpu];

        (void)g;
        return gs_part_burst(part);
}

int gs_allocs_set_burst(struct gs_node *ag, struct gs_allocation *a, uint64_t bytes, char *err, size_t errlen)
{
        uint64_t caps[GS_MAX_GPUS_PER_ALLOC], old = a->burst_bytes;
        int r;

        for (uint32_t i = 0; i < a->nparts; i++) {
                struct gs_part *part = &a->parts[i];
                r = gs_burst_cap(&ag->cfg, &ag->gpus[part->gpu], part->quota_chunks, bytes, false, &caps[i], err,
                                 errlen);
                if (r < 0)
                        return r;
                if (part->quota_chunks + caps[i] < part->burst_chunks) {
                        snprintf(err, errlen, "a burst is only ever raised: allocation %s may use %u chunks on GPU %s",
                                 a->id, part->burst_chunks, ag->gpus[part->gpu].uuid);
                        return -EINVAL;
                }
        }
        a->burst_bytes = bytes;
        r = gs_allocs_checkpoint(ag);
        if (r < 0) {
                a->burst_bytes = old;
                snprintf(err, errlen, "cannot write the checkpoint in %s: %s", ag->cfg.state_dir, strerror(-r));
                return r;
        }
        for (uint32_t i = 0; i < a->nparts; i++) {
                struct gs_part *part = &a->parts[i];
                struct gs_gpu *g = &ag->gpus[part->gpu];
                gs_gpu_lock(g);
                gs_palloc_raise_cap(part->pa, (uint32_t)caps[i]);
                __atomic_store_n(&part->burst_chunks, part->quota_chunks + (uint32_t)caps[i], __ATOMIC_RELEASE);
                gs_gpu_unlock(g);
        }
        return 0;
}

void gs_allocs_burst_from_pod(struct gs_node *ag, struct gs_allocation *a, uint64_t bytes)
{
        char err[512], b[32];

        if (a->burst_bytes == bytes || a->burst_refused == bytes || a->releasing)
                return;
        gs_format_size(bytes, b, sizeof(b));
        if (gs_allocs_set_burst(ag, a, bytes, err, sizeof(err)) < 0) {
                a->burst_refused = bytes;
                log_warn("allocation %s (pod %s/%s): annotation gshare.io/gpumem-burst %s not applied: %s", a->id,
                         a->pod_namespace, a->pod_name, b, err);
                return;
        }
        log_info("allocation %s (pod %s/%s): burst %s, from the pod's annotation", a->id, a->pod_namespace, a->pod_name,
                 b);
        gs_node_changed(ag);
}
