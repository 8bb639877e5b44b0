// SPDX-License-Identifier: MIT
// What fences cost the host (fence_costs.h): the counters, their copy into the statistics
// (cci_stats' fence_* fields, through the backend's costs operation), and the exit line, which is
// printed from the statistics.
#include "fence_costs.h"

#include "clock.h"
#include "context_fences.h"
#include "fence.h"
#include "log.h"

cci_fence_costs cci__fence_cost_shards[COST_SHARDS];
__thread cci_fence_costs *cci__fence_costs_my __attribute__((tls_model("initial-exec")));
static _Atomic unsigned next_shard;

cci_fence_costs *cci__fence_costs_pick(void)
{
    unsigned i = atomic_fetch_add_explicit(&next_shard, 1, memory_order_relaxed) % COST_SHARDS;
    return cci__fence_costs_my = &cci__fence_cost_shards[i];
}

void cci__fence_cost_add(int kind, unsigned long long since, size_t events)
{
    cci_fence_costs *c = cci__fence_costs_mine();
    atomic_fetch_add_explicit(&c->calls[kind], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->events[kind], events, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->ns[kind], cci_pl_now_ns() - since, memory_order_relaxed);
}

void cci__fence_costs_atfork_child(void)
{
    _Atomic unsigned long long *c = (_Atomic unsigned long long *)cci__fence_cost_shards;
    size_t n = COST_SHARDS * (sizeof(cci_fence_costs) / sizeof(_Atomic unsigned long long));
    for (size_t i = 0; i < n; i++)
        atomic_store(&c[i], 0);
}

void cci_cuda_fence_costs(cci_stats *out)
{
    // The shards' sums, word by word: every field is an atomic counter (the alignment's padding
    // words stay 0).
    _Static_assert(sizeof(cci_fence_costs) % sizeof(_Atomic unsigned long long) == 0, "counters only");
    enum { N = sizeof(cci_fence_costs) / sizeof(_Atomic unsigned long long) };
    cci_fence_costs sum_ = {0}, *k = &sum_;
    for (int sh = 0; sh < COST_SHARDS; sh++) {
        _Atomic unsigned long long *from = (_Atomic unsigned long long *)&cci__fence_cost_shards[sh];
        _Atomic unsigned long long *to = (_Atomic unsigned long long *)k;
        for (int i = 0; i < N; i++)
            atomic_store_explicit(&to[i], atomic_load_explicit(&to[i], memory_order_relaxed) +
                                              atomic_load_explicit(&from[i], memory_order_relaxed),
                                  memory_order_relaxed);
    }
    out->fence_record_calls = atomic_load(&k->calls[COST_RECORD]);
    out->fence_record_events = atomic_load(&k->events[COST_RECORD]);
    out->fence_record_ns = atomic_load(&k->ns[COST_RECORD]);
    out->fence_query_calls = atomic_load(&k->calls[COST_QUERY]);
    out->fence_query_events = atomic_load(&k->events[COST_QUERY]);
    out->fence_query_ns = atomic_load(&k->ns[COST_QUERY]);
    out->fence_wait_calls = atomic_load(&k->calls[COST_WAIT]);
    out->fence_wait_events = atomic_load(&k->events[COST_WAIT]);
    out->fence_wait_ns = atomic_load(&k->ns[COST_WAIT]);
    out->fence_order_calls = atomic_load(&k->calls[COST_ORDER]);
    out->fence_order_ns = atomic_load(&k->ns[COST_ORDER]);
    out->fence_catch_up_calls = atomic_load(&k->calls[COST_CATCH_UP]);
    out->fence_catch_up_events = atomic_load(&k->events[COST_CATCH_UP]);
    out->fence_catch_up_ns = atomic_load(&k->ns[COST_CATCH_UP]);
    out->fence_barrier_records = atomic_load(&k->barrier_records);
    out->fence_context_records = atomic_load(&k->ctx_records);
    out->fence_stream_queries = atomic_load(&k->stream_checks);
    out->fence_stream_idle_answers = atomic_load(&k->stream_idle_answers);
    out->fence_sweeps = atomic_load(&k->sweeps_recorded);
    out->fence_shared_event_queries = atomic_load(&k->shared_queries);
    out->fence_looks_put_off = atomic_load(&k->looks_put_off);
    out->fence_orders_made = atomic_load(&k->orders_made);
    out->fence_orders_covered = atomic_load(&k->orders_covered);
    out->fence_orders_refused = atomic_load(&k->orders_refused);
    out->fence_orders_behind = atomic_load(&k->orders_behind);
    out->fence_order_stream_waits = atomic_load(&k->order_injections);
    out->fence_order_skips = atomic_load(&k->order_skips);
    out->fence_context_orders = atomic_load(&k->ctx_orders);
    out->fence_watcher_rounds = atomic_load(&k->watcher_rounds);
    out->fence_watcher_stream_queries = atomic_load(&k->watcher_checks);
    out->fence_watcher_looks_ahead = atomic_load(&k->watcher_looks_ahead);
    out->fence_watched_answers = atomic_load(&k->watched_answers);
    out->fence_reuse_frees = atomic_load(&k->reuse_frees);
    out->fence_reuse_orders = atomic_load(&k->reuse_orders);
    out->fence_reuse_refused = atomic_load(&k->reuse_refused);
    out->fence_reuse_order_ns = atomic_load(&k->ns[COST_REUSE_ORDER]);
}

void cci_cuda_fence_log_costs(const cci_stats *s)
{
    if (s->fence_reuse_frees)
        cci_log(CCI_LOG_INFO, "orders at reuse: %llu frees joined the pool at once, their fence "
                "skipped; %llu orders before such blocks went to new owners, %.1f ms; %llu refused "
                "(the allocation waited for a fence)", (unsigned long long)s->fence_reuse_frees,
                (unsigned long long)s->fence_reuse_orders, s->fence_reuse_order_ns / 1e6,
                (unsigned long long)s->fence_reuse_refused);
    if (!s->fence_record_calls && !s->fence_query_calls && !s->fence_wait_calls)
        return;
    // The query and wait times include the lazy part's calls.
    cci_log(CCI_LOG_INFO, "fence costs on the host: %llu records (%llu events, %llu "
            "barriers) %.1f ms; %llu queries (%llu events) %.1f ms; %llu waits (%llu events) blocked %.1f ms; "
            "non-blocking streams, looked at lazily: %llu stream queries (%llu idle), %llu sweeps "
            "recorded, %llu sweep/retired event queries, %llu looks put off",
            (unsigned long long)s->fence_record_calls, (unsigned long long)s->fence_record_events,
            (unsigned long long)s->fence_barrier_records, s->fence_record_ns / 1e6,
            (unsigned long long)s->fence_query_calls, (unsigned long long)s->fence_query_events,
            s->fence_query_ns / 1e6, (unsigned long long)s->fence_wait_calls,
            (unsigned long long)s->fence_wait_events, s->fence_wait_ns / 1e6,
            (unsigned long long)s->fence_stream_queries, (unsigned long long)s->fence_stream_idle_answers,
            (unsigned long long)s->fence_sweeps, (unsigned long long)s->fence_shared_event_queries,
            (unsigned long long)s->fence_looks_put_off);
    if (s->fence_context_records || cci_context_fences_usable())
        cci_log(CCI_LOG_INFO, "context fences (one event for every stream of a device): %llu of the "
                "records above, %llu orders; %llu times the host first waited for the GPU to reach "
                "the last order, blocked %.1f ms; now %s", (unsigned long long)s->fence_context_records,
                (unsigned long long)s->fence_context_orders, (unsigned long long)s->fence_catch_up_calls,
                s->fence_catch_up_ns / 1e6, cci_context_fences_state());
    else
        cci_log(CCI_LOG_INFO, "context fences: %s", cci_context_fences_state());
    if (s->fence_watcher_rounds)
        cci_log(CCI_LOG_INFO, "fence watcher (a thread of ours): %llu looks made every fence up to "
                "them passed, %llu of the stream queries above were its own (%llu looks ahead); %llu "
                "fence questions of the program's threads answered from them without a driver call",
                (unsigned long long)s->fence_watcher_rounds, (unsigned long long)s->fence_watcher_stream_queries,
                (unsigned long long)s->fence_watcher_looks_ahead, (unsigned long long)s->fence_watched_answers);
    if (s->fence_orders_made || s->fence_orders_refused || s->fence_orders_behind)
        cci_log(CCI_LOG_INFO, "fences ordered on the GPU instead of waited for: %llu rounds, %llu "
                "more covered by an earlier round (%llu stream waits queued, %.1f ms; %llu streams "
                "not asked, found idle since); %llu refused (the host waited); %llu answered behind "
                "the last order (the host waited for it, then asked again)",
                (unsigned long long)s->fence_orders_made, (unsigned long long)s->fence_orders_covered,
                (unsigned long long)s->fence_order_stream_waits, s->fence_order_ns / 1e6,
                (unsigned long long)s->fence_order_skips, (unsigned long long)s->fence_orders_refused,
                (unsigned long long)s->fence_orders_behind);
}
