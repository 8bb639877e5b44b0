// SPDX-License-Identifier: MIT
// Stream handover (stream_handover.c) on the simulated device with a fence lag: a whole free
// segment of stream 1 goes to stream 2's allocation instead of a new segment, but only once a
// fence recorded on stream 1 has passed (the host waits for it if not); a segment with a live
// block never moves; the moved segment then belongs to stream 2 alone, with the free set
// consistent.
#include <string.h>

#include "allocator_impl.h"
#include "testutil.h"

#define MiB ((size_t)1 << 20)

static cci_allocator *make(cci_sim_device **sim, uint64_t lag)
{
    cci_config cfg;
    cci_config_default(&cfg);
    cfg.compact_segments = 0;  // ordinary segments: the policy under test (the default is compact with VMM)
    *sim = cci_sim_create(1ull << 40);
    cci_sim_set_fence_lag(*sim, lag);
    return cci_allocator_create(0, &cfg, cci_sim_backend(*sim));
}

static void finish(cci_allocator *a, cci_sim_device *sim)
{
    char msg[256];
    uint64_t live;
    CHECK(cci_allocator_check(a, msg, sizeof msg) == 0, "invariants: %s", msg);
    cci_allocator_destroy(a, 1);
    cci_sim_fence_counts(sim, NULL, NULL, &live);
    CHECK_EQ_U(live, 0, "the handover's fence is released");
    cci_sim_destroy(sim);
}

static uint64_t sim_waits(cci_sim_device *sim)
{
    uint64_t w;
    cci_sim_fence_counts(sim, NULL, &w, NULL);
    return w;
}

static uint64_t device_allocs(cci_allocator *a)
{
    cci_stats st;
    cci_alloc_stats(a, &st);
    return st.num_device_alloc;
}

// The device lags far behind: stream 1's work before the free has not run when stream 2 asks.
static void test_waits_for_the_fence(void)
{
    cci_sim_device *sim;
    cci_allocator *a = make(&sim, 1000);
    uintptr_t p = 0, q = 0;
    CHECK(cci_malloc(a, 8 * MiB, 1, &p) == CCI_OK, "alloc on stream 1");
    CHECK(cci_free(a, p, 1, CCI_FREE_NOW) == CCI_OK, "cudaFreeAsync(p, 1): reusable at once on 1");
    uint64_t segs = device_allocs(a), waits = sim_waits(sim);
    CHECK(cci_malloc(a, 8 * MiB, 2, &q) == CCI_OK, "alloc on stream 2");
    CHECK(q == p, "stream 2 gets stream 1's whole free segment");
    CHECK_EQ_U(device_allocs(a), segs, "no new segment reserved");
    CHECK_EQ_U(sim_waits(sim), waits + 1, "the host waited for the fence: the device had not passed it");
    CHECK_EQ_U(a->stream_handovers, 1, "one handover");
    CHECK(cci__segment_of(a, q)->stream == 2, "the segment now belongs to stream 2");
    CHECK(cci_free(a, q, 2, CCI_FREE_NOW) == CCI_OK, "freed on its new stream: reusable at once there");
    uintptr_t r = 0;
    CHECK(cci_malloc(a, 8 * MiB, 2, &r) == CCI_OK && r == q, "stream 2 reuses it from its own pool");
    CHECK_EQ_U(a->stream_handovers, 1, "no second handover for stream 2's own block");
    cci_free(a, r, 2, CCI_FREE_NOW);
    finish(a, sim);
}

// Lag 0: the device keeps up, so the fence has passed at its record and the host never waits.
static void test_passed_fence_costs_no_wait(void)
{
    cci_sim_device *sim;
    uintptr_t p = 0, q = 0;
    cci_allocator *a;
    a = make(&sim, 0);
    CHECK(cci_malloc(a, 8 * MiB, 1, &p) == CCI_OK, "alloc on stream 1");
    cci_free(a, p, 1, CCI_FREE_NOW);
    CHECK(cci_malloc(a, 8 * MiB, 2, &q) == CCI_OK && q == p, "handed over at lag 0");
    CHECK_EQ_U(sim_waits(sim), 0, "no host wait for a fence that has passed");
    cci_free(a, q, 2, CCI_FREE_NOW);
    finish(a, sim);
}

// A segment with a live block on stream 1 is never handed over, nor a block pending a fence.
static void test_partial_segment_stays(void)
{
    cci_sim_device *sim;
    cci_allocator *a = make(&sim, 1000);
    uintptr_t p = 0, keep = 0, q = 0;
    CHECK(cci_malloc(a, 4 * MiB, 1, &p) == CCI_OK, "alloc on stream 1");
    CHECK(cci_malloc(a, 4 * MiB, 1, &keep) == CCI_OK, "a second block on stream 1");
    CHECK(cci__segment_of(a, p) == cci__segment_of(a, keep), "both in one segment");
    cci_free(a, p, 1, CCI_FREE_NOW);
    uint64_t segs = device_allocs(a);
    CHECK(cci_malloc(a, 4 * MiB, 2, &q) == CCI_OK, "alloc on stream 2");
    CHECK(cci__segment_of(a, q) != cci__segment_of(a, p), "a segment with a live block stays with stream 1");
    CHECK_EQ_U(device_allocs(a), segs + 1, "a new segment instead");
    CHECK_EQ_U(a->stream_handovers, 0, "no handover");
    cci_free(a, q, 2, CCI_FREE_NOW);
    cci_free(a, keep, 1, CCI_FREE_NOW);
    finish(a, sim);
}

int main(void)
{
    test_waits_for_the_fence();
    test_passed_fence_costs_no_wait();
    test_partial_segment_stays();
    return t_finish();
}
