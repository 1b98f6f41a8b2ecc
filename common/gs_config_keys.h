/* gs_config_keys.h — the table of configuration keys: for each key of
 * gs_config.h, its YAML name, the agent's command-line flag that sets it,
 * its type (which gives its units: sizes in Ki/Mi/Gi/Ti, durations in
 * ms/s/m/h), the field of struct gs_config it fills, its bounds and any
 * rule of its own.  The YAML loader (gs_config.c) and the flags
 * (gs_config_set) both set a key through gs_config_key_set, so a key accepts
 * the same values and gives the same errors wherever it comes from. */
#ifndef GS_CONFIG_KEYS_H
#define GS_CONFIG_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "gs_config.h"

enum gs_config_type {
        GS_CT_STRING,   /* at most the field's size - 1 characters */
        GS_CT_PATH,     /* an absolute path */
        GS_CT_SOCKET,   /* an absolute path that fits sockaddr_un */
        GS_CT_SIZE,     /* uint64_t bytes: a byte count or Ki, Mi, Gi, Ti */
        GS_CT_DURATION, /* uint32_t ms: ms, s, m, h (at most 24h) */
        GS_CT_COUNT,    /* uint32_t, a whole number in [min, max] */
        GS_CT_BLOCKS,   /* uint64_t, decimal digits only, in [min, max] */
        GS_CT_BOOL,     /* int: true/yes/on or false/no/off */
        GS_CT_ENUM,     /* int: one of choices (or what parse accepts) */
        GS_CT_DEVICES,  /* "all", or a list of GPU UUIDs / indices */
};

/* opts */
#define GS_CK_EMPTY_OK 1u /* strings, paths: "" is allowed (paths: none) */
#define GS_CK_ZERO_OK 2u  /* sizes: 0 is allowed */
#define GS_CK_AUTO 4u     /* sizes: "auto" is allowed and stored as 0 */

struct gs_config_choice {
        const char *word;
        int value;
};

struct gs_config_key {
        const char *name; /* the YAML key */
        const char *flag; /* gshare-agent's flag ("--chunk-size"), or NULL (the
                             plugins name theirs in their own tables, gs_flags.h) */
        enum gs_config_type type;
        size_t offset, size; /* the field in struct gs_config (or a program's own) */
        unsigned opts;
        /* Sizes, durations: 0 or the highest accepted (sizes: bytes,
         * durations: ms).  Counts, blocks: the accepted range. */
        uint64_t min, max;
        /* Enums: the words (NULL-terminated) and "preload or env" for the
         * error; or parse, which returns the value or < 0. */
        const struct gs_config_choice *choices;
        int (*parse)(const char *s);
        const char *expected;
        /* A rule of the key's own, on the text (strings) or the parsed value
         * (sizes): 0, or < 0 with the problem in msg. */
        int (*check)(const char *s, uint64_t v, char *msg, size_t n);
};

extern const struct gs_config_key gs_config_keys[];
extern const size_t gs_config_nkeys;

/* The key named name (a YAML key) or flag (a flag, "--chunk-size"); NULL if
 * none. */
const struct gs_config_key *gs_config_key_find(const char *name);

/* Sets k in c from the text s.  0, or -EINVAL with the problem in msg (for
 * "<where>: <key>: <msg>"); c is then unchanged.  A devices key takes "all"
 * here; a list goes item by item through gs_config_device_add. */
int gs_config_key_set(const struct gs_config_key *k, struct gs_config *c, const char *s, char *msg, size_t n) GS_WUR;

/* As gs_config_key_set, for a key of a table of a program's own (its
 * command-line settings that are not in the YAML, common/gs_flags.h): k's
 * field is at base + k->offset.  Every type but GS_CT_DEVICES. */
int gs_config_key_set_in(const struct gs_config_key *k, void *base, const char *s, char *msg, size_t n) GS_WUR;

/* Appends one GPU (UUID or index) to c's devices: 0, or -EINVAL with the
 * problem in msg (not a GPU, listed twice, too many). */
int gs_config_device_add(struct gs_config *c, const char *s, char *msg, size_t n) GS_WUR;

/* "domain/name", as resourceName must be. */
int gs_config_valid_resource_name(const char *s);

#endif
