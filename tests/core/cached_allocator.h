// SPDX-License-Identifier: MIT
// An allocator on a simulated device with its per-thread caches on: the subject of the thread-cache
// tests (test_tcache.c, test_solo.c).
#ifndef CCI_TEST_CACHED_ALLOCATOR_H
#define CCI_TEST_CACHED_ALLOCATOR_H

#include "allocator.h"
#include "backend.h"
#include "config.h"

static inline cci_allocator *t_cached_allocator(size_t capacity, cci_sim_device **sim)
{
    cci_config cfg;
    cci_config_default(&cfg);
    cfg.compact_segments = 0;  // ordinary segments: the policy under test (the default is compact with VMM)
    *sim = cci_sim_create(capacity);
    cci_allocator *a = cci_allocator_create(0, &cfg, cci_sim_backend(*sim));
    cci_allocator_thread_cache(a, 1);
    return a;
}

#endif
