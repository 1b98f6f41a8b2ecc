/* gs_arena.h — a tiny arena for replies built of many small pieces (the
 * plugin's gRPC replies, the agent's control replies): every piece is
 * zeroed, and all go at once.  A failed allocation marks the arena
 * (failed), so a builder may go on and check once at the end. */
#ifndef GS_ARENA_H
#define GS_ARENA_H

#include <stdbool.h>
#include <stddef.h>

#include "gs_util.h"

struct gs_arena {
        void **blocks;
        size_t n, cap;
        bool failed; /* an allocation failed since the arena was empty */
};

/* size zeroed bytes (at least 1), or NULL (failed set). */
void *gs_arena_alloc(struct gs_arena *a, size_t size);
/* n zeroed elements of size bytes, or NULL (failed set), also when
 * n * size overflows. */
void *gs_arena_array(struct gs_arena *a, size_t n, size_t size);
char *gs_arena_printf(struct gs_arena *a, const char *fmt, ...) GS_PRINTF(2, 3);
/* A copy of s; never NULL: "" when out of memory (failed set), for the
 * fields of a message that must hold a string. */
char *gs_arena_str(struct gs_arena *a, const char *s);
/* Frees every piece; a is empty (and not failed) and reusable after. */
void gs_arena_free(struct gs_arena *a);

#endif
