/* gs_flags.c — see gs_flags.h. */
#include "gs_flags.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

enum { O_CONFIG = 256, O_VERBOSE, O_FLAG0 };

/* What getopt value i (>= O_FLAG0) sets: the spec's flag i, or past them a
 * key of the table. */
struct table {
        struct option opts[GS_FLAGS_MAX + 4];
        struct gs_flag flags[GS_FLAGS_MAX];
        size_t n;
};

static int build(const struct gs_flags_spec *spec, struct table *t, char *err, size_t errlen)
{
        size_t no = 0;

        t->n = 0;
        t->opts[no++] = (struct option){ "config", required_argument, NULL, O_CONFIG };
        t->opts[no++] = (struct option){ "verbose", no_argument, NULL, O_VERBOSE };
        t->opts[no++] = (struct option){ "help", no_argument, NULL, 'h' };
        for (size_t i = 0; i < spec->nflags + (spec->key_flags ? gs_config_nkeys : 0); i++) {
                struct gs_flag f;

                if (i < spec->nflags) {
                        f = spec->flags[i];
                } else {
                        const struct gs_config_key *k = &gs_config_keys[i - spec->nflags];
                        if (!k->flag)
                                continue;
                        f = (struct gs_flag){ .flag = k->flag, .key = k->name };
                }
                if (strncmp(f.flag, "--", 2) != 0 || !f.flag[2] || (!f.key == !f.own) ||
                    (f.key && !gs_config_key_find(f.key)) || (f.own && (!f.base || f.own->type == GS_CT_DEVICES))) {
                        snprintf(err, errlen, "%s: not a flag the table can set", f.flag);
                        return -EINVAL;
                }
                if (t->n == GS_FLAGS_MAX) {
                        snprintf(err, errlen, "more than %d flags", GS_FLAGS_MAX);
                        return -E2BIG;
                }
                t->flags[t->n] = f;
                t->opts[no++] = (struct option){ f.flag + 2, required_argument, NULL, O_FLAG0 + (int)t->n };
                t->n++;
        }
        t->opts[no] = (struct option){ 0 };
        return 0;
}

static int set_flag(const struct gs_flag *f, struct gs_config *cfg, const char *v, char *err, size_t errlen)
{
        char msg[512];

        if (f->key)
                return gs_config_set_key(cfg, gs_config_key_find(f->key), f->flag, v, err, errlen);
        if (gs_config_key_set_in(f->own, f->base, v, msg, sizeof(msg)) < 0) {
                snprintf(err, errlen, "%s: %s", f->flag, msg);
                return -EINVAL;
        }
        return 0;
}

enum gs_flags_result gs_flags_parse(const struct gs_flags_spec *spec, int argc, char **argv, struct gs_config *cfg,
                                    int *ret_verbose, char *err, size_t errlen)
{
        static struct table t; /* large; the programs parse once, on the main thread */
        const char *config = NULL;
        struct stat st;
        int o;

        err[0] = '\0';
        gs_config_defaults(cfg);
        if (build(spec, &t, err, errlen) < 0)
                return GS_FLAGS_BAD_FLAG;
        /* First pass: the flags are known, --config and -h found. */
        optind = 0;
        while ((o = getopt_long(argc, argv, "vh", t.opts, NULL)) != -1) {
                if (o == O_CONFIG)
                        config = optarg;
                else if (o == 'h')
                        return GS_FLAGS_HELP;
                else if (o == '?' || o == ':')
                        return GS_FLAGS_BAD_FLAG; /* getopt has said which */
        }
        if (optind < argc) {
                snprintf(err, errlen, "unexpected argument '%s'", argv[optind]);
                return GS_FLAGS_BAD_FLAG;
        }
        if (!config && spec->default_config && stat(spec->default_config, &st) == 0)
                config = spec->default_config;
        if (config && gs_config_load(cfg, config, err, errlen) < 0)
                return GS_FLAGS_BAD_CONFIG;
        /* Second pass: the flags over the file, in their order. */
        optind = 0;
        while ((o = getopt_long(argc, argv, "vh", t.opts, NULL)) != -1) {
                if (o == 'v' || o == O_VERBOSE)
                        ++*ret_verbose;
                else if (o >= O_FLAG0 && set_flag(&t.flags[o - O_FLAG0], cfg, optarg, err, errlen) < 0)
                        return GS_FLAGS_BAD_FLAG;
        }
        if (gs_config_validate(cfg, err, errlen) < 0)
                return GS_FLAGS_BAD_CONFIG;
        return GS_FLAGS_OK;
}
