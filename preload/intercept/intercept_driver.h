// SPDX-License-Identifier: MIT
// What the driver-level wrappers do. `ptsz` = 1 for the per-thread-default-stream entry points,
// `v2` = 1 for the _v2 spelling of a teardown call.
#ifndef CCI_PRELOAD_INTERCEPT_DRIVER_H
#define CCI_PRELOAD_INTERCEPT_DRIVER_H

#include "cuda_abi.h"

CUresult cci_pl_cu_mem_alloc(CUdeviceptr *dptr, size_t size);
/// The device of `s` (a default stream: the current context's, if it is a primary one), or -1.
int cci_pl_driver_stream_device(CUstream s);
CUresult cci_pl_cu_mem_free(CUdeviceptr dptr);
CUresult cci_pl_cu_mem_alloc_async(CUdeviceptr *dptr, size_t size, CUstream s);
CUresult cci_pl_cu_mem_alloc_async_ptsz(CUdeviceptr *dptr, size_t size, CUstream s);
CUresult cci_pl_cu_mem_free_async(CUdeviceptr dptr, CUstream s);
CUresult cci_pl_cu_mem_free_async_ptsz(CUdeviceptr dptr, CUstream s);
CUresult cci_pl_cu_mem_get_info(size_t *free_b, size_t *total_b);
CUresult cci_pl_cu_mem_get_address_range(CUdeviceptr *base, size_t *size, CUdeviceptr dptr);
CUresult cci_pl_cu_ipc_get_mem_handle(CUipcMemHandle *h, CUdeviceptr dptr);
CUresult cci_pl_cu_ipc_open_mem_handle(CUdeviceptr *dptr, CUipcMemHandle h, unsigned flags, int v2);
CUresult cci_pl_cu_ipc_close_mem_handle(CUdeviceptr dptr);
CUresult cci_pl_cu_primary_ctx_reset(CUdevice dev, int v2);
CUresult cci_pl_cu_ctx_destroy(CUcontext ctx, int v2);
/// Streams and peer access, observed for the stream rule (stream_rule.h).
CUresult cci_pl_cu_stream_create(CUstream *s, unsigned flags, int priority, int with_priority);
CUresult cci_pl_cu_stream_destroy(CUstream s, int v2);
/// Captures begun and ended through the driver, counted as the runtime's are (cuda/captures.h).
CUresult cci_pl_cu_begin_capture(CUstream s, CUstreamCaptureMode mode, int ptsz);
CUresult cci_pl_cu_begin_capture_v1(CUstream s, int ptsz);
CUresult cci_pl_cu_begin_capture_to_graph(CUstream s, CUgraph g, const CUgraphNode *deps,
                                          const CUgraphEdgeData *edata, size_t ndeps,
                                          CUstreamCaptureMode mode, int ptsz);
CUresult cci_pl_cu_end_capture(CUstream s, CUgraph *g, int ptsz);
CUresult cci_pl_cu_ctx_enable_peer_access(CUcontext peer, unsigned flags);

#endif
