// SPDX-License-Identifier: MIT
#include "block.h"

static int key_less(uint64_t s1, size_t z1, uintptr_t a1, const cci_block *b)
{
    if (s1 != b->stream)
        return s1 < b->stream;
    if (z1 != b->size)
        return z1 < b->size;
    return a1 < b->addr;
}

static int block_less(const cci_block *x, const cci_block *y)
{
    return key_less(x->stream, x->size, x->addr, y);
}

// Splits t into nodes ordered before `k` (into *l) and the rest (into *r).
static void split(cci_block *t, const cci_block *k, cci_block **l, cci_block **r)
{
    while (t) {
        if (block_less(t, k)) {
            *l = t;
            l = &t->right;
            t = t->right;
        } else {
            *r = t;
            r = &t->left;
            t = t->left;
        }
    }
    *l = NULL;
    *r = NULL;
}

static cci_block *merge(cci_block *l, cci_block *r)
{
    cci_block *root = NULL, **link = &root;
    while (l && r) {
        if (l->prio > r->prio) {
            *link = l;
            link = &l->right;
            l = l->right;
        } else {
            *link = r;
            link = &r->left;
            r = r->left;
        }
    }
    *link = l ? l : r;
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
    cci_block **link = root;
    while (*link && (*link)->prio >= b->prio)
        link = block_less(b, *link) ? &(*link)->left : &(*link)->right;
    split(*link, b, &b->left, &b->right);
    *link = b;
}

void cci_tree_remove(cci_block **root, cci_block *b)
{
    cci_block **link = root;
    while (*link && *link != b)
        link = block_less(b, *link) ? &(*link)->left : &(*link)->right;
    if (*link)
        *link = merge(b->left, b->right);
    b->left = b->right = NULL;
}

cci_block *cci_tree_lower_bound(cci_block *t, uint64_t stream, size_t size, uintptr_t addr)
{
    cci_block *best = NULL;
    while (t) {
        if (key_less(stream, size, addr, t) || (t->stream == stream && t->size == size && t->addr == addr)) {
            best = t;
            t = t->left;
        } else {
            t = t->right;
        }
    }
    return best;
}

cci_block *cci_tree_before(cci_block *t, uint64_t stream, size_t size, uintptr_t addr)
{
    cci_block *best = NULL;
    while (t) {
        if (key_less(t->stream, t->size, t->addr, &(cci_block){.stream = stream, .size = size, .addr = addr})) {
            best = t;
            t = t->right;
        } else {
            t = t->left;
        }
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
            t = t->left;
        }
        if (!sp)
            break;
        t = stack[--sp];
        cci_block *right = t->right;
        if (fn(t, ud))
            return 1;
        t = right;
    }
    return 0;
}
