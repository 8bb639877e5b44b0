// SPDX-License-Identifier: MIT
// Pitched and 3-D allocation, managed memory and memory-pool entry points, runtime and driver: forwarders only (the logic is in
// intercept/intercept_shapes.c). cuMemAllocPitch_v2 and cuMemAllocManaged are also what our dlsym and cuGetProcAddress
// hand out for the driver's own functions (resolver.c, from real.h's list of wrapped functions).
#include "hooks.h"
#include "hooks_driver.h"
#include "intercept_shapes.h"

cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
    return cci_pl_malloc_pitch(devPtr, pitch, width, height);
}

cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
    return cci_pl_malloc_3d(pitchedDevPtr, extent);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes)
{
    return cci_pl_cu_mem_alloc_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
}

cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    return cci_pl_malloc_managed(devPtr, size, flags);
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    return cci_pl_cu_mem_alloc_managed(dptr, bytesize, flags);
}

cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
{
    return cci_pl_malloc_from_pool_async(ptr, size, memPool, stream);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    return cci_pl_cu_mem_alloc_from_pool_async(dptr, bytesize, pool, hStream, 0);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    return cci_pl_cu_mem_alloc_from_pool_async(dptr, bytesize, pool, hStream, 1);
}

// The default pool's figures, peaks and trimming (every cudart reaches these through our
// cuGetProcAddress, so cudaMemPool* calls arrive here too).
CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void *value)
{
    return cci_pl_cu_mem_pool_get_attribute(pool, attr, value);
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value)
{
    return cci_pl_cu_mem_pool_set_attribute(pool, attr, value);
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    return cci_pl_cu_mem_pool_trim_to(pool, minBytesToKeep);
}
