// SPDX-License-Identifier: MIT
// The program's own virtual-memory allocations (cuMemCreate + cuMemAddressReserve + cuMemMap),
// kept for reuse. XLA (JAX) allocates every buffer that way, one handle mapped in one reservation
// of its own, and tears it down with cuMemUnmap + cuMemAddressFree + cuMemRelease: tens of
// microseconds a call (docs/interception-levels.md). A buffer so torn down is kept whole, still
// mapped, and handed back when the program builds one of the same size and properties again: its
// cuMemCreate answers the kept handle, its cuMemAddressReserve the kept address, and the map and
// access calls that follow cost nothing.
//
// What the program sees stays what the driver would show: every call it makes gets the answer it
// would get natively, and a call that does not follow the pattern first makes the real state what
// the program believes it is (the deferred unmap, free and release done), then goes to the driver.
// Safety: a program unmaps only what no queued work touches any more (cuMemUnmap does not wait;
// vmm-and-streams facts), so a kept buffer may go to its next owner at once. A handle exported to
// another process (or bound to a multicast object, or given as a dma-buf) is never kept: the
// other side may still map its pages.
//
// Bounded: a new buffer first gives back the oldest kept ones while kept + held + new would pass
// 1.5 times the program's own high-water mark of held bytes; an out-of-memory gives back every
// kept buffer of the device and retries; cci_empty_cache and a device reset give them back too.
// CCI_KEEP_MAPPINGS=0 turns it off.
#ifndef CCI_PRELOAD_PROGRAM_VMM_H
#define CCI_PRELOAD_PROGRAM_VMM_H

#include <stddef.h>

#include "ccinterpose.h"
#include "cuda_abi_vmm.h"
#include "settings.h"

CUresult cci_pvmm_create(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                         unsigned long long flags);
CUresult cci_pvmm_release(CUmemGenericAllocationHandle h);
CUresult cci_pvmm_reserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags);
CUresult cci_pvmm_address_free(CUdeviceptr ptr, size_t size);
CUresult cci_pvmm_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                      unsigned long long flags);
CUresult cci_pvmm_unmap(CUdeviceptr ptr, size_t size);
CUresult cci_pvmm_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
CUresult cci_pvmm_retain(CUmemGenericAllocationHandle *h, void *addr);
/// cuMemGetAddressRange of an address the driver's pool does not own: 1 with *base and *size set
/// when it lies in a buffer the program has mapped through us (answered here), else 0 and the
/// driver answers (a buffer the program unmapped is settled first, so the driver sees it gone).
int cci_pvmm_address_range(CUdeviceptr *base, size_t *size, CUdeviceptr dptr);
/// The calls that share a buffer beyond the process: the buffer is never kept afterwards.
CUresult cci_pvmm_export(void *shareable, CUmemGenericAllocationHandle h, int type, unsigned long long flags);
CUresult cci_pvmm_range_handle(void *handle, CUdeviceptr ptr, size_t size, int type, unsigned long long flags);
CUresult cci_pvmm_multicast_bind_mem(CUmemGenericAllocationHandle mc, size_t mc_offset,
                                     CUmemGenericAllocationHandle h, size_t offset, size_t size,
                                     unsigned long long flags);
CUresult cci_pvmm_multicast_bind_addr(CUmemGenericAllocationHandle mc, size_t mc_offset, CUdeviceptr ptr,
                                      size_t size, unsigned long long flags);

/// Gives every kept buffer of `device` back to CUDA (cci_empty_cache); nothing for a device out of
/// range.
void cci_pvmm_empty(int device);
/// Before `device`'s primary context is reset: kept buffers given back, the program's own made
/// real (deferred calls done) and forgotten, while the driver still knows them.
void cci_pvmm_drop_device(int device);
/// The program_vmm_* fields of *out for `device`; -1: summed over every device.
void cci_pvmm_stats(int device, cci_stats *out);
/// At start-up, once the layer is active: reads CCI_KEEP_MAPPINGS.
void cci_pvmm_start(const cci_settings *s);
/// In a fork child: the parent's buffers forgotten, the lock new.
void cci_pvmm_atfork_child(void);
/// 1 once the program made a virtual-memory allocation through us (the report then has a section).
int cci_pvmm_used(void);

#endif
