/* gs_claims.c — see gs_claims.h. */
#include "gs_claims.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gs_allocs.h"
#include "gs_gpu.h"
#include "gs_devid.h"
#include "gs_file.h"
#include "gs_log.h"

struct gs_claims {
        struct gs_claim *v;
        size_t n, cap;
};

static int by_string(const void *x, const void *y)
{
        return strcmp(*(char *const *)x, *(char *const *)y);
}

static bool uid_ok(const char *s)
{
        size_t n = strlen(s);

        return n > 0 && n <= GS_CLAIM_UID_MAX && strspn(s, "0123456789abcdefABCDEF-") == n;
}

/* A namespace or a claim name: lower-case DNS characters. */
static bool name_ok(const char *s, size_t max)
{
        size_t n = strlen(s);

        return n > 0 && n <= max && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-.") == n;
}

int gs_claims_parse_line(char *line, struct gs_claim *c)
{
        char *save = NULL, *f[6];
        char *end;
        unsigned long units;

        for (size_t i = 0; i < 6; i++)
                if (!(f[i] = strtok_r(i ? NULL : line, " \t\n", &save)))
                        return -EINVAL;
        if (strtok_r(NULL, " \t\n", &save) || !uid_ok(f[0]) || strlen(f[1]) != 16 ||
            strspn(f[1], "0123456789abcdef") != 16 || strlen(f[2]) != GS_UUID_STR_LEN ||
            !name_ok(f[4], GS_CLAIM_NS_MAX) || !name_ok(f[5], GS_CLAIM_NAME_MAX))
                return -EINVAL;
        errno = 0;
        units = strtoul(f[3], &end, 10);
        if (errno || *end || f[3][0] == '-' || units == 0 || units > GS_MAX_UNITS_PER_GPU)
                return -EINVAL;
        memset(c, 0, sizeof(*c));
        snprintf(c->uid, sizeof(c->uid), "%s", f[0]);
        snprintf(c->alloc_id, sizeof(c->alloc_id), "%s", f[1]);
        snprintf(c->gpu_uuid, sizeof(c->gpu_uuid), "%s", f[2]);
        c->units = (uint32_t)units;
        snprintf(c->ns, sizeof(c->ns), "%s", f[4]);
        snprintf(c->name, sizeof(c->name), "%s", f[5]);
        return 0;
}

static int path_of(const struct gs_agent *ag, char *buf, size_t cap, const char *suffix)
{
        int n = snprintf(buf, cap, "%s/%s%s", ag->cfg.state_dir, GS_CLAIMS_NAME, suffix);

        return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

static int save_fill(FILE *f, void *ctx)
{
        const struct gs_claims *t = ctx;

        fprintf(f, "# gshare-agent claims v1\n");
        for (size_t i = 0; i < t->n; i++)
                fprintf(f, "%s %s %s %u %s %s\n", t->v[i].uid, t->v[i].alloc_id, t->v[i].gpu_uuid,
                        t->v[i].units, t->v[i].ns, t->v[i].name);
        return 0;
}

static int save(struct gs_agent *ag)
{
        char path[PATH_MAX];
        int r;

        if (ag->paths_theirs)
                return 0; /* the file is the other agent's */
        if (path_of(ag, path, sizeof(path), "") < 0)
                return -ENAMETOOLONG;
        if (mkdir(ag->cfg.state_dir, 0700) < 0 && errno != EEXIST)
                return gs_neg_errno();
        r = gs_file_replace(path, 0600, save_fill, ag->claims);
        if (r < 0)
                log_error("cannot write %s: %s", path, strerror(-r));
        return r;
}

static int add(struct gs_claims *t, const struct gs_claim *c)
{
        if (t->n == t->cap) {
                size_t cap = t->cap ? 2 * t->cap : 16;
                struct gs_claim *v = realloc(t->v, cap * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                t->v = v;
                t->cap = cap;
        }
        t->v[t->n++] = *c;
        return 0;
}

static void drop(struct gs_claims *t, size_t i)
{
        t->v[i] = t->v[--t->n];
}

/* The table, read from the file on first use. */
static struct gs_claims *table(struct gs_agent *ag)
{
        char path[PATH_MAX], *line = NULL;
        size_t cap = 0, lineno = 0;
        struct gs_claims *t;
        FILE *f;

        if (ag->claims)
                return ag->claims;
        t = calloc(1, sizeof(*t));
        if (!t)
                return NULL;
        ag->claims = t;
        if (path_of(ag, path, sizeof(path), "") < 0 || !(f = fopen(path, "re")))
                return t;
        while (getline(&line, &cap, f) > 0) {
                struct gs_claim c;

                lineno++;
                if (line[0] == '#' || line[0] == '\n')
                        continue;
                if (gs_claims_parse_line(line, &c) < 0 || t->n >= GS_CLAIMS_MAX) {
                        log_warn("%s:%zu: malformed or excess claim line dropped", path, lineno);
                        continue;
                }
                if (add(t, &c) < 0)
                        break;
        }
        free(line);
        fclose(f);
        if (t->n)
                log_info("%zu DRA claims known from %s", t->n, path);
        return t;
}

static struct gs_claim *find(struct gs_claims *t, const char *uid, size_t *ret_i)
{
        for (size_t i = 0; i < t->n; i++)
                if (strcmp(t->v[i].uid, uid) == 0) {
                        *ret_i = i;
                        return &t->v[i];
                }
        return NULL;
}

static struct gs_gpu *gpu_by_uuid(struct gs_agent *ag, const char *uuid)
{
        for (uint32_t i = 0; i < ag->ngpus; i++)
                if (strcasecmp(ag->gpus[i].uuid, uuid) == 0)
                        return &ag->gpus[i];
        return NULL;
}

/* The device IDs of units free units of g (lowest first) into ids; the
 * strings in buf (GS_DEVID_MAX + 1 bytes each).  -ENOSPC with err when too
 * few are free. */
static int pick_units(struct gs_agent *ag, struct gs_gpu *g, uint32_t units, char **ids, char *buf,
                      char *err, size_t errlen)
{
        uint32_t *pend = NULL, npend = 0, nfree = 0, k = 0;
        int r = 0;

        if (ag->pending) {
                pend = calloc(g->units_total, sizeof(*pend));
                if (!pend)
                        return -ENOMEM;
                npend = (uint32_t)gs_allocs_units_pending(ag, g, pend, g->units_total);
        }
        for (uint32_t u = 0; u < g->units_total; u++) {
                bool taken = g->unit_owner && g->unit_owner[u];

                for (uint32_t j = 0; j < npend && !taken; j++)
                        taken = pend[j] == u;
                if (taken)
                        continue;
                nfree++;
                if (k < units) {
                        ids[k] = buf + (size_t)k * (GS_DEVID_MAX + 1);
                        if (gs_devid_format(ids[k], GS_DEVID_MAX + 1, g->uuid, u) < 0) {
                                r = -EINVAL;
                                break;
                        }
                        k++;
                }
        }
        free(pend);
        if (r == 0 && k < units) {
                snprintf(err, errlen, "GPU %s has %u of its %u units (%llu bytes each) free, the claim needs %u",
                         g->uuid, nfree, g->units_total, (unsigned long long)g->unit_bytes, units);
                r = -ENOSPC;
        }
        return r;
}

int gs_claims_create(struct gs_agent *ag, const char *uid, const char *ns, const char *name,
                     const char *gpu_uuid, uint32_t units, struct gs_allocation **ret,
                     bool *ret_created, char *err, size_t errlen)
{
        struct gs_claims *t = table(ag);
        struct gs_claim c = { 0 }, *old;
        struct gs_allocation *a;
        struct gs_gpu *g;
        char **ids = NULL, *buf = NULL;
        size_t i = 0;
        int r;

        if (!t) {
                snprintf(err, errlen, "agent out of memory");
                return -ENOMEM;
        }
        if (!uid_ok(uid) || !name_ok(ns, GS_CLAIM_NS_MAX) || !name_ok(name, GS_CLAIM_NAME_MAX)) {
                snprintf(err, errlen, "claim '%.40s' (%.64s/%.64s): not a claim UID, namespace and name", uid,
                         ns, name);
                return -EINVAL;
        }
        old = find(t, uid, &i);
        if (old) {
                a = gs_allocs_find(ag, old->alloc_id);
                if (a && !a->releasing) {
                        if (strcasecmp(old->gpu_uuid, gpu_uuid) || old->units != units) {
                                snprintf(err, errlen,
                                         "claim %s already has allocation %s of %u units on GPU %s, not %u on %.40s",
                                         uid, a->id, old->units, old->gpu_uuid, units, gpu_uuid);
                                return -EEXIST;
                        }
                        *ret = a;
                        *ret_created = false;
                        return 0;
                }
                if (gs_allocs_is_pending(ag, old->alloc_id)) {
                        snprintf(err, errlen, "the allocation %s of claim %s waits to be restored (see the agent's log)",
                                 old->alloc_id, uid);
                        return -EAGAIN;
                }
                /* Its allocation is gone (a crash between the two writes,
                 * or released by hand): the claim is made afresh. */
                drop(t, i);
        }
        g = gpu_by_uuid(ag, gpu_uuid);
        if (!g) {
                snprintf(err, errlen, "GPU %.40s is not a GPU gshare manages on this node", gpu_uuid);
                return -ENODEV;
        }
        if (units == 0 || units > g->units_total) {
                snprintf(err, errlen, "claim %s asks for %u units of %llu bytes; GPU %s has %u", uid, units,
                         (unsigned long long)g->unit_bytes, g->uuid, g->units_total);
                return -EINVAL;
        }
        if (t->n >= GS_CLAIMS_MAX) {
                snprintf(err, errlen, "%u claims are prepared on this node already", GS_CLAIMS_MAX);
                return -ENOSPC;
        }
        ids = calloc(units, sizeof(*ids));
        buf = calloc(units, GS_DEVID_MAX + 1);
        if (!ids || !buf) {
                r = -ENOMEM;
                snprintf(err, errlen, "agent out of memory");
                goto out;
        }
        r = pick_units(ag, g, units, ids, buf, err, errlen);
        if (r < 0)
                goto out;
        /* The entry is written before the allocation exists, so its id
         * is computed here as gs_allocs_create will: from the IDs in string
         * order (not unit order: "-u10" sorts before "-u9"). */
        snprintf(c.uid, sizeof(c.uid), "%s", uid);
        snprintf(c.gpu_uuid, sizeof(c.gpu_uuid), "%s", g->uuid);
        c.units = units;
        snprintf(c.ns, sizeof(c.ns), "%s", ns);
        snprintf(c.name, sizeof(c.name), "%s", name);
        {
                char **sorted = calloc(units, sizeof(*sorted));
                if (!sorted) {
                        r = -ENOMEM;
                        goto out;
                }
                memcpy(sorted, ids, units * sizeof(*sorted));
                qsort(sorted, units, sizeof(*sorted), by_string);
                gs_allocs_id((const char *const *)sorted, units, c.alloc_id);
                free(sorted);
        }
        r = add(t, &c);
        if (r == 0)
                r = save(ag);
        if (r < 0) {
                snprintf(err, errlen, "cannot record claim %s in %s/%s: %s", uid, ag->cfg.state_dir,
                         GS_CLAIMS_NAME, strerror(-r));
                if (t->n && strcmp(t->v[t->n - 1].uid, uid) == 0)
                        t->n--;
                goto out;
        }
        r = gs_allocs_create(ag, (const char *const *)ids, units, 0, NULL, true, &a, ret_created, err, errlen);
        if (r < 0) {
                if (find(t, uid, &i))
                        drop(t, i);
                (void)save(ag);
                goto out;
        }
        *ret = a;
out:
        free(ids);
        free(buf);
        return r;
}

int gs_claims_release(struct gs_agent *ag, const char *uid, char *err, size_t errlen)
{
        struct gs_claims *t = table(ag);
        struct gs_claim *c;
        struct gs_allocation *a;
        size_t i = 0;
        int r = 0;

        if (!t) {
                snprintf(err, errlen, "agent out of memory");
                return -ENOMEM;
        }
        c = find(t, uid, &i);
        if (!c)
                return 0;
        a = gs_allocs_find(ag, c->alloc_id);
        if (a && !a->releasing)
                r = gs_allocs_release(ag, a, err, errlen);
        else if (!a && gs_allocs_is_pending(ag, c->alloc_id))
                r = gs_allocs_release_pending(ag, c->alloc_id, NULL, 0, err, errlen);
        if (r < 0)
                return r;
        log_info("claim %s (%s/%s): allocation %s released", c->uid, c->ns, c->name, c->alloc_id);
        drop(t, i);
        return save(ag);
}

const struct gs_claim *gs_claims_of(struct gs_agent *ag, const struct gs_allocation *a)
{
        struct gs_claims *t = table(ag);

        for (size_t i = 0; t && i < t->n; i++)
                if (strcmp(t->v[i].alloc_id, a->id) == 0)
                        return &t->v[i];
        return NULL;
}

void gs_claims_free(struct gs_agent *ag)
{
        if (!ag->claims)
                return;
        free(ag->claims->v);
        free(ag->claims);
        ag->claims = NULL;
}
