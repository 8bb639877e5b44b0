// SPDX-License-Identifier: MIT
// What expandable.c and compact.c share: the statistics helpers, the counted VMM calls, and each
// file's entry points for the other. compact.c holds compact mode's page pool, churn rule,
// retirements and reclaim; expandable.c the segments, their block lists and the unmapping that
// both modes' flushes and compact mode's reclaim go through.
//
// The counted calls are `static inline` here so that each file calls the backend directly, as it
// did when both were one file: every call on the VMM group still goes through them, so the counts
// are complete by construction.
#ifndef CCI_EXPANDABLE_IMPL_H
#define CCI_EXPANDABLE_IMPL_H

#include "expandable.h"
#include "log.h"
#include "tcache.h"

static inline size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

// ---- counted VMM calls -----------------------------------------------------------------------

static inline int dev_create(cci_allocator *a, size_t size, uint64_t *h)
{
    a->exp->n.page_creates++;
    return a->be.ops->vmm->page_create(a->be.ctx, a->device, size, h);
}

static inline void dev_release(cci_allocator *a, uint64_t h)
{
    a->exp->n.page_releases++;
    if (a->be.ops->vmm->page_release(a->be.ctx, a->device, h) != CCI_OK)
        cci_log(CCI_LOG_WARNING, "device %d: releasing a physical page failed; forgetting it", a->device);
}

static inline int dev_map(cci_allocator *a, uintptr_t va, size_t size, uint64_t h)
{
    a->exp->n.maps++;
    return a->be.ops->vmm->map(a->be.ctx, a->device, va, size, h);
}

static inline int dev_unmap(cci_allocator *a, uintptr_t va, size_t size, size_t page)
{
    a->exp->n.unmaps++;
    a->exp->n.unmapped_pages += size / page;
    return a->be.ops->vmm->unmap(a->be.ctx, a->device, va, size);
}

static inline int dev_set_access(cci_allocator *a, uintptr_t va, size_t size)
{
    a->exp->n.set_access++;
    return a->be.ops->vmm->set_access(a->be.ctx, a->device, va, size);
}

// Waits until no queued work can touch a page about to be unmapped. Lock held; dropped around
// the wait. 1 when the device is known to have caught up.
static inline int dev_sync(cci_allocator *a)
{
    a->exp->n.syncs++;
    if (!a->be.ops->synchronize)
        return 1;  // nothing runs asynchronously (the simulated device)
    cci__unlock(a);
    int ok = a->be.ops->synchronize(a->be.ctx, a->device) == CCI_OK;
    cci__lock(a);
    return ok;
}

// ---- expandable.c, for compact mode ---------------------------------------------------------

// Marks b UNMAPPED and merges it with UNMAPPED neighbours (address space has no statistics).
void cci__exp_insert_unmapped(cci_allocator *a, cci_block *b);
// Hands the pages [first, first+n) of a segment, just unmapped, to the pool (`keep`) or back to
// the device, and forgets them; `tag`: what the pages still wait for.
void cci__exp_give_pages_tagged(cci_allocator *a, cci_vmm_seg *vs, size_t first, size_t n, int keep, cci_exp_page tag);
// The whole pages inside a free block: [*lo, *hi), empty when lo >= hi.
void cci__exp_inner_pages(const cci_block *b, uintptr_t *lo, uintptr_t *hi);
// Splits a RECLAIMING block around its whole pages [lo, hi); NULL on host out of memory.
cci_block *cci__exp_split_pages(cci_allocator *a, cci_block *b, uintptr_t lo, uintptr_t hi, cci_block **front,
                                cci_block **back);
// The pages [lo, hi) of segment s no longer count as reserved.
void cci__exp_pages_leave_reserved(cci_allocator *a, cci_segment *s, uintptr_t lo, uintptr_t hi);
void cci__exp_insert_free_pieces(cci_allocator *a, cci_block *front, cci_block *back);
// Unmaps the pages [lo, hi) of a RECLAIMING block; the pages to the pool when `keep`.
void cci__exp_unmap_block(cci_allocator *a, cci_block *b, uintptr_t lo, uintptr_t hi, int keep);
// Puts a RECLAIMING block back as it was.
void cci__exp_unreclaim(cci_allocator *a, cci_block *b);
// Takes a free block out of the free set for unmapping.
void cci__exp_start_reclaiming(cci_allocator *a, cci_block *b);

// ---- compact.c --------------------------------------------------------------------------------

// The page pool: keeps a page to map again or releases it; takes one a growth of `stream` may
// map (1 and *out, or 0); releases what is beyond the bound; releases (or forgets) everything.
void cci__exp_pool_put(cci_allocator *a, cci_exp_page p, size_t page);
int cci__exp_pool_take(cci_allocator *a, size_t page, uint64_t stream, cci_exp_page *out);
void cci__exp_pool_trim(cci_allocator *a);
void cci__exp_pool_drain(cci_allocator *a, int release);
// Bytes a growth into the row that starts at `room` must map.
size_t cci__exp_row_map_bytes(const cci_block *room, size_t rounded, size_t page);
// How many free mapped bytes to unmap before a growth that maps `grow_by` bytes (0: none,
// SIZE_MAX: all), and the reclaim that gives them back, outside [keep_lo, keep_hi).
size_t cci__exp_reclaim_target(cci_allocator *a, size_t grow_by);
void cci__exp_reclaim(cci_allocator *a, size_t target, uintptr_t keep_lo, uintptr_t keep_hi, uint64_t stream);
// Retirements: polled without blocking; ended up to a number after a sync; one ended; the oldest
// unlinked.
void cci__exp_retire_poll(cci_allocator *a);
void cci__exp_retire_finish_upto(cci_allocator *a, uint64_t upto);
void cci__exp_retire_finish(cci_allocator *a, cci_exp_retire *r, int release);
cci_exp_retire *cci__exp_retire_pop(cci_exp *e);

#endif
