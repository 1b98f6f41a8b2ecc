/* gs_metrics.h — the agent's Prometheus endpoint (config metricsAddress):
 * GET /metrics answers the text exposition format, version 0.0.4, with the
 * GPUs' pools, the allocations' quotas and usage, and histograms of the
 * agent's work (gs_hist.h); docs/metrics.md lists every metric.  Served
 * from the main epoll loop, never blocking it.
 *
 * Clients are hostile: a request (line and headers) is at most
 * GS_METRICS_MAX_REQUEST bytes (431 beyond), a connection lives at most
 * GS_METRICS_DEADLINE_MS from accept (408 and closed then, whatever it is
 * doing), at most GS_METRICS_MAX_CLIENTS are served at once (503 and closed
 * beyond), and the response is written with non-blocking sends, the unsent
 * part kept per connection (a gs_stream server, gs_stream.h).  One request
 * per connection (Connection: close). */
#ifndef GS_METRICS_H
#define GS_METRICS_H

#include <stdbool.h>
#include <sys/socket.h>

#include "gs_agent.h"

#define GS_METRICS_MAX_REQUEST 8192u
#define GS_METRICS_DEADLINE_MS 5000
#define GS_METRICS_MAX_CLIENTS 64u
/* A response larger than this is not sent (the connection is closed). */
#define GS_METRICS_MAX_RESPONSE (64u << 20)

struct gs_metrics;

/* Listens on addr ("A.B.C.D:port" or "[v6]:port"); *ret = NULL and 0 if
 * addr is empty (metrics off).  A negative errno with the reason in err. */
int gs_metrics_new(struct gs_agent *ag, const char *addr, struct gs_metrics **ret, char *err, size_t errlen) GS_WUR;
/* Closes every connection and the listening socket.  NULL is fine. */
void gs_metrics_free(struct gs_metrics *m);

/* "host:port" with host an IPv4 literal or a bracketed IPv6 literal
 * (no name lookups) into *ret; -EINVAL otherwise. */
int gs_metrics_parse_address(const char *addr, struct sockaddr_storage *ret, socklen_t *ret_len) GS_WUR;
/* Looks at the first len bytes received.  Returns 0 while the request is
 * incomplete (no blank line yet), else the HTTP status to answer: 200 for
 * GET or HEAD /metrics, 400 malformed, 404 other path, 405 other method, 431
 * when len reaches GS_METRICS_MAX_REQUEST without a complete request.
 * *ret_head is set for HEAD. */
int gs_metrics_parse_request(const char *buf, size_t len, bool *ret_head);
/* The exposition text of the agent's state into *ret (malloc'd, not
 * NUL-terminated), its length in *ret_len.  Main thread; takes each GPU's
 * lock.  0 or -ENOMEM. */
int gs_metrics_render(struct gs_agent *ag, char **ret, size_t *ret_len) GS_WUR;

#endif
