// SPDX-License-Identifier: MIT
// What fences cost the host (fence_costs.h): the counters, and the exit line made of them.
#include "fence_costs.h"

#include "clock.h"
#include "context_fences.h"
#include "fence.h"
#include "log.h"

cci_fence_costs cci__fence_costs;

void cci__fence_cost_add(int kind, unsigned long long since, size_t events)
{
    atomic_fetch_add_explicit(&cci__fence_costs.calls[kind], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&cci__fence_costs.events[kind], events, memory_order_relaxed);
    atomic_fetch_add_explicit(&cci__fence_costs.ns[kind], cci_pl_now_ns() - since, memory_order_relaxed);
}

void cci__fence_costs_atfork_child(void)
{
    _Atomic unsigned long long *c = (_Atomic unsigned long long *)&cci__fence_costs;
    for (size_t i = 0; i < sizeof cci__fence_costs / sizeof *c; i++)
        atomic_store(&c[i], 0);
}

void cci_cuda_fence_log_costs(void)
{
    cci_fence_costs *k = &cci__fence_costs;
    unsigned long long c[COST_KINDS], e[COST_KINDS], ns[COST_KINDS];
    for (int i = 0; i < COST_KINDS; i++) {
        c[i] = atomic_load(&k->calls[i]);
        e[i] = atomic_load(&k->events[i]);
        ns[i] = atomic_load(&k->ns[i]);
    }
    if (!c[COST_RECORD] && !c[COST_QUERY] && !c[COST_WAIT])
        return;
    // The query and wait times include the lazy part's calls.
    cci_log(CCI_LOG_INFO, "fence costs on the host: %llu records (%llu events, %llu "
            "barriers) %.1f ms; %llu queries (%llu events) %.1f ms; %llu waits (%llu events) blocked %.1f ms; "
            "non-blocking streams, looked at lazily: %llu stream queries (%llu idle), %llu sweeps "
            "recorded, %llu sweep/retired event queries, %llu looks put off", c[COST_RECORD], e[COST_RECORD],
            atomic_load(&k->barrier_records), ns[COST_RECORD] / 1e6, c[COST_QUERY], e[COST_QUERY],
            ns[COST_QUERY] / 1e6, c[COST_WAIT], e[COST_WAIT], ns[COST_WAIT] / 1e6, atomic_load(&k->stream_checks),
            atomic_load(&k->stream_idle_answers), atomic_load(&k->sweeps_recorded),
            atomic_load(&k->shared_queries), atomic_load(&k->looks_put_off));
    if (atomic_load(&k->ctx_records) || cci_context_fences_usable())
        cci_log(CCI_LOG_INFO, "context fences (one event for every stream of a device): %llu of the "
                "records above, %llu orders; %llu times the host first waited for the GPU to reach "
                "the last order, blocked %.1f ms; now %s", atomic_load(&k->ctx_records),
                atomic_load(&k->ctx_orders), c[COST_CATCH_UP], ns[COST_CATCH_UP] / 1e6,
                cci_context_fences_state());
    else
        cci_log(CCI_LOG_INFO, "context fences: %s", cci_context_fences_state());
    if (atomic_load(&k->watcher_rounds))
        cci_log(CCI_LOG_INFO, "fence watcher (a thread of ours): %llu looks made every fence up to "
                "them passed, %llu of the stream queries above were its own (%llu looks ahead); %llu "
                "fence questions of the program's threads answered from them without a driver call",
                atomic_load(&k->watcher_rounds), atomic_load(&k->watcher_checks),
                atomic_load(&k->watcher_looks_ahead), atomic_load(&k->watched_answers));
    if (atomic_load(&k->orders_made) || atomic_load(&k->orders_refused) || atomic_load(&k->orders_behind))
        cci_log(CCI_LOG_INFO, "fences ordered on the GPU instead of waited for: %llu rounds, %llu "
                "more covered by an earlier round (%llu stream waits queued, %.1f ms; %llu streams "
                "not asked, found idle since); %llu refused (the host waited); %llu answered behind "
                "the last order (the host waited for it, then asked again)", atomic_load(&k->orders_made),
                atomic_load(&k->orders_covered), atomic_load(&k->order_injections), ns[COST_ORDER] / 1e6,
                atomic_load(&k->order_skips), atomic_load(&k->orders_refused), atomic_load(&k->orders_behind));
}
