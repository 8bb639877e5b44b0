// SPDX-License-Identifier: MIT
// Fenced frees on the simulated device with a fence lag: a fenced block is never handed out before
// its fence has passed; it is reused right after without growing the pool; a burst of frees costs
// one fence; an allocation the pending fenced bytes could cover waits for the oldest sufficient
// fence instead of reserving; a poor fit waits for a fitting pending block unless a side stream is
// busy and the block's batch is among the newest; fences that order all later work make their
// batch (and older ones) reusable at once; the OOM ladder still works; without fences FENCED acts
// as DEFERRED. All with the fence budget off (fence_slack_mb:0): test_fence_slack.c shows where
// it lets the pool grow instead of waiting.
#include <pthread.h>
#include <string.h>

#include "alloc_checks.h"
#include "allocator_impl.h"
#include "fit_rules.h"
#include "tcache_impl.h"

typedef struct fixture {
    cci_sim_device *sim;
    cci_allocator *a;
    cci_stats st;
    unsigned requested, completed;  // observer counts of FREE_REQUESTED / FREE_COMPLETED
} fixture;

static void observe(void *ud, const cci_event *ev)
{
    fixture *f = ud;
    f->requested += ev->kind == CCI_EV_FREE_REQUESTED;
    f->completed += ev->kind == CCI_EV_FREE_COMPLETED;
}

static void make(fixture *f, size_t capacity, uint64_t lag)
{
    memset(f, 0, sizeof *f);
    cci_config cfg;
    cci_config_default(&cfg);
    cfg.compact_segments = 0;  // ordinary segments: the policy under test (the default is compact with VMM)
    cfg.fence_slack_mb = 0;  // the trades below without the fence budget (test_fence_slack.c has it)
    f->sim = cci_sim_create(capacity);
    cci_sim_set_fence_lag(f->sim, lag);
    f->a = cci_allocator_create(0, &cfg, cci_sim_backend(f->sim));
    cci_allocator_add_observer(f->a, observe, f);
}

static void done(fixture *f)
{
    char msg[256];
    uint64_t live;
    CHECK(cci_allocator_check(f->a, msg, sizeof msg) == 0, "invariants: %s", msg);
    cci_allocator_destroy(f->a, 1);
    cci_sim_fence_counts(f->sim, NULL, NULL, &live);
    CHECK_EQ_U(live, 0, "every fence released by the end");
    cci_sim_destroy(f->sim);
}

static const cci_stats *stats(fixture *f)
{
    return t_stats(f->a, &f->st);
}

static uintptr_t must_alloc(fixture *f, size_t size, uint64_t stream)
{
    return t_must_alloc(f->a, size, stream);
}

static int block_state(fixture *f, uintptr_t p)
{
    cci_layout l;
    int state = -1;
    if (cci_layout_take(f->a, &l) != 0)
        return -1;
    for (size_t i = 0; i < l.nsegments; i++)
        for (size_t k = 0; k < l.segments[i].nblocks; k++)
            if (l.segments[i].blocks[k].addr == p)
                state = l.segments[i].blocks[k].state;
    cci_layout_free(&l);
    return state;
}

static uint64_t sim_waits(fixture *f)
{
    uint64_t w;
    cci_sim_fence_counts(f->sim, NULL, &w, NULL);
    return w;
}

// Blocks of exactly 20 MiB fill their own segment, so only the freed block itself can serve.
#define BIG (20 * MiB)

static void test_reuse_only_after_fence(void)
{
    fixture f;
    make(&f, (size_t)8 << 30, 1000);
    uintptr_t p = must_alloc(&f, BIG, 0);
    CHECK(cci_free(f.a, p, 0, CCI_FREE_FENCED) == CCI_OK, "fenced free");
    CHECK_EQ_U(f.requested, 1, "FREE_REQUESTED at the free");
    CHECK_EQ_U(f.completed, 0, "no FREE_COMPLETED before the fence");
    CHECK_EQ_U(block_state(&f, p), 2, "the block shows as waiting");
    CHECK_EQ_U(cci_cached_free_bytes(f.a), 0, "a waiting block is not cached-free");
    // A miss of another stream closes the batch (one fence) but cannot use the block: no wait.
    uintptr_t q = must_alloc(&f, BIG, 7);
    CHECK(q != p, "the fenced block is not handed to another stream");
    CHECK_EQ_U(stats(&f)->num_fence_records, 1, "the miss put the batch behind a fence");
    CHECK_EQ_U(f.st.num_fence_waits, 0, "and did not wait for it");
    CHECK_EQ_U(block_state(&f, p), 2, "still waiting: its fence has not passed");
    uint64_t segs = f.st.num_device_alloc;
    cci_sim_complete(f.sim, CCI_STREAM_ALL);
    uintptr_t r = must_alloc(&f, BIG, 0);
    CHECK(r == p, "reused right after its fence passed");
    CHECK_EQ_U(stats(&f)->num_device_alloc, segs, "without growing the pool");
    CHECK_EQ_U(f.st.num_fence_waits, 0, "and without a host wait");
    CHECK_EQ_U(f.completed, 1, "FREE_COMPLETED when it became reusable");
    done(&f);
}

// Fences that order all later work at once (fence_ops.orders: on CUDA, no stream outside the
// legacy stream's implicit synchronisation): a fenced block goes to its next owner as soon as its
// batch's fence is recorded, although the fence never passes here (lag), and so do the blocks of
// older batches recorded while fences did not order.
static void test_ordering_fences(void)
{
    fixture f;
    make(&f, (size_t)8 << 30, 1000);
    uintptr_t old = must_alloc(&f, BIG, 0), p = must_alloc(&f, BIG, 0);
    CHECK(cci_free(f.a, old, 0, CCI_FREE_FENCED) == CCI_OK, "fenced free, fences not ordering");
    uintptr_t other = must_alloc(&f, BIG, 7);  // another stream's miss closes that batch
    CHECK_EQ_U(block_state(&f, old), 2, "its block waits for its fence");
    cci_sim_set_fence_orders(f.sim, 1);
    CHECK(cci_free(f.a, p, 0, CCI_FREE_FENCED) == CCI_OK, "fenced free, fences ordering");
    CHECK_EQ_U(block_state(&f, p), 2, "waits in the open batch until a fence is recorded");
    uint64_t segs = stats(&f)->num_device_alloc, records = f.st.num_fence_records;
    uintptr_t q = must_alloc(&f, BIG, 0), r = must_alloc(&f, BIG, 0);
    CHECK((q == p && r == old) || (q == old && r == p), "both freed blocks reused at the next miss");
    CHECK_EQ_U(stats(&f)->num_device_alloc, segs, "without growing the pool");
    CHECK_EQ_U(f.st.num_fence_records, records + 1, "behind the one fence the miss recorded");
    CHECK_EQ_U(f.st.num_fence_waits, 0, "and without a host wait");
    CHECK_EQ_U(sim_waits(&f), 0, "(the fences themselves never passed)");
    CHECK_EQ_U(f.completed, 2, "FREE_COMPLETED for both");
    for (uintptr_t b[] = {other, q, r}, *i = b; i < b + 3; i++)
        CHECK(cci_free(f.a, *i, *i == other ? 7 : 0, CCI_FREE_NOW) == CCI_OK, "free");
    done(&f);
}

// Waits answered by ordering (fence_ops.order: on CUDA, every non-blocking stream made to wait
// for the fence): where a miss would wait for the oldest sufficient batch, that batch and the
// older ones go to new owners without a wait, although their fences never pass here (lag), and
// nothing newer does. Without the order the same miss waits (the control).
static void test_order_instead_of_wait(void)
{
    for (int order = 0; order <= 1; order++) {
        fixture f;
        make(&f, (size_t)8 << 30, 1000);
        cci_sim_set_fence_order(f.sim, order);
        uintptr_t a = must_alloc(&f, BIG, 0), b = must_alloc(&f, BIG, 0), c = must_alloc(&f, BIG, 0);
        CHECK(cci_free(f.a, a, 0, CCI_FREE_FENCED) == CCI_OK, "fenced free a");
        uintptr_t x = must_alloc(&f, 2 * BIG, 0);  // a miss a cannot serve: closes a's batch
        CHECK(cci_free(f.a, b, 0, CCI_FREE_FENCED) == CCI_OK, "fenced free b");
        uintptr_t y = must_alloc(&f, 2 * BIG, 0);  // closes b's batch
        CHECK(cci_free(f.a, c, 0, CCI_FREE_FENCED) == CCI_OK, "fenced free c (open batch)");
        uint64_t segs = stats(&f)->num_device_alloc;
        uintptr_t r = must_alloc(&f, BIG, 0);  // a miss: a's batch would do
        CHECK(r == a, "[order %d] the oldest sufficient batch's block reused", order);
        CHECK_EQ_U(stats(&f)->num_device_alloc, segs, "without growing the pool");
        CHECK_EQ_U(f.st.num_fence_waits, order ? 0 : 1, "a host wait only without the order");
        CHECK_EQ_U(cci_sim_fence_orders_made(f.sim), order ? 1 : 0, "one order instead");
        CHECK_EQ_U(block_state(&f, b), 2, "b (a younger batch) still waits");
        CHECK_EQ_U(block_state(&f, c), 2, "c (open batch) still waits");
        for (uintptr_t blocks[] = {x, y, r}, *i = blocks; i < blocks + 3; i++)
            CHECK(cci_free(f.a, *i, 0, CCI_FREE_NOW) == CCI_OK, "free");
        done(&f);
    }
}

// With more streams than an order may hold back (width above CCI_FENCE_ORDER_MAX_BUSY), the
// backend keeps one order outstanding: the second order, asked while the device has not reached
// the first, is answered CCI_ORDER_BEHIND. The host then waits for the first order's point only
// (catch_up), not for the wanted batch's own fence, and orders that batch: reused, no fence wait,
// and a younger batch's fence still pending (the device caught up no further).
static void test_order_catch_up(void)
{
    fixture f;
    make(&f, (size_t)8 << 30, 1000);
    cci_sim_set_fence_order(f.sim, 1);
    cci_sim_set_fence_width(f.sim, CCI_FENCE_ORDER_MAX_BUSY + 4);
    uintptr_t a = must_alloc(&f, BIG, 0), b = must_alloc(&f, BIG, 0), c = must_alloc(&f, BIG, 0);
    CHECK(cci_free(f.a, a, 0, CCI_FREE_FENCED) == CCI_OK, "fenced free a");
    uintptr_t x = must_alloc(&f, 2 * BIG, 0);  // a miss a cannot serve: closes a's batch
    uintptr_t r1 = must_alloc(&f, BIG, 0);     // wants a's batch: the first order
    CHECK(r1 == a, "a reused behind the first order");
    CHECK_EQ_U(cci_sim_fence_orders_made(f.sim), 1, "one order");
    CHECK_EQ_U(stats(&f)->num_fence_catch_ups, 0, "no catch-up before the first order");
    CHECK(cci_free(f.a, b, 0, CCI_FREE_FENCED) == CCI_OK, "fenced free b");
    uintptr_t y = must_alloc(&f, 2 * BIG, 0);  // closes b's batch
    CHECK(cci_free(f.a, c, 0, CCI_FREE_FENCED) == CCI_OK, "fenced free c (open batch)");
    uint64_t segs = stats(&f)->num_device_alloc;
    uintptr_t r2 = must_alloc(&f, BIG, 0);  // wants b's batch while the first order is outstanding
    CHECK(r2 == b, "b reused behind the second order");
    CHECK_EQ_U(stats(&f)->num_device_alloc, segs, "without growing the pool");
    CHECK_EQ_U(f.st.num_fence_catch_ups, 1, "after one wait for the first order's point");
    CHECK_EQ_U(cci_sim_fence_catch_ups(f.sim), 1, "(which the device had not reached)");
    CHECK_EQ_U(f.st.num_fence_waits, 0, "and no wait for b's own fence");
    CHECK_EQ_U(sim_waits(&f), 0, "(no fence waited for at all)");
    CHECK_EQ_U(cci_sim_fence_orders_made(f.sim), 2, "two orders");
    CHECK_EQ_U(block_state(&f, c), 2, "c (recorded later) still waits");
    for (uintptr_t blocks[] = {x, y, r1, r2}, *i = blocks; i < blocks + 4; i++)
        CHECK(cci_free(f.a, *i, 0, CCI_FREE_NOW) == CCI_OK, "free");
    done(&f);
}

static void test_burst_one_fence(void)
{
    fixture f;
    make(&f, (size_t)8 << 30, 0);
    uintptr_t p[20];
    for (int i = 0; i < 20; i++)
        p[i] = must_alloc(&f, 2 * MiB, 0);
    uint64_t segs = stats(&f)->num_device_alloc;
    for (int i = 0; i < 20; i++)
        cci_free(f.a, p[i], 0, CCI_FREE_FENCED);
    CHECK_EQ_U(stats(&f)->num_fence_records, 0, "frees alone record no fence below the bounds");
    for (int i = 0; i < 20; i++)
        must_alloc(&f, 2 * MiB, 0);
    CHECK_EQ_U(stats(&f)->num_fence_records, 1, "a burst of 20 frees cost one fence");
    CHECK_EQ_U(f.st.num_device_alloc, segs, "lag 0: all reused, the pool did not grow");
    CHECK_EQ_U(f.st.num_fence_waits, 0, "lag 0: no wait");
    done(&f);

    // The block bound closes a batch by itself: PENDING_BATCH frees, one fence.
    make(&f, (size_t)8 << 30, 1000);
    static uintptr_t small[PENDING_BATCH + 10];
    for (int i = 0; i < PENDING_BATCH + 10; i++)
        small[i] = must_alloc(&f, 4 * KiB, 0);
    for (int i = 0; i < PENDING_BATCH + 10; i++)
        cci_free(f.a, small[i], 0, CCI_FREE_FENCED);
    CHECK_EQ_U(stats(&f)->num_fence_records, 1, "the block bound closed exactly one batch");
    done(&f);
}

static void test_wait_for_oldest_sufficient(void)
{
    fixture f;
    make(&f, (size_t)8 << 30, 1000);
    uintptr_t a = must_alloc(&f, BIG, 0), b = must_alloc(&f, BIG, 0);
    cci_free(f.a, a, 0, CCI_FREE_FENCED);
    must_alloc(&f, BIG, 7);  // a miss: a's batch gets fence 1
    cci_free(f.a, b, 0, CCI_FREE_FENCED);
    must_alloc(&f, BIG, 7);  // b's batch gets fence 2
    CHECK_EQ_U(stats(&f)->num_fence_records, 2, "two batches, two fences");
    uint64_t segs = f.st.num_device_alloc;
    uintptr_t r = must_alloc(&f, BIG, 0);
    CHECK(r == a, "the allocation waited and took the oldest fenced block");
    CHECK_EQ_U(stats(&f)->num_device_alloc, segs, "instead of reserving a segment");
    CHECK_EQ_U(f.st.num_fence_waits, 1, "one host wait");
    CHECK_EQ_U(sim_waits(&f), 1, "the device was waited for once");
    CHECK_EQ_U(block_state(&f, b), 2, "the newer fence was not waited for");
    // More than the pending fenced bytes: reserving is the only way, so no wait.
    must_alloc(&f, 2 * BIG, 0);
    CHECK_EQ_U(stats(&f)->num_fence_waits, 1, "no wait when pending frees cannot cover the request");
    CHECK_EQ_U(f.st.num_device_alloc, segs + 1, "it reserved instead");
    cci_alloc_empty_cache(f.a);
    CHECK(block_state(&f, b) == -1, "empty_cache waited for the last fence and gave b's segment back");
    CHECK_EQ_U(stats(&f)->reserved_bytes[CCI_POOL_ALL].current, f.st.active_bytes[CCI_POOL_ALL].current,
               "nothing cached or waiting is left");
    done(&f);
}

// A poor fit (a free block three times the request) beside a pending block that fits, where a
// fence is dear: with every side stream idle the allocation waits for that block's batch, even
// the newest; with a side stream busy the newest FENCED_FIT_SPARE batches are spared and the poor
// fit is split instead.
static void poor_fit_case(unsigned busy)
{
    fixture f;
    make(&f, (size_t)8 << 30, 1000);
    cci_sim_set_fence_width(f.sim, 32);  // a dear fence: no extra fence of its own on a poor fit
    cci_sim_set_fence_busy(f.sim, busy);
    uintptr_t big = must_alloc(&f, 3 * BIG, 0), a = must_alloc(&f, BIG, 0), b = must_alloc(&f, BIG, 0);
    CHECK(cci_free(f.a, big, 0, CCI_FREE_NOW) == CCI_OK, "the large block is free at once");
    // Misses that nothing free or pending could hold (nor hand over: one stream) close the
    // batches. (A miss on another stream would take the free large segment over.)
    cci_free(f.a, a, 0, CCI_FREE_FENCED);
    must_alloc(&f, 4 * BIG, 0);  // a's batch gets fence 1
    cci_free(f.a, b, 0, CCI_FREE_FENCED);
    must_alloc(&f, 4 * BIG, 0);  // b's batch gets fence 2
    CHECK_EQ_U(stats(&f)->num_fence_records, 2, "two batches, two fences");
    CHECK_EQ_U(f.st.num_fence_waits, 0, "and no wait yet");
    uint64_t segs = f.st.num_device_alloc;
    uintptr_t r = must_alloc(&f, BIG, 0);
    if (busy) {
        CHECK(r == big, "busy %u: the newest batches are spared, the poor fit is split", busy);
        CHECK_EQ_U(stats(&f)->num_fence_waits, 0, "a busy side stream: no host wait");
        CHECK_EQ_U(block_state(&f, a), 2, "a busy side stream: a still waits for its fence");
    } else {
        CHECK(r == a, "idle side streams: the allocation waited for the oldest fitting block");
        CHECK_EQ_U(stats(&f)->num_fence_waits, 1, "idle side streams: one host wait");
        CHECK_EQ_U(block_state(&f, b), 2, "only the batch that fits was waited for");
        CHECK_EQ_U(block_state(&f, big), 0, "the large block stays whole and free");
    }
    CHECK_EQ_U(f.st.num_device_alloc, segs, "the pool did not grow");
    done(&f);
}

static void test_poor_fit_spare(void)
{
    poor_fit_case(0);
    poor_fit_case(1);
}

// A near fit (a free block 1.2 times the request, not poor by FENCED_FIT_NUM) beside a pending
// block of the exact size: only where a fence is dear and every side stream idle does the
// allocation take the pending block (FENCED_NEAR_FIT_NUM); a cheap fence or a busy side stream
// keeps the near fit, as before.
static void near_fit_case(unsigned width, unsigned busy, int takes_pending)
{
    fixture f;
    make(&f, (size_t)8 << 30, 1000);
    cci_sim_set_fence_width(f.sim, width);
    cci_sim_set_fence_busy(f.sim, busy);
    uintptr_t near = must_alloc(&f, 24 * MiB, 0), a = must_alloc(&f, BIG, 0);
    CHECK(cci_free(f.a, near, 0, CCI_FREE_NOW) == CCI_OK, "the near fit is free at once");
    cci_free(f.a, a, 0, CCI_FREE_FENCED);
    uintptr_t x = must_alloc(&f, 4 * BIG, 0);  // a miss nothing could hold: a's batch gets its fence
    uintptr_t r = must_alloc(&f, BIG, 0);
    if (takes_pending) {
        CHECK(r == a, "width %u, busy %u: the exact pending block, not the near fit", width, busy);
        CHECK_EQ_U(block_state(&f, near), 0, "the near fit stays whole and free");
    } else {
        CHECK(r == near, "width %u, busy %u: the near fit is taken", width, busy);
        CHECK_EQ_U(block_state(&f, a), 2, "and the pending block still waits");
    }
    CHECK_EQ_U(stats(&f)->num_fence_waits, takes_pending ? 1 : 0, "a host wait only for the exact block");
    CHECK(cci_free(f.a, x, 0, CCI_FREE_NOW) == CCI_OK && cci_free(f.a, r, 0, CCI_FREE_NOW) == CCI_OK, "free");
    done(&f);
}

static void test_near_fit(void)
{
    near_fit_case(32, 0, 1);
    near_fit_case(32, 1, 0);
    near_fit_case(1, 0, 0);
}

// A loop of fenced pairs of one size with a cheap fence, where every allocation meets a poor
// fit (the rest of its segment) and the block just freed waits for its fence. A large block's
// poor fit puts the open batch behind a fence every FENCED_FIT_HARVEST_EVERY allocations (a split
// large block costs memory); a small one's waits for the tick (FENCE_TICK): a small segment is
// 2 MiB at most, and a fence per pair or two was most of a thread's pair on the GPU.
static uint64_t pair_loop_fences(size_t size, int pairs)
{
    fixture f;
    make(&f, (size_t)8 << 30, 0);
    uintptr_t room = must_alloc(&f, 8 * size, 0);
    CHECK(cci_free(f.a, room, 0, CCI_FREE_NOW) == CCI_OK, "a free run eight times the request");
    for (int i = 0; i < pairs; i++)
        CHECK(cci_free(f.a, must_alloc(&f, size, 0), 0, CCI_FREE_FENCED) == CCI_OK, "fenced free");
    uint64_t n = stats(&f)->num_fence_records;
    CHECK(f.st.reserved_bytes[CCI_POOL_ALL].peak <= (int64_t)(8 * size < 2 * MiB ? 2 * MiB : 8 * size),
          "size %zu: the loop stayed within its first segment", size);
    done(&f);
    return n;
}

static void test_pair_loop_fences(void)
{
    uint64_t small = pair_loop_fences(64 * KiB, 320), large = pair_loop_fences(2 * MiB, 320);
    CHECK(small <= 320 / FENCE_TICK + 2, "small pairs: %llu fences for 320 pairs, at most one a tick",
          (unsigned long long)small);
    CHECK(large >= 320 / FENCED_FIT_HARVEST_EVERY / 2, "large pairs: %llu fences for 320 pairs, the poor "
          "fit harvested", (unsigned long long)large);
}

// A stream-ordered free on another stream than the block's (PyTorch's stream-ordered backend frees
// a tensor used on side streams on a stream of its own): fenced, so the block returns once a fence
// recorded after the free has passed, with no device synchronisation and no growth.
static void test_cross_stream_free(void)
{
    fixture f;
    make(&f, (size_t)8 << 30, 0);
    uintptr_t p = must_alloc(&f, BIG, 1);
    uint64_t segs = stats(&f)->num_device_alloc;
    CHECK(cci_free(f.a, p, 2, CCI_FREE_NOW) == CCI_OK, "freed on stream 2");
    CHECK_EQ_U(block_state(&f, p), 2, "not reusable at once");
    CHECK(must_alloc(&f, BIG, 1) == p, "reused on its own stream after the fence");
    CHECK_EQ_U(stats(&f)->num_fence_records, 1, "one fence");
    CHECK_EQ_U(f.st.num_device_alloc, segs, "the pool did not grow");
    CHECK_EQ_U(f.st.num_sync_all_streams, 0, "no device synchronisation");
    CHECK(cci_free(f.a, p, 1, CCI_FREE_NOW) == CCI_OK, "free");
    done(&f);
}

// ---- fenced frees a thread keeps (tcache_fenced.c) -----------------------------------------

#define HELD_SIZE (16 * KiB)  // 64 of them fill half a small segment: the rest serves the misses

static int among(const uintptr_t *p, int n, uintptr_t q)
{
    for (int i = 0; i < n; i++)
        if (p[i] == q)
            return 1;
    return 0;
}

// A thread's fenced frees of small blocks stay with it behind its own fence: a batch of
// HELD_BATCH frees records one fence with no allocation to prompt it (the locked path records
// none until a miss), none of its blocks comes back before that fence has passed, and all of them
// serve the thread's allocations right after, with no wait and no growth.
static void test_held_reuse_only_after_fence(void)
{
    fixture f;
    make(&f, (size_t)8 << 30, 1000);
    cci_allocator_thread_cache(f.a, 1);
    t_raise_split_peak(f.a, HELD_SIZE, 2 * HELD_BATCH);
    f.requested = f.completed = 0;
    uintptr_t p[HELD_BATCH], q[4];
    for (int i = 0; i < HELD_BATCH; i++)
        p[i] = must_alloc(&f, HELD_SIZE, 0);
    uint64_t locked_frees = stats(&f)->num_locked_frees;
    for (int i = 0; i < HELD_BATCH; i++)
        CHECK(cci_free(f.a, p[i], 0, CCI_FREE_FENCED) == CCI_OK, "fenced free");
    CHECK_EQ_U(stats(&f)->num_fence_records, 1, "the thread's batch went behind one fence at once");
    CHECK_EQ_U(f.requested, HELD_BATCH, "each free told as requested");
    CHECK_EQ_U(f.completed, 0, "none completed before the fence");
    CHECK_EQ_U(f.st.allocated_bytes[CCI_POOL_ALL].current, 0, "counted as freed");
    uint64_t locked = f.st.num_locked_allocs, waited = f.st.tc_declined_kept_wait;
    CHECK_EQ_U(f.st.num_locked_frees, locked_frees, "every fenced free kept without the lock");
    for (int i = 0; i < 4; i++) {
        q[i] = must_alloc(&f, HELD_SIZE, 0);
        CHECK(!among(p, HELD_BATCH, q[i]), "a block behind the unpassed fence is not handed out");
    }
    CHECK_EQ_U(stats(&f)->num_fence_waits, 0, "no host wait for it either");
    CHECK_EQ_U(f.st.num_locked_allocs - locked, 4, "each such allocation took the lock");
    CHECK_EQ_U(f.st.tc_declined_kept_wait - waited, 4, "and was counted as declined for the fence");
    locked = f.st.num_locked_allocs;
    uint64_t segs = f.st.num_device_alloc;
    cci_sim_complete(f.sim, CCI_STREAM_ALL);
    uintptr_t r[HELD_BATCH];
    for (int i = 0; i < HELD_BATCH; i++) {
        r[i] = must_alloc(&f, HELD_SIZE, 0);
        CHECK(among(p, HELD_BATCH, r[i]), "allocation %d reuses a block of the passed batch", i);
    }
    CHECK_EQ_U(stats(&f)->num_device_alloc, segs, "without growing the pool");
    CHECK_EQ_U(f.st.num_locked_allocs, locked, "and without the lock");
    CHECK_EQ_U(f.st.num_fence_waits, 0, "and without a host wait");
    CHECK_EQ_U(f.completed, HELD_BATCH, "every block told as completed");
    for (int i = 0; i < HELD_BATCH; i++)
        CHECK(cci_free(f.a, r[i], 0, CCI_FREE_NOW) == CCI_OK, "free");
    for (int i = 0; i < 4; i++)
        CHECK(cci_free(f.a, q[i], 0, CCI_FREE_NOW) == CCI_OK, "free");
    done(&f);
}

// A locked allocation of the thread leaves its passed blocks with it: one of another size (its
// magazines and kept blocks miss), then one of the kept size short of credit (a peak reset leaves
// no room under any peak), each take the lock, and the thread's next allocations of the kept size
// are still served from its passed blocks, without the lock. Had a locked allocation handed the
// passed blocks to the free set, every one of those would have taken the lock too.
static void test_held_stay_at_locked_allocation(void)
{
    fixture f;
    make(&f, (size_t)8 << 30, 1000);
    cci_allocator_thread_cache(f.a, 1);
    t_raise_split_peak(f.a, HELD_SIZE, 2 * HELD_BATCH);
    uintptr_t p[HELD_BATCH], r[3];
    for (int i = 0; i < HELD_BATCH; i++)
        p[i] = must_alloc(&f, HELD_SIZE, 0);
    for (int i = 0; i < HELD_BATCH; i++)
        CHECK(cci_free(f.a, p[i], 0, CCI_FREE_FENCED) == CCI_OK, "fenced free");
    cci_sim_complete(f.sim, CCI_STREAM_ALL);
    r[0] = must_alloc(&f, HELD_SIZE, 0);  // the batch passes and joins the passed blocks
    CHECK(among(p, HELD_BATCH, r[0]), "served from the passed batch");
    uint64_t locked = stats(&f)->num_locked_allocs;
    uintptr_t other = must_alloc(&f, 4 * HELD_SIZE, 0);
    CHECK_EQ_U(stats(&f)->num_locked_allocs - locked, 1, "another size takes the lock");
    cci_alloc_reset_peaks(f.a);
    uintptr_t short_of_credit = must_alloc(&f, HELD_SIZE, 0);
    CHECK_EQ_U(stats(&f)->num_locked_allocs - locked, 2, "so does one short of credit");
    CHECK(among(p, HELD_BATCH, short_of_credit), "which the lock serves from the thread's passed blocks");
    CHECK_EQ_U(f.st.allocation[CCI_POOL_ALL].current, 3, "counted as handed out");
    CHECK_EQ_U(f.st.active_bytes[CCI_POOL_ALL].current, (uint64_t)(6 * HELD_SIZE), "active bytes too");
    // Room under the new peaks for three allocations again: these three freed (into the open
    // batch, so the next allocations can come only from the passed blocks).
    CHECK(cci_free(f.a, short_of_credit, 0, CCI_FREE_FENCED) == CCI_OK, "free");
    CHECK(cci_free(f.a, other, 0, CCI_FREE_FENCED) == CCI_OK, "free");
    CHECK(cci_free(f.a, r[0], 0, CCI_FREE_FENCED) == CCI_OK, "free");
    uintptr_t first = r[0];
    locked = stats(&f)->num_locked_allocs;
    for (int i = 0; i < 3; i++) {
        r[i] = must_alloc(&f, HELD_SIZE, 0);
        CHECK(among(p, HELD_BATCH, r[i]), "allocation %d still from the passed batch", i);
        CHECK(r[i] != short_of_credit && r[i] != first, "and not one just freed");
    }
    CHECK_EQ_U(stats(&f)->num_locked_allocs, locked, "without the lock");
    for (int i = 0; i < 3; i++)
        CHECK(cci_free(f.a, r[i], 0, CCI_FREE_NOW) == CCI_OK, "free");
    done(&f);
}

// What a thread keeps goes back whole at empty_cache: the unpassed blocks through the allocator's
// own fences, counted once (active and allocated both back to 0), and the pool empties.
static void test_held_empty_cache(void)
{
    fixture f;
    make(&f, (size_t)8 << 30, 1000);
    cci_allocator_thread_cache(f.a, 1);
    t_raise_split_peak(f.a, HELD_SIZE, 16);
    f.requested = f.completed = 0;
    uintptr_t p[5];
    for (int i = 0; i < 5; i++)
        p[i] = must_alloc(&f, HELD_SIZE, 0);
    for (int i = 0; i < 5; i++)
        CHECK(cci_free(f.a, p[i], 0, CCI_FREE_FENCED) == CCI_OK, "fenced free");
    CHECK_EQ_U(stats(&f)->active[CCI_POOL_ALL].current, 0, "kept frees count as inactive, as cached ones");
    cci_alloc_empty_cache(f.a);
    const cci_stats *st = stats(&f);
    CHECK_EQ_U(st->active[CCI_POOL_ALL].current, 0, "active: each block counted out once");
    CHECK_EQ_U(st->active_bytes[CCI_POOL_ALL].current, 0, "active bytes too");
    CHECK_EQ_U(st->allocated_bytes[CCI_POOL_ALL].current, 0, "allocated bytes too");
    CHECK_EQ_U(st->reserved_bytes[CCI_POOL_ALL].current, 0, "the pool emptied");
    CHECK_EQ_U(f.completed, 5, "every block told as completed");
    done(&f);
}

// A loop whose pool has no room left while the thread's first batch fills: the pool grows for
// the batch (within HELD_MAX_BYTES) rather than taking it apart at each miss, which had left no
// batch ever full and every later pair on the locked path, with a fence each.
static void test_held_grows_while_filling(void)
{
    fixture f;
    make(&f, (size_t)8 << 30, 0);
    cci_allocator_thread_cache(f.a, 1);
    t_raise_split_peak(f.a, 64 * KiB, 2 * HELD_BATCH);
    uintptr_t fill[48];
    for (int i = 0; i < 48; i++)  // three quarters of the two segments the warm-up made
        fill[i] = must_alloc(&f, 64 * KiB, 0);
    uint64_t records0 = stats(&f)->num_fence_records;
    for (int i = 0; i < 320; i++)
        CHECK(cci_free(f.a, must_alloc(&f, 64 * KiB, 0), 0, CCI_FREE_FENCED) == CCI_OK, "fenced free");
    const cci_stats *st = stats(&f);
    uint64_t records = st->num_fence_records - records0;
    CHECK(records <= 320 / HELD_BATCH + 2, "%llu fences for 320 pairs: one a batch", (unsigned long long)records);
    CHECK(st->reserved_bytes[CCI_POOL_ALL].peak <= (int64_t)(4 * MiB + HELD_MAX_BYTES),
          "the pool grew by the kept batches' allowance at most (%lld bytes)",
          (long long)st->reserved_bytes[CCI_POOL_ALL].peak);
    for (int i = 0; i < 48; i++)
        CHECK(cci_free(f.a, fill[i], 0, CCI_FREE_NOW) == CCI_OK, "free");
    done(&f);
}

typedef struct {
    fixture *f;
    int pairs;
} held_worker;

static void *held_pairs(void *arg)
{
    held_worker *w = arg;
    // (No CHECK here: its counters are the main thread's.)
    for (int i = 0; i < w->pairs; i++) {
        uintptr_t p = 0;
        if (cci_malloc(w->f->a, 64 * KiB, 0, &p) != CCI_OK || cci_free(w->f->a, p, 0, CCI_FREE_FENCED) != CCI_OK)
            return (void *)1;
    }
    return NULL;
}

// Threads' fenced loops run on their own batches: exact figures and a consistent pool afterwards,
// and every request completed once the cache is emptied.
static void test_held_threads(void)
{
    fixture f;
    make(&f, (size_t)8 << 30, 0);
    cci_allocator_thread_cache(f.a, 1);
    enum { THREADS = 4, PAIRS = 4000 };
    pthread_t t[THREADS];
    held_worker w = {&f, PAIRS};
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, held_pairs, &w);
    int bad = 0;
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad |= r != NULL;
    }
    CHECK(!bad, "every allocation served and every fenced free accepted");
    // (How many fences they record depends on how the threads interleave with the lock on a
    // machine of two CPUs: the single-thread tests above count them.)
    stats(&f);
    CHECK_EQ_U(f.st.allocated_bytes[CCI_POOL_ALL].current, 0, "nothing allocated");
    CHECK_EQ_U(f.st.allocation[CCI_POOL_ALL].allocated, THREADS * PAIRS, "every allocation counted");
    cci_alloc_empty_cache(f.a);
    CHECK_EQ_U(f.requested, THREADS * PAIRS, "every free told");
    CHECK_EQ_U(f.completed, THREADS * PAIRS, "and completed");
    CHECK_EQ_U(stats(&f)->active[CCI_POOL_ALL].current, 0, "nothing active");
    done(&f);
}

static void test_oom_ladder(void)
{
    fixture f;
    make(&f, 100 * MiB, 1000);
    uintptr_t p = must_alloc(&f, 60 * MiB, 0);
    cci_free(f.a, p, 0, CCI_FREE_FENCED);
    // Stream 7 cannot use p; the device has 40 MiB left: the last resort waits for every fence,
    // gives back the cached segment and retries.
    uintptr_t q = 0;
    CHECK(cci_malloc(f.a, 60 * MiB, 7, &q) == CCI_OK, "the retry ladder found room");
    CHECK_EQ_U(stats(&f)->num_alloc_retries, 1, "one retry");
    CHECK_EQ_U(f.st.num_ooms, 0, "no OOM");
    CHECK_EQ_U(f.st.num_fence_waits, 1, "the host waited for the fence before the retry");
    CHECK(cci_malloc(f.a, 60 * MiB, 0, &p) == CCI_EOOM, "real exhaustion still fails");
    CHECK_EQ_U(stats(&f)->num_ooms, 1, "OOM counted");
    cci_free(f.a, q, 7, CCI_FREE_FENCED);
    done(&f);  // destroying with a fence pending releases it
}

static int no_sync_calls;
static int count_sync(void *ctx, int device)
{
    (void)ctx, (void)device;
    no_sync_calls++;
    return CCI_OK;
}

static void test_without_fences(void)
{
    // The simulated device's segment ops with no fence group and a counting synchronize.
    cci_sim_device *sim = cci_sim_create((size_t)8 << 30);
    cci_backend sb = cci_sim_backend(sim);
    cci_backend_ops ops = *sb.ops;
    ops.caps = 0;
    ops.fence = NULL;
    ops.synchronize = count_sync;
    cci_config cfg;
    cci_config_default(&cfg);
    cfg.compact_segments = 0;  // ordinary segments: the policy under test (the default is compact with VMM)
    cci_allocator *a = cci_allocator_create(0, &cfg, (cci_backend){&ops, sb.ctx});
    uintptr_t p = 0, q = 0;
    cci_malloc(a, 200 * MiB, 0, &p);
    cci_free(a, p, 0, CCI_FREE_FENCED);
    cci_malloc(a, 200 * MiB, 0, &q);
    cci_stats st;
    cci_alloc_stats(a, &st);
    CHECK(q == p, "the deferred block was reused after a synchronisation");
    CHECK_EQ_U(no_sync_calls, 1, "FENCED without fences synchronised the device, as DEFERRED does");
    CHECK_EQ_U(st.num_sync_all_streams, 1, "counted as a device synchronisation");
    CHECK_EQ_U(st.num_fence_records, 0, "no fence recorded");
    cci_allocator_destroy(a, 1);
    cci_sim_destroy(sim);
}

int main(void)
{
    test_reuse_only_after_fence();
    test_ordering_fences();
    test_order_instead_of_wait();
    test_order_catch_up();
    test_burst_one_fence();
    test_wait_for_oldest_sufficient();
    test_poor_fit_spare();
    test_near_fit();
    test_pair_loop_fences();
    test_cross_stream_free();
    test_held_reuse_only_after_fence();
    test_held_stay_at_locked_allocation();
    test_held_empty_cache();
    test_held_grows_while_filling();
    test_held_threads();
    test_oom_ladder();
    test_without_fences();
    return t_finish();
}
