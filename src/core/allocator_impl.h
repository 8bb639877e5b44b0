// SPDX-License-Identifier: MIT
// The allocator's private state, shared by allocator.c (policy) and inspect.c (layout, checks).
#ifndef CCI_ALLOCATOR_IMPL_H
#define CCI_ALLOCATOR_IMPL_H

#include <pthread.h>

#include "allocator.h"
#include "block.h"

// Deferred frees are made reusable in batches: one device synchronisation per batch, not per
// call. A batch is closed when it holds this many blocks, or when its bytes reach
// max(reserved / PENDING_RESERVED_DIVISOR, PENDING_MIN_BYTES), or when memory runs out.
#define PENDING_BATCH 256
#define PENDING_RESERVED_DIVISOR 16
#define PENDING_MIN_BYTES ((size_t)64 << 20)

struct cci_allocator {
    pthread_mutex_t lock;
    int device;
    cci_config cfg;
    cci_backend be;
    size_t capacity;     // 0 = unknown
    size_t allowed_max;  // fraction cap (or capacity) that GC and the cap work against
    int capped;          // per_process_memory_fraction set: reservations past allowed_max fail

    cci_block *free_tree[2];     // [0] large pool, [1] small pool
    uint64_t free_searches[2];   // GC's clock: a block's age is counted in searches of its pool
    cci_block *live;             // uthash: allocated and pending blocks, by address
    cci_block live_anchor;       // a permanent entry at address 0: uthash frees its table when the
                                 // last entry leaves, and rebuilding it cost more than the rest of
                                 // an alloc+free pair

    cci_segment **segs;          // sorted by address, for interior-pointer and ownership lookups
    size_t nsegs, segcap;

    cci_block *pend_head, *pend_tail;
    size_t pend_count, pend_bytes;
    uint64_t pend_seq;

    cci_stats st;

    cci_block *spare;            // recycled block records: splitting must not cost a malloc
    size_t nspare;

    struct { cci_observer_fn fn; void *ud; } obs[CCI_MAX_OBSERVERS];
    int nobs;

    struct cci_exp *exp;         // expandable-segment mode (expandable.c); NULL = ordinary segments

    int track_peak;
    int have_peak;
    cci_layout peak;
};

static inline int pool_index(int small) { return small ? CCI_POOL_SMALL : CCI_POOL_LARGE; }

// Internal, lock held.
int cci__layout_fill(cci_allocator *a, cci_layout *out);
size_t cci__largest_free(cci_allocator *a);
cci_segment *cci__segment_of(cci_allocator *a, uintptr_t p);
// Segment bookkeeping and block records, shared with expandable.c.
int cci__seg_grow(cci_allocator *a);
void cci__seg_insert(cci_allocator *a, cci_segment *s);
void cci__seg_remove(cci_allocator *a, cci_segment *s);
cci_block *cci__block_new(cci_allocator *a);
void cci__block_drop(cci_allocator *a, cci_block *b);
void cci__notify(cci_allocator *a, cci_event_kind kind, uint64_t stream, uintptr_t addr, size_t size);

#endif
