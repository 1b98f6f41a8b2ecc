/* gs_mkdir.c — see gs_mkdir.h. */
#include "gs_mkdir.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* One directory: 1 if made (then chmod'ed to mode: the umask may have
 * taken bits), 0 if a directory stood there, or a negative errno. */
static int mkdir_one(const char *p, mode_t mode, char *err, size_t errlen)
{
        struct stat st;
        int r;

        if (mkdir(p, mode) == 0) {
                if (chmod(p, mode) < 0) {
                        r = gs_neg_errno();
                        snprintf(err, errlen, "cannot chmod %.200s: %s", p, strerror(-r));
                        return r;
                }
                return 1;
        }
        if (errno != EEXIST) {
                r = gs_neg_errno();
                snprintf(err, errlen, "cannot create directory %.200s: %s", p, strerror(-r));
                return r;
        }
        if (stat(p, &st) < 0 || !S_ISDIR(st.st_mode)) {
                snprintf(err, errlen, "%.200s exists and is not a directory", p);
                return -ENOTDIR;
        }
        return 0;
}

/* path into p without trailing slashes ("/" stays "/"). */
static int copy_path(char p[PATH_MAX], const char *path, char *err, size_t errlen)
{
        size_t n = strlen(path);

        if (n >= PATH_MAX) {
                snprintf(err, errlen, "%.200s...: path too long", path);
                return -ENAMETOOLONG;
        }
        memcpy(p, path, n + 1);
        while (n > 1 && p[n - 1] == '/')
                p[--n] = '\0';
        return 0;
}

static int parents(char *p, mode_t mode, char *err, size_t errlen)
{
        int made = 0;

        /* "" has no parents (and p + 1 is past its end). */
        if (!p[0])
                return 0;
        for (char *q = p + 1; (q = strchr(q, '/')) != NULL; q++) {
                int r;

                if (q[-1] == '/')
                        continue; /* "a//b": one component */
                *q = '\0';
                r = mkdir_one(p, mode, err, errlen);
                *q = '/';
                if (r < 0)
                        return r;
                made += r;
        }
        return made;
}

int gs_mkdir_parents(const char *path, mode_t mode, char *err, size_t errlen)
{
        char p[PATH_MAX];
        int r = copy_path(p, path, err, errlen);

        return r < 0 ? r : parents(p, mode, err, errlen);
}

int gs_mkdir_p(const char *path, mode_t parent_mode, mode_t mode, char *err, size_t errlen)
{
        char p[PATH_MAX];
        int made, r;

        r = copy_path(p, path, err, errlen);
        if (r < 0)
                return r;
        made = parents(p, parent_mode, err, errlen);
        if (made < 0)
                return made;
        r = mkdir_one(p, mode, err, errlen);
        return r < 0 ? r : made + r;
}
