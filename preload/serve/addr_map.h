// SPDX-License-Identifier: MIT
// The process-wide address map: which device's allocator owns an address, answered without a
// lock, so that a free asks one allocator instead of trying every device in turn.
//
// Granularity: 2 MiB chunks of the address space (addr >> 21). For each chunk that ordinary
// segments or mapped expandable pages touch, the map keeps the device and how many of the
// chunk's bytes that device holds. A chunk touched by two devices is MIXED, and a map that
// could not keep up (host out of memory, an observer slot missing) is INCOMPLETE: both answer
// "unknown" and the caller asks every allocator, as before the map existed. Correctness never
// depends on the map; only speed does.
//
// Kept by an observer on each allocator (cci_addr_map_attach): a segment's chunks are added
// while its SEGMENT_ALLOC (or SEGMENT_MAP) is observed, under the allocator lock and before its
// first block is handed out, and removed when its SEGMENT_FREE (SEGMENT_UNMAP) is, after the
// memory went back. A live block's chunk is therefore always in the map.
#ifndef CCI_PRELOAD_ADDR_MAP_H
#define CCI_PRELOAD_ADDR_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "allocator.h"

/// Answers of cci_addr_map_device besides a device ordinal.
enum {
    CCI_ADDR_NOT_OURS = -1,  ///< definitely no allocator's: the caller forwards to CUDA
    CCI_ADDR_UNKNOWN = -2,   ///< MIXED chunk or incomplete map: the caller asks every allocator
};

/// The device whose allocator may own `p` (only that one can: ask it, and its "not ours" is
/// final), CCI_ADDR_NOT_OURS or CCI_ADDR_UNKNOWN. No lock, no allocation, atomic loads only:
/// callable from any thread at any time.
int cci_addr_map_device(uintptr_t p);

/// Attaches the map's observer to a new allocator (before it serves anything). When no observer
/// slot is left, the map is marked incomplete: every lookup answers unknown from then on.
void cci_addr_map_attach(cci_allocator *a);

/// `device` now holds [addr, addr + size) / gave it back. What the observer calls; exposed for
/// the unit test. Serialised by the map's writer mutex.
void cci_addr_map_add(int device, uintptr_t addr, size_t size);
void cci_addr_map_remove(int device, uintptr_t addr, size_t size);

/// Every lookup answers unknown from now on (until cci_addr_map_forget_all).
void cci_addr_map_mark_incomplete(void);

/// Empties the map and frees every table, the retired ones included; complete again. Only
/// where no other thread can be reading: the fork child (registered by cci_addr_map_attach),
/// and between the cases of the unit test.
void cci_addr_map_forget_all(void);

// ---- for the unit test ----------------------------------------------------------------------

/// The next `n` table allocations fail, as when the host is out of memory.
void cci__addr_map_fail_table_allocs(int n);
/// Slots in the table readers see now (0 before the first insert).
size_t cci__addr_map_capacity(void);

#endif
