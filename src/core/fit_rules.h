// SPDX-License-Identifier: MIT
// The fence-aware fit rules of a locked allocation while fenced frees wait (fit_rules.c): when the
// free set's best block is a poor fit, and what is asked of the pending ones before the pool
// grows. The constants say why each rule is what it is; the tests that check against immediate
// reuse are in tests/core/test_fenced.c.
//
// The tests that malloc_locked makes on every allocation (poor_fit_while_fenced, and the backend
// questions it asks) are `static inline` here, so that they stay inlined in allocator.c as they
// were when all of this was one file (the library is built without link-time optimisation).
#ifndef CCI_FIT_RULES_H
#define CCI_FIT_RULES_H

#include "allocator_impl.h"

// A free block at least FENCED_FIT_NUM / FENCED_FIT_DEN times the request is a poor fit while
// fenced frees wait: the pending blocks are looked at first (cci__better_fit_after_fences).
// 3/2 since commit 2a38569 (2 before): on the H100 resnet's peak over three processes went from
// 3622-3796 MiB to 3696 in every one (immediate reuse: 3626), the host waits and their blocking
// unchanged; in replay with 32 idle streams resnet 3566-3606 MiB at lags 4-64 against 3666-3788,
// the encoder and seedfrag within their run-to-run spread (docs/reuse-modes.md).
#ifndef FENCED_FIT_NUM  // build-time overrides, for policy experiments
#define FENCED_FIT_NUM 3
#endif
#ifndef FENCED_FIT_DEN
#define FENCED_FIT_DEN 2
#endif
// ... and where a fence is dear and every side stream idle (the backend's `busy` is 0: a pending
// block is then had by an order, or by a wait behind the device's ordered work only), any fit above
// FENCED_NEAR_FIT_NUM / FENCED_NEAR_FIT_DEN times the request is a poor one: immediate reuse would
// have taken the exact block just freed, and near fits let the layout drift. On the H100 (resnet
// with PyTorch's 32 idle pool streams; commits bfb8deb, 2821463) 39 processes of 39 then peaked at
// immediate reuse's 3622 MiB, against 15 of 24 with 3/2 alone (the others 3696-3794 MiB), at the
// same wall time within the host's noise. Elsewhere (DDP: NCCL's streams busy) 3/2 holds.
#ifndef FENCED_NEAR_FIT_NUM
#define FENCED_NEAR_FIT_NUM 101
#endif
#ifndef FENCED_NEAR_FIT_DEN
#define FENCED_NEAR_FIT_DEN 100
#endif
// ... and of the pending blocks, those of the newest batches (recorded within the last
// FENCED_FIT_SPARE * FENCE_TICK allocations) are not waited for on a poor fit: the device has
// likely not reached them, and stalling the host behind another stream's work (NCCL's, under DDP)
// costs wall time. Except where a fence is dear and every side stream idle (the backend's `busy`
// is 0): then the host stalls only behind the device's ordered work (fit_rules.c).
#ifndef FENCED_FIT_SPARE
#define FENCED_FIT_SPARE 2
#endif
// On a poor fit, the open batch is put behind its fence too (not only the closed batches polled)
// when a fence is this cheap: at most this many stream events (the backend's `width`). Measured on
// the H100 (docs/reuse-modes.md): the encoder (2 events a fence) then peaks within 1.3 % of
// immediate reuse instead of 3.7 %; DDP on two H200s (133 events a fence) lost 13 % of wall time
// to it, so there the closed batches are only polled, as before. 0 turns it off.
#ifndef FENCED_FIT_HARVEST_MAX_WIDTH
#define FENCED_FIT_HARVEST_MAX_WIDTH 8
#endif
// ... and at most once every this many allocations: a loop that frees and allocates one size
// meets a poor fit on every allocation, and a fence each time would cost more than it saves.
#ifndef FENCED_FIT_HARVEST_EVERY
#define FENCED_FIT_HARVEST_EVERY 2
#endif
// A miss (no free block fits) waits for the oldest batch that frees enough, except the
// FENCED_MISS_SPARE newest: a build-time override for policy experiments (0: any batch).
#ifndef FENCED_MISS_SPARE
#define FENCED_MISS_SPARE 0
#endif

// The stream events one fence costs now (fence_ops.width; 1 when the backend does not say).
static inline unsigned fence_width(cci_allocator *a)
{
    return a->fences->width ? a->fences->width(a->be.ctx, a->device) : 1;
}

// Whether every side stream a fence covers was idle when the backend last looked (fence_ops.busy
// says 0; unknown counts as busy).
static inline int side_streams_idle(cci_allocator *a)
{
    return a->fences->busy && a->fences->busy(a->be.ctx, a->device) == 0;
}

// Whether the best free block (fit bytes) is a poor fit for the request while fenced frees wait
// (above: FENCED_FIT_NUM, FENCED_NEAR_FIT_NUM say when, and why).
static inline int poor_fit_while_fenced(cci_allocator *a, size_t fit, size_t rounded)
{
    if (fit * FENCED_FIT_DEN >= FENCED_FIT_NUM * rounded)
        return 1;
    if (fit * FENCED_NEAR_FIT_DEN < FENCED_NEAR_FIT_NUM * rounded)
        return 0;  // as good as exact
    return fence_width(a) > FENCED_FIT_HARVEST_MAX_WIDTH && side_streams_idle(a);
}

// Lock held. A better block than `b` (taken out of the free set; put back here) from the fenced
// frees, or `b` itself again: called when poor_fit_while_fenced says so.
cci_block *cci__better_fit_after_fences(cci_allocator *a, cci_block *b, size_t rounded, int small, uint64_t stream);
// Lock held. A free block after the fenced frees had their chance, before the pool grows; NULL
// when none could serve.
cci_block *cci__take_after_fences(cci_allocator *a, size_t rounded, int small, uint64_t stream);

#endif
