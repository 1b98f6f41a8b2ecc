/* gs_publish.c — the DRA plugin's ResourceSlice publisher: a thread that
 * publishes the healthy GPUs of the mirror (gs_slice.h) whenever they
 * differ from what was published, retrying with a backoff, and checks that
 * the slice still exists.  While the agent is away the slice stays as it
 * was: an agent restart must not withdraw the devices running pods hold.
 * See gs_dractx.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "gs_dractx.h"
#include "gs_log.h"

#define REPUBLISH_MIN_MS 1000
#define REPUBLISH_MAX_MS 30000
/* How often the plugin checks that its slice still exists. */
#define SLICE_CHECK_MS 5000
/* How often the publisher looks at its timers without a change. */
#define TICK_MS 250

/* Publishes the healthy GPUs if they differ from what was published.
 * Returns 0 when nothing is left to do. */
static int publish(struct gs_dractx *d)
{
        struct gs_slice_gpu now[GS_MIRROR_MAX_GPUS];
        size_t n = 0;
        char err[512];
        int r;

        memset(now, 0, sizeof(now)); /* compared whole with memcmp */
        pthread_mutex_lock(&d->m.mu);
        for (size_t i = 0; i < d->m.ngpus && n < GS_MIRROR_MAX_GPUS; i++) {
                const struct gs_mirror_gpu *g = &d->m.gpus[i];
                struct gs_slice_gpu *s = &now[n];

                if (!g->healthy)
                        continue;
                s->index = g->index;
                snprintf(s->uuid, sizeof(s->uuid), "%s", g->uuid);
                snprintf(s->name, sizeof(s->name), "%s", g->name);
                s->numa_node = g->numa;
                snprintf(s->pci, sizeof(s->pci), "%s", g->pci);
                s->total_bytes = g->total_bytes;
                s->unit_bytes = g->unit_bytes;
                s->capacity_bytes = (uint64_t)g->units * g->unit_bytes;
                n++;
        }
        pthread_mutex_unlock(&d->m.mu);
        if (d->is_published && n == d->npublished && memcmp(now, d->published, n * sizeof(now[0])) == 0)
                return 0;
        if (!d->kapi.base[0])
                return 0;
        r = gs_slice_publish(&d->kapi, d->o->driver, d->o->node, d->generation + 1, now, n, d->driver_version, err,
                             sizeof(err));
        if (r < 0) {
                log_warn("ResourceSlice not published: %s", err);
                return r;
        }
        d->generation++;
        memcpy(d->published, now, n * sizeof(now[0]));
        d->npublished = n;
        d->is_published = true;
        log_info("ResourceSlice %s-%s published: %zu GPUs, pool generation %llu", d->o->node, d->o->driver, n,
                 (unsigned long long)d->generation);
        return 0;
}

/* The watcher's periodic work: the slice published when it is due, and
 * its existence checked every SLICE_CHECK_MS (and at once after a
 * registration): the kubelet deletes the node's ResourceSlices when it
 * starts, and a driver's when it stays unregistered for 30 s. */
static void tick(struct gs_dractx *d)
{
        int64_t now = gs_mono_ms();
        char err[512];

        if (d->kapi.base[0] && d->is_published && (atomic_exchange(&d->check_slice, false) || now >= d->check_at)) {
                int r = gs_slice_exists(&d->kapi, d->o->driver, d->o->node, err, sizeof(err));

                d->check_at = now + SLICE_CHECK_MS;
                if (r == 0) {
                        log_warn("ResourceSlice %s-%s is gone (deleted by the kubelet?); publishing it again",
                                 d->o->node, d->o->driver);
                        d->is_published = false;
                        d->dirty = true;
                        d->retry_at = 0;
                } else if (r < 0) {
                        log_debug("cannot check the ResourceSlice: %s", err);
                }
        }
        if (d->dirty && now >= d->retry_at) {
                if (publish(d) == 0) {
                        d->dirty = false;
                        d->backoff = REPUBLISH_MIN_MS;
                        d->check_at = now + SLICE_CHECK_MS;
                } else {
                        d->retry_at = now + d->backoff;
                        d->backoff = d->backoff * 2 > REPUBLISH_MAX_MS ? REPUBLISH_MAX_MS : d->backoff * 2;
                }
        }
}

static void *publisher_main(void *arg)
{
        struct gs_dractx *d = arg;
        uint64_t seen = 0;

        d->backoff = REPUBLISH_MIN_MS;
        pthread_mutex_lock(&d->m.mu);
        while (!d->m.stopping) {
                /* A list from the agent (not its absence) is published. */
                if (d->m.gen != seen && d->m.agent_up) {
                        d->dirty = true;
                        d->retry_at = 0;
                }
                seen = d->m.gen;
                pthread_mutex_unlock(&d->m.mu);
                tick(d);
                pthread_mutex_lock(&d->m.mu);
                gs_mirror_wait(&d->m, seen, TICK_MS);
        }
        pthread_mutex_unlock(&d->m.mu);
        return NULL;
}

int gs_dra_publisher_start(struct gs_dractx *d)
{
        int r = pthread_create(&d->publisher, NULL, publisher_main, d);

        if (r)
                return -r;
        d->publisher_started = true;
        return 0;
}

void gs_dra_publisher_join(struct gs_dractx *d)
{
        if (d->publisher_started)
                pthread_join(d->publisher, NULL);
        d->publisher_started = false;
}
