// SPDX-License-Identifier: MIT
// Stream keys and capture tracking.
//
// Why count captures instead of asking cudaStreamIsCapturing on every call: the question costs a
// runtime call per allocation, and programs capture rarely. Counting the captures begun through
// the runtime's entry points and the driver's cuStreamBeginCapture[ToGraph] (intercept_driver.c)
// keeps the fast path at one relaxed load; only while the count is non-zero do we ask the runtime
// about the stream at hand.
#include "streams.h"

#include <pthread.h>

#include "levels.h"
#include "real.h"
#include "stream_registry.h"

_Atomic int cci__captures;
_Atomic int cci__capture_unseen_possible;

// The newest driver whose capture begins are all wrapped (intercept_driver.c, hooks_runtime.c):
// CUDA 13.0. A newer one may begin captures that no count shows (13.3's
// cuStreamBeginRecaptureToGraph), so its stream-ordered allocations ask the stream every time. A
// driver that cannot tell its version is taken as newer.
#define NEWEST_KNOWN_DRIVER 13000

void cci_capture_note_driver(void)
{
    const cci_real_driver *t = cci_real_drv();
    int v = 0;
    int unknown = !t->cuDriverGetVersion || t->cuDriverGetVersion(&v) != CUDA_SUCCESS;
    atomic_store_explicit(&cci__capture_unseen_possible, unknown || v > NEWEST_KNOWN_DRIVER,
                          memory_order_relaxed);
}

// The capture gate: a capture is counted before it begins, inside the gate, so a background
// thread that checked the count inside the gate (the fence watcher) cannot ask a stream the
// moment a capture begins on it (a question to a capturing stream breaks the capture). Program
// threads do not take it: their own calls never race their own begins.
static pthread_mutex_t capture_gate = PTHREAD_MUTEX_INITIALIZER;

int cci_capture_gate_enter(void)
{
    pthread_mutex_lock(&capture_gate);
    if (!cci_capture_maybe_active())
        return 1;
    pthread_mutex_unlock(&capture_gate);
    return 0;
}

void cci_capture_gate_leave(void)
{
    pthread_mutex_unlock(&capture_gate);
}

static void capture_count(int n)
{
    pthread_mutex_lock(&capture_gate);
    atomic_fetch_add(&cci__captures, n);
    pthread_mutex_unlock(&capture_gate);
}

// Before the real begin: the rule switches first (no sync is possible during a capture), then the
// capture is counted inside the gate. A begin that failed is taken back.
void cci_capture_begins(void)
{
    cci_rule_switch(CCI_RULE_CAPTURE);
    capture_count(1);
}

void cci_capture_begin_failed(void)
{
    capture_count(-1);
}

// Per-thread default streams have no handle of their own, so each thread gets a key from a range
// no real stream handle (a user-space pointer, < 2^48 on every 64-bit target) can take.
#define PER_THREAD_KEY_BASE 0xffff000000000000ull
static _Atomic uint64_t next_thread_key;
_Thread_local uint64_t cci__thread_key __attribute__((tls_model("initial-exec")));  // see serve.c

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
_Atomic uint64_t cci__stream_generation;
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

void cci_streams_forget(void)
{
    atomic_fetch_add_explicit(&cci__stream_generation, 1, memory_order_release);
}

// The stream the real runtime should be asked about, spelled so the plain entry point
// understands it whichever default stream the caller meant.
static cudaStream_t explicit_stream(cudaStream_t s, int ptsz)
{
    return (s == NULL && ptsz) ? cci_cudaStreamPerThread : s;
}

int cci_stream_driver_capturing(CUstream s, int ptsz)
{
    const cci_real_driver *t = cci_real_drv();
    CUresult (*is)(CUstream, CUstreamCaptureStatus *) = ptsz ? t->cuStreamIsCapturing_ptsz : t->cuStreamIsCapturing;
    CUstreamCaptureStatus st = 0;
    if (!is || is(s, &st) != CUDA_SUCCESS)
        return -1;
    return st != 0;
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
    cci_capture_begins();
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
    cci_capture_begins();
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

void cci_capture_ended(void)
{
    int n = atomic_load(&cci__captures);
    while (n > 0 && !atomic_compare_exchange_weak(&cci__captures, &n, n - 1))
        ;
}

void cci_streams_atfork_child(void)
{
    pthread_mutex_init(&capture_gate, NULL);
    atomic_store(&cci__captures, 0);
}
