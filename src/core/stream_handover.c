// SPDX-License-Identifier: MIT
// Stream handover: a whole free segment of one stream given to another stream's allocation
// instead of reserving a new segment.
//
// Segments belong to a stream (the free set is keyed by stream first): a block freed with
// cudaFreeAsync(p, s1) is reusable at once by s1, whose own order covers the work queued before
// the free, and by nobody else. Left there forever, a program that frees on one stream and
// allocates on another grows the pool without end. Another stream s2 may take the memory once
// every piece of work queued on s1 before the free has finished: a fence recorded on s1 now
// (after the segment's last free) that has passed says so.
//
// Granularity is the whole segment, ordinary segments only: a segment whose blocks all went back
// can change owner with two fields (its own stream and its one block's), whereas a part of a
// segment would need blocks of two streams side by side, which free_block could then merge into
// one. Expandable segments are one per (stream, pool) by design and never move.
//
// Cost: nothing on the fast path. Only where a new segment would be reserved otherwise (the miss
// path), the best-fitting candidate's stream gets one fence; it is queried without blocking, and
// the host waits for it only if it has not passed yet, the same trade as fenced.c makes before the
// pool grows. The wait keeps the lock: the block is out of the free set meanwhile, but dropping
// the lock would let an in-place reset from another thread free the segment under us. The wait
// is for one stream's work up to now, and only when the alternative is growing the pool.
//
// The decision depends only on the layout (is there a whole free segment of another stream that
// fits?), never on how far the device has got: a replay of the trace on the simulated device hands
// over the same segments as the recorded run did, without a trace event of its own.
#include "allocator_impl.h"

// The smallest whole free ordinary segment of another stream that take_free_block's size rules
// would let serve this request. NULL when none.
static cci_block *best_whole_segment(cci_allocator *a, size_t rounded, int small, uint64_t stream)
{
    size_t limit = a->cfg.max_split_size;
    cci_block *best = NULL;
    for (size_t i = 0; i < a->nsegs; i++) {
        cci_segment *s = a->segs[i];
        cci_block *b = s->first;
        if (s->vmm || s->small != small || s->stream == stream || !b || b->next || b->state != BLOCK_FREE ||
            b->size < rounded)
            continue;
        if (rounded < limit && b->size >= limit)
            continue;  // a small request never takes an oversize block
        if (rounded >= limit && b->size - rounded >= a->cfg.max_non_split_rounding)
            continue;  // nor a large one a block much larger than it
        if (!best || b->size < best->size)
            best = b;
    }
    return best;
}

cci_block *cci__stream_handover(cci_allocator *a, size_t rounded, int small, uint64_t stream)
{
    if (!a->fences || a->nsegs == 0)
        return NULL;
    cci_block *b = best_whole_segment(a, rounded, small, stream);
    if (!b)
        return NULL;
    cci_segment *s = b->seg;
    cci_fence f;
    if (a->fences->record(a->be.ctx, a->device, s->stream, &f) != CCI_OK)
        return NULL;  // e.g. during a capture: the pool grows instead
    a->st.num_fence_records++;
    int passed = a->fences->query(a->be.ctx, a->device, f);
    if (passed == 0 && cci__fence_slack_left(a, rounded)) {
        a->slack_grow = 1;  // the pool grows on the fence budget instead (fenced.c)
        passed = -1;
    }
    if (passed == 0) {
        a->st.num_fence_waits++;
        passed = a->fences->wait(a->be.ctx, a->device, f) == CCI_OK;
    }
    a->fences->release(a->be.ctx, a->device, f);
    if (passed != 1)
        return NULL;
    // Out of the free set under the old key, in under none: the caller hands it out, as
    // take_free_block's result. Its free neighbours are none (it spans the segment).
    cci_free_set_remove(&a->free_set[small], b);
    s->stream = stream;
    b->stream = stream;
    a->stream_handovers++;
    return b;
}
