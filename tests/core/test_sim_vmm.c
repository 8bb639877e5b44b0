// SPDX-License-Identifier: MIT
// The simulated device's virtual-memory group on its own: correct use always succeeds, each kind
// of misuse the driver would reject is refused and reported, and physical pages share the
// device's capacity with ordinary segments.
#include <string.h>

#include "backend.h"
#include "testutil.h"

#define G ((size_t)2 << 20)

static const cci_backend_vmm_ops *ops_of(cci_backend be) { return be.ops->vmm; }

static uint64_t errors(cci_sim_device *sim)
{
    cci_sim_vmm_stats st;
    cci_sim_vmm_stats_get(sim, &st);
    return st.errors;
}

// Misuse must fail with CCI_EBACKEND and be counted exactly once.
#define REFUSED(sim, call, what)                                                                   \
    do {                                                                                           \
        uint64_t before_ = errors(sim);                                                            \
        int rc_ = (call);                                                                          \
        CHECK(rc_ == CCI_EBACKEND, "%s: rc %d", what, rc_);                                        \
        CHECK_EQ_U(errors(sim), before_ + 1, what);                                                \
    } while (0)

static void test_caps(void)
{
    cci_sim_device *sim = cci_sim_create(64 * MiB);
    cci_backend be = cci_sim_backend(sim);
    CHECK(be.ops->caps & CCI_CAP_VMM, "the simulated device offers the VMM group");
    CHECK(be.ops->vmm != NULL, "vmm ops set");
    CHECK_EQ_U(ops_of(be)->granularity(be.ctx, 0), G, "default granularity");
    CHECK(cci_sim_set_granularity(sim, 3000) == -1, "granularity must be a power of two");
    CHECK(cci_sim_set_granularity(sim, 64 * KiB) == 0, "granularity settable before use");
    CHECK_EQ_U(ops_of(be)->granularity(be.ctx, 0), 64 * KiB, "granularity after set");
    uintptr_t va;
    CHECK(ops_of(be)->va_reserve(be.ctx, 0, 1 * MiB, 0, &va) == CCI_OK, "reserve");
    CHECK(cci_sim_set_granularity(sim, G) == -1, "granularity frozen once used");
    cci_sim_destroy(sim);
}

static void test_map_cycle(void)
{
    cci_sim_device *sim = cci_sim_create(64 * MiB);
    cci_backend be = cci_sim_backend(sim);
    const cci_backend_vmm_ops *v = ops_of(be);
    uintptr_t va = 0;
    CHECK(v->va_reserve(be.ctx, 0, 1024 * MiB, 0, &va) == CCI_OK, "a range larger than the device");
    CHECK(va % G == 0, "range aligned to the granularity");
    uint64_t p[4];
    for (int i = 0; i < 4; i++)
        CHECK(v->page_create(be.ctx, 0, G, &p[i]) == CCI_OK && p[i] != 0, "page %d", i);
    cci_sim_vmm_stats st;
    cci_sim_vmm_stats_get(sim, &st);
    CHECK_EQ_U(st.physical_bytes, 4 * G, "physical bytes counted at create");
    CHECK_EQ_U(st.mapped_bytes, 0, "nothing mapped yet");
    for (int i = 0; i < 4; i++)
        CHECK(v->map(be.ctx, 0, va + (size_t)i * G, G, p[i]) == CCI_OK, "map %d", i);
    CHECK(!cci_sim_vmm_accessible(sim, va, G), "a new mapping has no access");
    CHECK(v->set_access(be.ctx, 0, va, 4 * G) == CCI_OK, "one access call over four mappings");
    CHECK(cci_sim_vmm_accessible(sim, va, 4 * G), "all four accessible");
    CHECK(!cci_sim_vmm_accessible(sim, va, 5 * G), "the fifth page is not mapped");

    // One page mapped at two places (how pooled pages are stitched).
    uintptr_t va2 = 0;
    CHECK(v->va_reserve(be.ctx, 0, 4 * G, 0, &va2) == CCI_OK, "second range");
    CHECK(v->map(be.ctx, 0, va2, G, p[0]) == CCI_OK, "a page mapped twice");
    CHECK(v->page_release(be.ctx, 0, p[0]) == CCI_OK, "release while mapped is legal");
    cci_sim_vmm_stats_get(sim, &st);
    CHECK_EQ_U(st.physical_bytes, 4 * G, "a released page keeps its memory while mapped");
    CHECK(v->unmap(be.ctx, 0, va2, G) == CCI_OK, "unmap the second mapping");
    CHECK(v->va_free(be.ctx, 0, va2, 4 * G) == CCI_OK, "free the empty second range");

    // Unmap a run of two mappings in one call; then the released page goes with its last mapping.
    CHECK(v->unmap(be.ctx, 0, va, 2 * G) == CCI_OK, "unmap a run of adjacent mappings");
    cci_sim_vmm_stats_get(sim, &st);
    CHECK_EQ_U(st.physical_bytes, 3 * G, "page 0's memory went with its last mapping");
    CHECK_EQ_U(st.mapped_bytes, 2 * G, "two pages still mapped");
    CHECK(v->page_release(be.ctx, 0, p[1]) == CCI_OK, "release an unmapped page");
    cci_sim_vmm_stats_get(sim, &st);
    CHECK_EQ_U(st.physical_bytes, 2 * G, "unmapped page's memory goes at release");
    CHECK(v->unmap(be.ctx, 0, va + 2 * G, 2 * G) == CCI_OK, "unmap the rest");
    CHECK(v->page_release(be.ctx, 0, p[2]) == CCI_OK && v->page_release(be.ctx, 0, p[3]) == CCI_OK,
          "release the rest");
    CHECK(v->va_free(be.ctx, 0, va, 1024 * MiB) == CCI_OK, "free the range");
    cci_sim_vmm_stats_get(sim, &st);
    CHECK(st.physical_bytes == 0 && st.pages == 0 && st.mappings == 0 && st.va_ranges == 0,
          "everything gone: %zu bytes, %zu pages, %zu mappings, %zu ranges", st.physical_bytes, st.pages,
          st.mappings, st.va_ranges);
    CHECK_EQ_U(st.errors, 0, "correct use is never refused");
    CHECK_EQ_U(st.maps, 5, "map calls counted");
    CHECK_EQ_U(st.set_access_calls, 1, "access calls counted");
    cci_sim_destroy(sim);
}

static void test_misuse(void)
{
    cci_sim_device *sim = cci_sim_create(64 * MiB);
    cci_backend be = cci_sim_backend(sim);
    const cci_backend_vmm_ops *v = ops_of(be);
    uintptr_t va = 0;
    uint64_t p, q;
    CHECK(v->va_reserve(be.ctx, 0, 16 * G, 0, &va) == CCI_OK, "reserve");
    CHECK(v->page_create(be.ctx, 0, 2 * G, &p) == CCI_OK, "a two-granule page");
    CHECK(v->page_create(be.ctx, 0, G, &q) == CCI_OK, "a one-granule page");
    REFUSED(sim, v->va_reserve(be.ctx, 0, G + 512, 0, &va), "unaligned range size");
    REFUSED(sim, v->page_create(be.ctx, 0, G / 2, &q), "page smaller than the granularity");
    REFUSED(sim, v->map(be.ctx, 0, va, G, p), "map with a size other than the page's");
    REFUSED(sim, v->map(be.ctx, 0, va + 16 * G, G, q), "map outside the range");
    REFUSED(sim, v->map(be.ctx, 0, va + 512, G, q), "map at an unaligned address");
    CHECK(v->map(be.ctx, 0, va, 2 * G, p) == CCI_OK, "map");
    REFUSED(sim, v->map(be.ctx, 0, va + G, G, q), "mapping over a mapped page");
    REFUSED(sim, v->set_access(be.ctx, 0, va, 3 * G), "access past the mapped bytes");
    REFUSED(sim, v->set_access(be.ctx, 0, va + 4 * G, G), "access on an unmapped range");
    CHECK(v->set_access(be.ctx, 0, va + G, G) == CCI_OK, "access on part of a mapping");
    REFUSED(sim, v->unmap(be.ctx, 0, va, G), "unmapping part of a mapping");
    REFUSED(sim, v->unmap(be.ctx, 0, va, 3 * G), "unmapping past the mapping");
    REFUSED(sim, v->unmap(be.ctx, 0, va + 4 * G, G), "unmapping what is not mapped");
    REFUSED(sim, v->va_free(be.ctx, 0, va, 16 * G), "freeing a range with a page mapped");
    REFUSED(sim, v->va_free(be.ctx, 0, va, 8 * G), "freeing part of a range");
    CHECK(v->page_release(be.ctx, 0, q) == CCI_OK, "release");
    REFUSED(sim, v->page_release(be.ctx, 0, q), "releasing a page twice");
    REFUSED(sim, v->map(be.ctx, 0, va + 4 * G, G, q), "mapping a released page");
    REFUSED(sim, v->page_release(be.ctx, 0, 999), "releasing a handle never created");
    cci_sim_vmm_stats st;
    cci_sim_vmm_stats_get(sim, &st);
    CHECK(strstr(st.last_error, "page_release") != NULL, "last error names the call: %s", st.last_error);
    CHECK(cci_sim_vmm_accessible(sim, va + G, G) && !cci_sim_vmm_accessible(sim, va + 4 * G, G),
          "refused calls changed nothing");
    cci_sim_destroy(sim);
}

static void test_capacity(void)
{
    cci_sim_device *sim = cci_sim_create(10 * G);
    cci_backend be = cci_sim_backend(sim);
    const cci_backend_vmm_ops *v = ops_of(be);
    uintptr_t seg;
    CHECK(be.ops->reserve(be.ctx, 0, 4 * G, &seg) == CCI_OK, "an ordinary segment");
    uint64_t p[8];
    int made = 0;
    while (made < 8 && v->page_create(be.ctx, 0, G, &p[made]) == CCI_OK)
        made++;
    CHECK_EQ_U(made, 6, "pages fill what the segment left");
    uint64_t extra;
    CHECK(v->page_create(be.ctx, 0, G, &extra) == CCI_EOOM, "the device is full: EOOM, not misuse");
    CHECK_EQ_U(errors(sim), 0, "running out is not misuse");
    uintptr_t seg2;
    CHECK(be.ops->reserve(be.ctx, 0, G, &seg2) == CCI_EOOM, "segments see the pages too");
    CHECK(v->page_release(be.ctx, 0, p[0]) == CCI_OK, "release one page");
    CHECK(be.ops->reserve(be.ctx, 0, G, &seg2) == CCI_OK, "its room is back");
    cci_sim_destroy(sim);
}

int main(void)
{
    test_caps();
    test_map_cycle();
    test_misuse();
    test_capacity();
    return t_finish();
}
