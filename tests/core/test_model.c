// SPDX-License-Identifier: MIT
// Randomized model check: millions of random allocations and frees, over several seeds and
// configurations, against a reference model of what must hold. Live blocks never overlap, are
// 512-aligned and lie inside a segment, and none overlaps a freed block whose free has not
// completed (deferred or fenced: still behind its synchronisation or its fence); the statistics
// equal a recomputation; and after freeing everything and emptying the cache nothing is reserved
// and no fence is left. The fenced cases mix fenced frees with a fence lag and random completion.
// CCI_TEST_SCALE multiplies the work.
#include <string.h>

#include "allocator.h"
#include "testutil.h"

typedef struct live {
    uintptr_t addr;
    size_t size;
    uint64_t stream;
} live;


// Log-uniform request sizes from 1 byte to 64 MiB, with some exact powers of two.
static size_t rnd_size(void)
{
    unsigned bits = (unsigned)(rnd() % 27);
    size_t base = (size_t)1 << bits;
    if (rnd() % 4 == 0)
        return base;
    return base + (size_t)(rnd() % base);
}

#define MAX_LIVE 256

// Sorted by address, so that an overlap shows up between neighbours.
static live lv[MAX_LIVE];
static size_t nlive;

static int overlaps_or_insert(live x)
{
    size_t i = 0;
    while (i < nlive && lv[i].addr < x.addr)
        i++;
    if (i > 0 && lv[i - 1].addr + lv[i - 1].size > x.addr)
        return 1;
    if (i < nlive && x.addr + x.size > lv[i].addr)
        return 1;
    memmove(&lv[i + 1], &lv[i], (nlive - i) * sizeof lv[0]);
    lv[i] = x;
    nlive++;
    return 0;
}

// Blocks freed but not yet reusable (FREE_REQUESTED without its FREE_COMPLETED yet), fed by an
// observer: a new block overlapping one of them would be an early reuse.
static live *waiting;
static size_t nwaiting, waiting_cap;

static void watch_frees(void *ud, const cci_event *ev)
{
    (void)ud;
    if (ev->kind == CCI_EV_FREE_REQUESTED) {
        if (nwaiting == waiting_cap) {
            waiting_cap = waiting_cap ? waiting_cap * 2 : 1024;
            waiting = realloc(waiting, waiting_cap * sizeof *waiting);
            if (!waiting)
                abort();
        }
        waiting[nwaiting++] = (live){ev->addr, ev->size, ev->stream};
    } else if (ev->kind == CCI_EV_FREE_COMPLETED) {
        for (size_t i = 0; i < nwaiting; i++)
            if (waiting[i].addr == ev->addr) {
                waiting[i] = waiting[--nwaiting];
                break;
            }
    }
}

static int reuses_waiting(uintptr_t p, size_t size)
{
    for (size_t i = 0; i < nwaiting; i++)
        if (p < waiting[i].addr + waiting[i].size && waiting[i].addr < p + size)
            return 1;
    return 0;
}

static void remove_at(size_t i)
{
    memmove(&lv[i], &lv[i + 1], (nlive - i - 1) * sizeof lv[0]);
    nlive--;
}

// fence_lag > 0: a third of the frees are fenced, the device completes work that many fence records
// behind the host, and random completions of a stream or of all of them pass fences early.
static void run(const char *name, const cci_config *cfg, size_t capacity, uint64_t seed, long ops, uint64_t fence_lag,
                int thread_cache)
{
    cci_sim_device *sim = cci_sim_create(capacity);
    cci_sim_set_fence_lag(sim, fence_lag);
    cci_allocator *a = cci_allocator_create(0, cfg, cci_sim_backend(sim));
    cci_allocator_thread_cache(a, thread_cache);
    nwaiting = 0;
    cci_allocator_add_observer(a, watch_frees, NULL);
    rng_state = seed * 0x9E3779B97F4A7C15ull + 1;
    nlive = 0;
    long ooms = 0, checks_failed = 0;
    size_t requested_sum = 0;
    char msg[256];
    for (long op = 0; op < ops; op++) {
        uint64_t r = rnd() % 100;
        if (r < 52 && nlive < MAX_LIVE) {
            size_t sz = rnd_size();
            uint64_t stream = rnd() % 3 == 0 ? 7 : 0;
            uintptr_t p = 0;
            int rc = cci_malloc(a, sz, stream, &p);
            if (rc == CCI_EOOM) {
                ooms++;
                continue;
            }
            CHECK(rc == CCI_OK, "%s seed %llu op %ld: malloc(%zu) rc %d", name, (unsigned long long)seed, op, sz, rc);
            CHECK(p % 512 == 0, "%s: unaligned %#lx", name, (unsigned long)p);
            uintptr_t blk, seg;
            size_t bsz, ssz;
            int irc = cci_block_info(a, p + sz / 2, &blk, &bsz, &seg, &ssz);
            CHECK(irc == CCI_OK && blk == p && bsz >= sz && p >= seg && p + bsz <= seg + ssz,
                  "%s: block %#lx (%zu) not inside its segment", name, (unsigned long)p, sz);
            CHECK(!overlaps_or_insert((live){p, sz ? sz : 1, stream}), "%s seed %llu op %ld: %#lx+%zu overlaps",
                  name, (unsigned long long)seed, op, (unsigned long)p, sz);
            CHECK(!reuses_waiting(p, sz ? sz : 1), "%s seed %llu op %ld: %#lx reused before its free completed",
                  name, (unsigned long long)seed, op, (unsigned long)p);
            requested_sum += sz;
        } else if (nlive) {
            size_t i = (size_t)(rnd() % nlive);
            live x = lv[i];
            uint64_t fstream = rnd() % 5 == 0 ? 7 - x.stream : x.stream;
            cci_free_mode mode = rnd() % 2 ? CCI_FREE_DEFERRED : CCI_FREE_NOW;
            if (fence_lag && rnd() % 3 == 0)
                mode = CCI_FREE_FENCED;
            CHECK(cci_free(a, x.addr, fstream, mode) == CCI_OK, "%s: free %#lx", name, (unsigned long)x.addr);
            requested_sum -= x.size == 1 && 0 ? 0 : x.size;
            remove_at(i);
            if (rnd() % 16 == 0)  // a double free must be refused and change nothing
                CHECK(cci_free(a, x.addr, fstream, CCI_FREE_NOW) == CCI_EINVAL, "%s: double free accepted", name);
        }
        if (rnd() % 2000 == 0)
            cci_alloc_empty_cache(a);
        if (fence_lag && rnd() % 50 == 0)
            cci_sim_complete(sim, rnd() % 2 ? CCI_STREAM_ALL : 7);
        if (op % 97 == 0 && cci_allocator_check(a, msg, sizeof msg) != 0) {
            if (++checks_failed <= 3)
                fprintf(stderr, "%s seed %llu op %ld: %s\n", name, (unsigned long long)seed, op, msg);
        }
    }
    CHECK(checks_failed == 0, "%s seed %llu: %ld invariant checks failed", name, (unsigned long long)seed,
          checks_failed);
    cci_stats st;
    cci_alloc_stats(a, &st);
    CHECK_EQ_U(st.allocation[CCI_POOL_ALL].current, nlive, "live blocks vs model");
    CHECK_EQ_U(st.requested_bytes[CCI_POOL_ALL].current, requested_sum, "requested bytes vs model");
    CHECK_EQ_U(st.num_ooms, (uint64_t)ooms, "num_ooms vs failures seen");
    CHECK_EQ_U(st.reserved_bytes[CCI_POOL_ALL].current, cci_sim_reserved(sim), "reserved vs device");
    while (nlive) {
        CHECK(cci_free(a, lv[0].addr, lv[0].stream, CCI_FREE_DEFERRED) == CCI_OK, "final free");
        remove_at(0);
    }
    cci_alloc_empty_cache(a);
    cci_alloc_stats(a, &st);
    CHECK(cci_allocator_check(a, msg, sizeof msg) == 0, "%s final: %s", name, msg);
    CHECK_EQ_U(st.reserved_bytes[CCI_POOL_ALL].current, 0, "reserved after empty_cache");
    CHECK_EQ_U(st.active_bytes[CCI_POOL_ALL].current, 0, "active after empty_cache");
    CHECK_EQ_U(cci_sim_reserved(sim), 0, "device reserved after empty_cache");
    CHECK_EQ_U(cci_sim_segments(sim), 0, "device segments after empty_cache");
    CHECK_EQ_U(st.num_device_alloc, st.num_device_free, "device allocs vs frees");
    uint64_t fence_records, fences_live;
    cci_sim_fence_counts(sim, &fence_records, NULL, &fences_live);
    CHECK_EQ_U(st.num_fence_records, fence_records, "fence records vs device");
    CHECK_EQ_U(fences_live, 0, "every fence released after empty_cache");
    CHECK(!fence_lag || fence_records > 0, "%s: fenced frees recorded fences", name);
    printf("%-22s seed %llu: %ld ops, %llu device allocs, %ld OOMs, %llu retries, peak reserved %.1f MiB\n", name,
           (unsigned long long)seed, ops, (unsigned long long)st.num_device_alloc, ooms,
           (unsigned long long)st.num_alloc_retries, (double)st.reserved_bytes[CCI_POOL_ALL].peak / (double)MiB);
    cci_allocator_destroy(a, 1);
    cci_sim_destroy(sim);
}

int main(void)
{
    long ops = 60000 * t_scale();
    struct {
        const char *name;
        const char *conf;
        size_t capacity;
        uint64_t fence_lag;
        int thread_cache;  // the per-thread caches (tcache.h) in front of the lock
    } cases[] = {
        {"default", "", (size_t)64 << 30, 0, 0},
        {"default-tight", "", (size_t)3 << 30, 0, 0},
        {"split-64", "max_split_size_mb:64", (size_t)8 << 30, 0, 0},
        {"split-24-rounding-0", "max_split_size_mb:24,max_non_split_rounding_mb:0", (size_t)3 << 30, 0, 0},
        {"roundup-4", "roundup_power2_divisions:4", (size_t)8 << 30, 0, 0},
        {"roundup-list", "roundup_power2_divisions:[1:2,16:4,>:8]", (size_t)8 << 30, 0, 0},
        {"gc-fraction", "garbage_collection_threshold:0.6,per_process_memory_fraction:0.5", (size_t)8 << 30, 0, 0},
        {"gc-split", "garbage_collection_threshold:0.3,max_split_size_mb:100", (size_t)4 << 30, 0, 0},
        {"fenced", "", (size_t)64 << 30, 3, 0},
        {"fenced-tight", "", (size_t)3 << 30, 8, 0},
        {"fenced-split-gc", "max_split_size_mb:64,garbage_collection_threshold:0.5", (size_t)4 << 30, 2, 0},
        {"tcache", "", (size_t)64 << 30, 0, 1},
        {"tcache-tight", "", (size_t)3 << 30, 0, 1},
        {"tcache-gc-fraction", "garbage_collection_threshold:0.6,per_process_memory_fraction:0.5", (size_t)8 << 30, 0, 1},
        {"tcache-fenced", "max_split_size_mb:64", (size_t)4 << 30, 2, 1},
    };
    long total = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cci_config cfg;
        cci_config_default(&cfg);
        cfg.compact_segments = 0;  // ordinary segments: the policy under test (the default is compact with VMM)
        char err[256];
        if (cci_config_parse(&cfg, cases[c].conf, "test", err, sizeof err, NULL, NULL) != 0) {
            CHECK(0, "config %s: %s", cases[c].conf, err);
            continue;
        }
        for (uint64_t seed = 1; seed <= 3; seed++) {
            run(cases[c].name, &cfg, cases[c].capacity, seed, ops, cases[c].fence_lag, cases[c].thread_cache);
            total += ops;
        }
    }
    free(waiting);
    printf("model check: %ld random operations in all\n", total);
    CHECK(total >= 1000000, "at least a million operations");
    return t_finish();
}
