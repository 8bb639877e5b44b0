// SPDX-License-Identifier: MIT
// Pitched and 3-D allocation entry points, runtime and driver: forwarders only (the logic is in
// intercept/intercept_shapes.c). cuMemAllocPitch_v2 is also what our dlsym and cuGetProcAddress
// hand out for the driver's own (resolver.c, from real.h's list of wrapped functions).
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
