// SPDX-License-Identifier: MIT
// Reclaim (reclaim.c): the deferred frees made reusable by a device synchronisation, and cached
// segments given back to the device (empty_cache, the last retry before an out-of-memory, the
// split limit, garbage collection). Lock held in all of them.
#ifndef CCI_RECLAIM_H
#define CCI_RECLAIM_H

#include "allocator_impl.h"

// Whether the deferred frees waiting now form a batch worth a device synchronisation before the
// pool grows. `static inline`: malloc_locked asks it on every miss, inlined as it was when this
// lived in allocator.c (no link-time optimisation).
static inline int pending_batch_full(const cci_allocator *a, size_t need)
{
    if (!a->pend_head)
        return 0;
    size_t reserved = (size_t)a->st.reserved_bytes[CCI_POOL_ALL].current;
    size_t limit = reserved / PENDING_RESERVED_DIVISOR;
    if (limit < PENDING_MIN_BYTES)
        limit = PENDING_MIN_BYTES;
    // A large request that the waiting frees could cover waits for them rather than growing the
    // pool: its segment would stay reserved long after the frees complete.
    return a->pend_count >= PENDING_BATCH || a->pend_bytes >= limit ||
           (!cci_is_small(need) && a->pend_bytes >= need);
}

/// Makes every free issued so far reusable. Drops the lock around the device synchronisation
/// (another thread may be waiting to free or allocate), so callers must search again afterwards.
/// Returns 0 when nothing was pending or the sync failed (e.g. during a graph capture).
int cci__sync_pending(cci_allocator *a);
/// Synchronises the device with the lock dropped around it, counted in num_sync_all_streams.
/// CCI_OK also where the backend has no synchronize (nothing runs asynchronously), else
/// CCI_EBACKEND (e.g. during a graph capture).
int cci__sync_device(cci_allocator *a);
/// Releases every whole free segment of both pools (and, for expandable segments, their free
/// pages).
void cci__release_cached_all(cci_allocator *a);
/// Frees cached oversize blocks that could serve this request (only with a split limit set).
int cci__release_available(cci_allocator *a, size_t rounded, int small, uint64_t stream);
/// garbage_collection_threshold: gives back the whole cached large segments that waited longest.
void cci__garbage_collect(cci_allocator *a);

#endif
