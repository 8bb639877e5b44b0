// SPDX-License-Identifier: MIT
// The driver calls' costs in the statistics (cci_stats version 4), on the simulated device: the
// core asks the backend's `costs` operation at every copy (cci_alloc_stats and the report's
// layout), and the simulated device answers with the calls it counts itself (fences, orders, VMM
// pages) and no time. A backend without the operation leaves every cost at 0.
#include <stddef.h>
#include <string.h>

#include "allocator.h"
#include "backend.h"
#include "stats_list.h"
#include "testutil.h"

static cci_allocator *make(cci_sim_device *sim, const char *conf, cci_backend be)
{
    cci_config c;
    cci_config_default(&c);
    c.fence_slack_mb = 0;  // orders and waits to count: no growth on the fence budget instead
    char err[256];
    if (cci_config_parse(&c, conf, "test", err, sizeof err, NULL, NULL) != 0) {
        fprintf(stderr, "bad test config '%s': %s\n", conf, err);
        exit(2);
    }
    (void)sim;
    return cci_allocator_create(0, &c, be);
}

// Fenced frees behind a lag: misses record fences, the ticks query them, a full device waits.
static void fenced_pairs(cci_allocator *a)
{
    for (int i = 0; i < 64; i++) {
        uintptr_t p;
        CHECK(cci_malloc(a, (MiB << (i % 3)) + (size_t)i * 4096, 0, &p) == CCI_OK, "pair %d: malloc", i);
        CHECK(cci_free(a, p, 0, CCI_FREE_FENCED) == CCI_OK, "pair %d: fenced free", i);
    }
}

static uint64_t cost_sum(const cci_stats *s)
{
    uint64_t sum = 0;
#define ADD(field, scope) sum += s->field;
    CCI_STAT_COSTS(ADD)
#undef ADD
    return sum;
}

int main(void)
{
    // Fences and VMM pages on one simulated device.
    cci_sim_device *sim = cci_sim_create((size_t)64 << 20);
    cci_sim_set_fence_lag(sim, 3);
    cci_allocator *a = make(sim, "expandable_segments:True", cci_sim_backend(sim));
    fenced_pairs(a);
    cci_stats st;
    cci_alloc_stats(a, &st);
    uint64_t records, waits;
    cci_sim_fence_counts(sim, &records, &waits, NULL);
    cci_sim_vmm_stats v;
    cci_sim_vmm_stats_get(sim, &v);
    CHECK(st.fence_record_calls > 0 && st.fence_record_calls == records, "fence records: %llu, the device's %llu",
          (unsigned long long)st.fence_record_calls, (unsigned long long)records);
    CHECK_EQ_U(st.fence_record_calls, st.num_fence_records,
               "every record the device saw was one of the core's batches");
    CHECK_EQ_U(st.fence_record_events, st.fence_record_calls, "one event a record");
    CHECK(st.fence_query_calls > 0, "fences queried (%llu)", (unsigned long long)st.fence_query_calls);
    CHECK_EQ_U(st.fence_query_calls, cci_sim_fence_queries(sim), "queries: the device's count");
    CHECK_EQ_U(st.fence_wait_events, waits, "waits that made the device catch up");
    CHECK(st.fence_wait_calls >= st.fence_wait_events, "every such wait was a wait call (%llu >= %llu)",
          (unsigned long long)st.fence_wait_calls, (unsigned long long)st.fence_wait_events);
    CHECK(v.page_creates > 0 && v.maps > 0 && v.set_access_calls > 0, "pages created, mapped, given access");
    CHECK(st.vmm_create_calls == v.page_creates && st.vmm_map_calls == v.maps &&
              st.vmm_set_access_calls == v.set_access_calls && st.vmm_unmap_calls == v.unmaps &&
              st.vmm_release_calls == v.page_releases,
          "VMM calls as the device counted them (%llu creates, %llu maps, %llu access, %llu unmaps, %llu releases)",
          (unsigned long long)st.vmm_create_calls, (unsigned long long)st.vmm_map_calls,
          (unsigned long long)st.vmm_set_access_calls, (unsigned long long)st.vmm_unmap_calls,
          (unsigned long long)st.vmm_release_calls);
    uint64_t ns = 0;
#define NS(field, scope) ns += strstr(#field, "_ns") ? st.field : 0;
    CCI_STAT_COSTS(NS)
#undef NS
    CHECK_EQ_U(ns, 0, "no time on a simulated device");

    // The report's copy (the layout) carries the same figures.
    cci_layout l;
    CHECK(cci_layout_take(a, &l) == 0, "layout taken");
    cci_alloc_stats(a, &st);
    CHECK(memcmp((const char *)&l.stats + offsetof(cci_stats, fence_record_calls),
                 (const char *)&st + offsetof(cci_stats, fence_record_calls),
                 sizeof st - offsetof(cci_stats, fence_record_calls)) == 0,
          "the layout's statistics carry the costs too");
    cci_layout_free(&l);
    cci_allocator_destroy(a, 1);
    cci_sim_destroy(sim);

    // Waits for reuse answered by orders, one outstanding at a time (a width above the bound):
    // every order call is made, behind or refused.
    sim = cci_sim_create((size_t)24 << 20);
    cci_sim_set_fence_lag(sim, 1000);
    cci_sim_set_fence_order(sim, 1);
    cci_sim_set_fence_width(sim, CCI_FENCE_ORDER_MAX_BUSY + 1);
    a = make(sim, "", cci_sim_backend(sim));
    for (int i = 0; i < 16; i++) {
        uintptr_t p;
        CHECK(cci_malloc(a, 16 * MiB, 0, &p) == CCI_OK, "order round %d: malloc", i);
        CHECK(cci_free(a, p, 0, CCI_FREE_FENCED) == CCI_OK, "order round %d: fenced free", i);
    }
    cci_alloc_stats(a, &st);
    CHECK(st.fence_orders_made > 0 && st.fence_orders_made == cci_sim_fence_orders_made(sim),
          "orders made: %llu, the device's %llu", (unsigned long long)st.fence_orders_made,
          (unsigned long long)cci_sim_fence_orders_made(sim));
    CHECK_EQ_U(st.fence_order_calls, st.fence_orders_made + st.fence_orders_behind + st.fence_orders_refused,
               "order calls = made + behind + refused");
    CHECK_EQ_U(st.fence_catch_up_events, cci_sim_fence_catch_ups(sim), "catch-ups: the device's count");
    CHECK(st.fence_catch_up_calls >= st.fence_catch_up_events, "catch-up calls (%llu) >= catch-ups (%llu)",
          (unsigned long long)st.fence_catch_up_calls, (unsigned long long)st.fence_catch_up_events);
    cci_allocator_destroy(a, 1);
    cci_sim_destroy(sim);

    // A backend without `costs`: every cost figure 0, whatever the device did.
    sim = cci_sim_create((size_t)64 << 20);
    cci_sim_set_fence_lag(sim, 3);
    cci_backend be = cci_sim_backend(sim);
    cci_backend_ops without = *be.ops;
    without.costs = NULL;
    be.ops = &without;
    a = make(sim, "expandable_segments:True", be);
    fenced_pairs(a);
    cci_alloc_stats(a, &st);
    cci_sim_fence_counts(sim, &records, NULL, NULL);
    CHECK(records > 0 && st.num_fence_records > 0, "the device recorded fences (%llu)", (unsigned long long)records);
    CHECK_EQ_U(cost_sum(&st), 0, "without the operation, no cost figure");
    cci_allocator_destroy(a, 1);
    cci_sim_destroy(sim);
    return t_finish();
}
