// SPDX-License-Identifier: MIT
// What the runtime hooks do. `ptsz` = 1 for the per-thread-default-stream entry points.
#ifndef CCI_PRELOAD_INTERCEPT_H
#define CCI_PRELOAD_INTERCEPT_H

#include <stdint.h>

#include "allocator.h"
#include "cuda_abi.h"

// ---- shared by the runtime and the driver level ----------------------------------------------
// One allocator per device behind both levels: what one level allocated, the other can free.

/// Serves `size` bytes on `device` for `stream` and counts it for `level` (CCI_LEVEL_*).
/// CCI_OK and *addr; CCI_EOOM (one info line, the cache already flushed); anything else means
/// the caller passes the call to CUDA (no allocator for the device, or a device failure other
/// than out-of-memory, which CUDA then reports with its own code).
int cci_pl_serve(int level, int device, size_t size, uint64_t stream, uintptr_t *addr);
/// Frees `p` in whichever allocator owns it: CCI_OK, CCI_EINVAL, CCI_ENOTOURS (as cci_free).
int cci_pl_release(uintptr_t p, uint64_t stream, cci_free_mode mode);
/// Looks `p` up in every allocator (as cci_block_info; outputs may be NULL).
int cci_pl_block_info(uintptr_t p, uintptr_t *block, size_t *block_size, uintptr_t *segment,
                      size_t *segment_size);
/// The mode of a free that waits for the device in CUDA (cudaFree, cuMemFree): deferred to the
/// next batched synchronisation, unless the program opted into immediate reuse.
cci_free_mode cci_pl_sync_free_mode(void);

// ---- the runtime hooks -------------------------------------------------------------------------
cudaError_t cci_pl_malloc(void **p, size_t size);
cudaError_t cci_pl_free(void *p);
cudaError_t cci_pl_malloc_async(void **p, size_t size, cudaStream_t s, int ptsz);
cudaError_t cci_pl_free_async(void *p, cudaStream_t s, int ptsz);
cudaError_t cci_pl_mem_get_info(size_t *free_b, size_t *total_b);
cudaError_t cci_pl_device_reset(void);
cudaError_t cci_pl_ipc_get_mem_handle(cudaIpcMemHandle_t *h, void *p);

#endif
