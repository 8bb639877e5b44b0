// SPDX-License-Identifier: MIT
// The real CUDA functions behind our hooks: one table for the runtime, one for the driver.
#ifndef CCI_PRELOAD_REAL_H
#define CCI_PRELOAD_REAL_H

#include <stdatomic.h>

#include "cuda_abi.h"

// ---- dlsym ----------------------------------------------------------------------------------
// The preload exports `dlsym` itself (dlsym_hook.c), so the public name is ourselves: every
// lookup the preload makes goes through glibc's own, found with dlvsym.
typedef void *(*cci_dlsym_fn)(void *handle, const char *name);

/// For the code on the path of every dlsym of the process: sanitizer runtimes resolve their
/// interceptors with dlsym (ours) while they start, before their shadow memory or interceptors
/// work. That code carries no instrumentation and calls no function a sanitizer intercepts.
#define CCI_NO_SANITIZE __attribute__((no_sanitize("address", "undefined", "thread")))

/// glibc's dlsym. Never NULL: if it cannot be found (not glibc), a function that finds nothing.
CCI_NO_SANITIZE cci_dlsym_fn cci_real_dlsym_fn(void);

/// glibc's dlsym called from the preload: RTLD_NEXT here means "after libccinterpose".
static inline void *cci_real_dlsym(void *handle, const char *name)
{
    return cci_real_dlsym_fn()(handle, name);
}

// Every runtime function we forward to. X(name, parameter list, argument list).
#define CCI_REAL_RUNTIME(X)                                                                  \
    X(cudaMalloc, (void **p, size_t size), (p, size))                                        \
    X(cudaFree, (void *p), (p))                                                              \
    X(cudaMallocAsync, (void **p, size_t size, cudaStream_t s), (p, size, s))                \
    X(cudaFreeAsync, (void *p, cudaStream_t s), (p, s))                                      \
    X(cudaMallocAsync_ptsz, (void **p, size_t size, cudaStream_t s), (p, size, s))           \
    X(cudaFreeAsync_ptsz, (void *p, cudaStream_t s), (p, s))                                 \
    X(cudaMemGetInfo, (size_t *free_b, size_t *total_b), (free_b, total_b))                  \
    X(cudaDeviceReset, (void), ())                                                           \
    X(cudaIpcGetMemHandle, (cudaIpcMemHandle_t *h, void *p), (h, p))                         \
    X(cudaGetDevice, (int *dev), (dev))                                                      \
    X(cudaGetDeviceCount, (int *n), (n))                                                     \
    X(cudaStreamGetDevice, (cudaStream_t s, int *dev), (s, dev))                             \
    X(cudaStreamIsCapturing, (cudaStream_t s, cudaStreamCaptureStatus *st), (s, st))         \
    X(cudaStreamBeginCapture, (cudaStream_t s, cudaStreamCaptureMode m), (s, m))             \
    X(cudaStreamBeginCapture_ptsz, (cudaStream_t s, cudaStreamCaptureMode m), (s, m))        \
    X(cudaStreamBeginCaptureToGraph,                                                         \
      (cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t *deps,                           \
       const cudaGraphEdgeData *edata, size_t ndeps, cudaStreamCaptureMode m),               \
      (s, g, deps, edata, ndeps, m))                                                         \
    X(cudaStreamBeginCaptureToGraph_ptsz,                                                    \
      (cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t *deps,                           \
       const cudaGraphEdgeData *edata, size_t ndeps, cudaStreamCaptureMode m),               \
      (s, g, deps, edata, ndeps, m))                                                         \
    X(cudaStreamEndCapture, (cudaStream_t s, cudaGraph_t *g), (s, g))                        \
    X(cudaStreamEndCapture_ptsz, (cudaStream_t s, cudaGraph_t *g), (s, g))

typedef struct cci_real_runtime {
#define CCI_X(name, params, args) cudaError_t(*name) params;
    CCI_REAL_RUNTIME(CCI_X)
#undef CCI_X
} cci_real_runtime;

extern cci_real_runtime cci__rt;
extern _Atomic int cci__rt_resolved;
const cci_real_runtime *cci__real_rt_resolve(void);

/// The runtime table. Never NULL, and no entry is NULL: a function the process does not have
/// answers cudaErrorInitializationError, so callers need no checks. Resolution happens on the
/// first call and is retried on later calls until cudaMalloc itself has been found (a libcudart
/// that an extension module loads RTLD_LOCAL may arrive after our first call).
static inline const cci_real_runtime *cci_real_rt(void)
{
    if (__builtin_expect(atomic_load_explicit(&cci__rt_resolved, memory_order_acquire), 1))
        return &cci__rt;
    return cci__real_rt_resolve();
}

// Driver entry points, by their exported (versioned-ABI) names: we call them directly and never
// through a resolver, so a later driver-level hook of ours cannot be reached from here.
#define CCI_REAL_DRIVER(X)                                                                   \
    X(cuInit, (unsigned flags))                                                              \
    X(cuDeviceGet, (CUdevice * dev, int ordinal))                                            \
    X(cuDeviceTotalMem_v2, (size_t * bytes, CUdevice dev))                                   \
    X(cuDevicePrimaryCtxRetain, (CUcontext * ctx, CUdevice dev))                             \
    X(cuDevicePrimaryCtxRelease_v2, (CUdevice dev))                                          \
    X(cuCtxPushCurrent_v2, (CUcontext ctx))                                                  \
    X(cuCtxPopCurrent_v2, (CUcontext * ctx))                                                 \
    X(cuCtxSynchronize, (void))                                                              \
    X(cuMemAlloc_v2, (CUdeviceptr * dptr, size_t size))                                      \
    X(cuMemFree_v2, (CUdeviceptr dptr))                                                      \
    X(cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode * mode))

typedef struct cci_real_driver {
#define CCI_X(name, params) CUresult(*name) params;
    CCI_REAL_DRIVER(CCI_X)
#undef CCI_X
} cci_real_driver;

/// Loads the driver table from libcuda.so.1 (the copy already loaded, else a fresh dlopen).
/// Returns 0 when every entry but cuThreadExchangeStreamCaptureMode (optional, may stay NULL)
/// was found, else -1 after one error line naming what is missing.
int cci_real_drv_load(void);
/// The driver table; valid after cci_real_drv_load returned 0.
extern cci_real_driver cci_real_drv;

#endif
