// SPDX-License-Identifier: MIT
// The pinned host cache's real calls, at the API level a call came from (host_cache.c): pinning
// (allocated, or malloc + register), giving back, and the questions passed on. Each answers the
// level's code (0 success; cudaError_t and CUresult agree on 2, out of memory, and 3, no runtime
// or driver). A runtime call is made marked as forwarding, so the driver call the runtime makes
// on its way down passes our driver wrappers untouched.
#ifndef CCI_PRELOAD_HOST_CACHE_REAL_H
#define CCI_PRELOAD_HOST_CACHE_REAL_H

#include <stddef.h>

/// Pins `size` bytes with cudaHostAlloc / cuMemHostAlloc and `flags`.
int cci_host_real_alloc(int level, void **ptr, size_t size, unsigned flags);
/// Pins `size` bytes of a mapping of our own with cudaHostRegister / cuMemHostRegister_v2
/// (portable and mapped as asked), its pages first faulted in by up to `threads` threads.
int cci_host_real_register(int level, void **ptr, size_t size, unsigned flags, unsigned threads);
/// Gives a pinned buffer of `size` bytes back (`registered`: unregistered, then unmapped), in
/// `device`'s primary context at the driver level (the exit, cci_empty_cache: any thread).
void cci_host_real_free(int level, int device, void *ptr, size_t size, int registered);
/// The current context's device, 0 when none can be told.
int cci_host_current_device(void);

/// The program's call passed on as it was made (not served): `plain` is cudaMallocHost /
/// cuMemAllocHost_v2 (flags ignored).
int cci_host_real_pass_alloc(int level, void **ptr, size_t size, unsigned flags, int plain);
int cci_host_real_pass_free(int level, void *ptr);
int cci_host_real_get_flags(int level, unsigned *flags, void *ptr);
int cci_host_real_get_device_pointer(int level, void **dptr, void *ptr, unsigned flags);

#endif
