// SPDX-License-Identifier: MIT
// Internal shapes of the core: blocks, segments, and the ordered set of free blocks.
#ifndef CCI_BLOCK_H
#define CCI_BLOCK_H

#include <stddef.h>
#include <stdint.h>

// Device addresses (512-aligned) spread by a multiply-shift mix for the address tables (the live
// map, the thread caches'): as well as a byte-wise hash, at a fraction of the cost on the
// allocation fast path. The high bits are the well-mixed ones: take a table index from the top.
static inline uint64_t cci_addr_mix(uint64_t addr) { return (addr >> 9) * 0x9E3779B97F4A7C15ull; }

enum {
    BLOCK_FREE = 0,
    BLOCK_ALLOCATED = 1,
    BLOCK_PENDING = 2,
    BLOCK_UNMAPPED = 3,    // address space of an expandable segment with no memory behind it
    BLOCK_RECLAIMING = 4,  // free pages being unmapped: out of the free set while the device syncs
    BLOCK_CACHED = 5,      // freed into a thread's magazine (tcache.c); never seen under the lock
    BLOCK_RETIRING = 6,    // compact mode: pages moved elsewhere whose old mapping waits for a
                           // fence before its unmap (expandable.c); address space, not reserved
};

typedef struct cci_segment cci_segment;

typedef struct cci_block {
    // The first 64 bytes hold what a descent of the free set reads at each node (key, links,
    // priority), so that a level costs one cache line, not two (session 7: the free set's
    // descents are a third of the mixed workload's instructions, each level a dependent load).
    uintptr_t addr;
    size_t size;
    uint64_t stream;
    // Free-set links (treap), valid while state == BLOCK_FREE. The children are an array so that
    // a descent picks its side by index (child[key > node]) instead of by a branch: the side is a
    // coin toss the branch predictor loses half the time, and a lost guess costs more than a level.
    // The parent link lets a removal find the block's place without a descent from the root.
    struct cci_block *child[2];
    struct cci_block *parent;
    uint32_t prio;
    uint8_t state;
    uint8_t small;
    uint16_t wave;            // fenced.c's scratch: which closed batch a pending block is in
    size_t requested;         // what the program asked for; 0 while free
    struct cci_block *prev;   // address-order neighbours inside the segment
    struct cci_block *next;
    cci_segment *seg;
    uint64_t gc_base;         // pool's free-search count when the block entered the free set
    uint64_t pending_seq;     // deferred-free ticket
    struct cci_block *pend_next;
    struct cci_tc *owner;     // the thread cache that may free it without the lock (tcache.c)
} cci_block;

// An expandable segment (expandable.c): one address range, mapped page by page as it grows.
typedef struct cci_vmm_seg {
    size_t page;         // bytes per page: the unit of mapping and unmapping in this segment
    size_t npages;       // pages the range holds
    uint64_t *handles;   // the backend's page mapped at each page index, 0 where unmapped
    size_t mapped;       // bytes mapped: what this segment counts as reserved
} cci_vmm_seg;

struct cci_segment {
    uintptr_t addr;
    size_t size;         // bytes of address space (an expandable segment maps only part of it)
    uint64_t stream;
    uint8_t small;
    cci_block *first;
    cci_vmm_seg *vmm;    // NULL for an ordinary segment (one reserve call, all of it memory)
};

// The free set: blocks ordered by (stream, size, addr). A treap with address-derived priorities
// keeps it deterministic, so replays give the same answer on every run.
void cci_tree_insert(cci_block **root, cci_block *b);
void cci_tree_remove(cci_block **root, cci_block *b);
/// First block with key >= (stream, size, addr), or NULL.
cci_block *cci_tree_lower_bound(cci_block *root, uint64_t stream, size_t size, uintptr_t addr);
/// Last block with key < (stream, size, addr), or NULL.
cci_block *cci_tree_before(cci_block *root, uint64_t stream, size_t size, uintptr_t addr);
/// In-order walk; stops early when fn returns non-zero.
int cci_tree_walk(cci_block *root, int (*fn)(cci_block *b, void *ud), void *ud);

#endif
