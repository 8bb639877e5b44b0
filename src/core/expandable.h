// SPDX-License-Identifier: MIT
// Expandable segments on the backend's virtual-memory group (expandable.c): the hooks that
// allocator.c calls at its segment reserve, release and split points.
#ifndef CCI_EXPANDABLE_H
#define CCI_EXPANDABLE_H

#include "allocator_impl.h"
#include "vmm_counts.h"

typedef enum cci_exp_mode {
    CCI_EXP_PYTORCH = 1,  ///< expandable_segments:True, PyTorch's semantics
    CCI_EXP_COMPACT = 2,  ///< compact_segments (the default with VMM), ours: free pages given back
} cci_exp_mode;

/// A page of compact mode's pool. A page a reclaim moved on its own stream may still be mapped at
/// its old address, where work queued before the reclaim may still run: until that retirement's
/// fence has passed (`retire` != 0) only a growth of the same `stream` may map it again (stream
/// order puts the new owner's work after the old), and it is never released.
typedef struct cci_exp_page {
    uint64_t handle;
    uint64_t stream;
    uint64_t retire;  ///< the retirement it waits for, 0 when its old mapping is gone
} cci_exp_page;

/// Old mappings of pages a reclaim moved on the requesting stream (compact mode): the RETIRING
/// blocks, chained by pend_next, are unmapped once `fence` (recorded on `stream` at the reclaim)
/// has passed. Oldest first.
typedef struct cci_exp_retire {
    struct cci_exp_retire *next;
    cci_fence fence;
    uint64_t seq;
    uint64_t stream;
    cci_block *blocks;
    size_t bytes;
} cci_exp_retire;

typedef struct cci_exp {
    cci_exp_mode mode;
    size_t granularity;   ///< the backend's, queried once
    size_t page[2];       ///< page size per pool: [0] large, [1] small
    size_t va_size;       ///< address space reserved per segment
    cci_vmm_counts n;     ///< every VMM call made so far (cci_alloc_vmm_counts)
    // Compact mode's page pool: pages unmapped by a growth's reclaim, kept (not released) so that
    // the growth, and later ones, map them again instead of creating new ones. Bounded by
    // compact_pool_limit(); everything beyond is released at once.
    cci_exp_page *pool;
    size_t pool_n, pool_cap;
    size_t pool_waiting;  ///< pooled pages whose old mapping still waits for its fence
    size_t pool_hold;     ///< bytes the growth under way will map: the pool may hold that much
                          ///< for it, beyond its bound, so that no page is released and created again
    cci_exp_retire *retire_head, *retire_tail;
    uint64_t retire_seq;  ///< the last retirement's number
    size_t retiring_bytes;  ///< bytes of old mappings waiting for their fence (not reserved)
    // Compact mode's churn (expandable.c, CHURN_MOVED_FACTOR): counted, never timed, so that
    // replay predicts it.
    uint64_t churn_peak;    ///< the allocated peak churn_moved counts since
    uint64_t churn_moved;   ///< bytes reclaims moved since the allocated peak last rose
    size_t churn_slack;     ///< reserved may reach allocated peak + slack + this without a reclaim,
                            ///< raised (bounded) because moving pages circulated
} cci_exp;

/// Sets a->exp from the configuration and the backend, first settling an unset compact_segments
/// in a->cfg (cci_config_resolve): NULL when the configuration asks for ordinary segments, or when
/// the backend has no VMM group (a warning says so if a mode was asked for by name; the default
/// falls back silently). -1 on host OOM.
int cci__exp_init(cci_allocator *a);
void cci__exp_fini(cci_allocator *a);

/// The block to hand out when the free set's best fit `b` lies in an expandable segment: among
/// free blocks of the same stream, prefer one that cannot grow into unmapped space, as PyTorch
/// does, so that the growing end of a segment is kept for requests nothing else can serve.
cci_block *cci__exp_best_fit(cci_allocator *a, cci_block *b, int small, uint64_t stream);

/// Grows (or creates) the expandable segment of (stream, pool) until a free block of at least
/// `rounded` bytes exists; returns it out of the free set, ready for hand_out. NULL with *rc set
/// (CCI_EOOM when the device or the cap says no).
cci_block *cci__exp_grow(cci_allocator *a, size_t rounded, int small, uint64_t stream, int *rc);

/// Unmaps and releases every page of an expandable segment that holds only free bytes, after the
/// device has passed all work queued so far, and gives back segments left with nothing mapped.
/// Called by empty_cache and the last retry before an out-of-memory (and, in compact mode, when
/// the pool grows while too much of it is free). Lock held; it is dropped around the sync.
void cci__exp_release_free(cci_allocator *a);

/// Compact mode's slack: the free mapped bytes a growth past the peak leaves mapped (and the
/// bound of its page pool), from the allocated peak.
size_t cci__exp_compact_slack(const cci_allocator *a);

/// Allocator teardown: unmaps and releases the segment's pages and its range when `release`,
/// then frees its page table (the caller frees the blocks and the segment). The first call also
/// releases (or, without `release`, forgets) the pages of compact mode's pool: the pool holds
/// pages only while some segment exists, so teardown always passes here.
void cci__exp_segment_destroy(cci_allocator *a, cci_segment *s, int release);

#endif
