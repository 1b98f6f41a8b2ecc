/* gs_policy.h — which units a container should get (the device plugin's
 * GetPreferredAllocation): all of one GPU when they fit, best fit (the GPU
 * with the fewest available units that still holds the request, or the
 * one of the must-include units); else the fewest GPUs, largest
 * availability first.  The kubelet may ignore the preference; Allocate
 * checks what it gets. */
#ifndef GS_POLICY_H
#define GS_POLICY_H

#include <grpc/status.h>
#include <stddef.h>

#include "deviceplugin_v1beta1.pb-c.h"
#include "gs_mirror.h"

/* Chooses r->allocation_size of the offered IDs (pointers to the request's
 * strings into out); pre: m->mu held.  A bad request (size out of range,
 * IDs not ours) is INVALID_ARGUMENT with msg saying why. */
grpc_status_code gs_policy_prefer(const struct gs_mirror *m, const char *resource,
                                  const V1beta1__ContainerPreferredAllocationRequest *r, const char **out, char *msg,
                                  size_t n);

#endif
