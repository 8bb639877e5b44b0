// SPDX-License-Identifier: MIT
/*
 * Glue between the two halves of the fake libcuda.so.1: fake_cuda.c (devices,
 * contexts, streams, cuMemAlloc) and fake_vmm.c (the virtual-memory API).
 * Hidden symbols: nothing here is exported from the library.
 */
#ifndef FAKE_VMM_H
#define FAKE_VMM_H

#include <stdbool.h>
#include <stddef.h>

/* fake_cuda.c: charge / uncharge bytes of device dev's memory, the figure
 * cuMemGetInfo and fakecu_used_bytes report. Charging fails (false) when the
 * device would exceed its capacity. Neither may be called with fake_vmm.c's
 * lock held (fake_cuda.c's lock is always taken first). */
bool fc_device_charge(int dev, size_t bytes);
void fc_device_uncharge(int dev, size_t bytes);

/* fake_vmm.c: a device reset (cuDevicePrimaryCtxReset, last primary-context
 * release) destroys that device's physical allocations and their mappings.
 * Called by fake_cuda.c with its lock held, after the device's streams have
 * drained and before the device's charge is zeroed. */
void fc_vmm_device_reset(int dev);

#endif /* FAKE_VMM_H */
