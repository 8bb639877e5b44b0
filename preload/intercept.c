// SPDX-License-Identifier: MIT
// The logic behind the runtime hooks: serve device allocations from the per-device allocators,
// and hand everything we do not own to the real runtime with its real return code. The
// allocator side (serve, release, lookup) is shared with the driver level (intercept_driver.c).
#include "intercept.h"

#include <stdint.h>

#include "allocator.h"
#include "backend_cuda.h"
#include "driver_table.h"
#include "levels.h"
#include "log.h"
#include "real.h"
#include "reporting.h"
#include "state.h"
#include "streams.h"

// The device this thread allocated on last: the first allocator a free asks, so a single-device
// program (and most threads of a multi-device one) finds its block in one lookup. Initial-exec:
// the preload is loaded at start-up, so its thread-locals live in the static TLS block and an
// access costs no __tls_get_addr call on the fast path.
static _Thread_local int last_device __attribute__((tls_model("initial-exec")));

enum { NOT_SERVED = -1 };

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

int cci_pl_serve(int level, int device, size_t size, uint64_t stream, uintptr_t *addr)
{
    cci_allocator *a = cci_state_allocator(device);
    if (!a)
        return CCI_EBACKEND;
    int rc = cci_malloc(a, size, stream, addr);
    if (rc == CCI_OK) {
        last_device = device;
        cci_pl_count(level);
    } else if (rc == CCI_EOOM) {
        // The report asks the runtime for the device's free memory: that answer must be CUDA's,
        // not the driver wrapper's (which would add our cache).
        int outer = cci_pl_forwarding_begin();
        cci_pl_report_oom(device, size);
        cci_pl_forwarding_end(outer);
    }
    return rc;
}

// cudaSuccess, cudaErrorMemoryAllocation, or NOT_SERVED when the real runtime should try (no
// allocator for this device, or a device failure other than out-of-memory: the runtime then
// reports its own error code).
static int serve(void **p, size_t size, int device, uint64_t key)
{
    uintptr_t addr;
    int rc = cci_pl_serve(CCI_LEVEL_RUNTIME, device, size, key, &addr);
    if (rc == CCI_OK) {
        *p = (void *)addr;
        return cudaSuccess;
    }
    return rc == CCI_EOOM ? (int)runtime_error(cudaErrorMemoryAllocation) : NOT_SERVED;
}

// Asks the allocators in turn, the last-used device's first.
int cci_pl_release(uintptr_t p, uint64_t key, cci_free_mode mode)
{
    int hint = last_device;
    cci_allocator *a = cci_state_allocator_peek(hint);
    int rc = a ? cci_free(a, p, key, mode) : CCI_ENOTOURS;
    for (int d = 0, n = cci_state_device_bound(); rc == CCI_ENOTOURS && d < n; d++) {
        if (d != hint && (a = cci_state_allocator_peek(d)))
            rc = cci_free(a, p, key, mode);
    }
    return rc;
}

static int release(void *p, uint64_t key, cci_free_mode mode)
{
    return cci_pl_release((uintptr_t)p, key, mode);
}

int cci_pl_block_info(uintptr_t p, uintptr_t *block, size_t *block_size, uintptr_t *segment,
                      size_t *segment_size)
{
    int rc = CCI_ENOTOURS;
    for (int d = 0, n = cci_state_device_bound(); rc == CCI_ENOTOURS && d < n; d++) {
        cci_allocator *a = cci_state_allocator_peek(d);
        if (a)
            rc = cci_block_info(a, p, block, block_size, segment, segment_size);
    }
    return rc;
}

cci_free_mode cci_pl_sync_free_mode(void)
{
    // A real cudaFree waits for the device, so work still queued anywhere may use the block: it
    // waits for the core's next batched synchronisation unless the program opted out.
    return cci_state_config()->immediate_reuse && !cci_capture_maybe_active() ? CCI_FREE_NOW
                                                                               : CCI_FREE_DEFERRED;
}

static cudaError_t invalid_free(const char *fn, void *p)
{
    cci_log(CCI_LOG_WARNING, "%s(%p): not the start of a live block (double free, or a pointer "
            "inside a block); returning cudaErrorInvalidValue, the allocator is unchanged", fn, p);
    return runtime_error(cudaErrorInvalidValue);
}

// The runtime's current device is the device of the thread's current context (CUDA 12 and later
// make a device's primary context current in cudaSetDevice). Reading that context from the driver
// and matching it against the primary contexts our allocators use costs a fraction of
// cudaGetDevice (61 ns a call on the H100 host): this runs on every cudaMalloc. Anything else (no
// context yet in this thread, a context of the program's own) asks the runtime.
static int current_device(int *device)
{
    const cci_drv_table *t = cci_drv_get(NULL);
    CUcontext cur = NULL;
    if (t->cuCtxGetCurrent && t->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur) {
        for (int d = 0, n = cci_state_device_bound(); d < n; d++) {
            if (cci_cuda_backend_primary(d, 0) == cur) {
                *device = d;
                return 0;
            }
        }
    }
    return cci_real_rt()->cudaGetDevice(device) == cudaSuccess ? 0 : -1;
}

static cudaError_t rt_malloc(void **p, size_t size)
{
    const cci_real_runtime *rt = cci_real_rt();
    int device;
    // During a capture, a plain cudaMalloc must behave as CUDA's own: fail (and invalidate) a
    // global-mode capture, or give real memory that stays outside our pools in relaxed mode.
    // Size 0 and NULL out-pointers keep CUDA's exact answers.
    if (!p || size == 0 || !cci_state_active() || cci_capture_maybe_active() || current_device(&device) != 0)
        return rt->cudaMalloc(p, size);
    int rc = serve(p, size, device, CCI_KEY_LEGACY);
    return rc == NOT_SERVED ? rt->cudaMalloc(p, size) : rc;
}

static cudaError_t rt_free(void *p)
{
    const cci_real_runtime *rt = cci_real_rt();
    if (!p || !cci_state_active())
        return rt->cudaFree(p);
    int rc = release(p, CCI_KEY_LEGACY, cci_pl_sync_free_mode());
    if (rc == CCI_ENOTOURS)
        return rt->cudaFree(p);
    return rc == CCI_OK ? cudaSuccess : invalid_free("cudaFree", p);
}

// The device whose pool cudaMallocAsync draws from: the stream's. 0 or -1.
static int stream_device(cudaStream_t s, int *device)
{
    const cci_real_runtime *rt = cci_real_rt();
    if (s == NULL || s == cci_cudaStreamLegacy || s == cci_cudaStreamPerThread)
        return rt->cudaGetDevice(device) == cudaSuccess ? 0 : -1;
    cudaError_t rc = rt->cudaStreamGetDevice(s, device);
    // cudaStreamGetDevice is CUDA 12.8+: an older runtime's (stub) answer means "not available".
    if (rc == cudaErrorInitializationError)
        rc = rt->cudaGetDevice(device);
    return rc == cudaSuccess ? 0 : -1;
}

static cudaError_t rt_malloc_async(void **p, size_t size, cudaStream_t s, int ptsz)
{
    const cci_real_runtime *rt = cci_real_rt();
    cudaError_t (*real)(void **, size_t, cudaStream_t) =
        ptsz ? rt->cudaMallocAsync_ptsz : rt->cudaMallocAsync;
    int device;
    // On a capturing stream the real call records a MEM_ALLOC node; a cached pointer would be
    // baked into the graph instead. An invalid stream gets the runtime's own error.
    if (!p || size == 0 || !cci_state_active() ||
        (cci_capture_maybe_active() && cci_stream_capturing(s, ptsz)) ||
        stream_device(s, &device) != 0)
        return real(p, size, s);
    int rc = serve(p, size, device, cci_stream_key(s, ptsz));
    return rc == NOT_SERVED ? real(p, size, s) : rc;
}

static cudaError_t rt_free_async(void *p, cudaStream_t s, int ptsz)
{
    const cci_real_runtime *rt = cci_real_rt();
    cudaError_t (*real)(void *, cudaStream_t) = ptsz ? rt->cudaFreeAsync_ptsz : rt->cudaFreeAsync;
    if (!p || !cci_state_active())
        return real(p, s);
    // Freed inside a capture, the block must not return to the pool on that stream before the
    // graph exists: let it wait for a synchronisation, which the backend refuses during captures.
    int capturing = cci_capture_maybe_active() && cci_stream_capturing(s, ptsz);
    int rc = release(p, cci_stream_key(s, ptsz), capturing ? CCI_FREE_DEFERRED : CCI_FREE_NOW);
    if (rc == CCI_ENOTOURS)
        return real(p, s);
    return rc == CCI_OK ? cudaSuccess : invalid_free(ptsz ? "cudaFreeAsync_ptsz" : "cudaFreeAsync", p);
}

static cudaError_t rt_mem_get_info(size_t *free_b, size_t *total_b)
{
    const cci_real_runtime *rt = cci_real_rt();
    cudaError_t rc = rt->cudaMemGetInfo(free_b, total_b);
    int device;
    // Programs that size themselves from free memory should see what they can actually get,
    // and our cached blocks are theirs for the asking.
    if (rc != cudaSuccess || !free_b || !cci_state_active() ||
        !cci_state_config()->memgetinfo_cached_as_free || rt->cudaGetDevice(&device) != cudaSuccess)
        return rc;
    cci_allocator *a = cci_state_allocator_peek(device);
    if (a) {
        *free_b += cci_cached_free_bytes(a);
        if (total_b && *free_b > *total_b)
            *free_b = *total_b;
    }
    return rc;
}

static cudaError_t rt_device_reset(void)
{
    const cci_real_runtime *rt = cci_real_rt();
    int device;
    // The reset frees every allocation of the device anyway: give our segments back while the
    // context still exists, so no allocator keeps addresses that are about to vanish.
    if (cci_state_active() && rt->cudaGetDevice(&device) == cudaSuccess)
        cci_state_drop_device(device);
    return rt->cudaDeviceReset();
}

static cudaError_t rt_ipc_get_mem_handle(cudaIpcMemHandle_t *h, void *p)
{
    const cci_real_runtime *rt = cci_real_rt();
    if (!h || !p || !cci_state_active())
        return rt->cudaIpcGetMemHandle(h, p);
    uintptr_t block = 0, segment = 0;
    size_t block_size = 0, segment_size = 0;
    int rc = cci_pl_block_info((uintptr_t)p, &block, &block_size, &segment, &segment_size);
    if (rc == CCI_ENOTOURS)
        return rt->cudaIpcGetMemHandle(h, p);
    if (rc != CCI_OK) {
        cci_log(CCI_LOG_WARNING, "cudaIpcGetMemHandle(%p): the pointer is in our memory but in no "
                "live block (already freed?); returning cudaErrorInvalidValue", p);
        return runtime_error(cudaErrorInvalidValue);
    }
    // The handle names the driver allocation, and the importer maps its start: for a block that
    // does not start its segment it would read someone else's bytes.
    if (block != segment) {
        cci_log(CCI_LOG_WARNING, "cudaIpcGetMemHandle(%p): the block starts %zu bytes into a cached "
                "%zu-byte segment and an importer would map the segment's start; returning "
                "cudaErrorInvalidValue. Set CCI_ALLOC_CONF=max_split_size_mb:N with N at most the IPC "
                "buffer size (such blocks are never split and start their own segment), or run with "
                "CCI_DISABLE=1", p, (size_t)(block - segment), segment_size);
        return runtime_error(cudaErrorInvalidValue);
    }
    return rt->cudaIpcGetMemHandle(h, p);
}

// ---- entry points: the runtime level on or off ------------------------------------------------
// Off (intercept_level:driver), each hook is the real runtime function: the runtime then reaches
// the driver, where our wrappers serve the call. On, the hook runs marked as forwarding: when it
// passes a call to the real runtime (capture, a pointer not ours, a device we do not manage...),
// the runtime may call the driver through our own wrappers (it found them through our resolver),
// and those must pass it straight through instead of handling it a second time.

static int runtime_level(void)
{
    return cci_state_active() && (cci_pl_levels() & CCI_LEVEL_RUNTIME);
}

cudaError_t cci_pl_malloc(void **p, size_t size)
{
    if (!runtime_level())
        return cci_real_rt()->cudaMalloc(p, size);
    int outer = cci_pl_forwarding_begin();
    cudaError_t rc = rt_malloc(p, size);
    cci_pl_forwarding_end(outer);
    return rc;
}

cudaError_t cci_pl_free(void *p)
{
    if (!runtime_level())
        return cci_real_rt()->cudaFree(p);
    int outer = cci_pl_forwarding_begin();
    cudaError_t rc = rt_free(p);
    cci_pl_forwarding_end(outer);
    return rc;
}

cudaError_t cci_pl_malloc_async(void **p, size_t size, cudaStream_t s, int ptsz)
{
    if (!runtime_level()) {
        const cci_real_runtime *rt = cci_real_rt();
        return ptsz ? rt->cudaMallocAsync_ptsz(p, size, s) : rt->cudaMallocAsync(p, size, s);
    }
    int outer = cci_pl_forwarding_begin();
    cudaError_t rc = rt_malloc_async(p, size, s, ptsz);
    cci_pl_forwarding_end(outer);
    return rc;
}

cudaError_t cci_pl_free_async(void *p, cudaStream_t s, int ptsz)
{
    if (!runtime_level()) {
        const cci_real_runtime *rt = cci_real_rt();
        return ptsz ? rt->cudaFreeAsync_ptsz(p, s) : rt->cudaFreeAsync(p, s);
    }
    int outer = cci_pl_forwarding_begin();
    cudaError_t rc = rt_free_async(p, s, ptsz);
    cci_pl_forwarding_end(outer);
    return rc;
}

cudaError_t cci_pl_mem_get_info(size_t *free_b, size_t *total_b)
{
    if (!runtime_level())
        return cci_real_rt()->cudaMemGetInfo(free_b, total_b);
    int outer = cci_pl_forwarding_begin();
    cudaError_t rc = rt_mem_get_info(free_b, total_b);
    cci_pl_forwarding_end(outer);
    return rc;
}

cudaError_t cci_pl_device_reset(void)
{
    if (!runtime_level())
        return cci_real_rt()->cudaDeviceReset();
    int outer = cci_pl_forwarding_begin();
    cudaError_t rc = rt_device_reset();
    cci_pl_forwarding_end(outer);
    return rc;
}

cudaError_t cci_pl_ipc_get_mem_handle(cudaIpcMemHandle_t *h, void *p)
{
    if (!runtime_level())
        return cci_real_rt()->cudaIpcGetMemHandle(h, p);
    int outer = cci_pl_forwarding_begin();
    cudaError_t rc = rt_ipc_get_mem_handle(h, p);
    cci_pl_forwarding_end(outer);
    return rc;
}
