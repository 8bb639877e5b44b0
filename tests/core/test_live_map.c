// SPDX-License-Identifier: MIT
// The live map (live_map.h) against a reference: a flag per candidate block, looked up directly.
// Random adds, removals and finds, with the table grown many times over. The addresses are drawn
// from a small range of 512-aligned values, so blocks that start their probes in the same slot are
// common, and long runs of occupied slots form: a removal must move back exactly the entries a
// probe would no longer reach past its hole (and an address is added again after its removal).
// After every operation a find of the touched address, and every so often of every address, must
// agree with the reference, and the count must. CCI_TEST_SCALE multiplies the work.
#include "live_map.h"
#include "testutil.h"

#define CANDIDATES 3000

static cci_block blocks[CANDIDATES];
static int in_map[CANDIDATES];

static void check_all(const cci_live_map *m, size_t n, long op)
{
    size_t wrong = 0;
    for (int i = 0; i < CANDIDATES; i++)
        wrong += cci_live_find(m, blocks[i].addr) != (in_map[i] ? &blocks[i] : NULL);
    CHECK(wrong == 0 && m->count == n, "op %ld: %zu finds wrong, count %zu (reference %zu)", op, wrong, m->count, n);
    CHECK(m->count * 2 <= m->cap, "op %ld: %zu of %zu slots in use", op, m->count, m->cap);
}

int main(void)
{
    cci_live_map m = {0};
    CHECK(cci_live_find(&m, 512) == NULL, "an empty map finds nothing");
    for (int i = 0; i < CANDIDATES; i++)
        blocks[i].addr = (uintptr_t)(i + 1) * 512;  // consecutive pages: their mixes share slots often
    rng_state = 0x9E3779B97F4A7C15ull;
    size_t n = 0;
    long ops = 400000 * t_scale();
    for (long op = 0; op < ops; op++) {
        // The live count drifts between a few and most candidates, so the table grows and shrinks.
        long phase = (op / 50000) % 4;
        int want_add = (int)(rnd() % 100) < (phase == 0 ? 70 : phase == 1 ? 50 : phase == 2 ? 30 : 50);
        int i = (int)(rnd() % CANDIDATES);
        if (want_add && !in_map[i]) {
            CHECK(cci_live_add(&m, &blocks[i]) == 0, "op %ld: add", op);
            in_map[i] = 1;
            n++;
        } else if (!want_add && in_map[i]) {
            cci_live_remove(&m, &blocks[i]);
            in_map[i] = 0;
            n--;
        }
        cci_block *f = cci_live_find(&m, blocks[i].addr);
        CHECK(f == (in_map[i] ? &blocks[i] : NULL), "op %ld: find %#lx", op, (unsigned long)blocks[i].addr);
        CHECK(cci_live_find(&m, blocks[i].addr + 256) == NULL, "op %ld: an interior address finds nothing", op);
        if (op % 20000 == 0)
            check_all(&m, n, op);
    }
    check_all(&m, n, ops);
    cci_live_clear(&m);
    CHECK(m.cap == 0 && m.count == 0 && cci_live_find(&m, blocks[0].addr) == NULL, "cleared");
    return t_finish();
}
