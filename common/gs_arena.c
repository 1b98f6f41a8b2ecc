/* gs_arena.c — see gs_arena.h. */
#include "gs_arena.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *gs_arena_alloc(struct gs_arena *a, size_t size)
{
        void *p;

        if (a->n == a->cap) {
                size_t cap = a->cap ? a->cap * 2 : 32;
                void **b = cap > SIZE_MAX / sizeof(*b) ? NULL : realloc(a->blocks, cap * sizeof(*b));
                if (!b) {
                        a->failed = true;
                        return NULL;
                }
                a->blocks = b;
                a->cap = cap;
        }
        p = calloc(1, size ? size : 1);
        if (!p) {
                a->failed = true;
                return NULL;
        }
        a->blocks[a->n++] = p;
        return p;
}

void *gs_arena_array(struct gs_arena *a, size_t n, size_t size)
{
        if (size && n > SIZE_MAX / size) {
                a->failed = true;
                return NULL;
        }
        return gs_arena_alloc(a, n * size);
}

char *gs_arena_printf(struct gs_arena *a, const char *fmt, ...)
{
        va_list ap;
        int len;
        char *s;

        va_start(ap, fmt);
        len = vsnprintf(NULL, 0, fmt, ap);
        va_end(ap);
        if (len < 0) {
                a->failed = true;
                return NULL;
        }
        s = gs_arena_alloc(a, (size_t)len + 1);
        if (!s)
                return NULL;
        va_start(ap, fmt);
        vsnprintf(s, (size_t)len + 1, fmt, ap);
        va_end(ap);
        return s;
}

char *gs_arena_str(struct gs_arena *a, const char *s)
{
        size_t l = strlen(s) + 1;
        char *d = gs_arena_alloc(a, l);

        if (!d)
                return (char *)"";
        memcpy(d, s, l);
        return d;
}

void gs_arena_free(struct gs_arena *a)
{
        for (size_t i = 0; i < a->n; i++)
                free(a->blocks[i]);
        free(a->blocks);
        a->blocks = NULL;
        a->n = a->cap = 0;
        a->failed = false;
}
