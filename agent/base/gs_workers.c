/* gs_workers.c — see gs_workers.h.
 *
 * A process (its gs_wentry) is in one of these states, changed under mu:
 *   IDLE     its doorbell is armed in the epoll set (EPOLLONESHOT)
 *   QUEUED   in its allocation's queue, waiting for a thread
 *   RUNNING  a thread serves it (mu not held meanwhile)
 *   DEAD     its connection broke; nothing serves it until it is removed
 * An epoll event names a slot and its generation, never a pointer: an event
 * that a thread took out of epoll_wait just before the main thread removed
 * the process finds the slot's generation changed and is ignored. */
#include "gs_workers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "gs_log.h"

enum { W_IDLE = 0, W_QUEUED, W_RUNNING, W_DEAD };

#define KICK_SLOT UINT32_MAX

struct wslot {
        struct gs_wentry *e; /* NULL: free */
        uint32_t gen;
        uint32_t next_free;
};

struct gs_workers {
        gs_workers_turn_fn turn;
        int ep;   /* doorbells of IDLE processes, and kick */
        int kick; /* eventfd: work queued, or stopping */
        pthread_mutex_t mu;
        pthread_cond_t cv;                       /* a RUNNING process stopped running */
        struct gs_wgroup *line_head, *line_tail; /* groups with work */
        uint32_t nqueued;                        /* QUEUED processes (atomic reads) */
        uint32_t nidle;                          /* threads in epoll_wait */
        uint32_t per_group;                      /* threads one group may hold */
        struct wslot *slots;
        uint32_t nslots, free_head;
        bool stopping;
        pthread_t *thr;
        uint32_t nthr;
};

static void kick(struct gs_workers *w)
{
        uint64_t one = 1;

        if (write(w->kick, &one, sizeof(one)) < 0) {
                /* EAGAIN: the counter is full, a wake-up is pending anyway. */
        }
}

/* pre: mu.  Re-arms e's doorbell (one event, to one thread). */
static void arm(struct gs_workers *w, struct gs_wentry *e)
{
        struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.u64 = (uint64_t)e->gen << 32 | e->slot };

        e->state = W_IDLE;
        if (epoll_ctl(w->ep, EPOLL_CTL_MOD, e->fd, &ev) < 0)
                log_error("cannot re-arm doorbell fd %d: %m", e->fd);
}

/* pre: mu.  Puts g, not in line, at the back of the line. */
static void line_push(struct gs_workers *w, struct gs_wgroup *g)
{
        g->queued = true;
        g->next = NULL;
        if (w->line_tail)
                w->line_tail->next = g;
        else
                w->line_head = g;
        w->line_tail = g;
}

/* pre: mu.  Appends e to its group's queue and the group to the line. */
static void enqueue(struct gs_workers *w, struct gs_wentry *e)
{
        struct gs_wgroup *g = e->grp;

        e->state = W_QUEUED;
        e->next = NULL;
        if (g->tail)
                g->tail->next = e;
        else
                g->head = e;
        g->tail = e;
        __atomic_add_fetch(&w->nqueued, 1, __ATOMIC_RELAXED);
        if (!g->queued)
                line_push(w, g);
}

/* pre: mu.  Takes g out of the line. */
static void line_remove(struct gs_workers *w, struct gs_wgroup *g)
{
        struct gs_wgroup *prev = NULL;

        for (struct gs_wgroup *x = w->line_head; x; prev = x, x = x->next)
                if (x == g) {
                        if (prev)
                                prev->next = g->next;
                        else
                                w->line_head = g->next;
                        if (w->line_tail == g)
                                w->line_tail = prev;
                        break;
                }
        g->queued = false;
}

/* pre: mu.  Unlinks a QUEUED e (removal).  A group left without queued
 * processes leaves the line: its allocation may be freed once its last
 * process is removed. */
static void dequeue_entry(struct gs_workers *w, struct gs_wentry *e)
{
        struct gs_wgroup *g = e->grp;
        struct gs_wentry *prev = NULL;

        for (struct gs_wentry *x = g->head; x; prev = x, x = x->next)
                if (x == e) {
                        if (prev)
                                prev->next = e->next;
                        else
                                g->head = e->next;
                        if (g->tail == e)
                                g->tail = prev;
                        __atomic_sub_fetch(&w->nqueued, 1, __ATOMIC_RELAXED);
                        break;
                }
        if (!g->head && g->queued)
                line_remove(w, g);
}

/* pre: mu.  The next process to serve: the first group in line that may
 * take another thread gives its first process; the group goes to the back
 * of the line if it has more.  NULL if none. */
static struct gs_wentry *pick(struct gs_workers *w)
{
        struct gs_wgroup **pp = &w->line_head, *prev = NULL;

        for (struct gs_wgroup *g = w->line_head; g; prev = g, pp = &g->next, g = g->next) {
                struct gs_wentry *e;

                if (g->busy >= w->per_group)
                        continue;
                e = g->head;
                g->head = e->next;
                if (!g->head)
                        g->tail = NULL;
                __atomic_sub_fetch(&w->nqueued, 1, __ATOMIC_RELAXED);
                *pp = g->next;
                if (w->line_tail == g)
                        w->line_tail = prev;
                g->queued = false;
                if (g->head)
                        line_push(w, g); /* its next turn after the others' */
                return e;
        }
        return NULL;
}

/* pre: mu held; e RUNNING on this thread.  Serves it, then files it. */
static void run(struct gs_workers *w, struct gs_wentry *e)
{
        enum gs_turn how;

        e->state = W_RUNNING;
        e->grp->busy++;
        pthread_mutex_unlock(&w->mu);
        how = w->turn(e->item, GS_WORKERS_BUDGET, &w->nqueued);
        pthread_mutex_lock(&w->mu);
        e->grp->busy--;
        if (e->removing) {
                e->state = W_DEAD;
                pthread_cond_broadcast(&w->cv);
        } else if (how == GS_TURN_DEAD) {
                e->state = W_DEAD;
        } else if (how == GS_TURN_MORE) {
                enqueue(w, e);
                if (w->nidle)
                        kick(w); /* others may take what this thread does not */
        } else {
                arm(w, e);
        }
        /* This group may take a thread again: an idle one should look. */
        if (e->grp->head && w->nidle)
                kick(w);
}

static void *worker(void *arg)
{
        struct gs_workers *w = arg;

        (void)pthread_setname_np(pthread_self(), "gshare-worker"); /* ps, top, the tests */
        pthread_mutex_lock(&w->mu);
        while (!w->stopping) {
                struct epoll_event ev;
                struct gs_wentry *e = pick(w);
                uint32_t slot, gen;
                int n;

                if (e) {
                        run(w, e);
                        continue;
                }
                w->nidle++;
                pthread_mutex_unlock(&w->mu);
                n = epoll_wait(w->ep, &ev, 1, -1);
                pthread_mutex_lock(&w->mu);
                w->nidle--;
                if (n <= 0)
                        continue;
                slot = (uint32_t)ev.data.u64;
                gen = (uint32_t)(ev.data.u64 >> 32);
                if (slot == KICK_SLOT) {
                        uint64_t v;
                        struct epoll_event re = { .events = EPOLLIN | EPOLLONESHOT, .data.u64 = KICK_SLOT };
                        if (!w->stopping && read(w->kick, &v, sizeof(v)) < 0) {
                                /* another thread drained it */
                        }
                        /* Stopping: leave it readable, so each thread sees it. */
                        (void)epoll_ctl(w->ep, EPOLL_CTL_MOD, w->kick, &re);
                        continue;
                }
                if (slot >= w->nslots || w->slots[slot].gen != gen || !(e = w->slots[slot].e) || e->state != W_IDLE ||
                    e->removing)
                        continue; /* removed meanwhile */
                if (e->grp->busy >= w->per_group)
                        enqueue(w, e);
                else
                        run(w, e);
        }
        pthread_mutex_unlock(&w->mu);
        return NULL;
}

int gs_workers_new(gs_workers_turn_fn turn, uint32_t nthreads, uint32_t max_procs, struct gs_workers **ret, char *err,
                   size_t errlen)
{
        struct gs_workers *w = calloc(1, sizeof(*w));
        struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.u64 = KICK_SLOT };
        int r;

        if (!w || !(w->slots = calloc(max_procs ? max_procs : 1, sizeof(*w->slots))) ||
            !(w->thr = calloc(nthreads ? nthreads : 1, sizeof(*w->thr)))) {
                snprintf(err, errlen, "out of memory for %u worker slots", max_procs);
                r = -ENOMEM;
                goto fail;
        }
        w->turn = turn;
        w->kick = -1;
        w->nslots = max_procs;
        for (uint32_t i = 0; i < max_procs; i++)
                w->slots[i].next_free = i + 1;
        w->per_group = (nthreads + 1) / 2;
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        w->ep = epoll_create1(EPOLL_CLOEXEC);
        w->kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (w->ep < 0 || w->kick < 0 || epoll_ctl(w->ep, EPOLL_CTL_ADD, w->kick, &ev) < 0) {
                r = gs_neg_errno();
                snprintf(err, errlen, "worker pool: epoll/eventfd: %s", strerror(-r));
                goto fail;
        }
        for (; w->nthr < nthreads; w->nthr++) {
                r = pthread_create(&w->thr[w->nthr], NULL, worker, w);
                if (r) {
                        snprintf(err, errlen, "cannot start worker thread %u of %u: %s", w->nthr + 1, nthreads,
                                 strerror(r));
                        r = -r;
                        goto fail;
                }
        }
        *ret = w;
        return 0;
fail:
        gs_workers_free(w);
        return r;
}

void gs_workers_free(struct gs_workers *w)
{
        if (!w)
                return;
        if (w->nthr) {
                pthread_mutex_lock(&w->mu);
                w->stopping = true;
                pthread_mutex_unlock(&w->mu);
                kick(w);
                for (uint32_t i = 0; i < w->nthr; i++)
                        pthread_join(w->thr[i], NULL);
        }
        if (w->ep >= 0 || w->kick >= 0) {
                gs_closep(&w->ep);
                gs_closep(&w->kick);
        }
        if (w->slots) {
                pthread_mutex_destroy(&w->mu);
                pthread_cond_destroy(&w->cv);
        }
        free(w->thr);
        free(w->slots);
        free(w);
}

int gs_workers_add(struct gs_workers *w, struct gs_wentry *e, void *item, struct gs_wgroup *grp, int fd, int *stop)
{
        struct epoll_event ev;
        uint32_t slot;
        int r = 0;

        pthread_mutex_lock(&w->mu);
        slot = w->free_head;
        if (slot >= w->nslots) {
                r = -ENOSPC;
                goto out;
        }
        memset(e, 0, sizeof(*e));
        e->item = item;
        e->grp = grp;
        e->fd = fd;
        e->stop = stop;
        e->slot = slot;
        e->gen = ++w->slots[slot].gen;
        e->state = W_IDLE;
        ev = (struct epoll_event){ .events = EPOLLIN | EPOLLONESHOT, .data.u64 = (uint64_t)e->gen << 32 | slot };
        if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
                r = gs_neg_errno();
                e->item = NULL;
                goto out;
        }
        w->free_head = w->slots[slot].next_free;
        w->slots[slot].e = e;
out:
        pthread_mutex_unlock(&w->mu);
        return r;
}

void gs_workers_remove(struct gs_workers *w, struct gs_wentry *e)
{
        if (e->stop)
                __atomic_store_n(e->stop, 1, __ATOMIC_RELEASE);
        if (!w || !e->item)
                return;
        pthread_mutex_lock(&w->mu);
        e->removing = true;
        (void)epoll_ctl(w->ep, EPOLL_CTL_DEL, e->fd, NULL);
        if (e->state == W_QUEUED)
                dequeue_entry(w, e);
        while (e->state == W_RUNNING)
                pthread_cond_wait(&w->cv, &w->mu);
        /* An event already taken out of epoll_wait names this generation:
         * a new one makes it stale. */
        w->slots[e->slot].gen++;
        w->slots[e->slot].e = NULL;
        w->slots[e->slot].next_free = w->free_head;
        w->free_head = e->slot;
        e->item = NULL;
        pthread_mutex_unlock(&w->mu);
}
