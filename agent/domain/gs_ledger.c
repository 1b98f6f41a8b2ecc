/* gs_ledger.c — see gs_ledger.h. */
#include "gs_ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int gs_ledger_path(char *buf, size_t len, const char *dir, const char *uuid)
{
        int n = snprintf(buf, len, "%s/held-%s", dir, uuid);

        return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int gs_ledger_read(const char *path, const uint8_t uuid[16], struct gs_ledger_ent **ret, uint32_t *ret_n,
                   uint64_t *ret_chunk_bytes, char *why, size_t whylen)
{
        struct gs_ledger_hdr h;
        struct stat st;
        struct gs_ledger_ent *e = NULL;
        int fd, r;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return gs_neg_errno();
        r = -EINVAL;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
                snprintf(why, whylen, "not a regular file with a header");
                goto out;
        }
        if (h.magic != GS_LEDGER_MAGIC || h.version != GS_LEDGER_VERSION) {
                snprintf(why, whylen, "bad magic or version %u", h.version);
                goto out;
        }
        if (memcmp(h.uuid, uuid, 16) != 0) {
                snprintf(why, whylen, "it is another GPU's");
                goto out;
        }
        if (h.nchunks == 0 || h.nchunks > GS_LEDGER_MAX_CHUNKS || !gs_is_pow2(h.chunk_bytes) ||
            (uint64_t)st.st_size != sizeof(h) + (uint64_t)h.nchunks * sizeof(*e)) {
                snprintf(why, whylen, "%u chunks of %llu bytes in a file of %lld bytes", h.nchunks,
                         (unsigned long long)h.chunk_bytes, (long long)st.st_size);
                goto out;
        }
        e = malloc((size_t)h.nchunks * sizeof(*e));
        if (!e) {
                r = -ENOMEM;
                goto out;
        }
        if (pread(fd, e, (size_t)h.nchunks * sizeof(*e), sizeof(h)) != (ssize_t)((size_t)h.nchunks * sizeof(*e))) {
                snprintf(why, whylen, "short read");
                free(e);
                goto out;
        }
        *ret = e;
        *ret_n = h.nchunks;
        *ret_chunk_bytes = h.chunk_bytes;
        r = 0;
out:
        close(fd);
        return r;
}

int gs_ledger_open(struct gs_ledger *l, const char *path, const uint8_t uuid[16], uint64_t chunk_bytes,
                   uint32_t nchunks)
{
        struct gs_ledger_hdr *h;
        int r;

        memset(l, 0, sizeof(*l));
        l->fd = -1;
        if (nchunks == 0 || nchunks > GS_LEDGER_MAX_CHUNKS)
                return -EINVAL;
        if (snprintf(l->path, sizeof(l->path), "%s", path) >= (int)sizeof(l->path) ||
            snprintf(l->tmp, sizeof(l->tmp), "%s.new", path) >= (int)sizeof(l->tmp))
                return -ENAMETOOLONG;
        (void)unlink(l->tmp); /* a previous agent's, killed before its commit */
        l->fd = open(l->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (l->fd < 0)
                return gs_neg_errno();
        l->len = sizeof(*h) + (size_t)nchunks * sizeof(struct gs_ledger_ent);
        if (ftruncate(l->fd, (off_t)l->len) < 0) {
                r = gs_neg_errno();
                goto fail;
        }
        l->map = mmap(NULL, l->len, PROT_READ | PROT_WRITE, MAP_SHARED, l->fd, 0);
        if (l->map == MAP_FAILED) {
                l->map = NULL;
                r = gs_neg_errno();
                goto fail;
        }
        h = l->map;
        h->magic = GS_LEDGER_MAGIC;
        h->version = GS_LEDGER_VERSION;
        h->chunk_bytes = chunk_bytes;
        h->nchunks = nchunks;
        memcpy(h->uuid, uuid, 16);
        l->ent = (struct gs_ledger_ent *)(h + 1);
        l->nchunks = nchunks;
        return 0;
fail:
        (void)unlink(l->tmp);
        gs_closep(&l->fd);
        return r;
}

int gs_ledger_commit(struct gs_ledger *l)
{
        if (l->fd < 0 || !l->tmp[0])
                return -EBADF;
        if (rename(l->tmp, l->path) < 0)
                return gs_neg_errno();
        l->tmp[0] = '\0';
        return 0;
}

void gs_ledger_set(struct gs_ledger *l, uint32_t chunk, const struct gs_ledger_tag *t, uint32_t slot, bool held)
{
        struct gs_ledger_ent *e;

        if (!l->ent || chunk >= l->nchunks)
                return;
        e = &l->ent[chunk];
        if (!held) {
                __atomic_store_n(&e->kind, GS_LEDGER_FREE, __ATOMIC_RELEASE);
                return;
        }
        __atomic_store_n(&e->kind, GS_LEDGER_FREE, __ATOMIC_RELEASE);
        e->pid = t->pid;
        e->slot = slot;
        e->start = t->start;
        e->alloc = t->alloc;
        __atomic_store_n(&e->kind, t->kind, __ATOMIC_RELEASE);
}

void gs_ledger_set_kind(struct gs_ledger *l, uint32_t i, uint32_t kind)
{
        if (l->ent && i < l->nchunks)
                __atomic_store_n(&l->ent[i].kind, kind, __ATOMIC_RELEASE);
}

int gs_ledger_relink(struct gs_ledger *l)
{
        char tmp[PATH_MAX + 8];
        struct stat a, b;
        void *map;
        int fd, r;

        if (l->fd < 0 || l->tmp[0])
                return l->fd < 0 ? -EBADF : 0; /* not committed: the path was never ours */
        if (stat(l->path, &a) == 0 && fstat(l->fd, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
                return 0;
        if (snprintf(tmp, sizeof(tmp), "%s.old", l->path) >= (int)sizeof(tmp))
                return -ENAMETOOLONG;
        (void)unlink(tmp);
        fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return gs_neg_errno();
        if (ftruncate(fd, (off_t)l->len) < 0) {
                r = gs_neg_errno();
                goto fail;
        }
        map = mmap(NULL, l->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
                r = gs_neg_errno();
                goto fail;
        }
        memcpy(map, l->map, l->len);
        if (rename(tmp, l->path) < 0) {
                r = gs_neg_errno();
                munmap(map, l->len);
                goto fail;
        }
        munmap(l->map, l->len);
        close(l->fd);
        l->fd = fd;
        l->map = map;
        l->ent = (struct gs_ledger_ent *)((struct gs_ledger_hdr *)map + 1);
        return 0;
fail:
        (void)unlink(tmp);
        close(fd);
        return r;
}

void gs_ledger_close(struct gs_ledger *l)
{
        if (l->map)
                munmap(l->map, l->len);
        l->map = NULL;
        l->ent = NULL;
        if (l->fd >= 0 && l->tmp[0])
                (void)unlink(l->tmp); /* never committed */
        gs_closep(&l->fd);
}

uint64_t gs_ledger_pid_start(pid_t pid)
{
        char path[64], buf[1024];
        unsigned long long start = 0;
        ssize_t n;
        int fd;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return 0;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return 0;
        buf[n] = '\0';
        /* comm may hold spaces and parentheses: fields restart after the
         * last ')'.  starttime is field 22, the 20th after it. */
        char *p = strrchr(buf, ')');
        if (!p)
                return 0;
        p++;
        for (int f = 0; f < 19 && p; f++)
                p = strchr(p + 1, ' ');
        if (!p || sscanf(p, " %llu", &start) != 1)
                return 0;
        return start;
}
