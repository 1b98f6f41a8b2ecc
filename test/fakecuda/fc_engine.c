/* fc_engine.c — the fake driver's model of GPU time (fc_engine.h says
 * what it models and why). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fc_engine.h"
#include "fc_state.h"

#define ENG_MAGIC 0x47454346u /* "FCEG" */
#define ENG_VERSION 1u
#define ENG_PROCS 256
#define ENG_CLIENTS 32 /* contexts per device */
#define ENG_QLEN 512   /* kernels a context may have queued (a full push buffer blocks the launch) */
#define ENG_MAX_SLEEP_NS 200000000ull

enum { PROC_FREE, PROC_REG, PROC_LIVE };
enum { CL_FREE, CL_LIVE, CL_DEAD };

struct eng_proc {
        pthread_mutex_t alive; /* locked by the process's keeper thread while it lives */
        int32_t pid;
        uint32_t state; /* PROC_* */
        uint32_t hold;  /* it holds the clock */
        uint32_t gen;   /* bumped at each registration */
};

struct eng_item {
        uint64_t seq, left_ns, arrive_ns, done_ns;
};

struct eng_client {
        uint32_t state; /* CL_* */
        int32_t proc;   /* its eng_proc, of generation proc_gen */
        uint32_t proc_gen;
        uint32_t pad;
        uint64_t gen; /* bumped when the entry is taken */
        uint64_t ctx;
        uint64_t next_seq; /* the next kernel's number (from 1) */
        uint64_t done_seq; /* kernels up to it completed */
        uint64_t retired;  /* kernels up to it waited for: their entries free */
        uint64_t order;    /* its place in line: the smallest goes next */
        struct fakecuda_engine_stat st;
        struct eng_item q[ENG_QLEN];
};

struct eng_dev {
        uint64_t now_ns; /* the schedule is computed up to here */
        uint64_t slice_end_ns;
        int32_t running; /* the client with the engine, -1 none */
        uint32_t pad;
        uint64_t order; /* the last place in line handed out */
        struct eng_client c[ENG_CLIENTS];
};

struct eng_shared {
        uint32_t magic, version;
        uint32_t wake;  /* futex: bumped when waiters should look again */
        uint32_t nheld; /* processes holding the clock */
        uint64_t slice_ns;
        uint64_t held_at;    /* CLOCK_MONOTONIC when the clock stopped (nheld > 0) */
        uint64_t held_total; /* ns it was stopped before */
        pthread_mutex_t lock;
        struct eng_proc procs[ENG_PROCS];
        struct eng_dev dev[FC_MAX_DEV];
};

/* This process: the mapping, its registration (l_lock). */
static pthread_mutex_t l_lock = PTHREAD_MUTEX_INITIALIZER;
static struct eng_shared *l_e;
static int l_proc = -1;
static uint32_t l_proc_gen;
static pthread_once_t l_fork_once = PTHREAD_ONCE_INIT;

static uint64_t mono_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void robust_init(pthread_mutex_t *m)
{
        pthread_mutexattr_t a;

        pthread_mutexattr_init(&a);
        pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
        pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
        pthread_mutex_init(m, &a);
        pthread_mutexattr_destroy(&a);
}

static uint64_t eng_slice_from_env(void)
{
        const char *s = secure_getenv("GSHARE_FAKECUDA_TIMESLICE_US");
        char *end;
        unsigned long v;

        if (!s || !*s)
                return FC_ENG_DEFAULT_SLICE_US * 1000ull;
        errno = 0;
        v = strtoul(s, &end, 10);
        if (errno || *end || v < 1 || v > 1000000) {
                fprintf(stderr, "fakecuda: bad GSHARE_FAKECUDA_TIMESLICE_US %s (1..1000000); using %u\n", s,
                        FC_ENG_DEFAULT_SLICE_US);
                return FC_ENG_DEFAULT_SLICE_US * 1000ull;
        }
        return v * 1000ull;
}

static struct eng_shared *eng_map(void)
{
        char defpath[64], path[PATH_MAX];
        struct eng_shared *e = MAP_FAILED;
        struct stat st;
        int fd;

        if ((size_t)snprintf(path, sizeof(path), "%s-engine", fc_state_path(defpath, sizeof(defpath))) >= sizeof(path))
                return NULL;
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
                fprintf(stderr, "fakecuda: cannot open %s: %s\n", path, strerror(errno));
                return NULL;
        }
        if (flock(fd, LOCK_EX) < 0 || fstat(fd, &st) < 0)
                goto out;
        if (st.st_size == 0 && ftruncate(fd, sizeof(*e)) < 0)
                goto out;
        if (st.st_size != 0 && st.st_size != (off_t)sizeof(*e)) {
                fprintf(stderr, "fakecuda: %s has the wrong size; remove it\n", path);
                goto out;
        }
        e = mmap(NULL, sizeof(*e), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (e == MAP_FAILED)
                goto out;
        if (e->magic != ENG_MAGIC) {
                e->version = ENG_VERSION;
                e->slice_ns = eng_slice_from_env();
                robust_init(&e->lock);
                for (int d = 0; d < FC_MAX_DEV; d++)
                        e->dev[d].running = -1;
                __atomic_store_n(&e->magic, ENG_MAGIC, __ATOMIC_SEQ_CST);
        } else if (e->version != ENG_VERSION) {
                fprintf(stderr, "fakecuda: %s is of another version; remove it\n", path);
                munmap(e, sizeof(*e));
                e = MAP_FAILED;
        }
out:
        (void)flock(fd, LOCK_UN);
        close(fd);
        return e == MAP_FAILED ? NULL : e;
}

/* The child has no keeper thread: it registers anew when it submits.
 * l_lock is not taken around fork (fakecuda.c's worker lock is held
 * while this one is taken: that order must not be reversed); the child
 * has one thread, so it starts with l_lock free. */
static void eng_fork_child(void)
{
        l_proc = -1;
        pthread_mutex_init(&l_lock, NULL);
}

static void eng_fork_register(void)
{
        (void)pthread_atfork(NULL, NULL, eng_fork_child);
}

static struct eng_shared *eng_open(void)
{
        struct eng_shared *e = __atomic_load_n(&l_e, __ATOMIC_ACQUIRE);

        if (e)
                return e;
        pthread_once(&l_fork_once, eng_fork_register);
        pthread_mutex_lock(&l_lock);
        if (!l_e)
                __atomic_store_n(&l_e, eng_map(), __ATOMIC_RELEASE);
        e = l_e;
        pthread_mutex_unlock(&l_lock);
        return e;
}

static void eng_wake(struct eng_shared *e)
{
        __atomic_add_fetch(&e->wake, 1, __ATOMIC_SEQ_CST);
        (void)syscall(SYS_futex, &e->wake, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* pre: lock held.  The model's clock. */
static uint64_t eng_now(const struct eng_shared *e)
{
        return (e->nheld ? e->held_at : mono_ns()) - e->held_total;
}

static int pending(const struct eng_client *c)
{
        return c->state == CL_LIVE && c->done_seq + 1 < c->next_seq;
}

/* pre: lock held.  Proc i died: its contexts' queues are dropped, its hold
 * let go. */
static void eng_drop_proc(struct eng_shared *e, int i)
{
        struct eng_proc *p = &e->procs[i];

        for (int d = 0; d < FC_MAX_DEV; d++)
                for (int k = 0; k < ENG_CLIENTS; k++) {
                        struct eng_client *c = &e->dev[d].c[k];

                        if (c->state != CL_LIVE || c->proc != i || c->proc_gen != p->gen)
                                continue;
                        c->st.dropped += c->next_seq - 1 - c->done_seq;
                        c->st.live = 0;
                        c->state = CL_DEAD;
                        if (e->dev[d].running == k)
                                e->dev[d].running = -1;
                }
        if (p->hold && --e->nheld == 0) {
                e->held_total += mono_ns() - e->held_at;
                e->held_at = 0;
        }
        p->hold = 0;
        p->state = PROC_FREE;
        eng_wake(e);
}

/* Whether the keeper of p is gone (its process died). */
static int eng_proc_dead(struct eng_proc *p)
{
        int r = pthread_mutex_trylock(&p->alive);

        if (r == EBUSY)
                return 0;
        if (r == EOWNERDEAD)
                pthread_mutex_consistent(&p->alive);
        if (r == 0 || r == EOWNERDEAD)
                pthread_mutex_unlock(&p->alive);
        return 1;
}

static void eng_lock(struct eng_shared *e)
{
        /* A process killed inside: every update leaves the state usable
         * (a kernel is visible only once its item is written). */
        if (pthread_mutex_lock(&e->lock) == EOWNERDEAD)
                pthread_mutex_consistent(&e->lock);
        for (int i = 0; i < ENG_PROCS; i++)
                if (e->procs[i].state == PROC_LIVE && eng_proc_dead(&e->procs[i]))
                        eng_drop_proc(e, i);
}

static void eng_unlock(struct eng_shared *e)
{
        pthread_mutex_unlock(&e->lock);
}

/* ---- registration: a keeper thread holds the process's alive mutex ---- */

static sem_t l_keeper_ready;

static void *eng_keeper(void *arg)
{
        pthread_mutex_t *alive = arg;

        if (pthread_mutex_lock(alive) == EOWNERDEAD)
                pthread_mutex_consistent(alive);
        sem_post(&l_keeper_ready);
        for (;;)
                pause();
        return NULL;
}

/* This process's entry in procs[], registered on first use; -1 if none is
 * free or no thread can be started. */
static int eng_register(struct eng_shared *e)
{
        pthread_attr_t attr;
        pthread_t t;
        int i, rc;

        pthread_mutex_lock(&l_lock);
        if (l_proc >= 0) {
                pthread_mutex_unlock(&l_lock);
                return l_proc;
        }
        eng_lock(e);
        for (i = 0; i < ENG_PROCS && e->procs[i].state != PROC_FREE; i++)
                ;
        if (i < ENG_PROCS) {
                e->procs[i].state = PROC_REG;
                e->procs[i].pid = (int32_t)getpid();
                e->procs[i].gen++;
                robust_init(&e->procs[i].alive);
        }
        eng_unlock(e);
        if (i == ENG_PROCS) {
                pthread_mutex_unlock(&l_lock);
                return -1;
        }
        sem_init(&l_keeper_ready, 0, 0);
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 64 << 10);
        rc = pthread_create(&t, &attr, eng_keeper, &e->procs[i].alive);
        pthread_attr_destroy(&attr);
        if (rc == 0)
                while (sem_wait(&l_keeper_ready) < 0 && errno == EINTR)
                        ;
        sem_destroy(&l_keeper_ready);
        eng_lock(e);
        e->procs[i].state = rc == 0 ? PROC_LIVE : PROC_FREE;
        l_proc_gen = e->procs[i].gen;
        eng_unlock(e);
        l_proc = rc == 0 ? i : -1;
        pthread_mutex_unlock(&l_lock);
        return l_proc;
}

/* ---- the schedule ------------------------------------------------------ */

/* pre: lock held.  The pending client next in line, -1 if none. */
static int eng_pick(const struct eng_dev *d)
{
        int best = -1;

        for (int k = 0; k < ENG_CLIENTS; k++)
                if (pending(&d->c[k]) && (best < 0 || d->c[k].order < d->c[best].order))
                        best = k;
        return best;
}

static int others_pending(const struct eng_dev *d, int self)
{
        for (int k = 0; k < ENG_CLIENTS; k++)
                if (k != self && pending(&d->c[k]))
                        return 1;
        return 0;
}

/* Client k ran step ns; the others with work waited. */
static void eng_account(struct eng_dev *d, int k, uint64_t step)
{
        int others = 0;

        for (int j = 0; j < ENG_CLIENTS; j++)
                if (j != k && pending(&d->c[j])) {
                        d->c[j].st.wait_ns += step;
                        others = 1;
                }
        d->c[k].st.gpu_ns += step;
        if (others)
                d->c[k].st.contended_ns += step;
}

/* pre: lock held.  Runs device d's schedule up to model time T. */
static void eng_advance(struct eng_dev *d, uint64_t T, uint64_t slice)
{
        if (T < d->now_ns)
                T = d->now_ns;
        for (;;) {
                struct eng_client *c;
                struct eng_item *it;
                uint64_t step;

                if (d->running < 0) {
                        int k = eng_pick(d);

                        if (k < 0) {
                                d->now_ns = T;
                                return;
                        }
                        d->running = k;
                        d->slice_end_ns = d->now_ns + slice;
                        d->c[k].st.turns++;
                }
                c = &d->c[d->running];
                if (!pending(c)) {
                        d->running = -1;
                        continue;
                }
                it = &c->q[(c->done_seq + 1) % ENG_QLEN];
                step = it->left_ns;
                if (step > d->slice_end_ns - d->now_ns)
                        step = d->slice_end_ns - d->now_ns;
                if (step > T - d->now_ns)
                        step = T - d->now_ns;
                if (step) {
                        eng_account(d, d->running, step);
                        it->left_ns -= step;
                        d->now_ns += step;
                }
                if (it->left_ns == 0) {
                        it->done_ns = d->now_ns;
                        if (it->done_ns - it->arrive_ns > c->st.latency_max_ns)
                                c->st.latency_max_ns = it->done_ns - it->arrive_ns;
                        c->st.kernels++;
                        c->done_seq++;
                        if (!pending(c))
                                d->running = -1;
                        continue;
                }
                if (d->now_ns >= d->slice_end_ns) {
                        if (others_pending(d, d->running)) {
                                c->st.preempted++;
                                c->order = ++d->order;
                                d->running = -1;
                        } else {
                                d->slice_end_ns = d->now_ns + slice;
                        }
                        continue;
                }
                return; /* now == T */
        }
}

/* pre: lock held, d advanced to now, kernel seq of client k not done.  When
 * it completes if nothing new arrives (arrivals can only delay it): the
 * round robin played on each client's remaining work. */
static uint64_t eng_predict(const struct eng_dev *d, int k, uint64_t seq, uint64_t slice)
{
        uint64_t rem[ENG_CLIENTS] = { 0 }, t = d->now_ns, budget = slice;
        int line[ENG_CLIENTS + 1], head = 0, tail = 0, n = ENG_CLIENTS + 1, cur = -1;

        for (int j = 0; j < ENG_CLIENTS; j++) {
                const struct eng_client *c = &d->c[j];
                uint64_t last = j == k ? seq : c->next_seq - 1;

                if (!pending(c))
                        continue;
                for (uint64_t s = c->done_seq + 1; s <= last; s++)
                        rem[j] += c->q[s % ENG_QLEN].left_ns;
        }
        /* The line: the others, by order. */
        for (int j = 0; j < ENG_CLIENTS; j++) {
                int pos = tail++;

                if (!pending(&d->c[j]) || j == d->running) {
                        tail--;
                        continue;
                }
                for (; pos > 0 && d->c[line[pos - 1]].order > d->c[j].order; pos--)
                        line[pos] = line[pos - 1];
                line[pos] = j;
        }
        if (d->running >= 0 && pending(&d->c[d->running])) {
                cur = d->running;
                budget = d->slice_end_ns - d->now_ns;
        }
        for (;;) {
                uint64_t run;

                if (cur < 0) {
                        if (head == tail)
                                return t; /* not reached: k is pending */
                        cur = line[head];
                        head = (head + 1) % n;
                        budget = slice;
                }
                if (cur == k && (rem[k] <= budget || head == tail))
                        return t + rem[k];
                run = rem[cur] < budget ? rem[cur] : budget;
                t += run;
                rem[cur] -= run;
                if (rem[cur] == 0) {
                        cur = -1;
                } else if (head != tail) {
                        line[tail] = cur;
                        tail = (tail + 1) % n;
                        cur = -1;
                } else {
                        budget = slice;
                }
        }
}

/* ---- what fakecuda.c calls --------------------------------------------- */

/* pre: lock held.  Client entry of context ctx of this process on d. */
static int eng_client(struct eng_dev *d, uint64_t ctx)
{
        int fr = -1, dead = -1, k;
        struct eng_client *c;
        uint64_t gen;

        for (k = 0; k < ENG_CLIENTS; k++) {
                c = &d->c[k];
                if (c->state == CL_LIVE && c->proc == l_proc && c->proc_gen == l_proc_gen && c->ctx == ctx)
                        return k;
                if (c->state == CL_FREE && fr < 0)
                        fr = k;
                if (c->state == CL_DEAD && dead < 0)
                        dead = k;
        }
        k = fr >= 0 ? fr : dead;
        if (k < 0)
                return -1;
        c = &d->c[k];
        gen = c->gen + 1;
        memset(c, 0, offsetof(struct eng_client, q));
        c->gen = gen;
        c->state = CL_LIVE;
        c->proc = l_proc;
        c->proc_gen = l_proc_gen;
        c->ctx = ctx;
        c->next_seq = 1;
        c->st.pid = (int32_t)getpid();
        c->st.live = 1;
        c->st.ctx = ctx;
        return k;
}

int fc_engine_submit(int dev, uint64_t ctx, uint32_t dur_us, struct fc_eng_ticket *t)
{
        struct eng_shared *e = eng_open();
        struct eng_dev *d;
        struct eng_client *c;
        struct eng_item *it;
        int k;

        if (!e)
                return -EIO;
        if (dev < 0 || dev >= FC_MAX_DEV || dur_us > FC_ENG_MAX_US)
                return -EINVAL;
        if (eng_register(e) < 0)
                return -ENOSPC;
        eng_lock(e);
        d = &e->dev[dev];
        eng_advance(d, eng_now(e), e->slice_ns);
        k = eng_client(d, ctx);
        if (k < 0) {
                eng_unlock(e);
                return -ENOSPC;
        }
        c = &d->c[k];
        if (c->next_seq - c->retired > ENG_QLEN) {
                eng_unlock(e);
                return -EAGAIN;
        }
        if (!pending(c))
                c->order = ++d->order;
        it = &c->q[c->next_seq % ENG_QLEN];
        it->seq = c->next_seq;
        it->left_ns = (uint64_t)dur_us * 1000;
        it->arrive_ns = d->now_ns;
        it->done_ns = 0;
        *t = (struct fc_eng_ticket){ .dev = dev, .idx = k, .gen = c->gen, .seq = c->next_seq };
        c->next_seq++;
        eng_unlock(e);
        return 0;
}

int fc_engine_wait(const struct fc_eng_ticket *t, uint64_t *done_ns)
{
        struct eng_shared *e = eng_open();

        if (!e)
                return -EIO;
        for (;;) {
                struct eng_dev *d = &e->dev[t->dev];
                struct eng_client *c = &d->c[t->idx];
                uint64_t sleep_ns = ENG_MAX_SLEEP_NS;
                struct timespec ts;
                uint32_t seen;

                eng_lock(e);
                eng_advance(d, eng_now(e), e->slice_ns);
                if (c->gen != t->gen || c->state != CL_LIVE) {
                        eng_unlock(e);
                        return -ESRCH;
                }
                if (c->done_seq >= t->seq) {
                        *done_ns = c->q[t->seq % ENG_QLEN].done_ns;
                        if (c->retired < t->seq)
                                c->retired = t->seq;
                        eng_unlock(e);
                        return 0;
                }
                seen = __atomic_load_n(&e->wake, __ATOMIC_SEQ_CST);
                if (!e->nheld) {
                        uint64_t at = eng_predict(d, t->idx, t->seq, e->slice_ns);

                        if (at - d->now_ns < sleep_ns)
                                sleep_ns = at > d->now_ns ? at - d->now_ns : 1000;
                }
                eng_unlock(e);
                ts.tv_sec = (time_t)(sleep_ns / 1000000000ull);
                ts.tv_nsec = (long)(sleep_ns % 1000000000ull);
                (void)syscall(SYS_futex, &e->wake, FUTEX_WAIT, seen, &ts, NULL, 0);
        }
}

uint64_t fc_engine_now_ns(void)
{
        struct eng_shared *e = eng_open();
        uint64_t t;

        if (!e)
                return mono_ns();
        eng_lock(e);
        t = eng_now(e);
        eng_unlock(e);
        return t;
}

/* ---- the test API ------------------------------------------------------ */

int fakecuda_engine_stats(int dev, struct fakecuda_engine_stat *out, int max)
{
        struct eng_shared *e = eng_open();
        struct eng_dev *d;
        int n = 0;

        if (!e || dev < 0 || dev >= FC_MAX_DEV)
                return -1;
        eng_lock(e);
        d = &e->dev[dev];
        eng_advance(d, eng_now(e), e->slice_ns);
        for (int k = 0; k < ENG_CLIENTS; k++) {
                const struct eng_client *c = &d->c[k];

                if (c->state == CL_FREE)
                        continue;
                if (n < max) {
                        out[n] = c->st;
                        out[n].queued = c->state == CL_LIVE ? c->next_seq - 1 - c->done_seq : 0;
                }
                n++;
        }
        eng_unlock(e);
        return n;
}

int fakecuda_engine_pid_stat(int dev, int32_t pid, struct fakecuda_engine_stat *out)
{
        struct fakecuda_engine_stat st[ENG_CLIENTS];
        int n = fakecuda_engine_stats(dev, st, ENG_CLIENTS), k = 0;

        memset(out, 0, sizeof(*out));
        out->pid = pid;
        for (int i = 0; i < n; i++) {
                if (st[i].pid != pid)
                        continue;
                k++;
                out->live |= st[i].live;
                out->gpu_ns += st[i].gpu_ns;
                out->contended_ns += st[i].contended_ns;
                out->wait_ns += st[i].wait_ns;
                out->kernels += st[i].kernels;
                out->queued += st[i].queued;
                out->dropped += st[i].dropped;
                out->turns += st[i].turns;
                out->preempted += st[i].preempted;
                if (st[i].latency_max_ns > out->latency_max_ns)
                        out->latency_max_ns = st[i].latency_max_ns;
        }
        out->ctx = (uint64_t)k;
        return n < 0 ? -1 : k;
}

uint64_t fakecuda_engine_now(void)
{
        return fc_engine_now_ns();
}

int fakecuda_engine_hold(int hold)
{
        struct eng_shared *e = eng_open();
        struct eng_proc *p;
        int i;

        if (!e || (i = eng_register(e)) < 0)
                return -1;
        eng_lock(e);
        p = &e->procs[i];
        if (hold && !p->hold) {
                p->hold = 1;
                if (e->nheld++ == 0)
                        e->held_at = mono_ns();
        } else if (!hold && p->hold) {
                p->hold = 0;
                if (--e->nheld == 0) {
                        e->held_total += mono_ns() - e->held_at;
                        e->held_at = 0;
                }
                eng_wake(e);
        }
        eng_unlock(e);
        return 0;
}

uint32_t fakecuda_engine_timeslice_us(void)
{
        struct eng_shared *e = eng_open();

        return e ? (uint32_t)(e->slice_ns / 1000) : FC_ENG_DEFAULT_SLICE_US;
}
