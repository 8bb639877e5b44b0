// SPDX-License-Identifier: MIT
// The live map: the allocated and pending blocks of an allocator, by address, for a locked free's
// lookup. Open addressing with linear probing over a power-of-two table of block pointers, read
// and changed under the allocator lock only.
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
    cci_block **slot;  // NULL: empty (a probe stops); CCI_LIVE_GONE: removed (a probe goes on)
    size_t cap;        // a power of two, 0 before the first add
    size_t count;      // blocks in the map
    size_t used;       // slots not empty (blocks and removed entries): kept at most half of cap
} cci_live_map;

#define CCI_LIVE_GONE ((cci_block *)1)

// The first slot an address probes in a table of `cap` slots.
static inline size_t cci_live_home(uintptr_t addr, size_t cap) { return (size_t)(cci_addr_mix(addr) >> 32) & (cap - 1); }

/// The block at `addr`, or NULL.
static inline cci_block *cci_live_find(const cci_live_map *m, uintptr_t addr)
{
    if (!m->cap)
        return NULL;
    for (size_t i = cci_live_home(addr, m->cap);; i = (i + 1) & (m->cap - 1)) {
        cci_block *b = m->slot[i];
        if (!b)
            return NULL;
        if (b != CCI_LIVE_GONE && b->addr == addr)
            return b;
    }
}

/// Takes out b, which is in the map.
static inline void cci_live_remove(cci_live_map *m, const cci_block *b)
{
    size_t i = cci_live_home(b->addr, m->cap);
    while (m->slot[i] != b)
        i = (i + 1) & (m->cap - 1);
    m->slot[i] = CCI_LIVE_GONE;
    m->count--;
}

/// Makes the table twice as large as its blocks need (removed entries dropped). 0, or -1 with the
/// table unchanged when the host is out of memory.
int cci__live_rehash(cci_live_map *m);

/// Adds b, whose address no block of the map has. 0, or -1 (not added) when the host is out of
/// memory.
static inline int cci_live_add(cci_live_map *m, cci_block *b)
{
    if ((m->used + 1) * 2 > m->cap && cci__live_rehash(m) != 0)
        return -1;
    size_t i = cci_live_home(b->addr, m->cap);
    while (m->slot[i] && m->slot[i] != CCI_LIVE_GONE)
        i = (i + 1) & (m->cap - 1);
    m->used += !m->slot[i];
    m->slot[i] = b;
    m->count++;
    return 0;
}

/// Forgets every block and frees the table.
void cci_live_clear(cci_live_map *m);

#endif
