/* gs_plugin.c — the device plugin's main loop: starts the agent client and
 * the mirror, serves, registers, and then watches the kubelet directory
 * (inotify) and our ListAndWatch streams to decide when to serve a fresh
 * socket, register again, or stand by for a newer instance; takes the stop
 * signals.  See gs_plugin.h.
 *
 * Threads: this loop; the mirror's watcher (gs_mirror.h); and one thread
 * per gRPC call (gs_grpc.c), so a slow agent delays only the call that
 * waits on it. */
#include "gs_plugin.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "gs_dp.h"
#include "gs_log.h"

/* Until the kubelet accepts on kubelet.sock, a connect() probe every
 * PROBE_MIN_MS doubling to PROBE_MAX_MS; a Register that fails although it
 * accepts is retried from REGISTER_RETRY_MIN_MS doubling to 1 s. */
#define PROBE_MIN_MS 5
#define PROBE_MAX_MS 100
#define REGISTER_RETRY_MIN_MS 50
#define REGISTER_RETRY_MAX_MS 1000
/* No stream this long after the last one ended: the kubelet dropped us. */
#define LW_GONE_MS 1000
/* A kubelet that took our Register up opens a ListAndWatch at once: none
 * this long after a Register and we register again, waiting twice as long
 * each time none comes, up to LW_UNHEARD_MAX_MS. */
#define LW_UNHEARD_MS 3000
#define LW_UNHEARD_MAX_MS 60000

static void log_start(struct gs_dp *p)
{
        char units[256] = "";
        size_t ng;

        pthread_mutex_lock(&p->m.mu);
        ng = p->m.ngpus;
        for (size_t i = 0; i < p->m.ngpus && strlen(units) < sizeof(units) - 32; i++) {
                size_t l = strlen(units);
                snprintf(units + l, sizeof(units) - l, "%s%u", i ? "+" : "", p->m.gpus[i].units);
        }
        pthread_mutex_unlock(&p->m.mu);
        log_info("gshare-device-plugin: resource %s, kubelet dir %s, agent %s, %zu GPUs, units %s",
                 p->o->cfg.resource_name, p->o->cfg.kubelet_dir, p->o->cfg.agent_socket, ng,
                 ng ? units : "none (agent not reachable yet)");
}

/* The main loop's state: whether a Register is due and its backoffs, and
 * what the last one went to. */
struct loop {
        bool need_register, waiting_logged, gone_logged;
        int64_t next_try, delay, reg_delay;
        /* The last Register: when, the kubelet.sock it went to, the streams
         * opened before it, and how long to wait for the kubelet's stream
         * after it. */
        int64_t reg_at, unheard_wait;
        struct gs_dp_kubelet_id reg_kubelet;
        unsigned reg_opened;
};

static void want_register(struct loop *l)
{
        l->need_register = true;
        l->waiting_logged = false;
        l->next_try = 0;
        l->delay = PROBE_MIN_MS;
        l->reg_delay = REGISTER_RETRY_MIN_MS;
}

/* Registers when one is due: only once the kubelet accepts, and with our
 * socket in place (the kubelet dials it at once). */
static void try_register(struct gs_dp *p, struct loop *l)
{
        struct gs_dp_kubelet_id k;
        unsigned opened;

        if (!l->need_register || gs_mono_ms() < l->next_try || !gs_dp_socket_ok(p))
                return;
        /* Streams opened so far, counted before the Register: the kubelet
         * opens its stream before it answers (seen on 1.36), so one counted
         * after would look like none. */
        opened = __atomic_load_n(&p->lw_opened, __ATOMIC_SEQ_CST);
        if (gs_dp_kubelet_id(p, &k) < 0 || !gs_dp_kubelet_accepts(p)) {
                /* Not there, or not accepting yet: probe again soon
                 * (inotify also wakes us when kubelet.sock is created). */
                if (!l->waiting_logged)
                        log_debug("kubelet at %s does not accept yet; probing", p->kubelet_sock);
                l->waiting_logged = true;
                l->next_try = gs_mono_ms() + l->delay;
                l->delay = l->delay * 2 > PROBE_MAX_MS ? PROBE_MAX_MS : l->delay * 2;
        } else if (gs_dp_register(p) == 0) {
                l->need_register = false;
                l->reg_at = gs_mono_ms();
                l->reg_opened = opened;
                l->reg_kubelet = k;
        } else {
                l->next_try = gs_mono_ms() + l->reg_delay;
                l->reg_delay = l->reg_delay * 2 > REGISTER_RETRY_MAX_MS ? REGISTER_RETRY_MAX_MS : l->reg_delay * 2;
        }
}

/* Our socket is gone or not ours.  A kubelet restart removes it and
 * kubelet.sock (its old one) before it creates its new kubelet.sock, and
 * the events of the two may come in either order and be read apart: acting
 * on each (serving a fresh socket and registering at each) registered
 * twice, and the second serve ended the first registration's stream
 * (every unit Unhealthy, allocatable 0 for a status period).  So the
 * socket is served again only when a kubelet needs it: once kubelet.sock
 * is there, and, while it is still the kubelet we registered with, only
 * when its stream to us has ended (the kubelet keeps using the connection
 * it has).  Returns 1 when it served, 0 to wait, or a negative errno. */
static int socket_gone(struct gs_dp *p, struct loop *l, bool k_here, bool k_new)
{
        const char *why;
        int r;

        if (!k_here)
                why = "kubelet.sock is gone too (the kubelet restarts): serving it again when the kubelet is back";
        else if (!k_new && __atomic_load_n(&p->lw_active, __ATOMIC_SEQ_CST) > 0)
                why = "the kubelet still has its ListAndWatch open: serving it again when it ends or the kubelet "
                      "restarts";
        else
                why = NULL;
        if (why) {
                if (!l->gone_logged)
                        log_info("our socket %s is gone; %s", p->sock_path, why);
                l->gone_logged = true;
                return 0;
        }
        log_info("our socket %s is gone: serving it again and registering%s", p->sock_path,
                 k_new ? " with the new kubelet" : " again");
        r = gs_dp_serve(p);
        if (r < 0)
                return r;
        l->gone_logged = false;
        want_register(l);
        return 1;
}

/* Decides, from the state of the kubelet directory and of our streams
 * (never from the events alone, which a restart sends several of), whether
 * to serve, register again or stand by.  0, or a negative errno when
 * serving failed. */
static int check_kubelet(struct gs_dp *p, struct loop *l)
{
        struct gs_dp_kubelet_id k;
        bool k_here = gs_dp_kubelet_id(p, &k) == 0;
        /* A kubelet.sock other than the one we registered with: a restarted
         * kubelet, which knows nothing of us. */
        bool k_new = k_here && !gs_dp_kubelet_id_eq(&k, &l->reg_kubelet);
        bool heard = __atomic_load_n(&p->lw_opened, __ATOMIC_SEQ_CST) != l->reg_opened;
        int64_t ended = __atomic_load_n(&p->lw_ended_ms, __ATOMIC_SEQ_CST);

        if (heard)
                l->unheard_wait = LW_UNHEARD_MS;
        if (p->standby)
                return 0;
        if (!gs_dp_socket_ok(p)) {
                if (!k_new && gs_dp_newer_serves(p)) {
                        /* Serving again would take the path back from it,
                         * and it would take it back from us, until we stop. */
                        log_info("another instance serves %s now (an upgrade): standing by until stopped",
                                 p->sock_path);
                        gs_grpc_server_stop(p->server);
                        p->server = NULL;
                        p->standby = true;
                        l->need_register = false;
                        return 0;
                }
                int r = socket_gone(p, l, k_here, k_new);

                return r < 0 ? r : 0;
        }
        if (l->need_register)
                return 0;
        if (k_new) {
                log_info("kubelet socket %s (re)created: registering again", p->kubelet_sock);
                want_register(l);
        } else if (!heard && gs_mono_ms() - l->reg_at > l->unheard_wait) {
                log_info("the kubelet opened no ListAndWatch in the %lld ms since we registered: "
                         "registering again",
                         (long long)(gs_mono_ms() - l->reg_at));
                l->unheard_wait = l->unheard_wait * 2 > LW_UNHEARD_MAX_MS ? LW_UNHEARD_MAX_MS : l->unheard_wait * 2;
                want_register(l);
        } else if (__atomic_load_n(&p->lw_active, __ATOMIC_SEQ_CST) == 0 && ended &&
                   gs_mono_ms() - ended > LW_GONE_MS) {
                log_info("the kubelet closed our ListAndWatch and opened none for %d ms: registering again",
                         LW_GONE_MS);
                __atomic_store_n(&p->lw_ended_ms, 0, __ATOMIC_SEQ_CST);
                want_register(l);
        }
        return 0;
}

int gs_plugin_run(const struct gs_plugin_opts *o)
{
        struct gs_dp pl = { .o = o };
        struct gs_dp *p = &pl;
        struct loop l = { .unheard_wait = LW_UNHEARD_MS };
        sigset_t mask;
        int ifd = -1, sfd = -1, r;

        if ((size_t)snprintf(p->sock_path, sizeof(p->sock_path), "%s/%s", o->cfg.kubelet_dir, o->endpoint) >=
                    sizeof(p->sock_path) ||
            (size_t)snprintf(p->kubelet_sock, sizeof(p->kubelet_sock), "%s/%s", o->cfg.kubelet_dir,
                             GS_PLUGIN_KUBELET_SOCKET) >= sizeof(p->kubelet_sock))
                return -ENAMETOOLONG;
        gs_agentcli_init(&p->cli, o->cfg.agent_socket, o->agent_timeout_ms);
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        ifd = gs_dp_watch_dir(p);
        if (sfd < 0 || ifd < 0) {
                r = sfd < 0 ? -errno : ifd;
                log_error("cannot watch the kubelet dir %s: %s", o->cfg.kubelet_dir, strerror(-r));
                goto out;
        }
        /* Give the agent a moment, so the first list is complete. */
        r = gs_mirror_start(&p->m, &p->cli, 2000);
        if (r < 0)
                goto out;
        log_start(p);
        r = gs_dp_serve(p); /* before Register: the kubelet dials us at once */
        if (r < 0)
                goto stop;
        want_register(&l);
        for (;;) {
                struct pollfd pf[2] = { { .fd = sfd, .events = POLLIN }, { .fd = ifd, .events = POLLIN } };
                int timeout = 250;

                try_register(p, &l);
                if (l.need_register && gs_dp_socket_ok(p)) {
                        int64_t left = l.next_try - gs_mono_ms();
                        timeout = left < 0 ? 0 : left < timeout ? (int)left : timeout;
                }
                if (poll(pf, 2, timeout) < 0 && errno != EINTR) {
                        r = gs_neg_errno();
                        break;
                }
                if (pf[0].revents) {
                        struct signalfd_siginfo si;
                        if (read(sfd, &si, sizeof(si)) == sizeof(si))
                                log_info("signal %u: stopping", si.ssi_signo);
                        r = 0;
                        break;
                }
                if (pf[1].revents)
                        gs_dp_read_events(ifd); /* they only wake us: the state decides */
                r = check_kubelet(p, &l);
                if (r < 0)
                        break;
        }
stop:
        gs_mirror_shutdown(&p->m);
        gs_dp_unserve(p);
out:
        gs_mirror_free(&p->m);
        gs_agentcli_free(&p->cli);
        gs_closep(&sfd);
        gs_closep(&ifd);
        return r;
}
