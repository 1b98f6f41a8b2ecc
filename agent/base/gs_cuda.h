/* gs_cuda.h — the CUDA driver behind one table of typed function pointers,
 * loaded once with dlopen (STYLE.md practice 6).  The agent never links
 * libcuda: the library is chosen at run time (config cudaLibrary), so the
 * same binary runs on the real driver or on the fake one of the tests.
 *
 * Every entry is declared with the prototype cuda.h gives the symbol (the
 * _v2 names where cuda.h maps them), so a call through the table is type
 * checked.  gs_cuda_open fails, naming the symbol, if any required entry is
 * missing: nothing calls a NULL pointer. */
#ifndef GS_CUDA_H
#define GS_CUDA_H

#include <cuda.h>
#include <stddef.h>

#include "gs_util.h"

/* X(field, symbol, required) */
#define GS_CUDA_FUNCS(X)                                                 \
        X(init, cuInit, 1)                                               \
        X(driver_get_version, cuDriverGetVersion, 1)                     \
        X(device_get_count, cuDeviceGetCount, 1)                         \
        X(device_get, cuDeviceGet, 1)                                    \
        X(device_get_name, cuDeviceGetName, 1)                           \
        X(device_get_uuid, cuDeviceGetUuid, 1)                           \
        X(device_get_pci_bus_id, cuDeviceGetPCIBusId, 1)                 \
        X(device_total_mem, cuDeviceTotalMem, 1)                         \
        X(primary_ctx_retain, cuDevicePrimaryCtxRetain, 1)               \
        X(primary_ctx_release, cuDevicePrimaryCtxRelease, 1)             \
        X(ctx_set_current, cuCtxSetCurrent, 1)                           \
        X(mem_get_info, cuMemGetInfo, 1)                                 \
        X(mem_get_granularity, cuMemGetAllocationGranularity, 1)         \
        X(mem_create, cuMemCreate, 1)                                    \
        X(mem_release, cuMemRelease, 1)                                  \
        X(mem_export, cuMemExportToShareableHandle, 1)                   \
        X(mem_import, cuMemImportFromShareableHandle, 1)                 \
        X(mem_address_reserve, cuMemAddressReserve, 1)                   \
        X(mem_address_free, cuMemAddressFree, 1)                         \
        X(mem_map, cuMemMap, 1)                                          \
        X(mem_unmap, cuMemUnmap, 1)                                      \
        X(mem_set_access, cuMemSetAccess, 1)                             \
        X(memset_d32, cuMemsetD32_v2, 1)                                 \
        X(ctx_synchronize, cuCtxSynchronize, 1)                          \
        X(ctx_get_stream_priority_range, cuCtxGetStreamPriorityRange, 1) \
        X(stream_create_with_priority, cuStreamCreateWithPriority, 1)    \
        X(stream_destroy, cuStreamDestroy, 1)                            \
        X(memset_d32_async, cuMemsetD32Async, 1)                         \
        X(event_create, cuEventCreate, 1)                                \
        X(event_record, cuEventRecord, 1)                                \
        X(event_synchronize, cuEventSynchronize, 1)                      \
        X(event_destroy, cuEventDestroy, 1)                              \
        X(get_error_name, cuGetErrorName, 0)                             \
        X(get_error_string, cuGetErrorString, 0)

#define GS_CUDA_FIELD(field, sym, req) __typeof__(sym) *field;

struct gs_cuda {
        void *dl;
        GS_CUDA_FUNCS(GS_CUDA_FIELD)
};

/* dlopens path (a name for the loader's search, or a path) and fills *cu.
 * Returns 0, or -ENOENT (library not loadable) / -ENOSYS (a required symbol
 * missing) with the reason in err; *cu is then all NULL. */
int gs_cuda_open(struct gs_cuda *cu, const char *path, char *err, size_t errlen) GS_WUR;
/* dlcloses the library.  A zeroed or failed table is fine. */
void gs_cuda_close(struct gs_cuda *cu);

/* CUresult -> 0 or a negative errno (CUDA_ERROR_OUT_OF_MEMORY -> -ENOMEM,
 * invalid value -> -EINVAL, no/invalid device -> -ENODEV, ...). */
int gs_cuda_errno(CUresult r);

/* The adapter for a failed call: returns gs_cuda_errno(r) and, when r is
 * not CUDA_SUCCESS, writes "<what>: <NAME> (<description>)" into err. */
int gs_cuda_check(const struct gs_cuda *cu, CUresult r, const char *what, char *err, size_t errlen);

#endif
