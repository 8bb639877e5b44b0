// SPDX-License-Identifier: MIT
/*
 * Fake CUDA runtime (libcudart.so.13), built on the fake driver.
 *
 * Like the real runtime, it reaches the driver through pointers looked up in
 * the libcuda handle, not through its own PLT: an LD_PRELOAD library that
 * interposes cuMemAlloc_v2 therefore does NOT see the driver calls made
 * inside cudaMalloc, exactly as with NVIDIA's libcudart. (dlsym on a handle
 * searches that object and its dependencies only, never the preload.)
 *
 * This file holds initialisation, errors, devices, streams, events and graphs;
 * device memory, copies and fills are in fake_cudart_memory.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fake_cuda_runtime.h"
#include "fake_cuda_driver.h"
#include "fake_cudart_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>


/* The driver table (fake_cudart_internal.h lists it): looked up in the libcuda handle. */
struct fcrt_driver D;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static cudaError_t g_init_err;
static atomic_int g_unloading;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext g_primary[RT_MAX_DEVICES];
static bool g_retained[RT_MAX_DEVICES];

static _Thread_local cudaError_t tls_last;
static _Thread_local int tls_dev;

/* Teardown order mirrors the real runtime: once this library's destructor
 * has run, later callers (other libraries' destructors) are told so. */
__attribute__((destructor)) static void rt_fini(void)
{
    atomic_store(&g_unloading, 1);
}

static cudaError_t map_error(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_DEINITIALIZED: return cudaErrorCudartUnloading;
    case CUDA_ERROR_NO_DEVICE: return cudaErrorNoDevice;
    case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_ILLEGAL_STATE: return cudaErrorIllegalState;
    case CUDA_ERROR_NOT_FOUND: return cudaErrorSymbolNotFound;
    case CUDA_ERROR_NOT_READY: return cudaErrorNotReady;
    case CUDA_ERROR_ILLEGAL_ADDRESS: return cudaErrorIllegalAddress;
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: return cudaErrorPeerAccessUnsupported;
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: return cudaErrorPeerAccessAlreadyEnabled;
    case CUDA_ERROR_PEER_ACCESS_NOT_ENABLED: return cudaErrorPeerAccessNotEnabled;
    case CUDA_ERROR_CONTEXT_IS_DESTROYED: return cudaErrorContextIsDestroyed;
    case CUDA_ERROR_NOT_PERMITTED: return cudaErrorNotPermitted;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return cudaErrorStreamCaptureUnsupported;
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return cudaErrorStreamCaptureInvalidated;
    case CUDA_ERROR_STREAM_CAPTURE_MERGE: return cudaErrorStreamCaptureMerge;
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: return cudaErrorStreamCaptureUnmatched;
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED: return cudaErrorStreamCaptureUnjoined;
    case CUDA_ERROR_STREAM_CAPTURE_ISOLATION: return cudaErrorStreamCaptureIsolation;
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: return cudaErrorStreamCaptureImplicit;
    case CUDA_ERROR_CAPTURED_EVENT: return cudaErrorCapturedEvent;
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: return cudaErrorStreamCaptureWrongThread;
    default: return cudaErrorUnknown;
    }
}

/* Every runtime call funnels its result through here so the thread's last
 * error is kept like the real runtime does. "Not ready" is a status, not an
 * error, and is never recorded. */
static cudaError_t ret(cudaError_t e)
{
    if (e != cudaSuccess && e != cudaErrorNotReady)
        tls_last = e;
    return e;
}

static cudaError_t ret_drv(CUresult r)
{
    return ret(map_error(r));
}

static void rt_init(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        g_init_err = cudaErrorInsufficientDriver;
        return;
    }
#define LOAD_PTR(name)                                             \
    if (!(*(void **)&D.name = dlsym(h, #name))) {                  \
        fprintf(stderr, "fakecudart: libcuda lacks %s\n", #name);  \
        g_init_err = cudaErrorInsufficientDriver;                  \
        return;                                                    \
    }
    DRIVER_FUNCS(LOAD_PTR)
#undef LOAD_PTR
    g_init_err = map_error(D.cuInit(0));
}

static cudaError_t rt_init_check(void)
{
    if (atomic_load(&g_unloading))
        return cudaErrorCudartUnloading;
    pthread_once(&g_once, rt_init);
    return g_init_err;
}

/* Retains the device's primary context (once per process, like the runtime's
 * lazy context creation). */
cudaError_t fcrt_primary(int dev, CUcontext *out)
{
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (!g_retained[dev]) {
        r = D.cuDevicePrimaryCtxRetain(&g_primary[dev], dev);
        g_retained[dev] = r == CUDA_SUCCESS;
    }
    *out = g_primary[dev];
    pthread_mutex_unlock(&g_lock);
    return map_error(r);
}

/* ... and makes it current in the calling thread. */
static cudaError_t rt_activate(int dev)
{
    CUcontext c = NULL;
    cudaError_t e = fcrt_primary(dev, &c);
    return e ? e : map_error(D.cuCtxSetCurrent(c));
}

/*
 * Prologue of every call that needs a device: a context the thread already
 * has (set by the runtime or the driver API) is used as is, otherwise the
 * primary context of the thread's runtime device becomes current.
 */
static cudaError_t rt_enter(int *devp)
{
    cudaError_t e = rt_init_check();
    if (e)
        return e;
    CUcontext c = NULL;
    CUresult r = D.cuCtxGetCurrent(&c);
    if (r)
        return map_error(r);
    if (!c && (e = rt_activate(tls_dev)))
        return e;
    if (devp) {
        CUdevice d = 0;
        if ((r = D.cuCtxGetDevice(&d)))
            return map_error(r);
        *devp = d;
    }
    return cudaSuccess;
}

/* ---- for the runtime's other files (fake_cudart_internal.h) ---- */

cudaError_t fcrt_enter(int *devp) { return rt_enter(devp); }
cudaError_t fcrt_ret(cudaError_t e) { return ret(e); }
cudaError_t fcrt_ret_drv(CUresult r) { return ret_drv(r); }
cudaError_t fcrt_map_error(CUresult r) { return map_error(r); }

/* ------------------------------------------------------------------ */
/* Errors and versions                                                 */

RT_API cudaError_t cudaGetLastError(void)
{
    cudaError_t e = tls_last;
    tls_last = cudaSuccess;
    return e;
}

RT_API cudaError_t cudaPeekAtLastError(void)
{
    return tls_last;
}

static const struct {
    cudaError_t code;
    const char *name;
    const char *text;
} k_errors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorCudartUnloading, "cudaErrorCudartUnloading", "driver shutting down"},
    {cudaErrorInvalidPitchValue, "cudaErrorInvalidPitchValue", "invalid pitch argument"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorDeviceUninitialized, "cudaErrorDeviceUninitialized", "invalid device context"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation is not valid in the current state"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorPeerAccessUnsupported, "cudaErrorPeerAccessUnsupported", "peer access is not supported between these two devices"},
    {cudaErrorPeerAccessAlreadyEnabled, "cudaErrorPeerAccessAlreadyEnabled", "peer access is already enabled"},
    {cudaErrorPeerAccessNotEnabled, "cudaErrorPeerAccessNotEnabled", "peer access has not been enabled"},
    {cudaErrorContextIsDestroyed, "cudaErrorContextIsDestroyed", "context is destroyed"},
    {cudaErrorNotPermitted, "cudaErrorNotPermitted", "operation not permitted"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureMerge, "cudaErrorStreamCaptureMerge", "capture sequences merged"},
    {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched", "capture not initiated in this stream"},
    {cudaErrorStreamCaptureUnjoined, "cudaErrorStreamCaptureUnjoined", "capture sequence contains an unjoined fork"},
    {cudaErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation", "dependency crosses the capture boundary"},
    {cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit", "implicit dependency on a capturing stream"},
    {cudaErrorCapturedEvent, "cudaErrorCapturedEvent",
     "operation not permitted on an event last recorded in a capturing stream"},
    {cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
     "capture was not ended in the thread that began it"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

static const char *error_lookup(cudaError_t e, bool name)
{
    for (size_t i = 0; i < sizeof k_errors / sizeof k_errors[0]; i++)
        if (k_errors[i].code == e)
            return name ? k_errors[i].name : k_errors[i].text;
    return "unrecognized error code";
}

RT_API const char *cudaGetErrorString(cudaError_t error)
{
    return error_lookup(error, false);
}

RT_API const char *cudaGetErrorName(cudaError_t error)
{
    return error_lookup(error, true);
}

RT_API cudaError_t cudaDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return ret(cudaErrorInvalidValue);
    cudaError_t e = rt_init_check();
    if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) {
        *driverVersion = 0;
        return cudaSuccess;
    }
    if (e)
        return ret(e);
    return ret_drv(D.cuDriverGetVersion(driverVersion));
}

RT_API cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
    if (!runtimeVersion)
        return ret(cudaErrorInvalidValue);
    *runtimeVersion = CUDART_VERSION;
    return cudaSuccess;
}

static cudaError_t entry_point(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                               unsigned long long flags, enum cudaDriverEntryPointQueryResult *driverStatus,
                               bool ptsz)
{
    if (!symbol || !funcPtr)
        return ret(cudaErrorInvalidValue);
    cudaError_t e = rt_init_check();
    if (e)
        return ret(e);
    if (flags == cudaEnableDefault)
        flags = ptsz ? cudaEnablePerThreadDefaultStream : cudaEnableLegacyStream;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = D.cuGetProcAddress_v2(symbol, funcPtr, (int)cudaVersion, flags, &st);
    if (driverStatus)
        *driverStatus = (enum cudaDriverEntryPointQueryResult)st;
    return ret_drv(r);
}

RT_API cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                           enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus, false);
}

RT_API cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                                                enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus, true);
}

RT_API cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                                    unsigned long long flags,
                                                    enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus, false);
}

RT_API cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr,
                                                         unsigned int cudaVersion, unsigned long long flags,
                                                         enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus, true);
}

/* ------------------------------------------------------------------ */
/* Devices                                                             */

RT_API cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return ret(cudaErrorInvalidValue);
    cudaError_t e = rt_init_check();
    if (e) {
        *count = 0;
        return ret(e);
    }
    return ret_drv(D.cuDeviceGetCount(count));
}

RT_API cudaError_t cudaSetDevice(int device)
{
    cudaError_t e = rt_init_check();
    if (e)
        return ret(e);
    int n = 0;
    D.cuDeviceGetCount(&n);
    if (device < 0 || device >= n || device >= RT_MAX_DEVICES)
        return ret(cudaErrorInvalidDevice);
    tls_dev = device;
    return ret(rt_activate(device));
}

RT_API cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return ret(cudaErrorInvalidValue);
    cudaError_t e = rt_init_check();
    if (e)
        return ret(e);
    CUcontext c = NULL;
    D.cuCtxGetCurrent(&c);
    if (!c) {
        *device = tls_dev;
        return cudaSuccess;
    }
    CUdevice d;
    CUresult r = D.cuCtxGetDevice(&d);
    if (r)
        return ret_drv(r);
    *device = d;
    return cudaSuccess;
}

RT_API cudaError_t cudaDeviceSynchronize(void)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuCtxSynchronize());
}

/* The primary context is destroyed with all its memory; the next runtime call
 * would bring it back, which re-retaining right away models. */
RT_API cudaError_t cudaDeviceReset(void)
{
    int dev;
    ENTER_OR_RETURN(&dev);
    CUresult r = D.cuDevicePrimaryCtxReset_v2(dev);
    if (r)
        return ret_drv(r);
    pthread_mutex_lock(&g_lock);
    g_retained[dev] = false;
    pthread_mutex_unlock(&g_lock);
    return ret(rt_activate(dev));
}

/* ------------------------------------------------------------------ */
/* Streams, events, capture                                            */

RT_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    if (!pStream)
        return ret(cudaErrorInvalidValue);
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuStreamCreate(pStream, flags));
}

RT_API cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

RT_API cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuStreamDestroy_v2(stream));
}

RT_API cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuStreamSynchronize(stream));
}

RT_API cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuStreamQuery(stream));
}

RT_API cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
    if (!pCaptureStatus)
        return ret(cudaErrorInvalidValue);
    ENTER_OR_RETURN(NULL);
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = D.cuStreamIsCapturing(stream, &st);
    *pCaptureStatus = (enum cudaStreamCaptureStatus)st;
    return ret_drv(r);
}

RT_API cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuStreamBeginCapture_v2(stream, (CUstreamCaptureMode)mode));
}

RT_API cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                                 const cudaGraphNode_t *dependencies,
                                                 const cudaGraphEdgeData *dependencyData, size_t numDependencies,
                                                 enum cudaStreamCaptureMode mode)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuStreamBeginCaptureToGraph(stream, graph, (const CUgraphNode *)dependencies,
                                                 (const CUgraphEdgeData *)dependencyData, numDependencies,
                                                 (CUstreamCaptureMode)mode));
}

RT_API cudaError_t cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuGraphCreate(pGraph, flags));
}

RT_API cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    if (!pGraph)
        return ret(cudaErrorInvalidValue);
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuStreamEndCapture(stream, pGraph));
}

RT_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
    if (!pStream)
        return ret(cudaErrorInvalidValue);
    ENTER_OR_RETURN(NULL);
    (void)priority; /* orders nothing in the fake */
    return ret_drv(D.cuStreamCreate(pStream, flags));
}

RT_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuStreamWaitEvent(stream, event, flags));
}

RT_API cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuStreamWaitEvent_ptsz(stream, event, flags));
}

RT_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                        unsigned long long flags)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuGraphInstantiateWithFlags(pGraphExec, graph, flags));
}

RT_API cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuGraphLaunch(graphExec, stream));
}

RT_API cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuGraphLaunch_ptsz(graphExec, stream));
}

RT_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuGraphExecDestroy(graphExec));
}

RT_API cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuGraphDestroy(graph));
}

RT_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    if (!event)
        return ret(cudaErrorInvalidValue);
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuEventCreate(event, flags));
}

RT_API cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

RT_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuEventRecord(event, stream));
}

RT_API cudaError_t cudaEventQuery(cudaEvent_t event)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuEventQuery(event));
}

RT_API cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuEventSynchronize(event));
}

RT_API cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.cuEventDestroy_v2(event));
}

/* ------------------------------------------------------------------ */
/* Test-only API                                                       */

RT_API cudaError_t fakecuda_stream_hold(cudaStream_t s, int hold)
{
    ENTER_OR_RETURN(NULL);
    return ret_drv(D.fakecu_stream_hold(s, 0, hold));
}

RT_API void fakecuda_fail_alloc_at(unsigned long long n)
{
    fakecu_fail_alloc_at(n);
}

RT_API unsigned long long fakecuda_device_allocs(void)
{
    return fakecu_device_allocs();
}

RT_API unsigned long long fakecuda_device_frees(void)
{
    return fakecu_device_frees();
}

RT_API size_t fakecuda_used_bytes(int dev)
{
    return fakecu_used_bytes(dev);
}

RT_API size_t fakecuda_live_allocs(int dev)
{
    return fakecu_live_allocs(dev);
}

RT_API unsigned long long fakecuda_sync_calls(void)
{
    return fakecu_sync_calls();
}

RT_API unsigned long long fakecuda_ctx_sync_calls(void)
{
    return fakecu_ctx_sync_calls();
}

RT_API unsigned long long fakecuda_procaddress_calls(const char *name)
{
    return fakecu_procaddress_calls(name);
}

RT_API void *fakecuda_ipc_handle_base(const void *handle)
{
    return fakecu_ipc_handle_base(handle, NULL);
}

RT_API int fakecuda_capturing_any(void)
{
    return fakecu_capturing_any();
}

RT_API void fakecuda_reset_counters(void)
{
    fakecu_reset_counters();
}
