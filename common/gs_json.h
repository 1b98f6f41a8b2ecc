/* gs_json.h — JSON as gshare speaks it to the API server and in CDI specs:
 * a string writer, and a bounded reader for what the API server sends,
 * which checks one JSON object whole and copies out only the string,
 * number or literal values found at a few dotted paths
 * ("object.metadata.name").
 * Nothing is allocated; nesting deeper than GS_JSON_MAX_DEPTH, a key longer
 * than 63 bytes on a wanted path, or a path longer than 127 bytes is never
 * matched (deep nesting is an error).  Values inside arrays are never
 * matched.  \u escapes are read as '?': no value we read needs them. */
#ifndef GS_JSON_H
#define GS_JSON_H

#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>

#include "gs_util.h"

#define GS_JSON_MAX_DEPTH 64

struct gs_json_want {
        const char *path; /* dotted path of object keys */
        char *buf;        /* the value, NUL-terminated ("" if not found) */
        size_t cap;       /* > 0 */
        bool found;       /* false also for a value longer than cap - 1 */
};

/* Parses s[0, len) (no NUL needed): one JSON object, nothing but
 * whitespace around it, filling w[0, nw).  Returns 0, or -EINVAL (not one
 * valid JSON object, or nested too deep). */
int gs_json_extract(const char *s, size_t len, struct gs_json_want *w, size_t nw) GS_WUR;

/* Writes s to f as a JSON string: quoted, with '"', '\\' and control
 * characters escaped. */
void gs_json_write_str(FILE *f, const char *s);

#endif
