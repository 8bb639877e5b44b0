// SPDX-License-Identifier: MIT
// The devices' primary contexts, the scope around each driver call of ours, and plain segments
// (cuMemAlloc_v2 / cuMemFree_v2).
#ifndef CCI_PRELOAD_CUDA_CONTEXT_H
#define CCI_PRELOAD_CUDA_CONTEXT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_abi.h"

/// Devices we manage; a program's device ordinal at or above this passes through.
#define CCI_PL_MAX_DEVICES 64

/// Calls cuInit. 0, or -1 after one error line (the driver table must be loaded).
int cci_cuda_backend_init(void);
/// The primary context of `device` that our segments live in: the one the backend holds, or
/// with `retain` = 1 retained now if it holds none yet. NULL when there is none.
/// How many devices' primary contexts we hold now (a moment's figure, no lock).
unsigned cci_cuda_backend_primaries(void);
CUcontext cci_cuda_backend_primary(int device, int retain);
/// The same without retaining, inline for the hooks' fast path: the context the backend holds
/// for `device` (an ordinal below CCI_PL_MAX_DEVICES), NULL when none.
extern _Atomic(CUcontext) cci__primary[CCI_PL_MAX_DEVICES];
static inline CUcontext cci_cuda_backend_primary_peek(int device)
{
    return atomic_load_explicit(&cci__primary[(unsigned)device % CCI_PL_MAX_DEVICES], memory_order_acquire);
}
/// The device below `bound` whose primary context, as the backend holds it, is `ctx`; -1 when
/// none (another context, or a primary context not retained by us).
int cci_cuda_backend_primary_device(CUcontext ctx, int bound);
/// Gives back our hold on the device's primary context (before a reset), so that the next use
/// retains the context the reset leaves behind.
void cci_cuda_context_drop(int device);
/// In a fork child: forget the parent's contexts without driver calls.
void cci_cuda_context_atfork_child(void);

/// Around a driver call of the backend's (segments, fences, VMM): the device's primary context
/// pushed, and the thread's capture mode relaxed while a capture may be underway.
typedef struct cci_driver_scope {
    int relaxed;               // we switched this thread's capture mode
    int pushed;                // we pushed the primary context (it was not current already)
    CUstreamCaptureMode saved;
} cci_driver_scope;
/// 0 with the context pushed (then call cci_cuda_leave), or -1 when there is no context.
int cci_cuda_enter(int device, cci_driver_scope *sc);
void cci_cuda_leave(cci_driver_scope *sc);

/// The device contract's plain operations (src/core/backend.h): reserve and release a segment,
/// the device's capacity, a device-wide synchronisation (refused while a capture may run).
int cci_cuda_segment_reserve(void *ctx, int device, size_t size, uintptr_t *addr);
int cci_cuda_segment_release(void *ctx, int device, uintptr_t addr, size_t size);
size_t cci_cuda_capacity(void *ctx, int device);
/// The driver's free bytes on the device (cuMemGetInfo_v2), SIZE_MAX when it cannot tell.
size_t cci_cuda_available(void *ctx, int device);
int cci_cuda_synchronize(void *ctx, int device);

#endif
