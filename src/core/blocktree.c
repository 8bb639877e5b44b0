// SPDX-License-Identifier: MIT
// The free set: a treap ordered by (stream, size, addr), with priorities derived from the address
// and size so that the same operations build the same tree on every run.
//
// Written for the hot path (docs/benchmarks.md, "Mixed workload: the core"): every operation
// touches a handful of nodes, and on random sizes the left-or-right choice at each node is a coin
// toss that a branch predictor loses half the time. So the key comparison is computed without
// branches and used as an index into the node's children; only the loop's end is a branch.
// Parent links make a removal O(1) to locate (the merge of the two children stays).
#include "block.h"

// (size, addr) as one 128-bit number: one compare-and-borrow orders both, where comparing the two
// halves apart costs three compares and the logic to join them.
__extension__ typedef unsigned __int128 size_addr;

static inline size_addr size_addr_of(size_t size, uintptr_t addr) { return (size_addr)size << 64 | addr; }

// 1 when key (s1, z1, a1) orders before node b. Bitwise operators, not && and ||: each part is
// a flag the compiler computes with a compare, and none of them is a branch.
static inline int key_less(uint64_t s1, size_t z1, uintptr_t a1, const cci_block *b)
{
    uint64_t s2 = b->stream;
    return (s1 < s2) | ((s1 == s2) & (size_addr_of(z1, a1) < size_addr_of(b->size, b->addr)));
}

// 1 when node b orders before key (s1, z1, a1).
static inline int node_less(const cci_block *b, uint64_t s1, size_t z1, uintptr_t a1)
{
    uint64_t s2 = b->stream;
    return (s2 < s1) | ((s2 == s1) & (size_addr_of(b->size, b->addr) < size_addr_of(z1, a1)));
}

static inline int block_less(const cci_block *x, const cci_block *y)
{
    return key_less(x->stream, x->size, x->addr, y);
}

// Splits subtree t into the nodes ordered before k (hung at owner->child[0]) and the rest (at
// owner->child[1]). The nodes before k form a chain that continues through right children, the
// others through left children: side s continues at child[!s].
static void split(cci_block *t, const cci_block *k, cci_block *owner)
{
    cci_block **link[2] = {&owner->child[0], &owner->child[1]};
    cci_block *parent[2] = {owner, owner};
    while (t) {
        int side = !block_less(t, k);
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
static cci_block *merge(cci_block *l, cci_block *r, cci_block *parent)
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

static uint32_t prio_of(uintptr_t addr)
{
    uint64_t h = (uint64_t)addr * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

void cci_tree_insert(cci_block **root, cci_block *b)
{
    b->prio = prio_of(b->addr ^ (uintptr_t)b->size);
    cci_block **link = root, *parent = NULL;
    while (*link && (*link)->prio >= b->prio) {
        parent = *link;
        link = &parent->child[!block_less(b, parent)];
    }
    split(*link, b, b);
    b->parent = parent;
    *link = b;
}

void cci_tree_remove(cci_block **root, cci_block *b)
{
    cci_block *p = b->parent;
    cci_block **link = p ? &p->child[p->child[1] == b] : root;
    if (*link != b)
        return;  // not in the set: a block never inserted, or removed already (parent NULL)
    *link = merge(b->child[0], b->child[1], p);
    b->child[0] = b->child[1] = b->parent = NULL;
}

cci_block *cci_tree_lower_bound(cci_block *t, uint64_t stream, size_t size, uintptr_t addr)
{
    cci_block *best = NULL;
    while (t) {
        int below = node_less(t, stream, size, addr);  // t < key: the answer lies to its right
        best = below ? best : t;
        t = t->child[below];
    }
    return best;
}

cci_block *cci_tree_before(cci_block *t, uint64_t stream, size_t size, uintptr_t addr)
{
    cci_block *best = NULL;
    while (t) {
        int below = node_less(t, stream, size, addr);
        best = below ? t : best;
        t = t->child[below];
    }
    return best;
}

int cci_tree_walk(cci_block *t, int (*fn)(cci_block *b, void *ud), void *ud)
{
    // Iterative in-order walk: a recursion on a degenerate tree must not blow the host's stack.
    cci_block *stack[128];
    int sp = 0;
    while (t || sp) {
        while (t) {
            if (sp == (int)(sizeof stack / sizeof stack[0])) {
                // Expected depth is ~2 log n; 128 covers far more blocks than exist. Fall back to
                // recursion rather than fail if it ever happens.
                if (cci_tree_walk(t, fn, ud))
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
