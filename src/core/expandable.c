// SPDX-License-Identifier: MIT
// Expandable segments: one address range per (stream, pool), reserved without memory and mapped
// page by page as the pool grows, so that a large request finds room at the end of the range
// instead of needing a new, separately placed segment. What a block list looks like:
//
//   [FREE][ALLOCATED][FREE][UNMAPPED.....................................]
//    ^ segment start        pages mapped so far end here ^
//
// UNMAPPED blocks are address space only: never in the free set, never merged with FREE ones.
// Reserved bytes (the statistics, the fraction cap, garbage collection) count mapped pages only.
//
// Two modes share this file:
// - CCI_EXP_PYTORCH (expandable_segments:True) reproduces PyTorch: pages of 2 MiB in the small
//   pool and 20 MiB in the large pool, a free never unmaps, and pages go back only in empty_cache
//   and in the last retry before an out-of-memory.
// - CCI_EXP_COMPACT (compact_segments:True, ours) maps pages of the device's granularity in both
//   pools. When the pool must grow past its peak while more than a slack of what is mapped is
//   free, it first unmaps just enough free pages (largest free runs first, one unmap call per
//   run, after one device sync) that the growth either stays under the peak or leaves no more
//   than the slack free, and maps those same pages again where the request fits: the pages wait
//   in a small pool of the allocator's own, so moving memory costs no page create or release.
//   On a repeating workload where such moves only circulate pages from step to step, it stops
//   moving them and lets reserved grow instead, within a bound (the churn ceiling, CHURN_*).
//   The core asks the device for pages only when the pool grows, never on a cached allocation or
//   free. Every call on the VMM group is counted (cci_alloc_vmm_counts) for the reports.
#include <stdlib.h>
#include <string.h>

#include "expandable.h"
#include "grow.h"
#include "tcache.h"
#include "log.h"

#define PYTORCH_SMALL_PAGE ((size_t)2 << 20)
#define PYTORCH_LARGE_PAGE ((size_t)20 << 20)
// Address space per segment when the device's size is unknown (or the simulated device is
// unlimited): room for any realistic pool without ever mapping it.
#define DEFAULT_VA ((size_t)256 << 30)
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
// docs/benchmarks.md, session 5).
#define CHURN_MOVED_FACTOR 1
#define CHURN_SLACK_DIVISOR 128
#define CHURN_SLACK_MIN ((size_t)50 << 20)

static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

static void stat_add(cci_stat *s, int64_t d)
{
    s->current += d;
    if (d > 0) {
        s->allocated += d;
        if (s->current > s->peak)
            s->peak = s->current;
    } else {
        s->freed -= d;
    }
}

static void stat_pool(cci_stat *arr, int small, int64_t d)
{
    stat_add(&arr[CCI_POOL_ALL], d);
    stat_add(&arr[pool_index(small)], d);
}

// ---- setup --------------------------------------------------------------------------------

int cci__exp_init(cci_allocator *a)
{
    a->exp = NULL;
    cci_exp_mode mode = a->cfg.compact_segments      ? CCI_EXP_COMPACT
                        : a->cfg.expandable_segments ? CCI_EXP_PYTORCH
                                                     : 0;
    if (!mode)
        return 0;
    const cci_backend_vmm_ops *v = a->be.ops->vmm;
    size_t g = (a->be.ops->caps & CCI_CAP_VMM) && v ? v->granularity(a->be.ctx, a->device) : 0;
    if (!g) {
        cci_log(CCI_LOG_WARNING, "device %d: %s needs the virtual-memory API, which this device does not "
                                 "offer; using ordinary segments",
                a->device, mode == CCI_EXP_COMPACT ? "compact_segments" : "expandable_segments");
        return 0;
    }
    cci_exp *e = calloc(1, sizeof *e);
    if (!e)
        return -1;
    e->mode = mode;
    e->granularity = g;
    if (mode == CCI_EXP_PYTORCH) {
        e->page[1] = round_up(PYTORCH_SMALL_PAGE, g);
        e->page[0] = round_up(PYTORCH_LARGE_PAGE, g);
    } else {
        e->page[0] = e->page[1] = g;
    }
    // PyTorch reserves 9/8 of the device per segment: room to move pages from earlier in the
    // range to its end without running out of addresses.
    size_t cap = a->capacity;
    e->va_size = cap && cap < ((size_t)1 << 46) ? cap + cap / 8 : DEFAULT_VA;
    a->exp = e;
    return 0;
}

static cci_exp_retire *retire_pop(cci_exp *e);

void cci__exp_fini(cci_allocator *a)
{
    if (a->exp) {
        while (a->exp->retire_head)  // none after a teardown; forgotten, never touched
            free(retire_pop(a->exp));
        free(a->exp->pool);
    }
    free(a->exp);
    a->exp = NULL;
}

// ---- counted device calls -----------------------------------------------------------------
// Every call on the VMM group goes through these, so the counts are complete by construction.

static int dev_create(cci_allocator *a, size_t size, uint64_t *h)
{
    a->exp->n.page_creates++;
    return a->be.ops->vmm->page_create(a->be.ctx, a->device, size, h);
}

static void dev_release(cci_allocator *a, uint64_t h)
{
    a->exp->n.page_releases++;
    if (a->be.ops->vmm->page_release(a->be.ctx, a->device, h) != CCI_OK)
        cci_log(CCI_LOG_WARNING, "device %d: releasing a physical page failed; forgetting it", a->device);
}

static int dev_map(cci_allocator *a, uintptr_t va, size_t size, uint64_t h)
{
    a->exp->n.maps++;
    return a->be.ops->vmm->map(a->be.ctx, a->device, va, size, h);
}

static int dev_unmap(cci_allocator *a, uintptr_t va, size_t size, size_t page)
{
    a->exp->n.unmaps++;
    a->exp->n.unmapped_pages += size / page;
    return a->be.ops->vmm->unmap(a->be.ctx, a->device, va, size);
}

static int dev_set_access(cci_allocator *a, uintptr_t va, size_t size)
{
    a->exp->n.set_access++;
    return a->be.ops->vmm->set_access(a->be.ctx, a->device, va, size);
}

// Waits until no queued work can touch a page about to be unmapped. Lock held; dropped around
// the wait. 1 when the device is known to have caught up.
static int dev_sync(cci_allocator *a)
{
    a->exp->n.syncs++;
    if (!a->be.ops->synchronize)
        return 1;  // nothing runs asynchronously (the simulated device)
    cci__unlock(a);
    int ok = a->be.ops->synchronize(a->be.ctx, a->device) == CCI_OK;
    cci__lock(a);
    return ok;
}

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
static void pool_put(cci_allocator *a, cci_exp_page p, size_t page)
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
static int pool_take(cci_allocator *a, size_t page, uint64_t stream, cci_exp_page *out)
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
static void pool_trim(cci_allocator *a)
{
    cci_exp *e = a->exp;
    for (size_t i = e->pool_n; i-- > 0 && e->pool_n * e->granularity > pool_limit(a);)
        if (!pool_page_waits(&e->pool[i]))
            dev_release(a, pool_remove(e, i).handle);
}

// Releases every pooled page (a flush), or forgets them when the device is gone (!release). A
// page still waiting for its fence stays (a retirement begun while empty_cache had the lock
// dropped); teardown finishes every retirement first, so it takes them all.
static void pool_drain(cci_allocator *a, int release)
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

// ---- block list surgery -------------------------------------------------------------------

// Puts b (not in the free set) back as FREE, merged with FREE neighbours; returns the merged
// block. Keeps the inactive-split counters: a free block of an expandable segment is always
// part of a split range (the range is never wholly mapped).
static cci_block *insert_free(cci_allocator *a, cci_block *b)
{
    cci_block *cands[2] = {b->prev, b->next};
    for (int i = 0; i < 2; i++) {
        cci_block *c = cands[i];
        if (!c || c->state != BLOCK_FREE)
            continue;
        stat_pool(a->st.inactive_split, c->small, -1);
        stat_pool(a->st.inactive_split_bytes, c->small, -(int64_t)c->size);
        cci__absorb_free_neighbour(a, b, c);
    }
    b->state = BLOCK_FREE;
    b->requested = 0;
    b->gc_base = a->free_searches[b->small];
    cci_free_set_insert(&a->free_set[b->small], b);
    if (b->prev || b->next) {
        stat_pool(a->st.inactive_split, b->small, 1);
        stat_pool(a->st.inactive_split_bytes, b->small, (int64_t)b->size);
    }
    return b;
}

// Marks b UNMAPPED and merges it with UNMAPPED neighbours (address space has no statistics).
static void insert_unmapped(cci_allocator *a, cci_block *b)
{
    b->state = BLOCK_UNMAPPED;
    b->requested = 0;
    cci_block *c = b->prev;
    if (c && c->state == BLOCK_UNMAPPED) {
        b->addr = c->addr;
        b->size += c->size;
        b->prev = c->prev;
        if (b->prev)
            b->prev->next = b;
        else
            b->seg->first = b;
        cci__block_drop(a, c);
    }
    c = b->next;
    if (c && c->state == BLOCK_UNMAPPED) {
        b->size += c->size;
        b->next = c->next;
        if (b->next)
            b->next->prev = b;
        cci__block_drop(a, c);
    }
}

// Splits [addr, addr+size) off the front of b into a new block placed before it; the new block
// takes over b's place in the chain. NULL on host out-of-memory.
static cci_block *split_front(cci_allocator *a, cci_block *b, size_t size)
{
    cci_block *f = cci__block_new(a);
    if (!f)
        return NULL;
    *f = (cci_block){.addr = b->addr, .size = size, .stream = b->stream, .prev = b->prev, .next = b,
                     .seg = b->seg, .small = b->small, .state = b->state};
    if (b->prev)
        b->prev->next = f;
    else
        b->seg->first = f;
    b->prev = f;
    b->addr += size;
    b->size -= size;
    return f;
}

// ---- mapping ------------------------------------------------------------------------------

// Hands the pages [first, first+n) of a segment, just unmapped, to the pool (`keep`) or back to
// the device, and forgets them. `tag`: what the pages still wait for (an untagged page has no
// other mapping that queued work may touch).
static void give_pages_tagged(cci_allocator *a, cci_vmm_seg *vs, size_t first, size_t n, int keep, cci_exp_page tag)
{
    for (size_t i = first; i < first + n; i++) {
        if (vs->handles[i] && keep)
            pool_put(a, (cci_exp_page){.handle = vs->handles[i], .stream = tag.stream, .retire = tag.retire},
                     vs->page);
        else if (vs->handles[i])
            dev_release(a, vs->handles[i]);
        vs->handles[i] = 0;
    }
}

static void give_pages(cci_allocator *a, cci_vmm_seg *vs, size_t first, size_t n, int keep)
{
    give_pages_tagged(a, vs, first, n, keep, (cci_exp_page){0});
}

// Maps enough pages at the start of the UNMAPPED block u to hold `size` bytes and returns the
// FREE block they end up in (merged with a FREE neighbour). NULL with *rc when the device is full
// or failed; pages this call created are then given back.
static cci_block *map_front(cci_allocator *a, cci_block *u, size_t size, int *rc)
{
    cci_segment *s = u->seg;
    cci_vmm_seg *vs = s->vmm;
    size_t n = (size + vs->page - 1) / vs->page, first = (u->addr - s->addr) / vs->page, done = 0;
    size_t bytes = n * vs->page;
    *rc = CCI_OK;
    // The block record for the rest comes first: host memory must not fail after device memory
    // was mapped.
    cci_block *head = bytes < u->size ? split_front(a, u, bytes) : u;
    if (!head) {
        *rc = CCI_EOOM;
        return NULL;
    }
    int compact = a->exp->mode == CCI_EXP_COMPACT;
    for (; done < n && *rc == CCI_OK; done++) {
        cci_exp_page p = {0};
        // A page a reclaim moved: no create needed.
        int pooled = pool_take(a, vs->page, s->stream, &p);
        if (!pooled && (*rc = dev_create(a, vs->page, &p.handle)) != CCI_OK)
            break;
        *rc = dev_map(a, head->addr + done * vs->page, vs->page, p.handle);
        if (*rc != CCI_OK) {
            if (compact)
                pool_put(a, p, vs->page);
            else
                dev_release(a, p.handle);
            break;
        }
        vs->handles[first + done] = p.handle;
    }
    if (*rc == CCI_OK)
        *rc = dev_set_access(a, head->addr, bytes);  // one call for the whole run
    if (*rc != CCI_OK) {
        size_t mapped = 0;
        while (mapped < n && vs->handles[first + mapped])
            mapped++;
        // Nothing was handed out from these pages yet: no queued work can touch them.
        if (mapped && dev_unmap(a, head->addr, mapped * vs->page, vs->page) != CCI_OK)
            cci_log(CCI_LOG_WARNING, "device %d: unmapping after a failed growth failed", a->device);
        // Pages taken from the pool may still be mapped where the stream's queued work runs: back
        // they go for this stream only, until the newest retirement (no older) is done.
        cci_exp_page tag = {0};
        if (compact && a->exp->retire_tail)
            tag = (cci_exp_page){.stream = s->stream, .retire = a->exp->retire_tail->seq};
        give_pages_tagged(a, vs, first, mapped, compact, tag);
        if (head != u)
            insert_unmapped(a, head);  // give the split back
        return NULL;
    }
    vs->mapped += bytes;
    stat_pool(a->st.reserved_bytes, s->small, (int64_t)bytes);
    a->st.num_device_alloc++;
    cci__notify(a, CCI_EV_SEGMENT_MAP, s->stream, head->addr, bytes);
    return insert_free(a, head);
}

// A new segment for (stream, pool): one UNMAPPED block over its whole range.
static cci_block *new_segment(cci_allocator *a, size_t rounded, int small, uint64_t stream, int *rc)
{
    cci_exp *e = a->exp;
    size_t page = e->page[small];
    size_t va = round_up(e->va_size, page);
    if (va < round_up(rounded, page))
        va = round_up(rounded, page);
    cci_segment *s = calloc(1, sizeof *s);
    cci_vmm_seg *vs = calloc(1, sizeof *vs);
    uint64_t *handles = calloc(va / page, sizeof *handles);
    cci_block *b = cci__block_new(a);
    uintptr_t addr = 0;
    *rc = !s || !vs || !handles || !b || cci__seg_grow(a) != 0 ? CCI_EOOM : CCI_OK;
    if (*rc == CCI_OK) {
        e->n.va_reserves++;
        *rc = a->be.ops->vmm->va_reserve(a->be.ctx, a->device, va, 0, &addr);
    }
    if (*rc != CCI_OK) {
        free(s);
        free(vs);
        free(handles);
        if (b)
            cci__block_drop(a, b);
        return NULL;
    }
    *vs = (cci_vmm_seg){.page = page, .npages = va / page, .handles = handles};
    *s = (cci_segment){.addr = addr, .size = va, .stream = stream, .small = (uint8_t)small, .first = b, .vmm = vs};
    *b = (cci_block){.addr = addr, .size = va, .stream = stream, .seg = s, .small = (uint8_t)small,
                     .state = BLOCK_UNMAPPED};
    cci__seg_insert(a, s);
    stat_pool(a->st.segment, small, 1);
    return b;
}

// The lowest-addressed place in an expandable segment of (stream, pool) where free and unmapped
// blocks in a row add up to `rounded` bytes: the block that starts the row, or NULL.
static cci_block *find_room(cci_allocator *a, size_t rounded, int small, uint64_t stream)
{
    for (size_t i = 0; i < a->nsegs; i++) {
        cci_segment *s = a->segs[i];
        if (!s->vmm || s->stream != stream || s->small != small)
            continue;
        for (cci_block *u = s->first; u; u = u->next) {
            if (u->state != BLOCK_UNMAPPED)
                continue;
            cci_block *start = u->prev && u->prev->state == BLOCK_FREE ? u->prev : u;
            size_t bytes = 0;
            for (cci_block *x = start; x && bytes < rounded && (x->state == BLOCK_FREE || x->state == BLOCK_UNMAPPED);
                 x = x->next)
                bytes += x->size;
            if (bytes >= rounded)
                return start;
        }
    }
    return NULL;
}

static size_t free_mapped_bytes(const cci_allocator *a)
{
    return (size_t)(a->st.reserved_bytes[CCI_POOL_ALL].current - a->st.active_bytes[CCI_POOL_ALL].current);
}

// Bytes a growth into the row that starts at `room` must map: the row's unmapped parts, in pages,
// as far as the growth reaches (its free blocks are mapped already; a row that earlier moves left
// alternating free and unmapped, so counting all of it past the first free block would ask the
// reclaim for more than the growth maps). round_up(rounded) when a new segment is needed.
static size_t row_map_bytes(const cci_block *room, size_t rounded, size_t page)
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
static size_t compact_reclaim_target(cci_allocator *a, size_t grow_by)
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

static void compact_reclaim(cci_allocator *a, size_t target, uintptr_t keep_lo, uintptr_t keep_hi, uint64_t stream);
static void retire_poll(cci_allocator *a);

cci_block *cci__exp_grow(cci_allocator *a, size_t rounded, int small, uint64_t stream, int *rc)
{
    cci_exp *e = a->exp;
    size_t reserved = (size_t)a->st.reserved_bytes[CCI_POOL_ALL].current;
    // The fraction cap counts mapped bytes. PyTorch checks it against the segment a cudaMalloc
    // would have asked for, whatever the growth maps; compact mode against the pages it maps.
    size_t ask = e->mode == CCI_EXP_PYTORCH ? cci_segment_size(rounded) : round_up(rounded, e->page[small]);
    if (a->capped && (ask > a->allowed_max || reserved > a->allowed_max - ask)) {
        *rc = CCI_EOOM;
        return NULL;
    }
    if (e->retire_head)
        retire_poll(a);  // old mappings whose fence has passed go, and their addresses become room
    cci_block *c = find_room(a, rounded, small, stream);
    if (e->mode == CCI_EXP_COMPACT) {
        size_t grow_by = c ? row_map_bytes(c, rounded, e->page[small]) : ask;
        size_t target = compact_reclaim_target(a, grow_by);
        if (target) {
            // The row the growth will use keeps its free pages: unmapping them there only to map
            // them again would be two calls for nothing.
            e->n.reclaims++;
            e->pool_hold = grow_by;
            compact_reclaim(a, target, c ? c->addr : 0, c ? c->addr + rounded : 0, stream);
            c = find_room(a, rounded, small, stream);  // the lock may have been dropped for a wait
        }
    }
    uint64_t peak_before = (uint64_t)a->st.reserved_bytes[CCI_POOL_ALL].peak;
    c = c ? c : new_segment(a, rounded, small, stream, rc);
    if (c && c->state == BLOCK_UNMAPPED)
        c = map_front(a, c, rounded < c->size ? rounded : c->size, rc);
    while (c && c->size < rounded) {
        // The row find_room saw alternates FREE and UNMAPPED; each mapping merges into c.
        cci_block *u = c->next;
        if (!u || u->state != BLOCK_UNMAPPED) {
            *rc = CCI_EBACKEND;
            cci_log(CCI_LOG_ERROR, "device %d: expandable segment lost its unmapped tail", a->device);
            c = NULL;
            break;
        }
        size_t want = rounded - c->size;
        c = map_front(a, u, want < u->size ? want : u->size, rc);
    }
    if (e->pool_hold) {  // what the growth did not take goes back under the bound
        e->pool_hold = 0;
        pool_trim(a);
    }
    if (!c)
        return NULL;
    cci_free_set_remove(&a->free_set[small], c);
    // What stays free once the caller hands `rounded` bytes of c out, when reserved set a peak.
    uint64_t now = (uint64_t)a->st.reserved_bytes[CCI_POOL_ALL].current;
    uint64_t active = (uint64_t)a->st.active_bytes[CCI_POOL_ALL].current + rounded;
    if (now > peak_before && now > active && now - active > e->n.free_at_peak_max)
        e->n.free_at_peak_max = now - active;
    return c;
}

cci_block *cci__exp_best_fit(cci_allocator *a, cci_block *b, int small, uint64_t stream)
{
    // A block's worth here is its size plus the unmapped space right after it: walk up the free
    // set while the next block is worth less, so a block at a segment's growing end is taken
    // only when no plain block of enough size exists.
#define WORTH(x) ((x)->size + ((x)->next && (x)->next->state == BLOCK_UNMAPPED ? (x)->next->size : 0))
    for (;;) {
        cci_block *n = cci_free_set_lower_bound(&a->free_set[small], stream, b->size, b->addr + 1);
        if (!n || !b->seg->vmm || WORTH(n) >= WORTH(b))
            return b;
        b = n;
    }
#undef WORTH
}

// ---- giving pages back --------------------------------------------------------------------

// The whole pages inside a free block: [*lo, *hi), empty when lo >= hi.
static void inner_pages(const cci_block *b, uintptr_t *lo, uintptr_t *hi)
{
    const cci_segment *s = b->seg;
    size_t page = s->vmm->page;
    *lo = s->addr + round_up(b->addr - s->addr, page);
    *hi = s->addr + (b->addr + b->size - s->addr) / page * page;
}

// Splits a RECLAIMING block around its whole pages [lo, hi): the free bytes before and after them
// become *front and *back (NULL where there are none; not yet in the free set), and the pages' own
// block is returned. NULL on host out of memory, with everything put back free and mapped.
static cci_block *split_pages(cci_allocator *a, cci_block *b, uintptr_t lo, uintptr_t hi, cci_block **front,
                              cci_block **back)
{
    // b is still counted as an inactive split block; the pieces are counted as they are inserted.
    stat_pool(a->st.inactive_split, b->small, -1);
    stat_pool(a->st.inactive_split_bytes, b->small, -(int64_t)b->size);
    int has_front = lo > b->addr, has_back = hi < b->addr + b->size;
    *front = has_front ? split_front(a, b, lo - b->addr) : NULL;  // b now starts at lo
    cci_block *pages = has_back && (*front || !has_front) ? split_front(a, b, hi - b->addr) : b;
    *back = has_back ? b : NULL;  // b now starts at hi, if anything is after the pages
    if ((has_front && !*front) || !pages) {
        if (*front)
            insert_free(a, *front);
        insert_free(a, b);
        return NULL;
    }
    return pages;
}

// The pages [lo, hi) of segment s no longer count as reserved (they were unmapped, or moved).
static void pages_leave_reserved(cci_allocator *a, cci_segment *s, uintptr_t lo, uintptr_t hi)
{
    s->vmm->mapped -= hi - lo;
    stat_pool(a->st.reserved_bytes, s->small, -(int64_t)(hi - lo));
    a->st.num_device_free++;
    cci__notify(a, CCI_EV_SEGMENT_UNMAP, s->stream, lo, hi - lo);
}

static void insert_free_pieces(cci_allocator *a, cci_block *front, cci_block *back)
{
    if (front)
        insert_free(a, front);
    if (back)
        insert_free(a, back);
}

// Unmaps the pages [lo, hi) of a RECLAIMING block and puts the pieces back: free bytes before and
// after them as FREE blocks, the pages themselves as UNMAPPED address space. The pages go to the
// pool when `keep`, else back to the device. No queued work may touch them any more.
static void unmap_block(cci_allocator *a, cci_block *b, uintptr_t lo, uintptr_t hi, int keep)
{
    cci_segment *s = b->seg;
    cci_vmm_seg *vs = s->vmm;
    cci_block *front, *back, *pages = split_pages(a, b, lo, hi, &front, &back);
    if (!pages)
        return;  // host out of memory: the memory stays mapped and the bytes free
    if (dev_unmap(a, lo, hi - lo, vs->page) != CCI_OK) {
        cci_log(CCI_LOG_WARNING, "device %d: unmapping %zu free bytes failed; keeping them mapped", a->device,
                (size_t)(hi - lo));
        insert_free_pieces(a, front, back);
        insert_free(a, pages);
        return;
    }
    give_pages(a, vs, (lo - s->addr) / vs->page, (hi - lo) / vs->page, keep);
    pages_leave_reserved(a, s, lo, hi);
    insert_free_pieces(a, front, back);
    insert_unmapped(a, pages);
}

// Puts a RECLAIMING block back as it was (the device could not be synchronised).
static void unreclaim(cci_allocator *a, cci_block *b)
{
    stat_pool(a->st.inactive_split, b->small, -1);
    stat_pool(a->st.inactive_split_bytes, b->small, -(int64_t)b->size);
    insert_free(a, b);
}

// Takes a free block out of the free set for unmapping: nothing is handed out from it (and no
// later free merges into it) while the device catches up.
static void start_reclaiming(cci_allocator *a, cci_block *b)
{
    cci_free_set_remove(&a->free_set[b->small], b);
    b->state = BLOCK_RECLAIMING;
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
    cci_block *front, *back, *pages = split_pages(a, b, lo, hi, &front, &back);
    if (!pages)
        return 0;
    give_pages_tagged(a, vs, (lo - s->addr) / vs->page, (hi - lo) / vs->page, 1,
                      (cci_exp_page){.stream = r->stream, .retire = r->seq});
    pages_leave_reserved(a, s, lo, hi);
    insert_free_pieces(a, front, back);
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
static void retire_finish(cci_allocator *a, cci_exp_retire *r, int release)
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
        insert_unmapped(a, b);
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

static cci_exp_retire *retire_pop(cci_exp *e)
{
    cci_exp_retire *r = e->retire_head;
    e->retire_head = r->next;
    if (!e->retire_head)
        e->retire_tail = NULL;
    return r;
}

// Ends every retirement numbered up to `upto` (the device was synchronised after they began).
static void retire_finish_upto(cci_allocator *a, uint64_t upto)
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
        retire_finish(a, r, 1);
    }
    e->retire_tail = last;
}

// Without blocking: ends the retirements whose fence has passed, oldest first, and stops at the
// first that has not (so a page moved twice on one stream is held until the older is done). A
// fence the backend cannot vouch for falls back to a device sync. Lock held; dropped only there.
static void retire_poll(cci_allocator *a)
{
    cci_exp *e = a->exp;
    while (e->retire_head) {
        int q = a->fences->query(a->be.ctx, a->device, e->retire_head->fence);
        if (q == 0)
            break;
        if (q < 0) {
            uint64_t upto = e->retire_seq;
            if (dev_sync(a))
                retire_finish_upto(a, upto);
            break;
        }
        retire_finish(a, retire_pop(e), 1);
    }
    pool_trim(a);
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
        cci_fence f;
        if (!a->fences || a->fences->record(a->be.ctx, a->device, stream, &f) != CCI_OK)
            return 0;
        a->exp->n.stream_waits++;
        cci__unlock(a);
        int rc = a->fences->wait(a->be.ctx, a->device, f);
        cci__lock(a);
        a->fences->release(a->be.ctx, a->device, f);
        if (rc != CCI_OK)
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
static void compact_reclaim(cci_allocator *a, size_t target, uintptr_t keep_lo, uintptr_t keep_hi, uint64_t stream)
{
    size_t n = 0, cap = 0;
    victim *v = NULL;
    for (size_t i = 0; i < a->nsegs; i++) {
        cci_segment *s = a->segs[i];
        for (cci_block *b = s->vmm ? s->first : NULL; b; b = b->next) {
            uintptr_t lo, hi;
            if (b->state != BLOCK_FREE || (b->addr < keep_hi && keep_lo < b->addr + b->size))
                continue;
            inner_pages(b, &lo, &hi);
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
        start_reclaiming(a, v[take].b);
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
                unmap_block(a, v[i].b, v[i].lo, v[i].hi, 1);
            else if (!v[i].other && r)
                retire_block(a, v[i].b, v[i].lo, v[i].hi, r);
            else
                unreclaim(a, v[i].b);
        }
        if (r && r->blocks) {
            retire_append(a, r);
            // A device that has caught up (idle, or the old work long done) passes the fence at
            // once: then the old addresses are room for this very growth, as after a sync.
            retire_poll(a);
        } else if (r) {
            retire_discard(a, r);
        }
    }
    free(v);
}

static void release_segment(cci_allocator *a, cci_segment *s)
{
    cci_block *b = s->first;
    a->exp->n.va_frees++;
    if (a->be.ops->vmm->va_free(a->be.ctx, a->device, s->addr, s->size) != CCI_OK)
        cci_log(CCI_LOG_WARNING, "device %d: freeing a %zu-byte address range failed; forgetting it", a->device,
                s->size);
    cci__seg_remove(a, s);
    stat_pool(a->st.segment, s->small, -1);
    cci__block_drop(a, b);
    free(s->vmm->handles);
    free(s->vmm);
    free(s);
}

void cci__exp_release_free(cci_allocator *a)
{
    // 1. Take every free block that holds a whole page out of the free set.
    cci_block *list = NULL;
    for (size_t i = 0; i < a->nsegs; i++) {
        cci_segment *s = a->segs[i];
        for (cci_block *b = s->vmm ? s->first : NULL; b; b = b->next) {
            uintptr_t lo, hi;
            if (b->state != BLOCK_FREE)
                continue;
            inner_pages(b, &lo, &hi);
            if (lo >= hi)
                continue;
            start_reclaiming(a, b);
            b->pend_next = list;
            list = b;
        }
    }
    // 2. A page may be unmapped only when no queued work can still touch it: a block freed on
    //    its own stream is reusable there at once, but the device may still be running the
    //    kernels that used it.
    //    Old mappings still retiring behind their fence go too: the same sync covers them.
    cci_exp *e = a->exp;
    // A flush starts compact mode's churn count again: what is left mapped is what it was asked
    // for, and the churn slack comes back only if moving pages circulates again.
    e->churn_slack = 0;
    e->churn_moved = 0;
    uint64_t retire_upto = e->retire_seq;
    int synced = list || e->retire_head ? dev_sync(a) : 1;
    if (synced)
        retire_finish_upto(a, retire_upto);
    // 3. Unmap and release (this is a flush: the memory goes back), or, if the device could not
    //    be synchronised, put everything back.
    while (list) {
        cci_block *b = list;
        list = b->pend_next;
        b->pend_next = NULL;
        uintptr_t lo, hi;
        inner_pages(b, &lo, &hi);
        if (synced)
            unmap_block(a, b, lo, hi, 0);
        else
            unreclaim(a, b);
    }
    pool_drain(a, 1);
    // 4. A segment with nothing mapped is one UNMAPPED block: give its range back.
    for (size_t i = a->nsegs; i-- > 0;) {
        cci_segment *s = a->segs[i];
        if (s->vmm && !s->vmm->mapped && s->first && !s->first->next && s->first->state == BLOCK_UNMAPPED)
            release_segment(a, s);
    }
}

void cci__exp_segment_destroy(cci_allocator *a, cci_segment *s, int release)
{
    cci_vmm_seg *vs = s->vmm;
    // The first segment's teardown ends every retirement (its old mappings go without a wait, as
    // every other mapping does here) and takes the pool with it.
    while (a->exp->retire_head)
        retire_finish(a, retire_pop(a->exp), release);
    pool_drain(a, release);
    if (release) {
        // One unmap per run of mapped pages (the API charges per call), then the pages, then the
        // range.
        for (size_t i = 0; i < vs->npages;) {
            if (!vs->handles[i]) {
                i++;
                continue;
            }
            size_t j = i;
            while (j < vs->npages && vs->handles[j])
                j++;
            dev_unmap(a, s->addr + i * vs->page, (j - i) * vs->page, vs->page);
            give_pages(a, vs, i, j - i, 0);
            i = j;
        }
        a->exp->n.va_frees++;
        a->be.ops->vmm->va_free(a->be.ctx, a->device, s->addr, s->size);
    }
    free(vs->handles);
    free(vs);
    s->vmm = NULL;
}
