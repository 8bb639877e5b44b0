// SPDX-License-Identifier: MIT
// The free set (blocktree.c) against a reference: a plain array kept sorted by (stream, size,
// addr), searched linearly. Random inserts, removals and searches over few streams and few
// distinct sizes (so that ties on stream and size, decided by the address, are common); after
// every operation the answers must agree, and the tree must be a valid treap: in order, heap-ordered
// by priority, with every parent link matching its child link. Removing a block that is not in the
// set must change nothing. CCI_TEST_SCALE multiplies the work.
#include <string.h>

#include "block.h"
#include "testutil.h"

#define MAX_BLOCKS 600

static cci_block blocks[MAX_BLOCKS];
static int in_set[MAX_BLOCKS];
static cci_block *ref[MAX_BLOCKS];  // the members, sorted
static size_t nref;

static int key_cmp(uint64_t s1, size_t z1, uintptr_t a1, const cci_block *b)
{
    if (s1 != b->stream)
        return s1 < b->stream ? -1 : 1;
    if (z1 != b->size)
        return z1 < b->size ? -1 : 1;
    if (a1 != b->addr)
        return a1 < b->addr ? -1 : 1;
    return 0;
}

static void ref_insert(cci_block *b)
{
    size_t i = 0;
    while (i < nref && key_cmp(b->stream, b->size, b->addr, ref[i]) > 0)
        i++;
    memmove(&ref[i + 1], &ref[i], (nref - i) * sizeof *ref);
    ref[i] = b;
    nref++;
}

static void ref_remove(cci_block *b)
{
    size_t i = 0;
    while (ref[i] != b)
        i++;
    memmove(&ref[i], &ref[i + 1], (nref - i - 1) * sizeof *ref);
    nref--;
}

static cci_block *ref_lower_bound(uint64_t s, size_t z, uintptr_t a)
{
    for (size_t i = 0; i < nref; i++)
        if (key_cmp(s, z, a, ref[i]) <= 0)
            return ref[i];
    return NULL;
}

static cci_block *ref_before(uint64_t s, size_t z, uintptr_t a)
{
    cci_block *last = NULL;
    for (size_t i = 0; i < nref && key_cmp(s, z, a, ref[i]) > 0; i++)
        last = ref[i];
    return last;
}

// Checks the subtree under t (whose parent must be `parent`); returns its node count, or -1.
static long check_subtree(const cci_block *t, const cci_block *parent)
{
    if (!t)
        return 0;
    if (t->parent != parent) {
        CHECK(0, "block %#lx: parent link does not match", (unsigned long)t->addr);
        return -1;
    }
    for (int side = 0; side < 2; side++) {
        const cci_block *c = t->child[side];
        if (!c)
            continue;
        int cmp = key_cmp(c->stream, c->size, c->addr, t);
        if ((side == 0 && cmp >= 0) || (side == 1 && cmp <= 0) || c->prio > t->prio) {
            CHECK(0, "block %#lx: child %d out of order or above its parent's priority", (unsigned long)t->addr,
                  side);
            return -1;
        }
    }
    long l = check_subtree(t->child[0], t), r = check_subtree(t->child[1], t);
    return l < 0 || r < 0 ? -1 : l + r + 1;
}

struct walk_state {
    size_t i;
    int ok;
    size_t stop_after;  // the walk's callback asks to stop after this many blocks
};

static int walk_check(cci_block *b, void *ud)
{
    struct walk_state *w = ud;
    if (w->i >= nref || ref[w->i] != b)
        w->ok = 0;
    w->i++;
    return w->i == w->stop_after;
}

// A random key near the blocks' keys: one of the few streams and sizes, any address.
static void random_key(uint64_t *s, size_t *z, uintptr_t *a)
{
    *s = rnd() % 4;
    *z = (size_t)(rnd() % 12 + 1) * 512;
    *a = (uintptr_t)(rnd() % (MAX_BLOCKS + 2)) * 4096;
}

static void run(uint64_t seed, long ops)
{
    rng_state = seed;
    memset(blocks, 0, sizeof blocks);
    memset(in_set, 0, sizeof in_set);
    nref = 0;
    cci_block *root = NULL;
    for (size_t i = 0; i < MAX_BLOCKS; i++)
        blocks[i].addr = (uintptr_t)(i + 1) * 4096;  // distinct addresses, as in a pool
    unsigned long mismatches = 0;
    for (long op = 0; op < ops; op++) {
        size_t i = rnd() % MAX_BLOCKS;
        cci_block *b = &blocks[i];
        if (in_set[i]) {
            cci_tree_remove(&root, b);
            ref_remove(b);
            in_set[i] = 0;
        } else if (rnd() % 8 == 0) {
            // Not in the set: a removal must leave it as it is.
            cci_tree_remove(&root, b);
        } else {
            b->stream = rnd() % 4;
            b->size = (size_t)(rnd() % 12 + 1) * 512;
            cci_tree_insert(&root, b);
            ref_insert(b);
            in_set[i] = 1;
        }
        for (int q = 0; q < 4; q++) {
            uint64_t s;
            size_t z;
            uintptr_t a;
            random_key(&s, &z, &a);
            if (q == 3 && nref) {  // a member's own key: lower_bound finds it, before is its predecessor
                cci_block *m = ref[rnd() % nref];
                s = m->stream, z = m->size, a = m->addr;
            }
            if (cci_tree_lower_bound(root, s, z, a) != ref_lower_bound(s, z, a) ||
                cci_tree_before(root, s, z, a) != ref_before(s, z, a))
                mismatches++;
        }
        if (op % 64 == 0 || op == ops - 1) {
            long n = check_subtree(root, NULL);
            CHECK(n == (long)nref, "seed %llu op %ld: the tree holds %ld blocks, the reference %zu",
                  (unsigned long long)seed, op, n, nref);
            struct walk_state w = {0, 1, (size_t)-1};
            cci_tree_walk(root, walk_check, &w);
            CHECK(w.ok && w.i == nref, "seed %llu op %ld: the walk is not the sorted order",
                  (unsigned long long)seed, op);
            if (nref > 2) {
                struct walk_state e = {0, 1, nref / 2};  // a walk stopped early visits a prefix
                CHECK(cci_tree_walk(root, walk_check, &e) == 1 && e.ok && e.i == nref / 2,
                      "seed %llu op %ld: an early stop", (unsigned long long)seed, op);
            }
        }
    }
    CHECK(mismatches == 0, "seed %llu: %lu searches differ from the reference", (unsigned long long)seed,
          mismatches);
}

int main(void)
{
    long ops = 20000 * t_scale();
    for (uint64_t seed = 1; seed <= 6; seed++)
        run(seed * 0x9E3779B97F4A7C15ull, ops);
    return t_finish();
}
