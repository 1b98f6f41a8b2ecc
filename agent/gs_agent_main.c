/* gs_agent_main.c — gshare-agent: owns the node's GPU memory and serves the
 * allocations' processes and the control socket (see gs_agent.h and
 * docs/agent.md). */
#include "gs_agent.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gs_allocs.h"
#include "gs_config_keys.h"
#include "gs_flags.h"
#include "gs_restore.h"
#include "gs_ctlsrv.h"
#include "gs_gpu.h"
#include "gs_handover.h"
#include "gs_log.h"
#include "gs_metrics.h"
#include "gs_mkdir.h"
#include "gs_proc.h"
#include "gs_proc_share.h"
#include "gs_recon.h"
#include "gs_serve.h"
#include "gs_short.h"
#include "gs_usage.h"
#include "gs_event.h"
#include "gs_watch.h"

static void usage(FILE *f)
{
        fprintf(f, "usage: gshare-agent [options]\n"
                   "  --config PATH        YAML configuration (default: none, built-in defaults)\n"
                   "  --socket PATH        control socket (config agentSocket)\n"
                   "  --socket-root DIR    allocations' socket directories (config socketRoot)\n"
                   "  --state-dir DIR      checkpoint directory (config stateDir)\n"
                   "  --cuda-library PATH  CUDA driver library (config cudaLibrary)\n"
                   "  --chunk-size SIZE    GSM chunk size, e.g. 256Mi (config chunkSize)\n"
                   "  --unit-size SIZE     one unit of the resource, e.g. 1Gi (config unitSize)\n"
                   "  --reserve SIZE       per GPU, left to the driver (config reserve)\n"
                   "  --balloon-cap SIZE   per allocation, borrowable (config balloonCap)\n"
                   "  --burst-max SIZE     the most an allocation's burst may borrow past its quota (config burstMax)\n"
                   "  --spill-max SIZE     per GPU, host memory for borrowed data moved off the GPU (config spillMax)\n"
                   "  --reclaim-kill-after DURATION  kill a borrower an owner waited this long for (config\n"
                   "                       reclaimKillAfter; 0: never)\n"
                   "  --devices LIST       comma-separated GPU UUIDs or indices (config devices)\n"
                   "  --pod-resources-socket PATH  kubelet PodResources (config podResourcesSocket)\n"
                   "  --reconcile-interval DUR     e.g. 10s; 0: no reconciler (config reconcileInterval)\n"
                   "  --reclaim-grace DUR  unheld this long: released (config reclaimGrace)\n"
                   "  -v                   more logging (-v: debug)\n"
                   "  -h, --help           this text\n");
}

/* The flags are the keys' own (common/gs_config_keys.c, through
 * gs_flags.h): each accepts what its key accepts in the file, with the same
 * errors. */
static int parse_args(int argc, char **argv, struct gs_config *c)
{
        static const struct gs_flags_spec spec = { .key_flags = true };
        char err[512];
        int verbose = 0;

        switch (gs_flags_parse(&spec, argc, argv, c, &verbose, err, sizeof(err))) {
        case GS_FLAGS_OK: break;
        case GS_FLAGS_HELP: usage(stdout); exit(0);
        case GS_FLAGS_BAD_FLAG:
                if (!err[0]) {
                        usage(stderr);
                        return -EINVAL;
                }
                /* fall through */
        case GS_FLAGS_BAD_CONFIG: fprintf(stderr, "gshare-agent: %s\n", err); return -EINVAL;
        }
        if (verbose)
                c->log_level = GS_LOG_DEBUG;
        return 0;
}

static bool device_selected(const struct gs_config *c, int ordinal, const char *uuid)
{
        char idx[16];

        if (c->ndevices == 0)
                return true;
        snprintf(idx, sizeof(idx), "%d", ordinal);
        for (unsigned i = 0; i < c->ndevices; i++)
                if (strcmp(c->devices[i], idx) == 0 || strcasecmp(c->devices[i], uuid) == 0)
                        return true;
        return false;
}

static int open_gpus(struct gs_agent *ag, struct gs_handover *ho)
{
        const struct gs_cuda *cu = &ag->node.cu;
        struct gs_gpu_inherit *inh = NULL;
        char err[512], sz[4][32];
        int count = 0, ver = 0, r;

        r = gs_cuda_check(cu, cu->init(0), "cuInit", err, sizeof(err));
        if (r == 0)
                r = gs_cuda_check(cu, cu->device_get_count(&count), "cuDeviceGetCount", err, sizeof(err));
        if (r < 0) {
                log_error("%s", err);
                return r;
        }
        (void)cu->driver_get_version(&ver);
        ag->node.gpus = calloc(count > 0 ? (size_t)count : 1, sizeof(*ag->node.gpus));
        if (!ag->node.gpus)
                return -ENOMEM;
        for (int i = 0; i < count; i++) {
                struct gs_gpu *g = &ag->node.gpus[ag->node.ngpus];
                CUdevice dev;
                CUuuid uuid;
                char us[GS_UUID_STR_LEN + 1];

                if (cu->device_get(&dev, i) != CUDA_SUCCESS || cu->device_get_uuid(&uuid, dev) != CUDA_SUCCESS)
                        continue;
                gs_uuid_format((const uint8_t *)uuid.bytes, us);
                if (!device_selected(&ag->node.cfg, i, us)) {
                        log_info("GPU %d %s: not selected by the devices setting", i, us);
                        continue;
                }
                g->node = &ag->node;
                r = gs_gpu_open_ctx(g, i, &ag->node.cfg, err, sizeof(err));
                ag->node.ngpus++;
                if (r < 0) {
                        log_error("GPU %d: %s", i, err);
                        return r;
                }
        }
        /* An upgrade: the contexts exist, the old agent hands its pools over
         * (from here its processes wait for us).  A GPU whose context found
         * no room would have no pool: better the old agent serves on. */
        for (uint32_t i = 0; ho && i < ag->node.ngpus; i++)
                if (!ag->node.gpus[i].ctx_ready && strstr(ag->node.gpus[i].health_reason, "OUT_OF_MEMORY")) {
                        log_error("GPU %u: no room for this agent's context beside the running agent (%s): the "
                                  "running agent serves on; this one stops (retried at its restart)",
                                  ag->node.gpus[i].index, ag->node.gpus[i].health_reason);
                        return -ENOMEM;
                }
        if (ho && gs_handover_take(ho, ag, &inh, err, sizeof(err)) < 0) {
                log_error("%s", err);
                return -EIO;
        }
        for (uint32_t i = 0; i < ag->node.ngpus; i++) {
                struct gs_gpu *g = &ag->node.gpus[i];

                r = gs_gpu_open_pool(g, &ag->node.cfg, inh && inh[i].nchunks ? &inh[i] : NULL, err, sizeof(err));
                if (r == 0 && inh && inh[i].nchunks)
                        inh[i].nchunks = 0; /* its fds are the GPU's now */
                if (r < 0) {
                        log_error("GPU %u: %s", g->index, err);
                        gs_handover_inherit_free(inh, ag->node.ngpus);
                        return r;
                }
                gs_format_size(g->total_bytes, sz[0], sizeof(sz[0]));
                gs_format_size((uint64_t)g->nchunks * g->chunk_bytes, sz[1], sizeof(sz[1]));
                gs_format_size(g->chunk_bytes, sz[2], sizeof(sz[2]));
                gs_format_size(g->reserve_bytes, sz[3], sizeof(sz[3]));
                if (g->healthy)
                        log_info("GPU %u %s (%s, %s, NUMA %d): %s, pool %s in %u chunks of %s, reserve %s, "
                                 "%u units, contexts charged %llu MiB",
                                 g->index, g->uuid, g->name, g->pci_bus_id, g->numa_node, sz[0], sz[1], g->nchunks,
                                 sz[2], sz[3], g->units_total, (unsigned long long)(g->ctx_expect_bytes >> 20));
                else
                        log_error("GPU %u %s (%s): unhealthy, no pool: %s", g->index, g->uuid, g->name,
                                  g->health_reason);
        }
        gs_handover_inherit_free(inh, ag->node.ngpus);
        log_info("CUDA driver %d.%d (%s): %d GPUs, %u in use", ver / 1000, (ver % 1000) / 10, ag->node.cfg.cuda_library,
                 count, ag->node.ngpus);
        return 0;
}

/* Creates the missing directories above path (not path itself), each 0755
 * whatever the umask: root's, readable by all, writable by root only.
 * Existing ones are left as they are (/run, a hostPath volume); one that is
 * not a directory is an error naming it.  Returns 0 or a negative errno with
 * err set. */
static int mkdir_parents(const char *path, const char *what, char *err, size_t errlen)
{
        char e[256];
        int r = gs_mkdir_parents(path, 0755, e, sizeof(e));

        if (r < 0)
                snprintf(err, errlen, "%s (for %s %.200s)", e, what, path);
        else if (r > 0)
                log_info("created %d director%s above %s %s", r, r == 1 ? "y" : "ies", what, path);
        return r < 0 ? r : 0;
}

struct signals {
        struct gs_loop *loop;
        struct gs_loop_io io;
        int fd;
};

static void on_signal(void *data, uint32_t events)
{
        struct signals *sg = data;
        struct signalfd_siginfo si;

        (void)events;
        if (read(sg->fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                log_info("signal %u: shutting down", si.ssi_signo);
                gs_loop_stop(sg->loop);
        }
}

/* The readiness probe's file (config readyFile): there while this agent
 * serves or stands ready to take over. */
static void ready_file(const struct gs_config *c, bool ready)
{
        int fd;

        if (!c->ready_file[0])
                return;
        if (!ready) {
                (void)unlink(c->ready_file);
                return;
        }
        fd = open(c->ready_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) {
                log_warn("cannot create the ready file %s: %m", c->ready_file);
                return;
        }
        dprintf(fd, "%d\n", (int)getpid());
        close(fd);
}

/* After each batch in which something Watch clients see changed (lending
 * changed, a move done, a process gone): the short-of-memory kick too. */
static void broadcast(struct gs_agent *ag)
{
        gs_ctlsrv_broadcast(ag->ctl);
        gs_short_kick(ag);
}

/* Each usage scan also kicks (spilled chunks may come back; an owner's
 * wait may have passed reclaimKillAfter). */
static int64_t usage_tick(void *data, int64_t now)
{
        int64_t next = gs_usage_tick(data, now);

        gs_short_kick(data);
        return next;
}

/* Who runs when: the callbacks and timers of the layers (agent/layers.txt:
 * none calls up into another). */
static void wire(struct gs_agent *ag)
{
        gs_agent_wire(ag, broadcast);
        ag->node.on_alloc_conn = gs_proc_on_listen;
        gs_short_wire(ag);
        ag->on_event = gs_usage_event;
        gs_loop_timer_add(ag->node.loop, &ag->hello_timer, gs_proc_tick, ag);
        gs_loop_timer_add(ag->node.loop, &ag->node.restore_timer, gs_restore_tick, &ag->node);
        gs_loop_timer_add(ag->node.loop, &ag->usage_timer, usage_tick, ag);
        gs_loop_timer_add(ag->node.loop, &ag->share_timer, gs_proc_share_tick, ag);
        gs_loop_timer_arm(&ag->share_timer, gs_mono_ms() + GS_PROC_SHARE_MS);
}

/* An agent of an earlier release, which cannot hand over, serves: ready to
 * take over (so that the rollout stops it), but nothing of ours may touch
 * the GPU or its paths before it is gone.  -1: stopped meanwhile. */
static int wait_older_agent(struct gs_agent *ag, sigset_t *set)
{
        log_warn("an agent without handover (an earlier release) serves %s: waiting for it to stop; its "
                 "processes keep their memory but cannot allocate after it",
                 ag->node.cfg.agent_socket);
        ready_file(&ag->node.cfg, true);
        while (gs_handover_older_agent(ag)) {
                struct timespec ts = { 0, 200 * 1000 * 1000 };
                if (sigtimedwait(set, NULL, &ts) >= 0) {
                        log_info("stopped while waiting");
                        return -1;
                }
        }
        log_info("the earlier agent is gone: starting as after a restart");
        return 0;
}

static void warn_fd_limit(const struct gs_config *cfg)
{
        struct rlimit rl;

        /* Each connection holds its socket, pidfd, segment, doorbell and
         * notification eventfd. */
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
            (uint64_t)cfg->max_conns * 5 + 1024 > rl.rlim_cur)
                log_warn(
                        "maxConnections %u needs about %llu fds, RLIMIT_NOFILE is %llu: connections may fail with EMFILE",
                        cfg->max_conns, (unsigned long long)cfg->max_conns * 5 + 1024, (unsigned long long)rl.rlim_cur);
}

/* After a handover (ho) or a restart the memory of the agent before is
 * let go for a moment yet (gs_serve waits for it). */
static void settle(struct gs_agent *ag, bool ho)
{
        bool on = ho;

        for (uint32_t i = 0; i < ag->node.ngpus; i++)
                on |= ag->node.gpus[i].chunks_made_at_start < ag->node.gpus[i].nchunks;
        if (on)
                __atomic_store_n(&ag->settle_until_ms, gs_mono_ms() + 5000, __ATOMIC_RELAXED);
}

/* Everything stopped and freed, in order (the reconciler and the watch
 * are stopped, a takeover under way aborted). */
static void stop(struct gs_agent *ag, struct signals *sg)
{
        gs_handover_close(ag);
        ready_file(&ag->node.cfg, false);
        if (gs_node_handed_over(&ag->node)) {
                /* Everything is the new agent's: our sockets' and files'
                 * paths are its own (nothing is removed or written), and
                 * our memory goes without any made in its place (the new
                 * agent holds the chunks; processes map them). */
                for (uint32_t i = 0; i < ag->node.ngpus; i++)
                        gs_gpu_hand_over(&ag->node.gpus[i]);
                for (struct gs_allocation *a = ag->node.allocs; a; a = a->next)
                        gs_closep(&a->listen_fd);
        }
        /* The ledgers keep saying what the processes hold: the next agent
         * charges it (a stop is an upgrade or a restart, not their end). */
        for (uint32_t i = 0; i < ag->node.ngpus; i++)
                gs_gpu_ledger_stop(&ag->node.gpus[i]);
        gs_proc_kill_all(ag);
        gs_workers_free(ag->workers);
        gs_allocs_shutdown(&ag->node);
        ag->node.watched = false;
        gs_ctlsrv_free(ag->ctl);
        gs_metrics_free(ag->metrics);
        for (uint32_t i = 0; i < ag->node.ngpus; i++)
                gs_gpu_close(&ag->node.gpus[i]);
        free(ag->node.gpus);
        gs_usage_close(ag);
        gs_events_stop(ag->events);
        gs_cuda_close(&ag->node.cu);
        if (sg->fd >= 0 && ag->node.loop)
                gs_loop_io_del(ag->node.loop, &sg->io);
        gs_closep(&sg->fd);
        gs_loop_free(ag->node.loop);
        gs_agent_unwire(ag);
}

int main(int argc, char **argv)
{
        struct gs_agent ag = { 0 };
        struct signals sg = { .fd = -1 };
        struct gs_recon *recon = NULL;
        struct gs_watch *watch = NULL;
        struct gs_handover *ho = NULL;
        struct rlimit rl;
        sigset_t set;
        char err[512];
        int r, rc = 1;

        ag.handover_fd = -1;
        if (parse_args(argc, argv, &ag.node.cfg) < 0)
                return 2;
        gs_log_init("agent", ag.node.cfg.log_level);
        /* Chunk fds in flight over SCM_RIGHTS count against RLIMIT_NOFILE. */
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                (void)setrlimit(RLIMIT_NOFILE, &rl);
        }
        /* Blocked before any thread exists, so that workers inherit it and
         * only the signalfd sees these. */
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGHUP);
        sigprocmask(SIG_BLOCK, &set, NULL);
        signal(SIGPIPE, SIG_IGN);

        r = gs_loop_new(&ag.node.loop);
        if (r < 0) {
                log_error("epoll/eventfd: %s", strerror(-r));
                goto out;
        }
        sg.loop = ag.node.loop;
        sg.fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sg.fd < 0 || gs_loop_io_add(ag.node.loop, &sg.io, sg.fd, EPOLLIN, on_signal, &sg) < 0) {
                log_error("signalfd: %m");
                goto out;
        }
        wire(&ag);
        r = gs_cuda_open(&ag.node.cu, ag.node.cfg.cuda_library, err, sizeof(err));
        if (r < 0) {
                log_error("%s", err);
                goto out;
        }
        gs_usage_open(&ag);
        r = gs_events_start(&ag.node.cfg, &ag.events, err, sizeof(err));
        if (r < 0)
                log_warn("no Events on pods: %s", err);
        /* A running agent (an upgrade) hands over to us; none: a first
         * start, or a restart after a crash (the ledger tells). */
        r = gs_handover_begin(&ag, &ho, err, sizeof(err));
        if (r < 0) {
                log_error("%s", err);
                goto out;
        }
        if (r == 0 && wait_older_agent(&ag, &set) < 0)
                goto out;
        if (open_gpus(&ag, ho) < 0)
                goto out;
        if (ho)
                log_info("upgrade: pools built on the old agent's chunks");
        warn_fd_limit(&ag.node.cfg);
        r = gs_workers_new(gs_serve_turn, ag.node.cfg.worker_threads, ag.node.cfg.max_conns, &ag.workers, err,
                           sizeof(err));
        if (r < 0) {
                log_error("%s", err);
                goto out;
        }
        if (ag.node.ngpus == 0)
                log_warn("no GPU in use: the agent serves an empty node");
        /* A manual install may not have the directories yet (the DaemonSet's
         * hostPath volumes make them). */
        if (mkdir_parents(ag.node.cfg.agent_socket, "agentSocket", err, sizeof(err)) < 0 ||
            mkdir_parents(ag.node.cfg.socket_root, "socketRoot", err, sizeof(err)) < 0 ||
            mkdir_parents(ag.node.cfg.state_dir, "stateDir", err, sizeof(err)) < 0) {
                log_error("%s", err);
                goto out;
        }
        r = gs_ctlsrv_new(&ag, ag.node.cfg.agent_socket, &ag.ctl, err, sizeof(err));
        if (r < 0) {
                log_error("%s", err);
                goto out;
        }
        ag.node.watched = true;
        r = gs_metrics_new(&ag, ag.node.cfg.metrics_address, &ag.metrics, err, sizeof(err));
        if (r < 0) {
                log_error("%s", err);
                goto out;
        }
        r = gs_restore_start(&ag.node);
        if (r < 0)
                log_error("checkpoint in %s: %s", ag.node.cfg.state_dir, strerror(-r));
        /* The previous agent's processes, before any connection is served. */
        gs_proc_adopt(&ag);
        if (ho)
                log_info("upgrade: allocations and processes restored");
        if (gs_handover_listen(&ag, err, sizeof(err)) < 0)
                log_warn("%s: an upgrade will not take over from this agent without a gap", err);
        settle(&ag, ho != NULL);
        gs_handover_finish(ho);
        ho = NULL;
        ready_file(&ag.node.cfg, true);
        /* After the restore, so that its first snapshot sees every allocation. */
        r = gs_recon_start(&ag, &recon);
        if (r < 0) {
                log_error("cannot start the reconciler: %s", strerror(-r));
                goto out;
        }
        if (gs_watch_start(&ag.node.cfg, recon, &watch, err, sizeof(err)) < 0) {
                log_error("%s", err);
                goto out;
        }
        log_info(
                "serving %s; allocations under %s, state in %s; %u worker threads, at most %u connections (%u per allocation, %u per process)",
                ag.node.cfg.agent_socket, ag.node.cfg.socket_root, ag.node.cfg.state_dir, ag.node.cfg.worker_threads,
                ag.node.cfg.max_conns, ag.node.cfg.max_conns_per_alloc, ag.node.cfg.max_conns_per_proc);
        rc = gs_loop_run(ag.node.loop) < 0;
out:
        gs_watch_stop(watch); /* before the reconciler it kicks */
        gs_recon_stop(recon);
        /* Failed before READY: the old agent serves on, at its paths (it
         * binds its sockets again and puts its ledger back). */
        if (ho && ag.node.handover == GS_NODE_OURS)
                ag.node.handover = GS_NODE_TAKEOVER_FAILED;
        gs_handover_abort(ho);
        stop(&ag, &sg);
        if (gs_node_handed_over(&ag.node)) {
                /* Exiting would have the kubelet start this old version
                 * again: wait for the end of the pod. */
                int sig;
                log_info("handed over; waiting for SIGTERM");
                while (sigwait(&set, &sig) == 0 && sig == SIGHUP)
                        ;
                rc = 0;
        }
        log_info("stopped");
        return rc;
}
