// SPDX-License-Identifier: MIT
// Fenced frees: a freed block is reusable once a fence recorded after its free has passed, not
// after a synchronisation of the whole device.
//
// Frees gather in an open batch. The batch gets its one fence when it is closed: when it reaches
// the deferred queue's bounds (PENDING_BATCH blocks or the byte limit), or when an allocation would
// otherwise grow the pool. A burst of frees thus costs one fence record, and closing at a miss
// lets exactly the frees issued so far pass as early as the device allows.
//
// Every fence is recorded for CCI_STREAM_ALL. A block freed with cudaFree may have been used by any
// of the program's streams (CUDA has no record of which), and the core does not track them; a fence
// on the block's own stream would let a block used on a second stream be reused while that stream
// still writes it. The backend knows which streams exist and makes "all" as cheap as they allow
// (one event on the legacy stream covers every blocking stream). A further gain of one key for all:
// fences are recorded in order on the same set of streams, so they pass in record order, and the
// closed batches form a FIFO whose oldest entry is the only one worth querying.
//
// Nothing here blocks with the lock held: queries are cheap and non-blocking, and the one wait
// (for the oldest fence that frees enough, before the pool would grow or an OOM be reported)
// drops the lock around it.
#include <limits.h>
#include <stdlib.h>

#include "allocator_impl.h"
#include "reclaim.h"
#include "tcache.h"

static size_t open_batch_limit(const cci_allocator *a)
{
    size_t limit = (size_t)a->st.reserved_bytes[CCI_POOL_ALL].current / PENDING_RESERVED_DIVISOR;
    return limit < PENDING_MIN_BYTES ? PENDING_MIN_BYTES : limit;
}

// The blocks of a batch whose fence could not be recorded or waited for fall back to what
// DEFERRED does: the next device synchronisation makes them reusable.
static void defer_all(cci_allocator *a, cci_block *head)
{
    while (head) {
        cci_block *n = head->pend_next;
        a->fenced_count--;
        cci__defer_block(a, head);
        head = n;
    }
}

static void complete_oldest(cci_allocator *a);

// 1 when the record ordered (backend.h, orders) and so made every pending batch reusable.
static int close_open_batch(cci_allocator *a)
{
    if (!a->fopen_head)
        return 0;
    cci_block *head = a->fopen_head;
    cci_fence_batch *fb = calloc(1, sizeof *fb);
    a->fopen_head = a->fopen_tail = NULL;
    a->fopen_count = a->fopen_bytes = 0;
    if (!fb || a->fences->record(a->be.ctx, a->device, CCI_STREAM_ALL, &fb->fence) != CCI_OK) {
        free(fb);
        defer_all(a, head);
        return 0;
    }
    a->st.num_fence_records++;
    fb->head = head;
    for (cci_block *b = head; b; b = b->pend_next) {
        fb->tail = b;
        fb->count++;
        fb->bytes += b->size;
    }
    if (a->fb_tail)
        a->fb_tail->next = fb;
    else
        a->fb_head = fb;
    a->fb_tail = fb;
    // A record that orders all later work after all earlier work (backend.h, orders) makes
    // every pending batch reusable now, older ones too: their blocks' old work is either done or
    // before this barrier. Their fences may not have passed, which only unmapping cares about,
    // and unmapping records fences of its own.
    if (!a->fences->orders || a->fences->orders(a->be.ctx, a->device, fb->fence) != 1)
        return 0;
    while (a->fb_head)
        complete_oldest(a);
    return 1;
}

void cci__fenced_free(cci_allocator *a, cci_block *b)
{
    b->state = BLOCK_PENDING;
    b->pend_next = NULL;
    if (a->fopen_tail)
        a->fopen_tail->pend_next = b;
    else
        a->fopen_head = b;
    a->fopen_tail = b;
    a->fopen_count++;
    a->fopen_bytes += b->size;
    a->fenced_count++;
    if (a->fopen_count >= PENDING_BATCH || a->fopen_bytes >= open_batch_limit(a))
        close_open_batch(a);
}

static void forget_batch(cci_allocator *a, cci_fence_batch *fb)
{
    a->fences->release(a->be.ctx, a->device, fb->fence);
    free(fb);
}

static cci_fence_batch *unlink_oldest(cci_allocator *a)
{
    cci_fence_batch *fb = a->fb_head;
    a->fb_head = fb->next;
    if (!a->fb_head)
        a->fb_tail = NULL;
    return fb;
}

// The batch's blocks are dealt with; its record stays while a waiter still holds it.
static void finish_batch(cci_allocator *a, cci_fence_batch *fb)
{
    fb->completed = 1;
    if (!fb->waiters)
        forget_batch(a, fb);
}

// Makes the oldest batch's blocks reusable: its fence has passed.
static void complete_oldest(cci_allocator *a)
{
    cci_fence_batch *fb = unlink_oldest(a);
    for (cci_block *b = fb->head, *n; b; b = n) {
        n = b->pend_next;
        a->fenced_count--;
        cci__complete_block(a, b);
    }
    finish_batch(a, fb);
}

// The device cannot vouch for the oldest batch's fence: its blocks wait for a synchronisation.
static void defer_oldest(cci_allocator *a)
{
    cci_fence_batch *fb = unlink_oldest(a);
    defer_all(a, fb->head);
    finish_batch(a, fb);
}

void cci__fenced_tick(cci_allocator *a)
{
    a->fence_tick = 0;
    cci__fenced_harvest(a, CCI_ASK_IN_PASSING);
}

int cci__fenced_harvest(cci_allocator *a, int ask)
{
    int ordered = close_open_batch(a);
    return cci__fenced_poll(a, ask) || ordered;
}

int cci__fence_passed(const cci_allocator *a, cci_fence f, int ask)
{
    const cci_backend_fence_ops *ops = a->fences;
    // Ordered by a later fence_ops.order (it covers every fence recorded before it): passed
    // without asking the device anything.
    if (ops->orders && ops->orders(a->be.ctx, a->device, f) == 1)
        return 1;
    int q = (ask == CCI_ASK_IN_PASSING && ops->poll ? ops->poll : ops->query)(a->be.ctx, a->device, f);
    return q == CCI_FENCE_PUT_OFF ? 0 : q;
}

int cci__fenced_poll(cci_allocator *a, int ask)
{
    int got = 0;
    while (a->fb_head) {
        int q = cci__fence_passed(a, a->fb_head->fence, ask);
        if (q == 0)
            break;  // fences pass in record order: the newer ones are pending too (or not asked)
        if (q < 0) {
            defer_oldest(a);
            continue;
        }
        complete_oldest(a);
        got = 1;
    }
    return got;
}

// Settles fb and every older batch, oldest first: reusable (`ok`) or handed to the deferred queue.
// Returns `ok`.
static int settle_upto(cci_allocator *a, cci_fence_batch *fb, int ok)
{
    for (;;) {
        int last = a->fb_head == fb;  // fb may be freed by the call below
        if (ok)
            complete_oldest(a);
        else
            defer_oldest(a);
        if (last)
            return ok;
    }
}

// One blocking backend call for fb with the lock dropped: a wait for fb's fence, or a catch-up
// with the backend's last order (`catch_up`). fb is held by its waiter count meanwhile. 1 when
// another thread dealt with fb in the meantime (its record is then forgotten here if this was the
// last waiter, and the caller has nothing left to do); else 0, with the call's result in *rc.
static int blocking_call(cci_allocator *a, cci_fence_batch *fb, int catch_up, int *rc)
{
    fb->waiters++;
    cci__unlock(a);
    *rc = catch_up ? a->fences->catch_up(a->be.ctx, a->device) : a->fences->wait(a->be.ctx, a->device, fb->fence);
    cci__lock(a);
    fb->waiters--;
    if (!fb->completed)
        return 0;
    if (!fb->waiters)
        forget_batch(a, fb);
    return 1;
}

// Waits for fb's fence with the lock dropped, then makes it and every older batch reusable (they
// have passed too: fences pass in record order). 1 when it did; 0 when the wait failed, and those
// batches' blocks then wait for a device synchronisation instead.
static int wait_batch(cci_allocator *a, cci_fence_batch *fb)
{
    int rc;
    a->st.num_fence_waits++;
    if (blocking_call(a, fb, 0, &rc))
        return 1;
    return settle_upto(a, fb, rc == CCI_OK);
}

// Instead of a wait, where a pending batch is wanted for reuse: the backend orders every later
// use after fb's fence without blocking the host (backend.h, order). Then fb and every older
// batch are reusable at once, as after a barrier (their old work is before fb's fence, and all
// new work is after it). Unmapping never comes here: it waits for fences that have passed.
// 1 when it did.
static int order_batch(cci_allocator *a, cci_fence_batch *fb)
{
    if (!a->fences->order)
        return 0;
    int r = a->fences->order(a->be.ctx, a->device, fb->fence);
    if (r == CCI_ORDER_BEHIND && a->fences->catch_up) {
        // The device has not reached the backend's last order yet (it keeps one outstanding, so
        // that the host cannot run ever further ahead of the GPU). Waiting for that older point,
        // not for fb's newer fence, leaves the GPU the work queued since, so it does not run dry
        // behind the host's wait; then fb is ordered.
        int rc;
        a->st.num_fence_catch_ups++;
        if (blocking_call(a, fb, 1, &rc))
            return 1;
        // (Another thread may have ordered in between: then fb is covered, or behind again.)
        r = rc == CCI_OK ? a->fences->order(a->be.ctx, a->device, fb->fence) : 0;
    }
    return r == 1 ? settle_upto(a, fb, 1) : 0;
}

// A pending batch wanted for reuse: ordered if the backend can, else waited for.
static int reuse_batch(cci_allocator *a, cci_fence_batch *fb)
{
    return order_batch(a, fb) || wait_batch(a, fb);
}

// ---- the fence budget (fence_slack_mb) ------------------------------------------------------
// The host waiting for the GPU (a fence wait, or a catch-up before an order) leaves the GPU idle
// behind it, and an order makes every stream wait for all the device's earlier work (NCCL's
// included: communication stops overlapping compute). Both buy memory: the pending blocks are
// reused instead of new ones. Up to a budget the pool grows instead, once: the growth stays
// cached, so in a loop the same moment next time finds the older blocks passed. Off by default:
// on the H200 (2026-11-28) it made a thread's malloc+free loop 2.5-3x faster but cost memory
// beyond the budget itself on DDP and generation (poor fits split instead of waited for), for
// no resolvable wall-time gain (docs/benchmarks.md, "Multi-stream"). Unmapping never uses it.
int cci__fence_slack_left(const cci_allocator *a, size_t bytes)
{
    return a->cfg.fence_slack_mb > 0 && a->slack_used + bytes <= ((size_t)a->cfg.fence_slack_mb << 20);
}

void cci__fence_slack_charge(cci_allocator *a, int64_t delta)
{
    if (delta > 0) {
        a->slack_used += (size_t)delta;
        a->st.num_fence_slack_grows++;
        a->st.fence_slack_bytes += (uint64_t)delta;
    } else {
        a->slack_used = (size_t)-delta < a->slack_used ? a->slack_used - (size_t)-delta : 0;
    }
}

// reuse_batch on the budget (wait_for's `slack`): 0 with nothing done where growth (a miss) or a
// poor fit (a poor fit) may stand in for a host wait.
static int reuse_on_budget(cci_allocator *a, cci_fence_batch *fb, size_t rounded, int slack)
{
    if (slack == CCI_SLACK_NONE || !cci__fence_slack_left(a, rounded))
        return reuse_batch(a, fb);
    if (slack == CCI_SLACK_GROW) {
        a->slack_grow = 1;
        return 0;
    }
    // A poor fit: an order costs the host nothing, a catch-up or a wait does.
    if (!a->fences->order)
        return 0;
    int r = a->fences->order(a->be.ctx, a->device, fb->fence);
    return r == 1 ? settle_upto(a, fb, 1) : 0;
}

size_t cci__fenced_pending_bytes(const cci_allocator *a)
{
    size_t n = 0;
    for (const cci_fence_batch *fb = a->fb_head; fb; fb = fb->next)
        n += fb->completed ? 0 : fb->bytes;
    return n;
}

int cci__fenced_wait_oldest(cci_allocator *a)
{
    return a->fb_head ? reuse_batch(a, a->fb_head) : 0;
}

// Would `b` be free once the batches up to the wave-th (oldest first) have passed?
// ANY_WAVE: every pending block counts, whichever batch (or the deferred queue) holds it.
#define ANY_WAVE UINT_MAX
static int free_by_wave(const cci_block *b, unsigned wave)
{
    return b->state == BLOCK_FREE ||
           (b->state == BLOCK_PENDING && (wave == ANY_WAVE || (b->wave && b->wave <= wave)));
}

// The run through pending block b of its neighbours free by `wave`, up to `enough` bytes: the
// block free_block's merges would make of them.
static size_t run_by_wave(const cci_block *b, size_t enough, unsigned wave)
{
    size_t run = b->size;
    for (const cci_block *p = b->prev; p && run < enough && free_by_wave(p, wave); p = p->prev)
        run += p->size;
    for (const cci_block *n = b->next; n && run < enough && free_by_wave(n, wave); n = n->next)
        run += n->size;
    return run;
}

static int batch_could_fit(const cci_block *head, size_t rounded, int small, uint64_t stream, size_t fit)
{
    for (const cci_block *b = head; b; b = b->pend_next) {
        if (b->small != small || b->stream != stream)
            continue;
        size_t run = run_by_wave(b, rounded, ANY_WAVE);
        if (run >= rounded && run < fit)
            return 1;
    }
    return 0;
}

int cci__fenced_could_fit(const cci_allocator *a, size_t rounded, int small, uint64_t stream, size_t fit)
{
    if (batch_could_fit(a->fopen_head, rounded, small, stream, fit))
        return 1;
    for (const cci_fence_batch *fb = a->fb_head; fb; fb = fb->next)
        if (!fb->completed && batch_could_fit(fb->head, rounded, small, stream, fit))
            return 1;
    return 0;
}

int cci__fenced_wait_for(cci_allocator *a, size_t rounded, int small, uint64_t stream, unsigned spare, int slack)
{
    // What the request needs is one block: a run of neighbours in one segment that are free now
    // or will be once their batch has passed, merged as free_block merges them. A sum over the
    // pending bytes would both promise too much (many small blocks apart) and too little (a
    // pending block between two free ones). So each closed batch is numbered (its "wave"), and
    // the oldest wave after which some run through one of its blocks is long enough is waited
    // for. Deferred blocks are also PENDING but carry wave 0: they never count.
    unsigned wave = 0;
    for (cci_fence_batch *fb = a->fb_head; fb && wave < UINT16_MAX; fb = fb->next) {
        wave++;
        for (cci_block *b = fb->head; b; b = b->pend_next)
            b->wave = (uint16_t)wave;
    }
    cci_fence_batch *target = NULL;
    unsigned last = wave > spare ? wave - spare : 0;
    wave = 0;
    for (cci_fence_batch *fb = a->fb_head; fb && !target && wave < last; fb = fb->next) {
        wave++;
        for (cci_block *b = fb->head; b && !target; b = b->pend_next) {
            // Only blocks of the request's pool and stream can serve it: the free set keeps both apart.
            if (b->small != small || b->stream != stream)
                continue;
            if (run_by_wave(b, rounded, wave) >= rounded)
                target = fb;
        }
    }
    for (cci_fence_batch *fb = a->fb_head; fb; fb = fb->next)
        for (cci_block *b = fb->head; b; b = b->pend_next)
            b->wave = 0;
    return target ? reuse_on_budget(a, target, rounded, slack) : 0;
}

// ---- orders at reuse (fence_ops.reuse_order) --------------------------------------------------
// Where the backend can order the device's later work after its earlier work cheaply (on CUDA: no
// side stream busy), a fenced free skips its batch: the block joins the free set at once, merged
// with its free neighbours, exactly as immediate reuse would place it, and the next block handed
// out (whichever) is preceded by one order covering every such free. Behind fences, a block waited
// in its batch until the batch was ordered or passed; meanwhile allocations took other blocks, and
// the layout drifted from immediate reuse's: replay of the shared traces with a device 64 fences
// behind (ccreplay --fenced-lag 64 --fenced-streams 33 --fenced-order) held the encoder's
// expandable segments at 6 390 MiB against immediate reuse's 5 990, and a generation workload ran
// 7 % above native on an H200 (docs/benchmarks.md, 2026-11-29).

int cci__free_unfenced(cci_allocator *a)
{
    const cci_backend_fence_ops *ops = a->fences;
    if (!ops->reuse_order || ops->reuse_order(a->be.ctx, a->device, 0) != 1)
        return 0;
    a->unordered_frees++;
    return 1;
}

int cci__reuse_order(cci_allocator *a)
{
    uint64_t upto = a->unordered_frees;
    if (a->fences->reuse_order(a->be.ctx, a->device, 1) != 1)
        return 0;
    a->ordered_frees = upto;
    return 1;
}

int cci__fence_wait_now(cci_allocator *a, uint64_t stream, uint64_t *recorded)
{
    cci_fence f;
    if (!a->fences || a->fences->record(a->be.ctx, a->device, stream, &f) != CCI_OK)
        return CCI_EBACKEND;
    (*recorded)++;
    cci__unlock(a);
    int rc = a->fences->wait(a->be.ctx, a->device, f);
    cci__lock(a);
    a->fences->release(a->be.ctx, a->device, f);
    return rc == CCI_OK ? CCI_OK : CCI_EBACKEND;
}

int cci__reuse_wait(cci_allocator *a)
{
    uint64_t upto = a->unordered_frees, records = a->st.num_fence_records;
    int rc = cci__fence_wait_now(a, CCI_STREAM_ALL, &a->st.num_fence_records);
    a->st.num_fence_waits += a->st.num_fence_records - records;  // a wait for every fence recorded
    if (rc != CCI_OK && cci__sync_device(a) != CCI_OK)
        return 0;
    if (a->ordered_frees < upto)
        a->ordered_frees = upto;
    return 1;
}

int cci__fenced_drain(cci_allocator *a)
{
    int got = cci__fenced_harvest(a, CCI_ASK_IN_FULL);
    while (a->fb_tail)
        got |= wait_batch(a, a->fb_tail);
    return got;
}

void cci__fenced_destroy(cci_allocator *a, int release_fences)
{
    while (a->fb_head) {
        cci_fence_batch *fb = a->fb_head;
        a->fb_head = fb->next;
        if (fb->waiters) {
            // A thread waits for this fence with the lock dropped (an in-place reset from another
            // thread got here first): it owns the record from now on. Marked completed, it frees
            // the record and releases the fence when it wakes, and touches none of the blocks.
            fb->completed = 1;
            fb->next = NULL;
            continue;
        }
        if (release_fences)
            a->fences->release(a->be.ctx, a->device, fb->fence);
        free(fb);
    }
    a->fb_tail = NULL;
}
