// SPDX-License-Identifier: MIT
// Streams as the core sees them (keys), the device of a program's stream, and the runtime's
// capture entry points, counted on their way to CUDA.
#include "streams.h"

#include "captures.h"
#include "forwarding.h"
#include "real.h"
#include "stream_registry.h"
#include "stream_rule.h"

// Per-thread default streams have no handle of their own, so each thread gets a key from a range
// no real stream handle (a user-space pointer, < 2^48 on every 64-bit target) can take.
#define PER_THREAD_KEY_BASE 0xffff000000000000ull
static _Atomic uint64_t next_thread_key;
_Thread_local uint64_t cci__thread_key __attribute__((tls_model("initial-exec")));  // see serve/serve.c

uint64_t cci__stream_key_per_thread(void)
{
    if (cci__thread_key == 0)
        cci__thread_key = PER_THREAD_KEY_BASE + atomic_fetch_add(&next_thread_key, 1);
    return cci__thread_key;
}

// ---- stream devices -------------------------------------------------------------------------

// Asking the runtime for a stream's device costs a CUDA call on every cudaMallocAsync; the answer
// never changes while the stream lives. Each thread remembers its last few streams, tagged with
// the generation of stream destruction they were learnt in, and its last one apart (streams.h).
#define STREAM_DEVICES 8
_Thread_local cci_stream_seen cci__stream_last __attribute__((tls_model("initial-exec")));
static _Thread_local cci_stream_seen known[STREAM_DEVICES] __attribute__((tls_model("initial-exec")));
static _Thread_local unsigned known_next __attribute__((tls_model("initial-exec")));

int cci__stream_device_lookup(cudaStream_t s, int *device, int (*ask)(cudaStream_t s, int *device))
{
    uint64_t gen = atomic_load_explicit(&cci__stream_generation, memory_order_acquire) + 1;
    for (unsigned i = 0; i < STREAM_DEVICES; i++) {
        if (known[i].s == s && known[i].generation == gen) {
            *device = known[i].device;
            cci__stream_last = known[i];
            return 0;
        }
    }
    if (ask(s, device) != 0)
        return -1;
    cci_stream_seen seen = {s, *device, gen};
    known[known_next++ % STREAM_DEVICES] = seen;
    cci__stream_last = seen;
    return 0;
}

// The stream the real runtime should be asked about, spelled so the plain entry point
// understands it whichever default stream the caller meant.
static cudaStream_t explicit_stream(cudaStream_t s, int ptsz)
{
    return (s == NULL && ptsz) ? cci_cudaStreamPerThread : s;
}

int cci_stream_capturing(cudaStream_t s, int ptsz)
{
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cci_real_rt()->cudaStreamIsCapturing(explicit_stream(s, ptsz), &st) != cudaSuccess)
        return 0;
    return st != cudaStreamCaptureStatusNone;
}

cudaError_t cci_pl_begin_capture(cudaStream_t s, cudaStreamCaptureMode m, int ptsz)
{
    const cci_real_runtime *rt = cci_real_rt();
    cci_rule_capture_begins();
    cci_pl_forwarding_begin();  // the driver's begin below it is this one
    cudaError_t rc = ptsz ? rt->cudaStreamBeginCapture_ptsz(s, m) : rt->cudaStreamBeginCapture(s, m);
    cci_pl_forwarding_end();
    if (rc != cudaSuccess)
        cci_capture_begin_failed();
    return rc;
}

cudaError_t cci_pl_begin_capture_to_graph(cudaStream_t s, cudaGraph_t g,
                                          const cudaGraphNode_t *deps,
                                          const cudaGraphEdgeData *edata, size_t ndeps,
                                          cudaStreamCaptureMode m, int ptsz)
{
    const cci_real_runtime *rt = cci_real_rt();
    cci_rule_capture_begins();
    cci_pl_forwarding_begin();
    cudaError_t rc = ptsz ? rt->cudaStreamBeginCaptureToGraph_ptsz(s, g, deps, edata, ndeps, m)
                          : rt->cudaStreamBeginCaptureToGraph(s, g, deps, edata, ndeps, m);
    cci_pl_forwarding_end();
    if (rc != cudaSuccess)
        cci_capture_begin_failed();
    return rc;
}

cudaError_t cci_pl_end_capture(cudaStream_t s, cudaGraph_t *g, int ptsz)
{
    // EndCapture can fail with the capture still running (called from the wrong thread) or end
    // it while failing (an invalidated capture): the stream's state before and after, not the
    // return code, says whether a capture ended.
    int was = cci_stream_capturing(s, ptsz);
    const cci_real_runtime *rt = cci_real_rt();
    cci_pl_forwarding_begin();
    cudaError_t rc = ptsz ? rt->cudaStreamEndCapture_ptsz(s, g) : rt->cudaStreamEndCapture(s, g);
    cci_pl_forwarding_end();
    if (was && !cci_stream_capturing(s, ptsz))
        cci_capture_ended();
    return rc;
}

