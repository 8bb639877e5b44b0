// SPDX-License-Identifier: MIT
// Device memory handed out past the pools, counted per device: managed memory, which is passed
// to CUDA and never cached. Its addresses are remembered here only to count their frees; a free
// of such memory is CUDA's (the address map knows nothing of it, so it goes to the real free).
#ifndef CCI_PRELOAD_OUTSIDE_H
#define CCI_PRELOAD_OUTSIDE_H

#include <stddef.h>
#include <stdint.h>

struct cci_stats;

/// A managed allocation CUDA made on `device` (an ordinal of our table) at `addr`, `bytes` long.
void cci_outside_note_managed(int device, uintptr_t addr, size_t bytes);
/// CUDA freed `addr`: if it was noted, its counts go down (once, whichever level saw the free).
void cci_outside_forget(uintptr_t addr);
/// The backend's `outside` operation (backend.h): the device's counts into *out.
void cci_outside_stats(void *ctx, int device, struct cci_stats *out);
/// In a fork child: the parent's threads are gone, the lock is made new (the counts stay).
void cci_outside_atfork_child(void);

#endif
