/* gs_file.h — a file replaced whole or not at all: written under a
 * temporary name beside it (created O_EXCL | O_NOFOLLOW, close-on-exec),
 * flushed to the disk, renamed over the old one, and the directory synced,
 * so that a crash leaves the old file or the new one, never a part.  Used
 * for the agent's checkpoint and claims table and the DRA plugin's CDI
 * specs. */
#ifndef GS_FILE_H
#define GS_FILE_H

#include <stdio.h>
#include <sys/types.h>

#include "gs_util.h"

/* Writes the file's contents to f; 0 or a negative errno. */
typedef int (*gs_file_fill_fn)(FILE *f, void *ctx);

/* Replaces path with what fill writes, created with mode.  0, or a
 * negative errno with path unchanged and the temporary file gone. */
int gs_file_replace(const char *path, mode_t mode, gs_file_fill_fn fill, void *ctx) GS_WUR;

#endif
