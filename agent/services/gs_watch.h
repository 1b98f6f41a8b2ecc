/* gs_watch.h — the API server's watch of the pods on this node.
 *
 * PodResources (gs_recon.h) is polled every reconcileInterval; this watch
 * makes release follow a pod's end at once.  A thread of its own lists the
 * node's pods (GET /api/v1/pods?fieldSelector=spec.nodeName=<node>&limit=1,
 * only for the list's resourceVersion), then watches from there, reading
 * the newline-delimited JSON events as they stream (libcurl).  When a pod is
 * DELETED or reaches phase Succeeded or Failed it calls gs_recon_kick, and
 * once more a reclaimGrace later (the reconciler releases only what it has
 * seen unheld for the grace): it never releases anything itself, so the
 * reconciler's grace and its rule of never releasing on missing
 * information hold unchanged.
 *
 * Errors reconnect with a backoff of 1 s doubling to 30 s; 410 Gone (HTTP
 * status or an ERROR event) lists again.  The token is read afresh at each
 * connect (projected tokens rotate).  The server's bytes are untrusted:
 * every line is bounded by GS_WATCH_MAX_LINE, every JSON value by
 * GS_JSON_MAX_DEPTH (gs_json.h); a bad line is logged and skipped.
 *
 * Configuration (gs_config.h): podWatch auto|on|off (auto: on when in a
 * cluster), apiServer (default https://$KUBERNETES_SERVICE_HOST:
 * $KUBERNETES_SERVICE_PORT), apiTokenFile, apiCaFile, nodeName (default
 * $NODE_NAME). */
#ifndef GS_WATCH_H
#define GS_WATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "gs_config.h"
#include "gs_util.h"

struct gs_recon;
struct gs_watch;

#define GS_WATCH_MAX_LINE (1u << 20)
/* A list reply (limit=1: one pod at most) larger than this is refused. */
#define GS_WATCH_MAX_LIST (4u << 20)
#define GS_WATCH_BACKOFF_MIN_MS 1000
#define GS_WATCH_BACKOFF_MAX_MS 30000

/* Starts the watch per c, kicking rc.  Returns 0 with *ret NULL when the
 * watch is off (podWatch off; auto outside a cluster; no reconciler), 0 with
 * *ret set when started, or a negative errno with err saying why (podWatch
 * on without an API server or a node name; bad apiServer URL). */
int gs_watch_start(const struct gs_config *c, struct gs_recon *rc, struct gs_watch **ret, char *err,
                   size_t errlen) GS_WUR;

/* Stops the thread at once (an HTTP transfer in flight is abandoned) and
 * frees w.  NULL is fine. */
void gs_watch_stop(struct gs_watch *w);

/* ---- the parts, for tests ---- */

/* What one watch event says; strings empty when absent. */
struct gs_watch_event {
        char type[16];  /* ADDED MODIFIED DELETED ERROR BOOKMARK */
        char rv[128];   /* object.metadata.resourceVersion */
        char phase[32]; /* object.status.phase */
        char name[256]; /* object.metadata.name */
        char code[16];  /* object.code (an ERROR's Status) */
};

/* Parses one line (one JSON object, len bytes, no NUL needed) into ev.
 * Returns 0, or -EINVAL (not one JSON object, too deep, no "type"). */
int gs_watch_parse_event(const char *line, size_t len, struct gs_watch_event *ev) GS_WUR;

/* metadata.resourceVersion of a list reply into rv (cap bytes).  Returns 0
 * or -EINVAL (not JSON, or no resourceVersion). */
int gs_watch_parse_list_rv(const char *body, size_t len, char *rv, size_t cap) GS_WUR;

#endif
