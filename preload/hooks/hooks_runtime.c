// SPDX-License-Identifier: MIT
// The CUDA runtime entry points we interpose: forwarders only, the logic is in
// intercept_runtime.c (translation to the serving layer, serve/serve.c) and streams.c. Each is
// exported unversioned (libccinterpose.map), which binds it to the program's versioned
// references (cudaMalloc@libcudart.so.13) ahead of libcudart itself.
#include "hooks.h"

#include "intercept_runtime.h"
#include "streams.h"

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    return cci_pl_malloc(devPtr, size);
}

cudaError_t cudaFree(void *devPtr)
{
    return cci_pl_free(devPtr);
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream)
{
    return cci_pl_malloc_async(devPtr, size, stream);
}

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream)
{
    return cci_pl_free_async(devPtr, stream);
}

// What code built with --default-stream per-thread calls: there stream 0 is the calling thread's
// own default stream.
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t stream)
{
    return cci_pl_malloc_async_ptsz(devPtr, size, stream);
}

cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t stream)
{
    return cci_pl_free_async_ptsz(devPtr, stream);
}

cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
    return cci_pl_mem_get_info(free, total);
}

cudaError_t cudaDeviceReset(void)
{
    return cci_pl_device_reset();
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    return cci_pl_ipc_get_mem_handle(handle, devPtr);
}

cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
    return cci_pl_ipc_open_mem_handle(devPtr, handle, flags);
}

cudaError_t cudaIpcCloseMemHandle(void *devPtr)
{
    return cci_pl_ipc_close_mem_handle(devPtr);
}

// Capture entry points: hooked only to count captures (see intercept/streams.c).
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode)
{
    return cci_pl_begin_capture(stream, mode, 0);
}

cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, cudaStreamCaptureMode mode)
{
    return cci_pl_begin_capture(stream, mode, 1);
}

cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                          const cudaGraphNode_t *dependencies,
                                          const cudaGraphEdgeData *dependencyData,
                                          size_t numDependencies, cudaStreamCaptureMode mode)
{
    return cci_pl_begin_capture_to_graph(stream, graph, dependencies, dependencyData,
                                         numDependencies, mode, 0);
}

cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph,
                                               const cudaGraphNode_t *dependencies,
                                               const cudaGraphEdgeData *dependencyData,
                                               size_t numDependencies, cudaStreamCaptureMode mode)
{
    return cci_pl_begin_capture_to_graph(stream, graph, dependencies, dependencyData,
                                         numDependencies, mode, 1);
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    return cci_pl_end_capture(stream, pGraph, 0);
}

cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)
{
    return cci_pl_end_capture(stream, pGraph, 1);
}

// Streams and peer access: observed for the stream rule, then forwarded (intercept_runtime.c).
cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    return cci_pl_stream_create(pStream, 0, 0, CCI_STREAM_CREATE_PLAIN);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    return cci_pl_stream_create(pStream, flags, 0, CCI_STREAM_CREATE_FLAGS);
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
    return cci_pl_stream_create(pStream, flags, priority, CCI_STREAM_CREATE_PRIORITY);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    return cci_pl_stream_destroy(stream);
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
    return cci_pl_device_enable_peer_access(peerDevice, flags);
}
