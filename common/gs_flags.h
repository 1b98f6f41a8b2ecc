/* gs_flags.h — the command lines of gshare-agent, gshare-device-plugin and
 * gshare-dra-plugin, through the table of configuration keys
 * (gs_config_keys.h): a flag that sets a key of the YAML accepts what the
 * key accepts in the file, with the same problem in its error; a
 * program's own settings (not in the YAML) are keys of a table of its own,
 * with the same types and checks.  --config is read first (whatever its
 * place), the flags then override it in their order, and the values are
 * validated together last. */
#ifndef GS_FLAGS_H
#define GS_FLAGS_H

#include <stdbool.h>
#include <stddef.h>

#include "gs_config.h"
#include "gs_config_keys.h"

/* One flag: it sets key (a YAML key of gs_config_keys) in the
 * configuration, or own (a key of the program's own table) in base. */
struct gs_flag {
        const char *flag; /* "--kubelet-dir" */
        const char *key;  /* "kubeletDir", or NULL: own */
        const struct gs_config_key *own;
        void *base;
};

struct gs_flags_spec {
        const struct gs_flag *flags;
        size_t nflags;
        /* Also every key's flag of the table (gs_config_key.flag):
         * gshare-agent's. */
        bool key_flags;
        /* Read when no --config is given, if it exists (NULL: none). */
        const char *default_config;
};

/* At most this many flags (a program's and the keys'). */
#define GS_FLAGS_MAX 96

enum gs_flags_result {
        GS_FLAGS_OK = 0,
        GS_FLAGS_HELP,       /* -h or --help: print the usage, exit 0 */
        GS_FLAGS_BAD_FLAG,   /* an unknown flag (getopt said so), a stray argument or a bad value */
        GS_FLAGS_BAD_CONFIG, /* the file, or values that do not go together */
};

/* Fills cfg with the defaults, reads --config (or default_config), then
 * applies each flag of argv in order; -v / --verbose add to *ret_verbose.
 * On GS_FLAGS_BAD_FLAG and _BAD_CONFIG, err says what (empty when getopt
 * has printed it).  Resets getopt (optind) first: may be called again. */
enum gs_flags_result gs_flags_parse(const struct gs_flags_spec *spec, int argc, char **argv, struct gs_config *cfg,
                                    int *ret_verbose, char *err, size_t errlen);

#endif
