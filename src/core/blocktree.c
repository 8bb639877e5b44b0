// SPDX-License-Identifier: MIT
// The free set (block.h): per stream, bins of sizes, each a treap ordered by (size, addr) with
// priorities derived from the address and size, so that the same operations build the same set
// on every run.
//
// Written for the hot path (docs/benchmarks.md, "Mixed workload: the core"): every operation
// touches a handful of nodes, and on random sizes the left-or-right choice at each node is a coin
// toss that a branch predictor loses half the time. So the key comparison is computed without
// branches and used as an index into the node's children; only the loop's end is a branch.
// Parent links make a removal O(1) to locate (the merge of the two children stays).
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "grow.h"
#include "log.h"

// (size, addr) as one 128-bit number: one compare-and-borrow orders both, where comparing the two
// halves apart costs three compares and the logic to join them. A bin holds one stream's blocks,
// so the stream takes no part.
__extension__ typedef unsigned __int128 size_addr;

static inline size_addr size_addr_of(size_t size, uintptr_t addr) { return (size_addr)size << 64 | addr; }
static inline size_addr key_of(const cci_block *b) { return size_addr_of(b->size, b->addr); }

// ---- one bin: a treap ---------------------------------------------------------------------

// Splits subtree t into the nodes ordered before k (hung at owner->child[0]) and the rest (at
// owner->child[1]). The nodes before k form a chain that continues through right children, the
// others through left children: side s continues at child[!s]. Out of line: a bin holds a block
// or two, so an insert seldom has a subtree to split, and without the loop it needs no registers
// saved.
static __attribute__((noinline)) void split(cci_block *t, size_addr k, cci_block *owner)
{
    cci_block **link[2] = {&owner->child[0], &owner->child[1]};
    cci_block *parent[2] = {owner, owner};
    while (t) {
        int side = !(key_of(t) < k);
        *link[side] = t;
        t->parent = parent[side];
        parent[side] = t;
        link[side] = &t->child[!side];
        t = *link[side];
    }
    *link[0] = NULL;
    *link[1] = NULL;
}

// Joins l and r (every key of l before every key of r) under `parent`; returns the new subtree.
// The higher priority of the two tops goes up; l continues down its right spine, r down its left
// one: side s continues at child[!s]. Picked by index, as in split, not by a branch.
static __attribute__((noinline)) cci_block *merge(cci_block *l, cci_block *r, cci_block *parent)
{
    cci_block *root = NULL, **link = &root;
    cci_block *top[2] = {l, r};
    while (((uintptr_t)top[0] != 0) & ((uintptr_t)top[1] != 0)) {
        int side = top[0]->prio <= top[1]->prio;
        cci_block *t = top[side];
        *link = t;
        t->parent = parent;
        parent = t;
        link = &t->child[!side];
        top[side] = *link;
    }
    cci_block *rest = (cci_block *)((uintptr_t)top[0] | (uintptr_t)top[1]);  // the one left, or NULL
    *link = rest;
    if (rest)
        rest->parent = parent;
    return root;
}

// merge, where a removed block's children are both there; else the one there, or NULL. A bin
// holds a block or two, so a removal seldom has two children to join (2 % on the mixed workload).
static inline cci_block *join(cci_block *l, cci_block *r, cci_block *parent)
{
    if (l && r)
        return merge(l, r, parent);
    cci_block *rest = (cci_block *)((uintptr_t)l | (uintptr_t)r);
    if (rest)
        rest->parent = parent;
    return rest;
}

static uint32_t prio_of(uintptr_t addr)
{
    uint64_t h = (uint64_t)addr * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

static void treap_insert(cci_block **root, cci_block *b)
{
    b->prio = prio_of(b->addr ^ (uintptr_t)b->size);
    size_addr k = key_of(b);
    cci_block **link = root, *parent = NULL;
    while (*link && (*link)->prio >= b->prio) {
        parent = *link;
        link = &parent->child[!(k < key_of(parent))];
    }
    if (*link) {
        split(*link, k, b);
    } else {
        b->child[0] = NULL;
        b->child[1] = NULL;
    }
    b->parent = parent;
    *link = b;
}

// First node with key >= k, or NULL.
static cci_block *treap_lower_bound(cci_block *t, size_addr k)
{
    cci_block *best = NULL;
    while (t) {
        int below = key_of(t) < k;  // t < key: the answer lies to its right
        best = below ? best : t;
        t = t->child[below];
    }
    return best;
}

// Last node with key < k, or NULL.
static cci_block *treap_before(cci_block *t, size_addr k)
{
    cci_block *best = NULL;
    while (t) {
        int below = key_of(t) < k;
        best = below ? t : best;
        t = t->child[below];
    }
    return best;
}

// The first (side 0) or last (side 1) node of a non-empty treap.
static cci_block *treap_end(cci_block *t, int side)
{
    while (t->child[side])
        t = t->child[side];
    return t;
}

static int treap_walk(cci_block *t, int (*fn)(cci_block *b, void *ud), void *ud)
{
    // Iterative in-order walk: a recursion on a degenerate treap must not blow the host's stack.
    cci_block *stack[128];
    int sp = 0;
    while (t || sp) {
        while (t) {
            if (sp == (int)(sizeof stack / sizeof stack[0])) {
                // Expected depth is ~2 log n; 128 covers far more blocks than exist. Fall back to
                // recursion rather than fail if it ever happens.
                if (treap_walk(t, fn, ud))
                    return 1;
                t = NULL;
                break;
            }
            stack[sp++] = t;
            t = t->child[0];
        }
        if (!sp)
            break;
        t = stack[--sp];
        cci_block *right = t->child[1];
        if (fn(t, ud))
            return 1;
        t = right;
    }
    return 0;
}

// ---- one stream: the bins and their bitmap --------------------------------------------------

static void mark_bin(cci_stream_bins *sb, unsigned i, int used)
{
    uint64_t bit = (uint64_t)1 << (i & 63);
    sb->used[i / 64] = used ? sb->used[i / 64] | bit : sb->used[i / 64] & ~bit;
}

// The first used bin at or after i; CCI_FREE_BINS when none.
static unsigned used_from(const cci_stream_bins *sb, unsigned i)
{
    if (i >= CCI_FREE_BINS)
        return CCI_FREE_BINS;
    unsigned w = i / 64;
    uint64_t bits = sb->used[w] & (~(uint64_t)0 << (i & 63));
    while (!bits) {
        if (++w == CCI_FREE_BIN_WORDS)
            return CCI_FREE_BINS;
        bits = sb->used[w];
    }
    return w * 64 + (unsigned)__builtin_ctzll(bits);
}

// The last used bin before i; CCI_FREE_BINS when none.
static unsigned used_before(const cci_stream_bins *sb, unsigned i)
{
    if (i == 0)
        return CCI_FREE_BINS;
    i--;
    unsigned w = i / 64;
    uint64_t bits = sb->used[w] & (~(uint64_t)0 >> (63 - (i & 63)));
    while (!bits) {
        if (w-- == 0)
            return CCI_FREE_BINS;
        bits = sb->used[w];
    }
    return w * 64 + 63u - (unsigned)__builtin_clzll(bits);
}

// ---- the streams ----------------------------------------------------------------------------

// The index of the first stream set whose stream is >= stream.
static size_t stream_index(const cci_free_set *fs, uint64_t stream)
{
    size_t lo = 0, hi = fs->nstreams;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (fs->streams[mid]->stream < stream)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

// The stream's bins, or NULL when it never had any.
static inline cci_stream_bins *stream_bins(cci_free_set *fs, uint64_t stream)
{
    cci_stream_bins *sb = fs->last;
    if (sb && sb->stream == stream)
        return sb;
    size_t i = stream_index(fs, stream);
    if (i == fs->nstreams || fs->streams[i]->stream != stream)
        return NULL;
    return fs->last = fs->streams[i];
}

int cci__free_set_add_stream(cci_free_set *fs, uint64_t stream)
{
    if (stream_bins(fs, stream))
        return 0;
    cci_stream_bins **n = cci_grow(fs->streams, &fs->cap, fs->nstreams, sizeof *n, 4);
    if (!n)
        return -1;
    fs->streams = n;
    cci_stream_bins *sb = calloc(1, sizeof *sb);
    if (!sb)
        return -1;
    sb->stream = stream;
    size_t i = stream_index(fs, stream);
    memmove(&fs->streams[i + 1], &fs->streams[i], (fs->nstreams - i) * sizeof *fs->streams);
    fs->streams[i] = sb;
    fs->nstreams++;
    fs->last = sb;
    return 0;
}

void cci_free_set_insert(cci_free_set *fs, cci_block *b)
{
    cci_stream_bins *sb = stream_bins(fs, b->stream);
    if (!sb) {
        // Unreachable while every allocation reserves its stream first (cci_free_set_reserve):
        // a block without its stream's bins would be lost to every later search.
        cci_log(CCI_LOG_ERROR, "free set: a block of stream %#llx, which no allocation reserved",
                (unsigned long long)b->stream);
        abort();
    }
    unsigned i = cci_free_bin_of(b->size);
    treap_insert(&sb->bin[i], b);
    mark_bin(sb, i, 1);
}

void cci_free_set_remove(cci_free_set *fs, cci_block *b)
{
    cci_block *p = b->parent;
    if (p) {
        cci_block **link = &p->child[p->child[1] == b];
        if (*link != b)
            return;
        *link = join(b->child[0], b->child[1], p);
    } else {
        // A bin's root, or not in the set (parent NULL too): its bin says which.
        cci_stream_bins *sb = stream_bins(fs, b->stream);
        unsigned i = cci_free_bin_of(b->size);
        if (!sb || sb->bin[i] != b)
            return;
        sb->bin[i] = join(b->child[0], b->child[1], NULL);
        if (!sb->bin[i])
            mark_bin(sb, i, 0);
    }
    b->child[0] = b->child[1] = b->parent = NULL;
}

cci_block *cci_free_set_lower_bound(cci_free_set *fs, uint64_t stream, size_t size, uintptr_t addr)
{
    cci_stream_bins *sb = stream_bins(fs, stream);
    if (!sb)
        return NULL;
    unsigned i = cci_free_bin_of(size);
    cci_block *b = treap_lower_bound(sb->bin[i], size_addr_of(size, addr));
    if (b)
        return b;
    i = used_from(sb, i + 1);  // every block of a later bin is larger than the key
    return i < CCI_FREE_BINS ? treap_end(sb->bin[i], 0) : NULL;
}

cci_block *cci_free_set_before(cci_free_set *fs, uint64_t stream, size_t size, uintptr_t addr)
{
    cci_stream_bins *sb = stream_bins(fs, stream);
    if (!sb)
        return NULL;
    unsigned i = cci_free_bin_of(size);
    cci_block *b = treap_before(sb->bin[i], size_addr_of(size, addr));
    if (b)
        return b;
    i = used_before(sb, i);
    return i < CCI_FREE_BINS ? treap_end(sb->bin[i], 1) : NULL;
}

int cci_free_set_walk(const cci_free_set *fs, int (*fn)(cci_block *b, void *ud), void *ud)
{
    for (size_t s = 0; s < fs->nstreams; s++) {
        const cci_stream_bins *sb = fs->streams[s];
        for (unsigned i = used_from(sb, 0); i < CCI_FREE_BINS; i = used_from(sb, i + 1))
            if (treap_walk(sb->bin[i], fn, ud))
                return 1;
    }
    return 0;
}

void cci_free_set_empty(cci_free_set *fs)
{
    for (size_t s = 0; s < fs->nstreams; s++) {
        uint64_t stream = fs->streams[s]->stream;
        *fs->streams[s] = (cci_stream_bins){.stream = stream};
    }
}

void cci_free_set_destroy(cci_free_set *fs)
{
    for (size_t s = 0; s < fs->nstreams; s++)
        free(fs->streams[s]);
    free(fs->streams);
    *fs = (cci_free_set){0};
}
