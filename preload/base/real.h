// SPDX-License-Identifier: MIT
// The one table of the real CUDA functions behind our hooks: glibc's dlsym, the runtime's
// functions and the driver's, each list marked with what happens when an entry is missing.
// Everything is found with dlsym, never by linking (real.c says why), and loaded in real.c only.
#ifndef CCI_PRELOAD_REAL_H
#define CCI_PRELOAD_REAL_H

#include <stdatomic.h>

#include "cuda_abi.h"
#include "export.h"
#include "cuda_abi_vmm.h"

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

// ---- the stream registry and the fences: the runtime entry points that create or destroy
// streams or enable peer access. Hooked only to keep the stream registry (serve/stream_rule.c, cuda/stream_registry.c)
// up to date; each forwards with the real answer. OPTIONAL: a missing one answers the stub's
// cudaErrorInitializationError, as the program's own call would fail without a runtime.
#define CCI_REAL_RUNTIME_STREAMS(X)                                                          \
    X(cudaStreamCreate, OPTIONAL, (cudaStream_t * s), (s))                                   \
    X(cudaStreamCreateWithFlags, OPTIONAL, (cudaStream_t * s, unsigned flags), (s, flags))   \
    X(cudaStreamCreateWithPriority, OPTIONAL, (cudaStream_t * s, unsigned flags, int prio),  \
      (s, flags, prio))                                                                      \
    X(cudaStreamDestroy, OPTIONAL, (cudaStream_t s), (s))                                    \
    X(cudaDeviceEnablePeerAccess, OPTIONAL, (int peer, unsigned flags), (peer, flags))
// ---- end of the stream registry's and fences' runtime entry points

// ---- pinned host memory (serve/host_cache.c): the runtime entry points the pinned cache
// hooks (cudaHostAlloc & co.) or calls (cudaHostRegister). OPTIONAL: a missing one answers the
// stub's cudaErrorInitializationError, as the program's own call would fail without a runtime.
#define CCI_REAL_RUNTIME_HOST(X)                                                             \
    X(cudaHostAlloc, OPTIONAL, (void **p, size_t size, unsigned flags), (p, size, flags))    \
    X(cudaMallocHost, OPTIONAL, (void **p, size_t size), (p, size))                          \
    X(cudaFreeHost, OPTIONAL, (void *p), (p))                                                \
    X(cudaHostRegister, OPTIONAL, (void *p, size_t size, unsigned flags), (p, size, flags))  \
    X(cudaHostUnregister, OPTIONAL, (void *p), (p))                                          \
    X(cudaHostGetDevicePointer, OPTIONAL, (void **pdev, void *host, unsigned flags),         \
      (pdev, host, flags))                                                                   \
    X(cudaHostGetFlags, OPTIONAL, (unsigned *flags, void *host), (flags, host))
// ---- end of the pinned host memory's runtime entry points

// ---- the runtime (libcudart) ----------------------------------------------------------------
// X(name, need, parameter list, argument list). A missing entry of either kind answers
// cudaErrorInitializationError (a stub), so callers never check.
//   REQUIRED: every CUDA runtime has it; a library is taken as the runtime only once all of them
//             were found (until then the lookup is retried on the next call).
//   OPTIONAL: newer than some runtime we support (stream-ordered allocation 11.2, per-thread
//             entry points, capture to a graph 12.3, cudaStreamGetDevice 12.8) or not on every
//             platform (IPC).
#define CCI_REAL_RUNTIME(X)                                                                  \
    X(cudaMalloc, REQUIRED, (void **p, size_t size), (p, size))                              \
    X(cudaFree, REQUIRED, (void *p), (p))                                                    \
    X(cudaMemGetInfo, REQUIRED, (size_t *free_b, size_t *total_b), (free_b, total_b))        \
    X(cudaDeviceReset, REQUIRED, (void), ())                                                 \
    X(cudaGetDevice, REQUIRED, (int *dev), (dev))                                            \
    X(cudaGetDeviceCount, REQUIRED, (int *n), (n))                                           \
    X(cudaSetDevice, REQUIRED, (int dev), (dev))                                             \
    X(cudaMallocAsync, OPTIONAL, (void **p, size_t size, cudaStream_t s), (p, size, s))      \
    X(cudaFreeAsync, OPTIONAL, (void *p, cudaStream_t s), (p, s))                            \
    X(cudaMallocAsync_ptsz, OPTIONAL, (void **p, size_t size, cudaStream_t s), (p, size, s)) \
    X(cudaFreeAsync_ptsz, OPTIONAL, (void *p, cudaStream_t s), (p, s))                       \
    X(cudaIpcGetMemHandle, OPTIONAL, (cudaIpcMemHandle_t *h, void *p), (h, p))               \
    X(cudaIpcOpenMemHandle, OPTIONAL, (void **p, cudaIpcMemHandle_t h, unsigned flags),       \
      (p, h, flags))                                                                         \
    X(cudaIpcCloseMemHandle, OPTIONAL, (void *p), (p))                                       \
    X(cudaStreamGetDevice, OPTIONAL, (cudaStream_t s, int *dev), (s, dev))                   \
    X(cudaStreamIsCapturing, OPTIONAL, (cudaStream_t s, cudaStreamCaptureStatus *st), (s, st)) \
    X(cudaStreamBeginCapture, OPTIONAL, (cudaStream_t s, cudaStreamCaptureMode m), (s, m))   \
    X(cudaStreamBeginCapture_ptsz, OPTIONAL, (cudaStream_t s, cudaStreamCaptureMode m),      \
      (s, m))                                                                                \
    X(cudaStreamBeginCaptureToGraph, OPTIONAL,                                               \
      (cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t *deps,                           \
       const cudaGraphEdgeData *edata, size_t ndeps, cudaStreamCaptureMode m),               \
      (s, g, deps, edata, ndeps, m))                                                         \
    X(cudaStreamBeginCaptureToGraph_ptsz, OPTIONAL,                                          \
      (cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t *deps,                           \
       const cudaGraphEdgeData *edata, size_t ndeps, cudaStreamCaptureMode m),               \
      (s, g, deps, edata, ndeps, m))                                                         \
    X(cudaStreamEndCapture, OPTIONAL, (cudaStream_t s, cudaGraph_t *g), (s, g))              \
    X(cudaStreamEndCapture_ptsz, OPTIONAL, (cudaStream_t s, cudaGraph_t *g), (s, g))        \
    CCI_REAL_RUNTIME_STREAMS(X)                                                              \
    X(cudaMallocPitch, OPTIONAL, (void **p, size_t *pitch, size_t w, size_t h), (p, pitch, w, h)) \
    X(cudaMalloc3D, OPTIONAL, (struct cudaPitchedPtr * pp, struct cudaExtent e), (pp, e))       \
    X(cudaMallocManaged, OPTIONAL, (void **p, size_t size, unsigned flags), (p, size, flags)) \
    X(cudaMallocFromPoolAsync, OPTIONAL, (void **p, size_t size, cudaMemPool_t pool, cudaStream_t s), \
      (p, size, pool, s))                                                                             \
    CCI_REAL_RUNTIME_HOST(X)

typedef struct cci_real_runtime {
#define CCI_X(name, need, params, args) cudaError_t(*name) params;
    CCI_REAL_RUNTIME(CCI_X)
#undef CCI_X
} cci_real_runtime;

extern cci_real_runtime cci__rt;
extern _Atomic int cci__rt_resolved;
const cci_real_runtime *cci__real_rt_resolve(void);

/// The runtime's functions. Never NULL, and no entry is NULL (see CCI_REAL_RUNTIME). Resolution
/// happens on the first call and is retried on later calls until the runtime has been found (a
/// libcudart that an extension module loads RTLD_LOCAL may arrive after our first call).
static inline const cci_real_runtime *cci_real_rt(void)
{
    if (__builtin_expect(atomic_load_explicit(&cci__rt_resolved, memory_order_acquire), 1))
        return &cci__rt;
    return cci__real_rt_resolve();
}

// ---- the driver (libcuda) -------------------------------------------------------------------
// By their exported (ABI-versioned) names, called directly and never through a resolver, so no
// driver-level wrapper of ours is ever reached from here. X(name, need, parameter list, argument
// list); a missing entry of either kind is NULL.
//   REQUIRED: the allocators' device backend (backend_cuda.c) needs it; without it
//             cci_real_drv_load fails with one error line and the layer passes through.
//   OPTIONAL: whoever calls it checks for NULL: a wrapper answers CUDA_ERROR_NOT_INITIALIZED, a
//             helper question falls back to the runtime or to "not ours".

// ---- the stream registry and the fences: driver entries -------------------------------------
// An event handle (the ABI's CUevent; cudaEvent_t is the same pointer).
typedef struct CUevent_st *CUevent;
#define CCI_CU_STREAM_LEGACY ((CUstream)0x1)
#define CCI_CU_STREAM_NON_BLOCKING 0x1u
#define CCI_CU_EVENT_DISABLE_TIMING 0x2u
#define CCI_CUDA_ERROR_NOT_READY 600
#define CCI_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED 900

/// Wrapped (part of CCI_REAL_DRIVER_WRAPPED, so the resolver and the dlsym hook hand out ours):
/// stream creation and destruction below the runtime (NCCL, XLA, static cudart) and peer access,
/// observed for the stream rule (serve/stream_rule.c, cuda/stream_registry.c). OPTIONAL: a wrapper whose real function is
/// missing answers CUDA_ERROR_NOT_INITIALIZED.
#define CCI_REAL_DRIVER_WRAPPED_STREAMS(X) CCI_REAL_DRIVER_WRAPPED_STREAMS_LIST(X)
#define CCI_REAL_DRIVER_WRAPPED_STREAMS_LIST(X)                                              \
    X(cuStreamCreate, OPTIONAL, (CUstream * s, unsigned flags), (s, flags))                  \
    X(cuStreamCreateWithPriority, OPTIONAL, (CUstream * s, unsigned flags, int prio),        \
      (s, flags, prio))                                                                      \
    X(cuStreamDestroy, OPTIONAL, (CUstream s), (s))                                          \
    X(cuStreamDestroy_v2, OPTIONAL, (CUstream s), (s))                                       \
    X(cuCtxEnablePeerAccess, OPTIONAL, (CUcontext peer, unsigned flags), (peer, flags))      \
    X(cuStreamBeginCapture, OPTIONAL, (CUstream s), (s))                                     \
    X(cuStreamBeginCapture_ptsz, OPTIONAL, (CUstream s), (s))                                \
    X(cuStreamBeginCapture_v2, OPTIONAL, (CUstream s, CUstreamCaptureMode m), (s, m))        \
    X(cuStreamBeginCapture_v2_ptsz, OPTIONAL, (CUstream s, CUstreamCaptureMode m), (s, m))   \
    X(cuStreamBeginCaptureToGraph, OPTIONAL,                                                 \
      (CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edata,         \
       size_t ndeps, CUstreamCaptureMode m),                                                 \
      (s, g, deps, edata, ndeps, m))                                                         \
    X(cuStreamBeginCaptureToGraph_ptsz, OPTIONAL,                                            \
      (CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edata,         \
       size_t ndeps, CUstreamCaptureMode m),                                                 \
      (s, g, deps, edata, ndeps, m))                                                         \
    X(cuStreamEndCapture, OPTIONAL, (CUstream s, CUgraph * g), (s, g))                       \
    X(cuStreamEndCapture_ptsz, OPTIONAL, (CUstream s, CUgraph * g), (s, g))

/// Called by the CUDA fence group (cuda/fence_*.c). OPTIONAL: without all of the event
/// calls the backend offers no fences and the core synchronises the device instead.
#define CCI_REAL_DRIVER_CALLED_FENCES(X)                                                     \
    X(cuEventCreate, OPTIONAL, (CUevent * e, unsigned flags), (e, flags))                    \
    X(cuEventRecord, OPTIONAL, (CUevent e, CUstream s), (e, s))                              \
    X(cuEventQuery, OPTIONAL, (CUevent e), (e))                                              \
    X(cuEventSynchronize, OPTIONAL, (CUevent e), (e))                                        \
    X(cuEventDestroy_v2, OPTIONAL, (CUevent e), (e))                                         \
    X(cuStreamQuery, OPTIONAL, (CUstream s), (s))                                            \
    X(cuStreamSynchronize, OPTIONAL, (CUstream s), (s))                                      \
    X(cuStreamWaitEvent, OPTIONAL, (CUstream s, CUevent e, unsigned flags), (s, e, flags))   \
    X(cuCtxRecordEvent, OPTIONAL, (CUcontext c, CUevent e), (c, e))                          \
    X(cuCtxWaitEvent, OPTIONAL, (CUcontext c, CUevent e), (c, e))
// ---- end of the stream registry's and fences' driver entries

/// Pinned host memory (serve/host_cache.c): the driver entry points the pinned cache wraps at
/// the driver level. OPTIONAL: a wrapper whose real function is missing answers
/// CUDA_ERROR_NOT_INITIALIZED.
#define CCI_REAL_DRIVER_WRAPPED_HOST(X)                                                      \
    X(cuMemHostAlloc, OPTIONAL, (void **pp, size_t size, unsigned flags), (pp, size, flags)) \
    X(cuMemAllocHost_v2, OPTIONAL, (void **pp, size_t size), (pp, size))                     \
    X(cuMemFreeHost, OPTIONAL, (void *p), (p))                                               \
    X(cuMemHostGetDevicePointer_v2, OPTIONAL, (CUdeviceptr * pdptr, void *p, unsigned flags), \
      (pdptr, p, flags))                                                                     \
    X(cuMemHostGetFlags, OPTIONAL, (unsigned *flags, void *p), (flags, p))
/// Called by the pinned cache's register path (pinned_use_cuda_host_register). OPTIONAL.
#define CCI_REAL_DRIVER_CALLED_HOST(X)                                                       \
    X(cuMemHostRegister_v2, OPTIONAL, (void *p, size_t size, unsigned flags), (p, size, flags)) \
    X(cuMemHostUnregister, OPTIONAL, (void *p), (p))

/// The virtual-memory calls, wrapped too (serve/program_vmm.c keeps the program's own mappings for
/// reuse); the backend's VMM group (cuda/vmm.c) calls the real ones. OPTIONAL: the backend offers
/// CCI_CAP_VMM only when it found every one it needs; a wrapper whose real function is missing
/// answers CUDA_ERROR_NOT_INITIALIZED.
#define CCI_REAL_DRIVER_WRAPPED_VMM(X)                                                       \
    X(cuMemAddressReserve, OPTIONAL,                                                         \
      (CUdeviceptr * ptr, size_t size, size_t align, CUdeviceptr addr,                       \
       unsigned long long flags),                                                            \
      (ptr, size, align, addr, flags))                                                       \
    X(cuMemAddressFree, OPTIONAL, (CUdeviceptr ptr, size_t size), (ptr, size))               \
    X(cuMemCreate, OPTIONAL,                                                                 \
      (CUmemGenericAllocationHandle * h, size_t size, const CUmemAllocationProp *prop,       \
       unsigned long long flags),                                                            \
      (h, size, prop, flags))                                                                \
    X(cuMemRelease, OPTIONAL, (CUmemGenericAllocationHandle h), (h))                         \
    X(cuMemMap, OPTIONAL,                                                                    \
      (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,          \
       unsigned long long flags),                                                            \
      (ptr, size, offset, h, flags))                                                         \
    X(cuMemUnmap, OPTIONAL, (CUdeviceptr ptr, size_t size), (ptr, size))                     \
    X(cuMemSetAccess, OPTIONAL,                                                              \
      (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count),             \
      (ptr, size, desc, count))                                                              \
    X(cuMemRetainAllocationHandle, OPTIONAL, (CUmemGenericAllocationHandle * h, void *addr), \
      (h, addr))                                                                             \
    X(cuMemExportToShareableHandle, OPTIONAL,                                                \
      (void *shareable, CUmemGenericAllocationHandle h, int type, unsigned long long flags), \
      (shareable, h, type, flags))                                                           \
    X(cuMemGetHandleForAddressRange, OPTIONAL,                                               \
      (void *handle, CUdeviceptr ptr, size_t size, int type, unsigned long long flags),      \
      (handle, ptr, size, type, flags))                                                      \
    X(cuMulticastBindMem, OPTIONAL,                                                          \
      (CUmemGenericAllocationHandle mc, size_t mc_offset, CUmemGenericAllocationHandle h,    \
       size_t offset, size_t size, unsigned long long flags),                                \
      (mc, mc_offset, h, offset, size, flags))                                               \
    X(cuMulticastBindAddr, OPTIONAL,                                                         \
      (CUmemGenericAllocationHandle mc, size_t mc_offset, CUdeviceptr ptr, size_t size,      \
       unsigned long long flags),                                                            \
      (mc, mc_offset, ptr, size, flags))

/// Driver functions that our driver-level wrappers (hooks_driver.c, resolver.c) stand in for.
/// Only the exported names of the ABIs we implement: cuMemAlloc_v2 but never the 32-bit
/// cuMemAlloc, and both spellings of the teardown calls (their signatures agree).
#define CCI_REAL_DRIVER_WRAPPED(X)                                                           \
    X(cuMemAlloc_v2, REQUIRED, (CUdeviceptr * dptr, size_t size), (dptr, size))              \
    X(cuMemFree_v2, REQUIRED, (CUdeviceptr dptr), (dptr))                                    \
    X(cuMemAllocAsync, OPTIONAL, (CUdeviceptr * dptr, size_t size, CUstream s),              \
      (dptr, size, s))                                                                       \
    X(cuMemAllocAsync_ptsz, OPTIONAL, (CUdeviceptr * dptr, size_t size, CUstream s),         \
      (dptr, size, s))                                                                       \
    X(cuMemFreeAsync, OPTIONAL, (CUdeviceptr dptr, CUstream s), (dptr, s))                   \
    X(cuMemFreeAsync_ptsz, OPTIONAL, (CUdeviceptr dptr, CUstream s), (dptr, s))              \
    X(cuMemGetInfo_v2, OPTIONAL, (size_t * free_b, size_t * total_b), (free_b, total_b))     \
    X(cuMemGetAddressRange_v2, OPTIONAL, (CUdeviceptr * base, size_t * size, CUdeviceptr dptr), \
      (base, size, dptr))                                                                    \
    X(cuIpcGetMemHandle, OPTIONAL, (CUipcMemHandle * h, CUdeviceptr dptr), (h, dptr))        \
    X(cuIpcOpenMemHandle, OPTIONAL, (CUdeviceptr * dptr, CUipcMemHandle h, unsigned flags),   \
      (dptr, h, flags))                                                                      \
    X(cuIpcOpenMemHandle_v2, OPTIONAL, (CUdeviceptr * dptr, CUipcMemHandle h, unsigned flags), \
      (dptr, h, flags))                                                                      \
    X(cuIpcCloseMemHandle, OPTIONAL, (CUdeviceptr dptr), (dptr))                             \
    X(cuDevicePrimaryCtxReset, OPTIONAL, (CUdevice dev), (dev))                              \
    X(cuDevicePrimaryCtxReset_v2, OPTIONAL, (CUdevice dev), (dev))                           \
    X(cuCtxDestroy, OPTIONAL, (CUcontext ctx), (ctx))                                        \
    X(cuCtxDestroy_v2, OPTIONAL, (CUcontext ctx), (ctx))                                     \
    X(cuGetProcAddress, OPTIONAL,                                                            \
      (const char *symbol, void **pfn, int cuda_version, cuuint64_t flags),                  \
      (symbol, pfn, cuda_version, flags))                                                    \
    X(cuGetProcAddress_v2, OPTIONAL,                                                         \
      (const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,                   \
       CUdriverProcAddressQueryResult *status),                                              \
      (symbol, pfn, cuda_version, flags, status))                                            \
    CCI_REAL_DRIVER_WRAPPED_STREAMS(X)                                                       \
    X(cuMemAllocPitch_v2, OPTIONAL,                                                          \
      (CUdeviceptr * dptr, size_t * pitch, size_t w, size_t h, unsigned elem),               \
      (dptr, pitch, w, h, elem))                                                             \
    X(cuMemAllocManaged, OPTIONAL, (CUdeviceptr * dptr, size_t size, unsigned flags),         \
      (dptr, size, flags))                                                                   \
    X(cuMemAllocFromPoolAsync, OPTIONAL,                                                     \
      (CUdeviceptr * dptr, size_t size, CUmemoryPool pool, CUstream s), (dptr, size, pool, s)) \
    X(cuMemAllocFromPoolAsync_ptsz, OPTIONAL,                                                \
      (CUdeviceptr * dptr, size_t size, CUmemoryPool pool, CUstream s), (dptr, size, pool, s)) \
    X(cuMemPoolGetAttribute, OPTIONAL, (CUmemoryPool pool, int attr, void *value),           \
      (pool, attr, value))                                                                   \
    X(cuMemPoolSetAttribute, OPTIONAL, (CUmemoryPool pool, int attr, void *value),           \
      (pool, attr, value))                                                                   \
    X(cuMemPoolTrimTo, OPTIONAL, (CUmemoryPool pool, size_t keep), (pool, keep))             \
    CCI_REAL_DRIVER_WRAPPED_HOST(X)                                                          \
    CCI_REAL_DRIVER_WRAPPED_VMM(X)

/// Driver functions we only call: the device backend's, and the questions the wrappers ask.
#define CCI_REAL_DRIVER_CALLED(X)                                                            \
    X(cuInit, REQUIRED, (unsigned flags), (flags))                                           \
    X(cuDeviceGet, REQUIRED, (CUdevice * dev, int ordinal), (dev, ordinal))                  \
    X(cuDeviceTotalMem_v2, REQUIRED, (size_t * bytes, CUdevice dev), (bytes, dev))           \
    X(cuDevicePrimaryCtxRetain, REQUIRED, (CUcontext * ctx, CUdevice dev), (ctx, dev))       \
    X(cuDevicePrimaryCtxRelease_v2, REQUIRED, (CUdevice dev), (dev))                         \
    X(cuCtxPushCurrent_v2, REQUIRED, (CUcontext ctx), (ctx))                                 \
    X(cuCtxPopCurrent_v2, REQUIRED, (CUcontext * ctx), (ctx))                                \
    X(cuCtxSynchronize, REQUIRED, (void), ())                                                \
    X(cuThreadExchangeStreamCaptureMode, OPTIONAL, (CUstreamCaptureMode * mode), (mode))     \
    X(cuCtxGetCurrent, OPTIONAL, (CUcontext * ctx), (ctx))                                   \
    X(cuDeviceGetCount, OPTIONAL, (int *count), (count))                                     \
    X(cuDriverGetVersion, OPTIONAL, (int *version), (version))                               \
    X(cuCtxGetDevice, OPTIONAL, (CUdevice * dev), (dev))                                     \
    X(cuDevicePrimaryCtxGetState, OPTIONAL, (CUdevice dev, unsigned *flags, int *active),    \
      (dev, flags, active))                                                                  \
    X(cuStreamIsCapturing, OPTIONAL, (CUstream s, CUstreamCaptureStatus * st), (s, st))      \
    X(cuStreamIsCapturing_ptsz, OPTIONAL, (CUstream s, CUstreamCaptureStatus * st), (s, st)) \
    X(cuStreamGetCtx, OPTIONAL, (CUstream s, CUcontext * ctx), (s, ctx))                     \
    CCI_REAL_DRIVER_CALLED_FENCES(X)                                                         \
    X(cuDeviceGetDefaultMemPool, OPTIONAL, (CUmemoryPool * pool, CUdevice dev), (pool, dev)) \
    X(cuPointerGetAttribute, OPTIONAL, (void *data, int attr, CUdeviceptr ptr), (data, attr, ptr)) \
    CCI_REAL_DRIVER_CALLED_HOST(X)

// ---- VMM block (cuda/vmm.c) -----------------------------------------------------------------
/// The virtual-memory API behind expandable_segments / compact_segments. All OPTIONAL (CUDA
/// 10.2+; cuDeviceGetAttribute is older but only this backend asks it): the backend offers
/// CCI_CAP_VMM only when every entry but cuDeviceGetAttribute was found.
#define CCI_REAL_DRIVER_VMM(X)                                                               \
    X(cuDeviceGetAttribute, OPTIONAL, (int *value, CUdevice_attribute attr, CUdevice dev),   \
      (value, attr, dev))                                                                    \
    X(cuMemGetAllocationGranularity, OPTIONAL,                                               \
      (size_t * granularity, const CUmemAllocationProp *prop,                                \
       CUmemAllocationGranularity_flags option),                                             \
      (granularity, prop, option))                                                           \
    X(cuMemImportFromShareableHandle, OPTIONAL,                                              \
      (CUmemGenericAllocationHandle * h, void *shareable, int type), (h, shareable, type))
// ---- end of the VMM block -------------------------------------------------------------------

typedef struct cci_real_driver {
#define CCI_X(name, need, params, args) CUresult(*name) params;
    CCI_REAL_DRIVER_WRAPPED(CCI_X)
    CCI_REAL_DRIVER_CALLED(CCI_X)
    CCI_REAL_DRIVER_VMM(CCI_X)
#undef CCI_X
} cci_real_driver;

// Hidden, as the library defines them (export.h): the wrappers read both on every call, and an
// extern declaration of default visibility costs each read a load from the GOT.
extern cci_real_driver cci__drv CCI_HIDDEN;
extern _Atomic int cci__drv_state CCI_HIDDEN;
enum { CCI_DRV_EMPTY, CCI_DRV_FILLING, CCI_DRV_READY };
const cci_real_driver *cci__real_drv_find(const void *hint);

/// The driver's functions; entries it lacks are NULL, and every entry is NULL while no driver
/// library is loaded yet (asked again on the next call). `hint` is any address inside the driver
/// library (a function the real dlsym or resolver just returned), or NULL for libcuda.so.1 as
/// loaded. The first driver library found is the one for the rest of the process, for the
/// wrappers and the device backend alike. Lock-free and never blocking (real.c says why): safe
/// from any thread, inside a library constructor, before our initialisation.
static inline const cci_real_driver *cci_real_drv_from(const void *hint)
{
    if (__builtin_expect(atomic_load_explicit(&cci__drv_state, memory_order_acquire) ==
                             CCI_DRV_READY, 1))
        return &cci__drv;
    return cci__real_drv_find(hint);
}

static inline const cci_real_driver *cci_real_drv(void)
{
    return cci_real_drv_from(NULL);
}

/// At our initialisation: finds the driver as cci_real_drv does, else loads libcuda.so.1, and
/// checks the REQUIRED entries. 0, or -1 after one error line (no driver, or the first required
/// entry it lacks).
int cci_real_drv_load(void);

#endif
