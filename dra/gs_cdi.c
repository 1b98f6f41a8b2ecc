/* gs_cdi.c — see gs_cdi.h. */
#include "gs_cdi.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gs_file.h"
#include "gs_json.h"

int gs_cdi_json(FILE *f, const char *kind, const char *name, const struct gs_ctrspec *s)
{
        fprintf(f, "{\"cdiVersion\":\"%s\",\"kind\":", GS_CDI_VERSION);
        gs_json_write_str(f, kind);
        fprintf(f, ",\"devices\":[{\"name\":");
        gs_json_write_str(f, name);
        fprintf(f, ",\"containerEdits\":{\"env\":[");
        for (size_t i = 0; i < s->nenv; i++) {
                char kv[sizeof(s->env[0].name) + sizeof(s->env[0].value) + 2];
                snprintf(kv, sizeof(kv), "%s=%s", s->env[i].name, s->env[i].value);
                if (i)
                        fputc(',', f);
                gs_json_write_str(f, kv);
        }
        fprintf(f, "],\"mounts\":[");
        for (size_t i = 0; i < s->nmounts; i++) {
                fprintf(f, "%s{\"hostPath\":", i ? "," : "");
                gs_json_write_str(f, s->mounts[i].host);
                fprintf(f, ",\"containerPath\":");
                gs_json_write_str(f, s->mounts[i].ctr);
                fprintf(f, ",\"options\":[%s\"bind\",\"nosuid\",\"nodev\"]}", s->mounts[i].ro ? "\"ro\"," : "");
        }
        fprintf(f, "]");
        if (s->ndevs) {
                fprintf(f, ",\"deviceNodes\":[");
                for (size_t i = 0; i < s->ndevs; i++) {
                        fprintf(f, "%s{\"path\":", i ? "," : "");
                        gs_json_write_str(f, s->devs[i]);
                        fprintf(f, "}");
                }
                fprintf(f, "]");
        }
        fprintf(f, "}}]}\n");
        return ferror(f) ? -EIO : 0;
}

/* <dir>/<vendor>-<class>_<name>.json, with prefix "." and suffix tmp for the temporary. */
static int spec_path(char *buf, size_t cap, const char *dir, const char *kind, const char *name, const char *tmp)
{
        char k[128];
        int n;

        snprintf(k, sizeof(k), "%s", kind);
        for (char *p = k; *p; p++)
                if (*p == '/')
                        *p = '-';
        n = snprintf(buf, cap, "%s/%s%s_%s.json%s", dir, tmp[0] ? "." : "", k, name, tmp);
        return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

struct cdi_fill {
        const char *kind, *name;
        const struct gs_ctrspec *spec;
};

static int cdi_fill(FILE *f, void *ctx)
{
        const struct cdi_fill *c = ctx;

        return gs_cdi_json(f, c->kind, c->name, c->spec);
}

int gs_cdi_write(const char *dir, const char *kind, const char *name, const struct gs_ctrspec *s, char *err,
                 size_t errlen)
{
        struct cdi_fill c = { kind, name, s };
        char path[PATH_MAX];
        int r;

        if (strchr(name, '/') || name[0] == '.' || !name[0]) {
                snprintf(err, errlen, "'%.64s' cannot name a CDI device", name);
                return -EINVAL;
        }
        if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
                r = gs_neg_errno();
                snprintf(err, errlen, "cannot create the CDI directory %.200s: %s", dir, strerror(-r));
                return r;
        }
        if (spec_path(path, sizeof(path), dir, kind, name, "") < 0) {
                snprintf(err, errlen, "CDI spec path under %.200s too long", dir);
                return -ENAMETOOLONG;
        }
        r = gs_file_replace(path, 0644, cdi_fill, &c);
        if (r < 0)
                snprintf(err, errlen, "cannot write the CDI spec %.200s: %s", path, strerror(-r));
        return r;
}

int gs_cdi_remove(const char *dir, const char *kind, const char *name)
{
        char path[PATH_MAX];

        if (strchr(name, '/') || name[0] == '.' || !name[0])
                return -EINVAL;
        if (spec_path(path, sizeof(path), dir, kind, name, "") < 0)
                return -ENAMETOOLONG;
        if (unlink(path) < 0 && errno != ENOENT)
                return gs_neg_errno();
        return 0;
}
