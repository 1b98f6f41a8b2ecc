/* gs_cdi.c — see gs_cdi.h. */
#include "gs_cdi.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void gs_json_str(FILE *f, const char *s)
{
        fputc('"', f);
        for (; *s; s++) {
                unsigned char c = (unsigned char)*s;
                if (c == '"' || c == '\\')
                        fprintf(f, "\\%c", c);
                else if (c < 0x20)
                        fprintf(f, "\\u%04x", c);
                else
                        fputc(c, f);
        }
        fputc('"', f);
}

int gs_cdi_json(FILE *f, const char *kind, const char *name, const struct gs_ctrspec *s)
{
        fprintf(f, "{\"cdiVersion\":\"%s\",\"kind\":", GS_CDI_VERSION);
        gs_json_str(f, kind);
        fprintf(f, ",\"devices\":[{\"name\":");
        gs_json_str(f, name);
        fprintf(f, ",\"containerEdits\":{\"env\":[");
        for (size_t i = 0; i < s->nenv; i++) {
                char kv[sizeof(s->env[0].name) + sizeof(s->env[0].value) + 2];
                snprintf(kv, sizeof(kv), "%s=%s", s->env[i].name, s->env[i].value);
                if (i)
                        fputc(',', f);
                gs_json_str(f, kv);
        }
        fprintf(f, "],\"mounts\":[");
        for (size_t i = 0; i < s->nmounts; i++) {
                fprintf(f, "%s{\"hostPath\":", i ? "," : "");
                gs_json_str(f, s->mounts[i].host);
                fprintf(f, ",\"containerPath\":");
                gs_json_str(f, s->mounts[i].ctr);
                fprintf(f, ",\"options\":[%s\"bind\",\"nosuid\",\"nodev\"]}", s->mounts[i].ro ? "\"ro\"," : "");
        }
        fprintf(f, "]}}]}\n");
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

int gs_cdi_write(const char *dir, const char *kind, const char *name, const struct gs_ctrspec *s,
                 char *err, size_t errlen)
{
        static atomic_uint seq;
        char path[PATH_MAX], tmp[PATH_MAX], sfx[48];
        FILE *f;
        int fd, r;

        if (strchr(name, '/') || name[0] == '.' || !name[0]) {
                snprintf(err, errlen, "'%.64s' cannot name a CDI device", name);
                return -EINVAL;
        }
        if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
                r = gs_neg_errno();
                snprintf(err, errlen, "cannot create the CDI directory %.200s: %s", dir, strerror(-r));
                return r;
        }
        snprintf(sfx, sizeof(sfx), ".tmp.%d.%u", (int)getpid(), atomic_fetch_add(&seq, 1));
        if (spec_path(path, sizeof(path), dir, kind, name, "") < 0 ||
            spec_path(tmp, sizeof(tmp), dir, kind, name, sfx) < 0) {
                snprintf(err, errlen, "CDI spec path under %.200s too long", dir);
                return -ENAMETOOLONG;
        }
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) {
                r = gs_neg_errno();
                snprintf(err, errlen, "cannot create %.200s: %s", tmp, strerror(-r));
                return r;
        }
        f = fdopen(fd, "w");
        if (!f) {
                r = gs_neg_errno();
                close(fd);
                goto fail;
        }
        r = gs_cdi_json(f, kind, name, s);
        if (fflush(f) != 0 || fsync(fileno(f)) < 0)
                r = gs_neg_errno();
        if (fclose(f) != 0 && r == 0)
                r = gs_neg_errno();
        if (r == 0 && rename(tmp, path) < 0)
                r = gs_neg_errno();
        if (r == 0)
                return 0;
fail:
        (void)unlink(tmp);
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
