// SPDX-License-Identifier: MIT
// The one list of statistics. The public struct (include/ccinterpose.h) keeps its field names and
// layout for the programs that read it; everything else that walks the statistics (the peak reset,
// the report's rows and JSON keys, the layout check below) is derived from these lists, so a new
// statistic is added here and in the struct, and nowhere else (a cost also where a backend fills it).
#ifndef CCI_STATS_LIST_H
#define CCI_STATS_LIST_H

#include <stddef.h>

#include "ccinterpose.h"

/// One family's change by d: current moves, the increases add to allocated, the decreases to freed,
/// and the peak follows current up. Every keeper of statistics (the core, the pinned host cache,
/// the program's own mappings) changes a cci_stat this way.
static inline void cci_stat_change(cci_stat *s, int64_t d)
{
    s->current += d;
    if (d > 0) {
        s->allocated += d;
        if (s->current > s->peak)
            s->peak = s->current;
    } else {
        s->freed -= d;
    }
}

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
    X(num_fence_catch_ups, 0)                                                                      \
    X(num_fence_slack_grows, 0)                                                                    \
    X(fence_slack_bytes, 0)                                                                        \
    X(num_locked_allocs, 0)                                                                        \
    X(num_locked_frees, 0)                                                                         \
    X(tc_declined_credit, 0)                                                                       \
    X(tc_declined_kept_wait, 0)                                                                    \
    X(tc_declined_busy, 0)                                                                         \
    X(tc_declined_keep_full, 0)

/// What the device's own calls cost the host (uint64_t, only ever grow; ours alone, not PyTorch
/// keys), filled in by the backend when the copy is made (backend.h, costs), never counted by the
/// core. X(field, scope): CCI_COST_DEVICE, the device's own; CCI_COST_PROCESS, counted by the CUDA
/// backend for the whole process (a fence covers every device), the same for every device.
enum { CCI_COST_DEVICE, CCI_COST_PROCESS };
#define CCI_STAT_COSTS(X)                                                                          \
    X(fence_record_calls, CCI_COST_PROCESS)                                                        \
    X(fence_record_events, CCI_COST_PROCESS)                                                       \
    X(fence_record_ns, CCI_COST_PROCESS)                                                           \
    X(fence_query_calls, CCI_COST_PROCESS)                                                         \
    X(fence_query_events, CCI_COST_PROCESS)                                                        \
    X(fence_query_ns, CCI_COST_PROCESS)                                                            \
    X(fence_wait_calls, CCI_COST_PROCESS)                                                          \
    X(fence_wait_events, CCI_COST_PROCESS)                                                         \
    X(fence_wait_ns, CCI_COST_PROCESS)                                                             \
    X(fence_order_calls, CCI_COST_PROCESS)                                                         \
    X(fence_order_ns, CCI_COST_PROCESS)                                                            \
    X(fence_catch_up_calls, CCI_COST_PROCESS)                                                      \
    X(fence_catch_up_events, CCI_COST_PROCESS)                                                     \
    X(fence_catch_up_ns, CCI_COST_PROCESS)                                                         \
    X(fence_barrier_records, CCI_COST_PROCESS)                                                     \
    X(fence_context_records, CCI_COST_PROCESS)                                                     \
    X(fence_stream_queries, CCI_COST_PROCESS)                                                      \
    X(fence_stream_idle_answers, CCI_COST_PROCESS)                                                 \
    X(fence_sweeps, CCI_COST_PROCESS)                                                              \
    X(fence_shared_event_queries, CCI_COST_PROCESS)                                                \
    X(fence_looks_put_off, CCI_COST_PROCESS)                                                       \
    X(fence_orders_made, CCI_COST_PROCESS)                                                         \
    X(fence_orders_covered, CCI_COST_PROCESS)                                                      \
    X(fence_orders_refused, CCI_COST_PROCESS)                                                      \
    X(fence_orders_behind, CCI_COST_PROCESS)                                                       \
    X(fence_order_stream_waits, CCI_COST_PROCESS)                                                  \
    X(fence_order_skips, CCI_COST_PROCESS)                                                         \
    X(fence_context_orders, CCI_COST_PROCESS)                                                      \
    X(fence_watcher_rounds, CCI_COST_PROCESS)                                                      \
    X(fence_watcher_stream_queries, CCI_COST_PROCESS)                                              \
    X(fence_watcher_looks_ahead, CCI_COST_PROCESS)                                                 \
    X(fence_watched_answers, CCI_COST_PROCESS)                                                     \
    X(fence_reuse_frees, CCI_COST_PROCESS)                                                         \
    X(fence_reuse_orders, CCI_COST_PROCESS)                                                        \
    X(fence_reuse_refused, CCI_COST_PROCESS)                                                       \
    X(fence_reuse_order_ns, CCI_COST_PROCESS)                                                      \
    X(vmm_create_calls, CCI_COST_DEVICE)                                                           \
    X(vmm_create_ns, CCI_COST_DEVICE)                                                              \
    X(vmm_map_calls, CCI_COST_DEVICE)                                                              \
    X(vmm_map_ns, CCI_COST_DEVICE)                                                                 \
    X(vmm_set_access_calls, CCI_COST_DEVICE)                                                       \
    X(vmm_set_access_ns, CCI_COST_DEVICE)                                                          \
    X(vmm_unmap_calls, CCI_COST_DEVICE)                                                            \
    X(vmm_unmap_ns, CCI_COST_DEVICE)                                                               \
    X(vmm_release_calls, CCI_COST_DEVICE)                                                          \
    X(vmm_release_ns, CCI_COST_DEVICE)

/// Figures taken when the copy is made, not counted (uint64_t): max_split_size,
/// largest_free_block, device_capacity. Reports print them where they belong.
#define CCI_STAT_FIGURES(X) X(max_split_size) X(largest_free_block) X(device_capacity)

/// Memory handed out past the pools (cci_stat each, ours alone), counted by the device backend that
/// passed it through and written into the copy with the costs (backend.h, outside): managed memory
/// and allocations from other memory pools; then those pools' own figures (uint64_t).
#define CCI_STAT_OUTSIDE(X) X(managed_allocations) X(managed_bytes) X(pool_allocations) X(pool_bytes)
#define CCI_STAT_OUTSIDE_FIGURES(X) \
    X(pool_reserved_bytes) X(pool_reserved_high) X(pool_used_bytes) X(pool_used_high)
/// The pinned host cache's statistics (the preload's, for the whole process; the core keeps none).
/// Families: X(field, label, bytes: humanise). Counts and figures: X(field, label).
#define CCI_STAT_PINNED_FAMILIES(X)                                                                \
    X(pinned_buffers, "Pinned buffers in use", 0)                                                  \
    X(pinned_in_use_bytes, "Pinned memory in use", 1)                                              \
    X(pinned_cached_bytes, "Pinned memory cached", 1)                                              \
    X(pinned_reserved_bytes, "Pinned memory held", 1)
#define CCI_STAT_PINNED_COUNTS(X)                                                                  \
    X(pinned_hits, "reused")                                                                       \
    X(pinned_misses, "newly pinned")                                                               \
    X(pinned_host_allocs, "pinnings asked of CUDA")                                                \
    X(pinned_host_frees, "buffers given back")                                                     \
    X(pinned_register_ns, "time pinning (ns)")                                                     \
    X(pinned_fence_records, "fences at frees")                                                     \
    X(pinned_unfenced_frees, "frees without a fence")                                              \
    X(pinned_reserve_segment_bytes, "reserve segment (bytes)")                                    \
    X(pinned_background_reclaims, "found passed by the background thread")
/// The program's own virtual-memory allocations kept for reuse (the preload's; the core keeps none).
/// Families: X(field, label, bytes: humanise). Counts: X(field, label).
#define CCI_STAT_PROGRAM_VMM_FAMILIES(X)                                                           \
    X(program_vmm_held_bytes, "Held by the program", 1)                                            \
    X(program_vmm_kept_bytes, "Kept for reuse", 1)
#define CCI_STAT_PROGRAM_VMM_COUNTS(X)                                                             \
    X(program_vmm_creates, "cuMemCreate calls")                                                    \
    X(program_vmm_create_bytes, "their bytes")                                                     \
    X(program_vmm_reused, "answered with a kept buffer")                                           \
    X(program_vmm_reused_bytes, "their bytes")                                                     \
    X(program_vmm_given_back, "kept buffers given back")

// The lists must cover the struct exactly: a field added to one and not the other stops the build.
#define CCI__FAMILY_SIZE(f, label, per_pool, bytes) +(per_pool ? CCI_POOL_KINDS : 1) * sizeof(cci_stat)
#define CCI__SCALAR_SIZE(f, ...) +sizeof(uint64_t)
#define CCI__OUTSIDE_SIZE(f) +sizeof(cci_stat)
#define CCI__PINNED_FAMILY_SIZE(f, label, bytes) +sizeof(cci_stat)
_Static_assert(sizeof(cci_stats) == 2 * sizeof(uint32_t) CCI_STAT_FAMILIES(CCI__FAMILY_SIZE)
                                        CCI_STAT_COUNTERS(CCI__SCALAR_SIZE) CCI_STAT_FIGURES(CCI__SCALAR_SIZE)
                                            CCI_STAT_COSTS(CCI__SCALAR_SIZE) CCI_STAT_OUTSIDE(CCI__OUTSIDE_SIZE)
                                                CCI_STAT_OUTSIDE_FIGURES(CCI__SCALAR_SIZE)
                                                    CCI_STAT_PINNED_FAMILIES(CCI__PINNED_FAMILY_SIZE)
                                                        CCI_STAT_PINNED_COUNTS(CCI__SCALAR_SIZE)
                                                            CCI_STAT_PROGRAM_VMM_FAMILIES(CCI__PINNED_FAMILY_SIZE)
                                                                CCI_STAT_PROGRAM_VMM_COUNTS(CCI__SCALAR_SIZE),
               "cci_stats and the lists in stats_list.h disagree");
#undef CCI__FAMILY_SIZE
#undef CCI__SCALAR_SIZE
#undef CCI__OUTSIDE_SIZE
#undef CCI__PINNED_FAMILY_SIZE

#endif
