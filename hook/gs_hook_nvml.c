/* gs_hook_nvml.c — NVML's memory queries, so that nvidia-smi and pynvml
 * inside a container show the allocation, not the whole GPU.
 *
 * NVML callers already have libnvidia-ml loaded (nvidia-smi and pynvml
 * dlopen it; others link it): the real functions are found on that handle
 * (dlopen with RTLD_NOLOAD), and the library is opened for real only if one
 * of our wrappers is called without it being loaded.  No CUDA call is made:
 * the device is matched to the allocation by its UUID, and registration
 * with the agent may happen here (nvidia-smi never calls cuInit). */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gs_devid.h"
#include "gs_hook.h"
#include "gs_nvmldecl.h"

/* The real library's functions we call or interpose. */
struct gs_nvml {
        nvmlReturn_t (*GetUUID)(nvmlDevice_t, char *, unsigned int);
        nvmlReturn_t (*GetMemoryInfo)(nvmlDevice_t, nvmlMemory_t *);
        nvmlReturn_t (*GetMemoryInfo_v2)(nvmlDevice_t, nvmlMemory_v2_t *);
};

static pthread_mutex_t g_nv_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gs_nvml g_nv;
static int g_nv_loaded;

/* The real library's table, or NULL.  load = 0: only if the process has
 * loaded it already.  The handle is kept (never closed), so the addresses
 * stay valid even if the application closes its own. */
static const struct gs_nvml *gs_nvml_get(int load)
{
        const char *path;
        void *h, *p;

        if (__atomic_load_n(&g_nv_loaded, __ATOMIC_ACQUIRE))
                return &g_nv;
        pthread_mutex_lock(&g_nv_mu);
        if (g_nv_loaded)
                goto out;
        path = secure_getenv("GSHARE_NVML_LIBRARY");
        if (!path || !*path)
                path = "libnvidia-ml.so.1";
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        if (!h && load)
                h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
                gs_hook_debug("NVML library %s not %s", path, load ? "available" : "loaded yet");
                goto out;
        }
        /* Function pointers are data-pointer sized (POSIX, for dlsym). */
        p = gs_real_dlsym(h, "nvmlDeviceGetUUID");
        memcpy(&g_nv.GetUUID, &p, sizeof(p));
        p = gs_real_dlsym(h, "nvmlDeviceGetMemoryInfo");
        memcpy(&g_nv.GetMemoryInfo, &p, sizeof(p));
        p = gs_real_dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
        memcpy(&g_nv.GetMemoryInfo_v2, &p, sizeof(p));
        __atomic_store_n(&g_nv_loaded, 1, __ATOMIC_RELEASE);
out:
        pthread_mutex_unlock(&g_nv_mu);
        return g_nv_loaded ? &g_nv : NULL;
}

/* The allocation's view of device dev: total = the quota, free = what this
 * process can still obtain, used = the rest (held by the allocation's
 * processes, this one's at block granularity, the others' by whole chunk).
 * A GPU outside the allocation is 0 / 0 / 0: nothing can be allocated
 * there, as cuMemGetInfo says.  Fails closed: no agent, no figures. */
static nvmlReturn_t gs_nvml_figures(nvmlDevice_t dev, unsigned long long *ret_total, unsigned long long *ret_free,
                                    unsigned long long *ret_used)
{
        const struct gs_nvml *nv = gs_nvml_get(1);
        char s[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        uint8_t raw[16];
        uint64_t obtainable = 0, quota = 0;
        nvmlReturn_t nr;
        int r;

        if (!nv)
                return NVML_ERROR_UNINITIALIZED; /* no NVML: no device handle either */
        if (!nv->GetUUID)
                return NVML_ERROR_FUNCTION_NOT_FOUND;
        /* Also validates the handle and NVML's init state, as the real
         * memory query would. */
        memset(s, 0, sizeof(s));
        nr = nv->GetUUID(dev, s, sizeof(s));
        if (nr != NVML_SUCCESS)
                return nr;
        s[sizeof(s) - 1] = '\0';
        if (gs_conn_ensure() < 0)
                return NVML_ERROR_UNKNOWN;
        /* "MIG-..." instances and anything else unparsable are not GPUs an
         * allocation can name. */
        r = gs_uuid_parse(s, raw) < 0 ? -ENODEV : gs_hook_mem_info_uuid(raw, &obtainable, &quota);
        if (r == -ENODEV) {
                *ret_total = *ret_free = *ret_used = 0;
                return NVML_SUCCESS;
        }
        if (r < 0)
                return NVML_ERROR_UNKNOWN;
        *ret_total = quota;
        *ret_free = obtainable;
        *ret_used = quota - obtainable;
        return NVML_SUCCESS;
}

GS_HOOK_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
        unsigned long long t, f, u;
        nvmlReturn_t r;

        if (!memory)
                return NVML_ERROR_INVALID_ARGUMENT;
        r = gs_nvml_figures(device, &t, &f, &u);
        if (r == NVML_SUCCESS)
                *memory = (nvmlMemory_t){ .total = t, .free = f, .used = u };
        return r;
}

GS_HOOK_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
        unsigned long long t, f, u;
        nvmlReturn_t r;

        if (!memory)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (memory->version != nvmlMemory_v2)
                return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        r = gs_nvml_figures(device, &t, &f, &u);
        if (r == NVML_SUCCESS)
                *memory =
                        (nvmlMemory_v2_t){ .version = nvmlMemory_v2, .total = t, .reserved = 0, .free = f, .used = u };
        return r;
}

void *gs_nvml_swap(const char *name, void *p)
{
        const struct gs_nvml *nv;
        void *ours, *real;

        if (!p)
                return p;
        if (!strcmp(name, "nvmlDeviceGetMemoryInfo"))
                ours = (void *)nvmlDeviceGetMemoryInfo;
        else if (!strcmp(name, "nvmlDeviceGetMemoryInfo_v2"))
                ours = (void *)nvmlDeviceGetMemoryInfo_v2;
        else
                return p;
        /* Already ours (RTLD_DEFAULT finds the preloaded hook first): no
         * need to look at, or load, the real library. */
        if (p == ours)
                return p;
        nv = gs_nvml_get(0);
        if (!nv)
                return p;
        real = ours == (void *)nvmlDeviceGetMemoryInfo ? (void *)nv->GetMemoryInfo : (void *)nv->GetMemoryInfo_v2;
        return p == real ? ours : p;
}
