// SPDX-License-Identifier: MIT
// The slice of the CUDA runtime and driver ABI that the preload speaks, written out by hand.
//
// We never include cuda.h or cuda_runtime_api.h: they rename symbols by macro (cuMemAlloc ->
// cuMemAlloc_v2, cudaMallocAsync -> cudaMallocAsync_ptsz under per-thread builds), so a hook
// file that included them would define a different symbol than it appears to. The numeric
// values below are CUDA's own and must stay so: they cross the ABI unchanged.
#ifndef CCI_CUDA_ABI_H
#define CCI_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

// ---- runtime --------------------------------------------------------------------------------
typedef int cudaError_t;
enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorDeviceUninitialized = 201,
    cudaErrorMapBufferObjectFailed = 205,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotSupported = 801,
};

typedef struct CUstream_st *cudaStream_t;
// Special stream handles: the legacy default stream and the calling thread's default stream.
#define cci_cudaStreamLegacy ((cudaStream_t)0x1)
#define cci_cudaStreamPerThread ((cudaStream_t)0x2)

typedef int cudaStreamCaptureStatus;  // enum cudaStreamCaptureStatus
enum { cudaStreamCaptureStatusNone = 0, cudaStreamCaptureStatusActive = 1,
       cudaStreamCaptureStatusInvalidated = 2 };
typedef int cudaStreamCaptureMode;    // enum cudaStreamCaptureMode

typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphNode_st *cudaGraphNode_t;
typedef struct cudaGraphEdgeData_st cudaGraphEdgeData;  // only ever passed through by pointer

#define CCI_IPC_HANDLE_SIZE 64
typedef struct cudaIpcMemHandle_st { char reserved[CCI_IPC_HANDLE_SIZE]; } cudaIpcMemHandle_t;

// ---- driver ---------------------------------------------------------------------------------
typedef int CUresult;
enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_MAP_FAILED = 205,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_SUPPORTED = 801,
};
typedef int CUdevice;                    // the device ordinal, as cuDeviceGet hands it out
typedef unsigned long long CUdeviceptr;  // CUdeviceptr_v2: the 64-bit ABI of the _v2 entry points
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;    // the same handles as cudaStream_t
typedef int CUstreamCaptureMode;
enum { CU_STREAM_CAPTURE_MODE_RELAXED = 2 };
typedef int CUstreamCaptureStatus;       // 0 none, 1 active, 2 invalidated
typedef struct CUgraph_st *CUgraph;      // the same handles as cudaGraph_t
typedef struct CUgraphNode_st *CUgraphNode;         // the same handles as cudaGraphNode_t
typedef struct cudaGraphEdgeData_st CUgraphEdgeData;  // the same layout; only passed by pointer
typedef struct CUipcMemHandle_st { char reserved[CCI_IPC_HANDLE_SIZE]; } CUipcMemHandle;

// cuGetProcAddress: flags (CU_GET_PROC_ADDRESS_*) and the symbolStatus of the _v2 ABI.
typedef uint64_t cuuint64_t;
typedef int CUdriverProcAddressQueryResult;  // 0 found, 1 no such symbol, 2 version too old

// Memory pools (cudaMallocFromPoolAsync, cuMemAllocFromPoolAsync): one handle type for both
// levels, and the attributes read of a pool (cuMemPoolGetAttribute, cuuint64_t values).
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUmemPoolHandle_st *cudaMemPool_t;
enum {
    CCI_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,
    CCI_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6,
    CCI_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,
    CCI_MEMPOOL_ATTR_USED_MEM_HIGH = 8,
};
enum { CCI_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9 };  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL

// Pitched and 3-D allocations (cudaMallocPitch, cudaMalloc3D, cuMemAllocPitch_v2).
struct cudaPitchedPtr {
    void *ptr;
    size_t pitch;
    size_t xsize;
    size_t ysize;
};
struct cudaExtent {
    size_t width;  // bytes, for linear memory
    size_t height;
    size_t depth;
};

#endif
