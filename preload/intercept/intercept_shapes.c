// SPDX-License-Identifier: MIT
// Pitched and 3-D allocations (intercept_shapes.h). Each call is served only when its arguments
// are ones CUDA would accept and the pitch is known; anything else goes to CUDA's own entry
// point, so bad arguments get CUDA's exact codes and zero sizes CUDA's exact answers (the runtime
// answers success with a NULL pointer and pitch 0, the driver CUDA_ERROR_INVALID_VALUE).
#include "intercept_shapes.h"

#include "forwarding.h"
#include "intercept_driver.h"
#include "intercept_runtime.h"
#include "levels.h"
#include "real.h"
#include "serve_shapes.h"

// The block of a served pitched allocation comes from the plain path of the same level, which
// makes the remaining decisions (capture, which allocator, out of memory) as for cudaMalloc.
static cudaError_t runtime_pitched(void **p, size_t *pitch, size_t width, size_t rows)
{
    int device;
    size_t bytes, pt = 0;
    if (!p || !pitch || !cci_pl_serving(CCI_LEVEL_RUNTIME) || (device = cci_pl_runtime_current_device()) < 0 ||
        (bytes = cci_serve_pitched_bytes(device, width, rows, &pt)) == 0)
        return (cudaError_t)-1;
    cudaError_t rc = cci_pl_malloc(p, bytes);
    if (rc == cudaSuccess)
        *pitch = pt;
    return rc;
}

cudaError_t cci_pl_malloc_pitch(void **p, size_t *pitch, size_t width, size_t height)
{
    cudaError_t rc = runtime_pitched(p, pitch, width, height);
    return rc != (cudaError_t)-1 ? rc : cci_real_rt()->cudaMallocPitch(p, pitch, width, height);
}

cudaError_t cci_pl_malloc_3d(struct cudaPitchedPtr *pp, struct cudaExtent extent)
{
    void *ptr;
    size_t pitch;
    cudaError_t rc = (cudaError_t)-1;
    if (pp && extent.depth != 0 && extent.height <= SIZE_MAX / extent.depth)
        rc = runtime_pitched(&ptr, &pitch, extent.width, extent.height * extent.depth);
    if (rc == (cudaError_t)-1)
        return cci_real_rt()->cudaMalloc3D(pp, extent);
    if (rc == cudaSuccess)
        *pp = (struct cudaPitchedPtr){.ptr = ptr, .pitch = pitch, .xsize = extent.width, .ysize = extent.height};
    return rc;
}

CUresult cci_pl_cu_mem_alloc_pitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                   unsigned element_size)
{
    const cci_real_driver *drv = cci_real_drv();
    CUdevice device;
    size_t bytes, pt = 0;
    // The driver accepts element sizes 4, 8 and 16 only; they change nothing in the pitch.
    int valid = dptr && pitch && (element_size == 4 || element_size == 8 || element_size == 16);
    if (valid && !cci_pl_forwarding() && cci_pl_serving(CCI_LEVEL_DRIVER) && drv->cuCtxGetDevice &&
        drv->cuCtxGetDevice(&device) == CUDA_SUCCESS &&
        (bytes = cci_serve_pitched_bytes(device, width, height, &pt)) != 0) {
        CUresult rc = cci_pl_cu_mem_alloc(dptr, bytes);
        if (rc == CUDA_SUCCESS)
            *pitch = pt;
        return rc;
    }
    if (!drv->cuMemAllocPitch_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    return drv->cuMemAllocPitch_v2(dptr, pitch, width, height, element_size);
}

// Managed memory is never served: it must stay migratable between host and device, which our
// segments are not. The runtime call runs marked as forwarding, so the driver call it makes is
// not counted a second time by the driver level.
cudaError_t cci_pl_malloc_managed(void **p, size_t size, unsigned flags)
{
    const cci_real_runtime *rt = cci_real_rt();
    if (!cci_pl_serving(CCI_LEVEL_RUNTIME))
        return rt->cudaMallocManaged(p, size, flags);
    cci_pl_forwarding_begin();
    cudaError_t rc = rt->cudaMallocManaged(p, size, flags);
    int device;
    if (rc == cudaSuccess && p && *p && rt->cudaGetDevice(&device) == cudaSuccess)
        cci_serve_passed_managed(device, (uintptr_t)*p, size);
    cci_pl_forwarding_end();
    return rc;
}

CUresult cci_pl_cu_mem_alloc_managed(CUdeviceptr *dptr, size_t size, unsigned flags)
{
    const cci_real_driver *drv = cci_real_drv();
    if (!drv->cuMemAllocManaged)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = drv->cuMemAllocManaged(dptr, size, flags);
    CUdevice device;
    if (rc == CUDA_SUCCESS && !cci_pl_forwarding() && cci_pl_serving(CCI_LEVEL_DRIVER) && drv->cuCtxGetDevice &&
        drv->cuCtxGetDevice(&device) == CUDA_SUCCESS)
        cci_serve_passed_managed(device, (uintptr_t)*dptr, size);
    return rc;
}

// The device a pool's allocation is counted on: where CUDA put it (the pointer's device), else
// the stream's.
static int pointer_device(uintptr_t addr, int fallback)
{
    const cci_real_driver *drv = cci_real_drv();
    int device = -1;
    if (drv->cuPointerGetAttribute &&
        drv->cuPointerGetAttribute(&device, CCI_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)addr) == CUDA_SUCCESS)
        return device;
    return fallback;
}

cudaError_t cci_pl_malloc_from_pool_async(void **p, size_t size, cudaMemPool_t pool, cudaStream_t s)
{
    const cci_real_runtime *rt = cci_real_rt();
    if (!cci_pl_serving(CCI_LEVEL_RUNTIME))
        return rt->cudaMallocFromPoolAsync(p, size, pool, s);
    int device = cci_pl_runtime_stream_device(s);
    if (p && size && device >= 0 && cci_serve_pool_is_default(device, pool))
        return cci_pl_malloc_async(p, size, s);
    cci_pl_forwarding_begin();
    cudaError_t rc = rt->cudaMallocFromPoolAsync(p, size, pool, s);
    if (rc == cudaSuccess && p && *p)
        cci_serve_passed_pool(pointer_device((uintptr_t)*p, device), (uintptr_t)*p, size, pool);
    cci_pl_forwarding_end();
    return rc;
}

CUresult cci_pl_cu_mem_alloc_from_pool_async(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s,
                                             int ptsz)
{
    const cci_real_driver *drv = cci_real_drv();
    CUresult (*real)(CUdeviceptr *, size_t, CUmemoryPool, CUstream) =
        ptsz ? drv->cuMemAllocFromPoolAsync_ptsz : drv->cuMemAllocFromPoolAsync;
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (cci_pl_forwarding() || !cci_pl_serving(CCI_LEVEL_DRIVER))
        return real(dptr, size, pool, s);
    int device = cci_pl_driver_stream_device(s);
    if (dptr && size && device >= 0 && cci_serve_pool_is_default(device, pool))
        return ptsz ? cci_pl_cu_mem_alloc_async_ptsz(dptr, size, s) : cci_pl_cu_mem_alloc_async(dptr, size, s);
    CUresult rc = real(dptr, size, pool, s);
    if (rc == CUDA_SUCCESS)
        cci_serve_passed_pool(pointer_device((uintptr_t)*dptr, device), (uintptr_t)*dptr, size, pool);
    return rc;
}

// cci_pl_cu_mem_pool_*: CUDA answers first (its own share of the pool: what reached it before the
// preload served, or while it passed through); the serve layer adds ours where the pool is a
// device's default one and that device has our allocator.
CUresult cci_pl_cu_mem_pool_get_attribute(CUmemoryPool pool, int attr, void *value)
{
    const cci_real_driver *drv = cci_real_drv();
    if (!drv->cuMemPoolGetAttribute)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = drv->cuMemPoolGetAttribute(pool, attr, value);
    if (rc == CUDA_SUCCESS && !cci_pl_forwarding())
        cci_serve_default_pool_add(pool, attr, value);
    return rc;
}

CUresult cci_pl_cu_mem_pool_set_attribute(CUmemoryPool pool, int attr, void *value)
{
    const cci_real_driver *drv = cci_real_drv();
    if (!drv->cuMemPoolSetAttribute)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = drv->cuMemPoolSetAttribute(pool, attr, value);
    if (rc == CUDA_SUCCESS && !cci_pl_forwarding())
        cci_serve_default_pool_set(pool, attr);
    return rc;
}

CUresult cci_pl_cu_mem_pool_trim_to(CUmemoryPool pool, size_t keep)
{
    const cci_real_driver *drv = cci_real_drv();
    if (!drv->cuMemPoolTrimTo)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = drv->cuMemPoolTrimTo(pool, keep);
    if (rc == CUDA_SUCCESS && !cci_pl_forwarding())
        cci_serve_default_pool_trim(pool, keep);
    return rc;
}
