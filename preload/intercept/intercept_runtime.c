// SPDX-License-Identifier: MIT
// The runtime level: the runtime hooks' arguments and answers translated to and from the serving
// layer (serve.h), which makes every decision; everything not ours goes to the real runtime with
// its real return code.
//
// Runtime level off (intercept_level:driver), each hook is the real runtime function: the runtime
// then reaches the driver, where our wrappers serve the call. On, the hook runs marked as
// forwarding: when it passes a call to the real runtime (capture, a pointer not ours, a device we
// do not manage...), the runtime may call the driver through our own wrappers (it found them
// through our resolver), and those must pass it straight through instead of handling it again.
#include "intercept_runtime.h"

#include <stdint.h>

#include "backend_cuda.h"
#include "fence.h"
#include "levels.h"
#include "real.h"
#include "serve.h"
#include "serve_shapes.h"
#include "state.h"
#include "stream_rule.h"
#include "streams.h"

static inline int runtime_level(void)
{
    return cci_pl_serving(CCI_LEVEL_RUNTIME);
}

// A failed runtime call leaves its code in the runtime's per-thread error state (cudaGetLastError
// returns it once). Only the runtime can set that state, so when we refuse a call ourselves we
// make it refuse one with the same code: an impossible allocation, or a missing out-pointer.
static cudaError_t runtime_error(cudaError_t code)
{
    const cci_real_runtime *rt = cci_real_rt();
    void *never = NULL;
    if (code == cudaErrorMemoryAllocation) {
        if (rt->cudaMalloc(&never, SIZE_MAX) == cudaSuccess)
            rt->cudaFree(never);
    } else {
        rt->cudaMalloc(NULL, 1);
    }
    return code;
}

// The runtime's current device is the device of the thread's current context (CUDA 12 and later
// make a device's primary context current in cudaSetDevice). Reading that context from the driver
// and matching it against the primary contexts our allocators use costs a fraction of
// cudaGetDevice (61 ns a call on the H100 host): this runs on every cudaMalloc. Anything else (no
// context yet in this thread, a context of the program's own) asks the runtime.
//
// One device: when the driver shows the process exactly one device, the runtime's
// current device can only be 0 (cudaSetDevice refuses every other ordinal, and the count is fixed
// at cuInit), and the question above can only answer 0 or fail; it fails only when neither the
// driver nor the runtime can answer (the runtime not initialised, or unusable). So once one
// question has been answered with 0 in this process (the runtime works), every later one would
// answer 0 too, and is not asked: no CUDA call. The runtime stays working until it unloads at
// exit, where the program's own cudaMalloc could not succeed anyway. A fork child asks again.
static _Atomic int one_device_known;

// The thread's last match of its current context against a primary context: while the thread's
// context is still that primary context of ours, its device is known without the search.
static _Thread_local CUcontext last_ctx __attribute__((tls_model("initial-exec")));
static _Thread_local int last_ctx_device __attribute__((tls_model("initial-exec")));

// Whether the driver shows exactly one device (asked once; our start-up ran cuInit).
static int driver_shows_one_device(void)
{
    static _Atomic int answer = -1;
    int v = atomic_load_explicit(&answer, memory_order_relaxed);
    if (v < 0) {
        const cci_real_driver *drv = cci_real_drv();
        int n = 0;
        v = drv->cuDeviceGetCount && drv->cuDeviceGetCount(&n) == CUDA_SUCCESS && n == 1;
        atomic_store_explicit(&answer, v, memory_order_relaxed);
    }
    return v;
}

static int ask_current_device(int *device)
{
    const cci_real_driver *drv = cci_real_drv();
    CUcontext cur = NULL;
    if (drv->cuCtxGetCurrent && drv->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur) {
        if (cur == last_ctx && cci_cuda_backend_primary_peek(last_ctx_device) == cur) {
            *device = last_ctx_device;
            return 0;
        }
        for (int d = 0, n = cci_state_device_bound(); d < n; d++) {
            if (cci_cuda_backend_primary_peek(d) == cur) {
                last_ctx = cur;
                last_ctx_device = d;
                *device = d;
                return 0;
            }
        }
    }
    return cci_real_rt()->cudaGetDevice(device) == cudaSuccess ? 0 : -1;
}

static __attribute__((noinline)) int current_device_asked(void)
{
    int device;
    if (ask_current_device(&device) != 0)
        return -1;
    if (device == 0 && driver_shows_one_device())
        atomic_store_explicit(&one_device_known, 1, memory_order_relaxed);
    return device;
}

// The runtime's current device, or -1 when it cannot be told. Answered as a value, not through a
// pointer: the device stays in a register on the fast path (a pointer passed on to the question
// made it a stack slot, written and read back on every cudaMalloc).
static inline int current_device(void)
{
    if (__builtin_expect(atomic_load_explicit(&one_device_known, memory_order_relaxed), 1))
        return 0;
    return current_device_asked();
}

int cci_pl_runtime_current_device(void)
{
    return current_device();
}

void cci_pl_runtime_atfork_child(void)
{
    atomic_store(&one_device_known, 0);
}

static int runtime_device(int *device)
{
    return cci_real_rt()->cudaGetDevice(device) == cudaSuccess ? 0 : -1;
}

static int ask_stream_device(cudaStream_t s, int *device)
{
    const cci_real_runtime *rt = cci_real_rt();
    cudaError_t rc = rt->cudaStreamGetDevice(s, device);
    // cudaStreamGetDevice is CUDA 12.8+: an older runtime's (stub) answer means "not available".
    if (rc == cudaErrorInitializationError)
        rc = rt->cudaGetDevice(device);
    return rc == cudaSuccess ? 0 : -1;
}

// The device whose pool cudaMallocAsync draws from: the stream's (remembered per thread,
// streams.h), or the current device's for a default stream. 0 or -1.
static inline __attribute__((always_inline)) int stream_device(cudaStream_t s, int *device)
{
    if (s == NULL || s == cci_cudaStreamLegacy || s == cci_cudaStreamPerThread)
        return (*device = current_device()) >= 0 ? 0 : -1;
    return cci_stream_device_cached(s, device, ask_stream_device);
}

// A serve answer in the runtime's terms: success, or the out-of-memory error left in the
// runtime's own error state. -1: CUDA's to answer.
static int runtime_answer(int served, void **p, uintptr_t addr)
{
    if (served == CCI_OK) {
        *p = (void *)addr;
        return cudaSuccess;
    }
    return served == CCI_EOOM ? (int)runtime_error(cudaErrorMemoryAllocation) : -1;
}

// A release answer in the runtime's terms; -1: CUDA's pointer, forward it.
static int runtime_release_answer(int released)
{
    if (released == CCI_ENOTOURS)
        return -1;
    return released == CCI_OK ? cudaSuccess : (int)runtime_error(cudaErrorInvalidValue);
}

// The real stream-ordered entry points, looked up only where a call is forwarded (not on the
// served fast path).
typedef cudaError_t (*malloc_async_fn)(void **, size_t, cudaStream_t);
typedef cudaError_t (*free_async_fn)(void *, cudaStream_t);

static malloc_async_fn real_malloc_async(int ptsz)
{
    const cci_real_runtime *rt = cci_real_rt();
    return ptsz ? rt->cudaMallocAsync_ptsz : rt->cudaMallocAsync;
}

static free_async_fn real_free_async(int ptsz)
{
    const cci_real_runtime *rt = cci_real_rt();
    return ptsz ? rt->cudaFreeAsync_ptsz : rt->cudaFreeAsync;
}

// ---- the entry points ---------------------------------------------------------------------

cudaError_t cci_pl_malloc(void **p, size_t size)
{
    if (!runtime_level())
        return cci_real_rt()->cudaMalloc(p, size);
    cci_pl_forwarding_begin();
    int rc = -1, device;
    uintptr_t addr;
    // Size 0 and NULL out-pointers keep CUDA's exact answers.
    if (p && size != 0 && !cci_serve_plain_alloc_passes() && (device = current_device()) >= 0) {
        int served = cci_serve_alloc(CCI_LEVEL_RUNTIME, device, size, CCI_KEY_LEGACY, &addr);
        rc = runtime_answer(served, p, addr);
    }
    if (rc < 0)
        rc = cci_real_rt()->cudaMalloc(p, size);
    cci_pl_forwarding_end();
    return rc;
}

cudaError_t cci_pl_free(void *p)
{
    if (!runtime_level())
        return cci_real_rt()->cudaFree(p);
    cci_pl_forwarding_begin();
    int rc = -1;
    if (p)
        rc = runtime_release_answer(cci_serve_release(CCI_LEVEL_RUNTIME, "cudaFree", (uintptr_t)p,
                                                      CCI_KEY_LEGACY, cci_serve_sync_free_mode()));
    if (rc < 0 && (rc = cci_real_rt()->cudaFree(p)) == cudaSuccess)
        cci_serve_passed_free((uintptr_t)p);  // managed memory's counts (serve_shapes.h)
    cci_pl_forwarding_end();
    return rc;
}

// The stream-ordered calls, each compiled apart for the legacy and the per-thread default stream
// (the exported functions below): `ptsz` is then a constant, so neither the flag nor what follows
// from it (the real entry point, the name in a message) is kept in a register across the call
// into the allocator.
static inline __attribute__((always_inline)) cudaError_t malloc_async(void **p, size_t size, cudaStream_t s,
                                                                      int ptsz)
{
    if (!runtime_level())
        return real_malloc_async(ptsz)(p, size, s);
    cci_pl_forwarding_begin();
    int rc = -1, device;
    uintptr_t addr;
    // On a capturing stream the real call records a MEM_ALLOC node (a cached pointer would be
    // baked into the graph instead); an invalid stream gets the runtime's own error.
    if (p && size != 0 && !(cci_capture_ask_streams() && cci_stream_capturing(s, ptsz)) &&
        stream_device(s, &device) == 0) {
        int served =
            cci_serve_alloc(CCI_LEVEL_RUNTIME, device, size, cci_stream_key(s, ptsz), &addr);
        rc = runtime_answer(served, p, addr);
    }
    if (rc < 0)
        rc = real_malloc_async(ptsz)(p, size, s);
    cci_pl_forwarding_end();
    return rc;
}

cudaError_t cci_pl_malloc_async(void **p, size_t size, cudaStream_t s) { return malloc_async(p, size, s, 0); }

cudaError_t cci_pl_malloc_async_ptsz(void **p, size_t size, cudaStream_t s)
{
    return malloc_async(p, size, s, 1);
}

static inline __attribute__((always_inline)) cudaError_t free_async(void *p, cudaStream_t s, int ptsz)
{
    if (!runtime_level())
        return real_free_async(ptsz)(p, s);
    cci_pl_forwarding_begin();
    int rc = -1;
    if (p) {
        int capturing = cci_capture_ask_streams() && cci_stream_capturing(s, ptsz);
        rc = runtime_release_answer(cci_serve_release(
            CCI_LEVEL_RUNTIME, ptsz ? "cudaFreeAsync_ptsz" : "cudaFreeAsync", (uintptr_t)p,
            cci_stream_key(s, ptsz), cci_serve_stream_free_mode(capturing)));
    }
    if (rc < 0 && (rc = real_free_async(ptsz)(p, s)) == cudaSuccess)
        cci_serve_passed_free((uintptr_t)p);  // another pool's memory (serve_shapes.h)
    cci_pl_forwarding_end();
    return rc;
}

cudaError_t cci_pl_free_async(void *p, cudaStream_t s) { return free_async(p, s, 0); }

cudaError_t cci_pl_free_async_ptsz(void *p, cudaStream_t s) { return free_async(p, s, 1); }

cudaError_t cci_pl_mem_get_info(size_t *free_b, size_t *total_b)
{
    if (!runtime_level())
        return cci_real_rt()->cudaMemGetInfo(free_b, total_b);
    const cci_real_runtime *rt = cci_real_rt();
    cci_pl_forwarding_begin();
    cudaError_t rc = rt->cudaMemGetInfo(free_b, total_b);
    if (rc == cudaSuccess)
        cci_serve_mem_get_info(free_b, total_b, runtime_device);
    cci_pl_forwarding_end();
    return rc;
}

cudaError_t cci_pl_device_reset(void)
{
    if (!runtime_level())
        return cci_real_rt()->cudaDeviceReset();
    const cci_real_runtime *rt = cci_real_rt();
    cci_pl_forwarding_begin();
    int device;
    // The reset frees every allocation of the device anyway: give our segments back while the
    // context still exists, so no allocator keeps addresses that are about to vanish.
    if (runtime_device(&device) == 0)
        cci_state_drop_device(device);
    cudaError_t rc = rt->cudaDeviceReset();
    cci_pl_forwarding_end();
    return rc;
}

cudaError_t cci_pl_ipc_get_mem_handle(cudaIpcMemHandle_t *h, void *p)
{
    if (!runtime_level())
        return cci_real_rt()->cudaIpcGetMemHandle(h, p);
    const cci_real_runtime *rt = cci_real_rt();
    cci_pl_forwarding_begin();
    int served = h && p ? cci_serve_ipc_export(CCI_LEVEL_RUNTIME, "cudaIpcGetMemHandle", (uintptr_t)p, h)
                        : CCI_ENOTOURS;
    cudaError_t rc = served == CCI_OK       ? cudaSuccess
                     : served == CCI_EINVAL ? runtime_error(cudaErrorInvalidValue)
                                            : rt->cudaIpcGetMemHandle(h, p);
    cci_pl_forwarding_end();
    return rc;
}

// Our handles are opened whatever the levels: no CUDA could open them.
cudaError_t cci_pl_ipc_open_mem_handle(void **p, cudaIpcMemHandle_t h, unsigned flags)
{
    const cci_real_runtime *rt = cci_real_rt();
    int device;
    uintptr_t addr = 0;
    int why = 0, served = CCI_ENOTOURS;
    cci_pl_forwarding_begin();
    if (p && runtime_device(&device) == 0)
        served = cci_serve_ipc_open("cudaIpcOpenMemHandle", &h, device, &addr, &why);
    cudaError_t rc;
    if (served == CCI_OK) {
        *p = (void *)addr;
        rc = cudaSuccess;
    } else if (served == CCI_EINVAL) {
        rc = why == CCI_IPC_OPEN_BAD_HANDLE   ? cudaErrorInvalidResourceHandle
             : why == CCI_IPC_OPEN_NO_MEMORY  ? cudaErrorMemoryAllocation
             : why == CCI_IPC_OPEN_OWN_HANDLE ? cudaErrorDeviceUninitialized  // the driver's invalid context
                                              : cudaErrorMapBufferObjectFailed;
    } else {
        rc = rt->cudaIpcOpenMemHandle(p, h, flags);
    }
    cci_pl_forwarding_end();
    return rc;
}

cudaError_t cci_pl_ipc_close_mem_handle(void *p)
{
    cci_pl_forwarding_begin();
    cudaError_t rc = p && cci_serve_ipc_close((uintptr_t)p) == CCI_OK ? cudaSuccess
                                                                    : cci_real_rt()->cudaIpcCloseMemHandle(p);
    cci_pl_forwarding_end();
    return rc;
}

// ---- streams and peer access: observed for the stream rule ------ ----------------------
// Not gated by the levels or the layer's state (the registry must see every stream from the
// first call on). Marked forwarding, so that a real cudart's call into our driver wrappers is
// not observed twice.

cudaError_t cci_pl_stream_create(cudaStream_t *s, unsigned flags, int priority, int which)
{
    const cci_real_runtime *rt = cci_real_rt();
    cci_pl_forwarding_begin();
    // Before the stream exists (stream_rule.h, the switch), and no return to ordered until
    // it is registered.
    unsigned kind = which == CCI_STREAM_CREATE_PLAIN ? 0 : flags;
    cci_rule_stream_create_begin(kind);
    cudaError_t rc = which == CCI_STREAM_CREATE_PLAIN      ? rt->cudaStreamCreate(s)
                     : which == CCI_STREAM_CREATE_FLAGS    ? rt->cudaStreamCreateWithFlags(s, flags)
                                                           : rt->cudaStreamCreateWithPriority(s, flags, priority);
    int device = 0;
    if (rc == cudaSuccess && s) {
        if (rt->cudaGetDevice(&device) != cudaSuccess)
            device = 0;
        cci_cuda_stream_created(*s, device, kind);
    }
    cci_rule_stream_create_end(kind);
    cci_pl_forwarding_end();
    return rc;
}

cudaError_t cci_pl_stream_destroy(cudaStream_t s)
{
    const cci_real_runtime *rt = cci_real_rt();
    cci_pl_forwarding_begin();
    cci_cuda_stream_destroyed(s);
    cudaError_t rc = rt->cudaStreamDestroy(s);
    cci_pl_forwarding_end();
    return rc;
}

cudaError_t cci_pl_device_enable_peer_access(int peer, unsigned flags)
{
    const cci_real_runtime *rt = cci_real_rt();
    cci_pl_forwarding_begin();
    cci_rule_switch(CCI_RULE_PEER_ACCESS);
    cudaError_t rc = rt->cudaDeviceEnablePeerAccess(peer, flags);
    int dev;
    if (rc == cudaSuccess && rt->cudaGetDevice(&dev) == cudaSuccess)
        cci_serve_peer_enabled(dev, peer);
    cci_pl_forwarding_end();
    return rc;
}

int cci_pl_runtime_stream_device(cudaStream_t s)
{
    int device;
    return stream_device(s, &device) == 0 ? device : -1;
}
