// SPDX-License-Identifier: MIT
// The driver level: the driver-level wrappers' arguments and answers translated to and from the
// serving layer (serve.h), which makes every decision; everything not ours goes to the real
// driver function with its real return code.
//
// Pools are per device and live in the device's primary context (backend_cuda.c), which is the
// context every cudart copy uses. An allocation is ours only when the calling thread's current
// context is that primary context: memory of another context is not ours to hand out there, so
// programs with contexts of their own (cuCtxCreate) pass through.
#include "intercept_driver.h"

#include <stdint.h>

#include "backend_cuda.h"
#include "fence.h"
#include "levels.h"
#include "program_vmm.h"
#include "real.h"
#include "serve.h"
#include "serve_shapes.h"
#include "state.h"
#include "stream_rule.h"
#include "streams.h"

// 1 when this call is the driver level's to handle: not already handled by a runtime hook that
// is forwarding it, the level switched on, and the layer active (which starts it on first use).
static inline int driver_level(void)
{
    return !cci_pl_forwarding() && cci_pl_serving(CCI_LEVEL_DRIVER);
}

// The device of the calling thread's current context, when that context is the device's primary
// context; -1 otherwise (no context, another context, a device beyond our table).
// The thread's last answer: when the current context is that device's primary context as we
// hold it, the device is known without asking the driver again (a primary context we retain
// never goes away; the slot is emptied before we release it).
static _Thread_local int last_primary_device __attribute__((tls_model("initial-exec")));

// The search when the thread's current context `cur` is not its last device's primary context.
// Out of line, and given nothing it can find itself: the fast path below is one driver call and
// one compare, and keeps nothing in a register for this call.
static __attribute__((noinline)) int primary_device_search(CUcontext cur)
{
    const cci_real_driver *t = cci_real_drv();
    CUdevice dev;
    if (!t->cuCtxGetDevice || t->cuCtxGetDevice(&dev) != CUDA_SUCCESS || (unsigned)dev >= CCI_PL_MAX_DEVICES)
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
    last_primary_device = dev;
    return dev;
}

// The thread's current context is asked on every call: a context can be made current behind our
// back (cudart's private driver tables), so no cache of our own could be proved right. What is
// remembered is only which device's primary context to compare it with first. Answered as a
// value: a device returned through a pointer was a stack slot, written and read back.
static inline int primary_device(const cci_real_driver *t)
{
    CUcontext cur = NULL;
    if (!t->cuCtxGetCurrent || t->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || !cur)
        return -1;
    // Masked: the compiler then knows it is an ordinal of our table (it always is), and the peek
    // needs no bounds of its own.
    _Static_assert((CCI_PL_MAX_DEVICES & (CCI_PL_MAX_DEVICES - 1)) == 0, "the mask needs a power of two");
    int d = last_primary_device & (CCI_PL_MAX_DEVICES - 1);
    if (__builtin_expect(cci_cuda_backend_primary_peek(d) == cur, 1))
        return d;
    return primary_device_search(cur);
}

// The device of the current context, whichever context it is (for cuMemGetInfo).
static int current_device(int *device)
{
    const cci_real_driver *t = cci_real_drv();
    CUdevice dev;
    if (!t->cuCtxGetDevice || t->cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return -1;
    *device = dev;
    return 0;
}

// 1 when `s` is capturing (or its state cannot be read, e.g. an invalid handle: then the real
// call must answer): a cached pointer handed out during a capture would be baked into the graph
// instead of a MEM_ALLOC node. The driver is asked only when cci_capture_ask_streams says so, as
// the runtime hooks do: captures begun through the driver or a static cudart are counted too
// (cci_pl_cu_begin_capture and its siblings), and asking on every call had cost two driver calls
// a cached cuMemAllocAsync+cuMemFreeAsync pair.
static inline __attribute__((always_inline)) int stream_capturing(const cci_real_driver *t, CUstream s, int ptsz)
{
    if (__builtin_expect(!cci_capture_ask_streams(), 1))
        return 0;
    CUresult (*is_capturing)(CUstream, CUstreamCaptureStatus *) =
        ptsz ? t->cuStreamIsCapturing_ptsz : t->cuStreamIsCapturing;
    if (!is_capturing)
        return 1;
    CUstreamCaptureStatus st = 0;
    return is_capturing(s, &st) != CUDA_SUCCESS || st != 0;
}

// The device of created stream `s` for cci_stream_device_cached: the device whose primary
// context, as we hold it, the stream belongs to. -1 for a stream of any other context (or a
// driver without cuStreamGetCtx, older than any with stream-ordered allocation).
static int ask_stream_primary_device(cudaStream_t s, int *device)
{
    const cci_real_driver *t = cci_real_drv();
    CUcontext ctx = NULL;
    if (!t->cuStreamGetCtx || t->cuStreamGetCtx((CUstream)s, &ctx) != CUDA_SUCCESS)
        return -1;
    // Every slot, not only devices with an allocator: the stream's device may have none yet.
    int d = cci_cuda_backend_primary_device(ctx, CCI_PL_MAX_DEVICES);
    if (d < 0)
        return -1;
    *device = d;
    return 0;
}

// 1 when CUDA would draw an allocation on `s` from `device`, the current context's device. A
// default stream is the current context's; a created stream allocates from "the memory pool
// current to the stream's device" (cuMemAllocAsync), which the current context need not be on:
// then the call is the driver's, never another device's memory. The stream's device is
// remembered per thread until some stream is destroyed (streams.h), as cudaMallocAsync's.
static inline int stream_on_device(CUstream s, int device)
{
    cudaStream_t rs = (cudaStream_t)s;
    if (rs == NULL || rs == cci_cudaStreamLegacy || rs == cci_cudaStreamPerThread)
        return 1;
    int sd;
    return cci_stream_device_cached(rs, &sd, ask_stream_primary_device) == 0 && sd == device;
}

// A serve answer in the driver's terms; -1: the driver's to answer.
static int driver_answer(int served, CUdeviceptr *dptr, uintptr_t addr)
{
    if (served == CCI_OK) {
        *dptr = (CUdeviceptr)addr;
        return CUDA_SUCCESS;
    }
    return served == CCI_EOOM ? CUDA_ERROR_OUT_OF_MEMORY : -1;
}

// A release answer in the driver's terms; -1: the driver's pointer, forward it.
static int driver_release_answer(int released)
{
    if (released == CCI_ENOTOURS)
        return -1;
    return released == CCI_OK ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// The real calls, for every call we do not serve. Out of line, so that the served path holds
// neither the real entry point nor the table across its call into the allocator.
// Whenever a call is served the layer is active, so the driver table was loaded with its
// REQUIRED entries (cuMemAlloc_v2, cuMemFree_v2; real.c): checking an entry only here changes
// no answer.
static __attribute__((noinline)) CUresult real_mem_alloc(CUdeviceptr *dptr, size_t size)
{
    const cci_real_driver *t = cci_real_drv();
    return t->cuMemAlloc_v2 ? t->cuMemAlloc_v2(dptr, size) : CUDA_ERROR_NOT_INITIALIZED;
}

static __attribute__((noinline)) CUresult real_mem_free(CUdeviceptr dptr)
{
    const cci_real_driver *t = cci_real_drv();
    return t->cuMemFree_v2 ? t->cuMemFree_v2(dptr) : CUDA_ERROR_NOT_INITIALIZED;
}

static __attribute__((noinline)) CUresult real_mem_alloc_async(CUdeviceptr *dptr, size_t size,
                                                              CUstream s, int ptsz)
{
    const cci_real_driver *t = cci_real_drv();
    CUresult (*real)(CUdeviceptr *, size_t, CUstream) =
        ptsz ? t->cuMemAllocAsync_ptsz : t->cuMemAllocAsync;
    return real ? real(dptr, size, s) : CUDA_ERROR_NOT_INITIALIZED;
}

static __attribute__((noinline)) CUresult real_mem_free_async(CUdeviceptr dptr, CUstream s, int ptsz)
{
    const cci_real_driver *t = cci_real_drv();
    CUresult (*real)(CUdeviceptr, CUstream) = ptsz ? t->cuMemFreeAsync_ptsz : t->cuMemFreeAsync;
    return real ? real(dptr, s) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cci_pl_cu_mem_alloc(CUdeviceptr *dptr, size_t size)
{
    int device;
    uintptr_t addr;
    // Size 0 and a NULL out-pointer keep the driver's own answers.
    if (dptr && size != 0 && driver_level() && !cci_serve_plain_alloc_passes() &&
        (device = primary_device(cci_real_drv())) >= 0) {
        int served = cci_serve_alloc(CCI_LEVEL_DRIVER, device, size, CCI_KEY_LEGACY, &addr);
        int rc = driver_answer(served, dptr, addr);
        if (rc >= 0)
            return rc;
    }
    return real_mem_alloc(dptr, size);
}

CUresult cci_pl_cu_mem_free(CUdeviceptr dptr)
{
    if (dptr && driver_level()) {
        int rc = driver_release_answer(cci_serve_release(CCI_LEVEL_DRIVER, "cuMemFree_v2",
                                                         (uintptr_t)dptr, CCI_KEY_LEGACY,
                                                         cci_serve_sync_free_mode()));
        if (rc >= 0)
            return rc;
    }
    CUresult rc = real_mem_free(dptr);
    if (rc == CUDA_SUCCESS)
        cci_serve_passed_free((uintptr_t)dptr);  // managed memory's counts (serve_shapes.h)
    return rc;
}

// The stream-ordered calls, each compiled apart for the legacy and the per-thread default stream
// (the exported functions below): `ptsz` is then a constant, so neither the flag nor what follows
// from it (the capture question's entry point, the name in a message) is kept in a register
// across the call into the allocator.
static inline __attribute__((always_inline)) CUresult mem_alloc_async(CUdeviceptr *dptr, size_t size,
                                                                      CUstream s, int ptsz)
{
    int device;
    uintptr_t addr;
    if (dptr && size != 0 && driver_level()) {
        const cci_real_driver *t = cci_real_drv();
        // A driver without stream-ordered allocation (older than CUDA 11.2) answers for itself.
        if ((ptsz ? t->cuMemAllocAsync_ptsz : t->cuMemAllocAsync) && !stream_capturing(t, s, ptsz) &&
            (device = primary_device(t)) >= 0 && stream_on_device(s, device)) {
            int served = cci_serve_alloc(CCI_LEVEL_DRIVER, device, size,
                                         cci_stream_key((cudaStream_t)s, ptsz), &addr);
            int rc = driver_answer(served, dptr, addr);
            if (rc >= 0)
                return rc;
        }
    }
    return real_mem_alloc_async(dptr, size, s, ptsz);
}

CUresult cci_pl_cu_mem_alloc_async(CUdeviceptr *dptr, size_t size, CUstream s)
{
    return mem_alloc_async(dptr, size, s, 0);
}

CUresult cci_pl_cu_mem_alloc_async_ptsz(CUdeviceptr *dptr, size_t size, CUstream s)
{
    return mem_alloc_async(dptr, size, s, 1);
}

static inline __attribute__((always_inline)) CUresult mem_free_async(CUdeviceptr dptr, CUstream s, int ptsz)
{
    const cci_real_driver *t;
    // A driver without stream-ordered allocation (older than CUDA 11.2) answers for itself.
    if (dptr && driver_level() && ((t = cci_real_drv()), ptsz ? t->cuMemFreeAsync_ptsz : t->cuMemFreeAsync)) {
        int rc = driver_release_answer(cci_serve_release(
            CCI_LEVEL_DRIVER, ptsz ? "cuMemFreeAsync_ptsz" : "cuMemFreeAsync", (uintptr_t)dptr,
            cci_stream_key((cudaStream_t)s, ptsz), cci_serve_stream_free_mode(stream_capturing(t, s, ptsz))));
        if (rc >= 0)
            return rc;
    }
    CUresult rc = real_mem_free_async(dptr, s, ptsz);
    if (rc == CUDA_SUCCESS)
        cci_serve_passed_free((uintptr_t)dptr);  // another pool's memory (serve_shapes.h)
    return rc;
}

CUresult cci_pl_cu_mem_free_async(CUdeviceptr dptr, CUstream s) { return mem_free_async(dptr, s, 0); }

CUresult cci_pl_cu_mem_free_async_ptsz(CUdeviceptr dptr, CUstream s) { return mem_free_async(dptr, s, 1); }

CUresult cci_pl_cu_mem_get_info(size_t *free_b, size_t *total_b)
{
    const cci_real_driver *t = cci_real_drv();
    if (!t->cuMemGetInfo_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = t->cuMemGetInfo_v2(free_b, total_b);
    if (rc == CUDA_SUCCESS && free_b && driver_level())
        cci_serve_mem_get_info(free_b, total_b, current_device);
    return rc;
}

CUresult cci_pl_cu_mem_get_address_range(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
    const cci_real_driver *t = cci_real_drv();
    if (!t->cuMemGetAddressRange_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || !driver_level())
        return t->cuMemGetAddressRange_v2(base, size, dptr);
    uintptr_t block = 0;
    size_t block_size = 0;
    int rc = cci_serve_block_info((uintptr_t)dptr, &block, &block_size, NULL, NULL);
    if (rc == CCI_ENOTOURS)
        return cci_pvmm_address_range(base, size, dptr) ? CUDA_SUCCESS : t->cuMemGetAddressRange_v2(base, size, dptr);
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
    const cci_real_driver *t = cci_real_drv();
    if (!t->cuIpcGetMemHandle)
        return CUDA_ERROR_NOT_INITIALIZED;
    int served = h && dptr && driver_level()
                     ? cci_serve_ipc_export(CCI_LEVEL_DRIVER, "cuIpcGetMemHandle", (uintptr_t)dptr, h)
                     : CCI_ENOTOURS;
    return served == CCI_OK ? CUDA_SUCCESS : served == CCI_EINVAL ? CUDA_ERROR_INVALID_VALUE : t->cuIpcGetMemHandle(h, dptr);
}

// Both ABI spellings (`v2` says which real function forwards); our handles are opened whatever
// the levels, on the device of the current context, as CUDA maps an import into it.
CUresult cci_pl_cu_ipc_open_mem_handle(CUdeviceptr *dptr, CUipcMemHandle h, unsigned flags, int v2)
{
    const cci_real_driver *t = cci_real_drv();
    CUdevice dev = -1;
    uintptr_t addr = 0;
    int why = 0, served = CCI_ENOTOURS;
    if (dptr && t->cuCtxGetDevice) {
        if (t->cuCtxGetDevice(&dev) == CUDA_SUCCESS)
            served = cci_serve_ipc_open(v2 ? "cuIpcOpenMemHandle_v2" : "cuIpcOpenMemHandle", &h, dev, &addr, &why);
        else if (cci_serve_ipc_is_ours(&h))
            return CUDA_ERROR_INVALID_CONTEXT;  // ours, but no context to map it into
    }
    if (served == CCI_OK) {
        *dptr = (CUdeviceptr)addr;
        return CUDA_SUCCESS;
    }
    if (served == CCI_EINVAL)
        return why == CCI_IPC_OPEN_BAD_HANDLE   ? CUDA_ERROR_INVALID_HANDLE
               : why == CCI_IPC_OPEN_NO_MEMORY  ? CUDA_ERROR_OUT_OF_MEMORY
               : why == CCI_IPC_OPEN_OWN_HANDLE ? CUDA_ERROR_INVALID_CONTEXT
                                                : CUDA_ERROR_MAP_FAILED;
    CUresult (*real)(CUdeviceptr *, CUipcMemHandle, unsigned) = v2 ? t->cuIpcOpenMemHandle_v2 : t->cuIpcOpenMemHandle;
    return real ? real(dptr, h, flags) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cci_pl_cu_ipc_close_mem_handle(CUdeviceptr dptr)
{
    if (dptr && cci_serve_ipc_close((uintptr_t)dptr) == CCI_OK)
        return CUDA_SUCCESS;
    const cci_real_driver *t = cci_real_drv();
    return t->cuIpcCloseMemHandle ? t->cuIpcCloseMemHandle(dptr) : CUDA_ERROR_NOT_INITIALIZED;
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
    const cci_real_driver *t = cci_real_drv();
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
    const cci_real_driver *t = cci_real_drv();
    CUresult (*real)(CUcontext) = v2 ? t->cuCtxDestroy_v2 : t->cuCtxDestroy;
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    // Only the primary context holds our segments; destroying any other leaves the pools alone.
    int d;
    if (ctx && teardown_applies() && (d = cci_cuda_backend_primary_device(ctx, cci_state_device_bound())) >= 0)
        cci_state_drop_device(d);
    return real(ctx);
}

// ---- streams and peer access: observed for the stream rule ------ ----------------------
// Not gated by the levels or the layer's state: the registry must know every stream the program
// ever created, from its first call on. A runtime hook that is forwarding already did this.

static int ctx_device(const cci_real_driver *t)
{
    CUdevice dev = 0;
    if (!t->cuCtxGetDevice || t->cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return 0;
    return dev;
}

CUresult cci_pl_cu_stream_create(CUstream *s, unsigned flags, int priority, int with_priority)
{
    const cci_real_driver *t = cci_real_drv();
    if (with_priority ? !t->cuStreamCreateWithPriority : !t->cuStreamCreate)
        return CUDA_ERROR_NOT_INITIALIZED;
    int observe = !cci_pl_forwarding();
    // Before the stream exists: blocks freed at once until now must have no work left
    // (stream_rule.h, the switch), and no return to ordered until it is registered.
    if (observe)
        cci_rule_stream_create_begin(flags);
    CUresult rc = with_priority ? t->cuStreamCreateWithPriority(s, flags, priority)
                                : t->cuStreamCreate(s, flags);
    if (observe && rc == CUDA_SUCCESS && s)
        cci_cuda_stream_created(*s, ctx_device(t), flags);
    if (observe)
        cci_rule_stream_create_end(flags);
    return rc;
}

CUresult cci_pl_cu_stream_destroy(CUstream s, int v2)
{
    const cci_real_driver *t = cci_real_drv();
    CUresult (*real)(CUstream) = v2 ? t->cuStreamDestroy_v2 : t->cuStreamDestroy;
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    // Its last work stays covered by every fence until it has run (cuda/fence_retired.c).
    if (!cci_pl_forwarding())
        cci_cuda_stream_destroyed(s);
    return real(s);
}

// A capture begun through the driver (a static cudart, a program on the driver API) is counted
// as one begun through the runtime: before it begins, inside the capture gate, so that nothing
// of ours asks the capturing stream (a question to it breaks the capture). A runtime hook that
// is forwarding has counted it already. Every begin (plain or into a graph) is counted by the
// same two steps: capture_counted before its real call, capture_begun with the call's answer.
static int capture_counted(void)
{
    if (cci_pl_forwarding())
        return 0;
    cci_rule_capture_begins();
    return 1;
}

static CUresult capture_begun(int counted, CUresult rc)
{
    if (counted && rc != CUDA_SUCCESS)
        cci_capture_begin_failed();
    return rc;
}

CUresult cci_pl_cu_begin_capture(CUstream s, CUstreamCaptureMode mode, int ptsz)
{
    const cci_real_driver *t = cci_real_drv();
    CUresult (*real)(CUstream, CUstreamCaptureMode) = ptsz ? t->cuStreamBeginCapture_v2_ptsz
                                                           : t->cuStreamBeginCapture_v2;
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    int counted = capture_counted();
    return capture_begun(counted, real(s, mode));
}

CUresult cci_pl_cu_begin_capture_v1(CUstream s, int ptsz)
{
    const cci_real_driver *t = cci_real_drv();
    CUresult (*real)(CUstream) = ptsz ? t->cuStreamBeginCapture_ptsz : t->cuStreamBeginCapture;
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    int counted = capture_counted();
    return capture_begun(counted, real(s));
}

CUresult cci_pl_cu_begin_capture_to_graph(CUstream s, CUgraph g, const CUgraphNode *deps,
                                          const CUgraphEdgeData *edata, size_t ndeps,
                                          CUstreamCaptureMode mode, int ptsz)
{
    const cci_real_driver *t = cci_real_drv();
    CUresult (*real)(CUstream, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t,
                     CUstreamCaptureMode) = ptsz ? t->cuStreamBeginCaptureToGraph_ptsz
                                                 : t->cuStreamBeginCaptureToGraph;
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    int counted = capture_counted();
    return capture_begun(counted, real(s, g, deps, edata, ndeps, mode));
}

CUresult cci_pl_cu_end_capture(CUstream s, CUgraph *g, int ptsz)
{
    const cci_real_driver *t = cci_real_drv();
    CUresult (*real)(CUstream, CUgraph *) = ptsz ? t->cuStreamEndCapture_ptsz : t->cuStreamEndCapture;
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (cci_pl_forwarding())
        return real(s, g);
    // As the runtime's end (intercept/streams.c): the stream's state before and after says whether a
    // capture ended, not the return code.
    int was = cci_stream_driver_capturing(s, ptsz) == 1;
    CUresult rc = real(s, g);
    if (was && cci_stream_driver_capturing(s, ptsz) != 1)
        cci_capture_ended();
    return rc;
}

CUresult cci_pl_cu_ctx_enable_peer_access(CUcontext peer, unsigned flags)
{
    const cci_real_driver *t = cci_real_drv();
    if (!t->cuCtxEnablePeerAccess)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (cci_pl_forwarding())
        return t->cuCtxEnablePeerAccess(peer, flags);
    cci_rule_switch(CCI_RULE_PEER_ACCESS);
    CUresult rc = t->cuCtxEnablePeerAccess(peer, flags);
    // The current context's device may now touch the peer context's memory.
    CUdevice dev, pdev;
    CUcontext popped;
    if (rc == CUDA_SUCCESS && t->cuCtxGetDevice && t->cuCtxGetDevice(&dev) == CUDA_SUCCESS &&
        t->cuCtxPushCurrent_v2(peer) == CUDA_SUCCESS) {
        CUresult r = t->cuCtxGetDevice(&pdev);
        t->cuCtxPopCurrent_v2(&popped);
        if (r == CUDA_SUCCESS)
            cci_serve_peer_enabled((int)dev, (int)pdev);
    }
    return rc;
}

int cci_pl_driver_stream_device(CUstream s)
{
    cudaStream_t rs = (cudaStream_t)s;
    int device;
    if (rs == NULL || rs == cci_cudaStreamLegacy || rs == cci_cudaStreamPerThread)
        return primary_device(cci_real_drv());
    return cci_stream_device_cached(rs, &device, ask_stream_primary_device) == 0 ? device : -1;
}
