// SPDX-License-Identifier: MIT
// Fenced frees a thread keeps: its own small batches behind its own fences.
//
// With a non-blocking stream alive, a cudaFree'd block may still be read by any stream, so it is
// freed FENCED: reusable once a fence recorded after the free has passed (fenced.c). On the
// locked path every such free and every allocation after it took the allocator's lock, and a
// thread-per-stream server made of it a queue: on the H200 (2026-11-28) eight threads together
// ran no faster than one. Here a thread keeps its own fenced frees of small blocks instead:
//   - a free enters the thread's open batch, its allocation and active figures counted at once
//     as a magazine free is (tcache.h's credits); the block is KEPT: in no free set, and in no
//     free run of its neighbours until it goes back to the allocator;
//   - every HELD_BATCH frees (more among many threads: held_batch_frees), or
//     HELD_BATCH_BYTES, the thread records one fence for all streams, without the lock (the
//     backend's fence operations are safe from any thread), and the batch waits behind it;
//   - an allocation its magazines miss asks the oldest batch's fence (its batches are recorded
//     in order by one thread for every stream: they pass in order); once it has passed, the
//     batch's blocks serve this thread's allocations of their size on their stream.
// The rule is the locked path's, batch for batch: no block is handed out before a fence recorded
// after its free has passed. What stays apart from the allocator is bounded (HELD_MAX_BYTES, small
// blocks only) and goes back to it whole: before the pool would grow past the kept batches'
// allowance, and at empty_cache, layouts, thread exit and the last resort before an OOM, the
// unpassed blocks into the allocator's open batch. A locked allocation of the thread takes only a
// passed block of its size (cci__tc_held_take) and leaves the rest with the thread.
//
// Events: a kept free is logged as its request (CCI_FAST_FENCED), its completion when the
// thread finds its fence passed (CCI_FAST_COMPLETED), or at the stop that completes it.
#include "tcache_fast.h"

#include <stddef.h>

// The open batch behind a fence, if a closed slot is free. A failed record keeps it open and
// stops further kept frees until a stop hands it to the allocator (which defers what it cannot
// fence).
static void close_open(cci_allocator *a, tc_held *h)
{
    if (!h->open || h->nclosed == HELD_CLOSED || h->no_fence)
        return;
    cci_fence f;
    if (a->fences->record(a->be.ctx, a->device, CCI_STREAM_ALL, &f) != CCI_OK) {
        h->no_fence = 1;
        return;
    }
    h->records++;
    h->closed[h->nclosed++] = (held_batch){f, h->open, h->nopen};
    h->open = h->open_tail = NULL;
    h->nopen = 0;
    h->open_bytes = 0;
}

// Whether the open batch is as long as a batch gets (`frees`: held_batch_frees, read once a free).
static int open_full(const tc_held *h, unsigned frees)
{
    return h->nopen >= frees || h->open_bytes >= HELD_BATCH_BYTES;
}

static void drop_oldest(tc_held *h)
{
    for (unsigned i = 1; i < h->nclosed; i++)
        h->closed[i - 1] = h->closed[i];
    h->nclosed--;
}

// Inside the gate: the oldest batch, if its fence has passed, joins the passed blocks, its
// completions logged. CCI_OK when it did, HELD_WAIT when it has not passed, LOG_FULL.
static int advance(cci_allocator *a, cci_tc *tc)
{
    tc_held *h = &tc->held;
    held_batch *old = &h->closed[0];
    // Room for the completions and for the allocation's own record after them.
    if (a->nobs && tc->log_at + old->n + 1 > tc->log_end)
        return LOG_FULL;
    int p = cci__fence_passed(a, old->fence, CCI_ASK_IN_PASSING);
    if (p <= 0) {
        if (p < 0)
            h->no_fence = 1;  // the stop hands the batch to the allocator, which defers it
        return HELD_WAIT;
    }
    a->fences->release(a->be.ctx, a->device, old->fence);
    cci_block *last = NULL;
    for (cci_block *b = old->head; b; b = b->pend_next) {
        if (a->nobs)
            log_record(tc, b->addr, b->size, CCI_FAST_COMPLETED, b->stream);
        last = b;
    }
    last->pend_next = h->passed;
    h->passed = old->head;
    drop_oldest(h);
    close_open(a, h);  // the open batch, full or not, goes behind a fence while a slot is free
    return CCI_OK;
}

// A passed block of `rounded` bytes on `stream` among the first HELD_SCAN, unlinked, or NULL.
static cci_block *take_passed(tc_held *h, size_t rounded, uint64_t stream)
{
    cci_block **at = &h->passed;
    for (int i = 0; *at && i < HELD_SCAN; i++, at = &(*at)->pend_next) {
        cci_block *b = *at;
        if (b->size == rounded && b->stream == stream) {
            *at = b->pend_next;
            return b;
        }
    }
    return NULL;
}

int cci__tc_alloc_held(cci_allocator *a, cci_tc *tc, size_t rounded, size_t requested, uint64_t stream,
                       uintptr_t *out)
{
    tc_held *h = &tc->held;
    if (!log_has_room(a, tc))
        return LOG_FULL;
    cci_block *b = take_passed(h, rounded, stream);
    while (!b && h->nclosed) {
        int rc = advance(a, tc);
        if (rc != CCI_OK)
            return rc;
        b = take_passed(h, rounded, stream);
    }
    if (!b)
        return h->passed ? MAG_MISS : HELD_WAIT;
    delta v = {.pool = block_pool(b),
               .grow = {{1, (int64_t)b->size}, {(int64_t)requested, (int64_t)is_oversize(a, b->size)}},
               .split = {0, 0}};  // a kept free foresaw no merge (free_in_gate)
    credits after;
    if (!covered(tc, &v, ALLOCATING, &after)) {
        b->pend_next = h->passed;  // the locked path serves it from here (cci__tc_held_take)
        h->passed = b;
        return CREDIT_SHORT;
    }
    spend(tc, &v, ALLOCATING, &after);
    h->nheld--;
    h->bytes -= b->size;
    __atomic_store_n(&b->state, BLOCK_ALLOCATED, __ATOMIC_RELAXED);  // neighbours read it
    b->requested = requested;
    tc->recent = b;
    tc->dirty = 1;
    if (a->nobs)
        log_record(tc, b->addr, b->size, requested, stream);
    *out = b->addr;
    return CCI_OK;
}

// Inside the gate: b, this thread's, into the open batch. CCI_OK, CCI_ENOTOURS (not a block it
// keeps), KEEP_FULL, CREDIT_SHORT or LOG_FULL.
static int free_in_gate(cci_allocator *a, cci_tc *tc, uintptr_t ptr, uint64_t stream)
{
    cci_block *b = tc->recent;
    if (b->addr != ptr)
        b = cci_live_find(&tc->table, ptr);
    tc_held *h = &tc->held;
    if (!b || b->state != BLOCK_ALLOCATED || !b->small)
        return CCI_ENOTOURS;
    unsigned frees = held_batch_frees(a);
    if (h->no_fence || open_full(h, frees) || h->bytes + b->size > HELD_MAX_BYTES)
        return KEEP_FULL;
    if (!log_has_room(a, tc))
        return LOG_FULL;
    // No merge is foreseen: like a block behind the allocator's fences, a kept block joins no free
    // run (its neighbours' frees see it as in use) until it goes back to the allocator, where the
    // merge is counted. So a kept free never raises the inactive-split figures, whose credits
    // under their peaks had sent a thread's frees to the lock at every new interleaving.
    delta v;
    credits after;
    free_delta(a, b, (kind_pair){0, 0}, &v);
    if (!covered(tc, &v, FREEING, &after))
        return CREDIT_SHORT;
    spend(tc, &v, FREEING, &after);
    __atomic_store_n(&b->state, BLOCK_KEPT, __ATOMIC_RELAXED);
    b->pend_next = NULL;
    if (h->open_tail)
        h->open_tail->pend_next = b;
    else
        h->open = b;
    h->open_tail = b;
    h->nopen++;
    h->open_bytes += b->size;
    h->nheld++;
    h->bytes += b->size;
    tc->dirty = 1;
    if (a->nobs)
        log_record(tc, b->addr, b->size, CCI_FAST_FENCED, stream);
    if (open_full(h, frees))
        close_open(a, h);
    return CCI_OK;
}

static int try_free(cci_allocator *a, cci_tc *tc, uintptr_t ptr, uint64_t stream)
{
    if (enter_solo(a, tc)) {
        int rc = free_in_gate(a, tc, ptr, stream);
        leave_inline(tc, 1);
        return rc;
    }
    return tc_free_gated(a, tc, ptr, stream, free_in_gate);
}

int cci__tc_free_fenced(cci_allocator *a, uintptr_t ptr, uint64_t stream)
{
    cci_tc *tc = my_cache(a);
    if (!tc || tc->aside)
        return CCI_ENOTOURS;
    int rc = try_free(a, tc, ptr, stream);
    if (rc == LOG_FULL) {
        cci_allocator_flush_events(a);  // a stop that moves no block
        rc = try_free(a, tc, ptr, stream);
    }
    return free_answer(tc, rc);
}

// ---- the locked side ------------------------------------------------------------------------

// Where a list of kept blocks goes when it leaves the thread (release_list).
enum {
    TO_PENDING,    // into the allocator's open batch: its fence has not passed
    TO_FREE,       // to the free set, its completion told now
    TO_FREE_TOLD,  // to the free set, its completion told already (the thread found it passed)
};

// Lock held: a list of kept blocks leaves the thread.
static void release_list(cci_allocator *a, cci_tc *tc, cci_block *b, int to)
{
    tc_held *h = &tc->held;
    for (cci_block *n; b; b = n) {
        n = b->pend_next;
        h->nheld--;
        h->bytes -= b->size;
        table_remove(tc, b);
        if (to == TO_PENDING && cci__free_unfenced(a)) {
            cci__complete_held(a, b);  // the order comes before its reuse (fenced.c)
        } else if (to == TO_PENDING) {
            cci__release_held_pending(a, b);
        } else if (to == TO_FREE) {
            cci__complete_held(a, b);
        } else {
            b->state = BLOCK_ALLOCATED;
            cci__release_cached(a, b, 0, 0);  // no merge foreseen (free_in_gate)
        }
    }
}

void cci__tc_held_drain(cci_allocator *a, cci_tc *tc)
{
    tc_held *h = &tc->held;
    cci_block *passed = h->passed;
    h->passed = NULL;
    release_list(a, tc, passed, TO_FREE_TOLD);
    // The closed batches, oldest first: completed where their fence has passed, else into the
    // allocator's open batch, as is the open batch (no fence yet), which it fences with its own
    // frees.
    while (h->nclosed) {
        int p = cci__fence_passed(a, h->closed[0].fence, CCI_ASK_IN_PASSING);
        a->fences->release(a->be.ctx, a->device, h->closed[0].fence);
        cci_block *head = h->closed[0].head;
        drop_oldest(h);
        release_list(a, tc, head, p == 1 ? TO_FREE : TO_PENDING);
    }
    cci_block *open = h->open;
    h->open = h->open_tail = NULL;
    h->nopen = 0;
    h->open_bytes = 0;
    release_list(a, tc, open, TO_PENDING);
    h->no_fence = 0;
}

cci_block *cci__tc_held_take(cci_allocator *a, size_t rounded, uint64_t stream)
{
    cci_tc *tc = a->tc_mine;
    if (!tc || !tc->held.passed)
        return NULL;
    // (The closed batches are the fast path's to advance: their completions go to its log.)
    tc_held *h = &tc->held;
    cci_block *b = take_passed(h, rounded, stream);
    if (b) {
        h->nheld--;
        h->bytes -= b->size;
    }
    return b;
}

// Whether t's fast paths have been idle for the last HELD_QUIET_STOPS stops (fold_cache counts).
static int idle(const cci_tc *t) { return t->held.quiet >= HELD_QUIET_STOPS; }

// Whether a thread other than tc's is at work.
static int others_at_work(const cci_allocator *a, const cci_tc *tc)
{
    for (const cci_tc *t = a->tcs; t; t = t->next)
        if (t != tc && !idle(t))
            return 1;
    return 0;
}

int cci__tc_held_may_grow(const cci_allocator *a, size_t rounded)
{
    // The allowance is what the threads may keep at once; it is spent once (until empty_cache).
    // Growing only while no batch was behind a fence was not enough: eight threads on an H200
    // (2026-11-28) found their newest fence pending at most misses, gave their batches back each
    // time, and spent their time in the lock's stops. In the virtual-memory modes, whose promise
    // is to reserve what is allocated, only while threads run side by side: there the batches are
    // what keeps each thread off the lock (eight threads of a thread-per-stream loop ran 8-80x slower
    // under compact_segments without it); a thread at work alone, or while the others are idle
    // (PyTorch's main and backward threads take turns), gives its kept frees back instead.
    const cci_tc *tc = a->tc_mine;
    if (!tc || !tc->held.nheld || !cci_is_small(rounded) || (a->exp && !others_at_work(a, tc)))
        return 0;
    return a->held_grown < (size_t)a->ntcs * HELD_MAX_BYTES;
}

int cci__tc_held_give_back(cci_allocator *a, int small)
{
    // The calling thread's kept frees go back (in the virtual-memory modes for a small request
    // only). There, so do those of every idle thread (the lock has stopped their caches): a kept
    // block joins no free run, and under compact_segments resnet's backward thread kept 20 MiB of
    // small pages apart from the main thread's allocations that way. A thread still at work keeps
    // them: taking every thread's at each growth had eight threads of a thread-per-stream loop
    // queue at the lock (docs/benchmarks.md, 'Kept frees in the virtual-memory modes').
    const cci_tc *mine = a->tc_mine;
    int any = 0;
    for (cci_tc *t = a->tcs; t; t = t->next) {
        int take = t == mine ? !a->exp || small : a->exp && small && idle(t);
        if (take && t->held.nheld) {
            cci__tc_held_drain(a, t);
            any = 1;
        }
    }
    return any;
}

void cci__tc_held_forget(cci_allocator *a, cci_tc *tc)
{
    tc_held *h = &tc->held;
    for (unsigned i = 0; i < h->nclosed; i++)
        a->fences->release(a->be.ctx, a->device, h->closed[i].fence);
    *h = (tc_held){0};
}
