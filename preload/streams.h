// SPDX-License-Identifier: MIT
// Streams as the core sees them (uint64 keys), and whether a graph capture may be underway.
#ifndef CCI_PRELOAD_STREAMS_H
#define CCI_PRELOAD_STREAMS_H

#include "export.h"
#include <stdatomic.h>
#include <stdint.h>

#include "cuda_abi.h"

/// The legacy default stream's key.
#define CCI_KEY_LEGACY 0

/// The core's key for `s`. `ptsz` says which default stream 0 means: the legacy one for the plain
/// entry points, the calling thread's own for the _ptsz ones (each thread gets a key of its own).
/// Inline: every stream-ordered call asks it (issue 15).
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

/// Captures begun (through the runtime or the driver's cuStreamBeginCapture[ToGraph]) and not
/// ended yet, in any thread; counted before they begin.
extern _Atomic int cci__captures CCI_HIDDEN;

/// Cheap test for the fast path: 0 means no counted capture is underway, so no stream needs
/// asking. A capture begun behind our back (a begin we do not wrap, such as CUDA 13.3's
/// cuStreamBeginRecaptureToGraph) is not seen here; the backend then finds out from the driver's
/// own refusal.
static inline int cci_capture_maybe_active(void)
{
    return atomic_load_explicit(&cci__captures, memory_order_relaxed) > 0;
}

/// Set at start-up (cci_capture_note_driver): 1 when the driver is newer than the newest whose
/// capture begins we all count (CUDA 13.0), so a capture may be underway that no count shows.
extern _Atomic int cci__capture_unseen_possible CCI_HIDDEN;

/// Whether a stream-ordered allocation or free must ask its stream whether it captures: while a
/// counted capture is underway, and on every call with a driver newer than the begins we know
/// (CUDA 13.3 added cuStreamBeginRecaptureToGraph, which we do not count). A cached pointer
/// handed out during a capture would be baked into the graph instead of a MEM_ALLOC node.
static inline int cci_capture_ask_streams(void)
{
    return cci_capture_maybe_active() ||
           atomic_load_explicit(&cci__capture_unseen_possible, memory_order_relaxed);
}

/// At start-up, once the driver is loaded: decides cci__capture_unseen_possible.
void cci_capture_note_driver(void);

/// The capture gate (streams.c), for a thread of ours that asks the program's streams in the
/// background: 1 with the gate held and no counted capture underway (none can begin until
/// cci_capture_gate_leave), 0 (gate not held) while one may be.
int cci_capture_gate_enter(void);
void cci_capture_gate_leave(void);
/// For the capture hooks of both levels: a capture about to begin (the rule switches, then it is
/// counted inside the gate), a begin that failed (taken back), a capture that ended.
void cci_capture_begins(void);
void cci_capture_begin_failed(void);
void cci_capture_ended(void);

/// What the driver says of `s` (`ptsz`: the per-thread entry point): 1 capturing (active or
/// invalidated), 0 not capturing, -1 it could not say. Allowed on a capturing stream.
int cci_stream_driver_capturing(CUstream s, int ptsz);

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
/// Inline for the thread's last stream (every same-stream cudaMallocAsync, issue 15); the others
/// in streams.c.
typedef struct cci_stream_seen {
    cudaStream_t s;
    int device;
    uint64_t generation;  // of stream destruction, + 1 (0: an empty entry)
} cci_stream_seen;
extern _Atomic uint64_t cci__stream_generation CCI_HIDDEN;
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
/// A stream is about to be destroyed, or a device reset: every thread asks again.
void cci_streams_forget(void);

/// A fork child has no captures (they belonged to the parent's threads).
void cci_streams_atfork_child(void);

#endif
