/* gs_metrics_text.c — the exposition text (see gs_metrics_int.h). */
#include "gs_metrics_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void gs_mx_put(struct gs_mx_buf *b, const char *fmt, ...)
{
        va_list ap;
        int n;

        if (b->failed)
                return;
        for (;;) {
                va_start(ap, fmt);
                n = vsnprintf(b->p ? b->p + b->len : NULL, b->cap - b->len, fmt, ap);
                va_end(ap);
                if (n < 0) {
                        b->failed = true;
                        return;
                }
                if ((size_t)n < b->cap - b->len) {
                        b->len += (size_t)n;
                        return;
                }
                size_t cap = (b->cap ? b->cap : 4096) * 2;
                while (cap < b->len + (size_t)n + 1)
                        cap *= 2;
                char *p = realloc(b->p, cap);
                if (!p) {
                        b->failed = true;
                        return;
                }
                b->p = p;
                b->cap = cap;
        }
}

/* A label value, escaped as the format wants: \ " and newline. */
void gs_mx_label(struct gs_mx_buf *b, const char *name, const char *value, bool first)
{
        gs_mx_put(b, "%s%s=\"", first ? "" : ",", name);
        for (const char *s = value; *s; s++) {
                if (*s == '\\')
                        gs_mx_put(b, "\\\\");
                else if (*s == '"')
                        gs_mx_put(b, "\\\"");
                else if (*s == '\n')
                        gs_mx_put(b, "\\n");
                else
                        gs_mx_put(b, "%c", *s);
        }
        gs_mx_put(b, "\"");
}

void gs_mx_family(struct gs_mx_buf *b, const char *name, const char *type, const char *help)
{
        gs_mx_put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void gs_mx_alloc_labels(struct gs_mx_buf *b, const struct gs_allocation *a, const struct gs_claim *c,
                        const struct gs_gpu *g)
{
        gs_mx_put(b, "{");
        gs_mx_label(b, "allocation", a->id, true);
        if (g)
                gs_mx_label(b, "gpu", g->uuid, false);
        if (a->pod_name[0] || c)
                gs_mx_label(b, "namespace", a->pod_name[0] ? a->pod_namespace : c->ns, false);
        if (a->pod_name[0]) {
                gs_mx_label(b, "pod", a->pod_name, false);
                gs_mx_label(b, "container", a->container_name, false);
        }
        if (c)
                gs_mx_label(b, "claim", c->name, false);
        gs_mx_put(b, "}");
}
