/* gs_qos.c — see gs_qos.h. */
#include "gs_qos.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gs_log.h"

static const char *const gs_qos_names[] = {
        [GS_QOS_STANDARD] = "standard",
        [GS_QOS_LATENCY] = "latency-critical",
        [GS_QOS_BEST_EFFORT] = "best-effort",
};

const char *gs_qos_class_name(unsigned cls)
{
        return cls < GS_ARRAY_SIZE(gs_qos_names) ? gs_qos_names[cls] : "?";
}

int gs_qos_class_parse(const char *s, uint8_t *ret)
{
        for (unsigned i = 0; i < GS_ARRAY_SIZE(gs_qos_names); i++)
                if (strcmp(s, gs_qos_names[i]) == 0) {
                        *ret = (uint8_t)i;
                        return 0;
                }
        return -EINVAL;
}

unsigned gs_qos_rank(unsigned cls)
{
        return cls == GS_QOS_LATENCY ? 2 : cls == GS_QOS_BEST_EFFORT ? 0 : 1;
}

int gs_qos_percent_parse(const char *s, uint8_t *ret)
{
        char *end;
        long v;

        if (!*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 3)
                return -EINVAL;
        v = strtol(s, &end, 10);
        if (*end || v < 1 || v > 100)
                return -EINVAL;
        *ret = (uint8_t)v;
        return 0;
}

int gs_qos_from_pod(const struct gs_qos_pod *pod, int64_t lc_priority, struct gs_qos_policy *ret, char *err,
                    size_t errlen)
{
        uint8_t cls = GS_QOS_STANDARD, want;
        int r = 0;

        if (pod->has_priority && pod->priority >= lc_priority)
                cls = GS_QOS_LATENCY;
        else if (pod->has_priority && pod->priority < 0)
                cls = GS_QOS_BEST_EFFORT;
        *ret = (struct gs_qos_policy){ .cls = cls };
        if (pod->cls) {
                if (gs_qos_class_parse(pod->cls, &want) < 0) {
                        snprintf(err, errlen,
                                 "annotation %s: '%.40s' is not latency-critical, standard or "
                                 "best-effort; %s applies",
                                 GS_QOS_ANN_CLASS, pod->cls, gs_qos_class_name(cls));
                        r = -EINVAL;
                } else if (gs_qos_rank(want) > gs_qos_rank(cls)) {
                        snprintf(err, errlen,
                                 "annotation %s: %s is above what the pod's priority %" PRId64
                                 " gives (an annotation can only lower the class; a PriorityClass of value %" PRId64
                                 " or more makes a pod latency-critical); %s applies",
                                 GS_QOS_ANN_CLASS, pod->cls, pod->has_priority ? pod->priority : 0, lc_priority,
                                 gs_qos_class_name(cls));
                        r = -EINVAL;
                } else {
                        ret->cls = want;
                }
        }
        if (pod->cap && gs_qos_percent_parse(pod->cap, &ret->cap) < 0) {
                size_t n = r < 0 ? strlen(err) : 0;
                snprintf(err + n, errlen - n,
                         "%sannotation %s: '%.40s' is not a percent of GPU time (1 to 100); "
                         "no cap applies",
                         n ? "; " : "", GS_QOS_ANN_CAP, pod->cap);
                ret->cap = 0;
                r = -EINVAL;
        }
        if (pod->weight && gs_qos_percent_parse(pod->weight, &ret->weight) < 0) {
                size_t n = r < 0 ? strlen(err) : 0;
                snprintf(err + n, errlen - n,
                         "%sannotation %s: '%.40s' is not a weight (1 to %u); the default %u applies", n ? "; " : "",
                         GS_QOS_ANN_WEIGHT, pod->weight, GS_QOS_WEIGHT_MAX, GS_QOS_WEIGHT_DEFAULT);
                ret->weight = 0;
                r = -EINVAL;
        }
        return r;
}

void gs_qos_format(const struct gs_qos_policy *p, char *buf, size_t cap)
{
        char c[16] = "", w[16] = "";

        if (p->cap)
                snprintf(c, sizeof(c), ",cap=%u", p->cap);
        if (gs_qos_weight_of(p) != GS_QOS_WEIGHT_DEFAULT)
                snprintf(w, sizeof(w), ",weight=%u", gs_qos_weight_of(p));
        snprintf(buf, cap, "%s%s%s", gs_qos_class_name(p->cls), c, w);
}

void gs_qos_put(FILE *f, const struct gs_qos_policy *p)
{
        char b[64];

        if (gs_qos_is_default(p))
                return;
        gs_qos_format(p, b, sizeof(b));
        fprintf(f, " qos=%s", b);
}

int gs_qos_token_parse(const char *tok, struct gs_qos_policy *ret)
{
        char b[64], *comma;

        if (!tok || strncmp(tok, "qos=", 4) != 0 || strlen(tok + 4) >= sizeof(b))
                return -EINVAL;
        snprintf(b, sizeof(b), "%s", tok + 4);
        *ret = (struct gs_qos_policy){ 0 };
        comma = strchr(b, ',');
        if (comma)
                *comma++ = '\0';
        /* ",cap=<n>" then ",weight=<w>", each optional, each once. */
        if (comma && strncmp(comma, "cap=", 4) == 0) {
                char *next = strchr(comma, ',');
                if (next)
                        *next++ = '\0';
                if (gs_qos_percent_parse(comma + 4, &ret->cap) < 0)
                        return -EINVAL;
                comma = next;
        }
        if (comma && (strncmp(comma, "weight=", 7) != 0 || gs_qos_percent_parse(comma + 7, &ret->weight) < 0 ||
                      ret->weight == GS_QOS_WEIGHT_DEFAULT))
                return -EINVAL;
        if (gs_qos_class_parse(b, &ret->cls) < 0 || gs_qos_is_default(ret))
                return -EINVAL;
        return 0;
}

/* ---- the boards ---- */

struct board {
        int fd;    /* -1 until made */
        int ro_fd; /* the same file, opened read-only */
        struct gs_qos_board *map;
        uint32_t used; /* slots taken: bit i */
        bool quiet;    /* idle_until_ns set at the last tick */
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct board g_boards[GS_QOS_MAX_GPUS];
static bool g_init;

/* pre: g_mu. */
static int board_make(struct board *b)
{
        char path[64];
        int fd, ro = -1;
        void *m;

        fd = memfd_create("gshare-qos", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0)
                return -errno;
        if (ftruncate(fd, sizeof(struct gs_qos_board)) < 0 ||
            fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
                goto fail;
        /* A read-only open of the same file: a mapping of it cannot be
         * made writable (mprotect refuses), whatever its holder does. */
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        ro = open(path, O_RDONLY | O_CLOEXEC);
        if (ro < 0)
                goto fail;
        m = mmap(NULL, sizeof(struct gs_qos_board), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED)
                goto fail;
        b->map = m;
        b->map->magic = GS_QOS_MAGIC;
        b->map->nslots = GS_QOS_SLOTS;
        b->fd = fd;
        b->ro_fd = ro;
        return 0;
fail:;
        int e = -errno;
        close(fd);
        if (ro >= 0)
                close(ro);
        return e;
}

/* pre: g_mu.  A free slot of b taken for pid, or GS_QOS_NO_SLOT. */
static uint32_t slot_take(struct board *b, uint32_t pid)
{
        for (uint32_t s = 0; s < GS_QOS_SLOTS; s++)
                if (!(b->used & (1u << s))) {
                        b->used |= 1u << s;
                        __atomic_store_n(&b->map->slot[s].up, 0, __ATOMIC_RELEASE);
                        __atomic_store_n(&b->map->slot[s].pid, pid, __ATOMIC_RELAXED);
                        /* Nothing foreseen of a process gone. */
                        __atomic_store_n(&b->map->slot[s].fs_next_ns, 0, __ATOMIC_RELAXED);
                        __atomic_store_n(&b->map->nlc, (uint32_t)__builtin_popcount(b->used), __ATOMIC_RELEASE);
                        return s;
                }
        return GS_QOS_NO_SLOT;
}

int gs_qos_board_open(uint32_t gpu, bool lc, uint32_t pid, int *ret_fd, uint32_t *slot)
{
        struct board *b;
        bool had = *slot < GS_QOS_SLOTS;
        int r = 0, fd;

        *ret_fd = -1;
        if (gpu >= GS_QOS_MAX_GPUS) {
                *slot = GS_QOS_NO_SLOT;
                return -ENODEV;
        }
        pthread_mutex_lock(&g_mu);
        if (!g_init) {
                for (uint32_t i = 0; i < GS_QOS_MAX_GPUS; i++)
                        g_boards[i].fd = g_boards[i].ro_fd = -1;
                g_init = true;
        }
        b = &g_boards[gpu];
        if (b->fd < 0)
                r = board_make(b);
        if (r == 0 && !(lc && had && (b->used & (1u << *slot))))
                *slot = r == 0 && lc ? slot_take(b, pid) : GS_QOS_NO_SLOT;
        had = had && *slot < GS_QOS_SLOTS;
        if (r == 0) {
                fd = fcntl(*slot != GS_QOS_NO_SLOT ? b->fd : b->ro_fd, F_DUPFD_CLOEXEC, 3);
                if (fd < 0)
                        r = -errno;
                else
                        *ret_fd = fd;
        }
        pthread_mutex_unlock(&g_mu);
        if (r < 0 && *slot != GS_QOS_NO_SLOT) {
                if (!had)
                        gs_qos_board_release(gpu, *slot);
                *slot = GS_QOS_NO_SLOT;
        }
        return r;
}

void gs_qos_board_release(uint32_t gpu, uint32_t slot)
{
        struct board *b;

        if (gpu >= GS_QOS_MAX_GPUS || slot >= GS_QOS_SLOTS)
                return;
        pthread_mutex_lock(&g_mu);
        b = &g_boards[gpu];
        if (g_init && b->map && (b->used & (1u << slot))) {
                b->used &= ~(1u << slot);
                __atomic_store_n(&b->map->slot[slot].up, 0, __ATOMIC_RELEASE);
                __atomic_store_n(&b->map->slot[slot].pid, 0, __ATOMIC_RELAXED);
                __atomic_store_n(&b->map->slot[slot].fs_next_ns, 0, __ATOMIC_RELAXED);
                __atomic_store_n(&b->map->nlc, (uint32_t)__builtin_popcount(b->used), __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&g_mu);
}

uint32_t gs_qos_board_nlc(uint32_t gpu)
{
        uint32_t n = 0;

        if (gpu >= GS_QOS_MAX_GPUS)
                return 0;
        pthread_mutex_lock(&g_mu);
        if (g_init)
                n = (uint32_t)__builtin_popcount(g_boards[gpu].used);
        pthread_mutex_unlock(&g_mu);
        return n;
}

void gs_qos_board_holdable(uint32_t gpu, bool launched)
{
        struct board *b;
        uint64_t until = launched ? 0 : (uint64_t)gs_mono_ns() + (uint64_t)GS_QOS_IDLE_LEASE_MS * 1000000u;

        if (gpu >= GS_QOS_MAX_GPUS)
                return;
        pthread_mutex_lock(&g_mu);
        b = &g_boards[gpu];
        if (g_init && b->map) {
                __atomic_store_n(&b->map->idle_until_ns, until, __ATOMIC_RELEASE);
                if (b->quiet != !launched && b->used)
                        log_debug("GPU %u: %s", gpu,
                                  launched ? "a standard or best-effort process launches: latency-critical processes "
                                             "track their work"
                                           : "no standard or best-effort process launched lately: latency-critical "
                                             "processes do not track their work");
                b->quiet = !launched;
        }
        pthread_mutex_unlock(&g_mu);
}

/* The duty (thousandths of a percent) to tell a hook whose work is to be
 * on the GPU for on of each period (same unit) while m processes
 * (itself included) have work as its window ends.  The hook launches
 * until d less twice its queue q(d) = min(GS_QOS_DUTY_QUEUE_US, d / 4),
 * and its queue then drains at 1/m of the GPU: its work is on for
 * d + (m - 2) q(d) (d itself for m = 2). */
static uint64_t duty_for(uint64_t on, uint32_t m)
{
        uint64_t qmax = (uint64_t)GS_QOS_DUTY_QUEUE_US * 100000 / ((uint64_t)GS_QOS_DUTY_PERIOD_MS * 1000);
        uint64_t d = 4 * on / (m + 2); /* q(d) = d / 4 */

        if (d / 4 > qmax) /* q(d) = qmax */
                d = on - (m - 2) * qmax;
        return d;
}

void gs_qos_duties(uint32_t n, const uint64_t *w, uint8_t *ret)
{
        uint32_t order[GS_QOS_SHARE_MAX];
        uint64_t total = 0, done = 0, got = 0, d_pct;

        if (n > GS_QOS_SHARE_MAX)
                n = GS_QOS_SHARE_MAX;
        for (uint32_t i = 0; i < n; i++) {
                ret[i] = 0;
                total += w[i] ? w[i] : 1;
                order[i] = i;
        }
        if (n < 2)
                return;
        /* Lightest first (insertion sort: n is small). */
        for (uint32_t i = 1; i < n; i++)
                for (uint32_t j = i; j > 0 && w[order[j]] < w[order[j - 1]]; j--) {
                        uint32_t t = order[j];
                        order[j] = order[j - 1];
                        order[j - 1] = t;
                }
        /* The held ones' windows all open at the period's start, so
         * during its first d[0] all n processes have work, then n - 1 until
         * d[1], and so on: each process with work has an equal turn.  The
         * k-th lightest has had what every process still on has had,
         * s[k-1] (in thousandths of a percent); it needs s[k] - s[k-1]
         * more, with n - k sharing, so its window closes at
         * d[k] = d[k-1] + (n - k) * (s[k] - s[k-1]).  Where that reaches
         * the whole period, it and the heavier ones are free.  What it
         * is told allows for its queue draining after its window
         * (duty_for). */
        for (uint32_t k = 0, m = n, on = n; k < n && m > 1; k++, m--) {
                uint64_t wi = w[order[k]] ? w[order[k]] : 1;
                uint64_t share = (wi * 100000 + total / 2) / total;
                uint64_t d = done + m * (share - got);

                if (d >= 100000)
                        break;
                /* Processes of equal weight close together: on as the
                 * first of them closes. */
                if (!k || d > done)
                        on = m;
                d_pct = (duty_for(d, on) + 500) / 1000;
                ret[order[k]] = (uint8_t)(d_pct < 1 ? 1 : d_pct > 99 ? 99 : d_pct);
                done = d;
                got = share;
        }
}
