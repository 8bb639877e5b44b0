// SPDX-License-Identifier: MIT
// Offline replay of allocation traces through the core on the simulated device.
#ifndef CCI_REPLAY_H
#define CCI_REPLAY_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "allocator.h"
#include "trace.h"
#include "vmm_counts.h"

/// Where an allocation failed in the replay: what `--capacity` shows of each of the first OOMs.
#define CCI_REPLAY_OOMS_KEPT 10
typedef struct cci_replay_oom {
    uint64_t event;              ///< index of the event in the trace (0-based)
    uint32_t device;
    int recorded;                ///< 1: the trace's own oom event, failing again; 0: an allocation
    uint64_t size;               ///< bytes requested
    uint64_t device_free;        ///< the simulated device's capacity minus what it had reserved
    uint64_t reserved;           ///< what the allocator had reserved
    uint64_t largest_free;       ///< largest cached free block the allocator had
} cci_replay_oom;

typedef struct cci_replay_result {
    uint64_t events;
    uint64_t allocs;
    uint64_t frees;
    uint64_t unmatched_frees;   ///< frees of blocks allocated before the trace began
    uint64_t failed_allocs;     ///< allocations that hit OOM during the replay
    cci_stats stats;            ///< device 0's statistics at the end (peaks included)
    uint64_t peak_allocated;    ///< summed over devices
    uint64_t peak_reserved;
    uint64_t num_device_alloc;
    uint64_t num_device_free;    ///< segments given back (summed over devices)
    uint64_t device_alloc_bytes; ///< bytes of the segments allocated (summed; sizes cudaMalloc's cost)
    uint64_t num_ooms;
    uint64_t num_alloc_retries;
    uint64_t num_fence_records;  ///< fences the allocators recorded (summed over devices)
    uint64_t num_fence_waits;    ///< times the allocators waited for a fence (summed over devices)
    uint64_t num_blocking_waits; ///< of those, waits for a fence the simulated device had not yet
                                 ///< passed: the ones that would stall a real host
    uint64_t num_fence_queries;  ///< fence queries the allocators made (summed over devices)
    uint64_t num_fence_orders;   ///< waits answered by ordering instead (--fenced-order)
    uint64_t num_fence_catch_ups; ///< of those, orders the host first waited for the last one for
    uint64_t num_reuse_frees;    ///< fenced frees that skipped their fence (--fenced-order, none busy)
    uint64_t num_reuse_orders;   ///< orders made before such blocks went to new owners
    cci_vmm_counts vmm;          ///< VMM calls, summed over devices (mode 0: ordinary segments);
                                 ///< the run's own, the allocators' teardown left out
    size_t nfirst_ooms;          ///< the first failed allocations, in trace order
    cci_replay_oom first_ooms[CCI_REPLAY_OOMS_KEPT];
} cci_replay_result;

/// How frees are replayed. The default (all zero) keeps the program's own stream semantics.
typedef struct cci_replay_opts {
    /// 1: every free is replayed as CCI_FREE_FENCED (the preload's rule once a program has created
    /// a stream) at the moment the default replay would make the block reusable, on simulated
    /// devices that run `fence_lag` allocations behind the host: a fence passes once that many
    /// allocations (plus the allocator's own fence records) have been replayed after it. Lag 0 is
    /// a device that keeps up with the host. Ignored under immediate_reuse.
    int fenced;
    uint64_t fence_lag;
    /// With fenced: the program's streams, what one fence costs on a GPU (1 record event per
    /// device, then a look at each stream); the core asks dear fences less (0 or 1: one stream).
    unsigned fence_streams;
    unsigned fence_busy;  // of those, the streams that always have work in flight (--fenced-busy)
    /// With fenced: a wait for reuse is answered by ordering on the GPU instead (the CUDA
    /// backend's THE ORDER), where at most CCI_FENCE_ORDER_MAX_BUSY streams are busy.
    int fence_order;
} cci_replay_opts;

/// Replays the trace under `cfg` on one simulated device per trace device, each of `capacity`
/// bytes (0 = unlimited). The program's stream semantics are kept: a block becomes reusable at
/// its free_completed event. A recorded OOM is replayed as an allocation attempt (freed at once
/// when it succeeds), so a replay at the recorded capacity flushes the caches the run flushed.
/// Segment events are not replayed: segments follow from the policy (so an explicit empty_cache
/// of the recorded program is not reproduced). 0, or -1 on host out-of-memory.
int cci_replay(const cci_trace *t, const cci_config *cfg, size_t capacity, cci_replay_result *res);
/// The same, bounded in time: past `deadline` (CLOCK_MONOTONIC; NULL = none) it stops and returns
/// 1, with the figures of the events replayed until then (so only a lower bound on the peaks).
int cci_replay_until(const cci_trace *t, const cci_config *cfg, size_t capacity, const struct timespec *deadline,
                     cci_replay_result *res);
/// The same with replay options (NULL: the defaults).
int cci_replay_opts_until(const cci_trace *t, const cci_config *cfg, size_t capacity,
                          const cci_replay_opts *opts, const struct timespec *deadline, cci_replay_result *res);

#endif
