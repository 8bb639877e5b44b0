// SPDX-License-Identifier: MIT
// Pitched and 3-D allocations at both API levels: arguments checked as CUDA checks them, the
// pitch from the serving layer (serve_shapes.h), the block from the plain allocation path.
#ifndef CCI_PRELOAD_INTERCEPT_SHAPES_H
#define CCI_PRELOAD_INTERCEPT_SHAPES_H

#include "cuda_abi.h"

cudaError_t cci_pl_malloc_pitch(void **p, size_t *pitch, size_t width, size_t height);
cudaError_t cci_pl_malloc_3d(struct cudaPitchedPtr *pp, struct cudaExtent extent);
CUresult cci_pl_cu_mem_alloc_pitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                   unsigned element_size);

/// Managed memory: always CUDA's, counted when it succeeds.
cudaError_t cci_pl_malloc_managed(void **p, size_t size, unsigned flags);
CUresult cci_pl_cu_mem_alloc_managed(CUdeviceptr *dptr, size_t size, unsigned flags);

/// Allocations from a memory pool: the device's default pool is served like cudaMallocAsync,
/// any other pool's are CUDA's and counted.
cudaError_t cci_pl_malloc_from_pool_async(void **p, size_t size, cudaMemPool_t pool, cudaStream_t s);
/// The device's default pool as CUDA describes it, with what we serve in its place: its reserved
/// and used figures and their peaks include ours, a reset of a peak resets ours, and trimming it
/// to nothing empties our cache (PyTorch's stream-ordered backend: memory_stats, reset_peak_
/// memory_stats, empty_cache). Other pools, and every other attribute, are CUDA's alone.
CUresult cci_pl_cu_mem_pool_get_attribute(CUmemoryPool pool, int attr, void *value);
CUresult cci_pl_cu_mem_pool_set_attribute(CUmemoryPool pool, int attr, void *value);
CUresult cci_pl_cu_mem_pool_trim_to(CUmemoryPool pool, size_t keep);
CUresult cci_pl_cu_mem_alloc_from_pool_async(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s,
                                             int ptsz);

#endif
