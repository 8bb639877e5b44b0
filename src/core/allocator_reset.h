// SPDX-License-Identifier: MIT
// Resetting an allocator in place: what cudaDeviceReset needs without ending the allocator's life.
#ifndef CCI_ALLOCATOR_RESET_H
#define CCI_ALLOCATOR_RESET_H

#include "allocator.h"

/// Empties `a` under its own lock and leaves it as cci_allocator_create made it: every segment
/// goes back to the backend (release_segments = 1) or is forgotten (0), every block is gone, the
/// pools, pending frees, statistics and remembered peak start over. The configuration, device,
/// capacity and the attached observers stay. The observers see the end of every live block
/// (FREE_REQUESTED for an allocated one, then FREE_COMPLETED) and of every segment
/// (SEGMENT_FREE), so a timeline or trace follows the reset like any other frees.
///
/// Unlike cci_allocator_destroy, the pointer stays valid: a thread that read it before the reset
/// (the live-report dumper, a concurrent cudaMalloc) only waits for the lock and then finds an
/// empty allocator. Blocks handed out before the reset become unknown pointers (CCI_ENOTOURS).
void cci_allocator_reset(cci_allocator *a, int release_segments);

#endif
