// SPDX-License-Identifier: MIT
// The policy rules one by one, on the simulated device: rounding and segment sizes computed from
// PyTorch's rules, splitting, the split limit, garbage collection, the fraction cap, the
// out-of-memory retry ladder, empty_cache and deferred frees.
#include <string.h>

#include "allocator_impl.h"
#include "testutil.h"

static cci_config conf(const char *s)
{
    cci_config c;
    cci_config_default(&c);
    c.compact_segments = 0;  // ordinary segments: the policy under test (the default is compact with VMM)
    char err[256];
    if (cci_config_parse(&c, s, "test", err, sizeof err, NULL, NULL) != 0) {
        fprintf(stderr, "bad test config '%s': %s\n", s, err);
        exit(2);
    }
    return c;
}

typedef struct fixture {
    cci_sim_device *sim;
    cci_allocator *a;
    cci_stats st;
} fixture;

static fixture make(const char *c, size_t capacity)
{
    fixture f;
    cci_config cfg = conf(c);
    f.sim = cci_sim_create(capacity);
    f.a = cci_allocator_create(0, &cfg, cci_sim_backend(f.sim));
    return f;
}

static void done(fixture *f)
{
    char msg[256];
    CHECK(cci_allocator_check(f->a, msg, sizeof msg) == 0, "invariants: %s", msg);
    cci_allocator_destroy(f->a, 1);
    cci_sim_destroy(f->sim);
}

static uintptr_t must_alloc(fixture *f, size_t size)
{
    uintptr_t p = 0;
    int rc = cci_malloc(f->a, size, 0, &p);
    CHECK(rc == CCI_OK, "malloc(%zu) returned %d", size, rc);
    return p;
}

static const cci_stats *stats(fixture *f)
{
    cci_alloc_stats(f->a, &f->st);
    return &f->st;
}

static void test_rounding(void)
{
    cci_config d = conf("");
    struct { size_t in, out; } plain[] = {
        {0, 512}, {1, 512}, {511, 512}, {512, 512}, {513, 1024}, {MiB, MiB}, {MiB + 1, MiB + 512},
        {1200 * MiB, 1200 * MiB},
    };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        CHECK_EQ_U(cci_round_size(&d, plain[i].in), plain[i].out, "default rounding");

    cci_config four = conf("roundup_power2_divisions:4");
    struct { size_t in, out; } div4[] = {
        {1200 * MiB, 1280 * MiB},  // PyTorch's documented example: [1024, 2048) in steps of 256 MiB
        {1024 * MiB, 1024 * MiB},  // a power of two stays
        {1025 * MiB, 1280 * MiB},
        {1000, 1024},              // not above 512 x 4: plain 512-byte rounding
        {3000, 3072},              // [2048, 4096) in steps of 512
        {5 * MiB, 5 * MiB},        // already on a step of [4, 8) MiB
        {5 * MiB + 1, 6 * MiB},
    };
    for (size_t i = 0; i < sizeof div4 / sizeof div4[0]; i++)
        CHECK_EQ_U(cci_round_size(&four, div4[i].in), div4[i].out, "4 divisions");

    cci_config list = conf("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
    struct { size_t in, out; } lst[] = {
        {100 * MiB, 100 * MiB},    // below the first key: its value (1 = none)
        {300 * MiB, 300 * MiB},    // [256, 512) MiB: 1 division
        {600 * MiB, 768 * MiB},    // [512, 1024): 2 divisions of 512
        {1200 * MiB, 1280 * MiB},  // [1024, 2048): 4 divisions
        {3000 * MiB, 3072 * MiB},  // past the last key: 8 divisions of [2048, 4096)
    };
    for (size_t i = 0; i < sizeof lst / sizeof lst[0]; i++)
        CHECK_EQ_U(cci_round_size(&list, lst[i].in), lst[i].out, "list divisions");

    struct { size_t in, out; } seg[] = {
        {512, 2 * MiB}, {MiB, 2 * MiB}, {MiB + 512, 20 * MiB}, {10 * MiB - 512, 20 * MiB},
        {10 * MiB, 10 * MiB}, {11 * MiB + 512, 12 * MiB}, {1280 * MiB, 1280 * MiB},
    };
    cci_config dflt;
    cci_config_default(&dflt);
    for (size_t i = 0; i < sizeof seg / sizeof seg[0]; i++)
        CHECK_EQ_U(cci_segment_size(&dflt, seg[i].in), seg[i].out, "segment size");
    // large_segment_size_mb moves the 1-10 MiB segment (never below the request it serves).
    cci_config big = dflt, tiny = dflt;
    CHECK(cci_config_parse(&big, "large_segment_size_mb:64", "T", NULL, 0, NULL, NULL) == 0, "parse");
    CHECK(cci_config_parse(&tiny, "large_segment_size_mb:4", "T", NULL, 0, NULL, NULL) == 0, "parse");
    CHECK_EQ_U(cci_segment_size(&big, MiB + 512), 64 * MiB, "large_segment_size_mb:64");
    CHECK_EQ_U(cci_segment_size(&big, 10 * MiB), 10 * MiB, "10 MiB and up keep their own segment");
    CHECK_EQ_U(cci_segment_size(&tiny, 3 * MiB), 4 * MiB, "large_segment_size_mb:4 shared");
    CHECK_EQ_U(cci_segment_size(&tiny, 5 * MiB + 512), 6 * MiB, "larger than the segment: its own");
    CHECK_EQ_U(cci_segment_size(&big, 512), 2 * MiB, "small pool unchanged");
    CHECK(cci_is_small(MiB) && !cci_is_small(MiB + 512), "pool boundary at 1 MiB");
}

static void test_splitting(void)
{
    fixture f = make("", 1ull << 40);
    uintptr_t p = must_alloc(&f, 1000);
    const cci_stats *s = stats(&f);
    CHECK_EQ_U(s->reserved_bytes[CCI_POOL_SMALL].current, 2 * MiB, "small segment");
    CHECK_EQ_U(s->allocated_bytes[CCI_POOL_SMALL].current, 1024, "small block rounded to 512");
    CHECK_EQ_U(s->requested_bytes[CCI_POOL_SMALL].current, 1000, "requested bytes kept");
    CHECK_EQ_U(s->inactive_split_bytes[CCI_POOL_SMALL].current, 2 * MiB - 1024, "small remainder split off");
    uintptr_t q = must_alloc(&f, 4 * MiB);
    s = stats(&f);
    CHECK_EQ_U(s->reserved_bytes[CCI_POOL_LARGE].current, 20 * MiB, "1-10 MiB requests get 20 MiB");
    CHECK_EQ_U(s->inactive_split_bytes[CCI_POOL_LARGE].current, 16 * MiB, "large remainder > 1 MiB split");
    uintptr_t r = must_alloc(&f, 19 * MiB + 512);  // remainder 0.5 MiB: not split
    s = stats(&f);
    CHECK_EQ_U(s->allocated_bytes[CCI_POOL_LARGE].current, 4 * MiB + 20 * MiB, "unsplit block handed out whole");
    CHECK_EQ_U(s->num_device_alloc, 3, "three segments");
    // Freeing merges neighbours back into one whole segment: no inactive split left.
    cci_free(f.a, p, 0, CCI_FREE_NOW);
    cci_free(f.a, q, 0, CCI_FREE_NOW);
    cci_free(f.a, r, 0, CCI_FREE_NOW);
    s = stats(&f);
    CHECK_EQ_U(s->inactive_split[CCI_POOL_ALL].current, 0, "merged after free");
    CHECK_EQ_U(s->largest_free_block, 20 * MiB, "largest free block");
    // The small pool splits off even a 512-byte remainder.
    uintptr_t m1 = must_alloc(&f, MiB), m2 = must_alloc(&f, MiB - 512);
    CHECK_EQ_U(stats(&f)->inactive_split_bytes[CCI_POOL_SMALL].current, 512, "512-byte small remainder split");
    cci_free(f.a, m1, 0, CCI_FREE_NOW);
    cci_free(f.a, m2, 0, CCI_FREE_NOW);
    // Best fit by size then address: a 4 MiB request now takes a 20 MiB segment at its start.
    uintptr_t q2 = must_alloc(&f, 4 * MiB);
    CHECK(q2 == q, "best fit reuses the lowest-address 20 MiB segment (%#lx vs %#lx)", (unsigned long)q2,
          (unsigned long)q);
    CHECK_EQ_U(stats(&f)->num_device_alloc, 3, "no new segment for a cached size");
    done(&f);
}

static void test_split_limit(void)
{
    fixture f = make("max_split_size_mb:64", 1ull << 40);
    uintptr_t big = must_alloc(&f, 100 * MiB);
    CHECK_EQ_U(stats(&f)->oversize_allocations.current, 1, "oversize allocation counted");
    CHECK_EQ_U(f.st.oversize_segments.current, 1, "oversize segment counted");
    cci_free(f.a, big, 0, CCI_FREE_NOW);
    uintptr_t p = must_alloc(&f, 30 * MiB);  // below the limit: never takes the oversize block
    CHECK(p != big, "a request below the split limit took an oversize block");
    CHECK_EQ_U(stats(&f)->num_device_alloc, 2, "new segment for the small request");
    uintptr_t q = must_alloc(&f, 70 * MiB);  // 100 >= 70 + 20: too much waste, new segment
    CHECK(q != big, "oversize block taken beyond max_non_split_rounding");
    uintptr_t r = must_alloc(&f, 90 * MiB);  // 100 < 90 + 20: takes it, whole
    CHECK(r == big, "oversize block within the rounding allowance was not reused");
    CHECK_EQ_U(stats(&f)->allocated_bytes[CCI_POOL_ALL].current, 30 * MiB + 70 * MiB + 100 * MiB,
               "oversize blocks are never split");
    done(&f);

    // The allowance is strict, as in PyTorch: a block is reused only if smaller than request + allowance.
    fixture g = make("max_split_size_mb:64,max_non_split_rounding_mb:1", 1ull << 40);
    uintptr_t b = must_alloc(&g, 100 * MiB);
    cci_free(g.a, b, 0, CCI_FREE_NOW);
    CHECK(must_alloc(&g, 98 * MiB) != b, "allowance 1 MiB: a 100 MiB block is too big for 98 MiB");
    CHECK(must_alloc(&g, 100 * MiB) == b, "allowance 1 MiB: the exact size is reused");
    done(&g);
    fixture h = make("max_split_size_mb:64,max_non_split_rounding_mb:0", 1ull << 40);
    b = must_alloc(&h, 100 * MiB);
    cci_free(h.a, b, 0, CCI_FREE_NOW);
    CHECK(must_alloc(&h, 100 * MiB) != b, "allowance 0: PyTorch's rule reuses no oversize block at all");
    done(&h);
}

static void test_gc(void)
{
    // Capacity 1000 MiB, GC at half of it. Block A waits long unused; B and C are fresh.
    fixture f = make("garbage_collection_threshold:0.5,max_split_size_mb:40", 1000 * MiB);
    uintptr_t a = must_alloc(&f, 100 * MiB), b = must_alloc(&f, 100 * MiB);
    cci_free(f.a, a, 0, CCI_FREE_NOW);
    uintptr_t c = 0;
    for (int i = 0; i < 10; i++) {  // ten large-pool searches age A
        c = must_alloc(&f, 50 * MiB);
        cci_free(f.a, c, 0, CCI_FREE_NOW);
    }
    cci_free(f.a, b, 0, CCI_FREE_NOW);
    must_alloc(&f, 300 * MiB);  // reserved 550 MiB: over the 500 MiB threshold
    CHECK_EQ_U(stats(&f)->num_device_free, 0, "nothing collected below the threshold");
    must_alloc(&f, 60 * MiB);  // a miss over the threshold collects the oldest: A only
    const cci_stats *s = stats(&f);
    CHECK_EQ_U(s->num_device_free, 1, "exactly one segment collected");
    CHECK_EQ_U(s->reserved_bytes[CCI_POOL_ALL].current, 550 * MiB - 100 * MiB + 60 * MiB, "A (100 MiB) was collected");
    uintptr_t b2 = must_alloc(&f, 100 * MiB);
    CHECK(b2 == b, "the fresh block B survived the collection");
    done(&f);
}

static void test_fraction_cap(void)
{
    fixture f = make("per_process_memory_fraction:0.5", 1000 * MiB);
    must_alloc(&f, 400 * MiB);
    uintptr_t p = 0;
    CHECK(cci_malloc(f.a, 200 * MiB, 0, &p) == CCI_EOOM, "cap of 500 MiB enforced with a free device");
    const cci_stats *s = stats(&f);
    CHECK_EQ_U(s->num_ooms, 1, "OOM counted");
    CHECK_EQ_U(s->reserved_bytes[CCI_POOL_ALL].current, 400 * MiB, "failed request reserved nothing");
    CHECK_EQ_U(s->device_capacity, 1000 * MiB, "capacity reported");
    must_alloc(&f, 90 * MiB);  // still fits under the cap
    done(&f);
}

static void test_oom_ladder(void)
{
    // Step 3: free every cached whole segment and retry.
    fixture f = make("", 100 * MiB);
    uintptr_t p = must_alloc(&f, 60 * MiB);
    cci_free(f.a, p, 0, CCI_FREE_NOW);
    must_alloc(&f, 80 * MiB);
    const cci_stats *s = stats(&f);
    CHECK_EQ_U(s->num_alloc_retries, 1, "retry after releasing the cache");
    CHECK_EQ_U(s->num_ooms, 0, "no OOM when the retry succeeds");
    CHECK(cci_malloc(f.a, 50 * MiB, 0, &p) == CCI_EOOM, "real exhaustion fails");
    CHECK_EQ_U(stats(&f)->num_ooms, 1, "OOM counted");
    done(&f);

    // Step 2: with a split limit, cached oversize blocks are released first, largest first.
    fixture g = make("max_split_size_mb:40", 200 * MiB);
    uintptr_t a = must_alloc(&g, 90 * MiB), b = must_alloc(&g, 90 * MiB);
    cci_free(g.a, a, 0, CCI_FREE_NOW);
    cci_free(g.a, b, 0, CCI_FREE_NOW);
    must_alloc(&g, 100 * MiB);
    s = stats(&g);
    CHECK_EQ_U(s->num_device_free, 2, "both oversize blocks released to fit 100 MiB");
    CHECK_EQ_U(s->num_alloc_retries, 0, "served before the full-release retry");
    done(&g);

    // A device failure while cache exists: the retry ladder absorbs it.
    fixture h = make("", 1ull << 40);
    p = must_alloc(&h, 30 * MiB);
    cci_free(h.a, p, 0, CCI_FREE_NOW);
    cci_sim_fail_reserve_at(h.sim, 1);
    must_alloc(&h, 40 * MiB);
    CHECK_EQ_U(stats(&h)->num_alloc_retries, 1, "injected failure retried");
    done(&h);
}

static void test_empty_cache(void)
{
    fixture f = make("", 1ull << 40);
    uintptr_t keep = must_alloc(&f, 4 * MiB);
    uintptr_t gone = must_alloc(&f, 12 * MiB);
    uintptr_t small = must_alloc(&f, 4096);
    cci_free(f.a, gone, 0, CCI_FREE_NOW);
    cci_free(f.a, small, 0, CCI_FREE_NOW);
    cci_alloc_empty_cache(f.a);
    const cci_stats *s = stats(&f);
    CHECK_EQ_U(s->reserved_bytes[CCI_POOL_ALL].current, 20 * MiB, "only the segment with a live block stays");
    CHECK_EQ_U(cci_sim_reserved(f.sim), 20 * MiB, "device agrees");
    cci_free(f.a, keep, 0, CCI_FREE_NOW);
    cci_alloc_empty_cache(f.a);
    CHECK_EQ_U(stats(&f)->reserved_bytes[CCI_POOL_ALL].current, 0, "all released");
    done(&f);
}

static void test_deferred(void)
{
    fixture f = make("", 1ull << 40);
    uintptr_t p = must_alloc(&f, 4 * MiB);
    cci_free(f.a, p, 0, CCI_FREE_DEFERRED);
    const cci_stats *s = stats(&f);
    CHECK_EQ_U(s->allocated_bytes[CCI_POOL_ALL].current, 0, "allocated drops at the free");
    CHECK_EQ_U(s->active_bytes[CCI_POOL_ALL].current, 4 * MiB, "active until the device has passed it");
    CHECK(cci_free(f.a, p, 0, CCI_FREE_NOW) == CCI_EINVAL, "double free of a pending block refused");
    uintptr_t q = must_alloc(&f, 4 * MiB);
    CHECK(q != p, "a pending block is not handed out again");
    // A full batch is made reusable with one synchronisation.
    uintptr_t v[PENDING_BATCH];
    for (int i = 0; i < PENDING_BATCH; i++)
        v[i] = must_alloc(&f, 64 * 1024);
    for (int i = 0; i < PENDING_BATCH; i++)
        cci_free(f.a, v[i], 0, CCI_FREE_DEFERRED);
    uint64_t segs = stats(&f)->num_device_alloc;
    must_alloc(&f, 64 * 1024);
    CHECK_EQ_U(stats(&f)->num_device_alloc, segs, "a full batch is reused without a new segment");
    CHECK_EQ_U(f.st.active[CCI_POOL_ALL].current, 2, "pending blocks completed");

    // Freed on another stream than its own: deferred even when asked for now.
    uintptr_t on1 = 0;
    CHECK(cci_malloc(f.a, 8 * MiB, 1, &on1) == CCI_OK, "alloc on stream 1");
    cci_free(f.a, on1, 2, CCI_FREE_NOW);
    CHECK_EQ_U(stats(&f)->active_bytes[CCI_POOL_ALL].current - f.st.allocated_bytes[CCI_POOL_ALL].current,
               8 * MiB, "cross-stream free stays pending");
    uintptr_t on2 = 0;
    cci_malloc(f.a, 8 * MiB, 2, &on2);
    // Stream 2 may get stream 1's memory, but only as a whole free segment handed over
    // after a fence on stream 1 passed (stream_handover.c), never a block of a live segment.
    CHECK(on2 != on1 || f.a->stream_handovers == 1, "stream 2 gets stream 1's block only by a handover");
    done(&f);
}

static void test_bad_pointers(void)
{
    fixture f = make("", 1ull << 40);
    uintptr_t p = must_alloc(&f, 4096);
    CHECK(cci_free(f.a, p + 512, 0, CCI_FREE_NOW) == CCI_EINVAL, "interior pointer refused");
    CHECK(cci_free(f.a, 12345, 0, CCI_FREE_NOW) == CCI_ENOTOURS, "foreign pointer not ours");
    uintptr_t base = 0;
    size_t size = 0;
    CHECK(cci_block_info(f.a, p + 100, &base, &size, NULL, NULL) == CCI_OK && base == p && size == 4096,
          "block_info answers for an interior pointer");
    CHECK(cci_free(f.a, p, 0, CCI_FREE_NOW) == CCI_OK, "free");
    CHECK(cci_free(f.a, p, 0, CCI_FREE_NOW) == CCI_EINVAL, "double free refused");
    CHECK(cci_block_info(f.a, p, NULL, NULL, NULL, NULL) == CCI_EINVAL, "freed block has no info");
    done(&f);
}

int main(void)
{
    test_rounding();
    test_splitting();
    test_split_limit();
    test_gc();
    test_fraction_cap();
    test_oom_ladder();
    test_empty_cache();
    test_deferred();
    test_bad_pointers();
    return t_finish();
}
