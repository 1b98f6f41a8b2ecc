/* gs_hook_gate.h — the launch gate of libgshare.so: every interposed call
 * that can make the GPU touch device memory asynchronously (kernel and
 * graph launches, copies, memsets, stream memory operations) passes
 * through it, so that the hook can keep them all out of a range while it
 * moves that range's data (issue 22: a borrowed chunk spilled to host
 * memory mapped at the same device address).
 *
 * Not armed (the default), a wrapper costs one relaxed load more than the
 * driver's function.  Armed, each wrapper counts itself in, calls the
 * driver and counts itself out; while the gate is closed, new calls wait.
 *
 * The closer's protocol (the later spill code):
 *
 *     gs_gate_arm();      once, before the process is handed any address
 *                         that may be moved (a borrowed chunk): from then on
 *                         every wrapper that can address it sees the gate
 *     gs_gate_close();    returns when no other thread is inside a wrapper;
 *                         new calls wait from now on
 *     cuCtxSynchronize()  on every context of the process (through the
 *                         real driver, gs_cu_get()->ctx_synchronize): the
 *                         launches and async copies made before the close
 *                         may still be running on the GPU; close does not
 *                         wait for them
 *     ... move the data, remap ...
 *     gs_gate_open();     on the same thread as the close
 *
 * Safe with any number of threads.  A thread that closes the gate while
 * it is itself inside a wrapper (the driver called back into code that
 * closes) does not wait for itself; while a thread holds the gate closed,
 * its own calls through the wrappers pass (they are the mover's).  Closes
 * nest (each needs its open).  After fork the child's gate is open, unless
 * the forking thread held it closed.  Nothing here is exported but the
 * wrappers themselves, which hook/libgshare.lds lists.
 *
 * Not gated: the legacy entry points with 32-bit device pointers (no
 * gshare address fits in them), CUDA 12.8's unversioned cuMemcpyBatchAsync
 * and cuMemcpy3DBatchAsync (other prototypes; cuda.h 13 declares only the
 * _v2 forms), cuLaunchHostFunc (host code), and anything a kernel already
 * running does. */
#ifndef GS_HOOK_GATE_H
#define GS_HOOK_GATE_H

#include "gs_cudadecl.h"

/* Arms the gate for the rest of the process (idempotent). */
void gs_gate_arm(void);
/* 1 once armed. */
int gs_gate_armed(void);
/* Closes the gate: waits until no wrapper is running in another thread,
 * and keeps new ones waiting until gs_gate_open.  Then synchronize the
 * contexts before touching memory (see above). */
void gs_gate_close(void);
/* Undoes one gs_gate_close of this thread. */
void gs_gate_open(void);
/* Threads waiting at the closed gate now (for tests). */
int gs_gate_waiting(void);
/* What every armed wrapper does around the driver's function; returns
 * whether this call was counted (pass it to gs_gate_leave).  Hidden, not
 * for other modules (tests call them to stand for a wrapper). */
int gs_gate_enter(void);
void gs_gate_leave(int counted);

/* The gated entry points: X(name, base), where name is the driver's
 * exported symbol and base the function whose prototype cuda.h declares
 * (name is base or base's _ptsz/_ptds per-thread-stream form).
 * GS_P_base(M) expands to M((parameters), (arguments)), from cuda.h 13.0
 * (gs_hook_gate.c checks every wrapper's type against cuda.h's). */
#define GS_GATED(X) GS_GATED_LAUNCH(X) GS_GATED_OTHER(X)
/* The launches of work on one stream: compute QoS admits them
 * (gs_hook_qos.h). */
// clang-format off
#define GS_GATED_LAUNCH(X) X(cuLaunchKernel, cuLaunchKernel) X(cuLaunchKernel_ptsz, cuLaunchKernel) \
        X(cuLaunchKernelEx, cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx) \
        X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel) \
        X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel) \
        X(cuLaunchGridAsync, cuLaunchGridAsync) X(cuGraphLaunch, cuGraphLaunch) X(cuGraphLaunch_ptsz, cuGraphLaunch)
// clang-format on
// clang-format off
#define GS_GATED_OTHER(X) \
        X(cuLaunchCooperativeKernelMultiDevice, cuLaunchCooperativeKernelMultiDevice) X(cuLaunch, cuLaunch) \
        X(cuLaunchGrid, cuLaunchGrid) X(cuMemcpy, cuMemcpy) X(cuMemcpy_ptds, cuMemcpy) \
        X(cuMemcpyAsync, cuMemcpyAsync) X(cuMemcpyAsync_ptsz, cuMemcpyAsync) X(cuMemcpyPeer, cuMemcpyPeer) \
        X(cuMemcpyPeer_ptds, cuMemcpyPeer) X(cuMemcpyPeerAsync, cuMemcpyPeerAsync) \
        X(cuMemcpyPeerAsync_ptsz, cuMemcpyPeerAsync) X(cuMemcpyHtoD_v2, cuMemcpyHtoD_v2) \
        X(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2, cuMemcpyDtoH_v2) \
        X(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH_v2) X(cuMemcpyDtoD_v2, cuMemcpyDtoD_v2) \
        X(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD_v2) X(cuMemcpyDtoA_v2, cuMemcpyDtoA_v2) \
        X(cuMemcpyDtoA_v2_ptds, cuMemcpyDtoA_v2) X(cuMemcpyAtoD_v2, cuMemcpyAtoD_v2) \
        X(cuMemcpyAtoD_v2_ptds, cuMemcpyAtoD_v2) X(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2) \
        X(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync_v2) X(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2) \
        X(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync_v2) X(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2) \
        X(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync_v2) X(cuMemcpy2D_v2, cuMemcpy2D_v2) \
        X(cuMemcpy2D_v2_ptds, cuMemcpy2D_v2) X(cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2) \
        X(cuMemcpy2DUnaligned_v2_ptds, cuMemcpy2DUnaligned_v2) X(cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2) \
        X(cuMemcpy2DAsync_v2_ptsz, cuMemcpy2DAsync_v2) X(cuMemcpy3D_v2, cuMemcpy3D_v2) \
        X(cuMemcpy3D_v2_ptds, cuMemcpy3D_v2) X(cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2) \
        X(cuMemcpy3DAsync_v2_ptsz, cuMemcpy3DAsync_v2) X(cuMemcpy3DPeer, cuMemcpy3DPeer) \
        X(cuMemcpy3DPeer_ptds, cuMemcpy3DPeer) X(cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync) \
        X(cuMemcpy3DPeerAsync_ptsz, cuMemcpy3DPeerAsync) X(cuMemcpyBatchAsync_v2, cuMemcpyBatchAsync_v2) \
        X(cuMemcpyBatchAsync_v2_ptsz, cuMemcpyBatchAsync_v2) \
        X(cuMemcpy3DBatchAsync_v2, cuMemcpy3DBatchAsync_v2) \
        X(cuMemcpy3DBatchAsync_v2_ptsz, cuMemcpy3DBatchAsync_v2) X(cuMemsetD8_v2, cuMemsetD8_v2) \
        X(cuMemsetD8_v2_ptds, cuMemsetD8_v2) X(cuMemsetD16_v2, cuMemsetD16_v2) \
        X(cuMemsetD16_v2_ptds, cuMemsetD16_v2) X(cuMemsetD32_v2, cuMemsetD32_v2) \
        X(cuMemsetD32_v2_ptds, cuMemsetD32_v2) X(cuMemsetD2D8_v2, cuMemsetD2D8_v2) \
        X(cuMemsetD2D8_v2_ptds, cuMemsetD2D8_v2) X(cuMemsetD2D16_v2, cuMemsetD2D16_v2) \
        X(cuMemsetD2D16_v2_ptds, cuMemsetD2D16_v2) X(cuMemsetD2D32_v2, cuMemsetD2D32_v2) \
        X(cuMemsetD2D32_v2_ptds, cuMemsetD2D32_v2) X(cuMemsetD8Async, cuMemsetD8Async) \
        X(cuMemsetD8Async_ptsz, cuMemsetD8Async) X(cuMemsetD16Async, cuMemsetD16Async) \
        X(cuMemsetD16Async_ptsz, cuMemsetD16Async) X(cuMemsetD32Async, cuMemsetD32Async) \
        X(cuMemsetD32Async_ptsz, cuMemsetD32Async) X(cuMemsetD2D8Async, cuMemsetD2D8Async) \
        X(cuMemsetD2D8Async_ptsz, cuMemsetD2D8Async) X(cuMemsetD2D16Async, cuMemsetD2D16Async) \
        X(cuMemsetD2D16Async_ptsz, cuMemsetD2D16Async) X(cuMemsetD2D32Async, cuMemsetD2D32Async) \
        X(cuMemsetD2D32Async_ptsz, cuMemsetD2D32Async) X(cuStreamWriteValue32_v2, cuStreamWriteValue32_v2) \
        X(cuStreamWriteValue32_v2_ptsz, cuStreamWriteValue32_v2) \
        X(cuStreamWriteValue64_v2, cuStreamWriteValue64_v2) \
        X(cuStreamWriteValue64_v2_ptsz, cuStreamWriteValue64_v2) \
        X(cuStreamWaitValue32_v2, cuStreamWaitValue32_v2) \
        X(cuStreamWaitValue32_v2_ptsz, cuStreamWaitValue32_v2) \
        X(cuStreamWaitValue64_v2, cuStreamWaitValue64_v2) \
        X(cuStreamWaitValue64_v2_ptsz, cuStreamWaitValue64_v2) X(cuStreamBatchMemOp_v2, cuStreamBatchMemOp_v2) \
        X(cuStreamBatchMemOp_v2_ptsz, cuStreamBatchMemOp_v2)
// clang-format on

#define GS_P_cuLaunchKernel(M)                                                                                        \
        M((CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, \
           unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,             \
           void **kernelParams, void **extra),                                                                        \
          (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams,   \
           extra))
#define GS_P_cuLaunchKernelEx(M)                                                           \
        M((const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra), \
          (config, f, kernelParams, extra))
#define GS_P_cuLaunchCooperativeKernel(M)                                                                             \
        M((CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, \
           unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,             \
           void **kernelParams),                                                                                      \
          (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams))
#define GS_P_cuLaunchCooperativeKernelMultiDevice(M)                                            \
        M((CUDA_LAUNCH_PARAMS * launchParamsList, unsigned int numDevices, unsigned int flags), \
          (launchParamsList, numDevices, flags))
#define GS_P_cuLaunch(M) M((CUfunction f), (f))
#define GS_P_cuLaunchGrid(M) M((CUfunction f, int grid_width, int grid_height), (f, grid_width, grid_height))
#define GS_P_cuLaunchGridAsync(M) \
        M((CUfunction f, int grid_width, int grid_height, CUstream hStream), (f, grid_width, grid_height, hStream))
#define GS_P_cuGraphLaunch(M) M((CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream))
#define GS_P_cuMemcpy(M) M((CUdeviceptr dst, CUdeviceptr src, size_t ByteCount), (dst, src, ByteCount))
#define GS_P_cuMemcpyAsync(M) \
        M((CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream), (dst, src, ByteCount, hStream))
#define GS_P_cuMemcpyPeer(M)                                                                         \
        M((CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, \
           size_t ByteCount),                                                                        \
          (dstDevice, dstContext, srcDevice, srcContext, ByteCount))
#define GS_P_cuMemcpyPeerAsync(M)                                                                                      \
        M((CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount, \
           CUstream hStream),                                                                                          \
          (dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream))
#define GS_P_cuMemcpyHtoD_v2(M) \
        M((CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount), (dstDevice, srcHost, ByteCount))
#define GS_P_cuMemcpyDtoH_v2(M) \
        M((void *dstHost, CUdeviceptr srcDevice, size_t ByteCount), (dstHost, srcDevice, ByteCount))
#define GS_P_cuMemcpyDtoD_v2(M) \
        M((CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount), (dstDevice, srcDevice, ByteCount))
#define GS_P_cuMemcpyDtoA_v2(M)                                                          \
        M((CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount), \
          (dstArray, dstOffset, srcDevice, ByteCount))
#define GS_P_cuMemcpyAtoD_v2(M)                                                          \
        M((CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount), \
          (dstDevice, srcArray, srcOffset, ByteCount))
#define GS_P_cuMemcpyHtoDAsync_v2(M)                                                        \
        M((CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream), \
          (dstDevice, srcHost, ByteCount, hStream))
#define GS_P_cuMemcpyDtoHAsync_v2(M)                                                  \
        M((void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream), \
          (dstHost, srcDevice, ByteCount, hStream))
#define GS_P_cuMemcpyDtoDAsync_v2(M)                                                          \
        M((CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream), \
          (dstDevice, srcDevice, ByteCount, hStream))
#define GS_P_cuMemcpy2D_v2(M) M((const CUDA_MEMCPY2D *pCopy), (pCopy))
#define GS_P_cuMemcpy2DUnaligned_v2(M) M((const CUDA_MEMCPY2D *pCopy), (pCopy))
#define GS_P_cuMemcpy2DAsync_v2(M) M((const CUDA_MEMCPY2D *pCopy, CUstream hStream), (pCopy, hStream))
#define GS_P_cuMemcpy3D_v2(M) M((const CUDA_MEMCPY3D *pCopy), (pCopy))
#define GS_P_cuMemcpy3DAsync_v2(M) M((const CUDA_MEMCPY3D *pCopy, CUstream hStream), (pCopy, hStream))
#define GS_P_cuMemcpy3DPeer(M) M((const CUDA_MEMCPY3D_PEER *pCopy), (pCopy))
#define GS_P_cuMemcpy3DPeerAsync(M) M((const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream), (pCopy, hStream))
#define GS_P_cuMemcpyBatchAsync_v2(M)                                                                        \
        M((CUdeviceptr * dsts, CUdeviceptr * srcs, size_t * sizes, size_t count, CUmemcpyAttributes * attrs, \
           size_t * attrsIdxs, size_t numAttrs, CUstream hStream),                                           \
          (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream))
#define GS_P_cuMemcpy3DBatchAsync_v2(M)                                                                 \
        M((size_t numOps, CUDA_MEMCPY3D_BATCH_OP * opList, unsigned long long flags, CUstream hStream), \
          (numOps, opList, flags, hStream))
#define GS_P_cuMemsetD8_v2(M) M((CUdeviceptr dstDevice, unsigned char uc, size_t N), (dstDevice, uc, N))
#define GS_P_cuMemsetD16_v2(M) M((CUdeviceptr dstDevice, unsigned short us, size_t N), (dstDevice, us, N))
#define GS_P_cuMemsetD32_v2(M) M((CUdeviceptr dstDevice, unsigned int ui, size_t N), (dstDevice, ui, N))
#define GS_P_cuMemsetD2D8_v2(M)                                                                    \
        M((CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height), \
          (dstDevice, dstPitch, uc, Width, Height))
#define GS_P_cuMemsetD2D16_v2(M)                                                                    \
        M((CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height), \
          (dstDevice, dstPitch, us, Width, Height))
#define GS_P_cuMemsetD2D32_v2(M)                                                                  \
        M((CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height), \
          (dstDevice, dstPitch, ui, Width, Height))
#define GS_P_cuMemsetD8Async(M) \
        M((CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream), (dstDevice, uc, N, hStream))
#define GS_P_cuMemsetD16Async(M) \
        M((CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream), (dstDevice, us, N, hStream))
#define GS_P_cuMemsetD32Async(M) \
        M((CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream), (dstDevice, ui, N, hStream))
#define GS_P_cuMemsetD2D8Async(M)                                                                                    \
        M((CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height, CUstream hStream), \
          (dstDevice, dstPitch, uc, Width, Height, hStream))
#define GS_P_cuMemsetD2D16Async(M)                                                                                    \
        M((CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height, CUstream hStream), \
          (dstDevice, dstPitch, us, Width, Height, hStream))
#define GS_P_cuMemsetD2D32Async(M)                                                                                  \
        M((CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height, CUstream hStream), \
          (dstDevice, dstPitch, ui, Width, Height, hStream))
#define GS_P_cuStreamWriteValue32_v2(M) \
        M((CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags), (stream, addr, value, flags))
#define GS_P_cuStreamWriteValue64_v2(M) \
        M((CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags), (stream, addr, value, flags))
#define GS_P_cuStreamWaitValue32_v2(M) \
        M((CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags), (stream, addr, value, flags))
#define GS_P_cuStreamWaitValue64_v2(M) \
        M((CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags), (stream, addr, value, flags))
#define GS_P_cuStreamBatchMemOp_v2(M)                                                                      \
        M((CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, unsigned int flags), \
          (stream, count, paramArray, flags))

#define GS_GATE_PARAMS(p, a) p
#define GS_GATE_ARGS(p, a) a

/* cuda.h declares the _ptsz/_ptds forms only for per-thread-stream
 * builds; the wrappers of both kinds are declared here. */
#define GS_GATE_DECL(n, b) CUresult CUDAAPI n GS_P_##b(GS_GATE_PARAMS);
GS_GATED(GS_GATE_DECL)
#undef GS_GATE_DECL

#endif
