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
    BLOCK_KEPT = 7,        // freed into a thread's own fenced batches (tcache_fenced.c): not free
                           // for the program's figures until it goes back to the allocator
};

typedef struct cci_segment cci_segment;

typedef struct cci_block {
    // The first 64 bytes hold what a descent of the free set reads at each node (key, links,
    // priority), so that a level costs one cache line, not two (the free set's descents are a third
    // of the mixed workload's instructions, each level a dependent load; commit 2ae5df7).
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

// The free set of one pool (blocktree.c): blocks ordered by (stream, size, addr), exactly (a
// search answers the smallest block of the stream that holds the size, the lowest address among
// equals: PyTorch's best fit). Each stream's blocks are binned by size, eight bins an octave, and
// each bin is a treap ordered by (size, addr) with address-derived priorities, so the same
// operations build the same set on every run. Why bins: a search of one treap over the whole pool
// was a descent of 6-8 dependent loads on the mixed workload; a bin holds a block or two, and
// the first bin with anything above the request is found in a bitmap (callgrind, commit 4991773).
#define CCI_FREE_BIN_BITS 3  // log2 of the bins an octave of sizes
#define CCI_FREE_BINS 256    // the last holds every block of 7.5 TiB and more
#define CCI_FREE_BIN_WORDS (CCI_FREE_BINS / 64)

// The bin of a block size: monotone in the size, so every block of a lower bin is smaller than
// every block of a higher one. Sizes in units of 512 bytes (the allocator's granularity); units
// below 16 get a bin each, then each octave [2^m, 2^(m+1)) splits into 8 bins by the 3 bits
// after the leading one. Without branches: sizes are a coin toss here as in the treap.
static inline unsigned cci_free_bin_of(size_t size)
{
    uint64_t units = size >> 9;
    const uint64_t top = ((uint64_t)1 << 34) - 1;  // where the last bin begins, in units
    units = units < top ? units : top;
    unsigned m = 63u - (unsigned)__builtin_clzll(units | (1u << CCI_FREE_BIN_BITS));
    unsigned shift = m - CCI_FREE_BIN_BITS;
    return (shift << CCI_FREE_BIN_BITS) + (unsigned)(units >> shift);
}

// One stream's free blocks of a pool.
typedef struct cci_stream_bins {
    uint64_t stream;
    uint64_t used[CCI_FREE_BIN_WORDS];  // bit i: bin[i] holds a block
    cci_block *bin[CCI_FREE_BINS];      // treap roots
} cci_stream_bins;

typedef struct cci_free_set {
    cci_stream_bins **streams;  // sorted by stream; kept while the allocator lives
    size_t nstreams, cap;
    cci_stream_bins *last;      // the stream last looked up: most programs use one or a few
} cci_free_set;

/// Adds the bins of a stream the set has none of: 0, or -1 when the host is out of memory.
int cci__free_set_add_stream(cci_free_set *fs, uint64_t stream);
/// Makes room for blocks of `stream`, so that inserting one cannot fail: 0, or -1 when the host
/// is out of memory. Every stream a block of the set can have was first requested by an
/// allocation, which calls this before it searches (allocator.c). Inline: on every locked
/// allocation the stream is the one looked up last.
static inline int cci_free_set_reserve(cci_free_set *fs, uint64_t stream)
{
    return fs->last && fs->last->stream == stream ? 0 : cci__free_set_add_stream(fs, stream);
}
void cci_free_set_insert(cci_free_set *fs, cci_block *b);
/// Takes b out; nothing when b is not in the set (never inserted, or removed already).
void cci_free_set_remove(cci_free_set *fs, cci_block *b);
/// First block of `stream` with key >= (stream, size, addr), or NULL.
cci_block *cci_free_set_lower_bound(cci_free_set *fs, uint64_t stream, size_t size, uintptr_t addr);
/// Last block of `stream` with key < (stream, size, addr), or NULL.
cci_block *cci_free_set_before(cci_free_set *fs, uint64_t stream, size_t size, uintptr_t addr);
/// In-order walk ((stream, size, addr)); stops early when fn returns non-zero.
int cci_free_set_walk(const cci_free_set *fs, int (*fn)(cci_block *b, void *ud), void *ud);
/// Forgets every block; the streams' bins stay, so that a stream reserved before stays reserved
/// (an allocation that dropped the lock around a wait, across an in-place reset).
void cci_free_set_empty(cci_free_set *fs);
/// Frees the streams' bins.
void cci_free_set_destroy(cci_free_set *fs);

#endif
