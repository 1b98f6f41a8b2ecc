/* gs_loop.c — see gs_loop.h. */
#include "gs_loop.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "gs_log.h"

#define BATCH 64

struct gs_loop {
        int epfd;
        int wakefd; /* eventfd: gs_loop_async_send */
        struct gs_loop_io wake_io;
        bool stopping;
        struct gs_loop_timer *timers;
        struct gs_loop_post *posts, **posts_tail;
        struct gs_loop_async *asyncs;
        void **grave; /* gs_loop_defer_free */
        size_t ngrave, capgrave;
};

static void on_wake(void *data, uint32_t events)
{
        struct gs_loop *l = data;
        uint64_t v;

        (void)events;
        if (read(l->wakefd, &v, sizeof(v)) < 0) {
                /* EAGAIN: woken already, the flags below say for what. */
        }
        for (struct gs_loop_async *a = l->asyncs; a; a = a->next)
                if (__atomic_exchange_n(&a->pending, 0, __ATOMIC_ACQ_REL))
                        a->fn(a->data);
}

int gs_loop_new(struct gs_loop **ret)
{
        struct gs_loop *l = calloc(1, sizeof(*l));
        int r;

        if (!l)
                return -ENOMEM;
        l->posts_tail = &l->posts;
        l->epfd = epoll_create1(EPOLL_CLOEXEC);
        l->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (l->epfd < 0 || l->wakefd < 0) {
                r = gs_neg_errno();
                goto fail;
        }
        r = gs_loop_io_add(l, &l->wake_io, l->wakefd, EPOLLIN, on_wake, l);
        if (r < 0)
                goto fail;
        *ret = l;
        return 0;
fail:
        gs_closep(&l->epfd);
        gs_closep(&l->wakefd);
        free(l);
        return r;
}

static void flush_grave(struct gs_loop *l)
{
        for (size_t i = 0; i < l->ngrave; i++)
                free(l->grave[i]);
        l->ngrave = 0;
}

void gs_loop_free(struct gs_loop *l)
{
        if (!l)
                return;
        flush_grave(l);
        free(l->grave);
        gs_closep(&l->epfd);
        gs_closep(&l->wakefd);
        free(l);
}

void gs_loop_stop(struct gs_loop *l)
{
        l->stopping = true;
}

/* Runs the timers that are due; returns the epoll timeout to the next. */
static int run_timers(struct gs_loop *l)
{
        int64_t now = gs_mono_ms(), next = GS_LOOP_NEVER;

        for (struct gs_loop_timer *t = l->timers; t; t = t->next) {
                if (t->due <= now) {
                        t->due = GS_LOOP_NEVER;
                        gs_loop_timer_arm(t, t->fn(t->data, now));
                }
                if (t->due < next)
                        next = t->due;
        }
        if (next == GS_LOOP_NEVER)
                return -1;
        now = gs_mono_ms();
        return next <= now ? 0 : next - now > INT32_MAX ? INT32_MAX : (int)(next - now);
}

static void run_posts(struct gs_loop *l)
{
        /* Posts made by a post run in the same pass. */
        while (l->posts) {
                struct gs_loop_post *p = l->posts;

                l->posts = p->next;
                if (!l->posts)
                        l->posts_tail = &l->posts;
                p->queued = false;
                p->fn(p->data);
        }
}

int gs_loop_run(struct gs_loop *l)
{
        struct epoll_event evs[BATCH];

        while (!l->stopping) {
                int timeout = run_timers(l);
                int n;

                run_posts(l);
                flush_grave(l);
                if (l->stopping)
                        break;
                n = epoll_wait(l->epfd, evs, BATCH, l->posts ? 0 : timeout);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        log_error("epoll_wait: %m");
                        return gs_neg_errno();
                }
                for (int i = 0; i < n; i++) {
                        struct gs_loop_io *io = evs[i].data.ptr;

                        if (!io->dead)
                                io->fn(io->data, evs[i].events);
                }
                run_posts(l);
                flush_grave(l);
        }
        return 0;
}

int gs_loop_io_add(struct gs_loop *l, struct gs_loop_io *io, int fd, uint32_t events, gs_loop_io_fn fn, void *data)
{
        struct epoll_event e = { .events = events, .data.ptr = io };

        *io = (struct gs_loop_io){ .fn = fn, .data = data, .fd = fd, .events = events };
        return epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &e) < 0 ? gs_neg_errno() : 0;
}

int gs_loop_io_set(struct gs_loop *l, struct gs_loop_io *io, uint32_t events)
{
        struct epoll_event e = { .events = events, .data.ptr = io };

        if (events == io->events)
                return 0;
        if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, io->fd, &e) < 0)
                return gs_neg_errno();
        io->events = events;
        return 0;
}

void gs_loop_io_del(struct gs_loop *l, struct gs_loop_io *io)
{
        if (io->fd >= 0 && !io->dead)
                (void)epoll_ctl(l->epfd, EPOLL_CTL_DEL, io->fd, NULL);
        io->dead = true;
}

void gs_loop_timer_add(struct gs_loop *l, struct gs_loop_timer *t, gs_loop_timer_fn fn, void *data)
{
        *t = (struct gs_loop_timer){ .next = l->timers, .fn = fn, .data = data, .due = GS_LOOP_NEVER };
        l->timers = t;
}

void gs_loop_timer_arm(struct gs_loop_timer *t, int64_t due)
{
        if (due < t->due)
                t->due = due;
}

void gs_loop_timer_del(struct gs_loop *l, struct gs_loop_timer *t)
{
        for (struct gs_loop_timer **pp = &l->timers; *pp; pp = &(*pp)->next)
                if (*pp == t) {
                        *pp = t->next;
                        return;
                }
}

void gs_loop_post(struct gs_loop *l, struct gs_loop_post *p, gs_loop_post_fn fn, void *data)
{
        if (p->queued)
                return;
        p->fn = fn;
        p->data = data;
        p->next = NULL;
        p->queued = true;
        *l->posts_tail = p;
        l->posts_tail = &p->next;
}

void gs_loop_post_cancel(struct gs_loop *l, struct gs_loop_post *p)
{
        if (!p->queued)
                return;
        l->posts_tail = &l->posts;
        for (struct gs_loop_post **pp = &l->posts; *pp;) {
                if (*pp == p) {
                        *pp = p->next;
                        continue;
                }
                l->posts_tail = &(*pp)->next;
                pp = &(*pp)->next;
        }
        p->queued = false;
}

void gs_loop_async_add(struct gs_loop *l, struct gs_loop_async *a, gs_loop_post_fn fn, void *data)
{
        *a = (struct gs_loop_async){ .next = l->asyncs, .fn = fn, .data = data };
        l->asyncs = a;
}

void gs_loop_async_del(struct gs_loop *l, struct gs_loop_async *a)
{
        for (struct gs_loop_async **pp = &l->asyncs; *pp; pp = &(*pp)->next)
                if (*pp == a) {
                        *pp = a->next;
                        return;
                }
}

void gs_loop_async_send(struct gs_loop *l, struct gs_loop_async *a)
{
        uint64_t one = 1;

        if (__atomic_exchange_n(&a->pending, 1, __ATOMIC_ACQ_REL))
                return; /* a wake-up is on its way */
        if (write(l->wakefd, &one, sizeof(one)) < 0) {
                /* EAGAIN: the counter is full, a wake-up is pending anyway. */
        }
}

void gs_loop_defer_free(struct gs_loop *l, void *p)
{
        if (l->ngrave == l->capgrave) {
                size_t cap = l->capgrave ? l->capgrave * 2 : 64;
                void **np = realloc(l->grave, cap * sizeof(*np));
                if (!np)
                        return; /* leak one object rather than risk a use after free */
                l->grave = np;
                l->capgrave = cap;
        }
        l->grave[l->ngrave++] = p;
}
