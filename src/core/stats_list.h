// SPDX-License-Identifier: MIT
// The one list of statistics. The public struct (include/ccinterpose.h) keeps its field names and
// layout for the programs that read it; everything else that walks the statistics (the peak reset,
// the report's rows and JSON keys, the layout check below) is derived from these two lists, so a
// new statistic is added here and in the struct, and nowhere else.
#ifndef CCI_STATS_LIST_H
#define CCI_STATS_LIST_H

#include <stddef.h>

#include "ccinterpose.h"

/// Counter families (cci_stat: current, peak, allocated, freed), in memory_summary()'s row order.
/// X(field, memory_summary() label, per_pool: an array indexed by CCI_POOL_*, bytes: humanise)
#define CCI_STAT_FAMILIES(X)                                                                       \
    X(allocated_bytes, "Allocated memory", 1, 1)                                                   \
    X(active_bytes, "Active memory", 1, 1)                                                         \
    X(requested_bytes, "Requested memory", 1, 1)                                                   \
    X(reserved_bytes, "GPU reserved memory", 1, 1)                                                 \
    X(inactive_split_bytes, "Non-releasable memory", 1, 1)                                         \
    X(allocation, "Allocations", 1, 0)                                                             \
    X(active, "Active allocs", 1, 0)                                                               \
    X(segment, "GPU reserved segments", 1, 0)                                                      \
    X(inactive_split, "Non-releasable allocs", 1, 0)                                               \
    X(oversize_allocations, "Oversize allocations", 0, 0)                                          \
    X(oversize_segments, "Oversize GPU segments", 0, 0)

/// Event counts (uint64_t, only ever grow). X(field, torch: 1 when memory_stats() has this key,
/// 0 for ours alone, which reports keep apart so PyTorch's key set stays exact)
#define CCI_STAT_COUNTERS(X)                                                                       \
    X(num_alloc_retries, 1)                                                                        \
    X(num_ooms, 1)                                                                                 \
    X(num_sync_all_streams, 1)                                                                     \
    X(num_device_alloc, 1)                                                                         \
    X(num_device_free, 1)                                                                          \
    X(num_fence_records, 0)                                                                        \
    X(num_fence_waits, 0)                                                                          \
    X(num_fence_catch_ups, 0)

/// Figures taken when the copy is made, not counted (uint64_t): max_split_size,
/// largest_free_block, device_capacity. Reports print them where they belong.
#define CCI_STAT_FIGURES(X) X(max_split_size) X(largest_free_block) X(device_capacity)

// The lists must cover the struct exactly: a field added to one and not the other stops the build.
#define CCI__FAMILY_SIZE(f, label, per_pool, bytes) +(per_pool ? CCI_POOL_KINDS : 1) * sizeof(cci_stat)
#define CCI__SCALAR_SIZE(f, ...) +sizeof(uint64_t)
_Static_assert(sizeof(cci_stats) == 2 * sizeof(uint32_t) CCI_STAT_FAMILIES(CCI__FAMILY_SIZE)
                                        CCI_STAT_COUNTERS(CCI__SCALAR_SIZE) CCI_STAT_FIGURES(CCI__SCALAR_SIZE),
               "cci_stats and the lists in stats_list.h disagree");
#undef CCI__FAMILY_SIZE
#undef CCI__SCALAR_SIZE

#endif
