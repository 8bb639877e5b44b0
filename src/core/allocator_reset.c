// SPDX-License-Identifier: MIT
// In-place reset (allocator_reset.h). Lives beside allocator.c rather than in it: it touches every
// structure once, at a rare moment, and shares none of the hot path's helpers.
#include "allocator_reset.h"

#include <stdlib.h>
#include <string.h>

#include "allocator_impl.h"
#include "tcache.h"
#include "expandable.h"
#include "log.h"

// Through the queue of the locked section (tcache.h): after the thread caches' older events.
static void tell(cci_allocator *a, cci_event_kind kind, uint64_t stream, uintptr_t addr, size_t size)
{
    cci__notify_full(a, kind, stream, addr, size, 0);
}

// The statistics of a fresh allocator: everything zero but what describes the device and the
// configuration (cci_allocator_create sets the same fields).
static void reset_stats(cci_allocator *a)
{
    cci_stats keep = a->st;
    memset(&a->st, 0, sizeof a->st);
    a->st.size = keep.size;
    a->st.version = keep.version;
    a->st.max_split_size = keep.max_split_size;
    a->st.device_capacity = keep.device_capacity;
}

void cci_allocator_reset(cci_allocator *a, int release_segments)
{
    if (!a)
        return;
    cci__lock(a);
    cci__tc_drain_all(a);  // cached blocks were freed: the events below must not free them again
    // Observers first, while every record still exists: each live block is freed, each segment
    // given back, as a trace or timeline of the program would have shown it.
    for (size_t i = 0; i < a->nsegs; i++) {
        cci_segment *s = a->segs[i];
        for (cci_block *b = s->first; b; b = b->next) {
            if (b->state == BLOCK_ALLOCATED)
                tell(a, CCI_EV_FREE_REQUESTED, b->stream, b->addr, b->size);
            if (b->state != BLOCK_FREE && b->state != BLOCK_UNMAPPED && b->state != BLOCK_RETIRING)
                tell(a, CCI_EV_FREE_COMPLETED, b->stream, b->addr, b->size);
        }
        tell(a, CCI_EV_SEGMENT_FREE, s->stream, s->addr, s->size);
    }
    cci__allocator_clear(a, release_segments);
    a->free_searches[0] = a->free_searches[1] = 0;
    a->pend_head = a->pend_tail = NULL;
    a->pend_count = a->pend_bytes = 0;
    a->pend_seq = 0;
    // The budgets spent growing instead of waiting: nothing is reserved any more.
    a->slack_used = a->held_grown = 0;
    a->slack_grow = 0;
    a->ordered_frees = a->unordered_frees;  // the blocks went with the segments
    reset_stats(a);
    if (cci__exp_init(a) != 0)  // host out of memory: ordinary segments from now on
        cci_log(CCI_LOG_WARNING, "device %d: expandable segments off after the reset (host out of memory)",
                a->device);
    cci__unlock(a);
}
