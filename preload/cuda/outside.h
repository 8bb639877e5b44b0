// SPDX-License-Identifier: MIT
// Device memory handed out past our pools, counted per device: managed memory, and allocations
// from memory pools other than the device's default one, both passed to CUDA and never cached.
// Their addresses are remembered here only to count their frees; a free of such memory is CUDA's
// (the address map knows nothing of it, so it goes to the real free). Of each other pool, its
// own figures are read from the driver after every allocation and free of it.
#ifndef CCI_PRELOAD_OUTSIDE_H
#define CCI_PRELOAD_OUTSIDE_H

#include <stddef.h>
#include <stdint.h>

struct cci_stats;

/// A managed allocation CUDA made on `device` (an ordinal of our table) at `addr`, `bytes` long.
void cci_outside_note_managed(int device, uintptr_t addr, size_t bytes);
/// An allocation CUDA made from `pool` (not the device's default pool) for `device`.
void cci_outside_note_pool(int device, uintptr_t addr, size_t bytes, void *pool);
/// CUDA freed `addr`: if it was noted, its counts go down (once, whichever level saw the free).
void cci_outside_forget(uintptr_t addr);
/// Reads the figures of every other pool seen on `device` again (a stream-ordered free lowers a
/// pool's use only when its stream gets there). Called before statistics are read, never under an
/// allocator's lock; a driver that no longer answers leaves the last figures.
void cci_outside_refresh(int device);
/// The backend's `outside` operation (backend.h): the device's counts into *out.
void cci_outside_stats(void *ctx, int device, struct cci_stats *out);
/// In a fork child: the parent's threads are gone, the lock is made new (the counts stay).
void cci_outside_atfork_child(void);

#endif
