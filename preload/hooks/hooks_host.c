// SPDX-License-Identifier: MIT
// The pinned host memory entry points, both API levels: forwarders to the pinned host cache
// (serve/host_cache.c), which decides for either level and passes on what it does not serve.
// The driver ones are in CCI_REAL_DRIVER_WRAPPED_HOST, so our resolver and dlsym hand them out.
#include "hooks_driver.h"
#include "hooks_host.h"

#include <stdint.h>

#include "host_cache.h"
#include "levels.h"

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    return cci_host_cache_alloc(CCI_LEVEL_RUNTIME, pHost, size, flags, 0);
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    return cci_host_cache_alloc(CCI_LEVEL_RUNTIME, ptr, size, 0, 1);
}

cudaError_t cudaFreeHost(void *ptr)
{
    return cci_host_cache_free(CCI_LEVEL_RUNTIME, ptr);
}

cudaError_t cudaHostGetFlags(unsigned int *pFlags, void *pHost)
{
    return cci_host_cache_get_flags(CCI_LEVEL_RUNTIME, pFlags, pHost);
}

cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags)
{
    return cci_host_cache_get_device_pointer(CCI_LEVEL_RUNTIME, pDevice, pHost, flags);
}

CUresult cuMemHostAlloc(void **pp, size_t size, unsigned flags)
{
    return cci_host_cache_alloc(CCI_LEVEL_DRIVER, pp, size, flags, 0);
}

CUresult cuMemAllocHost_v2(void **pp, size_t size)
{
    return cci_host_cache_alloc(CCI_LEVEL_DRIVER, pp, size, 0, 1);
}

CUresult cuMemFreeHost(void *p)
{
    return cci_host_cache_free(CCI_LEVEL_DRIVER, p);
}

CUresult cuMemHostGetFlags(unsigned *flags, void *p)
{
    return cci_host_cache_get_flags(CCI_LEVEL_DRIVER, flags, p);
}

// CUdeviceptr is an address: the cache answers device pointers as addresses for both levels.
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned flags)
{
    void *d = NULL;
    CUresult r = cci_host_cache_get_device_pointer(CCI_LEVEL_DRIVER, pdptr ? &d : NULL, p, flags);
    if (r == 0 && pdptr)
        *pdptr = (CUdeviceptr)(uintptr_t)d;
    return r;
}
