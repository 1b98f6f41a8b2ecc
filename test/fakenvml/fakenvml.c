/* fakenvml.c — a fake libnvidia-ml.so.1 for tests (nothing ships it).
 *
 * $GSHARE_FAKENVML_DEVICES devices (default 1, at most 8), whose UUIDs are
 * those of test/fakecuda's devices of the same index (so the hook matches
 * them to the agent's GPUs), each reporting the whole-GPU figures below:
 * numbers no gshare allocation has, so a test sees whether the hook
 * answered.  Only what the tests call: init, count, handles, UUIDs, the
 * memory queries, error strings, and the compute processes of a device,
 * which are test/fakecuda's per-process charges (its state file): what a
 * process created (contexts, its own allocations), not what it imported,
 * as on a real GPU. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gs_nvmldecl.h"
#include "../fakecuda/fc_state.h"

#define FN_MAX_DEV 8
#define FN_TOTAL (80ull << 30)
#define FN_USED (1ull << 30)

struct nvmlDevice_st {
        unsigned int index;
};

static struct nvmlDevice_st g_dev[FN_MAX_DEV];
static int g_init;

static unsigned int fn_count(void)
{
        const char *e = getenv("GSHARE_FAKENVML_DEVICES");
        long n = e ? strtol(e, NULL, 10) : 1;

        return n < 1 ? 1 : n > FN_MAX_DEV ? FN_MAX_DEV : (unsigned int)n;
}

static nvmlReturn_t fn_check(nvmlDevice_t d)
{
        if (!g_init)
                return NVML_ERROR_UNINITIALIZED;
        if (!d || d < g_dev || d >= g_dev + fn_count())
                return NVML_ERROR_INVALID_ARGUMENT;
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void)
{
        for (unsigned int i = 0; i < FN_MAX_DEV; i++)
                g_dev[i].index = i;
        g_init++;
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void)
{
        if (!g_init)
                return NVML_ERROR_UNINITIALIZED;
        g_init--;
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
        if (!g_init)
                return NVML_ERROR_UNINITIALIZED;
        if (!deviceCount)
                return NVML_ERROR_INVALID_ARGUMENT;
        *deviceCount = fn_count();
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
        if (!g_init)
                return NVML_ERROR_UNINITIALIZED;
        if (!device || index >= fn_count())
                return NVML_ERROR_INVALID_ARGUMENT;
        *device = &g_dev[index];
        return NVML_SUCCESS;
}

/* The bytes of test/fakecuda's cuDeviceGetUuid, last byte = the index. */
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
        nvmlReturn_t r = fn_check(device);

        if (r != NVML_SUCCESS)
                return r;
        if (!uuid)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (length < 41)
                return NVML_ERROR_INSUFFICIENT_SIZE;
        snprintf(uuid, length, "GPU-67736872-fa4e-4be0-8000-5eed000000%02x", device->index);
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
        nvmlReturn_t r = fn_check(device);

        if (r != NVML_SUCCESS)
                return r;
        if (!memory)
                return NVML_ERROR_INVALID_ARGUMENT;
        *memory = (nvmlMemory_t){ .total = FN_TOTAL, .free = FN_TOTAL - FN_USED, .used = FN_USED };
        return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
        nvmlReturn_t r = fn_check(device);

        if (r != NVML_SUCCESS)
                return r;
        if (!memory)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (memory->version != nvmlMemory_v2)
                return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        *memory = (nvmlMemory_v2_t){ .version = nvmlMemory_v2, .total = FN_TOTAL, .reserved = FN_USED / 2,
                                     .free = FN_TOTAL - FN_USED, .used = FN_USED };
        return NVML_SUCCESS;
}

/* The fake driver's state, or NULL if no process has opened it yet. */
static const struct fc_shared *fn_state(void)
{
        static const struct fc_shared *sh;
        char buf[64];
        struct fc_shared *m;
        int fd;

        if (sh)
                return sh;
        fd = open(fc_state_path(buf, sizeof(buf)), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return NULL;
        m = mmap(NULL, sizeof(*m), PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED)
                return NULL;
        if (__atomic_load_n(&m->magic, __ATOMIC_SEQ_CST) != FC_MAGIC || m->version != FC_VERSION) {
                munmap(m, sizeof(*m));
                return NULL;
        }
        sh = m;
        return sh;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
        nvmlReturn_t r = fn_check(device);
        const struct fc_shared *sh;
        unsigned int n = 0, cap;

        if (r != NVML_SUCCESS)
                return r;
        if (!infoCount)
                return NVML_ERROR_INVALID_ARGUMENT;
        cap = *infoCount;
        sh = fn_state();
        for (int i = 0; sh && i < FC_MAX_PROCS; i++) {
                int32_t pid = __atomic_load_n(&sh->procs[i].pid, __ATOMIC_SEQ_CST);
                uint64_t b = __atomic_load_n(&sh->procs[i].bytes[device->index], __ATOMIC_SEQ_CST);

                if (pid <= 0 || b == 0 || (kill(pid, 0) < 0 && errno == ESRCH))
                        continue;
                if (n < cap && infos)
                        infos[n] = (nvmlProcessInfo_t){ .pid = (unsigned int)pid, .usedGpuMemory = b };
                n++;
        }
        *infoCount = n;
        return n > cap ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
        switch (result) {
        case NVML_SUCCESS: return "Success";
        case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
        case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
        case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
        case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
        case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
        case NVML_ERROR_UNKNOWN: return "Unknown Error";
        default: return "Unknown Error (fake NVML)";
        }
}
