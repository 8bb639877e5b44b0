// SPDX-License-Identifier: MIT
// The CUDA driver entry points we interpose: forwarders only, the logic is in intercept_driver.c.
// Reached three ways: through our cuGetProcAddress (resolver.c) by every cudart copy, through our
// dlsym (dlsym_hook.c) when a cudart or library looks them up by name, and directly by programs
// linked against libcuda (exported unversioned, libccinterpose.map). The resolvers themselves are
// in resolver.c.
#include "hooks_driver.h"

#include "intercept_driver.h"

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    return cci_pl_cu_mem_alloc(dptr, size);
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    return cci_pl_cu_mem_free(dptr);
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s)
{
    return cci_pl_cu_mem_alloc_async(dptr, size, s);
}

// What the driver hands out for "cuMemAllocAsync" under the per-thread-default-stream flag: the
// NULL stream is then the calling thread's own default stream.
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream s)
{
    return cci_pl_cu_mem_alloc_async_ptsz(dptr, size, s);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
    return cci_pl_cu_mem_free_async(dptr, s);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
    return cci_pl_cu_mem_free_async_ptsz(dptr, s);
}

CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
    return cci_pl_cu_mem_get_info(free_b, total_b);
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
    return cci_pl_cu_mem_get_address_range(base, size, dptr);
}

CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dptr)
{
    return cci_pl_cu_ipc_get_mem_handle(h, dptr);
}

CUresult cuIpcOpenMemHandle(CUdeviceptr *dptr, CUipcMemHandle h, unsigned flags)
{
    return cci_pl_cu_ipc_open_mem_handle(dptr, h, flags, 0);
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle h, unsigned flags)
{
    return cci_pl_cu_ipc_open_mem_handle(dptr, h, flags, 1);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    return cci_pl_cu_ipc_close_mem_handle(dptr);
}

// Teardown: both ABI spellings, each forwarding to its own real function.
CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return cci_pl_cu_primary_ctx_reset(dev, 0);
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    return cci_pl_cu_primary_ctx_reset(dev, 1);
}

CUresult cuCtxDestroy(CUcontext ctx)
{
    return cci_pl_cu_ctx_destroy(ctx, 0);
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    return cci_pl_cu_ctx_destroy(ctx, 1);
}

// Streams and peer access: observed for the stream rule, then forwarded (intercept_driver.c).
CUresult cuStreamCreate(CUstream *s, unsigned flags)
{
    return cci_pl_cu_stream_create(s, flags, 0, 0);
}

CUresult cuStreamCreateWithPriority(CUstream *s, unsigned flags, int prio)
{
    return cci_pl_cu_stream_create(s, flags, prio, 1);
}

CUresult cuStreamDestroy(CUstream s)
{
    return cci_pl_cu_stream_destroy(s, 0);
}

CUresult cuStreamDestroy_v2(CUstream s)
{
    return cci_pl_cu_stream_destroy(s, 1);
}

// Captures: counted, so that nothing of ours asks a capturing stream (cuda/captures.h). The first ABI
// (CUDA 10.0, no mode: global) is what cuGetProcAddress hands a caller asking for version 10000.
CUresult cuStreamBeginCapture(CUstream s)
{
    return cci_pl_cu_begin_capture_v1(s, 0);
}

CUresult cuStreamBeginCapture_ptsz(CUstream s)
{
    return cci_pl_cu_begin_capture_v1(s, 1);
}

CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
    return cci_pl_cu_begin_capture(s, mode, 0);
}

CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode)
{
    return cci_pl_cu_begin_capture(s, mode, 1);
}

// Into an existing graph (CUDA 12.3; XLA's command buffers): counted like the begin above.
CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps,
                                     const CUgraphEdgeData *edata, size_t ndeps, CUstreamCaptureMode mode)
{
    return cci_pl_cu_begin_capture_to_graph(s, g, deps, edata, ndeps, mode, 0);
}

CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps,
                                          const CUgraphEdgeData *edata, size_t ndeps,
                                          CUstreamCaptureMode mode)
{
    return cci_pl_cu_begin_capture_to_graph(s, g, deps, edata, ndeps, mode, 1);
}

CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
    return cci_pl_cu_end_capture(s, g, 0);
}

CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g)
{
    return cci_pl_cu_end_capture(s, g, 1);
}

CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned flags)
{
    return cci_pl_cu_ctx_enable_peer_access(peer, flags);
}
