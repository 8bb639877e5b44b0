// SPDX-License-Identifier: MIT
// PyTorch's newest allocator keys on the simulated device, as the preload and ccreplay run them:
// large_segment_size_mb sizes the segment that 1-10 MiB requests share, and
// throw_on_cudamalloc_oom refuses a segment the device has no room for without asking it.
#include <string.h>

#include "allocator.h"
#include "backend.h"
#include "ccinterpose.h"
#include "testutil.h"

// Counts the device's segment calls, forwarding them to the simulated device.
static cci_backend_ops counting_ops;
static const cci_backend_ops *sim_ops;
static unsigned reserve_calls;

static int counting_reserve(void *ctx, int device, size_t size, uintptr_t *addr)
{
    reserve_calls++;
    return sim_ops->reserve(ctx, device, size, addr);
}

static cci_allocator *make(const char *conf, size_t capacity, cci_sim_device **sim)
{
    cci_config cfg;
    cci_config_default(&cfg);
    cfg.compact_segments = 0;  // ordinary segments: the policy under test (the default is compact with VMM)
    CHECK(cci_config_parse(&cfg, conf, "T", NULL, 0, NULL, NULL) == 0, "parse %s", conf);
    *sim = cci_sim_create(capacity);
    cci_backend be = cci_sim_backend(*sim);
    sim_ops = be.ops;
    counting_ops = *be.ops;
    counting_ops.reserve = counting_reserve;
    be.ops = &counting_ops;
    reserve_calls = 0;
    return cci_allocator_create(0, &cfg, be);
}

static cci_stats stats_of(cci_allocator *a)
{
    cci_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    cci_alloc_stats(a, &s);
    return s;
}

static void large_segment(const char *conf, size_t expect_segment, unsigned expect_segments)
{
    cci_sim_device *sim;
    cci_allocator *a = make(conf, (size_t)4 << 30, &sim);
    uintptr_t p[8];
    for (int i = 0; i < 8; i++)  // eight 4 MiB requests: large pool, under 10 MiB
        CHECK(cci_malloc(a, 4 * MiB, 0, &p[i]) == CCI_OK, "%s: malloc", conf);
    cci_stats s = stats_of(a);
    CHECK_EQ_U(s.num_device_alloc, expect_segments, conf);
    CHECK_EQ_U(s.reserved_bytes[CCI_POOL_ALL].current, expect_segment * expect_segments, conf);
    for (int i = 0; i < 8; i++)
        cci_free(a, p[i], 0, CCI_FREE_NOW);
    cci_allocator_destroy(a, 1);
    cci_sim_destroy(sim);
}

static void throw_on_oom(int on)
{
    cci_sim_device *sim;
    cci_allocator *a = make(on ? "throw_on_cudamalloc_oom:True" : "", 64 * MiB, &sim);
    uintptr_t p, q;
    CHECK(cci_malloc(a, 40 * MiB, 0, &p) == CCI_OK, "first 40 MiB fits");
    unsigned before = reserve_calls;
    CHECK(cci_malloc(a, 40 * MiB, 0, &q) == CCI_EOOM, "second 40 MiB does not");
    cci_stats s = stats_of(a);
    CHECK_EQ_U(s.num_ooms, 1, "one OOM either way");
    if (on)
        CHECK_EQ_U(reserve_calls - before, 0, "throw_on_cudamalloc_oom: the device is never asked");
    else
        CHECK(reserve_calls - before >= 1, "without it the device is asked and refuses");
    // A request that fits is still served (the prediction does not refuse what the device has).
    CHECK(cci_malloc(a, 20 * MiB, 0, &q) == CCI_OK, "20 MiB fits beside it");
    cci_free(a, p, 0, CCI_FREE_NOW);
    cci_free(a, q, 0, CCI_FREE_NOW);
    cci_allocator_destroy(a, 1);
    cci_sim_destroy(sim);
}

int main(void)
{
    large_segment("", 20 * MiB, 2);                         // five 4 MiB blocks per 20 MiB
    large_segment("large_segment_size_mb:64", 64 * MiB, 1); // all eight in one 64 MiB segment
    large_segment("large_segment_size_mb:8", 8 * MiB, 4);   // two per 8 MiB segment
    throw_on_oom(0);
    throw_on_oom(1);
    return t_finish();
}
