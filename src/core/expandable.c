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
// - CCI_EXP_COMPACT (compact_segments:True, ours, and the default where the device offers the
//   virtual-memory API) maps pages of the device's granularity in both
//   pools, and moves free pages to where a growth needs them rather than reserving more
//   (compact.c, which holds its page pool, churn rule and reclaim).
//   The core asks the device for pages only when the pool grows, never on a cached allocation or
//   free. Every call on the VMM group is counted (cci_alloc_vmm_counts) for the reports.
// Compact mode's large-pool page in granules, settable at build time to measure another page
// (-DCOMPACT_LARGE_PAGE_GRANULES=4: 8 MiB pages cut the driver calls' host time 2-3x but doubled
// resnet's fences and its wall time on an H200; docs/benchmarks.md, "JAX's host wait priced,
// driver costs per handle, batch and page shapes").
#ifndef COMPACT_LARGE_PAGE_GRANULES
#define COMPACT_LARGE_PAGE_GRANULES 1
#endif
#include <stdlib.h>
#include <string.h>

#include "expandable_impl.h"
#include "grow.h"

#define PYTORCH_SMALL_PAGE ((size_t)2 << 20)
#define PYTORCH_LARGE_PAGE ((size_t)20 << 20)
// Address space per segment when the device's size is unknown (or the simulated device is
// unlimited): room for any realistic pool without ever mapping it.
#define DEFAULT_VA ((size_t)256 << 30)

// ---- setup --------------------------------------------------------------------------------

int cci__exp_init(cci_allocator *a)
{
    a->exp = NULL;
    // compact_segments:False with expandable_segments unset or False asks nothing of the device:
    // its virtual-memory API is not even probed.
    if (!a->cfg.compact_segments && !a->cfg.expandable_segments)
        return 0;
    const cci_backend_vmm_ops *v = a->be.ops->vmm;
    size_t g = (a->be.ops->caps & CCI_CAP_VMM) && v ? v->granularity(a->be.ctx, a->device) : 0;
    // An unset compact_segments is settled here, for this device, and kept in a->cfg so that the
    // reports print (and the what-ifs replay) the mode in effect, not "unset".
    cci_config_resolve(&a->cfg, g != 0);
    cci_exp_mode mode = a->cfg.compact_segments      ? CCI_EXP_COMPACT
                        : a->cfg.expandable_segments ? CCI_EXP_PYTORCH
                                                     : 0;
    if (!mode) {  // only the default ends here: no warning, it asked for nothing (the backend's
                  // probe already says at info level that the device lacks the API)
        cci_log(CCI_LOG_DEBUG, "device %d: ordinary segments (the default compact segments need the "
                              "virtual-memory API, which this device does not offer)", a->device);
        return 0;
    }
    if (!g) {  // asked for by name: the user should know it is not in effect
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
        e->page[0] = g * COMPACT_LARGE_PAGE_GRANULES;
        e->page[1] = g;
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
    if (a->exp) {
        while (a->exp->retire_head)  // none after a teardown; forgotten, never touched
            free(cci__exp_retire_pop(a->exp));
        free(a->exp->pool);
    }
    free(a->exp);
    a->exp = NULL;
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
void cci__exp_insert_unmapped(cci_allocator *a, cci_block *b)
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
void cci__exp_give_pages_tagged(cci_allocator *a, cci_vmm_seg *vs, size_t first, size_t n, int keep, cci_exp_page tag)
{
    for (size_t i = first; i < first + n; i++) {
        if (vs->handles[i] && keep)
            cci__exp_pool_put(a, (cci_exp_page){.handle = vs->handles[i], .stream = tag.stream, .retire = tag.retire},
                     vs->page);
        else if (vs->handles[i])
            dev_release(a, vs->handles[i]);
        vs->handles[i] = 0;
    }
}

static void give_pages(cci_allocator *a, cci_vmm_seg *vs, size_t first, size_t n, int keep)
{
    cci__exp_give_pages_tagged(a, vs, first, n, keep, (cci_exp_page){0});
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
        int pooled = cci__exp_pool_take(a, vs->page, s->stream, &p);
        if (!pooled && (*rc = dev_create(a, vs->page, &p.handle)) != CCI_OK)
            break;
        *rc = dev_map(a, head->addr + done * vs->page, vs->page, p.handle);
        if (*rc != CCI_OK) {
            if (compact)
                cci__exp_pool_put(a, p, vs->page);
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
        cci__exp_give_pages_tagged(a, vs, first, mapped, compact, tag);
        if (head != u)
            cci__exp_insert_unmapped(a, head);  // give the split back
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


cci_block *cci__exp_grow(cci_allocator *a, size_t rounded, int small, uint64_t stream, int *rc)
{
    cci_exp *e = a->exp;
    // More than the device holds (or than an address range can be rounded to) can never be mapped:
    // said at once, before a segment's book-keeping is sized for it (a range of 2^63 bytes would
    // want a page table of 2^42 entries).
    if (rounded > (a->capacity ? a->capacity : SIZE_MAX / 2) || rounded > SIZE_MAX / 2) {
        *rc = CCI_EOOM;
        return NULL;
    }
    size_t reserved = (size_t)a->st.reserved_bytes[CCI_POOL_ALL].current;
    // The fraction cap counts mapped bytes. PyTorch checks it against the segment a cudaMalloc
    // would have asked for, whatever the growth maps; compact mode against the pages it maps.
    size_t ask = e->mode == CCI_EXP_PYTORCH ? cci_segment_size(&a->cfg, rounded) : round_up(rounded, e->page[small]);
    if (a->capped && (ask > a->allowed_max || reserved > a->allowed_max - ask)) {
        *rc = CCI_EOOM;
        return NULL;
    }
    if (e->retire_head)
        cci__exp_retire_poll(a);  // old mappings whose fence has passed go: their addresses become room
    cci_block *c = find_room(a, rounded, small, stream);
    if (e->mode == CCI_EXP_COMPACT) {
        size_t grow_by = c ? cci__exp_row_map_bytes(c, rounded, e->page[small]) : ask;
        size_t target = cci__exp_reclaim_target(a, grow_by);
        if (target) {
            // The row the growth will use keeps its free pages: unmapping them there only to map
            // them again would be two calls for nothing.
            e->n.reclaims++;
            e->pool_hold = grow_by;
            cci__exp_reclaim(a, target, c ? c->addr : 0, c ? c->addr + rounded : 0, stream);
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
        cci__exp_pool_trim(a);
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
void cci__exp_inner_pages(const cci_block *b, uintptr_t *lo, uintptr_t *hi)
{
    const cci_segment *s = b->seg;
    size_t page = s->vmm->page;
    *lo = s->addr + round_up(b->addr - s->addr, page);
    *hi = s->addr + (b->addr + b->size - s->addr) / page * page;
}

// Splits a RECLAIMING block around its whole pages [lo, hi): the free bytes before and after them
// become *front and *back (NULL where there are none; not yet in the free set), and the pages' own
// block is returned. NULL on host out of memory, with everything put back free and mapped.
cci_block *cci__exp_split_pages(cci_allocator *a, cci_block *b, uintptr_t lo, uintptr_t hi, cci_block **front,
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
void cci__exp_pages_leave_reserved(cci_allocator *a, cci_segment *s, uintptr_t lo, uintptr_t hi)
{
    s->vmm->mapped -= hi - lo;
    stat_pool(a->st.reserved_bytes, s->small, -(int64_t)(hi - lo));
    a->st.num_device_free++;
    cci__fence_slack_charge(a, -(int64_t)(hi - lo));
    cci__notify(a, CCI_EV_SEGMENT_UNMAP, s->stream, lo, hi - lo);
}

void cci__exp_insert_free_pieces(cci_allocator *a, cci_block *front, cci_block *back)
{
    if (front)
        insert_free(a, front);
    if (back)
        insert_free(a, back);
}

// Unmaps the pages [lo, hi) of a RECLAIMING block and puts the pieces back: free bytes before and
// after them as FREE blocks, the pages themselves as UNMAPPED address space. The pages go to the
// pool when `keep`, else back to the device. No queued work may touch them any more.
void cci__exp_unmap_block(cci_allocator *a, cci_block *b, uintptr_t lo, uintptr_t hi, int keep)
{
    cci_segment *s = b->seg;
    cci_vmm_seg *vs = s->vmm;
    cci_block *front, *back, *pages = cci__exp_split_pages(a, b, lo, hi, &front, &back);
    if (!pages)
        return;  // host out of memory: the memory stays mapped and the bytes free
    if (dev_unmap(a, lo, hi - lo, vs->page) != CCI_OK) {
        cci_log(CCI_LOG_WARNING, "device %d: unmapping %zu free bytes failed; keeping them mapped", a->device,
                (size_t)(hi - lo));
        cci__exp_insert_free_pieces(a, front, back);
        insert_free(a, pages);
        return;
    }
    give_pages(a, vs, (lo - s->addr) / vs->page, (hi - lo) / vs->page, keep);
    cci__exp_pages_leave_reserved(a, s, lo, hi);
    cci__exp_insert_free_pieces(a, front, back);
    cci__exp_insert_unmapped(a, pages);
}

// Puts a RECLAIMING block back as it was (the device could not be synchronised).
void cci__exp_unreclaim(cci_allocator *a, cci_block *b)
{
    stat_pool(a->st.inactive_split, b->small, -1);
    stat_pool(a->st.inactive_split_bytes, b->small, -(int64_t)b->size);
    insert_free(a, b);
}

// Takes a free block out of the free set for unmapping: nothing is handed out from it (and no
// later free merges into it) while the device catches up.
void cci__exp_start_reclaiming(cci_allocator *a, cci_block *b)
{
    cci_free_set_remove(&a->free_set[b->small], b);
    b->state = BLOCK_RECLAIMING;
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
            cci__exp_inner_pages(b, &lo, &hi);
            if (lo >= hi)
                continue;
            cci__exp_start_reclaiming(a, b);
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
        cci__exp_retire_finish_upto(a, retire_upto);
    // 3. Unmap and release (this is a flush: the memory goes back), or, if the device could not
    //    be synchronised, put everything back.
    while (list) {
        cci_block *b = list;
        list = b->pend_next;
        b->pend_next = NULL;
        uintptr_t lo, hi;
        cci__exp_inner_pages(b, &lo, &hi);
        if (synced)
            cci__exp_unmap_block(a, b, lo, hi, 0);
        else
            cci__exp_unreclaim(a, b);
    }
    cci__exp_pool_drain(a, 1);
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
        cci__exp_retire_finish(a, cci__exp_retire_pop(a->exp), release);
    cci__exp_pool_drain(a, release);
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
