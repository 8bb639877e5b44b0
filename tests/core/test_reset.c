// SPDX-License-Identifier: MIT
// The in-place reset (cudaDeviceReset) with everything an allocator can hold at that moment:
// allocated blocks, fenced frees still behind an unpassed fence, an open batch, deferred frees,
// and the pages and address ranges of expandable and compact segments. After the reset the
// device holds nothing (no segment, page, range or fence handle), and the allocator serves again.
#include <string.h>

#include "allocator.h"
#include "allocator_reset.h"
#include "testutil.h"

#define MiB ((size_t)1 << 20)

static cci_config conf(const char *s)
{
    cci_config c;
    cci_config_default(&c);
    char err[256];
    if (cci_config_parse(&c, s, "test", err, sizeof err, NULL, NULL) != 0) {
        fprintf(stderr, "bad test configuration: %s\n", err);
        exit(2);
    }
    return c;
}

static void device_empty(cci_sim_device *sim, const char *what)
{
    uint64_t records, waits, live;
    cci_sim_fence_counts(sim, &records, &waits, &live);
    cci_sim_vmm_stats vs;
    cci_sim_vmm_stats_get(sim, &vs);
    CHECK(cci_sim_reserved(sim) == 0, "%s: nothing reserved after the reset (%zu)", what, cci_sim_reserved(sim));
    CHECK(cci_sim_segments(sim) == 0, "%s: no segment after the reset", what);
    CHECK(live == 0, "%s: no fence handle held after the reset (%llu)", what, (unsigned long long)live);
    CHECK(vs.pages == 0 && vs.va_ranges == 0 && vs.mappings == 0,
          "%s: no page (%zu), range (%zu) or mapping (%zu) after the reset", what, vs.pages, vs.va_ranges,
          vs.mappings);
    CHECK(vs.errors == 0, "%s: the device saw no misuse (%s)", what, vs.last_error);
}

static void scenario(const char *confstr)
{
    cci_sim_device *sim = cci_sim_create((size_t)8 << 30);
    cci_config c = conf(confstr);
    cci_allocator *a = cci_allocator_create(0, &c, cci_sim_backend(sim));
    CHECK(a != NULL, "%s: allocator created", confstr);
    cci_sim_set_fence_lag(sim, 1000);  // nothing passes on its own
    uintptr_t p[64];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 64; i++)
            CHECK(cci_malloc(a, (size_t)(i % 7 + 1) * 3 * MiB + 512 * (size_t)i, 7, &p[i]) == CCI_OK,
                  "%s: allocation %d served", confstr, i);
        for (int i = 0; i < 40; i++)  // fenced: batches behind fences that have not passed
            CHECK(cci_free(a, p[i], 7, CCI_FREE_FENCED) == CCI_OK, "%s: fenced free", confstr);
        for (int i = 40; i < 48; i++)
            CHECK(cci_free(a, p[i], 7, CCI_FREE_DEFERRED) == CCI_OK, "%s: deferred free", confstr);
        uintptr_t big;  // forces the open batch behind a fence (a pool miss)
        CHECK(cci_malloc(a, 64 * MiB, 7, &big) == CCI_OK, "%s: a large allocation", confstr);
        cci_allocator_reset(a, 1);
        device_empty(sim, confstr);
        cci_stats st;
        cci_alloc_stats(a, &st);
        CHECK(st.reserved_bytes[0].current == 0 && st.allocated_bytes[0].current == 0,
              "%s: statistics start over", confstr);
        CHECK(cci_free(a, p[60], 7, CCI_FREE_NOW) == CCI_ENOTOURS,
              "%s: a pointer from before the reset is unknown", confstr);
        char msg[256];
        CHECK(cci_allocator_check(a, msg, sizeof msg) == 0, "%s: invariants after the reset: %s", confstr, msg);
    }
    uintptr_t q;
    CHECK(cci_malloc(a, 5 * MiB, 0, &q) == CCI_OK, "%s: serves again after the resets", confstr);
    CHECK(cci_free(a, q, 0, CCI_FREE_NOW) == CCI_OK, "%s: and frees", confstr);
    cci_allocator_destroy(a, 1);
    device_empty(sim, confstr);
    cci_sim_destroy(sim);
}

int main(void)
{
    scenario("");
    scenario("expandable_segments:True");
    scenario("compact_segments:True");
    scenario("max_split_size_mb:40,garbage_collection_threshold:0.5");
    return t_finish();
}
