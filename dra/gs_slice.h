/* gs_slice.h — the node's ResourceSlice (resource.k8s.io/v1), published by
 * the DRA plugin: one pool named after the node, one slice, one device per
 * healthy GPU gshare manages:
 *
 *   name: gpu-<agent index>
 *   allowMultipleAllocations: true      (claims share the GPU)
 *   attributes: uuid, productName, index, numaNode (when known), memory
 *               (the GPU's total bytes), driverVersion (a semver, when
 *               <nvidiaProc>/version names one)
 *   capacity.memory: units_total x unitSize (what the pool can give), with
 *     requestPolicy default = validRange.min = validRange.step = unitSize,
 *     so the scheduler rounds every request up to whole units.
 *   capacity.compute: GS_SLICE_COMPUTE (percent of the GPU's time), with
 *     requestPolicy default 0, validRange 0..100 step 1: the scheduler
 *     keeps the claims' compute on a GPU within 100; a claim's consumed
 *     compute becomes its cap (docs/compute.md, gs_prepare.c).
 *
 * Published by server-side apply (PATCH, application/apply-patch+yaml,
 * force), so the same call creates the slice or replaces its spec, and the
 * pool's generation increases with every publication (seeded from the
 * clock, so that a restarted plugin's slice is newer). */
#ifndef GS_SLICE_H
#define GS_SLICE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gs_devid.h"
#include "gs_kapi.h"
#include "gs_util.h"

/* A device's compute capacity: percent of its time. */
#define GS_SLICE_COMPUTE 100u

struct gs_slice_gpu {
        uint32_t index;
        char uuid[GS_UUID_STR_LEN + 1];
        char name[256];
        int numa_node; /* -1: unknown */
        uint64_t total_bytes;
        uint64_t capacity_bytes; /* units_total x unit_bytes */
        uint64_t unit_bytes;
        char pci[32]; /* PCI bus id, for device nodes (not published) */
};

/* The slice's name: "<node>-<driver>" (a DNS subdomain). */
int gs_slice_name(char *buf, size_t cap, const char *node, const char *driver) GS_WUR;

/* The slice's JSON to f.  driver_version "" leaves the attribute out. */
int gs_slice_json(FILE *f, const char *driver, const char *node, uint64_t generation, const struct gs_slice_gpu *g,
                  size_t n, const char *driver_version) GS_WUR;

/* Applies the slice.  0, or a negative errno with err (-EACCES for HTTP
 * 401/403: the RBAC). */
int gs_slice_publish(const struct gs_kapi *k, const char *driver, const char *node, uint64_t generation,
                     const struct gs_slice_gpu *g, size_t n, const char *driver_version, char *err,
                     size_t errlen) GS_WUR;

/* Whether the slice exists on the API server: 1, 0 (404), or a negative
 * errno with err (the kubelet deletes a node's slices when it starts, and
 * a driver's when it stays unregistered for 30 s: the plugin checks). */
int gs_slice_exists(const struct gs_kapi *k, const char *driver, const char *node, char *err, size_t errlen) GS_WUR;

/* The driver's version from the first line of an NVIDIA version file
 * ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.03  ...") as a
 * semver ("580.159.3") into buf; "" when there is none. */
void gs_slice_driver_version(const char *path, char *buf, size_t cap);

#endif
