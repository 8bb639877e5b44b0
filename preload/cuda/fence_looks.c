// SPDX-License-Identifier: MIT
// The fence group's looks at the non-blocking streams: lazy coverage, one stream at a time.
//
// An event on every non-blocking stream at every record was most of what fences cost (PyTorch
// keeps a pool of 32 such streams, mostly idle). Instead a record touches the legacy streams only
// and notes its place on the fence clock (seq) and the stream registry's epoch. Only once its
// legacy part has passed, at a query or a wait, are its non-blocking streams looked at, each at
// most once per round for ALL the fences recorded so far:
//   - a stream that answers idle NOW has run its work from before every fence recorded so far
//     (clock value c, read before the question): they are covered for it (cover->covered = c);
//   - a busy stream gets ONE sweep event recorded now, after its work from before every fence
//     with seq <= c, shared by all of them through the stream's cover: a burst of fences costs
//     one sweep. Sweeps of one stream pass in the order they were recorded;
//   - every device's streams are looked at, whichever device's allocator recorded the fence
//     (peer access); a sweep is recorded in its stream's device's context;
//   - a stream registered after the record (born > epoch) needs nothing: the program got its
//     handle after we registered it, so none of its work comes from before the free;
//   - a stream destroyed since the record is covered by its retired event (fence_retired.c): the
//     registry retires it before it leaves the list, and the live streams are looked at first.
// So fences still pass in record order (src/core/fenced.c relies on it): whatever covers a later
// fence (an idle answer, a sweep recorded after it) covers every earlier one too.
//
// During a capture a capturing stream must be neither asked nor swept (both would join or break
// it): while a capture may be underway a stream that still needs a look keeps a query pending and
// makes a wait fail (the core then defers the batch to a device synchronisation). Sweeps recorded
// before the capture are only queried, which is allowed.
#include "fence_impl.h"

#include <stdlib.h>

#include "captures.h"
#include "clock.h"

_Atomic unsigned cci__fence_last_look_busy;
// When the last look at the non-blocking streams ended, and what it cost the host (ns).
static _Atomic unsigned long long last_look_end, last_look_cost;

// Room for one more event to block on. 0 or -1.
static int look_reserve(look *lk)
{
    if (lk->n < lk->cap)
        return 0;
    size_t want = lk->cap ? 2 * lk->cap : 8;
    shared_event **grown = realloc(lk->wait_on, want * sizeof *grown);
    if (!grown)
        return -1;
    lk->wait_on = grown;
    lk->cap = want;
    return 0;
}

int cci__fence_look_collect_locked(look *lk, shared_event *r)
{
    if (look_reserve(lk))
        return -1;
    r->refs++;
    lk->wait_on[lk->n++] = r;
    return 0;
}

static int look_collect(look *lk, shared_event *r)
{
    pthread_mutex_lock(&cci__fence_pool_lock);
    int rc = cci__fence_look_collect_locked(lk, r);
    pthread_mutex_unlock(&cci__fence_pool_lock);
    return rc;
}

void cci__fence_look_drop(look *lk)
{
    for (size_t i = 0; i < lk->n; i++)
        cci__fence_drop_shared_ref(lk->wait_on[i]);
    free(lk->wait_on);
}

// Forgets the sweeps at the head of the cover that have passed, raising `covered` to theirs:
// sweeps of one stream pass in the order they were recorded. Registry lock held. 0 or -1.
static int cover_advance(cci_stream_cover *c)
{
    while (c->sweeps) {
        shared_event *sw = c->sweeps;
        int p = cci__fence_shared_passed(sw);
        if (p < 0)
            return -1;
        if (p == 0)
            return 0;
        if (sw->upto > c->covered)
            c->covered = sw->upto;
        c->sweeps = sw->next;
        cci__fence_drop_shared_ref(sw);
    }
    return 0;
}

// The first pending sweep of the cover that covers fence seq, or NULL.
static shared_event *sweep_covering(const cci_stream_cover *c, unsigned long long seq)
{
    for (shared_event *sw = c->sweeps; sw; sw = sw->next)
        if (sw->upto >= seq)
            return sw;
    return NULL;
}

int cci__fence_cover_stream(const cci_stream_ref *ref, void *arg)
{
    look *lk = arg;
    const cuda_fence *f = lk->f;
    if (ref->born > f->streams)
        return 0;  // registered after the record: none of its work is from before the free
    cci_stream_cover *c = *ref->cover;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c)
            return -1;
        *ref->cover = c;
    }
    if (c->covered >= f->seq)
        return 0;
    if (!lk->waiting && cover_advance(c))  // a wait blocks on the sweep instead of asking it
        return -1;
    if (c->covered >= f->seq)
        return 0;
    shared_event *sw = sweep_covering(c, f->seq);
    if (sw) {
        lk->busy++;
        // Recorded after the fence (a look for this or a later fence): it passes once the
        // stream's work before the fence has run.
        if (lk->waiting)
            return look_collect(lk, sw);
        lk->pending = 1;
        return 0;
    }
    if (cci_capture_maybe_active()) {
        // The stream may be capturing: asking it or recording on it would join or break the
        // capture. The fence stays pending; a wait fails and the core defers its blocks.
        lk->pending = 1;
        return lk->waiting ? -1 : 0;
    }
    // Every fence numbered up to `now` was recorded, hence its frees issued, before this point
    // (seq_cst load after the records' increments): the stream's answer below reflects all work
    // queued on it before those frees (CUDA sees work queued by any thread before the call).
    // The watcher asks whether the stream captures first: a capture begun behind our back (the
    // driver API, a static cudart) is not counted, and a question to a capturing stream breaks it.
    if (lk->careful && cci_stream_driver_capturing(ref->s, 0) != 0) {
        lk->pending = 1;
        return 0;
    }
    unsigned long long now = atomic_load(&cci__fence_clock);
    FENCE_COUNT(stream_checks);
    if (lk->careful)  // (only the watcher's looks are careful)
        FENCE_COUNT(watcher_checks);
    lk->asked++;
    CUresult q = cci_real_drv()->cuStreamQuery(ref->s);
    if (q == CUDA_SUCCESS) {
        // Idle now: everything queued on it before those fences has finished. Work queued after
        // the query is the program's, after the frees; a later fence gets a look of its own.
        FENCE_COUNT(stream_idle_answers);
        c->covered = now;
        return 0;
    }
    if (q != CCI_CUDA_ERROR_NOT_READY) {
        cci_log(CCI_LOG_DEBUG, "device %d: cuStreamQuery on stream %p for a fence failed "
                "(CUresult %d)", ref->device, (void *)ref->s, q);
        return -1;
    }
    // Busy: one sweep now, after all its work queued before those fences. Every fence up to
    // `now` that still needs this stream shares it. A look ahead records none: it comes again at
    // every new fence, and a stream that stays busy (NCCL's) would gather a sweep each time.
    lk->busy++;
    if (lk->idle_only) {
        lk->pending = 1;
        return 0;
    }
    shared_event *n = calloc(1, sizeof *n);
    if (!n)
        return -1;
    n->ev = record_event(ref->device, ref->s, &n->gen);
    if (!n->ev) {
        free(n);
        return -1;
    }
    FENCE_COUNT(sweeps_recorded);
    n->device = ref->device;
    n->refs = 1;
    n->upto = now;
    shared_event **tail = &c->sweeps;
    while (*tail)
        tail = &(*tail)->next;
    *tail = n;  // `now` is at least every earlier sweep's: the list stays in clock order
    if (lk->waiting)
        return look_collect(lk, n);
    lk->pending = 1;
    return 0;
}

// Is a look at the non-blocking streams worth its cost now, for a fence asked in passing? One
// look covers every fence recorded before it, so a look put off serves every fence recorded
// meanwhile. On the H100 (resnet, PyTorch's idle stream pool) the GPU kept up with the CPU,
// every fence got a look of its own, and ~25 cuStreamQuery calls a fence cost 92-107 ms over 32
// steps: 3-5 % of that host-bound run's wall time (2026-11-23, fec3209). So looks asked in
// passing are rationed to about 2 % of the host's time (the last look's cost, measured, sets the
// pause before the next: about 2 ms after a 42 us look), which also bounds how long a passed
// fence waits for its look. Never rationed where a look is cheap (few streams); an ask in full (a
// poor fit a pending block could improve, a miss) and a wait always look.
#define LOOK_TIME_SHARE 50  // a look, then at least 50 times its cost before the next

int cci__fence_look_put_off(void)
{
    if (cci_stream_registry_live() <= LOOK_CHEAP_STREAMS)
        return 0;
    unsigned long long pause = LOOK_TIME_SHARE * atomic_load_explicit(&last_look_cost, memory_order_relaxed);
    if (cci_pl_now_ns() - atomic_load_explicit(&last_look_end, memory_order_relaxed) >= pause)
        return 0;
    FENCE_COUNT(looks_put_off);
    return 1;
}

// When it asked the driver anything, its own cost (the host's time in it; a wait's blocking comes
// after) is what cci__fence_look_put_off rations by.
int cci__fence_look_at_streams(look *lk)
{
    unsigned long long since = cci_pl_now_ns();
    // A context fence's events covered every live stream: only the retired events are left.
    int live = lk->f->ctxwide ? 0 : cci_stream_registry_each_nonblocking(cci__fence_cover_stream, lk);
    int rc = live || cci__fence_cover_retired(lk) ? -1 : 0;
    if (lk->asked || lk->busy)
        atomic_store_explicit(&cci__fence_last_look_busy, lk->busy, memory_order_relaxed);
    if (lk->asked) {
        unsigned long long end = cci_pl_now_ns();
        atomic_store_explicit(&last_look_cost, end - since, memory_order_relaxed);
        atomic_store_explicit(&last_look_end, end, memory_order_relaxed);
    }
    return rc;
}
