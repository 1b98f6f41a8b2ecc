/* gs_claim.h — what the DRA plugin needs of a ResourceClaim
 * (resource.k8s.io/v1): its UID and the allocation results of our driver,
 * read from the API server's JSON (GET .../resourceclaims/<name>).
 *
 * The JSON is parsed with libyaml (JSON is YAML's flow style; one library
 * fewer).  The server's bytes are untrusted: the caller bounds their size,
 * every string is bounded here, and at most GS_CLAIM_MAX_RESULTS results
 * are taken. */
#ifndef GS_CLAIM_H
#define GS_CLAIM_H

#include <stddef.h>
#include <stdint.h>

#include "gs_util.h"

#define GS_CLAIM_MAX_RESULTS 32
#define GS_CLAIM_MAX_BYTES (1u << 20)

struct gs_claim_result {
        char request[64];
        char pool[254];
        char device[64];
        char share_id[64];
        uint64_t memory;  /* consumedCapacity.memory in bytes; 0: none */
        uint32_t compute; /* consumedCapacity.compute, percent 0..100; 0: none */
};

struct gs_claim_info {
        char uid[64];
        int allocated; /* status.allocation present */
        /* The burst limit (docs/burst.md) from the opaque configuration of
         * our driver that applies to our results
         * (status.allocation.devices.config[].opaque.parameters.burst, a
         * quantity of bytes); 0: none. */
        uint64_t burst;
        /* Compute QoS (docs/compute.md), from the same parameters
         * (computeClass, computeCap, computeWeight): "" or a class name, a
         * cap in percent (0: none), a weight 1..100 (0: none).
         * latency-critical only from the DeviceClass's configuration
         * (source FromClass: the administrator's), never from the claim's
         * own; of several configurations the lowest class, the smallest
         * cap and the smallest weight win. */
        char compute_class[32];
        uint32_t compute_cap;
        uint32_t compute_weight;
        size_t nresults; /* results of driver only */
        struct gs_claim_result results[GS_CLAIM_MAX_RESULTS];
};

/* Parses the claim in json[0..len) keeping the results whose driver is
 * driver, and the burst of its configuration.  0, or -EINVAL with err (not
 * a JSON object; a consumedCapacity memory that is not a quantity, a
 * compute that is not a percent (0..100); more
 * than GS_CLAIM_MAX_RESULTS of ours; a configuration of our driver with a
 * parameter other than burst, computeClass, computeCap, computeWeight,
 * apiVersion and kind, a burst that is not a quantity of bytes, or two
 * that differ; a bad compute parameter). */
int gs_claim_parse(const char *json, size_t len, const char *driver, struct gs_claim_info *ret, char *err,
                   size_t errlen) GS_WUR;

/* The cap (percent of GPU time, 0: none) of result r of claim ci
 * (docs/compute.md): the compute it consumed (what the scheduler counted
 * for it on the device's capacity.compute) unless it is 0 or all of it
 * (100: no cap), lowered by a computeCap of its configuration (the
 * smallest wins). */
uint32_t gs_claim_compute_cap(const struct gs_claim_info *ci, const struct gs_claim_result *r);

/* A Kubernetes quantity of bytes: "8Gi", "2048Mi", "8G", "1e9", "123".
 * -EINVAL for anything else (negative, fractional bytes, milli), -ERANGE. */
int gs_claim_quantity(const char *s, uint64_t *ret) GS_WUR;

#endif
