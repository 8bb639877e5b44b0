// SPDX-License-Identifier: MIT
// The caching policy: PyTorch's native allocator rules over a cci_backend.
//
// Block life: FREE (in its pool's free set) -> ALLOCATED (in the live map) -> either FREE again
// at once (freed on its own stream) or PENDING (waiting until the device has passed the free:
// a device synchronisation for deferred frees, a fence for fenced ones, fenced.c), then FREE.
// Neighbouring FREE blocks of one segment are always merged.
#include <stdlib.h>
#include <string.h>

#include "allocator_impl.h"
#include "fit_rules.h"
#include "reclaim.h"
#include "grow.h"
#include "tcache.h"
#include "expandable.h"
#include "log.h"

// The pending ticket of a CCI_FREE_HELD block: deferred tickets count up from 0 and never get here.
#define HELD_TICKET UINT64_MAX

#define SMALL_SPLIT_MIN ((size_t)512)
#define LARGE_SPLIT_MIN ((size_t)1 << 20)  // a large remainder must exceed 1 MiB to be split off

// ---- statistics ---------------------------------------------------------------------------

// The same as cci_stat_change(s, +d) and cci_stat_change(s, -d), for the call sites that know the sign: the hot
// paths make a dozen updates per operation, and each would otherwise test the sign again.
static inline void stat_inc(cci_stat *s, int64_t d)
{
    s->current += d;
    s->allocated += d;
    if (s->current > s->peak)
        s->peak = s->current;
}

static inline void stat_dec(cci_stat *s, int64_t d)
{
    s->current -= d;
    s->freed += d;
}

static inline void stat_pool_inc(cci_stat *arr, int small, int64_t d)
{
    stat_inc(&arr[CCI_POOL_ALL], d);
    stat_inc(&arr[pool_index(small)], d);
}

static inline void stat_pool_dec(cci_stat *arr, int small, int64_t d)
{
    stat_dec(&arr[CCI_POOL_ALL], d);
    stat_dec(&arr[pool_index(small)], d);
}

// Observers are told through cci__notify_full (allocator_impl.h: at once, or queued for the
// unlock while thread caches exist). Most allocators have none: that is tested here first.
static inline void notify(cci_allocator *a, cci_event_kind kind, uint64_t stream, uintptr_t addr, size_t size,
                          size_t requested)
{
    if (a->nobs)
        cci__notify_full(a, kind, stream, addr, size, requested);
}

// ---- block records ------------------------------------------------------------------------

#define MAX_SPARE_BLOCKS 4096

static cci_block *block_new(cci_allocator *a)
{
    cci_block *b = a->spare;
    if (b) {
        a->spare = b->pend_next;
        a->nspare--;
        return b;
    }
    return malloc(sizeof *b);
}

static void block_drop(cci_allocator *a, cci_block *b)
{
    if (a->nspare >= MAX_SPARE_BLOCKS) {
        free(b);
        return;
    }
    b->pend_next = a->spare;
    a->spare = b;
    a->nspare++;
}

cci_block *cci__block_new(cci_allocator *a) { return block_new(a); }
void cci__block_drop(cci_allocator *a, cci_block *b) { block_drop(a, b); }

// ---- segments -----------------------------------------------------------------------------

static size_t seg_search(const cci_allocator *a, uintptr_t p)
{
    size_t lo = 0, hi = a->nsegs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (a->segs[mid]->addr <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;  // first segment starting after p
}

cci_segment *cci__segment_of(cci_allocator *a, uintptr_t p)
{
    size_t i = seg_search(a, p);
    if (i == 0)
        return NULL;
    cci_segment *s = a->segs[i - 1];
    return p - s->addr < s->size ? s : NULL;
}

// Makes room for one more segment entry, so that the insert after a successful reservation
// cannot fail and leak device memory.
int cci__seg_grow(cci_allocator *a)
{
    cci_segment **n = cci_grow(a->segs, &a->segcap, a->nsegs, sizeof *n, 64);
    if (!n)
        return -1;
    a->segs = n;
    return 0;
}

void cci__seg_insert(cci_allocator *a, cci_segment *s)
{
    size_t i = seg_search(a, s->addr);
    memmove(&a->segs[i + 1], &a->segs[i], (a->nsegs - i) * sizeof *a->segs);
    a->segs[i] = s;
    a->nsegs++;
}

void cci__seg_remove(cci_allocator *a, cci_segment *s)
{
    size_t i = seg_search(a, s->addr) - 1;
    memmove(&a->segs[i], &a->segs[i + 1], (a->nsegs - i - 1) * sizeof *a->segs);
    a->nsegs--;
}

// Reserves a new segment able to hold `rounded` and returns its single free block (not yet in
// the free set). NULL with *rc set when the device or the cap says no.
static cci_block *alloc_segment(cci_allocator *a, size_t rounded, int small, uint64_t stream, int retry,
                                int *rc)
{
    size_t size = cci_segment_size(&a->cfg, rounded);
    if (retry)
        a->st.num_alloc_retries++;
    if (a->exp)  // [expandable] grow the (stream, pool) segment instead of reserving a new one
        return cci__exp_grow(a, rounded, small, stream, rc);
    size_t reserved = (size_t)a->st.reserved_bytes[CCI_POOL_ALL].current;
    if (a->capped && (size > a->allowed_max || reserved > a->allowed_max - size)) {
        *rc = CCI_EOOM;
        return NULL;
    }
    // throw_on_cudamalloc_oom: a segment the device says it has no room for is refused without
    // the call that would fail (slow, and logged by the driver's tools); the retries still run.
    if (a->cfg.throw_on_cudamalloc_oom && a->be.ops->available &&
        size > a->be.ops->available(a->be.ctx, a->device)) {
        *rc = CCI_EOOM;
        return NULL;
    }
    cci_segment *s = calloc(1, sizeof *s);
    cci_block *b = block_new(a);
    if (!s || !b || cci__seg_grow(a) != 0) {
        free(s);
        if (b)
            block_drop(a, b);
        *rc = CCI_EOOM;
        return NULL;
    }
    uintptr_t addr;
    *rc = a->be.ops->reserve(a->be.ctx, a->device, size, &addr);
    if (*rc != CCI_OK) {
        free(s);
        block_drop(a, b);
        return NULL;
    }
    *s = (cci_segment){.addr = addr, .size = size, .stream = stream, .small = (uint8_t)small, .first = b};
    cci__seg_insert(a, s);
    *b = (cci_block){.addr = addr, .size = size, .stream = stream, .seg = s, .small = (uint8_t)small};
    stat_pool_inc(a->st.segment, small, 1);
    stat_pool_inc(a->st.reserved_bytes, small, (int64_t)size);
    if (is_oversize(a, size))
        stat_inc(&a->st.oversize_segments, 1);
    a->st.num_device_alloc++;
    notify(a, CCI_EV_SEGMENT_ALLOC, stream, addr, size, 0);
    return b;
}

// Gives a whole free segment (one block, in the free set) back to the device.
void cci__release_block(cci_allocator *a, cci_block *b)
{
    cci_segment *s = b->seg;
    int small = s->small;
    cci_free_set_remove(&a->free_set[small], b);
    if (a->be.ops->release(a->be.ctx, a->device, s->addr, s->size) != CCI_OK)
        cci_log(CCI_LOG_WARNING, "device %d: releasing a %zu-byte segment failed; forgetting it", a->device,
                s->size);
    cci__seg_remove(a, s);
    stat_pool_dec(a->st.segment, small, 1);
    stat_pool_dec(a->st.reserved_bytes, small, (int64_t)s->size);
    if (is_oversize(a, s->size))
        stat_dec(&a->st.oversize_segments, 1);
    a->st.num_device_free++;
    cci__fence_slack_charge(a, -(int64_t)s->size);
    notify(a, CCI_EV_SEGMENT_FREE, s->stream, s->addr, s->size, 0);
    block_drop(a, b);
    free(s);
}

// ---- the free set -------------------------------------------------------------------------

static void free_set_insert(cci_allocator *a, cci_block *b)
{
    b->state = BLOCK_FREE;
    b->requested = 0;
    b->gc_base = a->free_searches[b->small];
    cci_free_set_insert(&a->free_set[b->small], b);
}

// Inlined where every locked allocation calls it (cci_malloc's first search): a call's register
// saves and restores cost as much as the rest of a search that finds nothing to check.
static inline __attribute__((always_inline)) cci_block *take_free_block_inline(cci_allocator *a, size_t rounded,
                                                                              int small, uint64_t stream)
{
    if (a->cfg.gc_threshold > 0)
        a->free_searches[small]++;
    cci_block *b = cci_free_set_lower_bound(&a->free_set[small], stream, rounded, 0);
    if (!b)
        return NULL;
    if (b->seg->vmm)  // [expandable] keep a segment's growing end for what nothing else fits
        b = cci__exp_best_fit(a, b, small, stream);
    size_t limit = a->cfg.max_split_size;
    if (rounded < limit && b->size >= limit)
        return NULL;  // a small request never takes an oversize block
    if (rounded >= limit && b->size - rounded >= a->cfg.max_non_split_rounding)
        return NULL;  // nor a large one a block much larger than it
    cci_free_set_remove(&a->free_set[small], b);
    return b;
}

cci_block *cci__take_free_block(cci_allocator *a, size_t rounded, int small, uint64_t stream)
{
    return take_free_block_inline(a, rounded, small, stream);
}

static inline void absorb_free_neighbour(cci_allocator *a, cci_block *b, cci_block *c)
{
    cci_free_set_remove(&a->free_set[c->small], c);
    if (c == b->prev) {
        b->addr = c->addr;
        b->prev = c->prev;
        if (b->prev)
            b->prev->next = b;
        else
            b->seg->first = b;
    } else {
        b->next = c->next;
        if (b->next)
            b->next->prev = b;
    }
    b->size += c->size;
    block_drop(a, c);
}

void cci__absorb_free_neighbour(cci_allocator *a, cci_block *b, cci_block *c) { absorb_free_neighbour(a, b, c); }

// Returns b to the free set, merging with free neighbours, and keeps the inactive-split
// counters in step.
static void merge_into_free_set(cci_allocator *a, cci_block *b)
{
    int64_t net_blocks = 0, net_bytes = 0;
    cci_block *cands[2] = {b->prev, b->next};
    for (int i = 0; i < 2; i++) {
        cci_block *c = cands[i];
        if (!c || c->state != BLOCK_FREE)
            continue;
        net_blocks--;
        net_bytes -= (int64_t)c->size;
        absorb_free_neighbour(a, b, c);
    }
    free_set_insert(a, b);
    if (!is_whole(b)) {
        net_blocks++;
        net_bytes += (int64_t)b->size;
    }
    stat_pool(a->st.inactive_split, b->small, net_blocks);
    stat_pool(a->st.inactive_split_bytes, b->small, net_bytes);
}

// ... and the active counters too.
static void free_block(cci_allocator *a, cci_block *b)
{
    size_t orig = b->size;
    merge_into_free_set(a, b);
    stat_pool_dec(a->st.active, b->small, 1);
    stat_pool_dec(a->st.active_bytes, b->small, (int64_t)orig);
}

static int should_split(const cci_allocator *a, const cci_block *b, size_t rounded)
{
    size_t rest = b->size - rounded;
    if (b->small || b->seg->vmm)  // [expandable] PyTorch splits every remainder in these segments
        return rest >= SMALL_SPLIT_MIN;
    return rounded < a->cfg.max_split_size && rest > LARGE_SPLIT_MIN;
}

// Hands out b (taken from the free set or fresh from a segment) for a request.
// The figures of a block handed out for `requested` bytes, and its event.
static void count_alloc(cci_allocator *a, const cci_block *b, size_t requested)
{
    stat_pool_inc(a->st.allocation, b->small, 1);
    stat_pool_inc(a->st.allocated_bytes, b->small, (int64_t)b->size);
    stat_pool_inc(a->st.active, b->small, 1);
    stat_pool_inc(a->st.active_bytes, b->small, (int64_t)b->size);
    stat_pool_inc(a->st.requested_bytes, b->small, (int64_t)requested);
    if (is_oversize(a, b->size))
        stat_inc(&a->st.oversize_allocations, 1);
    notify(a, CCI_EV_ALLOC, b->stream, b->addr, b->size, requested);
}

static int hand_out(cci_allocator *a, cci_block *b, size_t rounded, size_t requested)
{
    int was_split = !is_whole(b);
    cci_block *rest = NULL;
    if (should_split(a, b, rounded) && (rest = block_new(a)) != NULL) {
        *rest = (cci_block){.addr = b->addr + rounded, .size = b->size - rounded, .stream = b->stream,
                            .prev = b, .next = b->next, .seg = b->seg, .small = b->small};
        if (b->next)
            b->next->prev = rest;
        b->next = rest;
        b->size = rounded;
        free_set_insert(a, rest);
        if (was_split) {
            stat_pool_dec(a->st.inactive_split_bytes, b->small, (int64_t)rounded);
        } else {
            stat_pool_inc(a->st.inactive_split_bytes, b->small, (int64_t)rest->size);
            stat_pool_inc(a->st.inactive_split, b->small, 1);
        }
    } else if (was_split) {
        stat_pool_dec(a->st.inactive_split_bytes, b->small, (int64_t)b->size);
        stat_pool_dec(a->st.inactive_split, b->small, 1);
    }
    b->state = BLOCK_ALLOCATED;
    b->requested = requested;
    if (cci_live_add(&a->live, b) != 0) {
        // Undo as if it had been freed at once: the host is out of memory, not the device.
        stat_pool_inc(a->st.active, b->small, 1);
        stat_pool_inc(a->st.active_bytes, b->small, (int64_t)b->size);
        free_block(a, b);
        return CCI_EOOM;
    }
    count_alloc(a, b, requested);
    return CCI_OK;
}

// ---- deferred frees -----------------------------------------------------------------------

void cci__complete_block(cci_allocator *a, cci_block *b)
{
    cci_live_remove(&a->live, b);
    uintptr_t addr = b->addr;
    size_t size = b->size;
    uint64_t stream = b->stream;
    free_block(a, b);
    notify(a, CCI_EV_FREE_COMPLETED, stream, addr, size, 0);
}

void cci__defer_block(cci_allocator *a, cci_block *b)
{
    b->state = BLOCK_PENDING;
    b->pending_seq = a->pend_seq++;
    b->pend_next = NULL;
    if (a->pend_tail)
        a->pend_tail->pend_next = b;
    else
        a->pend_head = b;
    a->pend_tail = b;
    a->pend_count++;
    a->pend_bytes += b->size;
}

// ---- public entry points ------------------------------------------------------------------

void cci_allocator_track_peak(cci_allocator *a, int on)
{
    cci__lock(a);
    a->track_peak = on;
    cci__unlock(a);
}

static void remember_peak(cci_allocator *a)
{
    cci_layout l;
    if (cci__layout_fill(a, &l) != 0)
        return;  // a missing peak picture is better than a failed allocation
    cci_layout_free(&a->peak);
    a->peak = l;
    a->have_peak = 1;
}


// The locked allocation (everything but the thread cache's hit). Out of line, so that the
// cached path of cci_malloc saves none of the registers this one needs (~50
// instructions a pair when both entry points carried the locked paths' frames; callgrind,
// commit aeaa50c). `skipped`: the
// fast path was not asked (tc_fast 0), so the caller's time aside is counted here (tcache.h).
// Not cloned per value of `skipped`: one copy of the policy (GCC's noclone; clang, which the
// fuzz targets are built with, neither knows the attribute nor clones this function).
#if defined(__GNUC__) && !defined(__clang__)
#define CCI_NOCLONE __attribute__((noclone))
#else
#define CCI_NOCLONE
#endif
static __attribute__((noinline)) CCI_NOCLONE int malloc_locked(cci_allocator *a, size_t rounded, size_t size,
                                                            uint64_t stream, uintptr_t *out, int skipped)
{
    int small = cci_is_small(rounded);
    int rc = CCI_OK;
    cci__lock(a);
    a->st.num_locked_allocs++;
    if (skipped && a->tc_mine)  // (no cache, nothing to count: the caches off, or none yet)
        cci__tc_skipped(a);
    if (cci_free_set_reserve(&a->free_set[small], stream) != 0) {
        cci__unlock(a);  // no host memory for the stream's bins: none for its blocks either
        return CCI_EOOM;
    }
    cci__tc_drain_mine(a);
    if (__builtin_expect(a->fenced_count != 0, 0) && ++a->fence_tick >= FENCE_TICK)
        cci__fenced_tick(a);
    // A passed block this thread keeps for the size (its fast path was short of credit): served
    // here, still the thread's. Handing its passed blocks to the free set instead had left the
    // thread nothing passed, so that its next allocations, a batch's worth, came here too: at
    // eight threads on an H200 (2026-11-28) each such lock was followed by ~25 more.
    cci_block *kept = cci__tc_held_take(a, rounded, stream);
    if (kept) {
        kept->state = BLOCK_ALLOCATED;
        kept->requested = size;
        count_alloc(a, kept, size);  // (no merge was foreseen at its free: tcache_fenced.c)
        *out = kept->addr;
        cci__unlock(a);
        return CCI_OK;
    }
    cci_block *b = take_free_block_inline(a, rounded, small, stream);
    size_t fit = b ? b->size : SIZE_MAX;
    // (Only other threads' magazines are searched: none when the only cache is this thread's.)
    int others = a->ntcs > (a->tc_mine != NULL);
    if (others && fit != rounded && cci__tc_fitting(a, stream, small, rounded, fit, 0)) {
        // Another thread's magazine holds a closer fit: with it back in the free set, the policy
        // chooses as it would without the caches.
        if (b)
            cci_free_set_insert(&a->free_set[small], b);
        cci__tc_fitting(a, stream, small, rounded, fit, 1);
        b = cci__take_free_block(a, rounded, small, stream);
    }
    if (b && a->fenced_count && poor_fit_while_fenced(a, b->size, rounded))
        b = cci__better_fit_after_fences(a, b, rounded, small, stream);
    // The pool would grow while this thread keeps fenced frees (tcache_fenced.c). Within the
    // kept batches' allowance it grows: their blocks come back once their fence passes, and
    // taking them apart here at every miss left no batch ever full, every later pair locked.
    // Past it, this thread's kept frees go to the policy first, and in the virtual-memory modes
    // those of threads idle for a while (cci__tc_held_give_back).
    int held_grow = !b && cci__tc_held_may_grow(a, rounded);
    if (!b && !held_grow && cci__tc_held_give_back(a, small))
        b = cci__take_free_block(a, rounded, small, stream);
    if (!b && a->fenced_count)
        b = cci__take_after_fences(a, rounded, small, stream);
    if (!b && pending_batch_full(a, rounded) && cci__sync_pending(a))
        b = cci__take_free_block(a, rounded, small, stream);
    if (!b && a->fences)  // another stream's whole free segment, once its fence passed
        b = cci__stream_handover(a, rounded, small, stream);
    int new_segment = 0;
    int64_t reserved_before = a->st.reserved_bytes[CCI_POOL_ALL].current;
    if (!b) {
        if (a->cfg.gc_threshold > 0)
            cci__garbage_collect(a);
        new_segment = 1;
        b = alloc_segment(a, rounded, small, stream, 0, &rc);
        if (!b && rc == CCI_EOOM && cci__release_available(a, rounded, small, stream))
            b = alloc_segment(a, rounded, small, stream, 0, &rc);
        if (!b && rc == CCI_EOOM) {
            // Last resort, as a real cudaFree would: wait for the device, then give back every
            // whole cached segment. Another thread may have freed meanwhile: look again first.
            cci__tc_drain_all(a);  // the threads' kept fenced frees too (tcache_fenced.c)
            int fenced = cci__fenced_drain(a);  // first: a failed wait hands its blocks to the sync
            if ((cci__sync_pending(a) | fenced) && (b = cci__take_free_block(a, rounded, small, stream)) != NULL)
                new_segment = 0;
            if (!b) {
                cci__release_cached_all(a);
                b = alloc_segment(a, rounded, small, stream, 1, &rc);
            }
        }
    }
    if (!b) {
        a->slack_grow = 0;
        if (rc == CCI_EOOM) {
            a->st.num_ooms++;
            notify(a, CCI_EV_OOM, stream, 0, rounded, size);
        }
        cci__unlock(a);
        return rc == CCI_OK ? CCI_EOOM : rc;
    }
    if (a->slack_grow) {
        a->slack_grow = 0;
        int64_t grown = a->st.reserved_bytes[CCI_POOL_ALL].current - reserved_before;
        if (grown > 0)
            cci__fence_slack_charge(a, grown);
    }
    if (held_grow && a->st.reserved_bytes[CCI_POOL_ALL].current > reserved_before)
        a->held_grown += (size_t)(a->st.reserved_bytes[CCI_POOL_ALL].current - reserved_before);
    // Frees that skipped their fence (fenced.c, cci__free_unfenced) are in the free set: one
    // order covers them all before any block goes to a new owner. Refused, the block goes back,
    // the host waits for the device, and the allocation starts again.
    if (__builtin_expect(cci__reuse_unordered(a), 0) && !cci__reuse_order(a)) {
        cci_free_set_insert(&a->free_set[small], b);
        if (cci__reuse_wait(a)) {
            a->st.num_locked_allocs--;  // (counted again there)
            cci__unlock(a);
            return malloc_locked(a, rounded, size, stream, out, 0);
        }
        // Nothing could cover them (a capture we were not told of, say): a segment of its own,
        // which has no free neighbour (an expandable segment's growth would merge into one).
        b = a->exp ? NULL : alloc_segment(a, rounded, small, stream, 0, &rc);
        if (!b) {
            cci_log(CCI_LOG_WARNING, "device %d: no order, fence or synchronisation could cover "
                    "blocks freed without a fence; a %zu-byte allocation fails rather than reuse "
                    "them early", a->device, size);
            cci__unlock(a);
            return CCI_EOOM;
        }
        new_segment = 1;
    }
    rc = hand_out(a, b, rounded, size);
    if (rc == CCI_OK) {
        *out = b->addr;
        if (a->tc_on)
            cci__tc_own(a, b);
        if (new_segment && a->track_peak &&
            a->st.reserved_bytes[CCI_POOL_ALL].current == a->st.reserved_bytes[CCI_POOL_ALL].peak)
            remember_peak(a);
    }
    cci__unlock(a);
    return rc;
}

// The locked allocation, the fast path not asked. Apart from cci_malloc, where the compiler had
// set this constant argument before the test, on the cached path too.
static __attribute__((noinline)) int malloc_skipped(cci_allocator *a, size_t rounded, size_t size,
                                                    uint64_t stream, uintptr_t *out)
{
    return malloc_locked(a, rounded, size, stream, out, 1);
}

int cci_malloc(cci_allocator *a, size_t size, uint64_t stream, uintptr_t *out)
{
    size_t rounded = cci_round_size(&a->cfg, size);
    // tc_fast, not tc_on: while the only cache is set aside (the mixed workload), asking it cost
    // a call and its frame on every operation for an answer known in advance (tcache.c).
    if (!__atomic_load_n(&a->tc_fast, __ATOMIC_RELAXED))
        return malloc_skipped(a, rounded, size, stream, out);
    // It answers CCI_OK or CCI_ENOTOURS, below 0. Tested by sign and returned as it came: with
    // `== CCI_OK` the compiler set the constant again on the cached path (one instruction).
    int rc = cci__tc_alloc(a, rounded, size, stream, out);
    if (rc >= CCI_OK)
        return rc;
    return malloc_locked(a, rounded, size, stream, out, 0);
}

static int classify_unknown(cci_allocator *a, uintptr_t p)
{
    return cci__segment_of(a, p) ? CCI_EINVAL : CCI_ENOTOURS;
}

// The allocation statistics of a block leaving the allocated state.
static void count_free(cci_allocator *a, const cci_block *b)
{
    stat_pool_dec(a->st.allocation, b->small, 1);
    stat_pool_dec(a->st.allocated_bytes, b->small, (int64_t)b->size);
    stat_pool_dec(a->st.requested_bytes, b->small, (int64_t)b->requested);
    if (is_oversize(a, b->size))
        stat_dec(&a->st.oversize_allocations, 1);
}

// Takes back a change of `d` that stat_add counted (without its peak: a peak stays a peak).
static inline void stat_unadd(cci_stat *s, int64_t d)
{
    s->current -= d;
    if (d > 0)
        s->allocated -= d;
    else
        s->freed += d;
}

void cci__release_cached(cci_allocator *a, cci_block *b, int split, int64_t split_bytes)
{
    // Its free was counted when the thread cached it (tcache.c): the allocation and active
    // figures went down then, exactly as count_free and free_block would take them down now, so
    // they stay. The inactive-split figures counted the merge the cache foresaw (split,
    // split_bytes, added to both pools as stat_pool adds): that comes out, and the merge made
    // now goes in. The same figures, current, peaks and running totals, as taking the whole
    // recorded free out and counting the locked free again.
    int pool = pool_index(b->small);
    stat_unadd(&a->st.inactive_split[CCI_POOL_ALL], split);
    stat_unadd(&a->st.inactive_split[pool], split);
    stat_unadd(&a->st.inactive_split_bytes[CCI_POOL_ALL], split_bytes);
    stat_unadd(&a->st.inactive_split_bytes[pool], split_bytes);
    cci_live_remove(&a->live, b);
    merge_into_free_set(a, b);
}

// Undoes a decrease of `d` (< 0) that stat_add counted, peaks kept true.
static inline void stat_undo_dec(cci_stat *s, int64_t d)
{
    stat_unadd(s, d);
    if (s->current > s->peak)
        s->peak = s->current;
}

void cci__release_held_pending(cci_allocator *a, cci_block *b)
{
    // A thread's fenced free counted the block inactive at once, as a magazine free does. A locked
    // fenced free keeps a block active until its fence passes (free_block at completion): so that
    // comes out, and the block waits in the open batch as if freed on the locked path.
    int pool = pool_index(b->small);
    stat_undo_dec(&a->st.active[CCI_POOL_ALL], -1);
    stat_undo_dec(&a->st.active[pool], -1);
    stat_undo_dec(&a->st.active_bytes[CCI_POOL_ALL], -(int64_t)b->size);
    stat_undo_dec(&a->st.active_bytes[pool], -(int64_t)b->size);
    b->state = BLOCK_ALLOCATED;
    cci__fenced_free(a, b);
}

void cci__complete_held(cci_allocator *a, cci_block *b)
{
    uintptr_t addr = b->addr;
    size_t size = b->size;
    uint64_t stream = b->stream;
    b->state = BLOCK_ALLOCATED;
    cci__release_cached(a, b, 0, 0);  // no merge foreseen (tcache_fenced.c)
    notify(a, CCI_EV_FREE_COMPLETED, stream, addr, size, 0);
}

// The locked free (everything but the thread cache's hit); out of line as malloc_locked is.
static __attribute__((noinline)) int free_locked(cci_allocator *a, uintptr_t ptr, uint64_t stream,
                                                 cci_free_mode mode)
{
    cci__lock(a);
    cci_block *b = cci_live_find(&a->live, ptr);
    if (!b || b->state != BLOCK_ALLOCATED) {
        int rc = b ? CCI_EINVAL : classify_unknown(a, ptr);
        cci__unlock(a);
        return rc;
    }
    a->st.num_locked_frees++;
    cci__tc_disown(b);
    count_free(a, b);
    // The mode this free really takes, told to the observers (traces replay it the same way).
    // A stream-ordered free on another stream than the block's (PyTorch's stream-ordered backend
    // frees a tensor used on side streams on a stream of its own, after waiting for them) is done
    // once that stream reaches the free: a fence for all streams recorded after it covers that,
    // so it is fenced, not deferred to the next device synchronisation.
    cci_free_mode how = mode == CCI_FREE_NOW && stream == b->stream                     ? CCI_FREE_NOW
                        : (mode == CCI_FREE_FENCED || mode == CCI_FREE_NOW) && a->fences ? CCI_FREE_FENCED
                        : mode == CCI_FREE_HELD                                          ? CCI_FREE_HELD
                                                                                         : CCI_FREE_DEFERRED;
    notify(a, CCI_EV_FREE_REQUESTED, stream, b->addr, b->size, how);
    if (how == CCI_FREE_NOW) {
        cci__complete_block(a, b);  // freed on its own stream: reusable at once
    } else if (how == CCI_FREE_FENCED) {
        if (cci__free_unfenced(a))
            cci__complete_block(a, b);  // the order comes before its reuse (fenced.c)
        else
            cci__fenced_free(a, b);
    } else if (how == CCI_FREE_HELD) {
        b->state = BLOCK_PENDING;  // in no queue: only cci_free_complete_held completes it
        b->pending_seq = HELD_TICKET;
        b->pend_next = NULL;
    } else {
        cci__defer_block(a, b);  // DEFERRED, FENCED without fences, or freed on another stream
    }
    cci__unlock(a);
    return CCI_OK;
}

int cci_free(cci_allocator *a, uintptr_t ptr, uint64_t stream, cci_free_mode mode)
{
    // A block reusable at once on its own stream may stay with this thread (tcache.h), and so
    // may a small one behind the thread's own fence (tcache_fenced.c).
    if (mode == CCI_FREE_NOW && __atomic_load_n(&a->tc_fast, __ATOMIC_RELAXED) &&
        cci__tc_free(a, ptr, stream) == CCI_OK)
        return CCI_OK;
    if (mode == CCI_FREE_FENCED && a->fences && __atomic_load_n(&a->tc_fast, __ATOMIC_RELAXED) &&
        cci__tc_free_fenced(a, ptr, stream) == CCI_OK)
        return CCI_OK;
    return free_locked(a, ptr, stream, mode);
}

int cci_free_complete_held(cci_allocator *a, uintptr_t ptr)
{
    cci__lock(a);
    cci_block *b = cci_live_find(&a->live, ptr);
    int rc = b && b->state == BLOCK_PENDING && b->pending_seq == HELD_TICKET
                 ? CCI_OK
                 : CCI_EINVAL;
    if (rc == CCI_OK)
        cci__complete_block(a, b);
    cci__unlock(a);
    return rc;
}

int cci_block_info(cci_allocator *a, uintptr_t ptr, uintptr_t *block, size_t *block_size, uintptr_t *segment,
                   size_t *segment_size)
{
    cci__lock(a);
    cci_segment *s = cci__segment_of(a, ptr);
    cci_block *b = NULL;
    if (s)
        for (b = s->first; b && !(ptr - b->addr < b->size); b = b->next)
            ;
    int rc = !s ? CCI_ENOTOURS : (b && b->state == BLOCK_ALLOCATED) ? CCI_OK : CCI_EINVAL;
    if (rc == CCI_OK) {
        if (block)
            *block = b->addr;
        if (block_size)
            *block_size = b->size;
        if (segment)
            *segment = s->addr;
        if (segment_size)
            *segment_size = s->size;
    }
    cci__unlock(a);
    return rc;
}

void cci_alloc_empty_cache(cci_allocator *a)
{
    cci__lock(a);
    cci__tc_drain_all(a);
    cci__fenced_drain(a);
    cci__sync_pending(a);
    cci__release_cached_all(a);
    a->held_grown = 0;
    cci__unlock(a);
}

size_t cci_cached_free_bytes(cci_allocator *a)
{
    cci__lock(a);
    size_t n = (size_t)(a->st.reserved_bytes[CCI_POOL_ALL].current - a->st.active_bytes[CCI_POOL_ALL].current);
    cci__unlock(a);
    return n;
}
