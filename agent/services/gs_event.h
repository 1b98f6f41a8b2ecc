/* gs_event.h — Kubernetes Events on pods (core/v1), posted by the agent
 * when a pod goes over its quota outside the pool with overQuota: report
 * (gs_usage.h), so that `kubectl describe pod` shows it.
 *
 * A thread of its own POSTs each Event to
 * <apiServer>/api/v1/namespaces/<ns>/events with the service account's
 * token (libcurl, the settings of gs_watch.h), so the main loop never
 * waits on the API server.  At most GS_EVENT_QUEUE Events wait; more are
 * dropped (logged at debug level by the caller).  Without an API server or a node name nothing is
 * posted. */
#ifndef GS_EVENT_H
#define GS_EVENT_H

#include <stdint.h>

#include "gs_config.h"
#include "gs_util.h"

#define GS_EVENT_QUEUE 16

struct gs_events;

/* What an Event is about: the pod, or (an allocation of a DRA claim, whose
 * pod the agent does not know) the ResourceClaim. */
enum gs_event_obj { GS_EVENT_POD, GS_EVENT_CLAIM };
/* Its type: Warning (over quota) or Normal (borrowing, docs/burst.md). */
enum gs_event_type { GS_EVENT_WARNING, GS_EVENT_NORMAL };

/* NULL with 0 when there is no API server to post to. */
int gs_events_start(const struct gs_config *c, struct gs_events **ret, char *err, size_t errlen) GS_WUR;
void gs_events_stop(struct gs_events *ev);
/* Queues an Event of type with reason on the pod or claim ns/name (uid may
 * be "").  Returns 0, -EAGAIN (queue full: dropped), or -EINVAL (a name
 * that is not a DNS label/subdomain, or ev NULL). */
int gs_events_post(struct gs_events *ev, enum gs_event_type type, enum gs_event_obj obj, const char *ns,
                   const char *name, const char *uid, const char *reason, const char *message);

/* The JSON body of an Event, for tests.  Returns the length written (< cap)
 * or -ENOSPC. */
int gs_event_json(char *buf, size_t cap, enum gs_event_type type, enum gs_event_obj obj, const char *ns,
                  const char *name, const char *uid, const char *reason, const char *message, const char *node,
                  int64_t unix_s) GS_WUR;

#endif
