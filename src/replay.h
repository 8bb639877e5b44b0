// SPDX-License-Identifier: MIT
// Offline replay of allocation traces through the core on the simulated device.
#ifndef CCI_REPLAY_H
#define CCI_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "allocator.h"

typedef enum cci_trace_action {
    CCI_TA_ALLOC, CCI_TA_FREE_REQUESTED, CCI_TA_FREE_COMPLETED,
    CCI_TA_SEGMENT_ALLOC, CCI_TA_SEGMENT_FREE, CCI_TA_OOM,
} cci_trace_action;

typedef struct cci_trace_event {
    uint64_t addr;
    uint64_t size;
    uint64_t stream;
    uint32_t device;
    uint8_t action;
} cci_trace_event;

typedef struct cci_trace {
    cci_trace_event *ev;
    size_t n, cap;
} cci_trace;

/// Reads a text trace (docs/text-trace-format.md). 0, or -1 with one line in err naming the
/// file, the line number and the problem.
int cci_trace_read_text(const char *path, cci_trace *t, char *err, size_t errlen);
void cci_trace_free(cci_trace *t);

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
    uint64_t num_ooms;
    uint64_t num_alloc_retries;
} cci_replay_result;

/// Replays the trace under `cfg` on one simulated device per trace device, each of `capacity`
/// bytes (0 = unlimited). The program's stream semantics are kept: a block becomes reusable at
/// its free_completed event. 0, or -1 on host out-of-memory.
int cci_replay(const cci_trace *t, const cci_config *cfg, size_t capacity, cci_replay_result *res);

#endif
