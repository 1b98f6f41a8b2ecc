/* gs_cudadecl.h — cuda.h plus the driver's legacy entry points.
 *
 * cuda.h #defines the legacy names to their current versions (cuMemAlloc ->
 * cuMemAlloc_v2, ...) and declares only those.  The real libcuda exports
 * both, and so do the hook (which must catch a caller that resolves the
 * legacy name) and the fake driver.  After this header, cuMemAlloc etc. name
 * the legacy functions with their legacy (32-bit) types: always write the
 * _v2 name for the current API.  Header-only; declarations only. */
#ifndef GS_CUDADECL_H
#define GS_CUDADECL_H

#include <cuda.h>

#undef cuDeviceTotalMem
#undef cuDeviceGetUuid
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
#undef cuCtxCreate
#undef cuCtxDestroy
#undef cuCtxPushCurrent
#undef cuCtxPopCurrent
#undef cuStreamDestroy
#undef cuMemGetInfo
#undef cuMemAlloc
#undef cuMemAllocPitch
#undef cuMemFree
#undef cuMemGetAddressRange
#undef cuMemcpyHtoD
#undef cuMemcpyDtoH
#undef cuMemcpyDtoD
#undef cuMemsetD8
#undef cuMemsetD32
#undef cuIpcOpenMemHandle
#undef cuGetProcAddress

typedef unsigned int gs_cudeviceptr_v1;

CUresult CUDAAPI cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);
CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev);
CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags,
                                CUdevice dev);
CUresult CUDAAPI cuCtxDestroy(CUcontext ctx);
CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx);
CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx);
CUresult CUDAAPI cuStreamDestroy(CUstream hStream);
CUresult CUDAAPI cuMemGetInfo(unsigned int *free, unsigned int *total);
CUresult CUDAAPI cuMemAlloc(gs_cudeviceptr_v1 *dptr, unsigned int bytesize);
CUresult CUDAAPI cuMemAllocPitch(gs_cudeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
                                 unsigned int Height, unsigned int ElementSizeBytes);
CUresult CUDAAPI cuMemFree(gs_cudeviceptr_v1 dptr);
CUresult CUDAAPI cuMemGetAddressRange(gs_cudeviceptr_v1 *pbase, unsigned int *psize, gs_cudeviceptr_v1 dptr);
CUresult CUDAAPI cuMemcpyHtoD(gs_cudeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount);
CUresult CUDAAPI cuMemcpyDtoH(void *dstHost, gs_cudeviceptr_v1 srcDevice, unsigned int ByteCount);
CUresult CUDAAPI cuMemcpyDtoD(gs_cudeviceptr_v1 dstDevice, gs_cudeviceptr_v1 srcDevice, unsigned int ByteCount);
CUresult CUDAAPI cuMemsetD8(gs_cudeviceptr_v1 dstDevice, unsigned char uc, unsigned int N);
CUresult CUDAAPI cuMemsetD32(gs_cudeviceptr_v1 dstDevice, unsigned int ui, unsigned int N);
CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

/* Per-thread-default-stream variants (cuda.h declares them only when
 * CUDA_API_PER_THREAD_DEFAULT_STREAM is defined). */
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream);
CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus);

#endif
