// SPDX-License-Identifier: MIT
/*
 * Driver API subset implemented by the fake libcuda.so.1 (tests/fake/fake_cuda.c).
 *
 * Test programs include this instead of cuda.h. Numeric values and handle
 * types match the real ABI so code built against this header behaves the
 * same against the real driver. Unlike cuda.h, no macros rename the API:
 * the real exported names (cuMemAlloc_v2, ...) are declared directly, so a
 * test calls exactly the symbol an interposer sees.
 */
#ifndef FAKE_CUDA_DRIVER_H
#define FAKE_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAKECUDA_DRIVER_VERSION 13000

typedef enum cudaError_enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_CONTEXT_ALREADY_CURRENT = 202,
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_ILLEGAL_STATE = 401,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
    CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
    CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
    CUDA_ERROR_NOT_PERMITTED = 800,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
    CUDA_ERROR_STREAM_CAPTURE_MERGE = 902,
    CUDA_ERROR_STREAM_CAPTURE_UNMATCHED = 903,
    CUDA_ERROR_STREAM_CAPTURE_UNJOINED = 904,
    CUDA_ERROR_STREAM_CAPTURE_ISOLATION = 905,
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906,
    CUDA_ERROR_CAPTURED_EVENT = 907,
    CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908,
    CUDA_ERROR_UNKNOWN = 999
} CUresult;

typedef uint64_t cuuint64_t;
typedef uint32_t cuuint32_t;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphEdgeData_st {
    unsigned char from_port, to_port, type, reserved[5];
} CUgraphEdgeData;
typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;

#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

typedef enum CUstream_flags_enum {
    CU_STREAM_DEFAULT = 0x0,
    CU_STREAM_NON_BLOCKING = 0x1
} CUstream_flags;

typedef enum CUevent_flags_enum {
    CU_EVENT_DEFAULT = 0x0,
    CU_EVENT_BLOCKING_SYNC = 0x1,
    CU_EVENT_DISABLE_TIMING = 0x2,
    CU_EVENT_INTERPROCESS = 0x4
} CUevent_flags;

typedef enum CUmemAttach_flags_enum {
    CU_MEM_ATTACH_GLOBAL = 0x1,
    CU_MEM_ATTACH_HOST = 0x2,
    CU_MEM_ATTACH_SINGLE = 0x4
} CUmemAttach_flags;

typedef enum CUstreamCaptureStatus_enum {
    CU_STREAM_CAPTURE_STATUS_NONE = 0,
    CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
    CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2
} CUstreamCaptureStatus;

typedef enum CUstreamCaptureMode_enum {
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    CU_STREAM_CAPTURE_MODE_RELAXED = 2
} CUstreamCaptureMode;

typedef enum CUdriverProcAddress_flags_enum {
    CU_GET_PROC_ADDRESS_DEFAULT = 0,
    CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1 << 0,
    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1 << 1
} CUdriverProcAddress_flags;

typedef enum CUdriverProcAddressQueryResult_enum {
    CU_GET_PROC_ADDRESS_SUCCESS = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
} CUdriverProcAddressQueryResult;

#define CU_IPC_HANDLE_SIZE 64
typedef struct CUipcMemHandle_st {
    char reserved[CU_IPC_HANDLE_SIZE];
} CUipcMemHandle;
typedef enum CUipcMem_flags_enum {
    CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1
} CUipcMem_flags;

typedef void (*CUhostFn)(void *userData);

/* ---- Virtual memory management (the cuMem* "VMM" API, CUDA 10.2+) ---- */
typedef unsigned long long CUmemGenericAllocationHandle;

typedef enum CUmemAllocationType_enum {
    CU_MEM_ALLOCATION_TYPE_INVALID = 0x0,
    CU_MEM_ALLOCATION_TYPE_PINNED = 0x1
} CUmemAllocationType;

typedef enum CUmemAllocationHandleType_enum {
    CU_MEM_HANDLE_TYPE_NONE = 0x0,
    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1,
    CU_MEM_HANDLE_TYPE_WIN32 = 0x2,
    CU_MEM_HANDLE_TYPE_WIN32_KMT = 0x4,
    CU_MEM_HANDLE_TYPE_FABRIC = 0x8
} CUmemAllocationHandleType;

typedef enum CUmemLocationType_enum {
    CU_MEM_LOCATION_TYPE_INVALID = 0x0,
    CU_MEM_LOCATION_TYPE_DEVICE = 0x1,
    CU_MEM_LOCATION_TYPE_HOST = 0x2,
    CU_MEM_LOCATION_TYPE_HOST_NUMA = 0x3,
    CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT = 0x4
} CUmemLocationType;

typedef enum CUmemAccess_flags_enum {
    CU_MEM_ACCESS_FLAGS_PROT_NONE = 0x0,
    CU_MEM_ACCESS_FLAGS_PROT_READ = 0x1,
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3
} CUmemAccess_flags;

typedef enum CUmemAllocationGranularity_flags_enum {
    CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0,
    CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 0x1
} CUmemAllocationGranularity_flags;

typedef struct CUmemLocation_st {
    CUmemLocationType type;
    int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
    CUmemAllocationType type;
    CUmemAllocationHandleType requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
    CUmemLocation location;
    CUmemAccess_flags flags;
} CUmemAccessDesc;

/* ---- Memory pools (fake_pools.c) ---- */
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUmemPoolProps_st {
    CUmemAllocationType allocType;
    CUmemAllocationHandleType handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps;
typedef enum CUmemPool_attribute_enum {
    CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
    CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
    CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
    CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
    CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
    CU_MEMPOOL_ATTR_USED_MEM_HIGH
} CUmemPool_attribute;
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev);
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps);
CUresult cuMemPoolDestroy(CUmemoryPool pool);
CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);

/* ---- Initialisation, version, errors ---- */
CUresult cuInit(unsigned int Flags);
CUresult cuDriverGetVersion(int *driverVersion);
CUresult cuGetErrorString(CUresult error, const char **pStr);
CUresult cuGetErrorName(CUresult error, const char **pStr);
CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus);
/* The CUDA 11.3 entry point: same lookup, but it has no symbolStatus argument. */
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

/* ---- Devices and contexts ---- */
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
typedef int CUdevice_attribute;
CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev);
CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxDestroy_v2(CUcontext ctx);
CUresult cuCtxGetCurrent(CUcontext *pctx);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxPushCurrent_v2(CUcontext ctx);
CUresult cuCtxPopCurrent_v2(CUcontext *pctx);
CUresult cuCtxGetDevice(CUdevice *device);
CUresult cuCtxSynchronize(void);
/* CUDA 12.5: an event for all the work of a context (every stream) queued so
 * far, and all later work of a context (every stream, created later too) made
 * to wait for an event. Both refuse while a stream of the context captures,
 * and invalidate that capture, as the H100 showed (any capture mode).
 * FAKECUDA_CTX_RECORD_US=N: a record takes N us before it looks at the
 * streams (a capture begun meanwhile is met). */
CUresult cuCtxRecordEvent(CUcontext hCtx, CUevent hEvent);
CUresult cuCtxWaitEvent(CUcontext hCtx, CUevent hEvent);

/* ---- Memory ---- */
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total);
CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr);
CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr);
/* The fake's device memory is private to its process, so no handle ever
 * opens: one this process made answers CUDA_ERROR_INVALID_CONTEXT (what the
 * real driver answers in the exporting process), one another process made
 * (the exporter's pid is in the handle) CUDA_ERROR_NOT_SUPPORTED, any other
 * bytes CUDA_ERROR_INVALID_VALUE; *pdptr is left alone. cuIpcOpenMemHandle
 * is the CUDA 4.1 ABI of the same call (cuda.h renames it to _v2). Closing
 * answers CUDA_ERROR_INVALID_VALUE, as nothing was opened. */
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);
CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);
CUresult cuIpcCloseMemHandle(CUdeviceptr dptr);

/* ---- Virtual memory management (tests/fake/fake_vmm.c) ----
 * A physical allocation is a memfd; cuMemMap maps it MAP_SHARED at the
 * reserved address, so two mappings of one handle really alias. Reserved but
 * unmapped pages, and mapped pages before cuMemSetAccess, are PROT_NONE. */
CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option);
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr);

/* ---- Pointer attributes and peer access (fake_pointer.c) ----
 * A pointer inside a cuMemAlloc allocation or inside a mapped VMM range is
 * device memory of the allocation's (the physical page's) device; anything
 * else, a reserved but unmapped VMM address included, is unknown to the
 * driver: cuPointerGetAttribute answers CUDA_ERROR_INVALID_VALUE and
 * cuPointerGetAttributes fills zeros and succeeds, as the driver documents.
 * Attributes the fake does not model answer CUDA_ERROR_NOT_SUPPORTED. */
typedef enum CUpointer_attribute_enum {
    CU_POINTER_ATTRIBUTE_CONTEXT = 1,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3,
    CU_POINTER_ATTRIBUTE_HOST_POINTER = 4,
    CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
    CU_POINTER_ATTRIBUTE_MAPPED = 13
} CUpointer_attribute;

typedef enum CUmemorytype_enum {
    CU_MEMORYTYPE_HOST = 1,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEMORYTYPE_ARRAY = 3,
    CU_MEMORYTYPE_UNIFIED = 4
} CUmemorytype;

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr);
CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data,
                                CUdeviceptr ptr);
/* Peer access: any two distinct fake devices can reach each other. Enabling
 * lets the current context's device reach peerContext's device's cuMemAlloc
 * memory; VMM mappings still need cuMemSetAccess for that device, as on a
 * real GPU. A reset of either device forgets the pair. */
CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev);
CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags);
CUresult cuCtxDisablePeerAccess(CUcontext peerContext);
CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle);
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr);
CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType, unsigned long long flags);
/* (fake_vmm_share.c) A POSIX fd from cuMemExportToShareableHandle, in this
 * process or another, passed as (void *)(uintptr_t)fd and kept by the caller:
 * a new physical allocation over the same bytes, charged to the exporter's
 * device (or, when this process has no such device, the current context's).
 * CUDA_ERROR_NOT_SUPPORTED for other handle types, CUDA_ERROR_INVALID_VALUE
 * for an fd that is not an export of this fake. */
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                        CUmemAllocationHandleType shHandleType);

/* ---- Streams, events, capture ---- */
CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);
CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority);
CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult cuStreamDestroy_v2(CUstream hStream);
CUresult cuStreamSynchronize(CUstream hStream);
CUresult cuStreamSynchronize_ptsz(CUstream hStream);
CUresult cuStreamQuery(CUstream hStream);
CUresult cuStreamQuery_ptsz(CUstream hStream);
CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx);
CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx);
CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus);
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode);
/* Test helper: cuStreamBeginCapture_v2 without going through the exported symbol, so a layer
 * that hooks that symbol does not see the capture begin. */
CUresult fakecu_stream_begin_capture_unseen(CUstream hStream, CUstreamCaptureMode mode);
CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus);
/* The first ABI (CUDA 10.0): no mode, a global-mode capture; cuGetProcAddress hands it out to a
 * caller asking for a version below 10010. */
CUresult cuStreamBeginCapture(CUstream hStream);
CUresult cuStreamBeginCapture_ptsz(CUstream hStream);
CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);
/* Into an existing graph (CUDA 12.3): the capture appends to hGraph, and the end hands back
 * hGraph itself. The fake's graphs are linear: dependencies are accepted and not modelled (the
 * captured work runs after the graph's earlier work, which orders no less). */
CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                     const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                     CUstreamCaptureMode mode);
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                          const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                          CUstreamCaptureMode mode);
CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph);
CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph);
CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData);
CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData);
CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);
CUresult cuEventRecord(CUevent hEvent, CUstream hStream);
CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);
CUresult cuEventQuery(CUevent hEvent);
CUresult cuEventSynchronize(CUevent hEvent);
CUresult cuEventDestroy_v2(CUevent hEvent);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags);
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphExecDestroy(CUgraphExec hGraphExec);
CUresult cuGraphDestroy(CUgraph hGraph);
CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags);

/*
 * ---- Test-only API of the fake driver (not part of CUDA) ----
 *
 * Named fakecu_* so that libcudart's fakecuda_* forwarders (declared in
 * fake_cuda_runtime.h) never resolve to themselves.
 */

/* Successful allocations (cuMemAlloc_v2, cuMemAllocAsync*, cuMemAllocManaged,
 * cuMemAllocPitch_v2) and successful frees (cuMemFree_v2, cuMemFreeAsync*,
 * counted when the call succeeds, not when a stream executes the free). */
unsigned long long fakecu_device_allocs(void);
unsigned long long fakecu_device_frees(void);
/* Bytes currently charged to device dev (exact requested sizes); 0 for a bad dev. */
size_t fakecu_used_bytes(int dev);
/* Allocations currently live on device dev (stream-ordered frees not yet executed included). */
size_t fakecu_live_allocs(int dev);
/* Explicit synchronisation API calls: cuCtxSynchronize + cuStreamSynchronize* +
 * cuEventSynchronize. The implicit device sync inside cuMemFree_v2 is not counted. */
unsigned long long fakecu_sync_calls(void);
/* cuCtxSynchronize calls only. */
unsigned long long fakecu_ctx_sync_calls(void);
/* The n-th allocation attempt from now fails with CUDA_ERROR_OUT_OF_MEMORY (once);
 * 0 disarms. Attempts = calls of any allocation entry point that pass argument,
 * context and capture checks. */
void fakecu_fail_alloc_at(unsigned long long n);
/* cuGetProcAddress/cuGetProcAddress_v2 calls that asked for base name `name`
 * (found or not); NULL gives the total. */
unsigned long long fakecu_procaddress_calls(const char *name);
/* Base address of the allocation an IPC handle refers to (NULL if the bytes are
 * not a handle made by this fake); device ordinal through *dev when dev != NULL. */
void *fakecu_ipc_handle_base(const void *handle, int *dev);
/* Calls of cuIpcOpenMemHandle* and of cuIpcCloseMemHandle since the start, whatever they
 * answered (the runtime's cudaIpcOpenMemHandle / cudaIpcCloseMemHandle included). */
unsigned long long fakecu_ipc_opens(void);
unsigned long long fakecu_ipc_closes(void);
/* 1 while any stream of any device has a capture sequence (active or invalidated). */
int fakecu_capturing_any(void);
/* What fences cost the host, as driver calls (any caller, _ptsz twins included; cuStreamQuery
 * and cuEventQuery counted whatever they answer). Zeroed by fakecu_reset_counters. */
struct fakecu_event_calls {
    unsigned long long stream_queries; /* cuStreamQuery */
    unsigned long long event_records;  /* cuEventRecord */
    unsigned long long event_queries;  /* cuEventQuery */
    unsigned long long event_syncs;    /* cuEventSynchronize */
    unsigned long long stream_waits;   /* cuStreamWaitEvent */
    unsigned long long ctx_records;    /* cuCtxRecordEvent */
    unsigned long long ctx_waits;      /* cuCtxWaitEvent */
};
void fakecu_get_event_calls(struct fakecu_event_calls *out);
/* Zero allocs/frees/sync/procaddress/event-call counters (not used bytes, not live allocations). */
void fakecu_reset_counters(void);
/*
 * Enqueue fn(arg) on a stream like cuLaunchHostFunc; drop(arg) (if not NULL)
 * runs once fn has, or at once when the call fails. On a capturing stream the
 * work is recorded into the graph, which then owns arg: each launch runs
 * fn(arg) again and drop(arg) runs when the graph goes, so fn must not free
 * arg. per_thread: the NULL handle means the per-thread default stream.
 */
CUresult fakecu_launch(CUstream hStream, int per_thread, void (*fn)(void *), void *arg,
                       void (*drop)(void *));
/*
 * Held work, the fake's deterministic "GPU still busy": with hold != 0, work
 * queued on the stream from now on does not start until something demands
 * it: a synchronisation that covers it (cuStreamSynchronize, cuCtxSynchronize,
 * cuEventSynchronize of an event recorded after it, a synchronous copy), or
 * work that depends on it starting (the legacy stream's implicit ordering,
 * cuStreamWaitEvent), or the stream's destruction. Queries (cuStreamQuery,
 * cuEventQuery) do not demand: they answer NOT_READY while it is held.
 * hold == 0 lifts the hold for work queued from now on. per_thread as in
 * fakecu_launch (the per-thread stream is the calling thread's).
 */
CUresult fakecu_stream_hold(CUstream hStream, int per_thread, int hold);
/* Demands all work queued on the stream so far (for waits that are not CUDA
 * synchronisation calls, such as the runtime's synchronous copies). */
CUresult fakecu_stream_demand(CUstream hStream, int per_thread);

/*
 * ---- Test-only API of the fake VMM (tests/fake/fake_vmm.c) ----
 *
 * Device-side accesses: the fake's "device" touches memory only through the
 * functions below. An access to a reserved VMM address that is not mapped, or
 * mapped without access for the accessing device (read access for a source,
 * read-write for a destination), is refused: nothing is written, a fault is
 * counted in fakecu_vmm_stats and one line goes to stderr ("fakecuda: device
 * fault: ..."). Addresses outside every reservation (cuMemAlloc memory, host
 * memory) are accessed as they are.
 */
struct fakecu_vmm_stats {
    size_t reserved_bytes;  /* address space held by cuMemAddressReserve */
    size_t mapped_bytes;    /* bytes currently mapped by cuMemMap */
    size_t physical_bytes;  /* bytes of live physical allocations, all devices */
    size_t handles;         /* live physical allocations (released but mapped included) */
    unsigned long long creates, releases, maps, unmaps, set_access_calls;
    unsigned long long faults_unmapped;  /* device access hit a reserved, unmapped page */
    unsigned long long faults_no_access; /* device access hit a page mapped without access */
    unsigned long long reset_destroyed;  /* allocations destroyed by a device reset */
    unsigned long long retains;          /* successful cuMemRetainAllocationHandle calls */
    unsigned long long imports;          /* successful cuMemImportFromShareableHandle calls */
};
void fakecu_vmm_get_stats(struct fakecu_vmm_stats *out);
/* Bytes of live physical allocations on device dev (also charged in fakecu_used_bytes). */
size_t fakecu_vmm_physical_bytes(int dev);
/* Granularity reported by cuMemGetAllocationGranularity and required by
 * cuMemCreate/cuMemAddressReserve/cuMemMap; default 2 MiB or
 * FAKECUDA_VMM_GRANULARITY. Must be a power of two and a multiple of the host
 * page size; returns 0, or -1 (unchanged) for a bad value. */
int fakecu_vmm_set_granularity(size_t bytes);
/* The n-th call from now of fn ("cuMemCreate", "cuMemAddressReserve",
 * "cuMemMap" or "cuMemSetAccess") that passes argument checks fails with
 * CUDA_ERROR_OUT_OF_MEMORY (once); 0 disarms. FAKECUDA_FAIL_CREATE_AT=n arms
 * it for cuMemCreate at start-up. Returns -1 for an unknown fn. */
int fakecu_vmm_fail_at(const char *fn, unsigned long long n);
/* Device dev writes: memmove(dst, src, n) when src != NULL, else memset(dst,
 * byte, n), after the checks above. CUDA_ERROR_ILLEGAL_ADDRESS when refused. */
/* What device dev may do with every byte of [p, p + n) inside mapped VMM
 * ranges (fake_vmm_access.c): CU_MEM_ACCESS_FLAGS_PROT_READWRITE, _READ or
 * _NONE for the least-granted byte; -1 when some byte is not in a mapping. */
int fakecu_vmm_access(int dev, const void *p, size_t n);
/* 1 when peer access from dev to peer was enabled (cuCtxEnablePeerAccess
 * with a context of dev current, or cudaDeviceEnablePeerAccess), else 0. */
int fakecu_peer_enabled(int dev, int peer);
CUresult fakecu_device_write(int dev, void *dst, const void *src, int byte, size_t n);
/* Stream-ordered device writes by the current context's device: after
 * delay_us the job runs fakecu_device_write (a refused one is only reported,
 * as a real kernel's fault is). Models a kernel still writing after the host
 * moved on, e.g. across a cuMemUnmap. per-thread default stream: not modelled
 * here (a NULL stream is the legacy one). */
CUresult fakecu_memset_async(CUdeviceptr dst, int byte, size_t n, CUstream hStream, unsigned delay_us);
CUresult fakecu_memcpy_async(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream hStream, unsigned delay_us);

/* Pinned host memory (fake_host.c): allocations start-only for free, flags and device pointer,
 * as CUDA; FAKECUDA_PIN_US_PER_MB=N costs N us per MiB pinned. */
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define CU_MEMHOSTALLOC_WRITECOMBINED 0x04
CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);
CUresult cuMemAllocHost_v2(void **pp, size_t bytesize);
CUresult cuMemFreeHost(void *p);
CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags);
CUresult cuMemHostUnregister(void *p);
CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p);
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags);
/* p starts a registered range: the percentage of its pages present when it was registered
 * (mincore); -1: p starts an allocated (cuMemHostAlloc) range; -2: neither. */
int fakecu_host_registered(const void *p);
/* Pinnings (allocations and registrations) and their undoing, since the start. */
unsigned long long fakecu_host_pins(void);
unsigned long long fakecu_host_unpins(void);

#ifdef __cplusplus
}
#endif

#endif /* FAKE_CUDA_DRIVER_H */
