// SPDX-License-Identifier: MIT
// The live map: blocks by address. The allocator keeps its allocated and pending blocks in one, for
// a locked free's lookup (read and changed under its lock); each thread cache the blocks its
// owner may free without the lock (tcache.c: changed by the owner or by a lock holder while the
// cache is stopped). Open addressing with linear probing over a power-of-two table of block
// pointers. A removal shifts the entries after it back into the
// hole (no tombstones): a table that only ever grows then never needs cleaning, where tombstones
// had made the mixed workload rebuild its table every few hundred allocations.
//
// Why not uthash (which it replaces): an add and a delete cost ~80 instructions a pair on the
// mixed workload (its handle's list links, bucket chains, expansion checks), and the handle
// made every block 56 bytes longer; here an add, a find or a remove is a mix and a probe or two.
#ifndef CCI_LIVE_MAP_H
#define CCI_LIVE_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "block.h"

typedef struct cci_live_map {
    cci_block **slot;  // NULL: empty (a probe stops there)
    size_t cap;        // a power of two, 0 before the first add
    size_t count;      // blocks in the map: at most half of cap
} cci_live_map;

// The first slot an address probes in a table of `cap` slots.
static inline size_t cci_live_home(uintptr_t addr, size_t cap) { return (size_t)(cci_addr_mix(addr) >> 32) & (cap - 1); }

/// The block at `addr`, or NULL.
static inline cci_block *cci_live_find(const cci_live_map *m, uintptr_t addr)
{
    if (!m->cap)
        return NULL;
    for (size_t i = cci_live_home(addr, m->cap);; i = (i + 1) & (m->cap - 1)) {
        cci_block *b = m->slot[i];
        if (!b || b->addr == addr)
            return b;
    }
}

/// Takes out b: 1, or 0 when b is not in the map.
static inline int cci_live_remove(cci_live_map *m, const cci_block *b)
{
    if (!m->cap)
        return 0;
    size_t mask = m->cap - 1, i = cci_live_home(b->addr, m->cap);
    while (m->slot[i] != b) {
        if (!m->slot[i])
            return 0;
        i = (i + 1) & mask;
    }
    // Every entry after the hole, up to the next empty slot, whose probe starts at or before the
    // hole (cyclically) would no longer be found past it: it moves into the hole, which moves on.
    for (size_t j = (i + 1) & mask; m->slot[j]; j = (j + 1) & mask) {
        size_t home = cci_live_home(m->slot[j]->addr, m->cap);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->slot[i] = m->slot[j];
            i = j;
        }
    }
    m->slot[i] = NULL;
    m->count--;
    return 1;
}

/// Makes the table four times as large as its blocks (at least 64 slots). 0, or -1 with the
/// table unchanged when the host is out of memory.
int cci__live_grow(cci_live_map *m);

/// Adds b, whose address no block of the map has. 0, or -1 (not added) when the host is out of
/// memory.
static inline int cci_live_add(cci_live_map *m, cci_block *b)
{
    if ((m->count + 1) * 2 > m->cap && cci__live_grow(m) != 0)
        return -1;
    size_t i = cci_live_home(b->addr, m->cap);
    while (m->slot[i])
        i = (i + 1) & (m->cap - 1);
    m->slot[i] = b;
    m->count++;
    return 0;
}

/// Forgets every block and frees the table.
void cci_live_clear(cci_live_map *m);

#endif
