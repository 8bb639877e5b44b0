// SPDX-License-Identifier: MIT
// The pinned host cache: cudaHostAlloc, cudaMallocHost, cuMemHostAlloc and cuMemAllocHost_v2
// served from freed pinned buffers, with PyTorch's pinned allocator's rules (power-of-two size
// classes, a buffer of one class reused for the same flags only) and the pinned_* keys.
//
// Safety: we cannot see which streams read or write a host buffer, so every free records a fence
// over every stream of every device (cuda/fence.h) and the buffer is handed out again only once
// that fence has PASSED. Never by ordering on the GPU (a barrier, an order): the next owner writes
// host memory with the CPU, which no stream order holds back.
//
// Every call takes the API level it came from (CCI_LEVEL_RUNTIME or CCI_LEVEL_DRIVER) and
// answers in that level's codes (cudaError_t or CUresult: 0 is success in both, 2 is out of
// memory in both). A call not served (the level off, the cache off, a nested call of the
// runtime's) goes to the real function of that level.
#ifndef CCI_PRELOAD_HOST_CACHE_H
#define CCI_PRELOAD_HOST_CACHE_H

#include <stddef.h>

#include "ccinterpose.h"
#include "settings.h"

/// cudaHostAlloc's flags, the same bits as cuMemHostAlloc's.
enum {
    CCI_HOST_ALLOC_PORTABLE = 0x1,
    CCI_HOST_ALLOC_MAPPED = 0x2,
    CCI_HOST_ALLOC_WRITE_COMBINED = 0x4,
    CCI_HOST_ALLOC_FLAGS = 0x7,
};

/// At start-up, once the configuration is decided (the layer active): reads the pinned_* keys
/// and CCI_PINNED_CACHE.
void cci_host_cache_start(const cci_settings *s);

/// The four allocation calls: `plain` for cudaMallocHost and cuMemAllocHost_v2 (flags 0, and
/// passed on as those calls when not served).
int cci_host_cache_alloc(int level, void **ptr, size_t size, unsigned flags, int plain);
/// cudaFreeHost / cuMemFreeHost.
int cci_host_cache_free(int level, void *ptr);
/// cudaHostGetFlags / cuMemHostGetFlags: a buffer carved from the reserve segment is answered
/// from the segment, a registered one from the flags it was asked with.
int cci_host_cache_get_flags(int level, unsigned *flags, void *ptr);
/// cudaHostGetDevicePointer / cuMemHostGetDevicePointer_v2 (device pointers as addresses).
int cci_host_cache_get_device_pointer(int level, void **dptr, void *ptr, unsigned flags);

/// Before `device`'s primary context is reset or destroyed (serve/state.c): the pinned memory
/// allocated in it goes with it, so its cached buffers are forgotten (no CUDA call) and the ones
/// the program holds are never cached again.
void cci_host_cache_drop_device(int device);
/// Gives every cached buffer whose fence has passed back to CUDA (cci_empty_cache).
void cci_host_cache_empty(void);
/// The pinned_* fields of *out (process-wide: every device reports the same).
void cci_host_cache_stats(cci_stats *out);
/// 1 once a pinned allocation was served (the exit report is then printed).
int cci_host_cache_used(void);

#endif
