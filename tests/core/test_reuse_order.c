// SPDX-License-Identifier: MIT
// Orders at reuse (fence_ops.reuse_order, src/core/fenced.c) on the simulated device, whose fences
// never pass by themselves here (a lag of 1000 records): a fenced free joins the free set at once
// and the next block handed out is preceded by exactly one order; the layout is then the one
// immediate reuse makes, while fences per batch (the control) make another; a refused order
// makes the allocation wait for a fence of its own before the block goes out; a busy side stream
// keeps the fences; an order is still made for such frees after the backend stops offering them.
#include <string.h>

#include "alloc_checks.h"

#define BIG (20 * MiB)  // fills a segment of its own: only the freed block itself can serve

typedef struct fixture {
    cci_sim_device *sim;
    cci_allocator *a;
    cci_stats st;
} fixture;

static void make(fixture *f, int reuse)
{
    memset(f, 0, sizeof *f);
    cci_config cfg;
    cci_config_default(&cfg);
    cfg.fence_slack_mb = 0;
    f->sim = cci_sim_create((size_t)64 << 30);
    cci_sim_set_fence_lag(f->sim, 1000);
    cci_sim_set_fence_width(f->sim, 33);  // PyTorch's idle stream pool
    cci_sim_set_fence_order(f->sim, 1);
    cci_sim_set_reuse_order(f->sim, reuse);
    f->a = cci_allocator_create(0, &cfg, cci_sim_backend(f->sim));
}

static void done(fixture *f)
{
    t_check_destroy(f->a, f->sim);
}

static uint64_t orders(fixture *f)
{
    uint64_t frees, made, refused;
    cci_sim_reuse_counts(f->sim, &frees, &made, &refused);
    return made;
}

static void test_one_order_before_reuse(void)
{
    fixture f;
    make(&f, 1);
    uintptr_t p = t_must_alloc(f.a, BIG, 0), q = t_must_alloc(f.a, BIG, 0);
    CHECK(cci_free(f.a, p, 0, CCI_FREE_FENCED) == CCI_OK, "fenced free");
    CHECK(cci_free(f.a, q, 0, CCI_FREE_FENCED) == CCI_OK, "fenced free");
    CHECK_EQ_U(cci_cached_free_bytes(f.a), 2 * BIG, "both blocks in the free set at once");
    CHECK_EQ_U(orders(&f), 0, "no order at the frees");
    uint64_t segs = t_stats(f.a, &f.st)->num_device_alloc;
    uintptr_t r = t_must_alloc(f.a, BIG, 0);
    CHECK(r == p || r == q, "a freed block reused although no fence passed");
    CHECK_EQ_U(orders(&f), 1, "after one order");
    uintptr_t s = t_must_alloc(f.a, BIG, 0);
    CHECK((s == p || s == q) && s != r, "the other one reused too");
    CHECK_EQ_U(orders(&f), 1, "under the same order: no free since");
    t_stats(f.a, &f.st);
    CHECK_EQ_U(f.st.num_device_alloc, segs, "without growing the pool");
    CHECK_EQ_U(f.st.num_fence_records, 0, "without a fence");
    CHECK_EQ_U(f.st.num_fence_waits, 0, "or a host wait");
    CHECK_EQ_U(f.st.fence_reuse_frees, 2, "the statistics count the frees");
    CHECK_EQ_U(f.st.fence_reuse_orders, 1, "and the order");
    CHECK(cci_free(f.a, r, 0, CCI_FREE_NOW) == CCI_OK && cci_free(f.a, s, 0, CCI_FREE_NOW) == CCI_OK, "frees");
    done(&f);
}

// A mixed run of sizes (small and large pools, splits and merges): `mode` 0 immediate reuse
// (CCI_FREE_NOW), 1 fenced frees with orders at reuse, 2 fenced frees behind fences. The addresses
// handed out, in order, and the peak reserved.
#define STEPS 4000
static size_t run_mixed(int mode, uintptr_t *got, int64_t *peak)
{
    fixture f;
    make(&f, mode == 1);
    uintptr_t live[64] = {0};
    size_t n = 0;
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < STEPS; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        unsigned slot = (unsigned)(x % 64);
        if (live[slot]) {
            CHECK(cci_free(f.a, live[slot], 0, mode ? CCI_FREE_FENCED : CCI_FREE_NOW) == CCI_OK, "free");
            live[slot] = 0;
        } else {
            size_t size = (x >> 8) % 4 == 0 ? ((x >> 12) % 48 + 1) * MiB : ((x >> 12) % 2048 + 1) * 512;
            live[slot] = got[n++] = t_must_alloc(f.a, size, 0);
        }
    }
    *peak = t_stats(f.a, &f.st)->reserved_bytes[CCI_POOL_ALL].peak;
    if (mode == 1)
        CHECK(f.st.fence_reuse_orders > 0 && f.st.fence_reuse_orders <= f.st.fence_reuse_frees,
              "at most one order a free (%llu orders, %llu frees)", (unsigned long long)f.st.fence_reuse_orders,
              (unsigned long long)f.st.fence_reuse_frees);
    for (int i = 0; i < 64; i++)
        if (live[i])
            cci_free(f.a, live[i], 0, CCI_FREE_NOW);
    done(&f);
    return n;
}

static void test_layout_as_immediate(void)
{
    static uintptr_t now[STEPS], ordered[STEPS], fenced[STEPS];
    int64_t peak_now, peak_ordered, peak_fenced;
    size_t n = run_mixed(0, now, &peak_now);
    CHECK_EQ_U(run_mixed(1, ordered, &peak_ordered), n, "as many allocations");
    CHECK(memcmp(now, ordered, n * sizeof *now) == 0, "orders at reuse hand out immediate reuse's addresses");
    CHECK_EQ_U(peak_ordered, peak_now, "and reserve its peak");
    // The control: behind fences the same run takes other blocks (here, by chance, at a lower peak).
    run_mixed(2, fenced, &peak_fenced);
    CHECK(memcmp(now, fenced, n * sizeof *now) != 0, "fences per batch make another layout (peak %lld "
          "against %lld)", (long long)peak_fenced, (long long)peak_now);
}

static void test_refused_order_waits(void)
{
    fixture f;
    make(&f, 1);
    uintptr_t p = t_must_alloc(f.a, BIG, 0);
    CHECK(cci_free(f.a, p, 0, CCI_FREE_FENCED) == CCI_OK, "fenced free");
    cci_sim_refuse_reuse_orders(f.sim, 1);
    uintptr_t r = t_must_alloc(f.a, BIG, 0);
    CHECK(r == p, "the block reused");
    uint64_t waits;
    cci_sim_fence_counts(f.sim, NULL, &waits, NULL);
    t_stats(f.a, &f.st);
    CHECK_EQ_U(f.st.fence_reuse_refused, 1, "after the order was refused");
    CHECK_EQ_U(f.st.num_fence_waits, 1, "and the host waited for a fence");
    CHECK_EQ_U(waits, 1, "which the device had not passed");
    CHECK_EQ_U(f.st.fence_reuse_orders, 0, "no order made");
    CHECK(cci_free(f.a, r, 0, CCI_FREE_FENCED) == CCI_OK, "fenced free again");
    uintptr_t s = t_must_alloc(f.a, BIG, 0);
    CHECK(s == p && t_stats(f.a, &f.st)->fence_reuse_orders == 1, "the next one ordered again");
    CHECK(cci_free(f.a, s, 0, CCI_FREE_NOW) == CCI_OK, "free");
    done(&f);
}

static void test_busy_keeps_fences(void)
{
    fixture f;
    make(&f, 1);
    cci_sim_set_fence_busy(f.sim, 1);  // NCCL's stream under DDP
    uintptr_t p = t_must_alloc(f.a, BIG, 0);
    CHECK(cci_free(f.a, p, 0, CCI_FREE_FENCED) == CCI_OK, "fenced free");
    CHECK_EQ_U(cci_cached_free_bytes(f.a), 0, "the block waits behind its batch");
    CHECK_EQ_U(t_stats(f.a, &f.st)->fence_reuse_frees, 0, "no free skipped its fence");
    uintptr_t r = t_must_alloc(f.a, BIG, 0);
    CHECK(r == p && orders(&f) == 0, "reused through the fence's order, not an order at reuse");
    CHECK(cci_free(f.a, r, 0, CCI_FREE_NOW) == CCI_OK, "free");
    done(&f);
}

static void test_order_after_offer_ends(void)
{
    fixture f;
    make(&f, 1);
    uintptr_t p = t_must_alloc(f.a, BIG, 0);
    CHECK(cci_free(f.a, p, 0, CCI_FREE_FENCED) == CCI_OK, "fenced free, its fence skipped");
    cci_sim_set_reuse_order(f.sim, 0);  // a side stream became busy, say
    uintptr_t r = t_must_alloc(f.a, BIG, 0);
    CHECK(r == p && orders(&f) == 1, "the block still goes out behind an order");
    CHECK(cci_free(f.a, r, 0, CCI_FREE_FENCED) == CCI_OK, "fenced free, fences again");
    CHECK_EQ_U(cci_cached_free_bytes(f.a), 0, "behind its batch");
    CHECK(cci_free(f.a, t_must_alloc(f.a, BIG, 0), 0, CCI_FREE_NOW) == CCI_OK, "free");
    done(&f);
}

int main(void)
{
    test_one_order_before_reuse();
    test_layout_as_immediate();
    test_refused_order_waits();
    test_busy_keeps_fences();
    test_order_after_offer_ends();
    return t_finish();
}
