// SPDX-License-Identifier: MIT
// The VMM modes' speed target, counted instead of timed: "a cached alloc+free pair is no slower than
// with ordinary segments (VMM calls happen only when the pool grows or shrinks)". On an H100 one
// map, unmap or set-access costs tens of microseconds, so a mode that calls the driver in steady
// state shows up in wall time only as noise-prone nanoseconds per op; the fake's call counters
// show it exactly.
//
//   vmm_steady [--keeps-pages]
//
// Runs bench_alloc's workloads in its order, through the runtime API under the preload: cached
// pairs of each benchmark size (one cold pair, then WARM_PAIRS), then the mixed workload
// (bench_util.h: the same slots, sizes and random sequence) for MIXED_PASSES passes. Prints the
// fake driver's VMM calls for each phase. Fails when the WARM_PAIRS cached pairs of a size make
// any VMM call; with --keeps-pages (expandable_segments:True, whose frees never unmap), also when
// any mixed pass unmaps or releases a page. Compact mode's mixed counts depend on when the fake's
// worker thread passes the fences its moved pages' old mappings wait for, so they are printed, not
// checked (test_expandable counts the same passes deterministically on the simulated device).
#include "fake_cuda_driver.h"

#include "bench_util.h"
#include "ptest.h"

#define WARM_PAIRS 1000
#define MIXED_PASSES 4

typedef struct calls {
    unsigned long long maps, unmaps, set_access, creates, releases;
} calls;

static calls now(void)
{
    struct fakecu_vmm_stats s;
    fakecu_vmm_get_stats(&s);
    return (calls){s.maps, s.unmaps, s.set_access_calls, s.creates, s.releases};
}

static unsigned long long total(calls c) { return c.maps + c.unmaps + c.set_access + c.creates + c.releases; }

static calls since(calls before)
{
    calls c = now();
    return (calls){c.maps - before.maps, c.unmaps - before.unmaps, c.set_access - before.set_access,
                   c.creates - before.creates, c.releases - before.releases};
}

static void row(const char *phase, int warm, calls c)
{
    printf("%-24s %-5s %6llu %6llu %6llu %6llu %6llu %7llu\n", phase, warm ? "warm" : "cold", c.maps, c.unmaps,
           c.set_access, c.creates, c.releases, total(c));
}

static void pair(size_t n)
{
    void *p;
    CUDA_OK(cudaMalloc(&p, n));
    CUDA_OK(cudaFree(p));
}

static void mixed_pass(void **slot, uint64_t *rng)
{
    for (int op = 0; op < BU_MIXED_OPS; op++) {
        unsigned k = (unsigned)(bu_rand(rng) % BU_MIXED_SLOTS);
        if (slot[k]) {
            CUDA_OK(cudaFree(slot[k]));
            slot[k] = NULL;
        } else {
            CUDA_OK(cudaMalloc(&slot[k], bu_log_uniform(rng, BU_MIXED_LO, BU_MIXED_HI)));
        }
    }
}

int main(int argc, char **argv)
{
    int keeps_pages = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--keeps-pages")) {
            keeps_pages = 1;
        } else {
            fprintf(stderr, "usage: vmm_steady [--keeps-pages]\n");
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    ptest_api api = ptest_get_api();
    CHECK(api.is_active(), "the preload is active (%s)", api.config_string());
    CUDA_OK(cudaFree(0));
    printf("VMM driver calls (fake CUDA)\n%-24s %-5s %6s %6s %6s %6s %6s %7s\n", "phase", "", "map", "unmap", "access",
           "create", "releas", "total");
    char name[64];
    unsigned long long warm_pair_calls = 0, mixed_gone = 0;
    for (size_t i = 0; i < BU_NSIZES; i++) {
        size_t n = bu_sizes[i];
        calls c = now();
        pair(n);
        snprintf(name, sizeof name, "pair %zu B", n);
        row(name, 0, since(c));
        c = now();
        for (int k = 0; k < WARM_PAIRS; k++)
            pair(n);
        snprintf(name, sizeof name, "%d pairs %zu B", WARM_PAIRS, n);
        calls w = since(c);
        row(name, 1, w);
        warm_pair_calls += total(w);
    }
    static void *slot[BU_MIXED_SLOTS];
    uint64_t rng = 0x9e3779b97f4a7c15ull;  // bench_alloc's and bench_core's sequence
    for (int p = 0; p < MIXED_PASSES; p++) {
        calls c = now();
        mixed_pass(slot, &rng);
        snprintf(name, sizeof name, "mixed pass %d", p + 1);
        calls m = since(c);
        row(name, p > 0, m);
        mixed_gone += m.unmaps + m.releases;
    }
    for (int k = 0; k < BU_MIXED_SLOTS; k++)
        if (slot[k])
            CUDA_OK(cudaFree(slot[k]));
    cci_stats st = ptest_stats(&api, 0);
    printf("peak reserved %.1f MiB, peak allocated %.1f MiB\n", st.reserved_bytes[CCI_POOL_ALL].peak / 1048576.0,
           st.allocated_bytes[CCI_POOL_ALL].peak / 1048576.0);
    CHECK(warm_pair_calls == 0, "cached pairs after each size's first made no VMM call (%llu)", warm_pair_calls);
    if (keeps_pages)
        CHECK(mixed_gone == 0, "no mixed pass unmapped or released a page (%llu)", mixed_gone);
    return 0;
}
