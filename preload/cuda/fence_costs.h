// SPDX-License-Identifier: MIT
// What fences cost the host, counted by the fence group's pieces (fence_*.c) in one struct.
//
// A fence is cheap when its events are recorded and queried, and costs the program's speed when
// the host blocks on one (the GPU's queue drains while the CPU waits). The counts say how much of
// each happened, so that a slow run under the default mode can be put down to the waits or
// cleared of them: they are statistics (cci_stats' fence_* fields, cci_cuda_fence_costs) and the
// exit lines print them. The lazy part's driver calls are counted on their own: stream questions
// (cuStreamQuery), sweeps recorded, shared events (sweeps, retired) queried.
#ifndef CCI_PRELOAD_FENCE_COSTS_H
#define CCI_PRELOAD_FENCE_COSTS_H

#include <stdatomic.h>
#include <stddef.h>

#include "export.h"

/// The contract's calls that are timed: calls, events asked or blocked on, host nanoseconds.
enum { COST_RECORD, COST_QUERY, COST_WAIT, COST_ORDER, COST_CATCH_UP, COST_REUSE_ORDER, COST_KINDS };

typedef struct cci_fence_costs {
    _Alignas(128) _Atomic unsigned long long calls[COST_KINDS], events[COST_KINDS], ns[COST_KINDS];
    _Atomic unsigned long long
        barrier_records,      // records whose legacy event orders all later work (THE BARRIER)
        ctx_records,          // records made of context events
        stream_checks,        // cuStreamQuery calls: looks, THE ORDER's rounds and census
        stream_idle_answers,  // of those, streams found idle
        sweeps_recorded,      // sweep events recorded on busy streams
        shared_queries,       // sweep and retired events asked
        looks_put_off,        // looks asked in passing and rationed (CCI_FENCE_PUT_OFF)
        orders_made,          // THE ORDER's rounds that ordered their fence
        orders_covered,       // orders answered by an earlier round (no driver call)
        orders_refused,       // orders refused: the core waited
        orders_behind,        // orders answered CCI_ORDER_BEHIND: the core caught up first
        order_injections,     // stream waits queued by the rounds
        order_skips,          // streams a round did not ask (found idle since)
        ctx_orders,           // orders made of a context event and a context wait
        watcher_checks,       // of the stream questions, the watcher's
        watcher_rounds,       // the watcher's looks that found every fence up to theirs passed
        watcher_looks_ahead,  // the watcher's looks ahead
        watched_answers,      // fence questions answered from the watcher's looks
        reuse_frees,          // frees that skipped their fence (the order at reuse)
        reuse_orders,         // orders made at reuse
        reuse_refused;        // orders at reuse refused: the core waited for a fence
} cci_fence_costs;

// Counted in shards, a thread in one of them: the threads that record their own fences (a thread
// per stream) had queued on these counters' cache lines. Read as their sums (cci_cuda_fence_costs).
#define COST_SHARDS 16
extern cci_fence_costs cci__fence_cost_shards[COST_SHARDS] CCI_HIDDEN;
extern __thread cci_fence_costs *cci__fence_costs_my __attribute__((tls_model("initial-exec"))) CCI_HIDDEN;
cci_fence_costs *cci__fence_costs_pick(void);

/// The calling thread's shard.
static inline cci_fence_costs *cci__fence_costs_mine(void)
{
    cci_fence_costs *c = cci__fence_costs_my;
    return __builtin_expect(c != NULL, 1) ? c : cci__fence_costs_pick();
}

/// One timed call of `kind`, begun at `since` (cci_pl_now_ns), that asked `events` events.
void cci__fence_cost_add(int kind, unsigned long long since, size_t events);

/// One more of a cci_fence_costs counter: FENCE_COUNT(stream_checks).
#define FENCE_COUNT(field) atomic_fetch_add_explicit(&cci__fence_costs_mine()->field, 1, memory_order_relaxed)

/// In a fork child: the child's statistics and exit lines count the child's fences.
void cci__fence_costs_atfork_child(void);

#endif
