// SPDX-License-Identifier: MIT
// The real driver functions behind our driver-level wrappers, and the wrappers that stand in for
// them in answers of dlsym and cuGetProcAddress.
#ifndef CCI_PRELOAD_DRIVER_TABLE_H
#define CCI_PRELOAD_DRIVER_TABLE_H

#include "cuda_abi.h"
#include "real.h"

/// Every driver entry point we wrap, under its exported name: X(name, parameter list, arguments).
/// Only the exported names of the ABIs we implement: cuMemAlloc_v2 but never the 32-bit
/// cuMemAlloc, and both spellings of the teardown calls (their signatures agree).
#define CCI_DRV_WRAPPED(X)                                                                   \
    X(cuMemAlloc_v2, (CUdeviceptr * dptr, size_t size), (dptr, size))                        \
    X(cuMemFree_v2, (CUdeviceptr dptr), (dptr))                                              \
    X(cuMemAllocAsync, (CUdeviceptr * dptr, size_t size, CUstream s), (dptr, size, s))       \
    X(cuMemAllocAsync_ptsz, (CUdeviceptr * dptr, size_t size, CUstream s), (dptr, size, s))  \
    X(cuMemFreeAsync, (CUdeviceptr dptr, CUstream s), (dptr, s))                             \
    X(cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream s), (dptr, s))                        \
    X(cuMemGetInfo_v2, (size_t * free_b, size_t * total_b), (free_b, total_b))              \
    X(cuMemGetAddressRange_v2, (CUdeviceptr * base, size_t * size, CUdeviceptr dptr),        \
      (base, size, dptr))                                                                    \
    X(cuIpcGetMemHandle, (CUipcMemHandle * h, CUdeviceptr dptr), (h, dptr))                  \
    X(cuDevicePrimaryCtxReset, (CUdevice dev), (dev))                                        \
    X(cuDevicePrimaryCtxReset_v2, (CUdevice dev), (dev))                                     \
    X(cuCtxDestroy, (CUcontext ctx), (ctx))                                                  \
    X(cuCtxDestroy_v2, (CUcontext ctx), (ctx))                                               \
    X(cuGetProcAddress,                                                                      \
      (const char *symbol, void **pfn, int cuda_version, cuuint64_t flags),                  \
      (symbol, pfn, cuda_version, flags))                                                    \
    X(cuGetProcAddress_v2,                                                                   \
      (const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,                   \
       CUdriverProcAddressQueryResult *status),                                              \
      (symbol, pfn, cuda_version, flags, status))

/// Driver functions the wrappers only call. Any may be missing (NULL) in an old driver.
#define CCI_DRV_HELPERS(X)                                                                   \
    X(cuCtxGetCurrent, (CUcontext * ctx), (ctx))                                             \
    X(cuCtxGetDevice, (CUdevice * dev), (dev))                                               \
    X(cuDevicePrimaryCtxGetState, (CUdevice dev, unsigned *flags, int *active),              \
      (dev, flags, active))                                                                  \
    X(cuStreamIsCapturing, (CUstream s, CUstreamCaptureStatus * st), (s, st))                \
    X(cuStreamIsCapturing_ptsz, (CUstream s, CUstreamCaptureStatus * st), (s, st))

typedef struct cci_drv_table {
#define CCI_X(name, params, args) CUresult(*name) params;
    CCI_DRV_WRAPPED(CCI_X)
    CCI_DRV_HELPERS(CCI_X)
#undef CCI_X
} cci_drv_table;

/// The driver's functions; entries it lacks are NULL. `hint` is any address inside the driver
/// library (a function the real dlsym or resolver just returned), or NULL for libcuda.so.1 as
/// loaded. The first driver library found is the one for the rest of the process. Lock-free and
/// never blocking: it may run inside a library constructor that holds the loader lock while
/// another thread is filling the table (that thread would wait for the loader lock).
const cci_drv_table *cci_drv_get(const void *hint);

/// 1 when `name` is exactly the exported name of one of the CCI_DRV_WRAPPED entry points. Cheap:
/// every dlsym of the process asks it.
CCI_NO_SANITIZE int cci_drv_is_wrapped_name(const char *name);

/// What to hand a program that asked the driver for a function and got `real`: our wrapper when
/// `real` is the driver's own export of a function we wrap, else `real` unchanged (a function we
/// do not wrap, another library's symbol of the same name, or already our wrapper). `name` is
/// the exported name a dlsym asked for (only that entry may match), or NULL for an answer of the
/// resolver (any entry whose real address it is). Driver level off: always `real`.
void *cci_drv_substitute(const char *name, void *real);

/// 1 when `p` is one of our wrappers (what a real lookup finds when it reaches our own exports).
int cci_drv_is_ours(const void *p);

#endif
