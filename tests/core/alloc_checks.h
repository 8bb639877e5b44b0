// SPDX-License-Identifier: MIT
// Allocation helpers of the core tests that drive one allocator: an allocation that must succeed
// (a failure is counted, with the size, stream and code), and a fresh copy of the statistics.
#ifndef CCI_ALLOC_CHECKS_H
#define CCI_ALLOC_CHECKS_H

#include <stdlib.h>

#include "allocator.h"
#include "testutil.h"

static inline uintptr_t t_must_alloc(cci_allocator *a, size_t size, uint64_t stream)
{
    uintptr_t p = 0;
    int rc = cci_malloc(a, size, stream, &p);
    CHECK(rc == CCI_OK, "malloc(%zu) on stream %llu returned %d", size, (unsigned long long)stream, rc);
    return p;
}

/// The fast paths raise no statistic past its peak (tcache.h): a free that splits a segment once
/// more than ever before takes the locked path. So n blocks of `size` are allocated, every other
/// one freed (which raises the inactive-split peak), then the rest: the later frees of such a run
/// have credit under every peak they move.
static inline void t_raise_split_peak(cci_allocator *a, size_t size, int n)
{
    uintptr_t *p = calloc((size_t)n, sizeof *p);
    CHECK(p != NULL, "host memory for %d blocks", n);
    if (!p)
        return;
    for (int i = 0; i < n; i++)
        p[i] = t_must_alloc(a, size, 0);
    for (int odd = 0; odd < 2; odd++)
        for (int i = odd; i < n; i += 2)
            CHECK(cci_free(a, p[i], 0, CCI_FREE_NOW) == CCI_OK, "free of a %zu-byte block", size);
    free(p);
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
