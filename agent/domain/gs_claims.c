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

/* A line of the file that is not a claim this agent can use (it does not
 * parse, or it is one past GS_CLAIMS_MAX): kept as read and written back on
 * every save, like the allocations checkpoint's unparsable lines. */
struct kept {
        char *s;                 /* without its newline; may hold NULs */
        size_t len;
};

struct gs_claims {
        struct gs_claim *v;
        size_t n, cap;
        struct kept kept[GS_CLAIMS_KEPT_MAX];
        size_t nkept;
        bool known;              /* the file has been read whole, or is absent */
        int read_err;            /* the last failed read's error, 0 if none */
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
        /* Lines this agent cannot use leave only by hand. */
        for (size_t i = 0; i < t->nkept; i++) {
                fwrite(t->kept[i].s, 1, t->kept[i].len, f);
                fputc('\n', f);
        }
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

static void kept_clear(struct gs_claims *t)
{
        for (size_t i = 0; i < t->nkept; i++)
                free(t->kept[i].s);
        t->nkept = 0;
}

/* Reads one line of f into buf (cap bytes; the newline dropped, NULs kept):
 * 1 and its length, 0 at the end of the file, -EFBIG for a line of cap
 * bytes or more (read to its end, so memory stays bounded whatever the
 * file holds), or the read's negative errno. */
static int read_line(FILE *f, char *buf, size_t cap, size_t *ret_len)
{
        size_t n = 0;
        bool big = false;
        int c;

        errno = 0;
        while ((c = getc(f)) != EOF && c != '\n') {
                if (n + 1 < cap)
                        buf[n++] = (char)c;
                else
                        big = true;
        }
        if (c == EOF && ferror(f))
                return errno > 0 ? -errno : -EIO;
        if (c == EOF && n == 0 && !big)
                return 0;
        buf[n] = '\0';
        *ret_len = n;
        return big ? -EFBIG : 1;
}

/* Reads the file at path into the empty table t: 0 (also when there is no
 * file: no claims), or a negative errno with why saying more where errno
 * alone does not, t left empty.  Never a partial table: a claim missing
 * from it would be reclaimed. */
static int read_file(const char *path, struct gs_claims *t, char *why, size_t whylen)
{
        char buf[GS_CLAIMS_LINE_MAX + 1], copy[GS_CLAIMS_LINE_MAX + 1];
        size_t len = 0, lineno = 0;
        FILE *f;
        int r;

        f = fopen(path, "re");
        if (!f)
                return errno == ENOENT ? 0 : gs_neg_errno();
        while ((r = read_line(f, buf, sizeof(buf), &len)) > 0) {
                struct gs_claim c;
                struct kept *k;

                lineno++;
                if (len == 0 || buf[0] == '#')
                        continue;
                memcpy(copy, buf, len + 1); /* parsing cuts it up */
                if (strlen(buf) == len && gs_claims_parse_line(copy, &c) == 0 && t->n < GS_CLAIMS_MAX) {
                        r = add(t, &c);
                        if (r < 0)
                                break;
                        continue;
                }
                if (t->nkept == GS_CLAIMS_KEPT_MAX) {
                        snprintf(why, whylen, "line %zu: more than %u lines that are not claims", lineno,
                                 GS_CLAIMS_KEPT_MAX);
                        r = -EFBIG;
                        break;
                }
                k = &t->kept[t->nkept];
                k->s = malloc(len + 1);
                if (!k->s) {
                        r = -ENOMEM;
                        break;
                }
                memcpy(k->s, buf, len + 1);
                k->len = len;
                t->nkept++;
        }
        if (r == -EFBIG && !why[0])
                snprintf(why, whylen, "line %zu is longer than %u bytes", lineno + 1, GS_CLAIMS_LINE_MAX);
        fclose(f);
        if (r < 0) {
                free(t->v);
                t->v = NULL;
                t->n = t->cap = 0;
                kept_clear(t);
        }
        return r;
}

int gs_claims_load(struct gs_agent *ag, char *err, size_t errlen)
{
        struct gs_claims *t = ag->claims;
        char path[PATH_MAX], why[128] = "", msg[PATH_MAX + 256];
        int r;

        if (!t) {
                t = calloc(1, sizeof(*t));
                if (!t) {
                        snprintf(err, errlen, "agent out of memory");
                        return -ENOMEM;
                }
                ag->claims = t;
        }
        if (t->known)
                return 0;
        r = path_of(ag, path, sizeof(path), "");
        if (r == 0)
                r = read_file(path, t, why, sizeof(why));
        if (r < 0) {
                snprintf(msg, sizeof(msg), "cannot read %s: %s%s%s", path, strerror(-r), why[0] ? ": " : "",
                         why);
                /* Once per streak (and per kind of failure): it is retried
                 * at every use, each reconcile pass included. */
                if (r != t->read_err)
                        log_error("%s; the DRA claims are unknown: nothing is reclaimed, and no claim prepared or unprepared, until it is read",
                                  msg);
                t->read_err = r;
                snprintf(err, errlen, "%s", msg);
                return r;
        }
        if (t->read_err)
                log_info("%s read: the DRA claims are known again", path);
        t->read_err = 0;
        t->known = true;
        for (size_t i = 0; i < t->nkept; i++)
                log_warn("%s: a line that is not a claim, kept as it is (an allocation it names is never reclaimed): %.200s",
                         path, t->kept[i].s);
        if (t->n)
                log_info("%zu DRA claims known from %s", t->n, path);
        return 0;
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
        struct gs_claims *t;
        struct gs_claim c = { 0 }, *old;
        struct gs_allocation *a;
        struct gs_gpu *g;
        char **ids = NULL, *buf = NULL;
        size_t i = 0;
        int r;

        /* Unknown claims: a save would erase them. */
        r = gs_claims_load(ag, err, errlen);
        if (r < 0)
                return r;
        t = ag->claims;
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
        struct gs_claims *t;
        struct gs_claim *c;
        struct gs_allocation *a;
        size_t i = 0;
        int r;

        /* Unknown claims: "no such claim" would be a guess, and the kubelet
         * retries an unprepare that fails. */
        r = gs_claims_load(ag, err, errlen);
        if (r < 0)
                return r;
        t = ag->claims;
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
        struct gs_claims *t;
        char err[128];

        if (gs_claims_load(ag, err, sizeof(err)) < 0)
                return NULL;
        t = ag->claims;
        for (size_t i = 0; i < t->n; i++)
                if (strcmp(t->v[i].alloc_id, a->id) == 0)
                        return &t->v[i];
        return NULL;
}

int gs_claims_may_own(struct gs_agent *ag, const struct gs_allocation *a)
{
        struct gs_claims *t;
        size_t idlen = strlen(a->id);
        char err[128];
        int r;

        r = gs_claims_load(ag, err, sizeof(err));
        if (r < 0)
                return r;
        if (gs_claims_of(ag, a))
                return 1;
        /* A kept line names no claim this agent can parse, but if it holds
         * the id, it may be that allocation's claim, garbled. */
        t = ag->claims;
        for (size_t i = 0; i < t->nkept; i++)
                if (idlen && memmem(t->kept[i].s, t->kept[i].len, a->id, idlen))
                        return 1;
        return 0;
}

void gs_claims_free(struct gs_agent *ag)
{
        if (!ag->claims)
                return;
        kept_clear(ag->claims);
        free(ag->claims->v);
        free(ag->claims);
        ag->claims = NULL;
}
