/* gs_hook_api.c — the entry points libgshare.so interposes.
 *
 * Three ways in: the application calls a driver symbol (LD_PRELOAD or
 * /etc/ld.so.preload puts ours first), it looks one up with dlsym on the
 * libcuda handle (libcudart does this for every driver function), or with
 * cuGetProcAddress.  For the last two we call the real lookup and, when the
 * answer is the real driver's address of a function we interpose, hand back
 * ours instead; anything else passes through untouched. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>

#include "gs_hook.h"
#include "gs_hook_gate.h"
#include "gs_wire.h"

/* ---- lookups --------------------------------------------------------- */

// clang-format off
#define GS_HOOKED(X)                                                                                  \
        X(cuInit) X(cuGetProcAddress) X(cuGetProcAddress_v2) X(cuMemGetInfo) X(cuMemGetInfo_v2)      \
        X(cuDeviceTotalMem) X(cuDeviceTotalMem_v2) X(cuMemAlloc) X(cuMemAlloc_v2) X(cuMemAllocPitch) \
        X(cuMemAllocPitch_v2) X(cuMemFree_v2) X(cuMemGetAddressRange_v2) X(cuMemAllocAsync)          \
        X(cuMemAllocAsync_ptsz) X(cuMemAllocFromPoolAsync) X(cuMemAllocFromPoolAsync_ptsz)           \
        X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz) X(cuMemAllocManaged) X(cuMemCreate)                 \
        X(cuMemRelease) X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle) X(cuIpcOpenMemHandle_v2)         \
        X(cuIpcCloseMemHandle) X(cuMemExportToShareableHandle) X(cuDevicePrimaryCtxRetain)          \
        X(cuCtxCreate) X(cuCtxCreate_v2) X(cuCtxCreate_v3) X(cuCtxCreate_v4) X(cuCtxDestroy) X(cuCtxDestroy_v2)  \
        X(cuStreamSynchronize) X(cuStreamSynchronize_ptsz) X(cuCtxSynchronize) X(cuEventSynchronize)
// clang-format on

/* And the launch gate's wrappers (gs_hook_gate.h), some of them of
 * functions cuda.h deprecates. */
#define GS_NAME(n) #n,
#define GS_WRAP(n) (void *)n,
#define GS_GATED_NAME(n, b) #n,
#define GS_GATED_WRAP(n, b) (void *)n,
static const char *const gs_hooked_names[] = { GS_HOOKED(GS_NAME) GS_GATED(GS_GATED_NAME) };
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void *const gs_hooked_fns[] = { GS_HOOKED(GS_WRAP) GS_GATED(GS_GATED_WRAP) };
#pragma GCC diagnostic pop
#define GS_NHOOKED GS_ARRAY_SIZE(gs_hooked_names)

static void *gs_hooked_real[GS_NHOOKED];
static pthread_once_t g_real_once = PTHREAD_ONCE_INIT;

static void gs_resolve_real(void)
{
        for (size_t i = 0; i < GS_NHOOKED; i++)
                gs_hooked_real[i] = gs_cu_real(gs_hooked_names[i]);
}

/* The address to hand out for p, a lookup result: our wrapper if p is the
 * real driver's function that we interpose, else p. */
static void *gs_swap(void *p)
{
        if (!p)
                return p;
        pthread_once(&g_real_once, gs_resolve_real);
        for (size_t i = 0; i < GS_NHOOKED; i++)
                if (gs_hooked_real[i] == p)
                        return gs_hooked_fns[i];
        return p;
}

/* dlsym.  dlsym(RTLD_NEXT, name) means "after the object that called
 * dlsym", and glibc finds that object from its return address: a wrapper
 * that called it would make the search start after libgshare.so.  So on
 * x86-64 the exported dlsym is a trampoline that jumps (not calls) to the
 * real dlsym for RTLD_NEXT, leaving the caller's return address in place;
 * other handles go to gs_dlsym, which may substitute our functions.
 * Elsewhere a C wrapper does the same with a call in tail position, which
 * the compiler usually turns into a jump. */
__attribute__((no_sanitize("address", "undefined", "thread"), used)) static void *gs_dlsym(void *handle,
                                                                                           const char *name)
{
        void *p = gs_real_dlsym(handle, name);

        /* Only driver and NVML names can be ours; do not load libcuda for
         * others.  No libc calls here: the sanitizer runtimes look up their
         * interceptors through this function before they are initialised. */
        if (p && name[0] == 'c' && name[1] == 'u')
                p = gs_swap(p);
        else if (p && name[0] == 'n' && name[1] == 'v' && name[2] == 'm' && name[3] == 'l')
                p = gs_nvml_swap(name, p);
        return p;
}

/* The real dlsym's address (resolved on first use). */
__attribute__((no_sanitize("address", "undefined", "thread"), used)) static void *gs_dlsym_target(void)
{
        return gs_real_dlsym_fn();
}

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
        "        cmpq $-1, %rdi\n" /* RTLD_NEXT is (void *)-1 */
        "        jne gs_dlsym\n"
        "        pushq %rdi\n"
        "        pushq %rsi\n"
        "        subq $8, %rsp\n" /* keep the stack 16-byte aligned */
        "        call gs_dlsym_target\n"
        "        addq $8, %rsp\n"
        "        popq %rsi\n"
        "        popq %rdi\n"
        "        testq %rax, %rax\n"
        "        jz 1f\n"
        "        jmp *%rax\n"
        "1:      ret\n"
        ".size dlsym, .-dlsym\n");
#else
GS_HOOK_API void *dlsym(void *handle, const char *name)
{
        if (handle == RTLD_NEXT) {
                void *(*real)(void *, const char *) = (void *(*)(void *, const char *))gs_dlsym_target();
                return real ? real(handle, name) : NULL;
        }
        return gs_dlsym(handle, name);
}
#endif

GS_HOOK_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult *symbolStatus)
{
        const struct gs_cu *cu = gs_cu_get();
        CUresult r;

        if (!cu || !cu->get_proc_address_v2)
                return CUDA_ERROR_NOT_FOUND;
        r = cu->get_proc_address_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
        if (r == CUDA_SUCCESS && pfn)
                *pfn = gs_swap(*pfn);
        return r;
}

GS_HOOK_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
        const struct gs_cu *cu = gs_cu_get();
        CUresult r;

        if (!cu || (!cu->get_proc_address && !cu->get_proc_address_v2))
                return CUDA_ERROR_NOT_FOUND;
        if (cu->get_proc_address)
                r = cu->get_proc_address(symbol, pfn, cudaVersion, flags);
        else
                r = cu->get_proc_address_v2(symbol, pfn, cudaVersion, flags, NULL);
        if (r == CUDA_SUCCESS && pfn)
                *pfn = gs_swap(*pfn);
        return r;
}

/* ---- init ------------------------------------------------------------ */

/* The one place where the hook's errors become the driver's codes. */
static CUresult gs_cu_result(int err)
{
        switch (err) {
        case 0: return CUDA_SUCCESS;
        case -ENOMEM: return CUDA_ERROR_OUT_OF_MEMORY;
        case -EINVAL: return CUDA_ERROR_INVALID_VALUE;
        case -ENOENT: return CUDA_ERROR_NOT_FOUND;
        case -EBADR: return CUDA_ERROR_INVALID_CONTEXT;
        case -ENODEV: return CUDA_ERROR_INVALID_DEVICE;
        case -EOPNOTSUPP: return CUDA_ERROR_NOT_SUPPORTED;
        default: return CUDA_ERROR_UNKNOWN;
        }
}

GS_HOOK_API CUresult cuInit(unsigned int Flags)
{
        const struct gs_cu *cu = gs_cu_get();
        CUresult r;

        if (!cu || !cu->init)
                return CUDA_ERROR_NO_DEVICE;
        r = cu->init(Flags);
        /* Register now, so a missing agent is reported at start-up; memory
         * calls fail closed if it is not there.  cuInit itself succeeds. */
        if (r == CUDA_SUCCESS)
                (void)!gs_conn_ensure();
        return r;
}

/* ---- contexts: charged to the allocation before they exist ----------- */

GS_HOOK_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
        const struct gs_cu *cu = gs_cu_get();
        CUresult r;

        if (!cu || !cu->device_primary_ctx_retain)
                return CUDA_ERROR_NOT_INITIALIZED;
        r = gs_cu_result(gs_hook_mem_ctx(dev));
        if (r != CUDA_SUCCESS)
                return r;
        r = cu->device_primary_ctx_retain(pctx, dev);
        gs_hook_mem_ctx_done(dev);
        return r;
}

GS_HOOK_API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
        const struct gs_cu *cu = gs_cu_get();
        CUresult r;

        if (!cu || !cu->ctx_create)
                return CUDA_ERROR_NOT_INITIALIZED;
        r = gs_cu_result(gs_hook_mem_ctx(dev));
        if (r != CUDA_SUCCESS)
                return r;
        r = cu->ctx_create(pctx, flags, dev);
        if (r == CUDA_SUCCESS && pctx)
                gs_ctx_created(*pctx, dev);
        gs_hook_mem_ctx_done(dev);
        return r;
}

GS_HOOK_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
        const struct gs_cu *cu = gs_cu_get();
        CUresult r;

        if (!cu || !cu->ctx_create_v2)
                return CUDA_ERROR_NOT_INITIALIZED;
        r = gs_cu_result(gs_hook_mem_ctx(dev));
        if (r != CUDA_SUCCESS)
                return r;
        r = cu->ctx_create_v2(pctx, flags, dev);
        if (r == CUDA_SUCCESS && pctx)
                gs_ctx_created(*pctx, dev);
        gs_hook_mem_ctx_done(dev);
        return r;
}

GS_HOOK_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n, unsigned int flags,
                                    CUdevice dev)
{
        const struct gs_cu *cu = gs_cu_get();
        CUresult r;

        if (!cu || !cu->ctx_create_v3)
                return CUDA_ERROR_NOT_INITIALIZED;
        r = gs_cu_result(gs_hook_mem_ctx(dev));
        if (r != CUDA_SUCCESS)
                return r;
        r = cu->ctx_create_v3(pctx, params, n, flags, dev);
        if (r == CUDA_SUCCESS && pctx)
                gs_ctx_created(*pctx, dev);
        gs_hook_mem_ctx_done(dev);
        return r;
}

GS_HOOK_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
        const struct gs_cu *cu = gs_cu_get();
        CUresult r;

        if (!cu || !cu->ctx_create_v4)
                return CUDA_ERROR_NOT_INITIALIZED;
        r = gs_cu_result(gs_hook_mem_ctx(dev));
        if (r != CUDA_SUCCESS)
                return r;
        r = cu->ctx_create_v4(pctx, params, flags, dev);
        if (r == CUDA_SUCCESS && pctx)
                gs_ctx_created(*pctx, dev);
        gs_hook_mem_ctx_done(dev);
        return r;
}

/* The mover synchronizes the contexts the application made
 * (gs_hook_ctx.c): a destroyed one is forgotten. */
GS_HOOK_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
        const struct gs_cu *cu = gs_cu_get();

        if (!cu || !cu->ctx_destroy_v2)
                return CUDA_ERROR_NOT_INITIALIZED;
        return gs_ctx_destroy(ctx, cu->ctx_destroy_v2);
}

GS_HOOK_API CUresult cuCtxDestroy(CUcontext ctx)
{
        const struct gs_cu *cu = gs_cu_get();

        if (!cu || (!cu->ctx_destroy && !cu->ctx_destroy_v2))
                return CUDA_ERROR_NOT_INITIALIZED;
        return gs_ctx_destroy(ctx, cu->ctx_destroy ? cu->ctx_destroy : cu->ctx_destroy_v2);
}

/* ---- allocation ------------------------------------------------------ */

GS_HOOK_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
        return gs_cu_result(gs_hook_mem_alloc(dptr, bytesize));
}

GS_HOOK_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                        unsigned int ElementSizeBytes)
{
        size_t pitch;
        CUresult r;

        if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0 ||
            (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
                return CUDA_ERROR_INVALID_VALUE;
        if (WidthInBytes > SIZE_MAX - 511)
                return CUDA_ERROR_INVALID_VALUE;
        pitch = (size_t)gs_align_up(WidthInBytes, 512);
        if (Height > SIZE_MAX / pitch)
                return CUDA_ERROR_OUT_OF_MEMORY;
        r = gs_cu_result(gs_hook_mem_alloc(dptr, pitch * Height));
        if (r == CUDA_SUCCESS)
                *pPitch = pitch;
        return r;
}

/* The 32-bit legacy forms cannot hold a gshare address; never fall through
 * to the real allocator. */
GS_HOOK_API CUresult cuMemAlloc(gs_cudeviceptr_v1 *dptr, unsigned int bytesize)
{
        (void)dptr, (void)bytesize;
        gs_hook_say_once(GS_ONCE_UNSUPPORTED, "legacy 32-bit cuMemAlloc is not supported under gshare");
        return CUDA_ERROR_NOT_SUPPORTED;
}

GS_HOOK_API CUresult cuMemAllocPitch(gs_cudeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
                                     unsigned int Height, unsigned int ElementSizeBytes)
{
        (void)dptr, (void)pPitch, (void)WidthInBytes, (void)Height, (void)ElementSizeBytes;
        gs_hook_say_once(GS_ONCE_UNSUPPORTED, "legacy 32-bit cuMemAllocPitch is not supported under gshare");
        return CUDA_ERROR_NOT_SUPPORTED;
}

GS_HOOK_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
        if (dptr == 0)
                return CUDA_SUCCESS;
        return gs_cu_result(gs_hook_mem_free(dptr));
}

GS_HOOK_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
        const struct gs_cu *cu;

        if (gs_hook_mem_owns(dptr))
                return gs_cu_result(gs_hook_mem_range(dptr, pbase, psize));
        if (gs_hook_ipc_range(dptr, pbase, psize) == 0)
                return CUDA_SUCCESS;
        cu = gs_cu_get();
        if (!cu || !cu->mem_get_address_range_v2)
                return CUDA_ERROR_NOT_FOUND;
        return cu->mem_get_address_range_v2(pbase, psize, dptr);
}

/* Stream-ordered allocation is served at once: the memory is valid before
 * the stream reaches the allocation, which is all the contract asks. */
GS_HOOK_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
        (void)hStream;
        return gs_cu_result(gs_hook_mem_alloc(dptr, bytesize));
}

GS_HOOK_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
        (void)hStream;
        return gs_cu_result(gs_hook_mem_alloc(dptr, bytesize));
}

GS_HOOK_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
        (void)pool, (void)hStream;
        return gs_cu_result(gs_hook_mem_alloc(dptr, bytesize));
}

GS_HOOK_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                  CUstream hStream)
{
        (void)pool, (void)hStream;
        return gs_cu_result(gs_hook_mem_alloc(dptr, bytesize));
}

/* Work queued on the stream before the free may still use the memory:
 * wait for it, then free, so the agent cannot hand the block out early.
 *
 * During stream capture nothing runs and the stream cannot be waited for
 * (that would invalidate the capture); the graph will use the block each
 * time it is launched.  So a block freed inside a capture stays allocated,
 * owned by the graph, until the process exits: the driver too keeps a
 * graph's memory reserved after its free node runs. */
static CUresult gs_free_async(CUdeviceptr dptr, CUstream hStream, int ptsz)
{
        const struct gs_cu *cu = gs_cu_get();
        CUresult (*is_capturing)(CUstream, CUstreamCaptureStatus *);
        CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
        CUresult r;

        if (dptr == 0)
                return CUDA_SUCCESS;
        if (!gs_hook_mem_owns(dptr))
                return CUDA_ERROR_INVALID_VALUE;
        if (!cu)
                return CUDA_ERROR_NOT_INITIALIZED;
        is_capturing = ptsz && cu->stream_is_capturing_ptsz ? cu->stream_is_capturing_ptsz : cu->stream_is_capturing;
        if (is_capturing && is_capturing(hStream, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE) {
                gs_hook_say_once(GS_ONCE_CAPTURE, "memory freed inside a CUDA graph capture stays allocated "
                                                  "(owned by the graph) until the process exits");
                return CUDA_SUCCESS;
        }
        if (ptsz && cu->stream_synchronize_ptsz)
                r = cu->stream_synchronize_ptsz(hStream);
        else if (cu->stream_synchronize)
                r = cu->stream_synchronize(hStream);
        else
                r = CUDA_ERROR_NOT_SUPPORTED;
        if (r != CUDA_SUCCESS)
                return r;
        return gs_cu_result(gs_hook_mem_free(dptr));
}

GS_HOOK_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
        return gs_free_async(dptr, hStream, 0);
}
GS_HOOK_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
        return gs_free_async(dptr, hStream, 1);
}

GS_HOOK_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
        (void)dptr, (void)bytesize, (void)flags;
        gs_hook_say_once(GS_ONCE_UNSUPPORTED, "cuMemAllocManaged (managed memory) is not supported under gshare yet");
        return CUDA_ERROR_NOT_SUPPORTED;
}

GS_HOOK_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                                 unsigned long long flags)
{
        const struct gs_cu *cu;

        if (!handle || !prop || size == 0)
                return CUDA_ERROR_INVALID_VALUE;
        /* Device memory: made by the agent, within the quota. */
        if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
                if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || flags != 0 || size % GS_VMM_ALIGN) {
                        gs_hook_say_once(GS_ONCE_UNSUPPORTED, "cuMemCreate of device memory other than pinned, "
                                                              "in multiples of 2 MiB, is not supported under gshare");
                        return prop->type == CU_MEM_ALLOCATION_TYPE_PINNED && size % GS_VMM_ALIGN
                                       ? CUDA_ERROR_INVALID_VALUE
                                       : CUDA_ERROR_NOT_SUPPORTED;
                }
                /* The agent's allocations can be shared as POSIX fds only
                 * (PyTorch tries FABRIC first and falls back on this). */
                if (prop->requestedHandleTypes & ~(uint64_t)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
                        gs_hook_debug("cuMemCreate with handle types 0x%llx refused: POSIX fd only",
                                      (unsigned long long)prop->requestedHandleTypes);
                        return CUDA_ERROR_NOT_SUPPORTED;
                }
                return gs_cu_result(gs_hook_vmm_create(handle, size, prop->location.id));
        }
        /* Host memory takes none of the GPU's: the real driver serves it. */
        if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST || prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
            prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) {
                cu = gs_cu_get();
                if (!cu || !cu->mem_create)
                        return CUDA_ERROR_NOT_INITIALIZED;
                return cu->mem_create(handle, size, prop, flags);
        }
        gs_hook_say_once(GS_ONCE_UNSUPPORTED, "cuMemCreate of this memory kind is not supported under gshare");
        return CUDA_ERROR_NOT_SUPPORTED;
}

GS_HOOK_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
        const struct gs_cu *cu = gs_cu_get();
        CUresult r;

        if (!cu || !cu->mem_release)
                return CUDA_ERROR_NOT_INITIALIZED;
        r = cu->mem_release(handle);
        if (r == CUDA_SUCCESS)
                gs_hook_vmm_released(handle);
        return r;
}

/* The application's VMM allocations are imports of the agent's: the driver
 * will not export an imported handle, so the hook hands out a duplicate of
 * the agent's fd (PyTorch's expandable segments share tensors this way). */
GS_HOOK_API CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                                  CUmemAllocationHandleType handleType, unsigned long long flags)
{
        const struct gs_cu *cu;
        int fd = -1, r;

        if (handleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && shareableHandle && flags == 0) {
                r = gs_hook_vmm_export(handle, &fd);
                if (r == 0) {
                        *(int *)shareableHandle = fd;
                        return CUDA_SUCCESS;
                }
                if (r != -ENOENT)
                        return CUDA_ERROR_OPERATING_SYSTEM;
        }
        cu = gs_cu_get();
        if (!cu || !cu->mem_export_to_shareable_handle)
                return CUDA_ERROR_NOT_INITIALIZED;
        return cu->mem_export_to_shareable_handle(shareableHandle, handle, handleType, flags);
}

/* Legacy IPC on gshare memory: the driver refuses it on VMM memory, and a
 * driver handle would expose a whole chunk.  The agent brokers a handle
 * that names just the block, for processes of the same allocation
 * (agent/domain/gs_ipc.h).  Other memory goes to the driver. */
GS_HOOK_API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
        const struct gs_cu *cu;

        if (gs_hook_mem_owns(dptr))
                return gs_cu_result(gs_hook_ipc_get(pHandle, dptr));
        cu = gs_cu_get();
        if (!cu || !cu->ipc_get_mem_handle)
                return CUDA_ERROR_NOT_SUPPORTED;
        return cu->ipc_get_mem_handle(pHandle, dptr);
}

GS_HOOK_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
        const struct gs_cu *cu;

        if (gs_hook_ipc_is_ours(&handle)) {
                if (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
                        return CUDA_ERROR_INVALID_VALUE;
                return gs_cu_result(gs_hook_ipc_open(pdptr, &handle));
        }
        cu = gs_cu_get();
        if (!cu || !cu->ipc_open_mem_handle_v2)
                return CUDA_ERROR_NOT_SUPPORTED;
        return cu->ipc_open_mem_handle_v2(pdptr, handle, Flags);
}

GS_HOOK_API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
        return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

GS_HOOK_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
        const struct gs_cu *cu;
        int r = gs_hook_ipc_close(dptr);

        if (r != -ENOENT)
                return gs_cu_result(r);
        cu = gs_cu_get();
        if (!cu || !cu->ipc_close_mem_handle)
                return CUDA_ERROR_INVALID_VALUE;
        return cu->ipc_close_mem_handle(dptr);
}

/* ---- memory info ----------------------------------------------------- */

GS_HOOK_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
        return gs_cu_result(gs_hook_mem_info(free_bytes, total));
}

GS_HOOK_API CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total)
{
        size_t f = 0, t = 0;
        CUresult r;

        if (!free_bytes || !total)
                return CUDA_ERROR_INVALID_VALUE;
        r = gs_cu_result(gs_hook_mem_info(&f, &t));
        if (r == CUDA_SUCCESS) {
                *free_bytes = f > UINT_MAX ? UINT_MAX : (unsigned)f;
                *total = t > UINT_MAX ? UINT_MAX : (unsigned)t;
        }
        return r;
}

GS_HOOK_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
        return gs_cu_result(gs_hook_mem_total(dev, bytes));
}

GS_HOOK_API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
        size_t b = 0;
        CUresult r;

        if (!bytes)
                return CUDA_ERROR_INVALID_VALUE;
        r = gs_cu_result(gs_hook_mem_total(dev, &b));
        if (r == CUDA_SUCCESS)
                *bytes = b > UINT_MAX ? UINT_MAX : (unsigned)b;
        return r;
}
