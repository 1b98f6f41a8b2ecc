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
#include <sys/stat.h>
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

int gs_plugin_run(const struct gs_plugin_opts *o)
{
        struct gs_dp pl = { .o = o };
        struct gs_dp *p = &pl;
        sigset_t mask;
        int ifd = -1, sfd = -1, r;
        bool need_register = true, waiting_logged = false;
        int64_t next_try = 0, delay = PROBE_MIN_MS, reg_delay = REGISTER_RETRY_MIN_MS;
        /* The last Register: when, the streams opened before it, and how
         * long to wait for the kubelet's stream after it. */
        int64_t reg_at = 0, unheard_wait = LW_UNHEARD_MS;
        unsigned reg_opened = 0, opened = 0;

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
        for (;;) {
                struct pollfd pf[2] = { { .fd = sfd, .events = POLLIN }, { .fd = ifd, .events = POLLIN } };
                bool kubelet_new = false;
                struct stat st;

                int timeout = 250;

                if (need_register && gs_mono_ms() >= next_try) {
                        /* Streams opened so far, counted before the
                         * Register: the kubelet opens its stream before it
                         * answers (seen on 1.36), so one counted after would
                         * look like none. */
                        opened = __atomic_load_n(&p->lw_opened, __ATOMIC_SEQ_CST);
                        if (stat(p->kubelet_sock, &st) < 0 || !gs_dp_kubelet_accepts(p)) {
                                /* Not there, or not accepting yet: probe
                                 * again soon (inotify also wakes us when
                                 * kubelet.sock is created). */
                                if (!waiting_logged)
                                        log_debug("kubelet at %s does not accept yet; probing",
                                                  p->kubelet_sock);
                                waiting_logged = true;
                                next_try = gs_mono_ms() + delay;
                                delay = delay * 2 > PROBE_MAX_MS ? PROBE_MAX_MS : delay * 2;
                        } else if (gs_dp_register(p) == 0) {
                                need_register = false;
                                reg_at = gs_mono_ms();
                                reg_opened = opened;
                        } else {
                                next_try = gs_mono_ms() + reg_delay;
                                reg_delay = reg_delay * 2 > REGISTER_RETRY_MAX_MS ? REGISTER_RETRY_MAX_MS
                                                                                  : reg_delay * 2;
                        }
                }
                if (need_register) {
                        int64_t left = next_try - gs_mono_ms();
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
                        gs_dp_read_events(ifd, &kubelet_new);
                bool heard = __atomic_load_n(&p->lw_opened, __ATOMIC_SEQ_CST) != reg_opened;
                if (heard)
                        unheard_wait = LW_UNHEARD_MS;
                if (p->standby) {
                        continue;
                } else if (!need_register && p->server && !heard && gs_mono_ms() - reg_at > unheard_wait) {
                        log_info("the kubelet opened no ListAndWatch in the %lld ms since we registered: "
                                 "registering again", (long long)(gs_mono_ms() - reg_at));
                        unheard_wait = unheard_wait * 2 > LW_UNHEARD_MAX_MS ? LW_UNHEARD_MAX_MS : unheard_wait * 2;
                        need_register = true;
                        next_try = 0;
                        continue;
                } else if (!need_register && p->server && __atomic_load_n(&p->lw_active, __ATOMIC_SEQ_CST) == 0 &&
                           __atomic_load_n(&p->lw_ended_ms, __ATOMIC_SEQ_CST) &&
                           gs_mono_ms() - __atomic_load_n(&p->lw_ended_ms, __ATOMIC_SEQ_CST) > LW_GONE_MS) {
                        log_info("the kubelet closed our ListAndWatch and opened none for %d ms: registering again",
                                 LW_GONE_MS);
                        __atomic_store_n(&p->lw_ended_ms, 0, __ATOMIC_SEQ_CST);
                        need_register = true;
                        next_try = 0;
                        continue;
                } else if (!kubelet_new && !gs_dp_socket_ok(p) && gs_dp_newer_serves(p)) {
                        /* Serving again would take the path back from it, and
                         * it would take it back from us, until we stop. */
                        log_info("another instance serves %s now (an upgrade): standing by until stopped",
                                 p->sock_path);
                        gs_grpc_server_stop(p->server);
                        p->server = NULL;
                        p->standby = true;
                        need_register = false;
                        continue;
                } else if (kubelet_new) {
                        log_info("kubelet socket %s (re)created: serving a fresh socket and registering again",
                                 p->kubelet_sock);
                } else if (!gs_dp_socket_ok(p)) {
                        log_info("our socket %s is gone: serving it again", p->sock_path);
                } else {
                        continue;
                }
                r = gs_dp_serve(p);
                if (r < 0)
                        break;
                need_register = true;
                waiting_logged = false;
                next_try = 0;
                delay = PROBE_MIN_MS;
                reg_delay = REGISTER_RETRY_MIN_MS;
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
