/* gs_mirror.c — see gs_mirror.h. */
#include "gs_mirror.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "gs_log.h"

static void free_gpus(struct gs_mirror_gpu *g, size_t n)
{
        for (size_t i = 0; g && i < n; i++)
                free(g[i].unhealthy);
        free(g);
}

/* Looks a GPU up by UUID; pre: mu held. */
const struct gs_mirror_gpu *gs_mirror_find(const struct gs_mirror *m, const char *uuid)
{
        for (size_t i = 0; i < m->ngpus; i++)
                if (strcasecmp(m->gpus[i].uuid, uuid) == 0)
                        return &m->gpus[i];
        return NULL;
}

/* CLOCK_REALTIME ms from now, for pthread_cond_timedwait. */
static struct timespec deadline_in(int ms)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
        }
        return ts;
}

void gs_mirror_wait(struct gs_mirror *m, uint64_t seen, int ms)
{
        struct timespec ts = deadline_in(ms);

        while (!m->stopping && m->gen == seen)
                if (pthread_cond_timedwait(&m->cv, &m->mu, &ts) == ETIMEDOUT)
                        break;
}

/* Units of GPU uuid held by allocations, as a bitmap; from ListAllocations
 * on the client's kept connection (not a connection per Watch message).
 * Missing information leaves the bitmap empty (lent units are then taken
 * from the top, which is still stable). */
static void mark_allocated(struct gs_mirror *m, struct gs_mirror_gpu *g, size_t ng)
{
        struct gs_agentcli_err e;
        GsCtlReply *rep = NULL;

        if (gs_agentcli_list_allocations(m->cli, &rep, &e) < 0) {
                log_warn("cannot list allocations to choose lent units: %s", e.msg);
                return;
        }
        for (size_t i = 0; i < rep->list_allocations->n_allocations; i++) {
                const Gshare__Ctl__V1__Allocation *a = rep->list_allocations->allocations[i];
                for (size_t k = 0; k < a->n_device_ids; k++) {
                        char uuid[GS_UUID_STR_LEN + 1];
                        uint32_t unit;
                        if (gs_devid_parse(a->device_ids[k], uuid, &unit) < 0)
                                continue;
                        for (size_t j = 0; j < ng; j++)
                                if (strcasecmp(g[j].uuid, uuid) == 0 && unit < g[j].units)
                                        g[j].unhealthy[unit] = 2; /* allocated */
                }
        }
        gs_ctl_reply_free(rep);
}

/* Builds our GPU table from a ListGpusReply; -EBADMSG if the agent's data is
 * not usable. */
static int gpus_from_reply(struct gs_mirror *m, const Gshare__Ctl__V1__ListGpusReply *l, struct gs_mirror_gpu **ret,
                           size_t *ret_n)
{
        struct gs_mirror_gpu *g;
        bool any_lent = false;

        if (l->n_gpus > GS_MIRROR_MAX_GPUS)
                return -EBADMSG;
        g = calloc(l->n_gpus ? l->n_gpus : 1, sizeof(*g));
        if (!g)
                return -ENOMEM;
        for (size_t i = 0; i < l->n_gpus; i++) {
                const Gshare__Ctl__V1__Gpu *s = l->gpus[i];
                uint8_t raw[16];

                if (gs_uuid_parse(s->uuid, raw) < 0 || s->units_total >= GS_MAX_UNITS_PER_GPU) {
                        log_warn("agent reported a GPU with a bad UUID '%s' or %u units; ignored", s->uuid,
                                 s->units_total);
                        free_gpus(g, l->n_gpus);
                        return -EBADMSG;
                }
                snprintf(g[i].uuid, sizeof(g[i].uuid), "%s", s->uuid);
                snprintf(g[i].pci, sizeof(g[i].pci), "%s", s->pci_bus_id);
                snprintf(g[i].name, sizeof(g[i].name), "%s", s->name);
                g[i].index = s->index;
                g[i].numa = s->numa_node;
                g[i].units = s->units_total;
                g[i].lent = s->units_lent;
                g[i].unit_bytes = s->unit_bytes;
                g[i].total_bytes = s->total_bytes;
                g[i].healthy = s->healthy;
                g[i].unhealthy = calloc(g[i].units ? g[i].units : 1, 1);
                if (!g[i].unhealthy) {
                        free_gpus(g, l->n_gpus);
                        return -ENOMEM;
                }
                if (g[i].lent)
                        any_lent = true;
                /* Held by an allocation the agent has yet to restore from
                 * its checkpoint: not free, whatever else is true. */
                for (size_t k = 0; k < s->n_units_restoring; k++)
                        if (s->units_restoring[k] < g[i].units)
                                g[i].unhealthy[s->units_restoring[k]] = 1;
        }
        if (any_lent)
                mark_allocated(m, g, l->n_gpus);
        /* Lent units: the highest-numbered units not held by an allocation,
         * so the choice is stable while allocations do not change. */
        for (size_t i = 0; i < l->n_gpus; i++) {
                uint32_t left = g[i].lent;
                for (uint32_t u = g[i].units; u-- > 0 && left > 0;)
                        if (g[i].unhealthy[u] == 0) {
                                g[i].unhealthy[u] = 1;
                                left--;
                        }
                for (uint32_t u = 0; u < g[i].units; u++)
                        if (g[i].unhealthy[u] == 2)
                                g[i].unhealthy[u] = 0;
                /* Units of a gone pod's allocation that processes still use:
                 * nothing may be scheduled onto them until they exit. */
                for (size_t k = 0; k < l->gpus[i]->n_units_draining; k++) {
                        uint32_t u = l->gpus[i]->units_draining[k];
                        if (u < g[i].units && !g[i].unhealthy[u]) {
                                g[i].unhealthy[u] = 1;
                                g[i].draining++;
                        }
                }
        }
        *ret = g;
        *ret_n = l->n_gpus;
        return 0;
}

/* Whether two GPU tables are the same but for allocation counts: the device
 * plugin's list (IDs, health, topology) and the DRA plugin's slice (index,
 * name, sizes, PCI bus) are. */
static bool same_list(const struct gs_mirror_gpu *a, size_t na, const struct gs_mirror_gpu *b, size_t nb)
{
        if (na != nb)
                return false;
        for (size_t i = 0; i < na; i++)
                if (strcmp(a[i].uuid, b[i].uuid) != 0 || a[i].units != b[i].units || a[i].numa != b[i].numa ||
                    a[i].healthy != b[i].healthy || a[i].index != b[i].index || a[i].unit_bytes != b[i].unit_bytes ||
                    a[i].total_bytes != b[i].total_bytes || strcmp(a[i].name, b[i].name) != 0 ||
                    strcmp(a[i].pci, b[i].pci) != 0 || memcmp(a[i].unhealthy, b[i].unhealthy, a[i].units) != 0)
                        return false;
        return true;
}

static void publish(struct gs_mirror *m, struct gs_mirror_gpu *g, size_t n, bool up)
{
        bool changed;

        struct gs_mirror_gpu *old;
        size_t nold;

        pthread_mutex_lock(&m->mu);
        if (!up && !m->agent_up && m->agent_seen) {
                pthread_mutex_unlock(&m->mu);
                return; /* already down */
        }
        if (up != m->agent_up)
                log_info("gshare agent at %s is %s", m->cli->socket, up ? "reachable" : "unreachable");
        old = m->gpus;
        nold = m->ngpus;
        if (g) {
                for (size_t i = 0; i < n; i++) {
                        const struct gs_mirror_gpu *prev = gs_mirror_find(m, g[i].uuid);
                        if ((!prev && !g[i].healthy) || (prev && prev->healthy != g[i].healthy))
                                log_info("GPU %s is %s", g[i].uuid, g[i].healthy ? "healthy" : "unhealthy");
                        if (prev && prev->lent != g[i].lent)
                                log_info("GPU %s: %u units lent", g[i].uuid, g[i].lent);
                        if ((prev ? prev->draining : 0) != g[i].draining)
                                log_info("GPU %s: %u units Unhealthy while processes of gone pods still use them",
                                         g[i].uuid, g[i].draining);
                }
                changed = !same_list(old, nold, g, n);
                m->gpus = g;
                m->ngpus = n;
        } else {
                old = NULL; /* keep the last list, all Unhealthy */
                changed = true;
        }
        /* Allocation counts change on every Allocate; resend the list only
         * when what the kubelet sees changes. */
        if (changed || up != m->agent_up || !m->agent_seen) {
                m->gen++;
                pthread_cond_broadcast(&m->cv);
        }
        m->agent_up = up;
        m->agent_seen = true;
        pthread_mutex_unlock(&m->mu);
        free_gpus(old, nold);
}

static bool stopping(struct gs_mirror *m)
{
        bool s;

        pthread_mutex_lock(&m->mu);
        s = m->stopping;
        pthread_mutex_unlock(&m->mu);
        return s;
}

/* One Watch stream, until it breaks or we stop. */
static void watch_once(struct gs_mirror *m)
{
        int fd = gs_agentcli_watch_open(m->cli), r = 0;

        if (fd < 0) {
                log_debug("cannot watch the agent at %s: %s", m->cli->socket, strerror(-fd));
                return;
        }
        while (!stopping(m)) {
                GsCtlReply *rep = NULL;
                struct gs_mirror_gpu *g = NULL;
                size_t n = 0;

                r = gs_agentcli_watch_next(m->cli, fd, 200, &rep);
                if (r == -ETIMEDOUT)
                        continue;
                if (r < 0)
                        break;
                if (m->lost)
                        log_info("gshare agent at %s is back", m->cli->socket);
                m->lost = false;
                if (gpus_from_reply(m, rep->list_gpus, &g, &n) == 0)
                        publish(m, g, n, true);
                gs_ctl_reply_free(rep);
        }
        if (!stopping(m)) {
                if (!m->lost)
                        log_info("lost the gshare agent's Watch stream (%s); reconnecting",
                                 r == -ECONNRESET ? "closed" : strerror(-r));
                m->lost = true;
        }
        close(fd);
}

static void *watcher(void *arg)
{
        struct gs_mirror *m = arg;

        while (!stopping(m)) {
                watch_once(m);
                if (stopping(m))
                        break;
                /* A restart or an upgrade closes the stream and the agent
                 * answers again within a moment: units go Unhealthy only
                 * if it does not. */
                bool back = false;
                for (int64_t t0 = gs_mono_ms(); !back && !stopping(m) && gs_mono_ms() - t0 < GS_MIRROR_GRACE_MS;) {
                        int fd = gs_ctl_connect(m->cli->socket);
                        back = fd >= 0;
                        if (back)
                                close(fd);
                        else
                                usleep(50 * 1000);
                }
                if (back)
                        continue;
                publish(m, NULL, 0, false);
                for (int i = 0; i < 5 && !stopping(m); i++) /* retry every 0.5 s */
                        usleep(100 * 1000);
        }
        return NULL;
}

/* Parses id and checks that it is one of ours; pre: mu held.  On failure
 * msg names the ID and the problem. */
int gs_mirror_check_id(const struct gs_mirror *m, const char *id, const char *resource,
                       const struct gs_mirror_gpu **ret_gpu, uint32_t *ret_unit, char *msg, size_t n)
{
        char uuid[GS_UUID_STR_LEN + 1];
        const struct gs_mirror_gpu *g;
        uint32_t unit;

        if (gs_devid_parse(id, uuid, &unit) < 0) {
                snprintf(msg, n, "device ID '%.80s' is not a gshare device ID", id);
                return -EINVAL;
        }
        g = gs_mirror_find(m, uuid);
        if (!g || unit >= g->units) {
                snprintf(msg, n, "device ID '%s' is not a %s device of this node", id, resource);
                return -ENOENT;
        }
        *ret_gpu = g;
        *ret_unit = unit;
        return 0;
}

void gs_mirror_add_devices(struct gs_mirror *m, struct gs_ctrspec *s, const char *nvidia_proc,
                           const Gshare__Ctl__V1__Allocation *al)
{
        char pci[GS_MAX_GPUS_PER_ALLOC][32] = { { 0 } };
        const char *pcis[GS_MAX_GPUS_PER_ALLOC];
        size_t n = al->n_parts < GS_MAX_GPUS_PER_ALLOC ? al->n_parts : GS_MAX_GPUS_PER_ALLOC;

        pthread_mutex_lock(&m->mu);
        for (size_t i = 0; i < n; i++) {
                const struct gs_mirror_gpu *g = gs_mirror_find(m, al->parts[i]->gpu_uuid);
                if (g)
                        snprintf(pci[i], sizeof(pci[i]), "%s", g->pci);
                pcis[i] = pci[i];
        }
        pthread_mutex_unlock(&m->mu);
        gs_ctrspec_add_devices(s, nvidia_proc, pcis, n);
}

uint32_t gs_mirror_largest(const struct gs_mirror *m)
{
        uint32_t most = 0;

        for (size_t i = 0; i < m->ngpus; i++)
                if (m->gpus[i].units > most)
                        most = m->gpus[i].units;
        return most;
}

int gs_mirror_start(struct gs_mirror *m, struct gs_agentcli *cli, int wait_ms)
{
        struct timespec until = deadline_in(wait_ms);

        m->cli = cli;
        pthread_mutex_init(&m->mu, NULL);
        pthread_cond_init(&m->cv, NULL);
        if (pthread_create(&m->watcher, NULL, watcher, m) != 0)
                return -EAGAIN;
        m->started = true;
        pthread_mutex_lock(&m->mu);
        while (!m->agent_seen && pthread_cond_timedwait(&m->cv, &m->mu, &until) != ETIMEDOUT)
                ;
        pthread_mutex_unlock(&m->mu);
        return 0;
}

void gs_mirror_shutdown(struct gs_mirror *m)
{
        pthread_mutex_lock(&m->mu);
        m->stopping = true;
        pthread_cond_broadcast(&m->cv);
        pthread_mutex_unlock(&m->mu);
}

void gs_mirror_free(struct gs_mirror *m)
{
        if (m->started)
                pthread_join(m->watcher, NULL);
        m->started = false;
        free_gpus(m->gpus, m->ngpus);
        m->gpus = NULL;
        m->ngpus = 0;
        pthread_mutex_destroy(&m->mu);
        pthread_cond_destroy(&m->cv);
}
