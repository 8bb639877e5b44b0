// SPDX-License-Identifier: MIT
// Streams as the core sees them (uint64 keys), the device of a program's stream, and the
// runtime's capture entry points, counted on their way to CUDA.
#ifndef CCI_PRELOAD_STREAMS_H
#define CCI_PRELOAD_STREAMS_H

#include "export.h"
#include <stdatomic.h>
#include <stdint.h>

#include "captures.h"
#include "stream_registry.h"

/// The legacy default stream's key.
#define CCI_KEY_LEGACY 0

/// The core's key for `s`. `ptsz` says which default stream 0 means: the legacy one for the plain
/// entry points, the calling thread's own for the _ptsz ones (each thread gets a key of its own).
/// Inline: every stream-ordered call asks it.
extern _Thread_local uint64_t cci__thread_key __attribute__((tls_model("initial-exec")));
uint64_t cci__stream_key_per_thread(void);
static inline uint64_t cci_stream_key(cudaStream_t s, int ptsz)
{
    if (s == cci_cudaStreamLegacy || (s == NULL && !ptsz))
        return CCI_KEY_LEGACY;
    if (__builtin_expect(s != NULL && s != cci_cudaStreamPerThread, 1))
        return (uint64_t)(uintptr_t)s;
    uint64_t k = cci__thread_key;
    return __builtin_expect(k != 0, 1) ? k : cci__stream_key_per_thread();
}

/// 1 when `s` is capturing (active or invalidated) according to the real runtime.
int cci_stream_capturing(cudaStream_t s, int ptsz);

/// Forwarders for the capture entry points that keep cci__captures up to date.
cudaError_t cci_pl_begin_capture(cudaStream_t s, cudaStreamCaptureMode m, int ptsz);
cudaError_t cci_pl_begin_capture_to_graph(cudaStream_t s, cudaGraph_t g,
                                          const cudaGraphNode_t *deps,
                                          const cudaGraphEdgeData *edata, size_t ndeps,
                                          cudaStreamCaptureMode m, int ptsz);
cudaError_t cci_pl_end_capture(cudaStream_t s, cudaGraph_t *g, int ptsz);

/// The device of stream `s` (not a default stream), remembered per thread: asked of `ask` (a
/// CUDA call) the first time a thread meets the stream, and again only after some stream was
/// destroyed (a handle may then come back for a stream of another device). 0 or -1 as `ask`.
/// Inline for the thread's last stream (every same-stream cudaMallocAsync); the others
/// in streams.c.
typedef struct cci_stream_seen {
    cudaStream_t s;
    int device;
    uint64_t generation;  // of stream destruction, + 1 (0: an empty entry)
} cci_stream_seen;
extern _Thread_local cci_stream_seen cci__stream_last __attribute__((tls_model("initial-exec")));
int cci__stream_device_lookup(cudaStream_t s, int *device, int (*ask)(cudaStream_t s, int *device));
static inline int cci_stream_device_cached(cudaStream_t s, int *device, int (*ask)(cudaStream_t s, int *device))
{
    uint64_t gen = atomic_load_explicit(&cci__stream_generation, memory_order_acquire) + 1;
    if (__builtin_expect(cci__stream_last.s == s && cci__stream_last.generation == gen, 1)) {
        *device = cci__stream_last.device;
        return 0;
    }
    return cci__stream_device_lookup(s, device, ask);
}
#endif
