// SPDX-License-Identifier: MIT
/*
 * Glue between the fake runtime's files: fake_cudart.c (initialisation,
 * devices, streams, ...), fake_cudart_memory.c (memory, copies, fills),
 * fake_cudart_peer.c (peer access, pointer attributes) and the others.
 * Hidden symbols only: the version script exports cuda* and fakecuda_* and
 * nothing here.
 */
#ifndef FAKE_CUDART_INTERNAL_H
#define FAKE_CUDART_INTERNAL_H

#include "fake_cuda_driver.h"
#include "fake_cuda_runtime.h"

#define RT_API __attribute__((visibility("default")))
#define RT_MAX_DEVICES 8

/* The driver functions the runtime calls, looked up in the libcuda handle
 * (never through the PLT, so the preload does not see them, as with
 * NVIDIA's libcudart). */
#define DRIVER_FUNCS(X)            \
    X(cuInit)                      \
    X(cuDriverGetVersion)          \
    X(cuDeviceGetCount)            \
    X(cuDevicePrimaryCtxRetain)    \
    X(cuDevicePrimaryCtxReset_v2)  \
    X(cuCtxGetCurrent)             \
    X(cuCtxSetCurrent)             \
    X(cuCtxGetDevice)              \
    X(cuCtxSynchronize)            \
    X(cuCtxEnablePeerAccess)       \
    X(cuCtxDisablePeerAccess)      \
    X(cuDeviceCanAccessPeer)       \
    X(cuPointerGetAttributes)      \
    X(cuMemAlloc_v2)               \
    X(cuMemFree_v2)                \
    X(cuMemAllocManaged)           \
    X(cuMemAllocPitch_v2)          \
    X(cuMemAllocAsync)             \
    X(cuMemAllocAsync_ptsz)        \
    X(cuMemFreeAsync)              \
    X(cuMemFreeAsync_ptsz)         \
    X(cuMemGetInfo_v2)             \
    X(cuIpcGetMemHandle)           \
    X(cuIpcOpenMemHandle_v2)       \
    X(cuIpcCloseMemHandle)         \
    X(cuStreamCreate)              \
    X(cuStreamDestroy_v2)          \
    X(cuStreamSynchronize)         \
    X(cuStreamQuery)               \
    X(cuStreamIsCapturing)         \
    X(cuStreamBeginCapture_v2)     \
    X(cuStreamBeginCaptureToGraph) \
    X(cuGraphCreate)               \
    X(cuStreamEndCapture)          \
    X(cuEventCreate)               \
    X(cuEventRecord)               \
    X(cuEventQuery)                \
    X(cuEventSynchronize)          \
    X(cuEventDestroy_v2)           \
    X(cuGetProcAddress_v2)         \
    X(cuStreamWaitEvent)           \
    X(cuStreamWaitEvent_ptsz)      \
    X(cuGraphInstantiateWithFlags) \
    X(cuGraphLaunch)               \
    X(cuGraphLaunch_ptsz)          \
    X(cuGraphExecDestroy)          \
    X(cuGraphDestroy)              \
    X(fakecu_stream_hold)          \
    X(fakecu_stream_demand)        \
    X(fakecu_launch)               \
    X(cuDeviceGetDefaultMemPool)   \
    X(cuMemPoolCreate)             \
    X(cuMemPoolDestroy)            \
    X(cuMemPoolGetAttribute)       \
    X(cuMemPoolSetAttribute)       \
    X(cuMemPoolTrimTo)             \
    X(cuMemAllocFromPoolAsync)     \
    X(cuMemHostAlloc)              \
    X(cuMemFreeHost)               \
    X(cuMemHostRegister_v2)        \
    X(cuMemHostUnregister)         \
    X(cuMemHostGetFlags)           \
    X(cuMemHostGetDevicePointer_v2)

#define DECLARE_PTR(name) __typeof__(name) *name;
struct fcrt_driver {
    DRIVER_FUNCS(DECLARE_PTR)
};
#undef DECLARE_PTR
extern struct fcrt_driver D;

/* The prologue of every call that needs a device (the thread's context, or
 * its runtime device's primary one made current); *devp gets its ordinal. */
cudaError_t fcrt_enter(int *devp);
/* A result, kept as the thread's last error unless it is a status. */
cudaError_t fcrt_ret(cudaError_t e);
cudaError_t fcrt_ret_drv(CUresult r);
/* A driver result as the runtime's error, without recording it. */
cudaError_t fcrt_map_error(CUresult r);

/* fcrt_enter as a prologue: on failure, returns (and records) its error. */
#define ENTER_OR_RETURN(devp)                \
    do {                                     \
        cudaError_t e_ = fcrt_enter(devp);   \
        if (e_)                              \
            return fcrt_ret(e_);             \
    } while (0)
/* The primary context of dev (0 <= dev < RT_MAX_DEVICES), retained once per
 * process, without making it current. */
cudaError_t fcrt_primary(int dev, CUcontext *out);

#endif /* FAKE_CUDART_INTERNAL_H */
