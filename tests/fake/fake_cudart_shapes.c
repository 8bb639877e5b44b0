// SPDX-License-Identifier: MIT
/*
 * cudaMalloc3D and the memory-pool calls of the fake runtime. cudaMalloc3D: one pitched allocation of height x depth
 * rows, as the real runtime answers it (H200, CUDA 13.0: width 100, height 3
 * gave pitch 512, xsize 100, ysize 3; a zero extent succeeds with a NULL
 * pointer and pitch 0).
 */
#include <stdint.h>

#include "fake_cudart_internal.h"

RT_API cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
    if (!pitchedDevPtr)
        return fcrt_ret(cudaErrorInvalidValue);
    cudaError_t e = fcrt_enter(NULL);
    if (e)
        return fcrt_ret(e);
    if (extent.width == 0 || extent.height == 0 || extent.depth == 0) {
        *pitchedDevPtr = (struct cudaPitchedPtr){NULL, 0, extent.width, extent.height};
        return cudaSuccess;
    }
    if (extent.height > SIZE_MAX / extent.depth)
        return fcrt_ret(cudaErrorMemoryAllocation);
    CUdeviceptr p;
    size_t pitch = 0;
    CUresult r = D.cuMemAllocPitch_v2(&p, &pitch, extent.width, extent.height * extent.depth, 4);
    if (r)
        return fcrt_ret_drv(r);
    *pitchedDevPtr = (struct cudaPitchedPtr){(void *)(uintptr_t)p, pitch, extent.width, extent.height};
    return cudaSuccess;
}

/* The pool calls: the driver's, with the runtime's error codes. */
RT_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
    cudaError_t e = fcrt_enter(NULL);
    return e ? fcrt_ret(e) : fcrt_ret_drv(D.cuDeviceGetDefaultMemPool(memPool, device));
}

RT_API cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *poolProps)
{
    cudaError_t e = fcrt_enter(NULL);
    return e ? fcrt_ret(e) : fcrt_ret_drv(D.cuMemPoolCreate(memPool, (const CUmemPoolProps *)poolProps));
}

RT_API cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool)
{
    cudaError_t e = fcrt_enter(NULL);
    return e ? fcrt_ret(e) : fcrt_ret_drv(D.cuMemPoolDestroy(memPool));
}

RT_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    cudaError_t e = fcrt_enter(NULL);
    return e ? fcrt_ret(e) : fcrt_ret_drv(D.cuMemPoolGetAttribute(memPool, (CUmemPool_attribute)attr, value));
}

RT_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    cudaError_t e = fcrt_enter(NULL);
    return e ? fcrt_ret(e) : fcrt_ret_drv(D.cuMemPoolSetAttribute(memPool, (CUmemPool_attribute)attr, value));
}

RT_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
    cudaError_t e = fcrt_enter(NULL);
    return e ? fcrt_ret(e) : fcrt_ret_drv(D.cuMemPoolTrimTo(memPool, minBytesToKeep));
}

RT_API cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
{
    if (!ptr)
        return fcrt_ret(cudaErrorInvalidValue);
    cudaError_t e = fcrt_enter(NULL);
    if (e)
        return fcrt_ret(e);
    if (size == 0) {
        *ptr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr p;
    CUresult r = D.cuMemAllocFromPoolAsync(&p, size, memPool, stream);
    if (r)
        return fcrt_ret_drv(r);
    *ptr = (void *)(uintptr_t)p;
    return cudaSuccess;
}
