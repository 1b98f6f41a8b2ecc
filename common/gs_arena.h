/* gs_arena.h — a tiny arena for gRPC replies built of many small pieces:
 * every piece is zeroed, and all go at once. */
#ifndef GS_ARENA_H
#define GS_ARENA_H

#include <stddef.h>

#include "gs_util.h"

struct gs_arena {
        void **blocks;
        size_t n, cap;
};

/* size zeroed bytes (at least 1), or NULL. */
void *gs_arena_alloc(struct gs_arena *a, size_t size);
char *gs_arena_printf(struct gs_arena *a, const char *fmt, ...) GS_PRINTF(2, 3);
/* Frees every piece; a is empty and reusable after. */
void gs_arena_free(struct gs_arena *a);

#endif
