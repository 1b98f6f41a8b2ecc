/* gs_podburst.h — the burst limit a device-plugin pod asks for with its
 * annotation gshare.io/gpumem-burst (docs/burst.md), read from the API
 * server by the reconciler's thread (gs_recon.h) for the pods PodResources
 * shows holding our resource.
 *
 * GET /api/v1/namespaces/<ns>/pods/<name>; the value is a size ("40Gi"),
 * per GPU, quota included.  The answer of each pod is kept for
 * GS_PODBURST_TTL_MS (at most GS_PODBURST_CACHE pods), so a node's pods
 * cost one GET a minute each at most.  The server's reply is untrusted:
 * at most GS_PODBURST_MAX_REPLY bytes, parsed by gs_json (bounded).
 * The same answer gives the pod's compute policy (gs_qos.h, docs/compute.md):
 * its spec.priority and annotations gshare.io/compute-class,
 * gshare.io/compute-cap and gshare.io/compute-weight.
 * Without an API server nothing is asked, no pod has a burst and every
 * allocation keeps its policy. */
#ifndef GS_PODBURST_H
#define GS_PODBURST_H

#include <stddef.h>
#include <stdint.h>

#include "gs_config.h"
#include "gs_qos.h"
#include "gs_util.h"

#define GS_PODBURST_ANNOTATION "gshare.io/gpumem-burst"
#define GS_PODBURST_CACHE 1024u
#define GS_PODBURST_TTL_MS 60000
#define GS_PODBURST_MAX_REPLY (1u << 20)

struct gs_podburst;

/* 0 with *ret NULL when there is no API server; -EINVAL with err. */
int gs_podburst_new(const struct gs_config *c, struct gs_podburst **ret, char *err, size_t errlen) GS_WUR;
void gs_podburst_free(struct gs_podburst *pb);

/* One thread (the reconciler's).  The burst pod ns/name asks for into
 * *ret (0: none), from the cache or the API server.  0, or a negative errno
 * with err saying why: then *ret is 0.  A bad value (-EINVAL) is kept as
 * no burst, so it is said once a TTL; a failed request is not kept. */
int gs_podburst_get(struct gs_podburst *pb, const char *ns, const char *name, uint64_t *ret, char *err,
                    size_t errlen) GS_WUR;

/* What the API server said of one pod. */
struct gs_podinfo {
        uint64_t burst; /* 0: none */
        struct gs_qos_policy qos;
        /* A bad compute value, said when the answer is new (once a TTL):
         * "" otherwise. */
        char qos_err[384];
};

/* As gs_podburst_get, with the pod's compute policy too. */
int gs_podburst_pod(struct gs_podburst *pb, const char *ns, const char *name, struct gs_podinfo *ret, char *err,
                    size_t errlen) GS_WUR;
/* The compute policy of a Pod's JSON into *ret (gs_qos_from_pod with
 * lc_priority); 0, or -EINVAL with err (the default of the bad value
 * applies). */
int gs_podburst_parse_qos(const char *json, size_t len, int64_t lc_priority, struct gs_qos_policy *ret, char *err,
                          size_t errlen) GS_WUR;

/* The annotation of a Pod's JSON into *ret (0: absent).  0, or -EINVAL
 * with err (not a Pod's JSON, a value that is not a size or is 0). */
int gs_podburst_parse(const char *json, size_t len, uint64_t *ret, char *err, size_t errlen) GS_WUR;

#endif
