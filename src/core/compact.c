// SPDX-License-Identifier: MIT
// Compact mode (compact_segments:True) of the expandable segments (expandable.c): pages of the
// device's granularity in both pools; when the pool must grow past its peak while more than a
// slack of what is mapped is free, it first unmaps just enough free pages (largest free runs
// first, one unmap call per run) that the growth either stays under the peak or leaves no more
// than the slack free, and maps those same pages again where the request fits: the pages wait in
// a small pool of the allocator's own, so moving memory costs no page create or release. Pages of
// the growth's own stream move without any wait (retirements); other streams' after a fence.
// On a repeating workload where such moves only circulate pages from step to step, it stops
// moving them and lets reserved grow instead, within a bound (the churn ceiling, CHURN_*).
// Apart from expandable.c because PyTorch's mode never runs any of it.
#include <stdlib.h>
#include <string.h>

#include "expandable_impl.h"
#include "grow.h"

// Compact mode's slack: the free mapped bytes it keeps rather than unmapping before a growth past
// the peak, max(COMPACT_SLACK_MIN, peak allocated / COMPACT_SLACK_DIVISOR). 1/64 is 1.6 % of the
// allocated peak, well inside the 3 % target, and leaves room for the part of pages that free
// blocks share with live ones (which no unmap can reach); the floor keeps a small pool from
// unmapping and mapping again on every step. A reclaim unmaps COMPACT_EXTRA_DIVISOR-th of the
// slack beyond what the growth needs, so the next growths find pages in the pool and room under
// the peak without another device sync. The page pool holds at most the slack.
#define COMPACT_SLACK_DIVISOR 64
#define COMPACT_SLACK_MIN ((size_t)32 << 20)
#define COMPACT_EXTRA_DIVISOR 2
// Churn: on a repeating workload whose requests change size from step to step, stitching does not
// converge, it circulates: every step unmaps the pages the last one mapped and maps them back
// elsewhere (seedfrag on an H100: ~25 maps and ~22 page unmaps a step, 4x the step's own time).
// The sign is counted, not timed, so replay predicts it: once reclaims have moved as many bytes as
// the allocated peak (CHURN_MOVED_FACTOR) without that peak rising, the workload repeats and
// moving more buys nothing. Compact mode then lets reserved grow instead of reclaiming, up to a
// ceiling of the allocated peak plus the slack plus the churn slack, which each such growth raises
// by what it needs, never past max(CHURN_SLACK_MIN, peak allocated / CHURN_SLACK_DIVISOR). Only a
// growth past the ceiling still reclaims, and only what passes it. 1/128 keeps a large pool inside
// its 3 % (ceiling 1 + 1/64 + 1/128 = 1.023x the allocated peak; at 1/64 the encoder trace, made
// to churn, reached 1.027x). The 50 MiB floor is tuned in replay, and is the least at which a
// small pool of changing sizes stops moving pages on both seedfrag traces: on the synthetic
// pattern (160 MiB allocated) pages still move 2-4 a step at 40 MiB and none at 48 (240 MiB
// reserved, what a segment that never unmaps reaches). The trace of our own run on the H100 (722
// steps, the loss scalars in the small pool) needs 2 MiB more: at 48 MiB it moved pages in 64 of
// its steps, at 50 in the first few only (242 MiB, what PyTorch's expandable segments reserve;
// docs/benchmarks.md; commit 1ebf42e).
#define CHURN_MOVED_FACTOR 1
#define CHURN_SLACK_DIVISOR 128
#define CHURN_SLACK_MIN ((size_t)50 << 20)

// ---- compact mode's page pool -------------------------------------------------------------

size_t cci__exp_compact_slack(const cci_allocator *a)
{
    size_t slack = (size_t)a->st.allocated_bytes[CCI_POOL_ALL].peak / COMPACT_SLACK_DIVISOR;
    return slack < COMPACT_SLACK_MIN ? COMPACT_SLACK_MIN : slack;
}

// The pool's bound: the slack; while a growth is under way, the pages it will map on top.
static size_t pool_limit(const cci_allocator *a)
{
    return a->exp->mode == CCI_EXP_COMPACT ? cci__exp_compact_slack(a) + a->exp->pool_hold : 0;
}

static int pool_page_waits(const cci_exp_page *p) { return p->retire != 0; }

// Keeps a page to map again, or releases it when the pool is full (or the host is out of memory
// for the pool's list). A page whose old mapping still waits for its fence is kept whatever the
// bound: the retirement that moved it releases the overflow once it is done.
void cci__exp_pool_put(cci_allocator *a, cci_exp_page p, size_t page)
{
    cci_exp *e = a->exp;
    if ((e->pool_n + 1) * page <= pool_limit(a) || pool_page_waits(&p)) {
        cci_exp_page *n = cci_grow(e->pool, &e->pool_cap, e->pool_n, sizeof *n, 64);
        if (n)
            e->pool = n;
        if (e->pool_n < e->pool_cap) {
            e->pool[e->pool_n++] = p;
            e->pool_waiting += pool_page_waits(&p);
            if (e->pool_n * page > e->n.pool_bytes_peak)
                e->n.pool_bytes_peak = e->pool_n * page;
            return;
        }
        // Host out of memory for the list. A page still mapped at its old address may be
        // released (its memory goes with that mapping), and no backend hands out a page that is
        // still mapped again: releasing it is safe, if wasteful.
    }
    dev_release(a, p.handle);
}

// Takes pool entry i out (order does not matter: every pooled page is alike but for its stream).
static cci_exp_page pool_remove(cci_exp *e, size_t i)
{
    cci_exp_page p = e->pool[i];
    e->pool[i] = e->pool[--e->pool_n];
    e->pool_waiting -= pool_page_waits(&p);
    return p;
}

// A pooled page a growth of `stream` may map, for a segment of `page`-byte pages: 1 and *out, or
// 0. Only compact mode pools, and all its pages have the granularity's size. A page whose old
// mapping waits for its fence goes only to its own stream.
int cci__exp_pool_take(cci_allocator *a, size_t page, uint64_t stream, cci_exp_page *out)
{
    cci_exp *e = a->exp;
    if (!e->pool_n || page != e->granularity || e->mode != CCI_EXP_COMPACT)
        return 0;
    for (size_t i = e->pool_n; i-- > 0;) {
        if (pool_page_waits(&e->pool[i]) && e->pool[i].stream != stream)
            continue;
        e->n.pool_hits++;
        *out = pool_remove(e, i);
        return 1;
    }
    return 0;
}

// Releases the pooled pages beyond the pool's bound (after a growth that held more for itself, or
// a retirement that freed pages kept beyond it), never one that still waits for its fence.
void cci__exp_pool_trim(cci_allocator *a)
{
    cci_exp *e = a->exp;
    for (size_t i = e->pool_n; i-- > 0 && e->pool_n * e->granularity > pool_limit(a);)
        if (!pool_page_waits(&e->pool[i]))
            dev_release(a, pool_remove(e, i).handle);
}

// Releases every pooled page (a flush), or forgets them when the device is gone (!release). A
// page still waiting for its fence stays (a retirement begun while empty_cache had the lock
// dropped); teardown finishes every retirement first, so it takes them all.
void cci__exp_pool_drain(cci_allocator *a, int release)
{
    cci_exp *e = a->exp;
    for (size_t i = e->pool_n; i-- > 0;) {
        if (release && pool_page_waits(&e->pool[i]))
            continue;
        cci_exp_page p = pool_remove(e, i);
        if (release)
            dev_release(a, p.handle);
    }
}

static size_t free_mapped_bytes(const cci_allocator *a)
{
    return (size_t)(a->st.reserved_bytes[CCI_POOL_ALL].current - a->st.active_bytes[CCI_POOL_ALL].current);
}

// Bytes a growth into the row that starts at `room` must map: the row's unmapped parts, in pages,
// as far as the growth reaches (its free blocks are mapped already; a row that earlier moves left
// alternating free and unmapped, so counting all of it past the first free block would ask the
// reclaim for more than the growth maps). round_up(rounded) when a new segment is needed.
size_t cci__exp_row_map_bytes(const cci_block *room, size_t rounded, size_t page)
{
    size_t have = 0, map = 0;
    for (const cci_block *x = room; x && have < rounded; x = x->next) {
        size_t take = x->size;
        if (x->state == BLOCK_UNMAPPED) {
            take = round_up(rounded - have < x->size ? rounded - have : x->size, page);
            map += take;
        } else if (x->state != BLOCK_FREE) {
            break;  // the row ends (find_room saw enough before this block)
        }
        have += take;
    }
    return have >= rounded ? map : map + round_up(rounded - have, page);
}

// Whether compact mode's reclaims circulate pages (see CHURN_MOVED_FACTOR): they have moved
// CHURN_MOVED_FACTOR allocated peaks since that peak last rose by a page or more. A rise that
// small does not start the count again: a program that keeps a small result per step (PyTorch's
// loss scalars, 512 B each) raises its peak by a few bytes every step while the large blocks
// repeat, and counting again at each rise never let our own seedfrag run on the H100 be seen as
// churning (95 reclaims in 722 steps instead of 22).
static int churning(cci_allocator *a)
{
    cci_exp *e = a->exp;
    uint64_t peak = (uint64_t)a->st.allocated_bytes[CCI_POOL_ALL].peak;
    if (peak < e->churn_peak || peak >= e->churn_peak + e->granularity) {
        e->churn_peak = peak;
        e->churn_moved = 0;
    }
    return e->churn_moved >= CHURN_MOVED_FACTOR * peak;
}

// What the churn ceiling may never pass: the device's memory (or the fraction cap) less what the
// pool and old mappings waiting for their fence hold beside reserved and less the slack, so that
// under memory pressure growing never ends in the last retry's flush (and its device sync) where
// moving pages would have done. SIZE_MAX when neither is known (an unlimited simulated device).
static size_t churn_room(const cci_allocator *a)
{
    size_t limit = a->capacity ? a->capacity : SIZE_MAX;
    if (a->capped && a->allowed_max < limit)
        limit = a->allowed_max;
    size_t held = a->exp->pool_n * a->exp->granularity + a->exp->retiring_bytes + cci__exp_compact_slack(a);
    return limit == SIZE_MAX ? SIZE_MAX : limit > held ? limit - held : 0;
}

// What each pool's allocated peak leaves unused of its last page: reserved is whole pages in each
// pool, so a ceiling of bytes alone is short by up to a page a pool. (Our own seedfrag run on the
// H100 holds 0.1 MiB in the small pool: one 2 MiB page, which a ceiling of 160.1 + slack + 48 MiB
// left out, and every step moved pages again to stay under 240 MiB.)
static size_t partial_pages(const cci_allocator *a)
{
    size_t left = 0;
    for (int small = 0; small <= 1; small++) {
        size_t p = (size_t)a->st.allocated_bytes[pool_index(small)].peak, page = a->exp->page[small];
        left += round_up(p, page) - p;
    }
    return left;
}

// The reserved bytes a churning pool may reach without a reclaim: the allocated peak plus the
// slack plus the churn slack, and no more than churn_room(). Raises the churn slack, within its
// bound, so that `want` reserved bytes fit under the ceiling; returns the ceiling.
static size_t raise_churn_ceiling(cci_allocator *a, size_t want)
{
    cci_exp *e = a->exp;
    size_t peak = (size_t)a->st.allocated_bytes[CCI_POOL_ALL].peak;
    size_t base = peak + partial_pages(a) + cci__exp_compact_slack(a);
    size_t bound = peak / CHURN_SLACK_DIVISOR;
    bound = bound < CHURN_SLACK_MIN ? CHURN_SLACK_MIN : bound;
    size_t need = want > base ? want - base : 0;
    need = need < bound ? need : bound;
    if (need > e->churn_slack) {
        e->churn_slack = need;
        e->n.churn_raises++;
    }
    size_t room = churn_room(a);
    return base + e->churn_slack < room ? base + e->churn_slack : room;
}

// Compact mode: how many free mapped bytes to unmap before a growth that maps `grow_by` bytes;
// 0 for none, SIZE_MAX for all that can be.
size_t cci__exp_reclaim_target(cci_allocator *a, size_t grow_by)
{
    size_t reserved = (size_t)a->st.reserved_bytes[CCI_POOL_ALL].current;
    size_t peak = (size_t)a->st.reserved_bytes[CCI_POOL_ALL].peak;
    size_t free = free_mapped_bytes(a), slack = cci__exp_compact_slack(a);
    // garbage_collection_threshold keeps its meaning here: mapped bytes past threshold × the
    // allowed maximum make the pool give back what it can before it grows further.
    if (a->cfg.gc_threshold > 0 && free > 0 &&
        (double)(reserved + grow_by) > a->cfg.gc_threshold * (double)a->allowed_max)
        return SIZE_MAX;
    // Only a growth that would raise the peak reserved is worth an unmap: below the peak the pool
    // has held that much before, and unmapping free pages there only to map others would make a
    // workload of changing sizes call the driver on every miss (H100: 35.8 us/op against 628 ns
    // for expandable segments, when every such growth unmapped).
    if (!grow_by || free <= slack || reserved + grow_by <= peak)
        return 0;
    if (churning(a)) {
        // Reclaims have been circulating pages: let reserved grow up to the churn ceiling instead,
        // and reclaim only what would pass it.
        size_t ceiling = raise_churn_ceiling(a, reserved + grow_by);
        if (reserved + grow_by <= ceiling)
            return 0;
        if (ceiling > peak)
            peak = ceiling;
    }
    // Enough that the growth stays under the peak, or that no more than the slack stays free,
    // whichever is less; plus part of the slack, so that the next growths find pooled pages and
    // room under the peak without another device sync.
    size_t over_peak = reserved + grow_by - peak, over_slack = free - slack;
    return (over_peak < over_slack ? over_peak : over_slack) + slack / COMPACT_EXTRA_DIVISOR;
}

// ---- retirements: moving pages without a device sync ----------------------------------------
// A free block of the requesting stream may still be used by work queued on that stream (a free
// on its own stream is reusable there at once). Its pages can nevertheless go to that stream's
// growth at once, mapped at the growth's addresses while the old mapping stays: the new owner's
// work is queued after the old on the same stream, exactly as when a free block is reused there.
// The old mapping is unmapped once a fence recorded on the stream at the reclaim has passed, which
// is polled without blocking at the next growth; empty_cache and the last retry before an OOM
// sync the device and finish them all. Until then the old range is a RETIRING block (address space
// nobody maps into), and its pages, where pooled, go to no other stream and are never released.

// A retirement for pages of `stream`, its fence recorded now. NULL when the backend has no fences,
// the fence cannot be recorded (a capture runs), or the host is out of memory: the caller syncs.
static cci_exp_retire *retire_new(cci_allocator *a, uint64_t stream)
{
    if (!a->fences)
        return NULL;
    cci_exp_retire *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    if (a->fences->record(a->be.ctx, a->device, stream, &r->fence) != CCI_OK) {
        free(r);
        return NULL;
    }
    r->stream = stream;
    r->seq = ++a->exp->retire_seq;
    return r;
}

static void retire_discard(cci_allocator *a, cci_exp_retire *r)
{
    a->fences->release(a->be.ctx, a->device, r->fence);
    free(r);
}

// Moves the pages [lo, hi) of a RECLAIMING block into retirement r: free bytes around them go back
// FREE, the pages to the pool for r's stream, the range stays mapped as a RETIRING block.
// 0 on host out of memory (everything is put back free and mapped).
static int retire_block(cci_allocator *a, cci_block *b, uintptr_t lo, uintptr_t hi, cci_exp_retire *r)
{
    cci_segment *s = b->seg;
    cci_vmm_seg *vs = s->vmm;
    cci_block *front, *back, *pages = cci__exp_split_pages(a, b, lo, hi, &front, &back);
    if (!pages)
        return 0;
    cci__exp_give_pages_tagged(a, vs, (lo - s->addr) / vs->page, (hi - lo) / vs->page, 1,
                      (cci_exp_page){.stream = r->stream, .retire = r->seq});
    cci__exp_pages_leave_reserved(a, s, lo, hi);
    cci__exp_insert_free_pieces(a, front, back);
    pages->state = BLOCK_RETIRING;
    pages->requested = 0;
    pages->pend_next = r->blocks;
    r->blocks = pages;
    r->bytes += hi - lo;
    a->exp->retiring_bytes += hi - lo;
    return 1;
}

static void retire_append(cci_allocator *a, cci_exp_retire *r)
{
    cci_exp *e = a->exp;
    if (e->retire_tail)
        e->retire_tail->next = r;
    else
        e->retire_head = r;
    e->retire_tail = r;
    e->n.deferred_unmaps++;
}

// Ends retirement r (already unlinked): its old mappings are unmapped and become UNMAPPED address
// space, and its pooled pages may go to any stream. With !release (the device is gone) nothing is
// asked of the device. An old mapping that cannot be unmapped stays RETIRING: its addresses are
// never mapped again.
void cci__exp_retire_finish(cci_allocator *a, cci_exp_retire *r, int release)
{
    cci_exp *e = a->exp;
    for (cci_block *b = r->blocks, *n; b; b = n) {
        n = b->pend_next;
        b->pend_next = NULL;
        if (!release)
            continue;
        if (dev_unmap(a, b->addr, b->size, b->seg->vmm->page) != CCI_OK) {
            cci_log(CCI_LOG_WARNING, "device %d: unmapping %zu bytes of moved pages failed; their addresses stay "
                                     "unused", a->device, b->size);
            continue;
        }
        cci__exp_insert_unmapped(a, b);
    }
    for (size_t i = 0; i < e->pool_n; i++) {
        if (e->pool[i].retire == r->seq) {
            e->pool[i].retire = 0;
            e->pool_waiting--;
        }
    }
    e->retiring_bytes -= r->bytes;
    if (release)
        a->fences->release(a->be.ctx, a->device, r->fence);
    free(r);
}

cci_exp_retire *cci__exp_retire_pop(cci_exp *e)
{
    cci_exp_retire *r = e->retire_head;
    e->retire_head = r->next;
    if (!e->retire_head)
        e->retire_tail = NULL;
    return r;
}

// Ends every retirement numbered up to `upto` (the device was synchronised after they began).
void cci__exp_retire_finish_upto(cci_allocator *a, uint64_t upto)
{
    cci_exp *e = a->exp;
    cci_exp_retire **pr = &e->retire_head, *last = NULL;
    while (*pr) {
        cci_exp_retire *r = *pr;
        if (r->seq > upto) {
            last = r;
            pr = &r->next;
            continue;
        }
        *pr = r->next;
        cci__exp_retire_finish(a, r, 1);
    }
    e->retire_tail = last;
}

// Without blocking: ends the retirements whose fence has passed, oldest first, and stops at the
// first that has not (so a page moved twice on one stream is held until the older is done). A
// fence the backend cannot vouch for falls back to a device sync. Lock held; dropped only there.
void cci__exp_retire_poll(cci_allocator *a)
{
    cci_exp *e = a->exp;
    while (e->retire_head) {
        int q = a->fences->query(a->be.ctx, a->device, e->retire_head->fence);
        if (q == 0)
            break;
        if (q < 0) {
            uint64_t upto = e->retire_seq;
            if (dev_sync(a))
                cci__exp_retire_finish_upto(a, upto);
            break;
        }
        cci__exp_retire_finish(a, cci__exp_retire_pop(e), 1);
    }
    cci__exp_pool_trim(a);
}

// ---- compact mode's reclaim ---------------------------------------------------------------

typedef struct victim {
    cci_block *b;
    uintptr_t lo, hi;  // the pages to unmap, whole pages inside b
    int other;         // the block belongs to another stream than the growth's
} victim;

static int by_stream_then_pages(const void *x, const void *y)
{
    const victim *p = x, *q = y;
    if (p->other != q->other)
        return p->other - q->other;  // the growth's own stream first: its pages move without a wait
    size_t a = p->hi - p->lo, b = q->hi - q->lo;
    return a < b ? 1 : a > b ? -1 : (p->lo > q->lo) - (p->lo < q->lo);  // ties by address: deterministic
}

// Waits, lock dropped, for a fence on each other stream that owns one of the first `n` victims, so
// that no queued work can touch their pages. 1 when every wait succeeded (or none was needed), 0
// when the backend has no fences or a record or wait failed: the caller then syncs the device.
static int wait_other_streams(cci_allocator *a, const victim *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!v[i].other)
            continue;
        uint64_t stream = v[i].b->stream;
        size_t j = 0;
        while (j < i && !(v[j].other && v[j].b->stream == stream))
            j++;
        if (j < i)
            continue;  // this stream was waited for already
        if (cci__fence_wait_now(a, stream, &a->exp->n.stream_waits) != CCI_OK)
            return 0;
    }
    return 1;
}

// Compact mode's reclaim before a growth of `stream`: gives back at least `target` bytes of free
// pages (all of them for SIZE_MAX) outside [keep_lo, keep_hi), the growth's own stream's first,
// then the largest free runs first so that each unmap call (~22 us on an H100 whatever it spans)
// frees as much as it can, and only the tail pages of the last run it needs. The pages go to the
// pool for the growth to map again. Pages of the growth's stream move at once and their old
// mappings retire behind a fence; pages of other streams are unmapped after a fence wait on their
// streams; only without fences is the device synchronised. Segments stay, even when nothing is
// left mapped in them: the pool holds pages only while a segment does, which is what lets
// teardown release them. Lock held; dropped around the waits.
void cci__exp_reclaim(cci_allocator *a, size_t target, uintptr_t keep_lo, uintptr_t keep_hi, uint64_t stream)
{
    size_t n = 0, cap = 0;
    victim *v = NULL;
    for (size_t i = 0; i < a->nsegs; i++) {
        cci_segment *s = a->segs[i];
        for (cci_block *b = s->vmm ? s->first : NULL; b; b = b->next) {
            uintptr_t lo, hi;
            if (b->state != BLOCK_FREE || (b->addr < keep_hi && keep_lo < b->addr + b->size))
                continue;
            cci__exp_inner_pages(b, &lo, &hi);
            if (lo >= hi)
                continue;
            victim *nv = cci_grow(v, &cap, n, sizeof *v, 64);
            if (!nv) {  // host out of memory: grow without giving pages back this time
                free(v);
                return;
            }
            v = nv;
            v[n++] = (victim){b, lo, hi, s->stream != stream};
        }
    }
    if (n)  // v is NULL when nothing was found: qsort must not see it
        qsort(v, n, sizeof *v, by_stream_then_pages);
    size_t take = 0, got = 0, own = 0;
    for (; take < n && got < target; take++) {
        size_t page = v[take].b->seg->vmm->page, bytes = v[take].hi - v[take].lo;
        if (target != SIZE_MAX && bytes > target - got)  // the tail pages the target still needs
            v[take].lo = v[take].hi - round_up(target - got, page);
        got += v[take].hi - v[take].lo;
        own += !v[take].other;
        a->exp->churn_moved += v[take].hi - v[take].lo;
        cci__exp_start_reclaiming(a, v[take].b);
    }
    if (take) {
        // No page unmapped while queued work may still touch it: the own stream's retire behind
        // a fence, the other streams' are waited for, and only where fences fail is the device
        // synchronised.
        cci_exp_retire *r = own ? retire_new(a, stream) : NULL;
        int others = wait_other_streams(a, v, take);
        int synced = (own && !r) || !others ? dev_sync(a) : 0;
        for (size_t i = 0; i < take; i++) {
            if (synced || (v[i].other && others))
                cci__exp_unmap_block(a, v[i].b, v[i].lo, v[i].hi, 1);
            else if (!v[i].other && r)
                retire_block(a, v[i].b, v[i].lo, v[i].hi, r);
            else
                cci__exp_unreclaim(a, v[i].b);
        }
        if (r && r->blocks) {
            retire_append(a, r);
            // A device that has caught up (idle, or the old work long done) passes the fence at
            // once: then the old addresses are room for this very growth, as after a sync.
            cci__exp_retire_poll(a);
        } else if (r) {
            retire_discard(a, r);
        }
    }
    free(v);
}
