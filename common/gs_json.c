/* gs_json.c — see gs_json.h. */
#include "gs_json.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

struct jp {
        const char *p, *end;
        struct gs_json_want *w;
        size_t nw;
        char path[128];
};

static void j_ws(struct jp *j)
{
        while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
                j->p++;
}

static struct gs_json_want *j_match(struct jp *j, bool live)
{
        if (!live)
                return NULL;
        for (size_t i = 0; i < j->nw; i++)
                if (strcmp(j->w[i].path, j->path) == 0)
                        return &j->w[i];
        return NULL;
}

/* A string at j->p (the opening quote), decoded into out (cap bytes, may be
 * 0); *ret_trunc says it did not fit.  \u escapes become '?': nothing we
 * read needs them. */
static int j_string(struct jp *j, char *out, size_t cap, bool *ret_trunc)
{
        size_t n = 0;

        *ret_trunc = false;
        j->p++;
        while (j->p < j->end) {
                unsigned char ch = (unsigned char)*j->p++;
                if (ch == '"') {
                        if (cap)
                                out[n] = '\0';
                        return 0;
                }
                if (ch < 0x20)
                        return -EINVAL;
                if (ch == '\\') {
                        if (j->p >= j->end)
                                return -EINVAL;
                        ch = (unsigned char)*j->p++;
                        switch (ch) {
                        case '"':
                        case '\\':
                        case '/': break;
                        case 'b': ch = '\b'; break;
                        case 'f': ch = '\f'; break;
                        case 'n': ch = '\n'; break;
                        case 'r': ch = '\r'; break;
                        case 't': ch = '\t'; break;
                        case 'u':
                                if (j->end - j->p < 4)
                                        return -EINVAL;
                                for (int i = 0; i < 4; i++)
                                        if (!isxdigit((unsigned char)j->p[i]))
                                                return -EINVAL;
                                j->p += 4;
                                ch = '?';
                                break;
                        default: return -EINVAL;
                        }
                }
                if (n + 1 < cap)
                        out[n++] = (char)ch;
                else
                        *ret_trunc = true;
        }
        return -EINVAL;
}

static int j_value(struct jp *j, size_t plen, int depth, bool live);

/* After a member or an element: 1 on ',' (another follows), 0 on close (the
 * end), -EINVAL on anything else. */
static int j_next(struct jp *j, char close)
{
        j_ws(j);
        if (j->p < j->end && (*j->p == ',' || *j->p == close))
                return *j->p++ == ',';
        return -EINVAL;
}

static int j_object(struct jp *j, size_t plen, int depth, bool live)
{
        char key[64];
        bool trunc;
        int r;

        j->p++;
        j_ws(j);
        if (j->p < j->end && *j->p == '}') {
                j->p++;
                return 0;
        }
        for (;;) {
                size_t klen, nlen = plen;
                bool klive;

                j_ws(j);
                if (j->p >= j->end || *j->p != '"')
                        return -EINVAL;
                r = j_string(j, key, sizeof(key), &trunc);
                if (r < 0)
                        return r;
                klen = strlen(key);
                klive = live && !trunc && plen + 1 + klen < sizeof(j->path);
                if (klive) {
                        if (plen)
                                j->path[nlen++] = '.';
                        memcpy(j->path + nlen, key, klen + 1);
                        nlen += klen;
                }
                j_ws(j);
                if (j->p >= j->end || *j->p != ':')
                        return -EINVAL;
                j->p++;
                r = j_value(j, nlen, depth, klive);
                if (r == 0)
                        r = j_next(j, '}');
                if (r <= 0)
                        return r;
        }
}

static int j_array(struct jp *j, size_t plen, int depth)
{
        int r;

        j->p++;
        j_ws(j);
        if (j->p < j->end && *j->p == ']') {
                j->p++;
                return 0;
        }
        for (;;) {
                r = j_value(j, plen, depth, false); /* no wanted value is in a list */
                if (r == 0)
                        r = j_next(j, ']');
                if (r <= 0)
                        return r;
        }
}

static int j_scalar(struct jp *j, struct gs_json_want *w)
{
        static const char *const lits[] = { "true", "false", "null" };
        const char *s = j->p;
        size_t n;

        while (j->p < j->end && (isalnum((unsigned char)*j->p) || *j->p == '-' || *j->p == '+' || *j->p == '.'))
                j->p++;
        n = (size_t)(j->p - s);
        if (n == 0)
                return -EINVAL;
        if (*s == '-' || isdigit((unsigned char)*s)) {
                for (size_t i = 0; i < n; i++)
                        if (!isdigit((unsigned char)s[i]) && !strchr("-+.eE", s[i]))
                                return -EINVAL;
        } else {
                size_t i;
                for (i = 0; i < GS_ARRAY_SIZE(lits); i++)
                        if (strlen(lits[i]) == n && memcmp(lits[i], s, n) == 0)
                                break;
                if (i == GS_ARRAY_SIZE(lits))
                        return -EINVAL;
        }
        if (w && n < w->cap) {
                memcpy(w->buf, s, n);
                w->buf[n] = '\0';
                w->found = true;
        }
        return 0;
}

static int j_value(struct jp *j, size_t plen, int depth, bool live)
{
        struct gs_json_want *w;
        bool trunc;
        int r;

        j->path[plen] = '\0';
        j_ws(j);
        if (j->p >= j->end)
                return -EINVAL;
        if (depth >= GS_JSON_MAX_DEPTH)
                return -EINVAL;
        switch (*j->p) {
        case '{': return j_object(j, plen, depth + 1, live);
        case '[': return j_array(j, plen, depth + 1);
        case '"':
                w = j_match(j, live);
                r = j_string(j, w ? w->buf : NULL, w ? w->cap : 0, &trunc);
                if (r == 0 && w) {
                        /* A value too long to hold is as good as absent. */
                        w->found = !trunc;
                        if (trunc)
                                w->buf[0] = '\0';
                }
                return r;
        default: return j_scalar(j, j_match(j, live));
        }
}

int gs_json_extract(const char *s, size_t len, struct gs_json_want *w, size_t nw)
{
        struct jp j = { .p = s, .end = s + len, .w = w, .nw = nw };
        int r;

        for (size_t i = 0; i < nw; i++) {
                w[i].found = false;
                w[i].buf[0] = '\0';
        }
        j_ws(&j);
        if (j.p >= j.end || *j.p != '{')
                return -EINVAL;
        r = j_value(&j, 0, 0, true);
        if (r < 0)
                return r;
        j_ws(&j);
        return j.p == j.end ? 0 : -EINVAL;
}

void gs_json_write_str(FILE *f, const char *s)
{
        fputc('"', f);
        for (; *s; s++) {
                unsigned char c = (unsigned char)*s;
                if (c == '"' || c == '\\')
                        fprintf(f, "\\%c", c);
                else if (c < 0x20)
                        fprintf(f, "\\u%04x", c);
                else
                        fputc(c, f);
        }
        fputc('"', f);
}
