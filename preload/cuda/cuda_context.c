// SPDX-License-Identifier: MIT
// The devices' primary contexts, the scope around every driver call of ours, and plain segments
// (cuMemAlloc_v2 / cuMemFree_v2). Device memory straight from the driver. Going below the runtime means a driver-level hook of
// ours (static-cudart programs) can never be re-entered from here, and segments never show up as
// runtime allocations that a program could cudaFree behind our back.
#include "cuda_context.h"

#include <pthread.h>
#include <stdatomic.h>

#include "backend.h"
#include "log.h"
#include "real.h"
#include "captures.h"

// A thread may reach cudaMalloc before the runtime ever made a context current in it, so we hold
// one retain on each device's primary context (the one the runtime uses) and push it around every
// driver call. These are slow paths (new segments, releases, synchronisations), so the push/pop
// pair costs nothing that matters.
_Atomic(CUcontext) cci__primary[CCI_PL_MAX_DEVICES];
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
// How many of them are held, kept beside the array under primary_lock: the fences' width asks on
// every poor fit, and a walk over all CCI_PL_MAX_DEVICES slots was a tenth of a fenced pair.
static atomic_uint primaries_held;

static CUcontext primary_ctx(int device)
{
    CUcontext c = atomic_load_explicit(&cci__primary[device], memory_order_acquire);
    if (c)
        return c;
    pthread_mutex_lock(&primary_lock);
    c = atomic_load_explicit(&cci__primary[device], memory_order_relaxed);
    if (!c) {
        CUdevice d;
        CUresult r = cci_real_drv()->cuDeviceGet(&d, device);
        if (r == CUDA_SUCCESS)
            r = cci_real_drv()->cuDevicePrimaryCtxRetain(&c, d);
        if (r != CUDA_SUCCESS) {
            cci_log(CCI_LOG_DEBUG, "device %d: retaining the primary context failed (CUresult %d)",
                    device, r);
            c = NULL;
        }
        atomic_store_explicit(&cci__primary[device], c, memory_order_release);
        if (c)
            atomic_fetch_add_explicit(&primaries_held, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&primary_lock);
    return c;
}

typedef cci_driver_scope driver_scope;

// While some stream captures, allocation calls from this thread could invalidate a global-mode
// capture; the relaxed mode for the duration of our own call keeps the program's graph intact
// (the calls we make never touch a capturing stream).
static int enter(int device, driver_scope *sc)
{
    CUcontext c = primary_ctx(device);
    if (!c)
        return -1;
    sc->relaxed = 0;
    if (cci_capture_maybe_active() && cci_real_drv()->cuThreadExchangeStreamCaptureMode) {
        sc->saved = CU_STREAM_CAPTURE_MODE_RELAXED;
        sc->relaxed = cci_real_drv()->cuThreadExchangeStreamCaptureMode(&sc->saved) == CUDA_SUCCESS;
    }
    // Already current (the usual case: a thread of the program works in the device's primary
    // context, which cudart makes current): push and pop would leave exactly this state, so they
    // are skipped, one real call instead of two. Nothing between enter and leave changes the
    // thread's context (our own calls are event, stream and memory calls, and nested scopes
    // restore what they found), so leave has nothing to undo.
    CUcontext cur = NULL;
    const cci_real_driver *drv = cci_real_drv();
    sc->pushed = !(drv->cuCtxGetCurrent && drv->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == c);
    if (sc->pushed && drv->cuCtxPushCurrent_v2(c) != CUDA_SUCCESS) {
        if (sc->relaxed)
            drv->cuThreadExchangeStreamCaptureMode(&sc->saved);
        return -1;
    }
    return 0;
}

static void leave(driver_scope *sc)
{
    CUcontext popped;
    if (sc->pushed)
        cci_real_drv()->cuCtxPopCurrent_v2(&popped);
    if (sc->relaxed)
        cci_real_drv()->cuThreadExchangeStreamCaptureMode(&sc->saved);
}

int cci_cuda_enter(int device, cci_driver_scope *sc)
{
    return enter(device, sc);
}

void cci_cuda_leave(cci_driver_scope *sc)
{
    leave(sc);
}

int cci_cuda_segment_reserve(void *ctx, int device, size_t size, uintptr_t *addr)
{
    driver_scope sc;
    if (enter(device, &sc))
        return CCI_EBACKEND;
    CUdeviceptr p = 0;
    CUresult r = cci_real_drv()->cuMemAlloc_v2(&p, size);
    leave(&sc);
    if (r == CUDA_SUCCESS) {
        *addr = (uintptr_t)p;
        return CCI_OK;
    }
    cci_log(CCI_LOG_DEBUG, "device %d: cuMemAlloc_v2(%zu) failed (CUresult %d)", device, size, r);
    return r == CUDA_ERROR_OUT_OF_MEMORY ? CCI_EOOM : CCI_EBACKEND;
}

int cci_cuda_segment_release(void *ctx, int device, uintptr_t addr, size_t size)
{
    driver_scope sc;
    if (enter(device, &sc))
        return CCI_EBACKEND;
    CUresult r = cci_real_drv()->cuMemFree_v2((CUdeviceptr)addr);
    leave(&sc);
    if (r != CUDA_SUCCESS)
        cci_log(CCI_LOG_DEBUG, "device %d: cuMemFree_v2(%#lx) failed (CUresult %d)", device,
                (unsigned long)addr, r);
    return r == CUDA_SUCCESS ? CCI_OK : CCI_EBACKEND;
}

size_t cci_cuda_capacity(void *ctx, int device)
{
    CUdevice d;
    size_t bytes = 0;
    if (cci_real_drv()->cuDeviceGet(&d, device) != CUDA_SUCCESS ||
        cci_real_drv()->cuDeviceTotalMem_v2(&bytes, d) != CUDA_SUCCESS)
        return 0;
    return bytes;
}

size_t cci_cuda_available(void *ctx, int device)
{
    (void)ctx;
    const cci_real_driver *drv = cci_real_drv();
    size_t free_b = 0, total_b = 0;
    driver_scope sc;
    if (!drv->cuMemGetInfo_v2 || enter(device, &sc))
        return SIZE_MAX;
    CUresult r = drv->cuMemGetInfo_v2(&free_b, &total_b);
    leave(&sc);
    return r == CUDA_SUCCESS ? free_b : SIZE_MAX;
}

int cci_cuda_synchronize(void *ctx, int device)
{
    // A context synchronisation during a capture would invalidate it (or be refused): report
    // failure instead, and the core keeps its deferred blocks waiting for a later batch.
    if (cci_capture_maybe_active())
        return CCI_EBACKEND;
    driver_scope sc;
    if (enter(device, &sc))
        return CCI_EBACKEND;
    CUresult r = cci_real_drv()->cuCtxSynchronize();
    leave(&sc);
    if (r != CUDA_SUCCESS)
        cci_log(CCI_LOG_DEBUG, "device %d: cuCtxSynchronize failed (CUresult %d)", device, r);
    return r == CUDA_SUCCESS ? CCI_OK : CCI_EBACKEND;
}

int cci_cuda_backend_init(void)
{
    CUresult r = cci_real_drv()->cuInit(0);
    if (r != CUDA_SUCCESS) {
        cci_log(CCI_LOG_ERROR, "cuInit failed (CUresult %d); libccinterpose disabled (pass-through)", r);
        return -1;
    }
    return 0;
}

void cci_cuda_context_drop(int device)
{
    pthread_mutex_lock(&primary_lock);
    CUcontext c = atomic_exchange(&cci__primary[device], NULL);
    if (c) {
        atomic_fetch_sub_explicit(&primaries_held, 1, memory_order_relaxed);
        CUdevice d;
        if (cci_real_drv()->cuDeviceGet(&d, device) == CUDA_SUCCESS)
            cci_real_drv()->cuDevicePrimaryCtxRelease_v2(d);
    }
    pthread_mutex_unlock(&primary_lock);
}

CUcontext cci_cuda_backend_primary(int device, int retain)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return NULL;
    return retain ? primary_ctx(device)
                  : atomic_load_explicit(&cci__primary[device], memory_order_acquire);
}

int cci_cuda_backend_primary_device(CUcontext ctx, int bound)
{
    for (int d = 0; ctx && d < bound && d < CCI_PL_MAX_DEVICES; d++) {
        if (atomic_load_explicit(&cci__primary[d], memory_order_acquire) == ctx)
            return d;
    }
    return -1;
}

void cci_cuda_context_atfork_child(void)
{
    pthread_mutex_init(&primary_lock, NULL);
    for (int i = 0; i < CCI_PL_MAX_DEVICES; i++)
        atomic_store(&cci__primary[i], NULL);
    atomic_store(&primaries_held, 0);
}

unsigned cci_cuda_backend_primaries(void)
{
    return atomic_load_explicit(&primaries_held, memory_order_relaxed);
}
