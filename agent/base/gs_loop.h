/* gs_loop.h — the agent's reactor: one epoll loop on the main thread.
 *
 * Every source carries its own callback and data, so the loop knows no
 * client module (models: systemd's sd-event, Valkey's ae.h, libuv):
 *
 *   io      an fd and the events wanted; the callback gets what is ready.
 *   timer   a deadline; the callback does what is due and returns its next
 *           deadline (or GS_LOOP_NEVER).  An owner that makes an earlier
 *           deadline arms the timer again.
 *   post    work that runs once after the current batch of events, however
 *           often it was posted during it (one batch of changes, one
 *           broadcast).
 *   async   a post that any thread may send; the loop's eventfd wakes it.
 *
 * An io removed during a batch gets no more events from that batch, and
 * memory handed to gs_loop_defer_free is freed after it (later events of
 * the batch may still point at it).
 *
 * Threads: everything here runs on, and is called from, the thread that
 * runs the loop, except gs_loop_async_send. */
#ifndef GS_LOOP_H
#define GS_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "gs_util.h"

#define GS_LOOP_NEVER INT64_MAX

struct gs_loop;

typedef void (*gs_loop_io_fn)(void *data, uint32_t events);
/* now: CLOCK_MONOTONIC ms.  Returns the next deadline, or GS_LOOP_NEVER. */
typedef int64_t (*gs_loop_timer_fn)(void *data, int64_t now);
typedef void (*gs_loop_post_fn)(void *data);

/* Embedded by their owners; zero them before the first use. */
struct gs_loop_io {
        gs_loop_io_fn fn;
        void *data;
        int fd;
        uint32_t events; /* as registered */
        bool dead;       /* removed: ignore what is left of the batch */
};

struct gs_loop_timer {
        struct gs_loop_timer *next;
        gs_loop_timer_fn fn;
        void *data;
        int64_t due; /* GS_LOOP_NEVER: disarmed */
};

struct gs_loop_post {
        struct gs_loop_post *next;
        gs_loop_post_fn fn;
        void *data;
        bool queued;
};

struct gs_loop_async {
        struct gs_loop_async *next;
        gs_loop_post_fn fn;
        void *data;
        int pending; /* atomic */
};

int gs_loop_new(struct gs_loop **ret) GS_WUR;
/* Frees the loop and what is waiting in its deferred-free list.  Sources
 * must be gone.  NULL is fine. */
void gs_loop_free(struct gs_loop *l);

/* Runs batches until gs_loop_stop.  Returns 0, or a negative errno if
 * epoll failed. */
int gs_loop_run(struct gs_loop *l) GS_WUR;
void gs_loop_stop(struct gs_loop *l);

int gs_loop_io_add(struct gs_loop *l, struct gs_loop_io *io, int fd, uint32_t events, gs_loop_io_fn fn,
                   void *data) GS_WUR;
/* Changes the events wanted (a no-op when they are the same). */
int gs_loop_io_set(struct gs_loop *l, struct gs_loop_io *io, uint32_t events) GS_WUR;
/* Stops watching io (the fd stays open: the owner closes it). */
void gs_loop_io_del(struct gs_loop *l, struct gs_loop_io *io);

/* Registers a timer, disarmed.  gs_loop_timer_arm(due): the timer runs at
 * due at the latest (an earlier deadline already armed stands). */
void gs_loop_timer_add(struct gs_loop *l, struct gs_loop_timer *t, gs_loop_timer_fn fn, void *data);
void gs_loop_timer_arm(struct gs_loop_timer *t, int64_t due);
void gs_loop_timer_del(struct gs_loop *l, struct gs_loop_timer *t);

/* p->fn(p->data) once after the current batch.  p must stay alive until
 * it ran or gs_loop_post_cancel. */
void gs_loop_post(struct gs_loop *l, struct gs_loop_post *p, gs_loop_post_fn fn, void *data);
void gs_loop_post_cancel(struct gs_loop *l, struct gs_loop_post *p);

/* Registers an async source (loop thread, before other threads may send). */
void gs_loop_async_add(struct gs_loop *l, struct gs_loop_async *a, gs_loop_post_fn fn, void *data);
/* Unregisters (loop thread, once no other thread may send). */
void gs_loop_async_del(struct gs_loop *l, struct gs_loop_async *a);
/* Any thread: a->fn runs on the loop thread soon, once however many sends
 * came before it ran.  Never blocks, never fails. */
void gs_loop_async_send(struct gs_loop *l, struct gs_loop_async *a);

/* free(p) after the current batch. */
void gs_loop_defer_free(struct gs_loop *l, void *p);

#endif
