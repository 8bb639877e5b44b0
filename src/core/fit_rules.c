// SPDX-License-Identifier: MIT
// The fence-aware fit rules' slow halves (fit_rules.h holds the rules and the inline tests): what
// a locked allocation asks of the fenced frees when its best fit is poor, or when nothing fits,
// before the pool grows. Apart from allocator.c because they run only while fenced frees wait,
// and out of line there anyway, so that malloc_locked's own path saves none of their registers.
#include "fit_rules.h"
#include "expandable.h"

// Before the pool grows: fenced frees whose fence has passed, then, if the ones still pending
// would be enough, a wait for the oldest fence that frees enough. Out of line (its own file) so
// that the cached fast path of cci_malloc stays as compact as it was.
cci_block *cci__take_after_fences(cci_allocator *a, size_t rounded, int small, uint64_t stream)
{
    cci_block *b = NULL;
    if (cci__fenced_harvest(a, CCI_ASK_IN_FULL))
        b = cci__take_free_block(a, rounded, small, stream);
    while (!b && cci__fenced_wait_for(a, rounded, small, stream, FENCED_MISS_SPARE, CCI_SLACK_GROW))
        b = cci__take_free_block(a, rounded, small, stream);
    if (a->slack_grow)
        return NULL;  // the pool grows on the fence budget (fenced.c)
    // [compact] Pages of free blocks anywhere are unmapped and mapped again where the growth
    // needs them (expandable.c), so pending frees of any shape and stream spare a growth: wait for
    // the oldest batches while what they hold could cover the request, rather than map new pages
    // beside memory that is only waiting for its fence.
    if (!b && a->exp && a->exp->mode == CCI_EXP_COMPACT && a->fb_head && cci__fenced_pending_bytes(a) >= rounded) {
        if (cci__fence_slack_left(a, rounded)) {
            a->slack_grow = 1;  // as above: the pages are mapped on the fence budget
            return NULL;
        }
        while (!b && a->fb_head && cci__fenced_pending_bytes(a) >= rounded && cci__fenced_wait_oldest(a))
            b = cci__take_free_block(a, rounded, small, stream);
    }
    return b;
}

// The best free block is well larger than the request (FENCED_FIT_NUM / FENCED_FIT_DEN times or
// more) while fenced frees wait: immediate reuse would have handed out one of those (the
// program's pattern is "free a tensor, allocate its like"), and splitting a large block instead
// scatters holes that later force the pool to grow. So the pending ones are asked first: the
// closed batches whose fence has passed are harvested, and if a pending block of an older batch
// (not among the FENCED_FIT_SPARE newest, unless the fence is dear and every side stream idle)
// can hold the request, that batch is waited for. Measured on DDP (two H200s): waiting for any
// batch kept the peak within 7 % of native but cost 11 % of wall time; never waiting cost 30 % of
// memory. An old batch's fence has usually passed or is about to, so the wait is short.
cci_block *cci__better_fit_after_fences(cci_allocator *a, cci_block *b, size_t rounded, int small, uint64_t stream)
{
    cci_block *c = NULL;
    int cheap = fence_width(a) <= FENCED_FIT_HARVEST_MAX_WIDTH;
    // Where a question is dear (many streams to look at) and no pending block could make a closer
    // fit, the answer cannot help this request, only later ones (every passed batch reusable at
    // once): it is asked in passing, which the backend may put off, and nothing is waited for.
    // Otherwise it is asked in full, since a pending answer leads to a wait or a worse fit:
    // measured on the H100 (resnet, ~25 streams), letting every poor-fit question be put off and
    // keeping the poor fit raised the peak from 1.02x to 1.18x immediate reuse.
    int ask = cheap || cci__fenced_could_fit(a, rounded, small, stream, b->size) ? CCI_ASK_IN_FULL
                                                                                 : CCI_ASK_IN_PASSING;
    cci_free_set_insert(&a->free_set[small], b);
    // The open batch too where a fence is cheap (FENCED_FIT_HARVEST_MAX_WIDTH): its blocks are the
    // program's latest frees, the likeliest fits, and a fence recorded now passes soonest.
    // On the fence budget a fence is not recorded for a better fit: the record and its question
    // cost more than the pair they would save (a thread's malloc+free loop on its own stream).
    // Nor for a small request: its poor fit is the rest of a 2 MiB segment at most, and a fence
    // every other pair made most of such a loop's cost on the GPU (the tick still closes the
    // batch every FENCE_TICK allocations). The shared traces' replayed peaks did not change.
    int on_budget = cci__fence_slack_left(a, rounded);
    int harvest = cheap && !on_budget && !small && a->fence_tick >= FENCED_FIT_HARVEST_EVERY;
    if (harvest)
        a->fence_tick = 0;  // this harvest does the tick's work: the next tick counts from here
    if (harvest ? cci__fenced_harvest(a, ask) : cci__fenced_poll(a, ask))
        c = cci__take_free_block(a, rounded, small, stream);
    // Where a fence is dear (not harvested above), the newest frees are reached only by waiting for
    // them. The newest batches are then spared only where another stream's work may hold their
    // fences back: with every side stream idle (resnet under PyTorch: ~30 idle pool streams), a
    // fence waits only for the device's ordered work, which is running. Measured on the H100
    // (resnet, 3 runs each; commit 69fb3f0): sparing them let the peak wander (3622-3818 MiB
    // against 3626 for immediate reuse); waiting for them held it at 3720, for 48 ms more of
    // blocking a process. Where a fence is cheap the harvest already reaches the newest frees.
    unsigned spare = FENCED_FIT_SPARE;
    if (!cheap && side_streams_idle(a))
        spare = 0;
    while (!c && ask == CCI_ASK_IN_FULL && cci__fenced_wait_for(a, rounded, small, stream, spare, CCI_SLACK_NO_WAIT))
        c = cci__take_free_block(a, rounded, small, stream);
    a->slack_grow = 0;  // (not set by a poor fit's search; nothing grows here)
    return c ? c : cci__take_free_block(a, rounded, small, stream);
}
