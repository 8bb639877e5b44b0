// SPDX-License-Identifier: MIT
// The free set (blocktree.c) against a reference: a plain array kept sorted by (stream, size,
// addr), searched linearly. Random inserts, removals and searches over few streams and few
// distinct sizes (so that ties on stream and size, decided by the address, are common), spread
// from 512 bytes to past the last bin (so that a search crosses bins, bitmap words and the clamp);
// after every operation the answers must agree, and every bin must be a valid treap of its stream
// and bin: in order, heap-ordered by priority, with every parent link matching its child link,
// its bitmap bit set exactly when it holds a block. Removing a block that is not in the set must
// change nothing. CCI_TEST_SCALE multiplies the work.
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

// The searches answer within the key's stream only.
static cci_block *ref_lower_bound(uint64_t s, size_t z, uintptr_t a)
{
    for (size_t i = 0; i < nref; i++)
        if (key_cmp(s, z, a, ref[i]) <= 0)
            return ref[i]->stream == s ? ref[i] : NULL;
    return NULL;
}

static cci_block *ref_before(uint64_t s, size_t z, uintptr_t a)
{
    cci_block *last = NULL;
    for (size_t i = 0; i < nref && key_cmp(s, z, a, ref[i]) > 0; i++)
        last = ref[i];
    return last && last->stream == s ? last : NULL;
}

// Checks the subtree under t (whose parent must be `parent`), a treap of bin `bin` of `stream`;
// returns its node count, or -1.
static long check_subtree(const cci_block *t, const cci_block *parent, uint64_t stream, unsigned bin)
{
    if (!t)
        return 0;
    if (t->parent != parent) {
        CHECK(0, "block %#lx: parent link does not match", (unsigned long)t->addr);
        return -1;
    }
    if (t->stream != stream || cci_free_bin_of(t->size) != bin) {
        CHECK(0, "block %#lx: in the bins of another stream or size", (unsigned long)t->addr);
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
    long l = check_subtree(t->child[0], t, stream, bin), r = check_subtree(t->child[1], t, stream, bin);
    return l < 0 || r < 0 ? -1 : l + r + 1;
}

// Checks every stream's bins, in stream order, and their bitmaps; returns the node count, or -1.
static long check_set(const cci_free_set *fs)
{
    long total = 0;
    for (size_t s = 0; s < fs->nstreams; s++) {
        const cci_stream_bins *sb = fs->streams[s];
        if (s && fs->streams[s - 1]->stream >= sb->stream) {
            CHECK(0, "stream %zu out of order", s);
            return -1;
        }
        for (unsigned i = 0; i < CCI_FREE_BINS; i++) {
            int used = (sb->used[i / 64] >> (i % 64)) & 1;
            if (used != (sb->bin[i] != NULL)) {
                CHECK(0, "stream %llu bin %u: bitmap bit %d", (unsigned long long)sb->stream, i, used);
                return -1;
            }
            long n = check_subtree(sb->bin[i], NULL, sb->stream, i);
            if (n < 0)
                return -1;
            total += n;
        }
    }
    return total;
}

// The bins are monotone in the size, and fine enough to matter: sizes of one octave spread over
// eight bins.
static void check_bin_of(void)
{
    unsigned prev = 0;
    for (size_t z = 0; z < ((size_t)1 << 20); z += 512) {
        unsigned b = cci_free_bin_of(z);
        CHECK(b >= prev && b < CCI_FREE_BINS, "size %zu: bin %u after %u", z, b, prev);
        prev = b;
    }
    for (int m = 20; m < 64; m++) {
        size_t z = (size_t)1 << m;
        unsigned b = cci_free_bin_of(z), after = cci_free_bin_of(z + z / 2);
        CHECK(b >= prev && after >= b && after < CCI_FREE_BINS, "2^%d bytes: bin %u after %u", m, b, prev);
        prev = after;
    }
    CHECK(cci_free_bin_of(SIZE_MAX) == CCI_FREE_BINS - 1, "the largest size's bin");
    CHECK(cci_free_bin_of((size_t)1 << 30) != cci_free_bin_of(((size_t)1 << 30) + ((size_t)1 << 27)),
          "one octave in several bins");
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

// One of few sizes, from 512 bytes to past the last bin's start (7.5 TiB).
static size_t random_size(void)
{
    static const int octave[] = {0, 3, 11, 20, 31, 35};
    return (size_t)(rnd() % 12 + 1) * 512 << octave[rnd() % 6];
}

// A random key near the blocks' keys: one of the few streams and sizes, any address.
static void random_key(uint64_t *s, size_t *z, uintptr_t *a)
{
    *s = rnd() % 4;
    *z = random_size();
    *a = (uintptr_t)(rnd() % (MAX_BLOCKS + 2)) * 4096;
}

static void run(uint64_t seed, long ops)
{
    rng_state = seed;
    memset(blocks, 0, sizeof blocks);
    memset(in_set, 0, sizeof in_set);
    nref = 0;
    cci_free_set fs = {0};
    for (uint64_t s = 4; s-- > 0;)  // reserved out of order: the set keeps them sorted
        CHECK(cci_free_set_reserve(&fs, s) == 0, "reserve stream %llu", (unsigned long long)s);
    for (size_t i = 0; i < MAX_BLOCKS; i++)
        blocks[i].addr = (uintptr_t)(i + 1) * 4096;  // distinct addresses, as in a pool
    unsigned long mismatches = 0;
    for (long op = 0; op < ops; op++) {
        size_t i = rnd() % MAX_BLOCKS;
        cci_block *b = &blocks[i];
        if (in_set[i]) {
            cci_free_set_remove(&fs, b);
            ref_remove(b);
            in_set[i] = 0;
        } else if (rnd() % 8 == 0) {
            // Not in the set: a removal must leave it as it is.
            cci_free_set_remove(&fs, b);
        } else {
            b->stream = rnd() % 4;
            b->size = random_size();
            cci_free_set_insert(&fs, b);
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
            if (cci_free_set_lower_bound(&fs, s, z, a) != ref_lower_bound(s, z, a) ||
                cci_free_set_before(&fs, s, z, a) != ref_before(s, z, a))
                mismatches++;
        }
        if (op % 64 == 0 || op == ops - 1) {
            long n = check_set(&fs);
            CHECK(n == (long)nref, "seed %llu op %ld: the set holds %ld blocks, the reference %zu",
                  (unsigned long long)seed, op, n, nref);
            struct walk_state w = {0, 1, (size_t)-1};
            cci_free_set_walk(&fs, walk_check, &w);
            CHECK(w.ok && w.i == nref, "seed %llu op %ld: the walk is not the sorted order",
                  (unsigned long long)seed, op);
            if (nref > 2) {
                struct walk_state e = {0, 1, nref / 2};  // a walk stopped early visits a prefix
                CHECK(cci_free_set_walk(&fs, walk_check, &e) == 1 && e.ok && e.i == nref / 2,
                      "seed %llu op %ld: an early stop", (unsigned long long)seed, op);
            }
        }
    }
    CHECK(mismatches == 0, "seed %llu: %lu searches differ from the reference", (unsigned long long)seed,
          mismatches);
    // Emptied, the set keeps its streams: a reserved stream takes blocks at once.
    cci_free_set_empty(&fs);
    CHECK(check_set(&fs) == 0 && fs.nstreams == 4, "seed %llu: emptied", (unsigned long long)seed);
    blocks[0].stream = 3;
    blocks[0].size = 512;
    cci_free_set_insert(&fs, &blocks[0]);
    CHECK(cci_free_set_lower_bound(&fs, 3, 512, 0) == &blocks[0], "seed %llu: a block after emptying",
          (unsigned long long)seed);
    cci_free_set_destroy(&fs);
}

int main(void)
{
    check_bin_of();
    long ops = 20000 * t_scale();
    for (uint64_t seed = 1; seed <= 6; seed++)
        run(seed * 0x9E3779B97F4A7C15ull, ops);
    return t_finish();
}
