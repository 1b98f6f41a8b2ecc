/* gs_ckpt.c — the allocations checkpoint's format and file; see gs_ckpt.h. */
#include "gs_ckpt.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gs_k8sname.h"
#include "gs_log.h"

_Static_assert(GS_CLAIM_UID_MAX == GS_K8S_UID_MAX && GS_CLAIM_NS_MAX == GS_K8S_LABEL_MAX &&
                       GS_CLAIM_NAME_MAX == GS_K8S_SUBDOMAIN_MAX,
               "a claim's fields hold what gs_k8sname.h accepts");

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(const char *const *)a, *(const char *const *)b);
}

char **gs_ckpt_sorted_ids(const char *const *ids, size_t n)
{
        size_t bytes = n * sizeof(char *);
        char **v, *p;

        for (size_t i = 0; i < n; i++)
                bytes += strlen(ids[i]) + 1;
        v = malloc(bytes ? bytes : 1);
        if (!v)
                return NULL;
        p = (char *)(v + n);
        for (size_t i = 0; i < n; i++) {
                size_t l = strlen(ids[i]) + 1;
                memcpy(p, ids[i], l);
                v[i] = p;
                p += l;
        }
        qsort(v, n, sizeof(*v), cmp_str);
        return v;
}

void gs_ckpt_rec_free(struct gs_ckpt_rec *r)
{
        free(r->ids);
        free(r->units);
        free(r->kept);
        memset(r, 0, sizeof(*r));
}

void gs_ckpt_free(struct gs_ckpt *c)
{
        for (size_t i = 0; i < c->n; i++)
                gs_ckpt_rec_free(&c->recs[i]);
        free(c->recs);
        memset(c, 0, sizeof(*c));
}

static bool hex_id(const char *s)
{
        return s && strlen(s) == 16 && strspn(s, "0123456789abcdef") == 16;
}

static int parse_u64(const char *s, unsigned long long *ret)
{
        char *end;

        if (!s || !*s || s[0] == '-' || s[0] == '+')
                return -EINVAL;
        errno = 0;
        *ret = strtoull(s, &end, 10);
        return errno || *end ? -EINVAL : 0;
}

/* dir=<one path component of hex digits and dashes> into out. */
static int parse_dir(const char *tok, char out[GS_ALLOCS_DIR_MAX])
{
        const char *d;

        if (!tok || strncmp(tok, "dir=", 4) != 0)
                return -EINVAL;
        d = tok + 4;
        if (!*d || strlen(d) >= GS_ALLOCS_DIR_MAX || strspn(d, "0123456789abcdef-") != strlen(d))
                return -EINVAL;
        snprintf(out, GS_ALLOCS_DIR_MAX, "%s", d);
        return 0;
}

/* burst=<bytes>, more than 0 (gs_alloc_req.burst_bytes). */
static int parse_burst(const char *tok, uint64_t *ret)
{
        unsigned long long v;

        if (!tok || strncmp(tok, "burst=", 6) != 0 || parse_u64(tok + 6, &v) < 0 || v == 0)
                return -EINVAL;
        *ret = v;
        return 0;
}

/* The tokens after dir=: burst=, then qos=, each optional; tok the
 * first (NULL: none). */
static int parse_tail(char *tok, char **save, struct gs_ckpt_rec *r)
{
        if (tok && strncmp(tok, "burst=", 6) == 0) {
                if (parse_burst(tok, &r->burst_bytes) < 0)
                        return -EINVAL;
                tok = strtok_r(NULL, " \t", save);
        }
        if (tok && gs_qos_token_parse(tok, &r->qos) < 0)
                return -EINVAL;
        return tok && strtok_r(NULL, " \t", save) ? -EINVAL : 0;
}

/* "<u>,<u>,..." strictly ascending, each a unit of a GPU, into r->units. */
static int parse_units(const char *s, struct gs_ckpt_rec *r)
{
        size_t n = 1, k = 0;
        const char *p = s;

        if (!*s || strspn(s, "0123456789,") != strlen(s))
                return -EINVAL;
        for (p = s; *p; p++)
                n += *p == ',';
        if (n > GS_MAX_UNITS_PER_GPU)
                return -EINVAL;
        r->units = malloc(n * sizeof(*r->units));
        if (!r->units)
                return -ENOMEM;
        for (p = s; k < n; k++) {
                char *end;
                unsigned long u;

                errno = 0;
                u = strtoul(p, &end, 10);
                if (errno || end == p || u >= GS_MAX_UNITS_PER_GPU || (k && u <= r->units[k - 1]) ||
                    (*end != ',' && *end != '\0') || (*end == '\0') != (k == n - 1))
                        return -EINVAL;
                r->units[k] = (uint32_t)u;
                p = end + 1;
        }
        r->claim.units = (uint32_t)n;
        return 0;
}

/* After "<id> <created> claim": the claim's fields, its units, dir=. */
static int parse_claim(char **save, struct gs_ckpt_rec *r)
{
        char *f[6], *extra;
        uint8_t raw[16];
        int e;

        for (size_t i = 0; i < 6; i++)
                if (!(f[i] = strtok_r(NULL, " \t", save)))
                        return -EINVAL;
        extra = strtok_r(NULL, " \t", save);
        if (parse_tail(extra, save, r) < 0 || !gs_k8s_uid_ok(f[0]) || !gs_k8s_label_ok(f[1]) ||
            !gs_k8s_subdomain_ok(f[2]) || gs_uuid_parse(f[3], raw) < 0 || parse_dir(f[5], r->dir) < 0)
                return -EINVAL;
        e = parse_units(f[4], r);
        if (e < 0)
                return e;
        r->kind = GS_OWNER_CLAIM;
        snprintf(r->claim.uid, sizeof(r->claim.uid), "%s", f[0]);
        snprintf(r->claim.ns, sizeof(r->claim.ns), "%s", f[1]);
        snprintf(r->claim.name, sizeof(r->claim.name), "%s", f[2]);
        snprintf(r->claim.gpu_uuid, sizeof(r->claim.gpu_uuid), "%s", f[3]);
        return 0;
}

/* After "<id> <created>", with tok the count: v1/v2/v3 device plugin line. */
static int parse_devices(char *tok, char **save, struct gs_ckpt_rec *r)
{
        unsigned long long count;
        const char **ids;
        size_t n = 0;
        bool dir = false;

        if (parse_u64(tok, &count) < 0 || count == 0 || count > GS_ALLOCS_MAX_IDS)
                return -EINVAL;
        ids = calloc(count, sizeof(*ids));
        if (!ids)
                return -ENOMEM;
        while (!dir && (tok = strtok_r(NULL, " \t", save))) {
                if (n < count) {
                        ids[n++] = tok;
                } else if (parse_dir(tok, r->dir) < 0) {
                        free(ids);
                        return -EINVAL;
                } else {
                        dir = true;
                }
        }
        if (dir && parse_tail(strtok_r(NULL, " \t", save), save, r) < 0) {
                free(ids);
                return -EINVAL;
        }
        if (n != count) {
                free(ids);
                return -EINVAL;
        }
        /* v1 lines name no directory: it was <id>. */
        if (!dir)
                snprintf(r->dir, sizeof(r->dir), "%s", r->id);
        r->ids = gs_ckpt_sorted_ids(ids, n);
        free(ids);
        if (!r->ids)
                return -ENOMEM;
        r->nids = n;
        r->kind = GS_OWNER_DEVICES;
        return 0;
}

int gs_ckpt_parse_line(char *line, size_t len, struct gs_ckpt_rec *r)
{
        unsigned long long created;
        char *save = NULL, *tok;
        int e;

        memset(r, 0, sizeof(*r));
        if (strlen(line) != len)
                return -EINVAL; /* a NUL in it */
        tok = strtok_r(line, " \t", &save);
        if (!hex_id(tok))
                return -EINVAL;
        memcpy(r->id, tok, 17);
        if (parse_u64(strtok_r(NULL, " \t", &save), &created) < 0)
                return -EINVAL;
        r->created_unix = created;
        tok = strtok_r(NULL, " \t", &save);
        if (!tok)
                return -EINVAL;
        e = strcmp(tok, "claim") == 0 ? parse_claim(&save, r) : parse_devices(tok, &save, r);
        if (e < 0)
                gs_ckpt_rec_free(r);
        return e;
}

int gs_ckpt_parse_claims_line(char *line, struct gs_claim *c, char ret_alloc_id[17])
{
        char *save = NULL, *f[6];
        char *end;
        unsigned long units;

        for (size_t i = 0; i < 6; i++)
                if (!(f[i] = strtok_r(i ? NULL : line, " \t", &save)))
                        return -EINVAL;
        if (strtok_r(NULL, " \t", &save) || !gs_k8s_uid_ok(f[0]) || !hex_id(f[1]) || strlen(f[2]) != GS_UUID_STR_LEN ||
            !gs_k8s_label_ok(f[4]) || !gs_k8s_subdomain_ok(f[5]))
                return -EINVAL;
        errno = 0;
        units = strtoul(f[3], &end, 10);
        if (errno || *end || f[3][0] == '-' || units == 0 || units > GS_MAX_UNITS_PER_GPU)
                return -EINVAL;
        memset(c, 0, sizeof(*c));
        snprintf(c->uid, sizeof(c->uid), "%s", f[0]);
        memcpy(ret_alloc_id, f[1], 17);
        snprintf(c->gpu_uuid, sizeof(c->gpu_uuid), "%s", f[2]);
        c->units = (uint32_t)units;
        snprintf(c->ns, sizeof(c->ns), "%s", f[4]);
        snprintf(c->name, sizeof(c->name), "%s", f[5]);
        return 0;
}

static void put_tail(FILE *f, const char *dir, uint64_t burst, const struct gs_qos_policy *qos)
{
        fprintf(f, " dir=%s", dir);
        if (burst)
                fprintf(f, " burst=%" PRIu64, burst);
        if (qos)
                gs_qos_put(f, qos);
        fputc('\n', f);
}

void gs_ckpt_put_devices(FILE *f, const char *id, uint64_t created, const char *dir, uint64_t burst,
                         const struct gs_qos_policy *qos, char *const *ids, size_t n)
{
        fprintf(f, "%s %" PRIu64 " %zu", id, created, n);
        for (size_t i = 0; i < n; i++) {
                fputc(' ', f);
                fputs(ids[i], f);
        }
        put_tail(f, dir, burst, qos);
}

void gs_ckpt_put_claim(FILE *f, const char *id, uint64_t created, const char *dir, uint64_t burst,
                       const struct gs_qos_policy *qos, const struct gs_claim *c, const uint32_t *units, size_t nunits)
{
        fprintf(f, "%s %" PRIu64 " claim %s %s %s %s ", id, created, c->uid, c->ns, c->name, c->gpu_uuid);
        for (size_t i = 0; i < nunits; i++)
                fprintf(f, i ? ",%u" : "%u", units[i]);
        put_tail(f, dir, burst, qos);
}

void gs_ckpt_put(FILE *f, const struct gs_ckpt_rec *r)
{
        if (r->kept) {
                fwrite(r->kept, 1, r->kept_len, f);
                fputc('\n', f);
        } else if (r->kind == GS_OWNER_CLAIM) {
                gs_ckpt_put_claim(f, r->id, r->created_unix, r->dir, r->burst_bytes, &r->qos, &r->claim, r->units,
                                  r->claim.units);
        } else {
                gs_ckpt_put_devices(f, r->id, r->created_unix, r->dir, r->burst_bytes, &r->qos, r->ids, r->nids);
        }
}

/* ---- reading ---- */

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
        while ((c = getc_unlocked(f)) != EOF && c != '\n') {
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

struct reader {
        struct gs_ckpt *c;
        size_t cap, nkept;
        char *buf, *copy;  /* GS_CKPT_LINE_MAX + 1 bytes each */
        bool claims_phase; /* reading or folding the claims file */
        char why[160];
};

static struct gs_ckpt_rec *new_rec(struct reader *rd)
{
        struct gs_ckpt *c = rd->c;

        if (c->n == GS_CKPT_RECS_MAX) {
                snprintf(rd->why, sizeof(rd->why), "more than %u lines", GS_CKPT_RECS_MAX);
                errno = EFBIG;
                return NULL;
        }
        if (c->n == rd->cap) {
                size_t cap = rd->cap ? 2 * rd->cap : 16;
                struct gs_ckpt_rec *v = realloc(c->recs, cap * sizeof(*v));
                if (!v) {
                        errno = ENOMEM;
                        return NULL;
                }
                c->recs = v;
                rd->cap = cap;
        }
        memset(&c->recs[c->n], 0, sizeof(c->recs[0]));
        return &c->recs[c->n++];
}

/* Keeps line (len bytes) verbatim as a record. */
static int keep(struct reader *rd, const char *line, size_t len)
{
        struct gs_ckpt_rec *r;

        for (size_t i = 0; i < rd->c->n; i++) /* a claims line kept before */
                if (rd->c->recs[i].kept && rd->c->recs[i].kept_len == len &&
                    memcmp(rd->c->recs[i].kept, line, len) == 0 && rd->claims_phase)
                        return 0;
        if (rd->nkept == GS_CKPT_KEPT_MAX) {
                snprintf(rd->why, sizeof(rd->why), "more than %u lines that do not parse", GS_CKPT_KEPT_MAX);
                return -EFBIG;
        }
        r = new_rec(rd);
        if (!r)
                return -errno;
        r->kept = malloc(len + 1);
        if (!r->kept) {
                rd->c->n--;
                return -ENOMEM;
        }
        memcpy(r->kept, line, len + 1);
        r->kept_len = len;
        rd->nkept++;
        return 0;
}

/* One claim of v2's claims file (its line as read: raw, len). */
struct old_claim {
        struct gs_claim c;
        char alloc_id[17];
        char *raw;
        size_t len;
};

/* Reads path line by line: into records (claims NULL), or into *claims. */
static int read_file(struct reader *rd, const char *path, struct old_claim **claims, size_t *nclaims)
{
        size_t len = 0, lineno = 0, cap = 0;
        FILE *f = fopen(path, "re");
        int r;

        if (!f)
                return errno == ENOENT ? 0 : -errno;
        while ((r = read_line(f, rd->buf, GS_CKPT_LINE_MAX + 1, &len)) > 0) {
                lineno++;
                if (len == 0 || rd->buf[0] == '#')
                        continue;
                memcpy(rd->copy, rd->buf, len + 1); /* parsing cuts it up */
                if (!claims) {
                        struct gs_ckpt_rec *rec = new_rec(rd);
                        if (!rec) {
                                r = -errno;
                                break;
                        }
                        r = gs_ckpt_parse_line(rd->copy, len, rec);
                        if (r == 0)
                                continue;
                        rd->c->n--;
                        if (r == -EINVAL)
                                log_warn("%s:%zu: malformed line, kept as it is: %.200s", path, lineno, rd->buf);
                        r = r == -EINVAL ? keep(rd, rd->buf, len) : r;
                } else {
                        struct old_claim oc;
                        if (strlen(rd->copy) == len && gs_ckpt_parse_claims_line(rd->copy, &oc.c, oc.alloc_id) == 0) {
                                if (*nclaims == GS_CKPT_RECS_MAX) {
                                        snprintf(rd->why, sizeof(rd->why), "more than %u claims", GS_CKPT_RECS_MAX);
                                        r = -EFBIG;
                                        break;
                                }
                                if (*nclaims == cap) {
                                        struct old_claim *v;
                                        cap = cap ? 2 * cap : 16;
                                        v = realloc(*claims, cap * sizeof(*v));
                                        if (!v) {
                                                r = -ENOMEM;
                                                break;
                                        }
                                        *claims = v;
                                }
                                oc.raw = malloc(len + 1);
                                if (!oc.raw) {
                                        r = -ENOMEM;
                                        break;
                                }
                                memcpy(oc.raw, rd->buf, len + 1);
                                oc.len = len;
                                (*claims)[(*nclaims)++] = oc;
                                continue;
                        }
                        log_warn(
                                "%s:%zu: a line that is not a claim, kept as it is (an allocation it names is never reclaimed): %.200s",
                                path, lineno, rd->buf);
                        r = keep(rd, rd->buf, len);
                }
                if (r < 0)
                        break;
        }
        if (r == -EFBIG && !rd->why[0])
                snprintf(rd->why, sizeof(rd->why), "line %zu is longer than %u bytes", lineno + 1,
                         (unsigned)GS_CKPT_LINE_MAX);
        fclose(f);
        if (r == 0 && claims)
                rd->c->claims_file = true;
        return r;
}

/* Makes r, a device plugin's line, the line of claim oc: its device IDs
 * must be exactly oc's count of units of oc's GPU.  -EINVAL if not. */
static int to_claim(struct gs_ckpt_rec *r, const struct old_claim *oc)
{
        uint32_t *units;

        if (r->nids != oc->c.units)
                return -EINVAL;
        units = malloc(r->nids * sizeof(*units));
        if (!units)
                return -ENOMEM;
        for (size_t i = 0; i < r->nids; i++) {
                char uuid[GS_UUID_STR_LEN + 1];
                if (gs_devid_parse(r->ids[i], uuid, &units[i]) < 0 || strcasecmp(uuid, oc->c.gpu_uuid) != 0) {
                        free(units);
                        return -EINVAL;
                }
        }
        for (size_t i = 1; i < r->nids; i++) /* few: insertion sort */
                for (size_t j = i; j > 0 && units[j - 1] > units[j]; j--) {
                        uint32_t t = units[j];
                        units[j] = units[j - 1];
                        units[j - 1] = t;
                }
        for (size_t i = 1; i < r->nids; i++)
                if (units[i] == units[i - 1]) {
                        free(units);
                        return -EINVAL;
                }
        free(r->ids);
        r->ids = NULL;
        r->nids = 0;
        r->units = units;
        r->claim = oc->c;
        r->kind = GS_OWNER_CLAIM;
        return 0;
}

/* Folds the claims of v2's file into the records (gs_ckpt.h). */
static int fold(struct reader *rd, const char *path, struct old_claim *v, size_t n)
{
        struct gs_ckpt *c = rd->c;
        size_t nrecs = c->n; /* kept lines are added behind */
        int r = 0;

        for (size_t i = 0; i < n && r >= 0; i++) {
                struct gs_ckpt_rec *rec = NULL;

                for (size_t k = 0; k < nrecs && !rec; k++)
                        if (!c->recs[k].kept && strcmp(c->recs[k].id, v[i].alloc_id) == 0)
                                rec = &c->recs[k];
                if (!rec) {
                        log_info("%s: claim %s (%s/%s) has no allocation (%s): dropped", path, v[i].c.uid, v[i].c.ns,
                                 v[i].c.name, v[i].alloc_id);
                        c->claims_dropped++;
                        continue;
                }
                if (rec->kind == GS_OWNER_CLAIM && strcmp(rec->claim.uid, v[i].c.uid) == 0) {
                        c->claims_migrated++; /* a claims file left by a migration */
                        continue;
                }
                r = rec->kind == GS_OWNER_DEVICES ? to_claim(rec, &v[i]) : -EINVAL;
                if (r == 0) {
                        c->claims_migrated++;
                } else if (r == -EINVAL) {
                        log_warn(
                                "%s: claim %s does not match allocation %s; its line is kept as it is (the allocation is never reclaimed)",
                                path, v[i].c.uid, v[i].alloc_id);
                        r = keep(rd, v[i].raw, v[i].len);
                        /* recs may have moved */
                }
        }
        return r;
}

int gs_ckpt_read(const char *state_dir, struct gs_ckpt *ret, char *err, size_t errlen)
{
        char path[4096], cpath[4096];
        struct reader rd = { .c = ret };
        struct old_claim *claims = NULL;
        size_t nclaims = 0;
        const char *at = path;
        int r = -ENOMEM;

        memset(ret, 0, sizeof(*ret));
        if (snprintf(path, sizeof(path), "%s/%s", state_dir, GS_CKPT_NAME) >= (int)sizeof(path) ||
            snprintf(cpath, sizeof(cpath), "%s/%s", state_dir, GS_CKPT_CLAIMS_NAME) >= (int)sizeof(cpath)) {
                snprintf(err, errlen, "state directory %.200s: path too long", state_dir);
                return -ENAMETOOLONG;
        }
        rd.buf = malloc(GS_CKPT_LINE_MAX + 1);
        rd.copy = malloc(GS_CKPT_LINE_MAX + 1);
        if (rd.buf && rd.copy) {
                r = read_file(&rd, path, NULL, NULL);
                if (r == 0) {
                        at = cpath;
                        rd.claims_phase = true;
                        r = read_file(&rd, cpath, &claims, &nclaims);
                }
                if (r == 0)
                        r = fold(&rd, cpath, claims, nclaims);
        }
        for (size_t i = 0; i < nclaims; i++)
                free(claims[i].raw);
        free(claims);
        free(rd.buf);
        free(rd.copy);
        if (r < 0) {
                snprintf(err, errlen, "cannot read %s: %s%s%s", at, strerror(-r), rd.why[0] ? ": " : "", rd.why);
                gs_ckpt_free(ret);
        }
        return r;
}
