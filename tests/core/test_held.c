// SPDX-License-Identifier: MIT
// CCI_FREE_HELD, the replay's free: the block leaves the program at once (allocated bytes drop,
// it shows as waiting) but is handed out again only after cci_free_complete_held, which is how a
// replay reproduces a fenced free's completion at the moment the recorded run saw it.
#include "allocator.h"
#include "testutil.h"

#define MiB ((size_t)1 << 20)

int main(void)
{
    cci_sim_device *sim = cci_sim_create((size_t)1 << 30);
    cci_config c;
    cci_config_default(&c);
    cci_allocator *a = cci_allocator_create(0, &c, cci_sim_backend(sim));
    uintptr_t p, q, r;
    CHECK(cci_malloc(a, 4 * MiB, 0, &p) == CCI_OK, "first allocation");
    size_t cached_before = cci_cached_free_bytes(a);
    CHECK(cci_free(a, p, 0, CCI_FREE_HELD) == CCI_OK, "held free accepted");
    cci_stats st;
    cci_alloc_stats(a, &st);
    CHECK_EQ_U(st.allocated_bytes[CCI_POOL_ALL].current, 0, "allocated bytes drop at the held free");
    CHECK(cci_cached_free_bytes(a) == cached_before, "a held block is not cached-free");
    CHECK(cci_malloc(a, 4 * MiB, 0, &q) == CCI_OK && q != p, "a held block is not handed out again");
    CHECK(cci_free_complete_held(a, q) == CCI_EINVAL, "completing a block that is not held is refused");
    CHECK(cci_free_complete_held(a, p + 512) == CCI_EINVAL, "completing an interior pointer is refused");
    CHECK(cci_free_complete_held(a, p) == CCI_OK, "completing the held block");
    CHECK(cci_free_complete_held(a, p) == CCI_EINVAL, "completing it twice is refused");
    CHECK(cci_malloc(a, 4 * MiB, 0, &r) == CCI_OK && r == p, "after completion the block is reused");
    char msg[256];
    CHECK(cci_allocator_check(a, msg, sizeof msg) == 0, "invariants: %s", msg);
    CHECK(cci_free(a, q, 0, CCI_FREE_NOW) == CCI_OK && cci_free(a, r, 0, CCI_FREE_NOW) == CCI_OK, "frees");
    cci_allocator_destroy(a, 1);
    CHECK(cci_sim_reserved(sim) == 0, "everything given back");
    cci_sim_destroy(sim);
    return t_finish();
}
