/* gs_hook.h — internals of libgshare.so shared by its modules.  Nothing
 * here is exported: the library is built with -fvisibility=hidden and
 * hook/libgshare.lds exports exactly the interposed entry points.
 *
 *   gs_hook_cuda.c  the real driver behind one typed table (dlopen once),
 *                   the real dlsym, the "one line per process" messages
 *   gs_hook_conn.c  the connection to the agent: registration, the rings,
 *                   fork (gs_hook_conn.h)
 *   gs_hook_space.c the per-GPU virtual ranges, granted chunks mapped
 *   gs_hook_mem.c   device memory: alloc, free, ranges, meminfo, contexts
 *   gs_hook_vmm.c   the application's own VMM allocations
 *   gs_hook_ipc.c   CUDA IPC handles on gshare memory
 *   gs_hook_api.c   the interposed functions, dlsym and cuGetProcAddress;
 *                   errors to CUresult in one place
 *   gs_hook_nvml.c  NVML's memory queries (nvidia-smi, pynvml)
 *   gs_hook_gate.c  the launch gate: launches, copies and memsets wait
 *                   while the hook moves memory (gs_hook_gate.h)
 *   gs_hook_spill.c the mover: a borrowed chunk's data moved to the memory
 *                   the agent names, at the same address (gs_hook_spill.h)
 *   gs_hook_ctx.c   the contexts the application made, for the mover and
 *                   the hook's thread
 *   gs_hook_thread.c the hook's thread: answers the agent (give-back,
 *                   moves) and reconnects without waiting for a call
 *                   (gs_hook_thread.h) */
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
        CUresult (*init)(unsigned int);
        CUresult (*get_proc_address)(const char *, void **, int, cuuint64_t);
        CUresult (*get_proc_address_v2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
        CUresult (*ctx_get_device)(CUdevice *);
        CUresult (*device_get_uuid_v2)(CUuuid *, CUdevice);
        CUresult (*device_get_count)(int *);
        CUresult (*mem_address_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
        CUresult (*mem_import_from_shareable_handle)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
        CUresult (*mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
        CUresult (*mem_set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
        CUresult (*mem_release)(CUmemGenericAllocationHandle);
        CUresult (*mem_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
        CUresult (*mem_unmap)(CUdeviceptr, size_t);
        CUresult (*mem_get_address_range_v2)(CUdeviceptr *, size_t *, CUdeviceptr);
        CUresult (*stream_synchronize)(CUstream);
        CUresult (*ctx_synchronize)(void);
        CUresult (*stream_synchronize_ptsz)(CUstream);
        CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus *);
        CUresult (*stream_is_capturing_ptsz)(CUstream, CUstreamCaptureStatus *);
        CUresult (*ipc_get_mem_handle)(CUipcMemHandle *, CUdeviceptr);
        CUresult (*ipc_open_mem_handle_v2)(CUdeviceptr *, CUipcMemHandle, unsigned int);
        CUresult (*ipc_close_mem_handle)(CUdeviceptr);
        CUresult (*mem_address_free)(CUdeviceptr, size_t);
        CUresult (*mem_export_to_shareable_handle)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                                                   unsigned long long);
        CUresult (*device_primary_ctx_retain)(CUcontext *, CUdevice);
        CUresult (*device_can_access_peer)(int *, CUdevice, CUdevice);
        CUresult (*ctx_create)(CUcontext *, unsigned int, CUdevice);
        CUresult (*ctx_create_v2)(CUcontext *, unsigned int, CUdevice);
        CUresult (*ctx_create_v3)(CUcontext *, CUexecAffinityParam *, int, unsigned int, CUdevice);
        CUresult (*ctx_create_v4)(CUcontext *, CUctxCreateParams *, unsigned int, CUdevice);
        CUresult (*ctx_destroy)(CUcontext);
        CUresult (*ctx_destroy_v2)(CUcontext);
        CUresult (*ctx_push_current_v2)(CUcontext);
        CUresult (*ctx_pop_current_v2)(CUcontext *);
        CUresult (*device_primary_ctx_get_state)(CUdevice, unsigned int *, int *);
        CUresult (*device_primary_ctx_release_v2)(CUdevice);
        CUresult (*memcpy_dtod_async_v2)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
        CUresult (*stream_create)(CUstream *, unsigned int);
        CUresult (*stream_destroy_v2)(CUstream);
        CUresult (*mem_retain_allocation_handle)(CUmemGenericAllocationHandle *, void *);
        /* Compute QoS (gs_hook_qos, gs_hook_qos_lc). */
        CUresult (*event_create)(CUevent *, unsigned int);
        CUresult (*event_record)(CUevent, CUstream);
        CUresult (*event_query)(CUevent);
        CUresult (*event_elapsed_time)(float *, CUevent, CUevent);
        CUresult (*event_synchronize)(CUevent);
        CUresult (*event_destroy_v2)(CUevent);
        CUresult (*ctx_get_current)(CUcontext *);
        CUresult (*ctx_set_current)(CUcontext);
        CUresult (*thread_exchange_stream_capture_mode)(CUstreamCaptureMode *);
        CUresult (*func_get_name)(const char **, CUfunction);
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
enum gs_once {
        GS_ONCE_AGENT,
        GS_ONCE_UNSUPPORTED,
        GS_ONCE_DEVICE,
        GS_ONCE_CAPTURE,
        GS_ONCE_CTX,
        GS_ONCE_RECLAIM,
        GS_ONCE_MOVER,
        GS_ONCE_WAIT,
        GS_ONCE__N
};
void gs_hook_say_once(enum gs_once key, const char *fmt, ...) GS_PRINTF(2, 3);
void gs_hook_debug(const char *fmt, ...) GS_PRINTF(1, 2);
void gs_hook_once_reset(void);

/* ---- what the interposed functions call --------------------------- */
/* Every one returns 0 or a negative errno; gs_hook_api.c turns it into
 * the driver's CUresult in one place (gs_cu_result). */

/* gs_hook_conn.c: connects to the agent if not yet tried in this process.
 * 0 when connected; -ENOTCONN when not (memory calls then fail closed). */
int gs_conn_ensure(void) GS_WUR;

/* gs_hook_mem.c.  An allocation on the current context's device (-ENOMEM
 * past the quota or without an agent; -EBADR without a context). */
int gs_hook_mem_alloc(CUdeviceptr *ret_ptr, size_t size) GS_WUR;
/* Frees a gshare address: -EINVAL if not one of ours. */
int gs_hook_mem_free(CUdeviceptr ptr);
/* 1 if ptr lies in one of our reserved ranges. */
int gs_hook_mem_owns(CUdeviceptr ptr);
/* The block holding ptr: -ENOENT if none. */
int gs_hook_mem_range(CUdeviceptr ptr, CUdeviceptr *ret_base, size_t *ret_size) GS_WUR;
/* free/total of the current context's device. */
int gs_hook_mem_info(size_t *ret_free, size_t *ret_total) GS_WUR;
/* Before the application creates a context on dev: the agent charges it to
 * the allocation and makes room for it in the driver (GS_OP_CTX), once per
 * process and device.  0 (also for a device outside the allocation, or
 * without an agent: memory calls fail closed then), or -ENOMEM with one
 * line on stderr naming the allocation and its usage (no room in the
 * quota). */
int gs_hook_mem_ctx(CUdevice dev) GS_WUR;
/* After the driver's context call returned (whatever it returned): the
 * room is not promised any more (GS_OP_CTX_DONE), once per process and
 * device. */
void gs_hook_mem_ctx_done(CUdevice dev);
/* The allocation's quota on a device (0 if not in the allocation);
 * -ENODEV for a device the driver does not know. */
int gs_hook_mem_total(CUdevice dev, size_t *ret_bytes) GS_WUR;
/* The allocation's figures for the GPU whose raw UUID is uuid, without any
 * CUDA call (for NVML); connects to the agent if not yet tried.  0 with
 * *ret_obtainable (what this process can still obtain, <= the quota) and
 * *ret_quota; -ENODEV if the GPU is not in the allocation; -ENOTCONN if the
 * agent cannot be reached or was lost; -EIO if it refused the request. */
int gs_hook_mem_info_uuid(const uint8_t uuid[16], uint64_t *ret_obtainable, uint64_t *ret_quota) GS_WUR;

/* gs_hook_vmm.c.  The application's cuMemCreate of device memory on dev: a
 * physical allocation made by the agent, imported. */
int gs_hook_vmm_create(CUmemGenericAllocationHandle *ret_h, size_t size, CUdevice dev) GS_WUR;
/* cuMemExportToShareableHandle(POSIX fd) of h: a new O_CLOEXEC duplicate
 * of the agent's fd in *ret_fd.  -ENOENT if h is not one of ours. */
int gs_hook_vmm_export(CUmemGenericAllocationHandle h, int *ret_fd) GS_WUR;
/* After the real cuMemRelease(h) succeeded: tells the agent if h was one of
 * ours. */
void gs_hook_vmm_released(CUmemGenericAllocationHandle h);

/* gs_hook_ipc.c: CUDA IPC on gshare memory, brokered by the agent
 * (agent/domain/gs_ipc.h).  get: dptr is in one of our ranges; fills *h with a
 * gs_ipc_handle. */
int gs_hook_ipc_get(CUipcMemHandle *h, CUdeviceptr dptr) GS_WUR;
/* 1 if h is a gs_ipc_handle. */
int gs_hook_ipc_is_ours(const CUipcMemHandle *h);
/* open: maps the exported block in this process (again: the same address,
 * one more reference). */
int gs_hook_ipc_open(CUdeviceptr *ret_ptr, const CUipcMemHandle *h) GS_WUR;
/* close: -ENOENT if dptr is not an address we opened. */
int gs_hook_ipc_close(CUdeviceptr dptr);
/* The opened block holding ptr: -ENOENT if none. */
int gs_hook_ipc_range(CUdeviceptr ptr, CUdeviceptr *ret_base, size_t *ret_size) GS_WUR;
/* pre: gs_conn.mu held.  Our block at off on GPU gi is being freed: its
 * export (if any) is no longer reported to a new agent. */
void gs_hook_ipc_forget(uint32_t gi, uint64_t off);
/* pre: gs_conn.mu held.  Slot now maps other memory (a move): exports
 * over it are forgotten. */
void gs_hook_ipc_moved(uint32_t gi, uint32_t slot);

/* gs_hook_ctx.c: the contexts the application made (cuCtxCreate*), for
 * the mover.  At most GS_CTX_MAX are kept; more are counted, and the mover
 * moves nothing while one of those lives. */
#define GS_CTX_MAX 64
/* After the driver made ctx on dev. */
void gs_ctx_created(CUcontext ctx, CUdevice dev);
/* The application's cuCtxDestroy: destroy(ctx), and ctx forgotten if it
 * succeeded.  Waits while the mover uses the contexts. */
CUresult gs_ctx_destroy(CUcontext ctx, CUresult (*destroy)(CUcontext));
/* The mover: held while it uses the contexts (no cuCtxDestroy meanwhile). */
void gs_ctx_lock(void);
void gs_ctx_unlock(void);
/* pre: gs_ctx_lock held.  Up to max contexts and their devices: how many,
 * or -1 if a live context could not be recorded. */
int gs_ctx_list(CUcontext *ctxs, CUdevice *devs, int max);

/* Every context that may run work on a set of devices (a bit per CUdevice
 * below GS_MAX_DEVICES): the active primary contexts (retained while in
 * the set; an inactive one is never made: it would cost the GPU a
 * context's memory) and the application's. */
#define GS_MAX_DEVICES 64
struct gs_ctx_set {
        CUcontext ctx[GS_CTX_MAX + GS_MAX_DEVICES];
        int n;
        CUdevice prim[GS_MAX_DEVICES]; /* primary contexts retained */
        int nprim;
        CUcontext copy; /* one on device dev */
};
/* pre: gs_ctx_lock held.  Fills s for the devices of devs, and s->copy
 * with one on dev (-1: none wanted).  0; -EBUSY (a context the hook could
 * not record lives: said once); -ENODEV (dev >= 0 has none). */
int gs_ctx_collect(const struct gs_cu *cu, uint64_t devs, CUdevice dev, struct gs_ctx_set *s);
/* pre: gs_ctx_lock held.  Synchronizes every context of s. */
void gs_ctx_set_sync(const struct gs_cu *cu, const struct gs_ctx_set *s);
/* Releases the primary contexts s retained. */
void gs_ctx_set_release(const struct gs_cu *cu, struct gs_ctx_set *s);
/* From a thread with no current context (the hook's): work queued on the
 * devices of devs before now is done when it returns.  0, or -EBUSY as
 * gs_ctx_collect.  Takes gs_ctx_lock (after gs_conn.mu, if held). */
int gs_ctx_sync_devices(const struct gs_cu *cu, uint64_t devs);

/* ---- gs_hook_nvml.c ----------------------------------------------- */

/* For dlsym: p is what the real dlsym found for name (an "nvml..." name).
 * Our wrapper if p is the real libnvidia-ml's function that we interpose,
 * else p.  Never loads libnvidia-ml. */
void *gs_nvml_swap(const char *name, void *p);

#endif
