/* gs_nvml.c — see gs_nvml.h. */
#include "gs_nvml.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gs_nvmldecl.h"

struct gs_nvml_fns {
        __typeof__(nvmlInit_v2) *init;
        __typeof__(nvmlShutdown) *shutdown;
        __typeof__(nvmlDeviceGetCount_v2) *count;
        __typeof__(nvmlDeviceGetHandleByIndex_v2) *by_index;
        __typeof__(nvmlDeviceGetUUID) *uuid;
        __typeof__(nvmlDeviceGetComputeRunningProcesses_v3) *procs;
};

int gs_nvml_open(struct gs_nvml *n, const char *path, char *err, size_t errlen)
{
        struct gs_nvml_fns *f;
        nvmlReturn_t r;

        memset(n, 0, sizeof(*n));
        n->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!n->dl) {
                snprintf(err, errlen, "cannot load %s: %s", path, dlerror());
                return -ENOENT;
        }
        f = calloc(1, sizeof(*f));
        if (!f) {
                gs_nvml_close(n);
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        n->fn = f;
#define SYM(field, name)                                          \
        if (!(*(void **)&f->field = dlsym(n->dl, name))) {        \
                snprintf(err, errlen, "%s lacks %s", path, name); \
                gs_nvml_close(n);                                 \
                return -ENOSYS;                                   \
        }
        SYM(init, "nvmlInit_v2")
        SYM(shutdown, "nvmlShutdown")
        SYM(count, "nvmlDeviceGetCount_v2")
        SYM(by_index, "nvmlDeviceGetHandleByIndex_v2")
        SYM(uuid, "nvmlDeviceGetUUID")
        SYM(procs, "nvmlDeviceGetComputeRunningProcesses_v3")
#undef SYM
        r = f->init();
        if (r != NVML_SUCCESS) {
                snprintf(err, errlen, "nvmlInit_v2: error %d", (int)r);
                f->shutdown = NULL;
                gs_nvml_close(n);
                return -EIO;
        }
        return 0;
}

void gs_nvml_close(struct gs_nvml *n)
{
        if (n->fn && n->fn->shutdown)
                (void)n->fn->shutdown();
        free((void *)n->fn);
        if (n->dl)
                dlclose(n->dl);
        memset(n, 0, sizeof(*n));
}

void *gs_nvml_device(struct gs_nvml *n, const char *uuid)
{
        unsigned int count = 0;

        if (!n->fn || n->fn->count(&count) != NVML_SUCCESS)
                return NULL;
        for (unsigned int i = 0; i < count && i < 64; i++) {
                nvmlDevice_t d;
                char u[NVML_DEVICE_UUID_V2_BUFFER_SIZE];

                if (n->fn->by_index(i, &d) == NVML_SUCCESS && n->fn->uuid(d, u, sizeof(u)) == NVML_SUCCESS &&
                    strcasecmp(u, uuid) == 0)
                        return d;
        }
        return NULL;
}

int gs_nvml_procs(struct gs_nvml *n, void *dev, struct gs_nvml_proc *out, uint32_t max, uint32_t *count)
{
        nvmlProcessInfo_t *info;
        unsigned int k = max;
        nvmlReturn_t r;

        *count = 0;
        if (!n->fn || !dev)
                return -ENODEV;
        info = calloc(max ? max : 1, sizeof(*info));
        if (!info)
                return -ENOMEM;
        r = n->fn->procs(dev, &k, info);
        if (r != NVML_SUCCESS || k > max) {
                free(info);
                return r == NVML_ERROR_INSUFFICIENT_SIZE ? -ENOSPC : -EIO;
        }
        for (unsigned int i = 0; i < k; i++) {
                out[i].pid = (pid_t)info[i].pid;
                out[i].bytes = info[i].usedGpuMemory == NVML_VALUE_NOT_AVAILABLE ? 0 : info[i].usedGpuMemory;
        }
        *count = k;
        free(info);
        return 0;
}

uint64_t gs_nvml_pid_bytes(struct gs_nvml *n, const char *uuid, pid_t pid)
{
        void *dev = gs_nvml_device(n, uuid);
        struct gs_nvml_proc *pr;
        uint32_t k = 0;
        uint64_t b = 0;

        if (!dev)
                return 0;
        pr = calloc(GS_NVML_MAX_PROCS, sizeof(*pr));
        if (pr && gs_nvml_procs(n, dev, pr, GS_NVML_MAX_PROCS, &k) == 0)
                for (uint32_t i = 0; i < k; i++)
                        if (pr[i].pid == pid)
                                b = pr[i].bytes;
        free(pr);
        return b;
}
