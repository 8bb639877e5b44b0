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
//   The core asks the device for pages only when the pool grows, never on a cached allocation or
//   free. Every call on the VMM group is counted (cci_alloc_vmm_counts) for the reports.
#include <stdlib.h>
#include <string.h>

#include "expandable.h"
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

void cci__exp_fini(cci_allocator *a)
{
    if (a->exp)
        free(a->exp->pool);
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

// Keeps an unmapped page to map again, or releases it when the pool is full (or the host is out
// of memory for the pool's list).
static void pool_put(cci_allocator *a, uint64_t h, size_t page)
{
    cci_exp *e = a->exp;
    if ((e->pool_n + 1) * page <= pool_limit(a)) {
        if (e->pool_n == e->pool_cap) {
            size_t cap = e->pool_cap ? e->pool_cap * 2 : 64;
            uint64_t *p = realloc(e->pool, cap * sizeof *p);
            if (p) {
                e->pool = p;
                e->pool_cap = cap;
            }
        }
        if (e->pool_n < e->pool_cap) {
            e->pool[e->pool_n++] = h;
            if (e->pool_n * page > e->n.pool_bytes_peak)
                e->n.pool_bytes_peak = e->pool_n * page;
            return;
        }
    }
    dev_release(a, h);
}

// A pooled page for a segment of `page`-byte pages, or 0. Only compact mode pools, and all its
// pages have the granularity's size.
static uint64_t pool_take(cci_allocator *a, size_t page)
{
    cci_exp *e = a->exp;
    if (!e->pool_n || page != e->granularity || e->mode != CCI_EXP_COMPACT)
        return 0;
    e->n.pool_hits++;
    return e->pool[--e->pool_n];
}

// Releases the pooled pages beyond the pool's bound (after a growth that held more for itself).
static void pool_trim(cci_allocator *a)
{
    cci_exp *e = a->exp;
    while (e->pool_n && e->pool_n * e->granularity > pool_limit(a))
        dev_release(a, e->pool[--e->pool_n]);
}

// Releases every pooled page (a flush), or forgets them when the device is gone (!release).
static void pool_drain(cci_allocator *a, int release)
{
    cci_exp *e = a->exp;
    while (e->pool_n) {
        uint64_t h = e->pool[--e->pool_n];
        if (release)
            dev_release(a, h);
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
    cci_tree_insert(&a->free_tree[b->small], b);
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
// the device, and forgets them.
static void give_pages(cci_allocator *a, cci_vmm_seg *vs, size_t first, size_t n, int keep)
{
    for (size_t i = first; i < first + n; i++) {
        if (vs->handles[i] && keep)
            pool_put(a, vs->handles[i], vs->page);
        else if (vs->handles[i])
            dev_release(a, vs->handles[i]);
        vs->handles[i] = 0;
    }
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
        uint64_t h = pool_take(a, vs->page);  // a page a reclaim unmapped: no create needed
        if (!h && (*rc = dev_create(a, vs->page, &h)) != CCI_OK)
            break;
        *rc = dev_map(a, head->addr + done * vs->page, vs->page, h);
        if (*rc != CCI_OK) {
            if (compact)
                pool_put(a, h, vs->page);
            else
                dev_release(a, h);
            break;
        }
        vs->handles[first + done] = h;
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
        give_pages(a, vs, first, mapped, compact);
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

// Bytes a growth into the row that starts at `room` must map: the row's unmapped part, in pages
// (its free blocks are mapped already). round_up(rounded) when a new segment is needed.
static size_t row_map_bytes(const cci_block *room, size_t rounded, size_t page)
{
    size_t have = 0;
    for (const cci_block *x = room; x && have < rounded && x->state == BLOCK_FREE; x = x->next)
        have += x->size;
    return have >= rounded ? 0 : round_up(rounded - have, page);
}

// Compact mode: how many free mapped bytes to unmap before a growth that maps `grow_by` bytes;
// 0 for none, SIZE_MAX for all that can be.
static size_t compact_reclaim_target(const cci_allocator *a, size_t grow_by)
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
    // Enough that the growth stays under the peak, or that no more than the slack stays free,
    // whichever is less; plus part of the slack, so that the next growths find pooled pages and
    // room under the peak without another device sync.
    size_t over_peak = reserved + grow_by - peak, over_slack = free - slack;
    return (over_peak < over_slack ? over_peak : over_slack) + slack / COMPACT_EXTRA_DIVISOR;
}

static void compact_reclaim(cci_allocator *a, size_t target, uintptr_t keep_lo, uintptr_t keep_hi);

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
    cci_block *c = find_room(a, rounded, small, stream);
    if (e->mode == CCI_EXP_COMPACT) {
        size_t grow_by = c ? row_map_bytes(c, rounded, e->page[small]) : ask;
        size_t target = compact_reclaim_target(a, grow_by);
        if (target) {
            // The row the growth will use keeps its free pages: unmapping them there only to map
            // them again would be two calls for nothing.
            e->n.reclaims++;
            e->pool_hold = grow_by;
            compact_reclaim(a, target, c ? c->addr : 0, c ? c->addr + rounded : 0);
            c = find_room(a, rounded, small, stream);  // the lock was dropped for the sync
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
    cci_tree_remove(&a->free_tree[small], c);
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
        cci_block *n = cci_tree_lower_bound(a->free_tree[small], stream, b->size, b->addr + 1);
        if (!n || n->stream != stream || !b->seg->vmm || WORTH(n) >= WORTH(b))
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

// Unmaps the pages [lo, hi) of a RECLAIMING block and puts the pieces back: free bytes before and
// after them as FREE blocks, the pages themselves as UNMAPPED address space. The pages go to the
// pool when `keep`, else back to the device.
static void unmap_block(cci_allocator *a, cci_block *b, uintptr_t lo, uintptr_t hi, int keep)
{
    cci_segment *s = b->seg;
    cci_vmm_seg *vs = s->vmm;
    // b is still counted as an inactive split block; the pieces are counted as they are inserted.
    stat_pool(a->st.inactive_split, b->small, -1);
    stat_pool(a->st.inactive_split_bytes, b->small, -(int64_t)b->size);
    int has_front = lo > b->addr, has_back = hi < b->addr + b->size;
    cci_block *front = has_front ? split_front(a, b, lo - b->addr) : NULL;  // b now starts at lo
    cci_block *pages = has_back && (front || !has_front) ? split_front(a, b, hi - b->addr) : b;
    cci_block *back = has_back ? b : NULL;  // b now starts at hi, if anything is after the pages
    if ((has_front && !front) || !pages) {
        // Host out of memory: leave the memory mapped and the bytes free.
        if (front)
            insert_free(a, front);
        insert_free(a, b);
        return;
    }
    if (dev_unmap(a, lo, hi - lo, vs->page) != CCI_OK) {
        cci_log(CCI_LOG_WARNING, "device %d: unmapping %zu free bytes failed; keeping them mapped", a->device,
                (size_t)(hi - lo));
        if (front)
            insert_free(a, front);
        if (back)
            insert_free(a, back);
        insert_free(a, pages);
        return;
    }
    give_pages(a, vs, (lo - s->addr) / vs->page, (hi - lo) / vs->page, keep);
    vs->mapped -= hi - lo;
    stat_pool(a->st.reserved_bytes, s->small, -(int64_t)(hi - lo));
    a->st.num_device_free++;
    cci__notify(a, CCI_EV_SEGMENT_UNMAP, s->stream, lo, hi - lo);
    if (front)
        insert_free(a, front);
    if (back)
        insert_free(a, back);
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
    cci_tree_remove(&a->free_tree[b->small], b);
    b->state = BLOCK_RECLAIMING;
}

typedef struct victim {
    cci_block *b;
    uintptr_t lo, hi;  // the pages to unmap, whole pages inside b
} victim;

static int by_pages_desc(const void *x, const void *y)
{
    const victim *p = x, *q = y;
    size_t a = p->hi - p->lo, b = q->hi - q->lo;
    return a < b ? 1 : a > b ? -1 : (p->lo > q->lo) - (p->lo < q->lo);  // ties by address: deterministic
}

// Compact mode's reclaim before a growth: unmaps at least `target` bytes of free pages (all of
// them for SIZE_MAX) outside [keep_lo, keep_hi), the largest free runs first so that each unmap
// call (~22 us on an H100 whatever it spans) frees as much as it can, and only the tail pages of
// the last run it needs. The pages go to the pool for the growth to map again. Segments stay, even
// when nothing is left mapped in them: the pool holds pages only while a segment does, which is
// what lets teardown release them. Lock held; dropped around the device sync.
static void compact_reclaim(cci_allocator *a, size_t target, uintptr_t keep_lo, uintptr_t keep_hi)
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
            if (n == cap) {
                victim *nv = realloc(v, (cap = cap ? cap * 2 : 64) * sizeof *v);
                if (!nv) {  // host out of memory: grow without giving pages back this time
                    free(v);
                    return;
                }
                v = nv;
            }
            v[n++] = (victim){b, lo, hi};
        }
    }
    if (n)  // v is NULL when nothing was found: qsort must not see it
        qsort(v, n, sizeof *v, by_pages_desc);
    size_t take = 0, got = 0;
    for (; take < n && got < target; take++) {
        size_t page = v[take].b->seg->vmm->page, bytes = v[take].hi - v[take].lo;
        if (target != SIZE_MAX && bytes > target - got)  // the tail pages the target still needs
            v[take].lo = v[take].hi - round_up(target - got, page);
        got += v[take].hi - v[take].lo;
        start_reclaiming(a, v[take].b);
    }
    if (take) {
        int synced = dev_sync(a);  // no page unmapped while queued work may still touch it
        for (size_t i = 0; i < take; i++) {
            if (synced)
                unmap_block(a, v[i].b, v[i].lo, v[i].hi, 1);
            else
                unreclaim(a, v[i].b);
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
    int synced = list ? dev_sync(a) : 1;
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
    pool_drain(a, release);  // the first segment's teardown takes the pool with it
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
