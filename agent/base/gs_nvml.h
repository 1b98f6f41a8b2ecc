/* gs_nvml.h — the few NVML queries the agent makes: which processes hold
 * memory on a GPU, and how much (config nvmlLibrary, loaded with dlopen
 * like the CUDA driver, so the fake libnvidia-ml of the tests can stand in).
 *
 * NVML's per-process figure of a process that uses the hook is exactly its
 * memory outside the agent's pool (contexts, modules, anything allocated
 * around the hook): memory imported from the agent's chunks is counted to
 * the agent, which created it. */
#ifndef GS_NVML_H
#define GS_NVML_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gs_util.h"

/* At most this many processes per GPU are looked at in one scan. */
#define GS_NVML_MAX_PROCS 1024u

struct gs_nvml_fns;

struct gs_nvml {
        void *dl;
        const struct gs_nvml_fns *fn;
};

struct gs_nvml_proc {
        pid_t pid;
        uint64_t bytes;
};

/* dlopens path and initializes NVML.  0, or a negative errno with the
 * reason in err (the agent then runs without outside accounting). */
int gs_nvml_open(struct gs_nvml *n, const char *path, char *err, size_t errlen) GS_WUR;
void gs_nvml_close(struct gs_nvml *n);
/* The NVML device whose UUID string is uuid ("GPU-..."); NULL if none. */
void *gs_nvml_device(struct gs_nvml *n, const char *uuid);
/* What NVML shows process pid holding on the device whose UUID string is
 * uuid; 0 if unknown. */
uint64_t gs_nvml_pid_bytes(struct gs_nvml *n, const char *uuid, pid_t pid);
/* Fills out[0..*count) (capacity max) with the compute processes on dev.
 * Figures NVML does not give are 0.  0 or a negative errno. */
int gs_nvml_procs(struct gs_nvml *n, void *dev, struct gs_nvml_proc *out, uint32_t max, uint32_t *count) GS_WUR;

#endif
