// SPDX-License-Identifier: MIT
// Allocation helpers of the core tests that drive one allocator: an allocation that must succeed
// (a failure is counted, with the size, stream and code), and a fresh copy of the statistics.
#ifndef CCI_ALLOC_CHECKS_H
#define CCI_ALLOC_CHECKS_H

#include "allocator.h"
#include "testutil.h"

static inline uintptr_t t_must_alloc(cci_allocator *a, size_t size, uint64_t stream)
{
    uintptr_t p = 0;
    int rc = cci_malloc(a, size, stream, &p);
    CHECK(rc == CCI_OK, "malloc(%zu) on stream %llu returned %d", size, (unsigned long long)stream, rc);
    return p;
}

static inline const cci_stats *t_stats(cci_allocator *a, cci_stats *st)
{
    cci_alloc_stats(a, st);
    return st;
}

/// The end of a test on the simulated device: the allocator's invariants checked, then the
/// allocator (its segments given back) and the device destroyed.
static inline void t_check_destroy(cci_allocator *a, cci_sim_device *sim)
{
    char msg[256];
    CHECK(cci_allocator_check(a, msg, sizeof msg) == 0, "invariants: %s", msg);
    cci_allocator_destroy(a, 1);
    cci_sim_destroy(sim);
}

#endif
