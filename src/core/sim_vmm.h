// SPDX-License-Identifier: MIT
// Private glue between the simulated device (backend_sim.c) and its virtual-memory group
// (sim_vmm.c). Nothing outside those two files includes this.
#ifndef CCI_SIM_VMM_H
#define CCI_SIM_VMM_H

#include <pthread.h>

#include "backend.h"

typedef struct sim_vmm sim_vmm;

/// The VMM state of one simulated device. It shares the device's lock (so that segments and
/// physical pages are counted against one capacity in one critical section) and reads the
/// device's segment bytes through `segment_bytes`. NULL on host out-of-memory.
sim_vmm *cci__sim_vmm_create(pthread_mutex_t *device_lock, const size_t *segment_bytes, size_t capacity);
void cci__sim_vmm_destroy(sim_vmm *v);
/// Bytes of physical pages alive (created and not yet gone); the device lock must be held.
size_t cci__sim_vmm_physical(const sim_vmm *v);

/// The ops table; every call's ctx is the cci_sim_device, which cci__sim_vmm_of resolves.
extern const cci_backend_vmm_ops cci__sim_vmm_ops;
/// Defined in backend_sim.c: the VMM state of a simulated device (its backend ctx).
sim_vmm *cci__sim_vmm_of(void *device_ctx);

#endif
