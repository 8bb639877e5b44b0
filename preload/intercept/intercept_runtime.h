// SPDX-License-Identifier: MIT
// The runtime level: what the runtime hooks (hooks_runtime.c) do. The `_ptsz` functions serve the
// per-thread-default-stream entry points.
#ifndef CCI_PRELOAD_INTERCEPT_RUNTIME_H
#define CCI_PRELOAD_INTERCEPT_RUNTIME_H

#include <stddef.h>

#include "cuda_abi.h"

cudaError_t cci_pl_malloc(void **p, size_t size);
/// The device whose pool an allocation on `s` draws from (as cudaMallocAsync finds it), or -1.
int cci_pl_runtime_stream_device(cudaStream_t s);
/// The runtime's current device as cudaMalloc finds it (no cudart call on a machine with one
/// device, the context's device otherwise); -1 when it cannot be told.
int cci_pl_runtime_current_device(void);
cudaError_t cci_pl_free(void *p);
cudaError_t cci_pl_malloc_async(void **p, size_t size, cudaStream_t s);
cudaError_t cci_pl_malloc_async_ptsz(void **p, size_t size, cudaStream_t s);
cudaError_t cci_pl_free_async(void *p, cudaStream_t s);
cudaError_t cci_pl_free_async_ptsz(void *p, cudaStream_t s);
cudaError_t cci_pl_mem_get_info(size_t *free_b, size_t *total_b);
cudaError_t cci_pl_device_reset(void);
cudaError_t cci_pl_ipc_get_mem_handle(cudaIpcMemHandle_t *h, void *p);
cudaError_t cci_pl_ipc_open_mem_handle(void **p, cudaIpcMemHandle_t h, unsigned flags);
cudaError_t cci_pl_ipc_close_mem_handle(void *p);

/// Streams and peer access, observed for the stream rule (stream_rule.h). `which` says
/// which creation entry point the program called.
enum { CCI_STREAM_CREATE_PLAIN, CCI_STREAM_CREATE_FLAGS, CCI_STREAM_CREATE_PRIORITY };
cudaError_t cci_pl_stream_create(cudaStream_t *s, unsigned flags, int priority, int which);
cudaError_t cci_pl_stream_destroy(cudaStream_t s);
cudaError_t cci_pl_device_enable_peer_access(int peer, unsigned flags);

/// A fork child: the runtime's current device is asked again (CUDA may not work in the child).
void cci_pl_runtime_atfork_child(void);

#endif
