/* gs_devid.h — GPU UUIDs and the device IDs gshare advertises.
 *
 * A device ID names one unit of one GPU: "<gpu uuid>-u<unit index>", e.g.
 * "GPU-8f3c2c1a-5b7d-4e1f-9a0b-0123456789ab-u17".  It is stable across
 * restarts (derived from the UUID, which the driver reports, and the unit
 * index) and at most GS_DEVID_MAX characters (the kubelet's limit is 63). */
#ifndef GS_DEVID_H
#define GS_DEVID_H

#include <stddef.h>
#include <stdint.h>

#include "gs_util.h"

#define GS_UUID_STR_LEN 40 /* "GPU-" + 36 */
#define GS_DEVID_MAX 63
#define GS_MAX_UNITS_PER_GPU 100000u

/* raw[16] as cuDeviceGetUuid gives it -> "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
 * pre: out has GS_UUID_STR_LEN + 1 bytes. */
void gs_uuid_format(const uint8_t raw[16], char *out);
/* The inverse; -EINVAL unless s is exactly that form (lower or upper case hex). */
int gs_uuid_parse(const char *s, uint8_t ret_raw[16]) GS_WUR;

/* Writes the device ID of unit `unit` of GPU `uuid` (a formatted UUID).
 * Returns 0, or -EINVAL for a bad uuid or unit >= GS_MAX_UNITS_PER_GPU, or
 * -ENOSPC if n is too small. */
int gs_devid_format(char *buf, size_t n, const char *uuid, uint32_t unit) GS_WUR;
/* Splits a device ID.  ret_uuid has GS_UUID_STR_LEN + 1 bytes.  -EINVAL if
 * id is not of the form above (the message to give a user: "not a gshare
 * device ID"); outputs untouched on failure. */
int gs_devid_parse(const char *id, char *ret_uuid, uint32_t *ret_unit) GS_WUR;

#endif
