/* gs_allocs.c — see gs_allocs.h. */
#include "gs_allocs.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "gs_file.h"
#include "gs_gpu.h"
#include "gs_log.h"

void gs_allocs_id(const char *const *sorted_ids, size_t n, char out[17])
{
        uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */

        for (size_t i = 0; i < n; i++) {
                for (const char *p = sorted_ids[i]; *p; p++) {
                        h ^= (uint8_t)*p;
                        h *= 0x100000001b3ull;
                }
                h ^= '\n'; /* separator: {"ab","c"} != {"a","bc"} */
                h *= 0x100000001b3ull;
        }
        snprintf(out, 17, "%016" PRIx64, h);
}

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A sorted malloc'ed copy of ids[0..n) in one block (pointers then strings). */
static char **sorted_copy(const char *const *ids, size_t n)
{
        size_t bytes = n * sizeof(char *);
        char **v, *p;

        for (size_t i = 0; i < n; i++)
                bytes += strlen(ids[i]) + 1;
        v = malloc(bytes ? bytes : 1);
        if (!v)
                return NULL;
        p = (char *)(v + n);
        for (size_t i = 0; i < n; i++) {
                size_t l = strlen(ids[i]) + 1;
                memcpy(p, ids[i], l);
                v[i] = p;
                p += l;
        }
        qsort(v, n, sizeof(*v), cmp_str);
        return v;
}

static bool same_ids(const struct gs_allocation *a, char *const *sorted, size_t n)
{
        if (a->ndevice_ids != n)
                return false;
        for (size_t i = 0; i < n; i++)
                if (strcmp(a->device_ids[i], sorted[i]) != 0)
                        return false;
        return true;
}

struct gs_allocation *gs_allocs_find(struct gs_agent *ag, const char *id)
{
        for (struct gs_allocation *a = ag->allocs; a; a = a->next)
                if (strcmp(a->id, id) == 0)
                        return a;
        return NULL;
}

struct gs_allocation *gs_allocs_find_ids(struct gs_agent *ag, const char *const *ids, size_t n)
{
        struct gs_allocation *a = NULL;
        char **v;
        char id[17];

        if (n == 0 || n > GS_ALLOCS_MAX_IDS)
                return NULL;
        v = sorted_copy(ids, n);
        if (!v)
                return NULL;
        gs_allocs_id((const char *const *)v, n, id);
        a = gs_allocs_find(ag, id);
        if (a && !same_ids(a, v, n))
                a = NULL;
        free(v);
        return a;
}

static struct gs_gpu *gpu_by_uuid(struct gs_agent *ag, const char *uuid)
{
        for (uint32_t i = 0; i < ag->ngpus; i++)
                if (strcasecmp(ag->gpus[i].uuid, uuid) == 0)
                        return &ag->gpus[i];
        return NULL;
}

/* A checkpoint line that could not be restored at start (a GPU missing or
 * unhealthy, too few free chunks, its socket path blocked).  It stays in
 * the checkpoint until it is restored or released, keeps its device IDs
 * from other allocations, and is retried every GS_ALLOCS_RETRY_MS.  A line
 * that does not even parse is kept verbatim (ids NULL) and never retried. */
struct gs_allocs_pending {
        struct gs_allocs_pending *next;
        char id[17];
        uint64_t created_unix;
        char dir[GS_ALLOCS_DIR_MAX]; /* its socket directory's name */
        char **ids;              /* sorted_copy() block; NULL: unparsable */
        size_t nids;
        char *line;              /* the line as read, without its newline */
        char why[256];           /* the last reason it could not be restored */
};

static void pending_free(struct gs_allocs_pending *q)
{
        if (!q)
                return;
        free(q->ids);
        free(q->line);
        free(q);
}

/* The pending line holding device ID id (sorted set), or NULL. */
static struct gs_allocs_pending *pending_holding(struct gs_agent *ag, const char *id)
{
        for (struct gs_allocs_pending *q = ag->pending; q; q = q->next)
                for (size_t i = 0; i < q->nids; i++)
                        if (strcmp(q->ids[i], id) == 0)
                                return q;
        return NULL;
}

static void pending_unlink(struct gs_agent *ag, struct gs_allocs_pending *q)
{
        for (struct gs_allocs_pending **pp = &ag->pending; *pp; pp = &(*pp)->next)
                if (*pp == q) {
                        *pp = q->next;
                        return;
                }
}

static bool pending_same(const struct gs_allocs_pending *q, char *const *sorted, size_t n)
{
        if (!q->ids || q->nids != n)
                return false;
        for (size_t i = 0; i < n; i++)
                if (strcmp(q->ids[i], sorted[i]) != 0)
                        return false;
        return true;
}

/* Makes directory path (mode, owned by us) or, if exclusive is false,
 * accepts an existing one that is a real directory owned by us; its mode is
 * then set to mode.  Through an O_NOFOLLOW fd: a symlink planted in our
 * place is refused, never followed. */
static int mkdir_owned(const char *path, mode_t mode, bool exclusive, char *err, size_t errlen)
{
        struct stat st;
        int fd, r = 0;

        if (mkdir(path, mode) < 0 && (errno != EEXIST || exclusive)) {
                r = gs_neg_errno();
                snprintf(err, errlen, "cannot create directory %s: %s", path, strerror(-r));
                return r;
        }
        fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode)) {
                snprintf(err, errlen, "%s exists and is not a directory", path);
                r = -ENOTDIR;
        } else if (st.st_uid != geteuid()) {
                snprintf(err, errlen, "%s is owned by uid %u, not by the agent", path,
                         (unsigned)st.st_uid);
                r = -EPERM;
        } else if ((st.st_mode & 07777) != mode && fchmod(fd, mode) < 0) {
                r = gs_neg_errno();
                snprintf(err, errlen, "cannot chmod %s: %s", path, strerror(-r));
        }
        gs_closep(&fd);
        return r;
}

/* A directory name no allocation has had: "<id>-<8 random hex digits>". */
static int fresh_dir_name(const char *id, char out[GS_ALLOCS_DIR_MAX])
{
        uint32_t x;

        if (getrandom(&x, sizeof(x), 0) != (ssize_t)sizeof(x))
                return gs_neg_errno();
        snprintf(out, GS_ALLOCS_DIR_MAX, "%s-%08x", id, x);
        return 0;
}

/* Creates <socketRoot>/<dir>/agent.sock, listening, watched by the main
 * loop.  socketRoot is 0700: no host user but root reaches anything under
 * it; a container reaches its own directory (0755) through the mount.
 * dir: the directory of a restored allocation (it may exist: it is
 * mounted into containers), or NULL for a fresh one, created here, that no
 * allocation ever had. */
static int open_socket(struct gs_agent *ag, struct gs_allocation *a, const char *dir, char *err,
                       size_t errlen)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        bool bound = false;
        mode_t old;
        int fd = -1, r;

        r = mkdir_owned(ag->cfg.socket_root, 0700, false, err, errlen);
        if (r < 0)
                return r;
        for (int tries = 0;; tries++) {
                if (dir)
                        snprintf(a->dir_name, sizeof(a->dir_name), "%s", dir);
                else if ((r = fresh_dir_name(a->id, a->dir_name)) < 0) {
                        snprintf(err, errlen, "getrandom: %s", strerror(-r));
                        return r;
                }
                if (snprintf(a->socket_dir, sizeof(a->socket_dir), "%s/%s", ag->cfg.socket_root,
                             a->dir_name) >= (int)sizeof(a->socket_dir) ||
                    snprintf(a->socket_path, sizeof(a->socket_path), "%s/%s", a->socket_dir,
                             GS_SOCKET_NAME) >= (int)sizeof(sa.sun_path)) {
                        snprintf(err, errlen, "socket path under %s is too long", ag->cfg.socket_root);
                        return -ENAMETOOLONG;
                }
                r = mkdir_owned(a->socket_dir, 0755, dir == NULL, err, errlen);
                if (r != -EEXIST || dir || tries == 8)
                        break;
        }
        if (r < 0)
                return r;
        strcpy(sa.sun_path, a->socket_path);
        if (dir)
                (void)unlink(a->socket_path); /* a stale one from a previous agent */
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                r = gs_neg_errno();
                snprintf(err, errlen, "socket: %s", strerror(-r));
                goto fail;
        }
        /* The socket is made 0666 by bind itself (0777 & ~umask): a chmod
         * by path afterwards would follow a symlink swapped in meanwhile.
         * Only the main thread creates files, so the umask is ours. */
        old = umask(0111);
        r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
        umask(old);
        bound = r == 0;
        if (r < 0 || listen(fd, 128) < 0) {
                r = gs_neg_errno();
                snprintf(err, errlen, "cannot listen on %s: %s", a->socket_path, strerror(-r));
                goto fail;
        }
        r = gs_loop_io_add(ag->loop, &a->listen_io, fd, EPOLLIN, ag->on_alloc_conn, a);
        if (r < 0) {
                snprintf(err, errlen, "epoll: %s", strerror(-r));
                goto fail;
        }
        a->listen_fd = fd;
        return 0;
fail:
        if (bound)
                (void)unlink(a->socket_path);
        if (!dir)
                (void)rmdir(a->socket_dir);
        gs_closep(&fd);
        return r;
}

static void close_socket(struct gs_agent *ag, struct gs_allocation *a)
{
        if (a->listen_fd < 0)
                return;
        gs_loop_io_del(ag->loop, &a->listen_io);
        gs_closep(&a->listen_fd);
        /* Another agent's path (gs_agent.h, paths_theirs). */
        if (!ag->paths_theirs)
                (void)unlink(a->socket_path);
}

void gs_allocs_rebind(struct gs_agent *ag)
{
        char err[256];

        for (struct gs_allocation *a = ag->allocs; a; a = a->next) {
                if (a->listen_fd < 0)
                        continue;
                gs_loop_io_del(ag->loop, &a->listen_io);
                gs_closep(&a->listen_fd);
                char dir[GS_ALLOCS_DIR_MAX];
                snprintf(dir, sizeof(dir), "%s", a->dir_name);
                if (open_socket(ag, a, dir, err, sizeof(err)) < 0)
                        log_error("allocation %s: cannot listen again: %s", a->id, err);
        }
}

void gs_allocs_listen(struct gs_agent *ag, bool on)
{
        for (struct gs_allocation *a = ag->allocs; a; a = a->next) {
                if (a->listen_fd < 0)
                        continue;
                if (!on)
                        gs_loop_io_del(ag->loop, &a->listen_io);
                else if (a->listen_io.dead &&
                         gs_loop_io_add(ag->loop, &a->listen_io, a->listen_fd, EPOLLIN, ag->on_alloc_conn, a) < 0)
                        log_error("allocation %s: cannot accept on its socket again", a->id);
        }
}

/* Frees the parts and the memory of a; a has no process.  Leaves the list. */
static void destroy(struct gs_agent *ag, struct gs_allocation *a)
{
        for (uint32_t i = 0; i < a->nparts; i++) {
                struct gs_gpu *g = &ag->gpus[a->parts[i].gpu];
                pthread_mutex_lock(&g->lock);
                g->outside_measured -= a->parts[i].bypass_charge;
                a->parts[i].out.charged -= a->parts[i].bypass_charge;
                a->parts[i].bypass_charge = 0;
                gs_outside_clear(g, &a->parts[i].out);
                /* Its processes are gone: what they were sent is free to be
                 * re-created, and nothing is owed any more. */
                a->parts[i].gone = true;
                gs_gpu_forget_owner(g, a);
                if (gs_palloc_del(a->parts[i].pa) < 0)
                        log_error("allocation %s: part on GPU %u still busy", a->id, g->index);
                pthread_mutex_unlock(&g->lock);
        }
        for (size_t i = 0; i < a->ndevice_ids; i++) {
                char uuid[GS_UUID_STR_LEN + 1];
                uint32_t unit;
                struct gs_gpu *g;
                if (gs_devid_parse(a->device_ids[i], uuid, &unit) == 0 &&
                    (g = gpu_by_uuid(ag, uuid)) && unit < g->units_total &&
                    g->unit_owner[unit] == a)
                        g->unit_owner[unit] = NULL;
        }
        free(a->device_ids);
        gs_ipc_table_fini(&a->ipc);
        gs_loop_defer_free(ag->loop, a);
}

static void unlink_alloc(struct gs_agent *ag, struct gs_allocation *a)
{
        for (struct gs_allocation **pp = &ag->allocs; *pp; pp = &(*pp)->next)
                if (*pp == a) {
                        *pp = a->next;
                        ag->nallocs--;
                        return;
                }
}

static int restore_pending(struct gs_agent *ag, struct gs_allocs_pending *q,
                           struct gs_allocation **ret, bool *ret_created, char *err, size_t errlen);

int gs_allocs_create(struct gs_agent *ag, const char *const *ids, size_t n, uint64_t created_unix,
                     const char *dir, bool checkpoint, struct gs_allocation **ret, bool *ret_created, char *err,
                     size_t errlen)
{
        struct gs_allocation *a = NULL, *old;
        uint32_t units[GS_MAX_GPUS_PER_ALLOC] = { 0 };
        struct gs_gpu *gp[GS_MAX_GPUS_PER_ALLOC];
        uint32_t nparts = 0;
        char **v = NULL;
        char id[17];
        int r;

        if (n == 0 || n > GS_ALLOCS_MAX_IDS) {
                snprintf(err, errlen, "an allocation needs 1 to %u device IDs, got %zu",
                         GS_ALLOCS_MAX_IDS, n);
                return -EINVAL;
        }
        v = sorted_copy(ids, n);
        if (!v) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        gs_allocs_id((const char *const *)v, n, id);
        old = gs_allocs_find(ag, id);
        if (old && same_ids(old, v, n)) {
                if (old->releasing) {
                        snprintf(err, errlen, "allocation %s is being released (%u processes still running)",
                                 id, old->nprocs);
                        r = -EBUSY;
                        goto fail;
                }
                free(v);
                *ret = old;
                *ret_created = false;
                return 0;
        }
        for (size_t i = 0; i < n; i++) {
                char uuid[GS_UUID_STR_LEN + 1];
                uint32_t unit, p;
                struct gs_gpu *g;

                if (i > 0 && strcmp(v[i], v[i - 1]) == 0) {
                        snprintf(err, errlen, "device ID '%.63s' appears more than once", v[i]);
                        r = -EINVAL;
                        goto fail;
                }
                if (gs_devid_parse(v[i], uuid, &unit) < 0) {
                        snprintf(err, errlen, "device ID '%.63s' is not a gshare device ID", v[i]);
                        r = -EINVAL;
                        goto fail;
                }
                g = gpu_by_uuid(ag, uuid);
                if (!g || unit >= g->units_total) {
                        snprintf(err, errlen, "device ID '%.63s' is not a %s device of this node",
                                 v[i], ag->cfg.resource_name);
                        r = -ENODEV;
                        goto fail;
                }
                if (g->unit_owner[unit]) {
                        snprintf(err, errlen, "device ID '%.63s' is part of allocation %s", v[i],
                                 g->unit_owner[unit]->id);
                        r = -EBUSY;
                        goto fail;
                }
                if (!g->healthy) {
                        snprintf(err, errlen, "GPU %s is unhealthy: %s", g->uuid, g->health_reason);
                        r = -EIO;
                        goto fail;
                }
                for (p = 0; p < nparts && gp[p] != g; p++)
                        ;
                if (p == nparts) {
                        if (nparts == GS_MAX_GPUS_PER_ALLOC) {
                                snprintf(err, errlen, "an allocation may span at most %d GPUs",
                                         GS_MAX_GPUS_PER_ALLOC);
                                r = -E2BIG;
                                goto fail;
                        }
                        gp[nparts++] = g;
                }
                units[p]++;
        }
        for (size_t i = 0; i < n; i++) {
                struct gs_allocs_pending *q = pending_holding(ag, v[i]);
                if (!q)
                        continue;
                if (pending_same(q, v, n)) {
                        /* Asked for again (the kubelet retrying Allocate):
                         * try now rather than at the next retry. */
                        free(v);
                        return restore_pending(ag, q, ret, ret_created, err, errlen);
                }
                snprintf(err, errlen, "device ID '%.63s' is part of allocation %s, not restored yet: %.200s",
                         v[i], q->id, q->why);
                r = -EBUSY;
                goto fail;
        }
        if (old) { /* same hash, different set: never seen, but never merge them */
                snprintf(err, errlen, "allocation id %s collides with an existing allocation", id);
                r = -EEXIST;
                goto fail;
        }
        a = calloc(1, sizeof(*a));
        if (!a) {
                snprintf(err, errlen, "out of memory");
                r = -ENOMEM;
                goto fail;
        }
        a->agent = ag;
        a->listen_fd = -1;
        gs_ipc_table_init(&a->ipc);
        memcpy(a->id, id, sizeof(a->id));
        a->device_ids = v;
        a->ndevice_ids = n;
        a->created_unix = created_unix ? created_unix : (uint64_t)time(NULL);
        for (uint32_t p = 0; p < nparts; p++) {
                struct gs_gpu *g = gp[p];
                struct gs_part *part = &a->parts[p];
                uint64_t quota = (uint64_t)units[p] * g->unit_bytes / g->chunk_bytes;
                uint64_t cap = ag->cfg.balloon_cap_bytes / g->chunk_bytes;

                part->gpu = (uint32_t)(g - ag->gpus);
                part->units = units[p];
                part->quota_chunks = (uint32_t)quota;
                pthread_mutex_lock(&g->lock);
                r = gs_palloc_new(g->pool, (uint32_t)quota, (uint32_t)cap, &part->pa);
                pthread_mutex_unlock(&g->lock);
                if (r < 0) {
                        if (r == -ENOSPC)
                                snprintf(err, errlen, "GPU %s has fewer than the %llu free chunks this allocation needs (memory still held by released allocations?)",
                                         g->uuid, (unsigned long long)quota);
                        else
                                snprintf(err, errlen, "GPU %s: cannot reserve %llu chunks: %s", g->uuid,
                                         (unsigned long long)quota, strerror(-r));
                        goto fail;
                }
                a->nparts = p + 1;
        }
        r = open_socket(ag, a, dir, err, errlen);
        if (r < 0)
                goto fail;
        for (size_t i = 0; i < n; i++) {
                char uuid[GS_UUID_STR_LEN + 1];
                uint32_t unit;
                if (gs_devid_parse(v[i], uuid, &unit) == 0)
                        gpu_by_uuid(ag, uuid)->unit_owner[unit] = a;
        }
        a->next = ag->allocs;
        ag->allocs = a;
        ag->nallocs++;
        if (checkpoint && (r = gs_allocs_checkpoint(ag)) < 0) {
                snprintf(err, errlen, "cannot write the checkpoint in %s: %s", ag->cfg.state_dir,
                         strerror(-r));
                unlink_alloc(ag, a);
                close_socket(ag, a);
                (void)rmdir(a->socket_dir);
                destroy(ag, a);
                return r;
        }
        *ret = a;
        *ret_created = true;
        return 0;
fail:
        if (a) {
                /* v is freed below; destroy() must see no device IDs (none
                 * of unit_owner points at a yet). */
                a->device_ids = NULL;
                a->ndevice_ids = 0;
                destroy(ag, a);
        }
        free(v);
        return r;
}

static void delete_now(struct gs_agent *ag, struct gs_allocation *a)
{
        unlink_alloc(ag, a);
        close_socket(ag, a);
        if (rmdir(a->socket_dir) < 0 && errno != ENOENT)
                log_warn("allocation %s: cannot remove %s: %m", a->id, a->socket_dir);
        log_info("allocation %s deleted, its %zu units are free", a->id, a->ndevice_ids);
        destroy(ag, a);
}

int gs_allocs_release(struct gs_agent *ag, struct gs_allocation *a, char *err, size_t errlen)
{
        bool was = a->releasing;
        int r;

        a->releasing = true;
        close_socket(ag, a);
        r = gs_allocs_checkpoint(ag);
        if (r < 0) {
                a->releasing = was;
                snprintf(err, errlen, "cannot write the checkpoint in %s: %s", ag->cfg.state_dir,
                         strerror(-r));
                return r;
        }
        if (a->nprocs == 0)
                delete_now(ag, a);
        else
                log_info("allocation %s released; deleted when its %u processes exit", a->id,
                         a->nprocs);
        return 0;
}

static bool pod_gone(const struct gs_allocation *a)
{
        return a->releasing || (a->unheld_since_ms != 0 && a->pod_name[0]);
}

bool gs_allocs_draining(const struct gs_allocation *a)
{
        return a->nprocs > 0 && pod_gone(a);
}

void gs_allocs_reap(struct gs_agent *ag, struct gs_allocation *a)
{
        /* The last process of a gone pod's allocation exited: its units,
         * shown draining until now, are usable again. */
        bool drained = a->nprocs == 0 && pod_gone(a);

        if (a->releasing && a->nprocs == 0)
                delete_now(ag, a);
        if (drained && ag->ctl)
                gs_agent_changed(ag);
}

/* The allocation holding device ID id, or NULL; *ret_foreign set if id is
 * not a unit of this node. */
static struct gs_allocation *owner_of(struct gs_agent *ag, const char *id, bool *ret_foreign)
{
        char uuid[GS_UUID_STR_LEN + 1];
        struct gs_gpu *g;
        uint32_t unit;

        if (gs_devid_parse(id, uuid, &unit) < 0 || !(g = gpu_by_uuid(ag, uuid)) || unit >= g->units_total) {
                *ret_foreign = true;
                return NULL;
        }
        return g->unit_owner[unit];
}

int gs_allocs_take_over(struct gs_agent *ag, const char *const *ids, size_t n, char *err,
                        size_t errlen)
{
        bool foreign = false;

        if (n == 0 || n > GS_ALLOCS_MAX_IDS || gs_allocs_find_ids(ag, ids, n))
                return 0;
        for (size_t i = 0; i < n; i++) {
                struct gs_allocation *o = owner_of(ag, ids[i], &foreign);

                if (foreign)
                        return 0;
                if (o && o->nprocs > 0) {
                        if (o->pod_name[0])
                                snprintf(err, errlen, "device ID '%.63s' is part of allocation %s of pod %s/%s (container %s), which still has %u processes running; its units are free once they exit",
                                         ids[i], o->id, o->pod_namespace, o->pod_name,
                                         o->container_name, o->nprocs);
                        else
                                snprintf(err, errlen, "device ID '%.63s' is part of allocation %s (pod not yet known from PodResources), which still has %u processes running; its units are free once they exit",
                                         ids[i], o->id, o->nprocs);
                        return -EBUSY;
                }
        }
        for (size_t i = 0; i < n; i++) {
                struct gs_allocation *o = owner_of(ag, ids[i], &foreign);
                int r;

                if (!o)
                        continue;
                /* Deleting it at once (no process) clears its units' owner,
                 * so its other IDs in ids find none. */
                if (o->pod_name[0])
                        log_info("allocation %s of pod %s/%s released: the kubelet gave its device ID %s to a new container",
                                 o->id, o->pod_namespace, o->pod_name, ids[i]);
                else
                        log_info("allocation %s released: the kubelet gave its device ID %s to a new container",
                                 o->id, ids[i]);
                r = gs_allocs_release(ag, o, err, errlen);
                if (r < 0)
                        return r;
        }
        return 0;
}

void gs_allocs_shutdown(struct gs_agent *ag)
{
        while (ag->pending) {
                struct gs_allocs_pending *q = ag->pending;
                ag->pending = q->next;
                pending_free(q);
        }
        /* The pools go next: their chunks need no fresh memory. */
        for (uint32_t i = 0; i < ag->ngpus; i++)
                if (ag->gpus[i].pool)
                        gs_pool_set_return_fn(ag->gpus[i].pool, NULL, NULL);
        while (ag->allocs) {
                struct gs_allocation *a = ag->allocs;
                unlink_alloc(ag, a);
                close_socket(ag, a);
                destroy(ag, a);
        }
}

static int checkpoint_fill(FILE *f, void *ctx)
{
        struct gs_agent *ag = ctx;

        fprintf(f, "# gshare-agent allocations v2\n");
        for (struct gs_allocation *a = ag->allocs; a; a = a->next) {
                if (a->releasing)
                        continue;
                fprintf(f, "%s %" PRIu64 " %zu", a->id, a->created_unix, a->ndevice_ids);
                for (size_t i = 0; i < a->ndevice_ids; i++)
                        fprintf(f, " %s", a->device_ids[i]);
                fprintf(f, " dir=%s\n", a->dir_name);
        }
        /* Lines not restored (yet) leave only by release. */
        for (const struct gs_allocs_pending *q = ag->pending; q; q = q->next)
                fprintf(f, "%s\n", q->line);
        return 0;
}

int gs_allocs_checkpoint(struct gs_agent *ag)
{
        char path[PATH_MAX];
        int r;

        /* Another agent's file (gs_agent.h, paths_theirs). */
        if (ag->paths_theirs)
                return 0;
        if (snprintf(path, sizeof(path), "%s/%s", ag->cfg.state_dir, GS_CHECKPOINT_NAME) >=
            (int)sizeof(path))
                return -ENAMETOOLONG;
        if (mkdir(ag->cfg.state_dir, 0700) < 0 && errno != EEXIST)
                return gs_neg_errno();
        r = gs_file_replace(path, 0600, checkpoint_fill, ag);
        if (r < 0)
                log_error("cannot write the checkpoint %s: %s", path, strerror(-r));
        return r;
}

int gs_allocs_parse_line(char *line, char ret_id[17], uint64_t *ret_created, char **ret_ids,
                         size_t max_ids, char ret_dir[GS_ALLOCS_DIR_MAX])
{
        char *save = NULL, *tok, *end;
        unsigned long long created, count;
        const char *dir = NULL;
        size_t n = 0;

        tok = strtok_r(line, " \t\n", &save);
        if (!tok || strlen(tok) != 16 || strspn(tok, "0123456789abcdef") != 16)
                return -EINVAL;
        memcpy(ret_id, tok, 17);
        tok = strtok_r(NULL, " \t\n", &save);
        if (!tok)
                return -EINVAL;
        errno = 0;
        created = strtoull(tok, &end, 10);
        if (errno || *end || tok[0] == '-')
                return -EINVAL;
        tok = strtok_r(NULL, " \t\n", &save);
        if (!tok)
                return -EINVAL;
        errno = 0;
        count = strtoull(tok, &end, 10);
        if (errno || *end || tok[0] == '-' || count == 0 || count > max_ids)
                return -EINVAL;
        while ((tok = strtok_r(NULL, " \t\n", &save))) {
                if (dir)
                        return -EINVAL;
                if (n == count && strncmp(tok, "dir=", 4) == 0) {
                        /* v2: the socket directory's name; one path
                         * component of hex digits and dashes. */
                        dir = tok + 4;
                        if (!*dir || strlen(dir) >= GS_ALLOCS_DIR_MAX ||
                            strspn(dir, "0123456789abcdef-") != strlen(dir))
                                return -EINVAL;
                        continue;
                }
                if (n == count)
                        return -EINVAL;
                ret_ids[n++] = tok;
        }
        if (n != count)
                return -EINVAL;
        *ret_created = created;
        /* v1 lines name no directory: it was <id>. */
        snprintf(ret_dir, GS_ALLOCS_DIR_MAX, "%s", dir ? dir : ret_id);
        return (int)n;
}

/* Takes q out of the pending list and creates its allocation; puts it back
 * (with the reason) if that fails.  The checkpoint already holds its line. */
static int restore_pending(struct gs_agent *ag, struct gs_allocs_pending *q,
                           struct gs_allocation **ret, bool *ret_created, char *err, size_t errlen)
{
        int r;

        pending_unlink(ag, q);
        r = gs_allocs_create(ag, (const char *const *)q->ids, q->nids, q->created_unix, q->dir, false, ret,
                             ret_created, err, errlen);
        if (r < 0) {
                snprintf(q->why, sizeof(q->why), "%s", err);
                q->next = ag->pending;
                ag->pending = q;
                return r;
        }
        log_info("allocation %s restored (%zu units), socket %s", (*ret)->id, q->nids,
                 (*ret)->socket_path);
        pending_free(q);
        return 0;
}

/* Keeps a checkpoint line that cannot be restored now.  line is the text as
 * read; ids the parsed device IDs (n of them), or NULL if it did not parse. */
static int keep_pending(struct gs_agent *ag, const char *line, const char *id, const char *dir,
                        uint64_t created, char *const *ids, size_t n, const char *why)
{
        struct gs_allocs_pending *q = calloc(1, sizeof(*q));
        size_t l = strcspn(line, "\n");

        if (!q || !(q->line = strndup(line, l)) ||
            (ids && !(q->ids = sorted_copy((const char *const *)ids, n)))) {
                pending_free(q);
                return -ENOMEM;
        }
        snprintf(q->id, sizeof(q->id), "%s", id);
        snprintf(q->dir, sizeof(q->dir), "%s", dir);
        q->created_unix = created;
        q->nids = ids ? n : 0;
        snprintf(q->why, sizeof(q->why), "%s", why);
        q->next = ag->pending;
        ag->pending = q;
        if (q->ids)
                gs_loop_timer_arm(&ag->restore_timer, 0);
        return 0;
}

int gs_allocs_restore(struct gs_agent *ag)
{
        char path[PATH_MAX], id[17], err[512], dir[GS_ALLOCS_DIR_MAX];
        char **ids = NULL, *line = NULL, *copy = NULL;
        size_t cap = 0, lineno = 0, restored = 0, kept = 0;
        FILE *f;
        int r = 0;

        if (snprintf(path, sizeof(path), "%s/%s", ag->cfg.state_dir, GS_CHECKPOINT_NAME) >=
            (int)sizeof(path))
                return -ENAMETOOLONG;
        f = fopen(path, "re");
        if (!f)
                return errno == ENOENT ? 0 : gs_neg_errno();
        ids = calloc(GS_ALLOCS_MAX_IDS, sizeof(*ids));
        if (!ids) {
                fclose(f);
                return -ENOMEM;
        }
        while (getline(&line, &cap, f) > 0) {
                struct gs_allocation *a;
                uint64_t created = 0;
                bool made;
                int n;

                lineno++;
                if (line[0] == '#' || line[0] == '\n')
                        continue;
                free(copy);
                copy = strdup(line); /* parsing cuts line up */
                if (!copy) {
                        r = -ENOMEM;
                        break;
                }
                n = gs_allocs_parse_line(line, id, &created, ids, GS_ALLOCS_MAX_IDS, dir);
                if (n < 0) {
                        log_warn("%s:%zu: malformed line, kept as it is: %.200s", path, lineno, copy);
                        r = keep_pending(ag, copy, "", "", 0, NULL, 0, "malformed checkpoint line");
                } else {
                        r = gs_allocs_create(ag, (const char *const *)ids, (size_t)n, created, dir, false,
                                             &a, &made, err, sizeof(err));
                        if (r == 0) {
                                restored++;
                                log_info("allocation %s restored (%d units), socket %s", a->id, n,
                                         a->socket_path);
                                continue;
                        }
                        log_warn("%s:%zu: allocation %s not restored: %s; kept, retried every %d ms, its units unhealthy meanwhile",
                                 path, lineno, id, err, GS_ALLOCS_RETRY_MS);
                        r = keep_pending(ag, copy, id, dir, created, ids, (size_t)n, err);
                        kept++;
                }
                if (r < 0)
                        break;
        }
        free(copy);
        free(line);
        free(ids);
        fclose(f);
        if (restored)
                log_info("restored %zu allocations from %s; their processes must register again",
                         restored, path);
        if (kept)
                log_warn("%zu allocations of %s wait to be restored", kept, path);
        if (r < 0) {
                /* Never rewrite a checkpoint we could not read whole. */
                log_error("reading %s: %s; the checkpoint is left as it is", path, strerror(-r));
                return r;
        }
        return gs_allocs_checkpoint(ag);
}

bool gs_allocs_is_pending(const struct gs_agent *ag, const char *id)
{
        for (const struct gs_allocs_pending *q = ag->pending; q; q = q->next)
                if (strcmp(q->id, id) == 0)
                        return true;
        return false;
}

int64_t gs_allocs_tick(void *data, int64_t now)
{
        struct gs_agent *ag = data;
        struct gs_allocs_pending *q, *next;
        bool any = false, changed = false;
        char err[512];

        for (q = ag->pending; q; q = q->next)
                any |= q->ids != NULL;
        if (!any)
                return GS_LOOP_NEVER;
        for (q = ag->pending; q; q = next) {
                struct gs_allocation *a;
                bool made;
                next = q->next;
                if (q->ids && restore_pending(ag, q, &a, &made, err, sizeof(err)) == 0)
                        changed = true;
        }
        if (changed)
                gs_agent_changed(ag);
        return now + GS_ALLOCS_RETRY_MS;
}

int gs_allocs_release_pending(struct gs_agent *ag, const char *id, const char *const *ids, size_t n,
                              char *err, size_t errlen)
{
        struct gs_allocs_pending *q = NULL;
        char **v = NULL;
        int r;

        if (id && id[0]) {
                for (q = ag->pending; q && !(q->ids && strcmp(q->id, id) == 0); q = q->next)
                        ;
        } else if (n && n <= GS_ALLOCS_MAX_IDS && (v = sorted_copy(ids, n))) {
                for (q = ag->pending; q && !pending_same(q, v, n); q = q->next)
                        ;
                free(v);
        }
        if (!q)
                return -ENOENT;
        pending_unlink(ag, q);
        r = gs_allocs_checkpoint(ag);
        if (r < 0) {
                q->next = ag->pending;
                ag->pending = q;
                snprintf(err, errlen, "cannot write the checkpoint in %s: %s", ag->cfg.state_dir,
                         strerror(-r));
                return r;
        }
        log_info("allocation %s released before it could be restored", q->id);
        pending_free(q);
        return 0;
}

size_t gs_allocs_units_pending(struct gs_agent *ag, const struct gs_gpu *g, uint32_t *ret_units,
                               size_t max)
{
        size_t k = 0;

        for (const struct gs_allocs_pending *q = ag->pending; q; q = q->next)
                for (size_t i = 0; i < q->nids; i++) {
                        char uuid[GS_UUID_STR_LEN + 1];
                        uint32_t unit;
                        if (gs_devid_parse(q->ids[i], uuid, &unit) == 0 &&
                            strcasecmp(uuid, g->uuid) == 0 && unit < g->units_total && k < max)
                                ret_units[k++] = unit;
                }
        return k;
}

uint32_t gs_allocs_outside_slots(const struct gs_agent *ag, const struct gs_part *part)
{
        const struct gs_gpu *g = &ag->gpus[part->gpu];

        return part->quota_chunks + (uint32_t)(ag->cfg.balloon_cap_bytes / g->chunk_bytes);
}
