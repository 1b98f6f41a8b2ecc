/* gs_hook.h — internals of libgshare.so shared by its modules.  Nothing
 * here is exported: the library is built with -fvisibility=hidden and
 * hook/libgshare.lds exports exactly the interposed entry points.
 *
 *   gs_hook_cuda.c  the real driver behind one typed table (dlopen once),
 *                   the real dlsym, the "one line per process" messages
 *   gs_hook_conn.c  the connection to the agent: registration, the rings,
 *                   grants, the per-GPU virtual ranges
 *   gs_hook_api.c   the interposed functions, dlsym and cuGetProcAddress
 *   gs_hook_nvml.c  NVML's memory queries (nvidia-smi, pynvml) */
#ifndef GS_HOOK_H
#define GS_HOOK_H

#include <stddef.h>
#include <stdint.h>

#include "gs_cudadecl.h"
#include "gs_util.h"

#define GS_HOOK_API __attribute__((visibility("default")))

/* The real driver.  Members are NULL when the library lacks the symbol;
 * every caller checks. */
struct gs_cu {
        CUresult (*cuInit)(unsigned int);
        CUresult (*cuGetProcAddress)(const char *, void **, int, cuuint64_t);
        CUresult (*cuGetProcAddress_v2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
        CUresult (*cuCtxGetDevice)(CUdevice *);
        CUresult (*cuDeviceGetUuid_v2)(CUuuid *, CUdevice);
        CUresult (*cuDeviceGetCount)(int *);
        CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
        CUresult (*cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
        CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
        CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
        CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
        CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
        CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
        CUresult (*cuMemGetAddressRange_v2)(CUdeviceptr *, size_t *, CUdeviceptr);
        CUresult (*cuStreamSynchronize)(CUstream);
        CUresult (*cuStreamSynchronize_ptsz)(CUstream);
        CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
        CUresult (*cuStreamIsCapturing_ptsz)(CUstream, CUstreamCaptureStatus *);
        CUresult (*cuIpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
        CUresult (*cuIpcOpenMemHandle_v2)(CUdeviceptr *, CUipcMemHandle, unsigned int);
        CUresult (*cuIpcCloseMemHandle)(CUdeviceptr);
        CUresult (*cuMemAddressFree)(CUdeviceptr, size_t);
        CUresult (*cuMemExportToShareableHandle)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                                                 unsigned long long);
        CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
        CUresult (*cuDeviceCanAccessPeer)(int *, CUdevice, CUdevice);
        CUresult (*cuCtxCreate)(CUcontext *, unsigned int, CUdevice);
        CUresult (*cuCtxCreate_v2)(CUcontext *, unsigned int, CUdevice);
        CUresult (*cuCtxCreate_v3)(CUcontext *, CUexecAffinityParam *, int, unsigned int, CUdevice);
        CUresult (*cuCtxCreate_v4)(CUcontext *, CUctxCreateParams *, unsigned int, CUdevice);
};

/* Loads the real driver once ($GSHARE_CUDA_LIBRARY, default libcuda.so.1).
 * Returns the table, or NULL if the driver cannot be opened. */
const struct gs_cu *gs_cu_get(void);
/* The real driver's address of an interposed name, for comparisons (NULL if
 * the driver lacks it or is not loaded). */
void *gs_cu_real(const char *name);
/* glibc's dlsym, found with dlvsym so that our own dlsym is not reached. */
void *gs_real_dlsym(void *handle, const char *name);
/* The real dlsym itself (NULL if it cannot be found). */
void *gs_real_dlsym_fn(void);

/* One line on stderr, "gshare: ...", at most once per process per key (a
 * fork child may print again).  Debug lines only with $GSHARE_HOOK_DEBUG=1. */
enum gs_once { GS_ONCE_AGENT, GS_ONCE_UNSUPPORTED, GS_ONCE_DEVICE, GS_ONCE_CAPTURE, GS_ONCE_CTX, GS_ONCE__N };
void gs_hook_say_once(enum gs_once key, const char *fmt, ...) GS_PRINTF(2, 3);
void gs_hook_debug(const char *fmt, ...) GS_PRINTF(1, 2);
void gs_hook_once_reset(void);

/* ---- gs_hook_conn.c ----------------------------------------------- */

/* Connects to the agent if not yet tried in this process.  0 when
 * connected; negative errno when not (memory calls then fail closed). */
int gs_conn_ensure(void) GS_WUR;

/* Serves an allocation on the current context's device.  CUresult. */
CUresult gs_conn_alloc(CUdeviceptr *ret_ptr, size_t size);
/* Frees a gshare address.  CUDA_ERROR_INVALID_VALUE if not one of ours. */
CUresult gs_conn_free(CUdeviceptr ptr);
/* 1 if ptr lies in one of our reserved ranges. */
int gs_conn_owns(CUdeviceptr ptr);
CUresult gs_conn_range(CUdeviceptr ptr, CUdeviceptr *ret_base, size_t *ret_size);
/* free/total of the current context's device. */
CUresult gs_conn_meminfo(size_t *ret_free, size_t *ret_total);
/* The application's cuMemCreate of device memory on dev: a physical
 * allocation made by the agent, imported.  CUresult. */
CUresult gs_conn_vmm_create(CUmemGenericAllocationHandle *ret_h, size_t size, CUdevice dev);
/* cuMemExportToShareableHandle(POSIX fd) of h: a new O_CLOEXEC duplicate
 * of the agent's fd in *ret_fd.  -ENOENT if h is not one of ours. */
int gs_conn_vmm_export(CUmemGenericAllocationHandle h, int *ret_fd) GS_WUR;
/* After the real cuMemRelease(h) succeeded: tells the agent if h was one of
 * ours. */
void gs_conn_vmm_released(CUmemGenericAllocationHandle h);
/* CUDA IPC on gshare memory, brokered by the agent (agent/gs_ipc.h).
 * get: dptr is in one of our ranges; fills *h with a gs_ipc_handle. */
CUresult gs_conn_ipc_get(CUipcMemHandle *h, CUdeviceptr dptr);
/* 1 if h is a gs_ipc_handle. */
int gs_conn_ipc_is_ours(const CUipcMemHandle *h);
/* open: maps the exported block in this process (again: the same address,
 * one more reference). */
CUresult gs_conn_ipc_open(CUdeviceptr *ret_ptr, const CUipcMemHandle *h);
/* close: CUDA_ERROR_NOT_FOUND if dptr is not an address we opened. */
CUresult gs_conn_ipc_close(CUdeviceptr dptr);
/* The opened block holding ptr: CUDA_ERROR_NOT_FOUND if none. */
CUresult gs_conn_ipc_range(CUdeviceptr ptr, CUdeviceptr *ret_base, size_t *ret_size);
/* Before the application creates a context on dev: the agent charges it to
 * the allocation and makes room for it in the driver (GS_OP_CTX), once per
 * process and device.  CUDA_SUCCESS (also for a device outside the
 * allocation, or without an agent: memory calls fail closed then), or
 * CUDA_ERROR_OUT_OF_MEMORY with one line on stderr naming the allocation
 * and its usage (no room in the quota). */
CUresult gs_conn_ctx(CUdevice dev);
/* After the driver's context call returned (whatever it returned): the
 * room is not promised any more (GS_OP_CTX_DONE), once per process and
 * device. */
void gs_conn_ctx_done(CUdevice dev);
/* The allocation's quota on a device (0 if not in the allocation). */
CUresult gs_conn_total(CUdevice dev, size_t *ret_bytes);

/* The allocation's figures for the GPU whose raw UUID is uuid, without any
 * CUDA call (for NVML); connects to the agent if not yet tried.  0 with
 * *ret_obtainable (what this process can still obtain, <= the quota) and
 * *ret_quota; -ENODEV if the GPU is not in the allocation; -ENOTCONN if the
 * agent cannot be reached or was lost; -EIO if it refused the request. */
int gs_conn_meminfo_uuid(const uint8_t uuid[16], uint64_t *ret_obtainable, uint64_t *ret_quota) GS_WUR;

/* ---- gs_hook_nvml.c ----------------------------------------------- */

/* For dlsym: p is what the real dlsym found for name (an "nvml..." name).
 * Our wrapper if p is the real libnvidia-ml's function that we interpose,
 * else p.  Never loads libnvidia-ml. */
void *gs_nvml_swap(const char *name, void *p);

#endif
