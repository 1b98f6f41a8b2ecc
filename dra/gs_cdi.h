/* gs_cdi.h — the DRA plugin's CDI specs (Container Device Interface): one
 * file per prepared claim, <cdiDir>/<vendor>-<class>_<claim uid>.json,
 * holding one device named by the claim's UID whose containerEdits are the
 * container spec of its allocation (common/gs_ctrspec.h).  The runtime
 * (containerd, CRI-O) applies them for the CDI device ID
 * "<kind>=<claim uid>" that NodePrepareResources returns.
 *
 * Written under a hidden temporary name and renamed into place, so the
 * runtime never reads half a file; rewriting the same claim's file is
 * harmless (prepare is idempotent). */
#ifndef GS_CDI_H
#define GS_CDI_H

#include <stdio.h>

#include "gs_ctrspec.h"
#include "gs_util.h"

#define GS_CDI_KIND "gshare.io/gpumem"
#define GS_CDI_VERSION "0.5.0"

/* The spec's JSON for device name with edits s, to f.  0 or -EIO. */
int gs_cdi_json(FILE *f, const char *kind, const char *name, const struct gs_ctrspec *s) GS_WUR;

/* Writes the spec of claim name into dir (created 0755 if missing).
 * 0 or a negative errno with err. */
int gs_cdi_write(const char *dir, const char *kind, const char *name, const struct gs_ctrspec *s, char *err,
                 size_t errlen) GS_WUR;

/* Removes it; 0 also if it was not there. */
int gs_cdi_remove(const char *dir, const char *kind, const char *name) GS_WUR;

#endif
