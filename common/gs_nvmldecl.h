/* gs_nvmldecl.h — the few NVML types and entry points gshare touches.
 *
 * NVML's nvml.h is not in Debian and not needed to build: these are copied
 * from its public layout (NVML API version 11/12, unchanged since R510),
 * and the sizes are asserted.  Used by the hook (hook/gs_hook_nvml.c) and
 * the fake libnvidia-ml for tests (test/fakenvml).  Header-only. */
#ifndef GS_NVMLDECL_H
#define GS_NVMLDECL_H

typedef enum {
        NVML_SUCCESS = 0,
        NVML_ERROR_UNINITIALIZED = 1,
        NVML_ERROR_INVALID_ARGUMENT = 2,
        NVML_ERROR_NOT_SUPPORTED = 3,
        NVML_ERROR_NOT_FOUND = 6,
        NVML_ERROR_INSUFFICIENT_SIZE = 7,
        NVML_ERROR_LIBRARY_NOT_FOUND = 12,
        NVML_ERROR_FUNCTION_NOT_FOUND = 13,
        NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
        NVML_ERROR_UNKNOWN = 999,
} nvmlReturn_t;

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct nvmlMemory_st {
        unsigned long long total;
        unsigned long long free;
        unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
        unsigned int version; /* nvmlMemory_v2 */
        unsigned long long total;
        unsigned long long reserved; /* for the driver and firmware; counted in used */
        unsigned long long free;
        unsigned long long used;
} nvmlMemory_v2_t;

_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t layout");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t layout");

/* One process with a context on a device (nvmlProcessInfo_v2_t, what
 * nvmlDeviceGetComputeRunningProcesses_v3 fills).  usedGpuMemory is
 * NVML_VALUE_NOT_AVAILABLE when NVML may not tell. */
typedef struct nvmlProcessInfo_st {
        unsigned int pid;
        unsigned long long usedGpuMemory;
        unsigned int gpuInstanceId;
        unsigned int computeInstanceId;
} nvmlProcessInfo_t;
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t layout");
#define NVML_VALUE_NOT_AVAILABLE (~0ULL)

/* NVML_STRUCT_VERSION(Memory, 2): the struct's size and its version. */
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos);
const char *nvmlErrorString(nvmlReturn_t result);

#endif
