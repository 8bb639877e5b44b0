// SPDX-License-Identifier: MIT
// The CUDA backend's fence group (src/core/backend.h, cci_backend_fence_ops).
//
// A fence is recorded for CCI_STREAM_ALL: a block freed with cudaFree may have been used by any
// stream. It must pass only once every piece of work queued before the free, on any stream that
// may touch our memory, has finished. Which streams that means, from the ordering facts
// (docs/reuse-modes.md), and how each is covered:
//   - the legacy stream of every device whose primary context we hold, and with it every BLOCKING
//     stream and every PER-THREAD default stream of that context: work on the legacy stream waits
//     for all earlier work of those streams, so an event recorded on the legacy stream passes only
//     once that work has finished. Work of another device (peer access, peer copies) is covered
//     by that device's own legacy event. These events are recorded at once, one per device;
//   - every NON-BLOCKING stream (ordered with nothing but itself), runtime- or driver-created
//     (stream_registry.c), that existed when the fence was recorded: covered LAZILY, below;
//   - every destroyed stream whose last work may still be pending: an event recorded on it just
//     before the destroy was forwarded (a "retired" event), kept until it has passed.
//
// LAZY NON-BLOCKING COVERAGE. An event on every non-blocking stream at every record was most of
// what fences cost (PyTorch keeps a pool of 32 such streams, mostly idle: 32 events or stream
// queries per record). Instead, a record touches the legacy streams only, and notes two numbers:
// its place on the fence clock (seq: records are numbered 1, 2, ...) and the stream registry's
// epoch (streams with born <= epoch existed at the record). Only when the fence's legacy events
// have passed, at a query or a wait, are its non-blocking streams looked at, each at most once
// per "round" for ALL fences recorded so far:
//   - a stream that cuStreamQuery reports idle NOW has finished every piece of work queued on it
//     before every fence recorded so far (clock value c, read before the query): those fences
//     are covered for it (cover->covered = c), the next ones need a new look;
//   - a busy stream gets ONE "sweep" event recorded now, after everything queued on it before
//     every fence with seq <= c; it passes no earlier than that work (conservatively later), and
//     is shared by all those fences through the stream's cover, so a burst of fences costs one
//     sweep, not one per fence. Sweeps of one stream pass in the order they were recorded;
//   - every device's non-blocking streams are looked at, whichever device's allocator recorded
//     the fence (peer access lets another device's stream touch our memory); a sweep is recorded
//     in its stream's device's context;
//   - a stream registered after the record (born > epoch) needs nothing: the program got its
//     handle after we registered it, so none of its work comes from before the free;
//   - a stream destroyed since the record is no longer live but its retired event is in the
//     retired list until it passed (the registry retires it before it leaves the list, and the
//     live streams are looked at first, so a stream destroyed meanwhile is seen in one place or
//     the other).
// A fence thus passes in record order still (src/core/fenced.c relies on it): a fence later in
// the clock needs the same streams' work up to a later point, and whatever covers it (an idle
// answer or a sweep recorded after it) covers every earlier fence too.
//
// Events come from a pool per device (created with CU_EVENT_DISABLE_TIMING only when the pool is
// empty), never one per free: the core records one fence per batch of frees.
//
// CAPTURE. During a capture nothing may be recorded on the legacy stream (it would invalidate a
// global capture), so record fails with CCI_EBACKEND and the core falls back (frees wait, as
// DEFERRED). A fence recorded before a capture began may be looked at during it: a capturing
// stream must be neither queried nor given a sweep (both would join or break the capture), so
// while a capture may be underway a stream that still needs a look keeps the fence pending
// (query) or makes the wait fail (the core then defers the batch to a device synchronisation).
// Sweeps and retired events recorded before the capture are only queried, which is allowed.
// wait() blocks; the core never calls it with the allocator lock held.
//
// CONTEXT FENCES (context_fences.h, where the driver has cuCtxRecordEvent): a fence that is no
// barrier records, instead of each device's legacy event, one context event per device, which
// covers every stream of that device's primary context at once. Such a fence needs no look at the
// non-blocking streams (only the retired events, as before), and THE ORDER is one more context
// event and a cuCtxWaitEvent. Recorded inside the capture gate only: both calls would invalidate
// any capture of the context. Barriers keep the legacy event: its place on the legacy stream is
// what orders later work (a context event orders nothing after it).
#include "fence.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "backend_cuda.h"
#include "clock.h"
#include "context_fences.h"
#include "fence_watcher.h"
#include "log.h"
#include "real.h"
#include "stream_registry.h"
#include "captures.h"


// ---- events ---------------------------------------------------------------------------------

// An event shared by many fences, held by reference: a "retired" event (the last work of a
// destroyed stream, in the retired list) or a "sweep" (a live non-blocking stream's work up to
// some point on the fence clock, in the stream's cover). A waiter takes a reference for as long
// as it blocks on the event, so the event cannot go back to the pool (and be recorded again)
// under it.
typedef struct shared_event {
    CUevent ev;
    int device;
    unsigned gen;             // the device's context generation the event belongs to
    int refs;                 // its list's own reference, plus one per waiter; pool_lock
    unsigned long long upto;  // sweep: covers the fences with seq <= upto; retired: unused
    unsigned long long born;  // retired: the destroyed stream's registry number; sweep: unused
    _Atomic int passed;       // known to have passed (a query or a wait saw it)
    struct shared_event *next;
} shared_event;

// A live non-blocking stream's coverage (stream_registry.h). Read and written with the registry
// lock held only (the registry hands it out under it, and retires or forgets it under it).
struct cci_stream_cover {
    unsigned long long covered;  // every fence with seq <= covered: the stream's work before it has run
    shared_event *sweeps;        // pending sweeps, oldest (smallest upto) first
};

typedef struct fence_event {
    CUevent ev;
    int device;
    unsigned gen;  // the device's context generation the event belongs to
} fence_event;

typedef struct cuda_fence {
    size_t n, cap;
    // Legacy events [0, passed) are known to have passed. Atomic: query runs under the allocator
    // lock, wait with it dropped, so both may look at one fence at once; it only ever grows.
    _Atomic size_t passed;
    fence_event *ev;               // one per device, on its legacy stream
    unsigned long long seq;        // the fence's place on the fence clock
    unsigned long long streams;    // the stream registry's epoch at the record
    _Atomic int streams_covered;   // the lazy part is done: every stream it needed has run
    int barrier;                   // its legacy event orders all later work (fence_orders)
    int ctxwide;                   // context events: every live stream is covered by them
} cuda_fence;

// One lock for the pools, the retired list and shared events' references; taken inside the
// registry lock (never around it).
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
typedef struct event_pool {
    CUevent *ev;
    size_t n, cap;
} event_pool;
static event_pool pools[CCI_PL_MAX_DEVICES];
static shared_event *retired_list;
// Bumped when a device's primary context goes (cudaDeviceReset, cuDevicePrimaryCtxReset): its
// events went with it, so an event of an older generation is forgotten, never reused.
static unsigned generation[CCI_PL_MAX_DEVICES];
// The fence clock: the last fence's seq. Read (seq_cst) before a stream is asked or swept, so
// that every fence numbered up to the value read was recorded, hence its frees issued, before
// the question: see cover_stream.
static _Atomic unsigned long long fence_clock;
// THE ORDER: every fence with seq <= ordered_upto orders all later work (a round made every live
// non-blocking stream wait for an event recorded after it, and left no stream unasked). Never
// a reason to call a fence passed: unmapping asks query and wait, which still look.
static _Atomic unsigned long long ordered_upto;
// THE WATCHER (fence_watcher.c): every fence with seq <= watched_upto has passed, legacy events,
// non-blocking streams and retired events alike, as a look of the watcher thread found. Asking
// such a fence costs no driver call.
static _Atomic unsigned long long watched_upto;
// The calling thread is the watcher: its stream questions are counted apart (the exit line).
static _Thread_local int on_watcher;
// Live streams up to which a look is cheap: it is neither rationed nor left to the watcher.
#define LOOK_CHEAP_STREAMS 4
// Raises *v to at least `upto` (threads may publish out of order; the clock value only grows).
static void raise_upto(_Atomic unsigned long long *v, unsigned long long upto)
{
    unsigned long long cur = atomic_load(v);
    while (cur < upto && !atomic_compare_exchange_weak(v, &cur, upto))
        ;
}
// When the last look at the non-blocking streams ended, and what it cost the host (ns).
static _Atomic unsigned long long last_look_end, last_look_cost;
// How many non-blocking streams the last look that found anything out saw busy (fence_busy).
static _Atomic unsigned last_look_busy;

// ---- what fences cost the host --------------------------------------------------------------
// A fence is cheap when its events are recorded and queried, and costs the program's speed when
// the host blocks on one (the GPU's queue drains while the CPU waits). The exit log says how much
// of each happened, so that a slow run under the default mode can be put down to the waits or
// cleared of them (CCI_LOG=info). The lazy part's driver calls are counted on their own: stream
// questions (cuStreamQuery), sweeps recorded, and shared events (sweeps, retired) queried.
enum { COST_RECORD, COST_QUERY, COST_WAIT, COST_ORDER, COST_CATCH_UP, COST_KINDS };
static _Atomic unsigned long long cost_calls[COST_KINDS], cost_events[COST_KINDS], cost_ns[COST_KINDS];
static _Atomic unsigned long long stream_checks, stream_idle_answers, sweeps_recorded,
    shared_queries, looks_put_off, barrier_records, orders_made, orders_refused, order_injections, orders_covered,
    watcher_checks, watcher_rounds, watched_answers, watcher_looks_ahead, order_skips, ctx_records, ctx_orders,
    orders_behind;

static void cost_add(int kind, unsigned long long since, size_t events)
{
    atomic_fetch_add_explicit(&cost_calls[kind], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&cost_events[kind], events, memory_order_relaxed);
    atomic_fetch_add_explicit(&cost_ns[kind], cci_pl_now_ns() - since, memory_order_relaxed);
}

static void count(_Atomic unsigned long long *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

void cci_cuda_fence_log_costs(void)
{
    unsigned long long c[COST_KINDS], e[COST_KINDS], ns[COST_KINDS];
    for (int k = 0; k < COST_KINDS; k++) {
        c[k] = atomic_load(&cost_calls[k]);
        e[k] = atomic_load(&cost_events[k]);
        ns[k] = atomic_load(&cost_ns[k]);
    }
    if (!c[COST_RECORD] && !c[COST_QUERY] && !c[COST_WAIT])
        return;
    // The query and wait times include the lazy part's calls.
    cci_log(CCI_LOG_INFO, "fence costs on the host: %llu records (%llu events, %llu "
            "barriers) %.1f ms; %llu queries (%llu events) %.1f ms; %llu waits (%llu events) blocked %.1f ms; "
            "non-blocking streams, looked at lazily: %llu stream queries (%llu idle), %llu sweeps "
            "recorded, %llu sweep/retired event queries, %llu looks put off", c[COST_RECORD], e[COST_RECORD],
            atomic_load(&barrier_records), ns[COST_RECORD] / 1e6, c[COST_QUERY], e[COST_QUERY], ns[COST_QUERY] / 1e6, c[COST_WAIT],
            e[COST_WAIT], ns[COST_WAIT] / 1e6, atomic_load(&stream_checks),
            atomic_load(&stream_idle_answers), atomic_load(&sweeps_recorded),
            atomic_load(&shared_queries), atomic_load(&looks_put_off));
    if (atomic_load(&ctx_records) || cci_context_fences_usable())
        cci_log(CCI_LOG_INFO, "context fences (one event for every stream of a device): %llu of the "
                "records above, %llu orders; %llu times the host first waited for the GPU to reach "
                "the last order, blocked %.1f ms; now %s", atomic_load(&ctx_records), atomic_load(&ctx_orders),
                c[COST_CATCH_UP], ns[COST_CATCH_UP] / 1e6, cci_context_fences_state());
    else
        cci_log(CCI_LOG_INFO, "context fences: %s", cci_context_fences_state());
    if (atomic_load(&watcher_rounds))
        cci_log(CCI_LOG_INFO, "fence watcher (a thread of ours): %llu looks made every fence up to "
                "them passed, %llu of the stream queries above were its own (%llu looks ahead); %llu "
                "fence questions of the program's threads answered from them without a driver call",
                atomic_load(&watcher_rounds), atomic_load(&watcher_checks), atomic_load(&watcher_looks_ahead),
                atomic_load(&watched_answers));
    if (atomic_load(&orders_made) || atomic_load(&orders_refused) || atomic_load(&orders_behind))
        cci_log(CCI_LOG_INFO, "fences ordered on the GPU instead of waited for: %llu rounds, %llu "
                "more covered by an earlier round (%llu stream waits queued, %.1f ms; %llu streams "
                "not asked, found idle since); %llu refused (the host waited); %llu answered behind "
                "the last order (the host waited for it, then asked again)", atomic_load(&orders_made),
                atomic_load(&orders_covered), atomic_load(&order_injections), ns[COST_ORDER] / 1e6,
                atomic_load(&order_skips), atomic_load(&orders_refused), atomic_load(&orders_behind));
}

static int have_events(const cci_real_driver *t)
{
    return t->cuEventCreate && t->cuEventRecord && t->cuEventQuery && t->cuEventSynchronize &&
           t->cuEventDestroy_v2 && t->cuStreamQuery;
}

// An event of `device` from the pool (created when the pool is empty). pool_lock held; inside
// the device's scope.
static CUevent pool_get_locked(int device)
{
    event_pool *p = &pools[device];
    if (p->n)
        return p->ev[--p->n];
    CUevent e = NULL;
    if (cci_real_drv()->cuEventCreate(&e, CCI_CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        return NULL;
    return e;
}

static void pool_put_locked(int device, CUevent e, unsigned gen)
{
    event_pool *p = &pools[device];
    if (gen != generation[device])
        return;
    if (p->n == p->cap) {
        size_t want = p->cap ? 2 * p->cap : 16;
        CUevent *grown = realloc(p->ev, want * sizeof *grown);
        if (!grown) {
            cci_driver_scope sc;  // no room to keep it: destroy it instead
            if (cci_cuda_enter(device, &sc) == 0) {
                cci_real_drv()->cuEventDestroy_v2(e);
                cci_cuda_leave(&sc);
            }
            return;
        }
        p->ev = grown;
        p->cap = want;
    }
    p->ev[p->n++] = e;
}

static void drop_shared_ref_locked(shared_event *r)
{
    if (--r->refs == 0) {
        pool_put_locked(r->device, r->ev, r->gen);
        free(r);
    }
}

static void drop_shared_ref(shared_event *r)
{
    pthread_mutex_lock(&pool_lock);
    drop_shared_ref_locked(r);
    pthread_mutex_unlock(&pool_lock);
}

// A pooled event of `device`, recorded on stream `s`, or when `ctx` is set for all the work of
// that context so far (every stream: cuCtxRecordEvent); NULL on failure, *r the driver's answer.
// pool_lock NOT held (taken here).
static CUevent record_pooled(int device, CUstream s, CUcontext ctx, unsigned *gen, CUresult *r)
{
    cci_driver_scope sc;
    *r = CUDA_ERROR_NOT_INITIALIZED;
    if (cci_cuda_enter(device, &sc))
        return NULL;
    const cci_real_driver *t = cci_real_drv();
    pthread_mutex_lock(&pool_lock);
    CUevent e = pool_get_locked(device);
    *gen = generation[device];
    if (e)
        *r = ctx ? t->cuCtxRecordEvent(ctx, e) : t->cuEventRecord(e, s);
    if (*r != CUDA_SUCCESS && e) {
        pool_put_locked(device, e, *gen);
        e = NULL;
    }
    pthread_mutex_unlock(&pool_lock);
    cci_cuda_leave(&sc);
    return e;
}

// A pooled event of `device` recorded on `s`, or NULL.
static CUevent record_event(int device, CUstream s, unsigned *gen)
{
    CUresult r;
    CUevent e = record_pooled(device, s, NULL, gen, &r);
    if (!e)
        cci_log(CCI_LOG_DEBUG, "device %d: recording a fence event on stream %p failed "
                "(CUresult %d)", device, (void *)s, r);
    return e;
}

// A pooled event of `device` recording all the work of its primary context so far (every stream),
// or NULL. The caller holds the capture gate with no capture underway. A refusal because of a
// capture (one begun behind our back: the call has just invalidated it) stops context fences.
static CUevent record_ctx_event(int device, unsigned *gen)
{
    CUcontext c = cci_cuda_backend_primary(device, 0);
    CUresult r = CUDA_ERROR_NOT_INITIALIZED;
    CUevent e = c ? record_pooled(device, NULL, c, gen, &r) : NULL;
    if (r == CCI_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
        cci_context_fences_stop("the driver refused one for a capture we had not seen (that capture "
                                "is now invalidated)", 1);
    else if (!e)
        cci_log(CCI_LOG_DEBUG, "device %d: recording a context fence event failed (CUresult %d)", device, r);
    return e;
}

// 1 passed, 0 pending, -1 error.
static int event_passed(CUevent e, int device)
{
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc))
        return -1;
    CUresult r = cci_real_drv()->cuEventQuery(e);
    cci_cuda_leave(&sc);
    if (r == CUDA_SUCCESS)
        return 1;
    return r == CCI_CUDA_ERROR_NOT_READY ? 0 : -1;
}

// 0 or -1.
static int event_wait(CUevent e, int device)
{
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc))
        return -1;
    CUresult r = cci_real_drv()->cuEventSynchronize(e);
    cci_cuda_leave(&sc);
    if (r != CUDA_SUCCESS) {
        cci_log(CCI_LOG_DEBUG, "device %d: cuEventSynchronize on a fence failed (CUresult %d)",
                device, r);
        return -1;
    }
    return 0;
}

// 1 passed (now or before), 0 pending, -1 error.
static int shared_passed(shared_event *r)
{
    if (atomic_load_explicit(&r->passed, memory_order_acquire))
        return 1;
    count(&shared_queries);
    int p = event_passed(r->ev, r->device);
    if (p == 1)
        atomic_store_explicit(&r->passed, 1, memory_order_release);
    return p;
}

static void fence_free(cuda_fence *f)
{
    pthread_mutex_lock(&pool_lock);
    for (size_t i = 0; i < f->n; i++)
        pool_put_locked(f->ev[i].device, f->ev[i].ev, f->ev[i].gen);
    pthread_mutex_unlock(&pool_lock);
    free(f->ev);
    free(f);
}

// ---- the lazy part: non-blocking streams ----------------------------------------------------

// What looking at the streams is for: a query (never blocks; collects nothing) or a wait
// (collects, with a reference each, the shared events to block on once the locks are dropped).
typedef struct look {
    const cuda_fence *f;
    int waiting;
    int careful;                 // the watcher's: a stream is asked whether it captures first
    int idle_only;               // a look ahead: idle streams covered, busy ones left (no sweep)
    int pending;                 // query: some stream's work before the fence has not run yet
    unsigned asked;              // streams asked or swept (the look's driver calls)
    unsigned busy;               // streams found with work before the fence (swept or sweep pending)
    shared_event **wait_on;      // wait: events to block on
    size_t n, cap;
} look;

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

// The wait will block on r: a reference keeps it out of the pool meanwhile. pool_lock held.
static int look_collect_locked(look *lk, shared_event *r)
{
    if (look_reserve(lk))
        return -1;
    r->refs++;
    lk->wait_on[lk->n++] = r;
    return 0;
}

static int look_collect(look *lk, shared_event *r)
{
    pthread_mutex_lock(&pool_lock);
    int rc = look_collect_locked(lk, r);
    pthread_mutex_unlock(&pool_lock);
    return rc;
}

// Forgets the sweeps at the head of the cover that have passed, raising `covered` to theirs:
// sweeps of one stream pass in the order they were recorded. Registry lock held. 0 or -1.
static int cover_advance(cci_stream_cover *c)
{
    while (c->sweeps) {
        shared_event *sw = c->sweeps;
        int p = shared_passed(sw);
        if (p < 0)
            return -1;
        if (p == 0)
            return 0;
        if (sw->upto > c->covered)
            c->covered = sw->upto;
        c->sweeps = sw->next;
        drop_shared_ref(sw);
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

// Is the stream's work from before fence f done? Registry lock held (each_nonblocking).
// 0 to go on (covered, or pending / collected: lk says which), -1 on error.
static int cover_stream(const cci_stream_ref *ref, void *arg)
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
    unsigned long long now = atomic_load(&fence_clock);
    count(&stream_checks);
    if (on_watcher)
        count(&watcher_checks);
    lk->asked++;
    CUresult q = cci_real_drv()->cuStreamQuery(ref->s);
    if (q == CUDA_SUCCESS) {
        // Idle now: everything queued on it before those fences has finished. Work queued after
        // the query is the program's, after the frees; a later fence gets a look of its own.
        count(&stream_idle_answers);
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
    count(&sweeps_recorded);
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

// Asks the retired event at *pr (pool lock held): 1 passed, and it left the list (*pr is now the
// next one); 0 pending; -1 error.
static int retired_prune_locked(shared_event **pr)
{
    shared_event *r = *pr;
    int p = shared_passed(r);
    if (p == 1) {
        *pr = r->next;
        drop_shared_ref_locked(r);
    }
    return p;
}

// The retired events a fence must include: those of streams that existed at its record and whose
// last work has not been seen to pass (passed ones leave the list). After the live streams.
// 0 or -1.
static int cover_retired(look *lk)
{
    int rc = 0;
    pthread_mutex_lock(&pool_lock);
    for (shared_event **pr = &retired_list; rc == 0 && *pr;) {
        shared_event *r = *pr;
        if (r->born > lk->f->streams) {
            pr = &r->next;
            continue;
        }
        if (lk->waiting) {
            if (!atomic_load(&r->passed))
                rc = look_collect_locked(lk, r);
            pr = &r->next;
            continue;
        }
        int p = retired_prune_locked(pr);
        if (p == 1)
            continue;
        if (p < 0)
            rc = -1;
        else
            lk->pending = 1;
        pr = &r->next;
    }
    pthread_mutex_unlock(&pool_lock);
    return rc;
}

int cci_cuda_fence_retired_done(void)
{
    int p = 1;
    pthread_mutex_lock(&pool_lock);
    while (retired_list && (p = retired_prune_locked(&retired_list)) == 1)
        ;
    pthread_mutex_unlock(&pool_lock);
    return p;
}

static void look_drop(look *lk)
{
    for (size_t i = 0; i < lk->n; i++)
        drop_shared_ref(lk->wait_on[i]);
    free(lk->wait_on);
}

// ---- the fence group ------------------------------------------------------------------------

static int fence_push(cuda_fence *f, CUevent e, int device, unsigned gen)
{
    if (f->n == f->cap) {
        size_t want = f->cap ? 2 * f->cap : 4;
        fence_event *grown = realloc(f->ev, want * sizeof *grown);
        if (!grown)
            return -1;
        f->ev = grown;
        f->cap = want;
    }
    f->ev[f->n++] = (fence_event){.ev = e, .device = device, .gen = gen};
    return 0;
}

static void pool_give(int device, CUevent e, unsigned gen);

static void fence_drop_events(cuda_fence *f)
{
    pthread_mutex_lock(&pool_lock);
    for (size_t i = 0; i < f->n; i++)
        pool_put_locked(f->ev[i].device, f->ev[i].ev, f->ev[i].gen);
    pthread_mutex_unlock(&pool_lock);
    f->n = 0;
}

// One event per device we hold a primary context of: on its legacy stream, or (ctxwide) for every
// stream of the context. 0 or -1.
static int record_each_device(cuda_fence *f, int ctxwide)
{
    int rc = 0;
    for (int d = 0; d < CCI_PL_MAX_DEVICES && rc == 0; d++) {
        if (!cci_cuda_backend_primary(d, 0))
            continue;
        unsigned gen;
        CUevent e = ctxwide ? record_ctx_event(d, &gen) : record_event(d, CCI_CU_STREAM_LEGACY, &gen);
        if (!e || fence_push(f, e, d, gen)) {
            if (e)
                pool_give(d, e, gen);
            rc = -1;
        }
    }
    return rc;
}

// Context events. 0, or -1 with none left in f (the caller then records legacy events instead).
static int record_ctx_fence(cuda_fence *f)
{
    if (!cci_capture_gate_enter())
        return -1;  // a capture may be underway: nothing may be recorded context-wide
    int rc = record_each_device(f, 1);
    cci_capture_gate_leave();
    if (rc || f->n == 0) {
        fence_drop_events(f);
        return -1;
    }
    f->ctxwide = 1;
    atomic_fetch_add_explicit(&ctx_records, 1, memory_order_relaxed);
    return 0;
}

static int fence_record(void *ctx, int device, uint64_t stream, cci_fence *out)
{
    (void)ctx;
    (void)device;  // every device's work may touch this device's memory (peer access): all
    (void)stream;  // the core only asks for CCI_STREAM_ALL; any other key is covered by "all"
    const cci_real_driver *t = cci_real_drv();
    if (cci_capture_maybe_active() || !have_events(t) ||
        atomic_load(&cci__stream_registry_incomplete))
        return CCI_EBACKEND;
    cuda_fence *f = calloc(1, sizeof *f);
    if (!f)
        return CCI_EBACKEND;
    unsigned long long t0 = cci_pl_now_ns();
    // Every stream the program could have used before the free is registered by now.
    f->streams = cci_stream_registry_epoch();
    f->seq = atomic_fetch_add(&fence_clock, 1) + 1;
    // A context fence where the fence would be no barrier (a barrier needs its legacy event).
    int rc = cci_context_fences_usable() && !cci_fences_may_barrier() && record_ctx_fence(f) == 0
                 ? 0
                 : record_each_device(f, 0);
    cost_add(COST_RECORD, t0, f->n);
    if (rc != 0 || f->n == 0) {
        fence_free(f);
        return CCI_EBACKEND;
    }
    if (f->ctxwide) {
        // Every live stream is covered; a destroyed stream's last work is its retired event's.
        if (cci_cuda_fence_retired_done() == 1)
            atomic_store_explicit(&f->streams_covered, 1, memory_order_release);
        *out = (cci_fence)(uintptr_t)f;
        return CCI_OK;
    }
    // THE BARRIER (stream_registry.h): one device's legacy event, nothing outside its implicit
    // order, and no destroyed stream's last work still pending.
    f->barrier = f->n == 1 && cci_fences_may_barrier() && cci_cuda_fence_retired_done() == 1;
    if (f->barrier)
        count(&barrier_records);
    else if (cci_stream_registry_live() > LOOK_CHEAP_STREAMS)
        cci_fence_watcher_news();  // looks are dear: the watcher makes them (started at the first)
    *out = (cci_fence)(uintptr_t)f;
    return CCI_OK;
}

// Raises f->passed to at least n (two threads may both have seen events pass).
static void passed_at_least(cuda_fence *f, size_t n)
{
    size_t cur = atomic_load_explicit(&f->passed, memory_order_relaxed);
    while (cur < n && !atomic_compare_exchange_weak_explicit(&f->passed, &cur, n, memory_order_relaxed,
                                                             memory_order_relaxed))
        ;
}

// Is a look at the non-blocking streams worth its cost now, for a fence asked in passing? One
// look covers every fence recorded before it, so a look put off serves every fence recorded
// meanwhile. On the H100 (resnet, PyTorch's idle stream pool) the GPU kept up with the CPU,
// every fence got a look of its own, and ~25 cuStreamQuery calls a fence cost 92-107 ms over 32
// steps: 3-5 % of that host-bound run's wall time. So looks asked in passing are rationed to
// about 2 % of the host's time (the last look's cost, measured, sets the pause before the
// next: about 2 ms after a 42 us look), which also bounds how long a passed fence waits for its
// look. A rationed ask answers CCI_FENCE_PUT_OFF. Never rationed where a look is cheap (few
// streams); an ask in full (a poor fit a pending block could improve, a miss) and a wait always
// look.
#define LOOK_TIME_SHARE 50  // a look, then at least 50 times its cost before the next

static int look_put_off(void)
{
    if (cci_stream_registry_live() <= LOOK_CHEAP_STREAMS)
        return 0;
    unsigned long long pause = LOOK_TIME_SHARE * atomic_load_explicit(&last_look_cost, memory_order_relaxed);
    if (cci_pl_now_ns() - atomic_load_explicit(&last_look_end, memory_order_relaxed) >= pause)
        return 0;
    count(&looks_put_off);
    return 1;
}

// The look itself: the live non-blocking streams, then the retired events. When it asked the
// driver anything, its own cost (the host's time in it; a wait's blocking comes after) is what
// look_put_off rations by. 0 or -1.
static int look_at_streams(look *lk)
{
    unsigned long long since = cci_pl_now_ns();
    // A context fence's events covered every live stream: only the retired events are left.
    int live = lk->f->ctxwide ? 0 : cci_stream_registry_each_nonblocking(cover_stream, lk);
    int rc = live || cover_retired(lk) ? -1 : 0;
    if (lk->asked || lk->busy)
        atomic_store_explicit(&last_look_busy, lk->busy, memory_order_relaxed);
    if (lk->asked) {
        unsigned long long end = cci_pl_now_ns();
        atomic_store_explicit(&last_look_cost, end - since, memory_order_relaxed);
        atomic_store_explicit(&last_look_end, end, memory_order_relaxed);
    }
    return rc;
}

// Whether the watcher found f passed; then f says so from now on.
static int watched(cuda_fence *f)
{
    if (f->seq > atomic_load_explicit(&watched_upto, memory_order_acquire))
        return 0;
    passed_at_least(f, f->n);
    atomic_store_explicit(&f->streams_covered, 1, memory_order_release);
    count(&watched_answers);
    return 1;
}

static int fence_ask(cci_fence handle, int in_passing)
{
    cuda_fence *f = (cuda_fence *)(uintptr_t)handle;
    if (watched(f))
        return 1;
    // The watcher asks in the background what a poll would ask in passing; it tells when it knows.
    if (in_passing && !f->ctxwide && cci_fence_watcher_running())
        return CCI_FENCE_PUT_OFF;
    unsigned long long t0 = cci_pl_now_ns();
    size_t i = atomic_load_explicit(&f->passed, memory_order_relaxed), first = i;
    int rc = 1;
    for (; i < f->n; i++) {
        int p = event_passed(f->ev[i].ev, f->ev[i].device);
        if (p <= 0) {
            rc = p < 0 ? CCI_EBACKEND : 0;
            i++;  // this event was asked too
            break;
        }
        passed_at_least(f, i + 1);
    }
    // The legacy part has passed: now, and only now, the non-blocking streams.
    if (rc == 1 && !atomic_load_explicit(&f->streams_covered, memory_order_acquire)) {
        look lk = {.f = f};
        if (in_passing && !f->ctxwide && look_put_off())
            rc = CCI_FENCE_PUT_OFF;
        else if (look_at_streams(&lk))
            rc = CCI_EBACKEND;
        else if (lk.pending)
            rc = 0;
        else
            atomic_store_explicit(&f->streams_covered, 1, memory_order_release);
        look_drop(&lk);
    }
    cost_add(COST_QUERY, t0, i - first);
    return rc;
}

static int fence_query(void *ctx, int device, cci_fence handle)
{
    (void)ctx;
    (void)device;
    return fence_ask(handle, 0);
}

static int fence_poll(void *ctx, int device, cci_fence handle)
{
    (void)ctx;
    (void)device;
    return fence_ask(handle, 1);
}

static int fence_wait(void *ctx, int device, cci_fence handle)
{
    (void)ctx;
    (void)device;
    cuda_fence *f = (cuda_fence *)(uintptr_t)handle;
    if (watched(f))
        return CCI_OK;
    unsigned long long t0 = cci_pl_now_ns();
    size_t i = atomic_load_explicit(&f->passed, memory_order_relaxed), first = i, waited = 0;
    int rc = CCI_OK;
    // The legacy events first: once they have passed, the streams' looks below find most of the
    // non-blocking streams idle, and the sweeps recorded cover as little extra work as possible.
    for (; i < f->n && rc == CCI_OK; i++) {
        if (event_wait(f->ev[i].ev, f->ev[i].device)) {
            rc = CCI_EBACKEND;
            break;
        }
        passed_at_least(f, i + 1);
    }
    waited = i - first;
    if (rc == CCI_OK && !atomic_load_explicit(&f->streams_covered, memory_order_acquire)) {
        look lk = {.f = f, .waiting = 1};
        if (look_at_streams(&lk))
            rc = CCI_EBACKEND;
        // Locks dropped: block on every sweep and retired event collected (each held by a
        // reference), and mark it passed for the fences that share it.
        for (size_t k = 0; rc == CCI_OK && k < lk.n; k++) {
            if (atomic_load(&lk.wait_on[k]->passed))
                continue;
            if (event_wait(lk.wait_on[k]->ev, lk.wait_on[k]->device)) {
                rc = CCI_EBACKEND;
                break;
            }
            atomic_store_explicit(&lk.wait_on[k]->passed, 1, memory_order_release);
            waited++;
        }
        if (rc == CCI_OK)
            atomic_store_explicit(&f->streams_covered, 1, memory_order_release);
        look_drop(&lk);
    }
    cost_add(COST_WAIT, t0, waited);
    return rc;
}

static int fence_orders(void *ctx, int device, cci_fence handle)
{
    (void)ctx;
    (void)device;
    const cuda_fence *f = (const cuda_fence *)(uintptr_t)handle;
    // A barrier at its record, or covered by a round of THE ORDER since (below).
    return f->barrier || (f->n == 1 && f->seq <= atomic_load_explicit(&ordered_upto, memory_order_acquire));
}

// ---- THE ORDER: a wait for reuse answered without blocking the host ---------------------------

// Work queued on `waiter` (a stream of `device`) from now on waits for `e`'s work as recorded now.
static CUresult stream_wait(CUstream waiter, int device, CUevent e)
{
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc))
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = cci_real_drv()->cuStreamWaitEvent(waiter, e, 0);
    cci_cuda_leave(&sc);
    return r;
}

// An event back to its device's pool once streams wait for it: a wait took the event's state at
// its call, so a later record of the event cannot move it.
static void pool_give(int device, CUevent e, unsigned gen)
{
    pthread_mutex_lock(&pool_lock);
    pool_put_locked(device, e, gen);
    pthread_mutex_unlock(&pool_lock);
}

// A fence is waited for when its blocks are wanted for a new owner (the pool would grow
// otherwise). The wait keeps every old owner's work, queued before the free, ahead of every new
// owner's, queued after the allocation. The same order can be had on the GPU without stopping
// the host, where one device's legacy event covers the fence:
//   - the legacy stream, blocking and per-thread streams: old work there is before the fence's
//     legacy event E (facts 1, 3), and new work queued there later runs after everything queued
//     on the legacy stream before it (facts 1, 3): that much is THE BARRIER;
//   - a non-blocking stream N that answers idle now: its old work has run (as for a look);
//   - a non-blocking stream N that answers busy: a sweep event S_N recorded on it now is after
//     its old work, and the legacy stream is made to wait for S_N (cuStreamWaitEvent), so new
//     work on the legacy, blocking and per-thread streams runs after N's old work too;
//   - new work on a non-blocking stream is ordered with nothing: every live one is made to wait
//     for T, an event recorded on the legacy stream after the questions and its waits for the
//     sweeps (so after all old work on every stream, of every fence recorded before the round);
//   - a non-blocking stream created later waits for the legacy stream's earlier work when it is
//     registered, before the program has its handle (cci_cuda_fence_order_new_stream).
// Then the fence orders all later work after all earlier work, and its batch and every older one
// may go to new owners at once. The GPU is held back no more than by a host wait: work queued
// after a host wait for E and the sweeps could not start before them either (only T also holds a
// non-blocking stream's new work behind legacy work queued after the fence, which lets one round
// order every fence recorded before it). No cycle can form: every wait is for work already
// queued. The host does not block.
// Refused (the core then waits) where the barrier's other conditions fail: more than one
// device's event, a second device, peer access, a capture, a destroyed stream's last work still
// pending, or a driver call that failed. resnet under PyTorch on the H100 (32 idle pool streams)
// waited 606-827 times a process, blocked 88-123 ms (session 11, before this).

// Busy streams a round sweeps at most (CCI_FENCE_ORDER_MAX_BUSY, backend.h); with more it is
// refused and the host waits. A round makes every non-blocking stream wait for the legacy stream,
// so until the GPU has caught up with that point they all answer busy: where the GPU stays
// behind, every round would sweep every stream again (on the fake under load: 3 500 rounds of ~64
// driver calls in a loop of 8 192 pairs). A host wait instead lets the device catch up, after
// which the streams answer idle. A few streams with work of their own (NCCL's under DDP) are swept.

typedef struct order_round {
    unsigned long long now;  // the fence clock before the first question
    unsigned long long streams;  // the fence's registry epoch: streams born later had no old work
    int device;              // the fence's device: its legacy stream waits for the sweeps
    unsigned busy;           // streams that answered busy (swept, the legacy stream waits)
    int skipped;             // a stream born after the fence's record was not asked
    CUevent target;          // what every non-blocking stream waits for (pass two)
} order_round;

// Pass one (registry lock held): each non-blocking stream asked; an idle answer is also a look
// for every fence up to `now` (cover_stream's reasoning); a busy one gets a sweep that the
// legacy stream waits for. 0 to go on, 1 to refuse.
static int order_ask(const cci_stream_ref *ref, void *arg)
{
    order_round *o = arg;
    const cci_real_driver *t = cci_real_drv();
    if (ref->born > o->streams) {
        o->skipped = 1;
        return 0;  // registered after the record: none of its work is the old owners'
    }
    // Found idle after every fence up to `now` was recorded (a look, most often the watcher's
    // look ahead): its old work has run, as an idle answer now would say.
    const cci_stream_cover *covered = *ref->cover;
    if (covered && covered->covered >= o->now) {
        count(&order_skips);
        return 0;
    }
    count(&stream_checks);
    CUresult q = t->cuStreamQuery(ref->s);
    if (q == CUDA_SUCCESS) {
        count(&stream_idle_answers);
        cci_stream_cover *c = *ref->cover;
        if (!c && (c = calloc(1, sizeof *c)) != NULL)
            *ref->cover = c;
        if (c && c->covered < o->now)
            c->covered = o->now;
        return 0;
    }
    if (q != CCI_CUDA_ERROR_NOT_READY)
        return 1;  // a capturing stream (unseen capture) or an error: neither asked again nor swept
    if (++o->busy > CCI_FENCE_ORDER_MAX_BUSY)
        return 1;
    unsigned gen;
    CUevent sweep = record_event(ref->device, ref->s, &gen);
    if (!sweep)
        return 1;
    count(&sweeps_recorded);
    CUresult r = stream_wait(CCI_CU_STREAM_LEGACY, o->device, sweep);
    pool_give(ref->device, sweep, gen);
    if (r != CUDA_SUCCESS)
        return 1;
    count(&order_injections);
    return 0;
}

// Pass two (registry lock held): the stream waits for the round's target.
static int order_inject(const cci_stream_ref *ref, void *arg)
{
    const order_round *o = arg;
    CUresult r = stream_wait(ref->s, ref->device, o->target);
    if (r != CUDA_SUCCESS) {
        cci_log(CCI_LOG_DEBUG, "device %d: cuStreamWaitEvent on stream %p for a fence failed "
                "(CUresult %d)", ref->device, (void *)ref->s, r);
        return 1;
    }
    count(&order_injections);
    return 0;
}

// The two passes. 1 when the fence now orders all later work, 0 when not (the host then waits:
// whatever was queued meanwhile only orders more).
static int order_now(cuda_fence *f)
{
    order_round o = {.now = atomic_load(&fence_clock), .streams = f->streams, .device = f->ev[0].device};
    if (cci_stream_registry_each_nonblocking(order_ask, &o))
        return 0;
    // The target: the legacy stream's tail, after every fence up to `now` and after its waits for
    // the sweeps, so this round orders every fence up to `now`, not only f (ordered_upto).
    unsigned gen = 0;
    o.target = record_event(o.device, CCI_CU_STREAM_LEGACY, &gen);
    if (!o.target)
        return 0;
    int ok = cci_stream_registry_each_nonblocking(order_inject, &o) == 0;
    pool_give(o.device, o.target, gen);
    if (ok) {
        // Streams born after f's record were not asked (no old work of f's); later fences may
        // have some there, so then only f counts as ordered.
        raise_upto(&ordered_upto, o.skipped ? f->seq : o.now);
    }
    return ok;
}

// THE ORDER with context events: a context event T recorded now holds all work queued so far on
// every stream of the device (all old owners' work of every fence up to `now`: their frees, hence
// their work, came before the clock was read), and cuCtxWaitEvent makes all work queued later, on
// any stream of the context, those created later included, wait for T. So every fence up to `now`
// orders all later work, without blocking the host, in two driver calls whatever the number of
// streams. As for the per-stream round, the GPU is held back no more than a host wait would.
// Inside the capture gate: both calls would invalidate a capture.
//
// A context wait holds every stream's later work behind every stream's earlier work: with many
// streams busy at once (threads each feeding a stream of its own), that is a device-wide barrier
// at every order. The per-stream round refused such rounds (more than CCI_FENCE_ORDER_MAX_BUSY
// busy streams: the host waits instead). So does this one, from a census of the non-blocking
// streams: at every round where the last census found some stream busy (streams then come and go
// busy, as each round's questions saw them before), and at most every CENSUS_NS while it found
// them all idle (an idle pool, PyTorch's, stays idle: a census a round would cost there the
// questions context fences save). On the fake with 16 threads, each on a busy
// stream of its own, ordering anyway cut the fenced pairs to ~4 000 a second (from 0.84 M).
#define CENSUS_NS 20000000ull  // 20 ms: ~0.1 % of the host's time for 32 streams at ~1.5 us each
static unsigned long long census_end;  // capture gate held
static unsigned census_found;          // busy streams the last census saw (capped)

static int census_ask(const cci_stream_ref *ref, void *arg)
{
    unsigned *busy = arg;
    count(&stream_checks);
    CUresult q = cci_real_drv()->cuStreamQuery(ref->s);
    if (q == CUDA_SUCCESS) {
        count(&stream_idle_answers);
        return 0;
    }
    // Busy, or an error (counted as busy): enough of them decide it.
    return ++*busy > CCI_FENCE_ORDER_MAX_BUSY;
}

// Busy non-blocking streams, at most every CENSUS_NS asked anew. Capture gate held (a question
// to a capturing stream would break its capture).
static unsigned census_busy(void)
{
    unsigned long long now = cci_pl_now_ns();
    // Kept for CENSUS_NS only while it found every stream idle (PyTorch's pool): where any is
    // busy, streams come and go busy, and one asked each round is what the per-stream round did.
    if (census_end && census_found == 0 && now - census_end < CENSUS_NS)
        return census_found;
    unsigned busy = 0;
    cci_stream_registry_each_nonblocking(census_ask, &busy);
    census_found = busy;
    census_end = cci_pl_now_ns();
    // Context fences make no looks: the census is what fence_busy reports then.
    atomic_store_explicit(&last_look_busy, busy, memory_order_relaxed);
    return busy;
}

// Where more than CCI_FENCE_ORDER_MAX_BUSY non-blocking streams live, one order at a time on the
// GPU: the last order's target is kept, and while the GPU has not reached it the next order is
// answered CCI_ORDER_BEHIND: the core waits for that target (fence_catch_up), then orders. Without
// a bound the host never waited and ran ever further ahead of the GPU: on the H100 (session 16,
// 21 resnet processes, a fast host) 5 of 21 peaked 1.046-1.073x immediate reuse's 3626 MiB.
// Session 16 refused the order instead, so the host waited for the fence the core wanted, newer
// than the target, which can leave the GPU nothing queued: resnet read 1.10x native's wall time
// that way and 1.00x with the catch-up, in the same 11 rounds on the H100 (session 17). The per-stream
// round had the same bound without saying so, and only there: after a round every stream waits
// for its target, so until the GPU reached it more than 4 streams answered busy and the next
// round was refused; with 4 or fewer streams nothing held it back, nor does anything here.
// Capture gate held for all of these.
static CUevent order_last;
static unsigned order_last_gen;
static int order_last_device;

// The last order's target back to the pool (a wait took the event's state at its call, so a
// later record of the event cannot move it).
static void order_forget(void)
{
    if (order_last)
        pool_give(order_last_device, order_last, order_last_gen);  // (a stale one is only forgotten)
    order_last = NULL;
}

// 1 when an order's target of `device` taken at generation `gen` is still that device's event
// (no device reset since, which forgets the pool's events), else 0.
static int order_target_current(int device, unsigned gen)
{
    pthread_mutex_lock(&pool_lock);
    int current = gen == generation[device];
    pthread_mutex_unlock(&pool_lock);
    return current;
}

// 1 when no order is outstanding (the last one's target passed, or there was none), else 0.
static int order_outstanding_done(void)
{
    if (!order_last)
        return 1;
    if (order_target_current(order_last_device, order_last_gen) && event_passed(order_last, order_last_device) == 0)
        return 0;  // (a failed question frees the slot too: the target goes back to the pool)
    order_forget();
    return 1;
}

static int ctx_order_now(cuda_fence *f)
{
    int device = f->ev[0].device;
    CUcontext c = cci_cuda_backend_primary(device, 0);
    if (!c || !cci_capture_gate_enter())
        return 0;
    int throttled = cci_stream_registry_nonblocking_live() > CCI_FENCE_ORDER_MAX_BUSY;
    if (!throttled)
        order_forget();  // (kept from a time with more streams)
    if (throttled && !order_outstanding_done()) {
        cci_capture_gate_leave();
        return CCI_ORDER_BEHIND;  // the core waits for the last order's target (fence_catch_up)
    }
    if (census_busy() > CCI_FENCE_ORDER_MAX_BUSY) {
        cci_capture_gate_leave();
        return 0;
    }
    unsigned long long now = atomic_load(&fence_clock);
    unsigned gen = 0;
    CUevent target = record_ctx_event(device, &gen);
    CUresult r = CUDA_ERROR_NOT_INITIALIZED;
    if (target) {
        cci_driver_scope sc;
        if (cci_cuda_enter(device, &sc) == 0) {
            r = cci_real_drv()->cuCtxWaitEvent(c, target);
            cci_cuda_leave(&sc);
        }
        if (r == CUDA_SUCCESS && throttled) {
            order_last = target;
            order_last_gen = gen;
            order_last_device = device;
        } else {
            pool_give(device, target, gen);
        }
    }
    cci_capture_gate_leave();
    if (r != CUDA_SUCCESS) {
        cci_log(CCI_LOG_DEBUG, "device %d: cuCtxWaitEvent for a fence failed (CUresult %d)", device, r);
        return 0;
    }
    atomic_fetch_add_explicit(&ctx_orders, 1, memory_order_relaxed);
    raise_upto(&ordered_upto, now);
    return 1;
}

static int fence_order(void *ctx, int device, cci_fence handle)
{
    cuda_fence *f = (cuda_fence *)(uintptr_t)handle;
    const cci_real_driver *t = cci_real_drv();
    if (fence_orders(ctx, device, handle)) {
        if (!f->barrier)
            count(&orders_covered);  // by a round after its record
        return 1;
    }
    if (f->n != 1 || !t->cuStreamWaitEvent || cci_capture_maybe_active() ||
        atomic_load(&cci__stream_registry_incomplete))
        return 0;
    unsigned long long t0 = cci_pl_now_ns();
    // The rule first: it marks that barriers were given (seq_cst) before the registry is read,
    // so a stream registered after the look below is ordered at its registration.
    int rc = 0;
    if (cci_fences_may_order() && cci_cuda_fence_retired_done() == 1)
        rc = f->ctxwide ? ctx_order_now(f) : order_now(f);
    count(rc == 1 ? &orders_made : rc == CCI_ORDER_BEHIND ? &orders_behind : &orders_refused);
    cost_add(COST_ORDER, t0, 0);
    return rc;
}

// The core's answer to CCI_ORDER_BEHIND, with its lock dropped: the host waits for the last
// order's target, recorded at that order, so the GPU still has the work queued since then when
// the host goes on; a wait for the fence the core wanted (newer) would drain it. The event is
// read inside the capture gate and waited for outside it. Given back to the pool meanwhile and
// recorded again by another fence, it makes this wait longer, never too short; destroyed by a
// device reset, the wait fails and the core waits for its fence instead.
static int fence_catch_up(void *ctx, int device)
{
    (void)ctx;
    (void)device;
    unsigned long long t0 = cci_pl_now_ns();
    if (!cci_capture_gate_enter())
        return CCI_EBACKEND;
    CUevent e = order_last;
    int dev = order_last_device;
    unsigned gen = order_last_gen;
    cci_capture_gate_leave();
    int current = e && order_target_current(dev, gen);
    int rc = current ? event_wait(e, dev) : 0;
    cost_add(COST_CATCH_UP, t0, current);
    return rc == 0 ? CCI_OK : CCI_EBACKEND;
}

void cci_cuda_fence_order_new_stream(CUstream s, int device)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return;
    const cci_real_driver *t = cci_real_drv();
    unsigned gen;
    CUevent e = NULL;
    // Not during a capture (nothing may be recorded on the legacy stream then): a capture's
    // begin synchronised every device after the barriers and orders given before it, and none is
    // given while a capture may be underway.
    if (t->cuStreamWaitEvent && !cci_capture_maybe_active() &&
        (e = record_event(device, CCI_CU_STREAM_LEGACY, &gen)) != NULL) {
        CUresult r = stream_wait(s, device, e);
        pool_give(device, e, gen);
        if (r == CUDA_SUCCESS)
            return;
    }
    if (cci_capture_maybe_active())
        return;
    // No wait could be queued: the stream's first work must still not overtake old work.
    cci_log(CCI_LOG_DEBUG, "device %d: ordering a new stream after the fences failed; "
            "synchronising the device", device);
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc) == 0) {
        if (t->cuStreamSynchronize)
            t->cuStreamSynchronize(CCI_CU_STREAM_LEGACY);
        cci_cuda_leave(&sc);
    }
}

static void fence_release(void *ctx, int device, cci_fence handle)
{
    (void)ctx;
    (void)device;
    fence_free((cuda_fence *)(uintptr_t)handle);
}

// The cost of a fence: one event on the legacy stream of each device we hold a primary context
// of, plus, in the worst case, one question per live stream (when the GPU keeps up with the CPU,
// every fence gets a look of its own). The live streams bound the non-blocking ones (blocking
// streams are overcounted, which only makes the core more careful). So the core's poor-fit
// harvest (FENCED_FIT_HARVEST_MAX_WIDTH) stays off for programs with many streams, as before the
// look was lazy: its gain there was never measured against that worst case.
static unsigned fence_width(void *ctx, int device)
{
    (void)ctx;
    (void)device;
    // With context fences too: a record is then one event per device, but the core's poor-fit
    // policy keeps the width it was tuned with (no harvest, and no sparing of the newest batches
    // while every side stream is idle, where many streams live). Reporting 1 let the harvest and
    // the sparing in: on the H100 one resnet process of five then peaked at 3770 MiB (1.040x
    // immediate reuse) with ~12 000 records, against 3622 and ~2 400 (session 16).
    size_t n = cci_stream_registry_live();
    for (int d = 0; d < CCI_PL_MAX_DEVICES; d++)
        n += cci_cuda_backend_primary_peek(d) != NULL;  // no lock: a moment's figure
    if (n == 0)
        n = 1;
    return n > UINT_MAX ? UINT_MAX : (unsigned)n;
}

// Busy side streams, as the last look that asked or found a sweep saw them (with context fences:
// the last census of THE ORDER), whichever device's
// fence it was for: a fence covers every device's non-blocking streams. 0 when every one was idle
// (PyTorch's stream pool on one GPU) or none exists; a moment's figure, read without a lock.
static unsigned fence_busy(void *ctx, int device)
{
    (void)ctx;
    (void)device;
    return atomic_load_explicit(&last_look_busy, memory_order_relaxed);
}

const cci_backend_fence_ops cci_cuda_fence_ops = {
    .width = fence_width,
    .busy = fence_busy,
    .orders = fence_orders,
    .order = fence_order,
    .catch_up = fence_catch_up,
    .record = fence_record,
    .query = fence_query,
    .poll = fence_poll,
    .wait = fence_wait,
    .release = fence_release,
};

// ---- destroyed streams ----------------------------------------------------------------------

void cci_cuda_fence_forget_cover(cci_stream_cover *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&pool_lock);
    for (shared_event *sw = c->sweeps, *n; sw; sw = n) {
        n = sw->next;
        drop_shared_ref_locked(sw);
    }
    pthread_mutex_unlock(&pool_lock);
    free(c);
}

void cci_cuda_fence_retire_stream(CUstream s, int device, unsigned long long born,
                                  cci_stream_cover *cover)
{
    // The retired event recorded below is after all of the stream's work, so it supersedes the
    // stream's sweeps for every fence.
    cci_cuda_fence_forget_cover(cover);
    const cci_real_driver *t = cci_real_drv();
    if ((unsigned)device >= CCI_PL_MAX_DEVICES || !have_events(t))
        return;
    shared_event *r = calloc(1, sizeof *r);
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc))
        goto fail;
    pthread_mutex_lock(&pool_lock);
    CUevent e = r ? pool_get_locked(device) : NULL;
    CUresult rc = e ? t->cuEventRecord(e, s) : CUDA_ERROR_NOT_INITIALIZED;
    if (rc == CUDA_SUCCESS) {
        *r = (shared_event){.ev = e, .device = device, .refs = 1, .gen = generation[device],
                            .born = born, .next = retired_list};
        retired_list = r;
        r = NULL;
    } else if (e) {
        pool_put_locked(device, e, generation[device]);
    }
    pthread_mutex_unlock(&pool_lock);
    // No event could cover the stream's last work: wait for it here, once, rather than let a
    // later fence miss it (a stream destruction is rare, and CUDA's own waits for nothing).
    if (r && t->cuStreamSynchronize)
        t->cuStreamSynchronize(s);
    cci_cuda_leave(&sc);
fail:
    free(r);
}

void cci_cuda_fence_drop_device(int device)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return;
    pthread_mutex_lock(&pool_lock);
    generation[device]++;
    pools[device].n = 0;  // forgotten, not destroyed: the reset destroys the context's events
    for (shared_event **pr = &retired_list; *pr;) {
        shared_event *r = *pr;
        if (r->device != device) {
            pr = &r->next;
            continue;
        }
        *pr = r->next;
        drop_shared_ref_locked(r);
    }
    pthread_mutex_unlock(&pool_lock);
}

void cci_cuda_fence_atfork_child(void)
{
    // The parent's events are not the child's to use or destroy: forget them.
    pthread_mutex_init(&pool_lock, NULL);
    for (int d = 0; d < CCI_PL_MAX_DEVICES; d++)
        pools[d].n = 0;
    retired_list = NULL;
    atomic_store(&stream_checks, 0);  // the child's exit line counts the child's fences
    atomic_store(&stream_idle_answers, 0);
    atomic_store(&sweeps_recorded, 0);
    atomic_store(&last_look_busy, 0);
    atomic_store(&shared_queries, 0);
    atomic_store(&looks_put_off, 0);
    atomic_store(&barrier_records, 0);
    atomic_store(&orders_made, 0);
    atomic_store(&orders_refused, 0);
    atomic_store(&orders_behind, 0);
    atomic_store(&order_injections, 0);
    atomic_store(&orders_covered, 0);
    atomic_store(&ordered_upto, 0);
    atomic_store(&watched_upto, 0);
    atomic_store(&watcher_checks, 0);
    atomic_store(&watcher_rounds, 0);
    atomic_store(&watcher_looks_ahead, 0);
    atomic_store(&order_skips, 0);
    atomic_store(&watched_answers, 0);
    atomic_store(&ctx_records, 0);
    atomic_store(&ctx_orders, 0);
    census_end = 0;
    order_last = NULL;  // the parent's event
    for (int k = 0; k < COST_KINDS; k++) {
        atomic_store(&cost_calls[k], 0);
        atomic_store(&cost_events[k], 0);
        atomic_store(&cost_ns[k], 0);
    }
}

// ---- for the watcher (fence_watcher.c) ----------------------------------------------------------
// Its marks are events of the pool recorded on a device's legacy stream. Each call runs under
// pool_lock in the device's primary context as it is now, never retaining one: a device whose
// context goes (cci_cuda_fence_drop_device bumps the generation under the same lock, before the
// context is released) is neither marked nor asked again, and no context is made anew for it.

unsigned long long cci_cuda_fence_clock(void)
{
    return atomic_load(&fence_clock);
}

// The primary context of `device` made current, under pool_lock; 0, or -1 (none now).
static int mark_enter_locked(int device)
{
    CUcontext c = cci_cuda_backend_primary(device, 0);
    return c && cci_real_drv()->cuCtxPushCurrent_v2(c) == CUDA_SUCCESS ? 0 : -1;
}

static void mark_leave_locked(void)
{
    CUcontext popped;
    cci_real_drv()->cuCtxPopCurrent_v2(&popped);
}

CUevent cci_cuda_fence_mark(int device, unsigned *gen)
{
    const cci_real_driver *t = cci_real_drv();
    CUevent e = NULL;
    if ((unsigned)device >= CCI_PL_MAX_DEVICES || !have_events(t))
        return NULL;
    pthread_mutex_lock(&pool_lock);
    if (mark_enter_locked(device) == 0) {
        *gen = generation[device];
        e = pool_get_locked(device);
        if (e && t->cuEventRecord(e, CCI_CU_STREAM_LEGACY) != CUDA_SUCCESS) {
            pool_put_locked(device, e, *gen);
            e = NULL;
        }
        mark_leave_locked();
    }
    pthread_mutex_unlock(&pool_lock);
    return e;
}

int cci_cuda_fence_mark_passed(int device, CUevent e, unsigned gen)
{
    int p = -1;
    pthread_mutex_lock(&pool_lock);
    if (gen == generation[device] && mark_enter_locked(device) == 0) {
        CUresult r = cci_real_drv()->cuEventQuery(e);
        p = r == CUDA_SUCCESS ? 1 : r == CCI_CUDA_ERROR_NOT_READY ? 0 : -1;
        mark_leave_locked();
    }
    pthread_mutex_unlock(&pool_lock);
    return p;
}

void cci_cuda_fence_mark_give(int device, CUevent e, unsigned gen)
{
    pool_give(device, e, gen);
}

int cci_cuda_fence_look_upto(unsigned long long upto)
{
    on_watcher = 1;
    // Every fence up to `upto` was recorded before this epoch is read, so each one's streams
    // are among those asked (a stream born later is asked too, which only asks more).
    cuda_fence f = {.seq = upto, .streams = cci_stream_registry_epoch()};
    look lk = {.f = &f, .careful = 1};
    int rc = look_at_streams(&lk) ? -1 : lk.pending ? 0 : 1;
    look_drop(&lk);
    if (rc == 1)
        count(&watcher_rounds);
    return rc;
}

int cci_cuda_fence_look_ahead(unsigned long long upto)
{
    on_watcher = 1;
    cuda_fence f = {.seq = upto, .streams = cci_stream_registry_epoch()};
    look lk = {.f = &f, .careful = 1, .idle_only = 1};
    int rc = cci_stream_registry_each_nonblocking(cover_stream, &lk) ? -1 : 0;
    look_drop(&lk);
    count(&watcher_looks_ahead);
    return rc;
}

void cci_cuda_fence_publish(unsigned long long upto)
{
    raise_upto(&watched_upto, upto);
}
