// SPDX-License-Identifier: MIT
// The core's device backend over the CUDA driver API: the operations table the allocators get
// (plain segments, fences, VMM segments), and the device-wide steps around a reset and a fork.
#ifndef CCI_PRELOAD_BACKEND_CUDA_H
#define CCI_PRELOAD_BACKEND_CUDA_H

#include "backend.h"
#include "cuda_context.h"

/// The backend handed to cci_allocator_create. Every operation works from any thread, with or
/// without a current context: it pushes the device's primary context around its driver calls.
cci_backend cci_cuda_backend(void);
/// Before cudaDeviceReset: the device's streams, events and VMM pages are forgotten or given
/// back, then our hold on its primary context, so that the next use retains the context the
/// reset leaves behind.
void cci_cuda_backend_drop_device(int device);
/// In a fork child: forget the parent's contexts and pages without driver calls.
void cci_cuda_backend_atfork_child(void);

/// A stream the program created (runtime or driver), before the program has its handle: context
/// fences check its context, the registry records it, and a non-blocking stream created after a
/// barrier or an order was granted waits for the legacy stream's earlier work (fence.h).
void cci_cuda_stream_created(CUstream s, int device, unsigned flags);
/// The program is about to destroy `s`: it leaves the registry, its last work stays covered by
/// a retired event (fence.h).
void cci_cuda_stream_destroyed(CUstream s);

#endif
