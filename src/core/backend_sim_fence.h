// SPDX-License-Identifier: MIT
// Private to the simulated device: its fence group (backend_sim_fence.c), kept apart from the
// segment and virtual-memory parts of backend_sim.c, which hold only a pointer to it.
#ifndef CCI_BACKEND_SIM_FENCE_H
#define CCI_BACKEND_SIM_FENCE_H

#include "backend.h"

typedef struct cci_sim_fences cci_sim_fences;

cci_sim_fences *cci__sim_fences_create(void);
void cci__sim_fences_destroy(cci_sim_fences *f);
/// The fence group; its ctx is the cci_sim_device, whose fences come from cci__sim_fences_of.
extern const cci_backend_fence_ops cci__sim_fence_ops;
/// The fence group's cost figures (backend.h, costs) into *out.
struct cci_stats;
void cci__sim_fence_costs(const cci_sim_device *sim, struct cci_stats *out);
/// Defined in backend_sim.c, which owns the device struct.
cci_sim_fences *cci__sim_fences_of(const cci_sim_device *sim);

#endif
