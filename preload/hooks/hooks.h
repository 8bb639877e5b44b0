// SPDX-License-Identifier: MIT
// The CUDA runtime entry points we define, with the runtime's own signatures.
#ifndef CCI_PRELOAD_HOOKS_H
#define CCI_PRELOAD_HOOKS_H

#include "cuda_abi.h"
#include "export.h"

CCI_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size);
CCI_EXPORT cudaError_t cudaFree(void *devPtr);
CCI_EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream);
CCI_EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream);
CCI_EXPORT cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t stream);
CCI_EXPORT cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t stream);
CCI_EXPORT cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
CCI_EXPORT cudaError_t cudaDeviceReset(void);
CCI_EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr);
CCI_EXPORT cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags);
CCI_EXPORT cudaError_t cudaIpcCloseMemHandle(void *devPtr);
CCI_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
CCI_EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, cudaStreamCaptureMode mode);
CCI_EXPORT cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                                     const cudaGraphNode_t *dependencies,
                                                     const cudaGraphEdgeData *dependencyData,
                                                     size_t numDependencies,
                                                     cudaStreamCaptureMode mode);
CCI_EXPORT cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph,
                                                          const cudaGraphNode_t *dependencies,
                                                          const cudaGraphEdgeData *dependencyData,
                                                          size_t numDependencies,
                                                          cudaStreamCaptureMode mode);
CCI_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph);
CCI_EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph);
CCI_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *pStream);
CCI_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags);
CCI_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                    int priority);
CCI_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream);
CCI_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags);

CCI_EXPORT cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height);
CCI_EXPORT cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent);
CCI_EXPORT cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags);
CCI_EXPORT cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream);

// PyTorch's pluggable allocator's two functions (torch_pluggable.c), by the names Python passes.
CCI_EXPORT void *cci_torch_alloc(size_t size, int device, cudaStream_t stream);
CCI_EXPORT void cci_torch_free(void *ptr, size_t size, int device, cudaStream_t stream);

#endif
