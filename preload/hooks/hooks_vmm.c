// SPDX-License-Identifier: MIT
// The driver's virtual-memory entry points: forwarders to serve/program_vmm.c, which keeps the
// program's own mappings for reuse and passes on everything else. In CCI_REAL_DRIVER_WRAPPED_VMM,
// so our resolver and dlsym hand them out (XLA finds them with dlsym, NCCL with cuGetProcAddress).
#include "hooks_driver.h"

#include "program_vmm.h"

CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags)
{
    return cci_pvmm_create(h, size, prop, flags);
}

CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    return cci_pvmm_release(h);
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                             unsigned long long flags)
{
    return cci_pvmm_reserve(ptr, size, align, addr, flags);
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    return cci_pvmm_address_free(ptr, size);
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                  unsigned long long flags)
{
    return cci_pvmm_map(ptr, size, offset, h, flags);
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    return cci_pvmm_unmap(ptr, size);
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    return cci_pvmm_set_access(ptr, size, desc, count);
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
    return cci_pvmm_retain(h, addr);
}

CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle h, int type,
                                      unsigned long long flags)
{
    return cci_pvmm_export(shareable, h, type, flags);
}

CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr ptr, size_t size, int type,
                                       unsigned long long flags)
{
    return cci_pvmm_range_handle(handle, ptr, size, type, flags);
}

CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mc, size_t mc_offset, CUmemGenericAllocationHandle h,
                            size_t offset, size_t size, unsigned long long flags)
{
    return cci_pvmm_multicast_bind_mem(mc, mc_offset, h, offset, size, flags);
}

CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mc, size_t mc_offset, CUdeviceptr ptr, size_t size,
                             unsigned long long flags)
{
    return cci_pvmm_multicast_bind_addr(mc, mc_offset, ptr, size, flags);
}
