// SPDX-License-Identifier: MIT
// Reclaim: the deferred frees completed in batches behind one device synchronisation, and whole
// cached segments given back to the device when the pool must shrink (empty_cache, the last retry
// before an out-of-memory, oversize blocks under a split limit, garbage_collection_threshold).
// Apart from allocator.c because none of it runs on a cached allocation or free; the policy
// calls in here only when the free set cannot serve (reclaim.h).
#include <stdlib.h>

#include "reclaim.h"
#include "expandable.h"
#include "tcache.h"

// ---- deferred frees -----------------------------------------------------------------------

static void complete_pending(cci_allocator *a, uint64_t upto)
{
    while (a->pend_head && a->pend_head->pending_seq < upto) {
        cci_block *b = a->pend_head;
        a->pend_head = b->pend_next;
        if (!a->pend_head)
            a->pend_tail = NULL;
        a->pend_count--;
        a->pend_bytes -= b->size;
        cci__complete_block(a, b);
    }
}

// (reclaim.h)
int cci__sync_device(cci_allocator *a)
{
    if (!a->be.ops->synchronize)
        return CCI_OK;
    cci__unlock(a);
    int rc = a->be.ops->synchronize(a->be.ctx, a->device);
    cci__lock(a);
    if (rc != CCI_OK)
        return CCI_EBACKEND;
    a->st.num_sync_all_streams++;
    return CCI_OK;
}

int cci__sync_pending(cci_allocator *a)
{
    if (!a->pend_head)
        return 0;
    uint64_t upto = a->pend_seq;
    if (cci__sync_device(a) != CCI_OK)
        return 0;
    complete_pending(a, upto);
    return 1;
}

// ---- reclaiming ---------------------------------------------------------------------------

// Collects whole free segments from a free set, up to `cap` of them.
struct whole_list {
    cci_block **v;
    size_t n, cap;
    uint64_t clock;
    double min_age;  // GC: only blocks at least this old; <0 = any
};

static int collect_whole(cci_block *b, void *ud)
{
    struct whole_list *w = ud;
    if (!is_whole(b))
        return 0;
    if (w->min_age >= 0 && (double)(w->clock - b->gc_base) < w->min_age)
        return 0;
    w->v[w->n++] = b;
    return w->n == w->cap;
}

// Releases every whole free segment of both pools. Walks in chunks so that no host memory is
// needed for it (we may be here because the host is short of memory too).
void cci__release_cached_all(cci_allocator *a)
{
    cci_block *chunk[256];
    for (int pool = 0; pool < 2; pool++) {
        for (;;) {
            struct whole_list w = {chunk, 0, 256, 0, -1};
            cci_free_set_walk(&a->free_set[pool], collect_whole, &w);
            for (size_t i = 0; i < w.n; i++)
                cci__release_block(a, chunk[i]);
            if (w.n < w.cap)
                break;
        }
    }
    if (a->exp) {  // [expandable] free pages inside expandable segments (never whole blocks)
        cci__exp_release_free(a);
        // ... and the pages the backend keeps for reuse: this is a flush, the memory must go.
        if (a->be.ops->vmm->drain)
            a->be.ops->vmm->drain(a->be.ctx, a->device);
    }
}

// Frees cached oversize blocks that could serve this request: the smallest sufficient one, or
// else the largest ones of the stream until enough is released. Only with a split limit set.
int cci__release_available(cci_allocator *a, size_t rounded, int small, uint64_t stream)
{
    size_t limit = a->cfg.max_split_size;
    if (limit == SIZE_MAX)
        return 0;
    size_t key = rounded < limit ? limit : rounded;
    cci_block *b = cci_free_set_lower_bound(&a->free_set[small], stream, key, 0);
    if (b) {
        if (!is_whole(b))
            return 0;
        cci__release_block(a, b);
        return 1;
    }
    size_t released = 0;
    b = cci_free_set_before(&a->free_set[small], stream, key, 0);
    while (b && released < key && b->size >= limit) {
        cci_block *prev = cci_free_set_before(&a->free_set[small], b->stream, b->size, b->addr);
        if (is_whole(b)) {
            released += b->size;
            cci__release_block(a, b);
        }
        b = prev;
    }
    return released >= key;
}

struct age_sum {
    uint64_t clock;
    double total;
    size_t count;
};

static int sum_age(cci_block *b, void *ud)
{
    struct age_sum *s = ud;
    if (is_whole(b)) {
        s->total += (double)(s->clock - b->gc_base);
        s->count++;
    }
    return 0;
}

// garbage_collection_threshold: once reserved memory passes threshold × allowed maximum, give
// back whole cached large segments that have waited longest since their last reuse (age counted
// in free-set searches: at or above the average age of such segments first), until under it.
void cci__garbage_collect(cci_allocator *a)
{
    size_t limit = (size_t)(a->cfg.gc_threshold * (double)a->allowed_max);
    size_t reserved = (size_t)a->st.reserved_bytes[CCI_POOL_ALL].current;
    if (reserved <= limit)
        return;
    size_t target = reserved - limit, reclaimed = 0;
    uint64_t clock = a->free_searches[0];
    struct age_sum s = {clock, 0, 0};
    cci_free_set_walk(&a->free_set[0], sum_age, &s);
    cci_block *chunk[256];
    int freed = 1;
    while (reclaimed < target && freed && s.count > 0) {
        double threshold = s.total / (double)s.count;
        freed = 0;
        for (;;) {
            struct whole_list w = {chunk, 0, 256, clock, threshold};
            cci_free_set_walk(&a->free_set[0], collect_whole, &w);
            for (size_t i = 0; i < w.n; i++) {
                s.total -= (double)(clock - chunk[i]->gc_base);
                s.count--;
                reclaimed += chunk[i]->size;
                cci__release_block(a, chunk[i]);
                freed = 1;
            }
            if (w.n < w.cap)
                break;
        }
    }
}
