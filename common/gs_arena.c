/* gs_arena.c — see gs_arena.h. */
#include "gs_arena.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void *gs_arena_alloc(struct gs_arena *a, size_t size)
{
        void *p;

        if (a->n == a->cap) {
                size_t cap = a->cap ? a->cap * 2 : 32;
                void **b = realloc(a->blocks, cap * sizeof(*b));
                if (!b)
                        return NULL;
                a->blocks = b;
                a->cap = cap;
        }
        p = calloc(1, size ? size : 1);
        if (p)
                a->blocks[a->n++] = p;
        return p;
}

char *gs_arena_printf(struct gs_arena *a, const char *fmt, ...)
{
        va_list ap;
        int len;
        char *s;

        va_start(ap, fmt);
        len = vsnprintf(NULL, 0, fmt, ap);
        va_end(ap);
        if (len < 0)
                return NULL;
        s = gs_arena_alloc(a, (size_t)len + 1);
        if (!s)
                return NULL;
        va_start(ap, fmt);
        vsnprintf(s, (size_t)len + 1, fmt, ap);
        va_end(ap);
        return s;
}

void gs_arena_free(struct gs_arena *a)
{
        for (size_t i = 0; i < a->n; i++)
                free(a->blocks[i]);
        free(a->blocks);
        a->blocks = NULL;
        a->n = a->cap = 0;
}
