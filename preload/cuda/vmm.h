// SPDX-License-Identifier: MIT
// The device contract's virtual-memory group over the CUDA driver (cuMemCreate, cuMemMap, ...),
// for expandable_segments:True and compact_segments:True. The core decides what to map and when
// to unmap (after its fence or synchronisation); this group does what it is told, keeps released
// pages in a bounded per-device pool to hand them out again, and grants access to the owning
// device and to every device the program enabled peer access from.
#ifndef CCI_PRELOAD_VMM_H
#define CCI_PRELOAD_VMM_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "ccinterpose.h"

/// The pool keeps at most (device memory / CCI_VMM_POOL_DIVISOR) bytes of released pages per
/// device: 1.25 GiB of an 80 GB H100. Pooled pages are device memory that the statistics (reserved
/// = mapped) do not show and that nothing else can use, so the bound stays small; empty_cache and
/// the last retry before an out-of-memory drain the pool whatever it holds.
#define CCI_VMM_POOL_DIVISOR 64

/// Adds the VMM group (and CCI_CAP_VMM) to `ops` when the loaded driver has every function it
/// needs. Whether a device supports it is asked per device, at its first granularity question
/// (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED): 0 there makes the core fall back to
/// ordinary segments with one warning.
void cci_cuda_vmm_wire(cci_backend_ops *ops);

/// The program enabled peer access from device `dev` to device `peer` (cudaDeviceEnablePeerAccess
/// (peer) with `dev` current): from now on `dev` gets read/write access to every page mapped on
/// `peer`, the pages mapped so far included (re-granted here, one call per run of mappings).
/// For the hook that tracks peer access; 0, or -1 when a device ordinal is out of range or a
/// re-grant failed (one warning).
int cci_vmm_peer_enabled(int dev, int peer);

/// One physical page of a block, as CUDA IPC hands it to another process: a file descriptor
/// (the caller's to close) and the page's size.
typedef struct cci_vmm_piece {
    int fd;
    size_t size;
} cci_vmm_piece;

/// 1 when `device`'s pages are created exportable as file descriptors (the driver offers the
/// handle type and took it), else 0.
int cci_cuda_vmm_shareable(int device);

/// Exports the pages under [va, va + size) of `device` (a live block's: its pages cannot be
/// unmapped meanwhile), in address order: *out (malloc'd, the caller's) of *n pieces, and *skip,
/// the bytes of the first page before `va`. CCI_OK; CCI_EINVAL when the range is not wholly
/// mapped by this group; CCI_EBACKEND when the device's pages are not exportable or the driver
/// refused; CCI_EOOM (host). On failure nothing is left open.
int cci_cuda_vmm_export(int device, uintptr_t va, size_t size, cci_vmm_piece **out, size_t *n, size_t *skip);

/// Pages another process exported, mapped here: one address range of `size` bytes at `base`
/// (reserved for these pages only), readable and writable by `device`.
typedef struct cci_vmm_import {
    uintptr_t base;
    size_t size;
    size_t n;
    uint64_t *handles;  // the imported allocations, released when unmapped
    int device;
} cci_vmm_import;

/// Imports `n` pieces (the descriptors stay the caller's) and maps them in order into a fresh
/// range, access for `device`. CCI_OK; CCI_EBACKEND after undoing everything (the driver's
/// answer in *cu when `cu` is not NULL); CCI_EOOM when the host is out of memory.
int cci_cuda_vmm_import(int device, const cci_vmm_piece *pieces, size_t n, cci_vmm_import *out, int *cu);
/// Unmaps and releases what cci_cuda_vmm_import mapped and frees its range.
void cci_cuda_vmm_unimport(cci_vmm_import *im);

/// 1 when `p` lies in an address range reserved by this group (a VMM segment), else 0.
int cci_cuda_vmm_owns(uintptr_t p);
/// Bytes of released pages kept in the pool of `device` now.
size_t cci_cuda_vmm_pool_bytes(int device);

/// Before cudaDeviceReset, after the allocator's teardown unmapped and released its pages:
/// releases the device's pooled pages for real and forgets its mappings, ranges and peer grants.
void cci_cuda_vmm_drop_device(int device);
/// In a fork child: forget the parent's pages, mappings and ranges without driver calls.
void cci_cuda_vmm_atfork_child(void);
/// The real VMM calls made on `device` and the host time they took, into the vmm_* fields of *out
/// (the statistics; the backend's costs operation).
void cci_cuda_vmm_costs(int device, cci_stats *out);
/// One exit line (CCI_LOG=info), printed from those fields of the statistics (every device's, summed).
void cci_cuda_vmm_log_costs(const cci_stats *s);

#endif
