/* gs_agent.c — the agent's main-loop services shared by its modules (see
 * gs_agent.h); main() is in gs_agent_main.c. */
#include "gs_agent.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "gs_allocs.h"
#include "gs_ctlsrv.h"
#include "gs_gpu.h"
#include "gs_log.h"
#include "gs_proc.h"

int gs_agent_watch(struct gs_agent *ag, int fd, uint32_t events, struct gs_ev *ev)
{
        struct epoll_event e = { .events = events, .data.ptr = ev };

        ev->dead = false;
        return epoll_ctl(ag->epfd, EPOLL_CTL_ADD, fd, &e) < 0 ? gs_neg_errno() : 0;
}

void gs_agent_unwatch(struct gs_agent *ag, int fd)
{
        (void)epoll_ctl(ag->epfd, EPOLL_CTL_DEL, fd, NULL);
}

void gs_agent_defer_free(struct gs_agent *ag, void *p)
{
        if (ag->ngrave == ag->capgrave) {
                size_t cap = ag->capgrave ? ag->capgrave * 2 : 64;
                void **np = realloc(ag->graveyard, cap * sizeof(*np));
                if (!np)
                        return; /* leak one object rather than risk a use after free */
                ag->graveyard = np;
                ag->capgrave = cap;
        }
        ag->graveyard[ag->ngrave++] = p;
}

void gs_agent_flush_graveyard(struct gs_agent *ag)
{
        for (size_t i = 0; i < ag->ngrave; i++)
                free(ag->graveyard[i]);
        ag->ngrave = 0;
}

void gs_agent_changed(struct gs_agent *ag)
{
        ag->generation++;
        gs_ctlsrv_broadcast(ag->ctl);
}

static void notify(struct gs_agent *ag)
{
        uint64_t one = 1;

        if (write(ag->notify_fd, &one, sizeof(one)) < 0) {
                /* EAGAIN: the counter is full, a wake-up is pending anyway. */
        }
}

void gs_agent_want_scan(struct gs_agent *ag)
{
        if (!__atomic_exchange_n(&ag->usage_kick, 1, __ATOMIC_ACQ_REL))
                notify(ag);
}

void gs_agent_wait_scan(struct gs_agent *ag, int ms)
{
        unsigned before = __atomic_load_n(&ag->usage_scans, __ATOMIC_ACQUIRE);
        int64_t until = gs_mono_ms() + ms;

        gs_agent_want_scan(ag);
        /* Two scans: the one under way may have read NVML before the need. */
        while (__atomic_load_n(&ag->usage_scans, __ATOMIC_ACQUIRE) - before < 2 && gs_mono_ms() < until) {
                struct timespec ts = { 0, 2000000 };
                nanosleep(&ts, NULL);
        }
}

void gs_agent_poke(struct gs_agent *ag)
{
        uint64_t one = 1;

        __atomic_store_n(&ag->notify_changed, 1, __ATOMIC_RELEASE);

        if (write(ag->notify_fd, &one, sizeof(one)) < 0) {
                /* EAGAIN: the counter is full, a wake-up is pending anyway. */
        }
}


int gs_agent_send_pending(int fd, const void *buf, size_t len, size_t *off)
{
        while (*off < len) {
                ssize_t w = send(fd, (const char *)buf + *off, len - *off, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : gs_neg_errno();
                }
                *off += (size_t)w;
        }
        return 0;
}
