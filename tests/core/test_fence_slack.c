// SPDX-License-Identifier: MIT
// The fence budget (config fence_slack_mb) on the simulated device with a fence lag: where a
// pending batch could serve a miss, the pool grows instead of the host waiting, until the budget
// is spent, and then waits as before; giving segments back returns budget; a poor fit on the
// budget records no fence of its own and never waits (an order is still taken); without a budget
// (fence_slack_mb:0, the default) every one of these waits (the controls).
#include <string.h>

#include "alloc_checks.h"
#include "allocator_impl.h"

#define BIG (20 * MiB)  // fills its own segment: only the freed block itself can serve it again

typedef struct fixture {
    cci_sim_device *sim;
    cci_allocator *a;
    cci_stats st;
} fixture;

static void make(fixture *f, uint64_t lag, const char *conf)
{
    memset(f, 0, sizeof *f);
    cci_config cfg;
    cci_config_default(&cfg);
    cfg.compact_segments = 0;  // ordinary segments: the policy under test (the default is compact with VMM)
    char err[256];
    if (conf)
        CHECK(cci_config_parse(&cfg, conf, "test", err, sizeof err, NULL, NULL) == 0, "config %s: %s", conf, err);
    f->sim = cci_sim_create((size_t)64 << 30);
    cci_sim_set_fence_lag(f->sim, lag);
    f->a = cci_allocator_create(0, &cfg, cci_sim_backend(f->sim));
}

static void done(fixture *f)
{
    t_check_destroy(f->a, f->sim);
}

static const cci_stats *stats(fixture *f)
{
    return t_stats(f->a, &f->st);
}

static uintptr_t must_alloc(fixture *f, size_t size, uint64_t stream)
{
    return t_must_alloc(f->a, size, stream);
}

// One BIG block freed (fenced) and its batch closed by another stream's miss: a pending block
// that a BIG request on stream 0 could take once its fence passes (it never does by itself here).
static uintptr_t pending_big(fixture *f)
{
    uintptr_t p = must_alloc(f, BIG, 0);
    CHECK(cci_free(f->a, p, 0, CCI_FREE_FENCED) == CCI_OK, "fenced free");
    uintptr_t other = must_alloc(f, BIG, 7);  // closes the batch; cannot use the block
    CHECK(cci_free(f->a, other, 7, CCI_FREE_NOW) == CCI_OK, "free on stream 7");
    return p;
}

static void test_grow_until_spent(void)
{
    fixture f;
    make(&f, 1000, "fence_slack_mb:40");
    uintptr_t p = pending_big(&f);
    uint64_t segs = stats(&f)->num_device_alloc;
    uintptr_t q = must_alloc(&f, BIG, 0);
    CHECK(q != p, "on the budget the miss did not take the pending block");
    CHECK_EQ_U(stats(&f)->num_fence_waits, 0, "no host wait");
    CHECK_EQ_U(f.st.num_device_alloc, segs + 1, "the pool grew instead");
    CHECK_EQ_U(f.st.num_fence_slack_grows, 1, "one growth on the budget");
    CHECK_EQ_U(f.st.fence_slack_bytes, BIG, "of the new segment's bytes");
    uintptr_t r = must_alloc(&f, BIG, 0);
    CHECK(r != p && stats(&f)->num_fence_waits == 0 && f.st.num_fence_slack_grows == 2,
          "a second growth fits the 40 MiB too (%llu growths)", (unsigned long long)f.st.num_fence_slack_grows);
    uintptr_t s = must_alloc(&f, BIG, 0);
    CHECK(s == p, "the budget spent: the miss took the pending block");
    CHECK_EQ_U(stats(&f)->num_fence_waits, 1, "after a host wait, as without the budget");
    CHECK_EQ_U(f.st.num_fence_slack_grows, 2, "and no third growth");
    for (uintptr_t b[] = {q, r, s}, *i = b; i < b + 3; i++)
        CHECK(cci_free(f.a, *i, 0, CCI_FREE_NOW) == CCI_OK, "free");
    // Segments given back return their bytes to the budget.
    cci_alloc_empty_cache(f.a);
    pending_big(&f);
    uint64_t waits = stats(&f)->num_fence_waits;
    must_alloc(&f, BIG, 0);
    CHECK_EQ_U(stats(&f)->num_fence_waits, waits, "after empty_cache the budget has room again: no wait");
    CHECK_EQ_U(f.st.num_fence_slack_grows, 3, "a third growth");
    done(&f);
}

static void test_no_budget_waits(void)
{
    fixture f;
    make(&f, 1000, NULL);  // the default: no budget
    uintptr_t p = pending_big(&f);
    uintptr_t q = must_alloc(&f, BIG, 0);
    CHECK(q == p, "no budget: the miss took the pending block");
    CHECK_EQ_U(stats(&f)->num_fence_waits, 1, "after a host wait");
    CHECK_EQ_U(f.st.num_fence_slack_grows, 0, "nothing grown on a budget");
    CHECK(cci_free(f.a, q, 0, CCI_FREE_NOW) == CCI_OK, "free");
    done(&f);
}

// A thread's malloc+free loop of 2 MiB blocks (large ones: a small request's poor fit waits for
// the tick with or without a budget, test_fenced.c): each free pending behind the stream rule's
// fence, each allocation a poor fit in its 20 MiB segment's remainder. On the budget the poor fit
// is split and a fence is recorded only at the regular tick or at a miss; without it every other
// allocation records a fence to reach the pending block.
static void test_poor_fit_loop(void)
{
    uint64_t records[2];
    for (int budget = 0; budget <= 1; budget++) {
        fixture f;
        make(&f, 0, budget ? "fence_slack_mb:32" : NULL);
        for (int i = 0; i < 320; i++) {
            uintptr_t p = must_alloc(&f, 2 * MiB, 0);
            CHECK(cci_free(f.a, p, 0, CCI_FREE_FENCED) == CCI_OK, "fenced free");
        }
        records[budget] = stats(&f)->num_fence_records;
        CHECK(f.st.num_fence_waits == 0, "[budget %d] no host wait", budget);
        CHECK(f.st.reserved_bytes[CCI_POOL_ALL].peak == 20 * MiB, "[budget %d] one segment", budget);
        done(&f);
    }
    CHECK(records[1] <= 320 / 8 + 2, "on the budget: %llu fences for 320 pairs (one per tick of 16, or when "
          "the segment's ten blocks are all pending)",
          (unsigned long long)records[1]);
    CHECK(records[0] >= 320 / 4, "without it: %llu fences (the control)", (unsigned long long)records[0]);
}

// A poor fit beside a pending block that fits, where a fence is dear and every side stream idle
// (the case where the host used to wait even for the newest batch): on the budget the poor fit is
// split and nothing is waited for; an order that costs the host nothing is still taken.
static void test_poor_fit_never_waits(void)
{
    for (int order = 0; order <= 1; order++) {
        fixture f;
        make(&f, 1000, "fence_slack_mb:64");
        cci_sim_set_fence_width(f.sim, 32);
        cci_sim_set_fence_order(f.sim, order);
        uintptr_t big = must_alloc(&f, 3 * BIG, 0), a = must_alloc(&f, BIG, 0);
        CHECK(cci_free(f.a, big, 0, CCI_FREE_NOW) == CCI_OK, "the large block is free at once");
        cci_free(f.a, a, 0, CCI_FREE_FENCED);
        uintptr_t x = must_alloc(&f, 4 * BIG, 0);  // closes a's batch
        uintptr_t r = must_alloc(&f, BIG, 0);
        CHECK(stats(&f)->num_fence_waits == 0, "[order %d] no host wait", order);
        CHECK(f.st.num_fence_catch_ups == 0, "[order %d] no catch-up", order);
        if (order)
            CHECK(r == a && cci_sim_fence_orders_made(f.sim) == 1, "an order took the fitting block");
        else
            CHECK(r == big, "no order: the poor fit was split");
        CHECK(cci_free(f.a, x, 0, CCI_FREE_NOW) == CCI_OK && cci_free(f.a, r, 0, CCI_FREE_NOW) == CCI_OK, "free");
        done(&f);
    }
}

int main(void)
{
    test_grow_until_spent();
    test_no_budget_waits();
    test_poor_fit_loop();
    test_poor_fit_never_waits();
    return t_finish();
}
