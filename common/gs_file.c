/* gs_file.c — see gs_file.h. */
#include "gs_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

int gs_file_replace(const char *path, mode_t mode, gs_file_fill_fn fill, void *ctx)
{
        static unsigned seq;
        char tmp[PATH_MAX], dir[PATH_MAX];
        FILE *f;
        int fd, dfd, r;

        if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d.%u", path, (int)getpid(),
                     __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED)) >= (int)sizeof(tmp) ||
            snprintf(dir, sizeof(dir), "%s", path) >= (int)sizeof(dir))
                return -ENAMETOOLONG;
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
        if (fd < 0)
                return gs_neg_errno();
        f = fdopen(fd, "w");
        if (!f) {
                r = gs_neg_errno();
                close(fd);
                goto fail;
        }
        r = fill(f, ctx);
        if (fflush(f) != 0 || fsync(fileno(f)) < 0)
                r = r < 0 ? r : gs_neg_errno();
        if (fclose(f) != 0 && r == 0)
                r = gs_neg_errno();
        if (r < 0)
                goto fail;
        if (rename(tmp, path) < 0) {
                r = gs_neg_errno();
                goto fail;
        }
        /* The rename itself must reach the disk. */
        dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
                (void)fsync(dfd);
                close(dfd);
        }
        return 0;
fail:
        (void)unlink(tmp);
        return r;
}
