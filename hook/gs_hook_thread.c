/* gs_hook_thread.c — the hook's thread: what it waits on, what it does
 * when woken, how it starts.  See gs_hook_thread.h. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "gs_hook_qos.h"
#include "gs_hook_space.h"
#include "gs_hook_spill.h"
#include "gs_hook_thread.h"

#define GS_THREAD_OLD_AGENT_MS 1000  /* an agent without GS_FEAT_NOTIFY: looked at this often */
#define GS_THREAD_RETRY_MS 5         /* LOST: tries again this long after the loss, */
#define GS_THREAD_RETRY_WAIT_MS 160  /* doubling to this within $GSHARE_AGENT_WAIT */
#define GS_THREAD_RETRY_MAX_MS 10000 /* and to this after it */

static int g_started;                      /* gs_conn.mu */
static int g_kick = -1;                    /* eventfd; gs_conn.mu to make, written by gs_thread_kick */
static uint64_t g_notify_gen = UINT64_MAX; /* gs_conn.reconnects when GS_OP_NOTIFY was asked (gs_conn.mu) */
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;

/* Only the forking thread lives on in the child: it starts its own thread
 * (and makes its own kick) when it holds chunks again. */
static void gs_thread_child(void)
{
        gs_closep(&g_kick);
        g_started = 0;
        g_notify_gen = UINT64_MAX;
}

static void gs_thread_fork_register(void)
{
        (void)pthread_atfork(NULL, NULL, gs_thread_child);
}

void gs_thread_kick(void)
{
        uint64_t one = 1;

        /* EAGAIN: the counter is full, a wake-up is pending anyway. */
        if (g_kick >= 0 && write(g_kick, &one, sizeof(one)) < 0) {
        }
}

/* Reads an eventfd that poll() says is readable, without blocking: 0, or
 * -1 if it is not an eventfd after all. */
static int gs_thread_drain(int fd)
{
        struct pollfd p = { .fd = fd, .events = POLLIN };
        uint64_t v;

        if (fd < 0 || poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN))
                return 0;
        return read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v) || errno == EAGAIN ? 0 : -1;
}

/* pre: gs_conn.mu held, UP.  The agent's notification eventfd, asked once
 * per connection (GS_OP_NOTIFY). */
static void gs_thread_take_notify(void)
{
        struct gs_ring_msg rep;
        struct gs_sock_grant m;
        ssize_t n;
        int fd = -1;

        if (gs_conn.notify >= 0 || !(gs_conn.features & GS_FEAT_NOTIFY) || g_notify_gen == gs_conn.reconnects)
                return;
        g_notify_gen = gs_conn.reconnects;
        if (gs_conn_call(GS_OP_NOTIFY, 0, 0, 0, &rep) < 0)
                return; /* the connection is gone */
        if (rep.status != 0) {
                gs_hook_debug("the agent refused GS_OP_NOTIFY: %d", rep.status);
                return;
        }
        n = gs_conn_recv_fd(&m, sizeof(m), &fd);
        if (n < 0 || !gs_msg_hdr_ok(&m.h, GS_SOCK_NOTIFY, sizeof(m), n) || fd < 0 || m.seq != rep.seq) {
                gs_closep(&fd);
                gs_conn_lost("malformed notification");
                return;
        }
        gs_conn.notify = fd;
}

/* pre: gs_conn.mu held, UP.  What the agent asked since the last look. */
static void gs_thread_serve(const struct gs_cu *cu)
{
        if (gs_conn_hung_up()) {
                gs_conn_broken("the agent closed the connection");
                return;
        }
        if (gs_thread_drain(gs_conn.notify) < 0) {
                gs_hook_debug("the agent's notification fd is not an eventfd: looking once a second");
                gs_closep(&gs_conn.notify);
        }
        gs_thread_take_notify();
        if (gs_conn.state == GS_CONN_UP) {
                gs_qos_serve();
                gs_qos_publish();
        }
        if (!cu || gs_conn.state != GS_CONN_UP)
                return;
        gs_space_give_back_if_asked(cu);
        gs_spill_serve(cu);
}

static void *gs_thread_main(void *arg)
{
        int retry_ms = GS_THREAD_RETRY_MS;

        (void)arg;
        (void)pthread_setname_np(pthread_self(), "gshare-hook");
        gs_conn_no_wait();
        for (;;) {
                const struct gs_cu *cu = gs_cu_get();
                struct pollfd pf[3];
                int n = 0, timeout = -1, kick;

                pthread_mutex_lock(&gs_conn.mu);
                if (gs_conn.state == GS_CONN_LOST && gs_conn_retry())
                        retry_ms = GS_THREAD_RETRY_MS;
                if (gs_conn.state == GS_CONN_UP)
                        gs_thread_serve(cu);
                if (gs_conn.state == GS_CONN_DOWN) {
                        /* For good: no agent will ask again. */
                        pthread_mutex_unlock(&gs_conn.mu);
                        return NULL;
                }
                if (gs_conn.state == GS_CONN_UP) {
                        retry_ms = GS_THREAD_RETRY_MS;
                        pf[n++] = (struct pollfd){ .fd = gs_conn.sock, .events = POLLRDHUP };
                        if (gs_conn.notify >= 0)
                                pf[n++] = (struct pollfd){ .fd = gs_conn.notify, .events = POLLIN };
                        else
                                timeout = GS_THREAD_OLD_AGENT_MS;
                        if (gs_qos_publish_ms() >= 0 && (timeout < 0 || gs_qos_publish_ms() < timeout))
                                timeout = gs_qos_publish_ms();
                } else if (gs_conn.state == GS_CONN_LOST) {
                        int cap = (uint64_t)gs_mono_ns() - gs_conn.lost_ns < gs_conn.wait_ns ? GS_THREAD_RETRY_WAIT_MS
                                                                                             : GS_THREAD_RETRY_MAX_MS;
                        timeout = retry_ms < cap ? retry_ms : cap;
                        retry_ms = timeout * 2;
                }
                kick = g_kick;
                pf[n++] = (struct pollfd){ .fd = kick, .events = POLLIN };
                pthread_mutex_unlock(&gs_conn.mu);
                /* The connection's fds are closed only after a kick, which
                 * ends this wait: a number reused meanwhile is never read. */
                (void)poll(pf, (nfds_t)n, timeout);
                (void)gs_thread_drain(kick);
        }
}

/* The connection's events (gs_hook_conn.h): the thread is woken at each;
 * a connection up with an agent that may lend this process chunks arms
 * the gate and starts the thread, its mover. */
static void gs_thread_on_conn(enum gs_conn_event ev)
{
        gs_thread_kick();
        if (ev == GS_CONN_EV_UP && (gs_conn.features & GS_FEAT_SPILL)) {
                gs_spill_start();
                gs_thread_start();
        }
        /* Compute QoS: the thread asks for the policy (gs_hook_qos.h). */
        if (ev == GS_CONN_EV_UP && (gs_conn.features & GS_FEAT_QOS))
                gs_thread_start();
}

/* Wiring, at load: the connection and the address space are below this
 * module and tell it through callbacks (they call none of their users). */
__attribute__((constructor)) static void gs_thread_wire(void)
{
        gs_conn_set_event_fn(gs_thread_on_conn);
        gs_qos_set_wake_fn(gs_thread_kick);
        gs_space_set_on_reserved(gs_thread_start);
}

void gs_thread_start(void)
{
        sigset_t all, old;
        pthread_attr_t attr;
        pthread_t t;
        int rc;

        if (g_started)
                return;
        g_started = 1; /* once: a thread that cannot start is not tried at every call */
        pthread_once(&g_fork_once, gs_thread_fork_register);
        if (g_kick < 0)
                g_kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        rc = g_kick < 0 ? errno : 0;
        /* Signals are the application's: the thread takes none. */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        if (rc == 0)
                rc = pthread_attr_init(&attr);
        if (rc == 0) {
                (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                rc = pthread_create(&t, &attr, gs_thread_main, NULL);
                pthread_attr_destroy(&attr);
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0)
                gs_hook_say_once(GS_ONCE_MOVER,
                                 "cannot start the hook's thread (%s): this process gives memory "
                                 "back only at its CUDA memory calls, and borrowed chunks stay on the GPU",
                                 strerror(rc));
}
