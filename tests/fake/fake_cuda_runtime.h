// SPDX-License-Identifier: MIT
/*
 * Runtime API subset implemented by the fake libcudart.so.13
 * (tests/fake/fake_cudart.c), plus the test-only fakecuda_* API it exports.
 *
 * Test programs include this instead of cuda_runtime.h. Enum values, handle
 * types and special stream handles match the real ABI, so a binary built
 * against this header makes the same calls an application built with nvcc
 * makes. It can be included together with fake_cuda_driver.h.
 *
 * Environment (read at the first call into libcuda):
 *   FAKECUDA_CAPACITY      bytes per device, suffix K/M/G/T (binary), default 1G
 *   FAKECUDA_DEVICES       0..8, default 1 (0: cuInit fails with NO_DEVICE)
 *   FAKECUDA_FAIL_ALLOC_AT N: the N-th allocation attempt fails with OOM
 *
 * Behaviour worth knowing when writing tests:
 *   - Device memory is host memory: tests may read/write it directly.
 *   - Every created stream, each device's legacy stream and each thread's
 *     per-thread stream has a worker thread; work is really asynchronous.
 *   - The legacy stream is implicitly ordered with blocking streams (created
 *     without cudaStreamNonBlocking, and per-thread streams), as in CUDA. Use
 *     cudaStreamNonBlocking streams to make reuse hazards observable.
 *   - cudaMemcpy/cudaMemset run on the legacy stream and return once done.
 *   - cudaFree/cuMemFree_v2 synchronise the device first; cudaFreeAsync frees
 *     (and uncharges) when the stream reaches it.
 *   - The runtime calls the driver through private pointers, so a preload that
 *     interposes cuMemAlloc_v2 does not see cudaMalloc's driver call.
 *   - fakecuda_stream_hold keeps a stream's new work queued until a
 *     synchronisation (or work that depends on it) demands it: a deterministic
 *     "GPU still busy" for hazard tests (tests/preload/hazard_streams.c).
 *   - Events, cudaStreamWaitEvent and graphs (capture records the stream's
 *     work, cudaGraphLaunch replays it as one job on the launch stream) follow
 *     the same ordering. The full model: fake_internal.h.
 */
#ifndef FAKE_CUDA_RUNTIME_H
#define FAKE_CUDA_RUNTIME_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUDART_VERSION 13000

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorCudartUnloading = 4,
    cudaErrorInvalidPitchValue = 12,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorDeviceUninitialized = 201,
    cudaErrorPeerAccessUnsupported = 217,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorSymbolNotFound = 500,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorPeerAccessAlreadyEnabled = 704,
    cudaErrorPeerAccessNotEnabled = 705,
    cudaErrorContextIsDestroyed = 709,
    cudaErrorNotPermitted = 800,
    cudaErrorNotSupported = 801,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureMerge = 902,
    cudaErrorStreamCaptureUnmatched = 903,
    cudaErrorStreamCaptureUnjoined = 904,
    cudaErrorStreamCaptureIsolation = 905,
    cudaErrorStreamCaptureImplicit = 906,
    cudaErrorCapturedEvent = 907,
    cudaErrorStreamCaptureWrongThread = 908,
    cudaErrorUnknown = 999
} cudaError_t;

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphNode_st *cudaGraphNode_t;
typedef struct cudaGraphEdgeData_st {
    unsigned char from_port, to_port, type, reserved[5];
} cudaGraphEdgeData;

#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01

#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaEventInterprocess 0x04

#define cudaMemAttachGlobal 0x01
#define cudaMemAttachHost 0x02
#define cudaMemAttachSingle 0x04

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2
};

enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2
};

enum cudaGetDriverEntryPointFlags {
    cudaEnableDefault = 0x0,
    cudaEnableLegacyStream = 0x1,
    cudaEnablePerThreadDefaultStream = 0x2
};

/* "Sufficent" is the real header's spelling. */
enum cudaDriverEntryPointQueryResult {
    cudaDriverEntryPointSuccess = 0,
    cudaDriverEntryPointSymbolNotFound = 1,
    cudaDriverEntryPointVersionNotSufficent = 2
};

#define CUDA_IPC_HANDLE_SIZE 64
typedef struct cudaIpcMemHandle_st {
    char reserved[CUDA_IPC_HANDLE_SIZE];
} cudaIpcMemHandle_t;
#define cudaIpcMemLazyEnablePeerAccess 0x01

/* ---- Memory ---- */
cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream);
cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream);
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream);
cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream);
cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags);
cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height);
struct cudaPitchedPtr {
    void *ptr;
    size_t pitch;
    size_t xsize;
    size_t ysize;
};
struct cudaExtent {
    size_t width;
    size_t height;
    size_t depth;
};
cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent);
/* Memory pools: the same handles, layouts and attribute numbers as the driver's. */
typedef struct CUmemPoolHandle_st *cudaMemPool_t;
struct cudaMemPoolProps {
    int allocType;   /* cudaMemAllocationTypePinned = 1 */
    int handleTypes;
    struct { int type; int id; } location; /* cudaMemLocationTypeDevice = 1 */
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
};
enum cudaMemPoolAttr {
    cudaMemPoolAttrReleaseThreshold = 4,
    cudaMemPoolAttrReservedMemCurrent = 5,
    cudaMemPoolAttrReservedMemHigh = 6,
    cudaMemPoolAttrUsedMemCurrent = 7,
    cudaMemPoolAttrUsedMemHigh = 8
};
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device);
cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *poolProps);
cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool);
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value);
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep);
cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total);
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr);
/* No handle ever opens (the fake's device memory is private to a process):
 * cudaErrorDeviceUninitialized for one this process made, as the real runtime
 * answers there, cudaErrorNotSupported for another process's,
 * cudaErrorInvalidValue for other bytes; closing: cudaErrorInvalidValue. */
cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags);
cudaError_t cudaIpcCloseMemHandle(void *devPtr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream);

/* Pinned host memory (fake_cudart_host.c over fake_host.c). */
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04
#define cudaHostRegisterDefault 0x00
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags);
cudaError_t cudaHostUnregister(void *ptr);
cudaError_t cudaHostGetFlags(unsigned int *pFlags, void *pHost);
cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags);

/* ---- Errors and versions ---- */
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);
cudaError_t cudaDriverGetVersion(int *driverVersion);
cudaError_t cudaRuntimeGetVersion(int *runtimeVersion);
/* Driver entry points via the driver's cuGetProcAddress_v2 (reached through
 * the runtime's private pointer, so interposing cuGetProcAddress* does not
 * see these; interpose these functions too). The plain variants use cudaVersion
 * 13000; in the _ptsz variants cudaEnableDefault means per-thread. */
cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                    enum cudaDriverEntryPointQueryResult *driverStatus);
cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                                         enum cudaDriverEntryPointQueryResult *driverStatus);
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *driverStatus);
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                                  unsigned long long flags,
                                                  enum cudaDriverEntryPointQueryResult *driverStatus);

/* ---- Devices ---- */
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);

/* Peer access and pointer attributes (fake_cudart_peer.c). */
cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice);
cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags);
cudaError_t cudaDeviceDisablePeerAccess(int peerDevice);

enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3
};

struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
    long reserved[8];
};

/* Device memory (a cuMemAlloc allocation or a mapped VMM range, interior
 * pointers included): type device, its device, devicePointer = ptr. Memory
 * CUDA does not know: cudaSuccess with type unregistered, device -2, the
 * pointer as hostPointer (CUDA 11 and later). */
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr);

/* ---- Streams, events, capture ---- */
cudaError_t cudaStreamCreate(cudaStream_t *pStream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t *dependencies,
                                          const cudaGraphEdgeData *dependencyData, size_t numDependencies,
                                          enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream);
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags);

/*
 * ---- Test-only API exported by the fake libcudart (not part of CUDA) ----
 */

/*
 * Enqueue on stream s (any handle the runtime accepts: 0, cudaStreamLegacy,
 * cudaStreamPerThread, a created stream): sleep delay_us, then memset(dst,
 * byte, n). Models a kernel still writing a buffer after the host moved on;
 * a buffer handed out again before that work ran ends up overwritten.
 * Aborts the process if the stream handle is invalid; other failures (e.g. a
 * capture conflict) become the thread's last error. On a capturing stream the
 * work is recorded into the graph and runs on each launch of it.
 */
void fakecuda_delayed_fill(void *dst, int byte, size_t n, cudaStream_t s, unsigned delay_us);
/* The same for a copy: sleep delay_us on stream s, then memcpy(dst, src, n). Models a copy from
 * pinned host memory still queued after the program freed the buffer. */
void fakecuda_delayed_copy(void *dst, const void *src, size_t n, cudaStream_t s, unsigned delay_us);

/* Holds work queued on s from now on (hold != 0) until a synchronisation or
 * dependent work demands it: see fakecu_stream_hold in fake_cuda_driver.h.
 * cudaStreamPerThread is the calling thread's per-thread stream. */
cudaError_t fakecuda_stream_hold(cudaStream_t s, int hold);

/* Forwarders to the fake driver's counters: see fakecu_* in fake_cuda_driver.h. */
void fakecuda_fail_alloc_at(unsigned long long n);
unsigned long long fakecuda_device_allocs(void);
unsigned long long fakecuda_device_frees(void);
size_t fakecuda_used_bytes(int dev);
size_t fakecuda_live_allocs(int dev);
unsigned long long fakecuda_sync_calls(void);
unsigned long long fakecuda_ctx_sync_calls(void);
unsigned long long fakecuda_procaddress_calls(const char *name);
void *fakecuda_ipc_handle_base(const void *handle);
int fakecuda_capturing_any(void);
void fakecuda_reset_counters(void);

#ifdef __cplusplus
}
#endif

#endif /* FAKE_CUDA_RUNTIME_H */
