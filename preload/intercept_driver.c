// SPDX-License-Identifier: MIT
// The logic behind the driver-level wrappers: the same allocators as the runtime level
// (intercept.c), answered in CUresult, and everything we do not own handed to the real driver
// function with its real return code.
//
// Pools are per device and live in the device's primary context (backend_cuda.c), which is the
// context every cudart copy uses. An allocation is ours only when the calling thread's current
// context is that primary context: memory of another context is not ours to hand out there, so
// programs with contexts of their own (cuCtxCreate) pass through.
#include "intercept_driver.h"

#include <stdint.h>

#include "allocator.h"
#include "backend_cuda.h"
#include "driver_table.h"
#include "intercept.h"
#include "levels.h"
#include "log.h"
#include "state.h"
#include "streams.h"

// 1 when this call is the driver level's to handle: not already handled by a runtime hook that
// is forwarding it, the level switched on, and the layer active (which starts it on first use).
static int driver_level(void)
{
    return !cci_pl_forwarding() && (cci_pl_levels() & CCI_LEVEL_DRIVER) && cci_state_active();
}

// The device of the calling thread's current context, when that context is the device's primary
// context. 0 and *device, or -1 (no context, another context, a device beyond our table).
static int primary_device(const cci_drv_table *t, int *device)
{
    CUcontext cur = NULL;
    CUdevice dev;
    if (!t->cuCtxGetCurrent || !t->cuCtxGetDevice || t->cuCtxGetCurrent(&cur) != CUDA_SUCCESS ||
        !cur || t->cuCtxGetDevice(&dev) != CUDA_SUCCESS || (unsigned)dev >= CCI_PL_MAX_DEVICES)
        return -1;
    CUcontext primary = cci_cuda_backend_primary(dev, 0);
    if (!primary) {
        // Retaining an inactive primary context would create one (hundreds of MiB of device
        // memory) for a program that only uses contexts of its own.
        unsigned flags = 0;
        int active = 1;
        if (t->cuDevicePrimaryCtxGetState &&
            (t->cuDevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS || !active))
            return -1;
        primary = cci_cuda_backend_primary(dev, 1);
    }
    if (primary != cur)
        return -1;
    *device = dev;
    return 0;
}

// The device of the current context, whichever context it is (for cuMemGetInfo).
static int current_device(const cci_drv_table *t, int *device)
{
    CUdevice dev;
    if (!t->cuCtxGetDevice || t->cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return -1;
    *device = dev;
    return 0;
}

// 1 when `s` is capturing (or its state cannot be read, e.g. an invalid handle: then the real
// call must answer). Asked of the driver on every stream-ordered call, because captures begun
// through the driver or a static cudart never pass our runtime hooks: a cached pointer handed
// out during a capture would be baked into the graph instead of a MEM_ALLOC node.
static int stream_capturing(const cci_drv_table *t, CUstream s, int ptsz)
{
    CUresult (*is_capturing)(CUstream, CUstreamCaptureStatus *) =
        ptsz ? t->cuStreamIsCapturing_ptsz : t->cuStreamIsCapturing;
    if (!is_capturing)
        return cci_capture_maybe_active();
    CUstreamCaptureStatus st = 0;
    return is_capturing(s, &st) != CUDA_SUCCESS || st != 0;
}

static CUresult invalid_free(const char *fn, CUdeviceptr p)
{
    cci_log(CCI_LOG_WARNING, "%s(%#llx): not the start of a live block (double free, or a pointer "
            "inside a block); returning CUDA_ERROR_INVALID_VALUE, the allocator is unchanged", fn,
            p);
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cci_pl_cu_mem_alloc(CUdeviceptr *dptr, size_t size)
{
    const cci_drv_table *t = cci_drv_get(NULL);
    if (!t->cuMemAlloc_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    int device;
    // Size 0 and a NULL out-pointer keep the driver's own answers; during a capture begun through
    // the runtime, a plain allocation behaves as the driver's own (see intercept.c).
    if (!dptr || size == 0 || !driver_level() || cci_capture_maybe_active() ||
        primary_device(t, &device) != 0)
        return t->cuMemAlloc_v2(dptr, size);
    uintptr_t addr;
    int rc = cci_pl_serve(CCI_LEVEL_DRIVER, device, size, CCI_KEY_LEGACY, &addr);
    if (rc == CCI_OK) {
        *dptr = (CUdeviceptr)addr;
        return CUDA_SUCCESS;
    }
    return rc == CCI_EOOM ? CUDA_ERROR_OUT_OF_MEMORY : t->cuMemAlloc_v2(dptr, size);
}

CUresult cci_pl_cu_mem_free(CUdeviceptr dptr)
{
    const cci_drv_table *t = cci_drv_get(NULL);
    if (!t->cuMemFree_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || !driver_level())
        return t->cuMemFree_v2(dptr);
    int rc = cci_pl_release((uintptr_t)dptr, CCI_KEY_LEGACY, cci_pl_sync_free_mode());
    if (rc == CCI_ENOTOURS)
        return t->cuMemFree_v2(dptr);
    return rc == CCI_OK ? CUDA_SUCCESS : invalid_free("cuMemFree_v2", dptr);
}

CUresult cci_pl_cu_mem_alloc_async(CUdeviceptr *dptr, size_t size, CUstream s, int ptsz)
{
    const cci_drv_table *t = cci_drv_get(NULL);
    CUresult (*real)(CUdeviceptr *, size_t, CUstream) =
        ptsz ? t->cuMemAllocAsync_ptsz : t->cuMemAllocAsync;
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    int device;
    if (!dptr || size == 0 || !driver_level() || stream_capturing(t, s, ptsz) ||
        primary_device(t, &device) != 0)
        return real(dptr, size, s);
    uintptr_t addr;
    int rc = cci_pl_serve(CCI_LEVEL_DRIVER, device, size, cci_stream_key((cudaStream_t)s, ptsz),
                          &addr);
    if (rc == CCI_OK) {
        *dptr = (CUdeviceptr)addr;
        return CUDA_SUCCESS;
    }
    return rc == CCI_EOOM ? CUDA_ERROR_OUT_OF_MEMORY : real(dptr, size, s);
}

CUresult cci_pl_cu_mem_free_async(CUdeviceptr dptr, CUstream s, int ptsz)
{
    const cci_drv_table *t = cci_drv_get(NULL);
    CUresult (*real)(CUdeviceptr, CUstream) = ptsz ? t->cuMemFreeAsync_ptsz : t->cuMemFreeAsync;
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || !driver_level())
        return real(dptr, s);
    // Freed inside a capture, the block waits for a synchronisation (which the backend refuses
    // during captures) instead of returning to the stream's pool before the graph exists.
    cci_free_mode mode = stream_capturing(t, s, ptsz) ? CCI_FREE_DEFERRED : CCI_FREE_NOW;
    int rc = cci_pl_release((uintptr_t)dptr, cci_stream_key((cudaStream_t)s, ptsz), mode);
    if (rc == CCI_ENOTOURS)
        return real(dptr, s);
    return rc == CCI_OK ? CUDA_SUCCESS
                        : invalid_free(ptsz ? "cuMemFreeAsync_ptsz" : "cuMemFreeAsync", dptr);
}

CUresult cci_pl_cu_mem_get_info(size_t *free_b, size_t *total_b)
{
    const cci_drv_table *t = cci_drv_get(NULL);
    if (!t->cuMemGetInfo_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = t->cuMemGetInfo_v2(free_b, total_b);
    int device;
    // As cudaMemGetInfo (intercept.c): cached blocks are the program's for the asking. A NULL
    // out-pointer is legal (OptiX passes free = NULL).
    if (rc != CUDA_SUCCESS || !free_b || !driver_level() ||
        !cci_state_config()->memgetinfo_cached_as_free || current_device(t, &device) != 0)
        return rc;
    cci_allocator *a = cci_state_allocator_peek(device);
    if (a) {
        *free_b += cci_cached_free_bytes(a);
        if (total_b && *free_b > *total_b)
            *free_b = *total_b;
    }
    return rc;
}

CUresult cci_pl_cu_mem_get_address_range(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
    const cci_drv_table *t = cci_drv_get(NULL);
    if (!t->cuMemGetAddressRange_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || !driver_level())
        return t->cuMemGetAddressRange_v2(base, size, dptr);
    uintptr_t block = 0;
    size_t block_size = 0;
    int rc = cci_pl_block_info((uintptr_t)dptr, &block, &block_size, NULL, NULL);
    if (rc == CCI_ENOTOURS)
        return t->cuMemGetAddressRange_v2(base, size, dptr);
    // The driver would describe the whole segment, which other blocks share: a program that
    // copies or registers "its allocation" by this range must get its own block.
    if (rc != CCI_OK)
        return CUDA_ERROR_NOT_FOUND;  // cached free space: freed memory, as the driver says
    if (base)
        *base = (CUdeviceptr)block;
    if (size)
        *size = block_size;
    return CUDA_SUCCESS;
}

CUresult cci_pl_cu_ipc_get_mem_handle(CUipcMemHandle *h, CUdeviceptr dptr)
{
    const cci_drv_table *t = cci_drv_get(NULL);
    if (!t->cuIpcGetMemHandle)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!h || !dptr || !driver_level())
        return t->cuIpcGetMemHandle(h, dptr);
    uintptr_t block = 0, segment = 0;
    size_t block_size = 0, segment_size = 0;
    int rc = cci_pl_block_info((uintptr_t)dptr, &block, &block_size, &segment, &segment_size);
    if (rc == CCI_ENOTOURS)
        return t->cuIpcGetMemHandle(h, dptr);
    if (rc != CCI_OK) {
        cci_log(CCI_LOG_WARNING, "cuIpcGetMemHandle(%#llx): the pointer is in our memory but in no "
                "live block (already freed?); returning CUDA_ERROR_INVALID_VALUE", dptr);
        return CUDA_ERROR_INVALID_VALUE;
    }
    // Same rule as cudaIpcGetMemHandle (intercept.c): the importer maps the segment's start.
    if (block != segment) {
        cci_log(CCI_LOG_WARNING, "cuIpcGetMemHandle(%#llx): the block starts %zu bytes into a "
                "cached %zu-byte segment and an importer would map the segment's start; returning "
                "CUDA_ERROR_INVALID_VALUE. Set CCI_ALLOC_CONF=max_split_size_mb:N with N at most "
                "the IPC buffer size (such blocks are never split and start their own segment), "
                "or run with CCI_DISABLE=1", dptr, (size_t)(block - segment), segment_size);
        return CUDA_ERROR_INVALID_VALUE;
    }
    return t->cuIpcGetMemHandle(h, dptr);
}

// Pool teardown is not optional: once the context is gone, an allocator that still held its
// segments would hand out addresses that no longer exist. So it happens whenever the layer is
// active, whatever intercept_level says, unless a runtime hook already did it (cudaDeviceReset).
static int teardown_applies(void)
{
    return !cci_pl_forwarding() && cci_state_active();
}

CUresult cci_pl_cu_primary_ctx_reset(CUdevice dev, int v2)
{
    const cci_drv_table *t = cci_drv_get(NULL);
    CUresult (*real)(CUdevice) = v2 ? t->cuDevicePrimaryCtxReset_v2 : t->cuDevicePrimaryCtxReset;
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    // The reset frees every allocation of the context: give our segments back while it exists.
    if (teardown_applies())
        cci_state_drop_device(dev);
    return real(dev);
}

CUresult cci_pl_cu_ctx_destroy(CUcontext ctx, int v2)
{
    const cci_drv_table *t = cci_drv_get(NULL);
    CUresult (*real)(CUcontext) = v2 ? t->cuCtxDestroy_v2 : t->cuCtxDestroy;
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    // Only the primary context holds our segments; destroying any other leaves the pools alone.
    if (ctx && teardown_applies()) {
        for (int d = 0, n = cci_state_device_bound(); d < n; d++) {
            if (cci_cuda_backend_primary(d, 0) == ctx) {
                cci_state_drop_device(d);
                break;
            }
        }
    }
    return real(ctx);
}
