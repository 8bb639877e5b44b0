// SPDX-License-Identifier: MIT
// THE ORDER: a wait for reuse answered on the GPU, without blocking the host.
//
// A fence is waited for when its blocks are wanted for a new owner. The wait keeps every old
// owner's work (queued before the free) ahead of every new owner's (queued after the allocation).
// Where one device's legacy event E covers the fence, the same order is had on the GPU:
//   - legacy, blocking and per-thread streams: old work there is before E, and new work there
//     runs after everything queued on the legacy stream before it; that much is THE BARRIER;
//   - a non-blocking stream that answers idle now: its old work has run (as for a look);
//   - one that answers busy: a sweep S recorded on it now is after its old work, and the legacy
//     stream is made to wait for S, so new legacy, blocking and per-thread work runs after it;
//   - new work on a non-blocking stream: every live one is made to wait for T, an event recorded
//     on the legacy stream after the questions and the waits for the sweeps (so after all old
//     work of every fence recorded before the round); one created later waits for the legacy
//     stream when it is registered (cci_cuda_fence_order_new_stream).
// Then the fence, and every fence before the round, orders all later work after all earlier
// work. The GPU is held back no more than by a host wait (work queued after a host wait could not
// start earlier either), and no cycle can form: every wait is for work already queued.
// Refused (the core then waits) where a barrier's other conditions fail: another device's event,
// peer access, a capture, a destroyed stream's last work pending, a driver call that failed. On
// the H100, resnet under PyTorch (32 idle pool streams) had waited 606-827 times a process,
// blocked 88-123 ms, before this (docs/benchmarks.md, H100 runs of 2026-11-24; 0336088).
// docs/reuse-modes.md gives the ordering facts this rests on.
#include "fence_impl.h"

#include <stdlib.h>

#include "backend_cuda.h"
#include "captures.h"
#include "clock.h"
#include "context_fences.h"
#include "settings.h"

// Every fence with seq <= ordered_upto orders all later work (a round made every live
// non-blocking stream wait for an event recorded after it, and left no stream unasked). Never a
// reason to call a fence passed: unmapping asks query and wait, which still look.
static _Atomic unsigned long long ordered_upto;

int cci__fence_orders(void *ctx, int device, cci_fence handle)
{
    (void)ctx;
    (void)device;
    const cuda_fence *f = (const cuda_fence *)(uintptr_t)handle;
    // A barrier at its record, or covered by a round of THE ORDER since (below).
    return f->barrier || (f->n == 1 && f->seq <= atomic_load_explicit(&ordered_upto, memory_order_acquire));
}

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

// ---- the per-stream round ---------------------------------------------------------------------
// A round sweeps at most CCI_FENCE_ORDER_MAX_BUSY busy streams (backend.h); with more it is
// refused and the host waits. A round makes every non-blocking stream wait for the legacy stream,
// so until the GPU has caught up with that point they all answer busy: where the GPU stays
// behind, every round would sweep every stream again (on the fake under load: 3 500 rounds of ~64
// driver calls in a loop of 8 192 pairs, 0336088). A host wait lets the device catch up, after
// which the streams answer idle. A few streams with work of their own (NCCL's) are swept.

typedef struct order_round {
    unsigned long long now;      // the fence clock before the first question
    unsigned long long streams;  // the fence's registry epoch: streams born later had no old work
    int device;                  // the fence's device: its legacy stream waits for the sweeps
    unsigned busy;               // streams that answered busy (swept, the legacy stream waits)
    int skipped;                 // a stream born after the fence's record was not asked
    CUevent target;              // what every non-blocking stream waits for (pass two)
} order_round;

// Pass one (registry lock held): each non-blocking stream asked; an idle answer is also a look
// for every fence up to `now` (fence_looks.c); a busy one gets a sweep that the legacy stream
// waits for. 0 to go on, 1 to refuse.
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
        FENCE_COUNT(order_skips);
        return 0;
    }
    FENCE_COUNT(stream_checks);
    CUresult q = t->cuStreamQuery(ref->s);
    if (q == CUDA_SUCCESS) {
        FENCE_COUNT(stream_idle_answers);
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
    FENCE_COUNT(sweeps_recorded);
    CUresult r = stream_wait(CCI_CU_STREAM_LEGACY, o->device, sweep);
    cci__fence_pool_give(ref->device, sweep, gen);
    if (r != CUDA_SUCCESS)
        return 1;
    FENCE_COUNT(order_injections);
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
    FENCE_COUNT(order_injections);
    return 0;
}

// The two passes. 1 when the fence now orders all later work, 0 when not (the host then waits:
// whatever was queued meanwhile only orders more).
static int order_now(cuda_fence *f)
{
    order_round o = {.now = atomic_load(&cci__fence_clock), .streams = f->streams, .device = f->ev[0].device};
    if (cci_stream_registry_each_nonblocking(order_ask, &o))
        return 0;
    // The target: the legacy stream's tail, after every fence up to `now` and after its waits for
    // the sweeps, so this round orders every fence up to `now`, not only f (ordered_upto).
    unsigned gen = 0;
    o.target = record_event(o.device, CCI_CU_STREAM_LEGACY, &gen);
    if (!o.target)
        return 0;
    int ok = cci_stream_registry_each_nonblocking(order_inject, &o) == 0;
    cci__fence_pool_give(o.device, o.target, gen);
    if (ok) {
        // Streams born after f's record were not asked (no old work of f's); later fences may
        // have some there, so then only f counts as ordered.
        raise_upto(&ordered_upto, o.skipped ? f->seq : o.now);
    }
    return ok;
}

// ---- the context order ------------------------------------------------------------------------
// With context events: a context event T recorded now holds all work queued so far on every
// stream of the device (all old owners' work of every fence up to `now`), and cuCtxWaitEvent makes
// all work queued later on any stream of the context, those created later included, wait for T:
// two driver calls whatever the number of streams. Inside the capture gate: both calls would
// invalidate a capture.
//
// A context wait holds every stream's later work behind every stream's earlier work: with many
// streams busy at once (threads each feeding a stream of its own) that is a device-wide barrier
// at every order. So, as the per-stream round does, an order is refused where more than
// CCI_FENCE_ORDER_MAX_BUSY non-blocking streams are busy, from a census: at every round where the
// last census found some stream busy, and at most every CENSUS_NS while it found them all idle (an
// idle pool, PyTorch's, stays idle). On the fake with 16 threads, each on a busy stream of its own,
// ordering anyway cut the fenced pairs to ~4 000 a second, from 0.84 M (2026-11-25, efe120f).
#define CENSUS_NS 20000000ull  // 20 ms: ~0.1 % of the host's time for 32 streams at ~1.5 us each
static unsigned long long census_end;  // capture gate held
static unsigned census_found;          // busy streams the last census saw (capped)
static _Atomic int side_work_seen;     // some census found a non-blocking stream busy (stays set)

static int census_ask(const cci_stream_ref *ref, void *arg)
{
    unsigned *busy = arg;
    FENCE_COUNT(stream_checks);
    CUresult q = cci_real_drv()->cuStreamQuery(ref->s);
    if (q == CUDA_SUCCESS) {
        FENCE_COUNT(stream_idle_answers);
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
    if (busy)
        atomic_store(&side_work_seen, 1);
    census_end = cci_pl_now_ns();
    // Context fences make no looks: the census is what fence_ops.busy reports then.
    atomic_store_explicit(&cci__fence_last_look_busy, busy, memory_order_relaxed);
    return busy;
}

// Where more than CCI_FENCE_ORDER_MAX_BUSY non-blocking streams live, one order at a time on the
// GPU: the last order's target is kept, and while the GPU has not reached it the next order is
// answered CCI_ORDER_BEHIND: the core waits for that target (catch_up, below), then orders. Without
// a bound the host ran ever further ahead of the GPU: on the H100, 5 of 21 resnet processes
// peaked 1.046-1.073x immediate reuse's 3626 MiB (2026-11-25, 9e860a6). Refusing the order
// instead made the host wait for the newer fence the core wanted, which can leave the GPU nothing
// queued: resnet read 1.10x native's wall time that way and 1.00x with the catch-up (2026-11-25,
// 871133c). The per-stream round has the same bound implicitly: after a round every stream waits
// for its target, so until the GPU reached it more than 4 streams answer busy and the next round
// is refused. Capture gate held for all of these.
static CUevent order_last;
static unsigned order_last_gen;
static int order_last_device;

// The last order's target back to the pool (a wait took the event's state at its call, so a
// later record of the event cannot move it).
static void order_forget(void)
{
    if (order_last)
        cci__fence_pool_give(order_last_device, order_last, order_last_gen);  // (a stale one is only forgotten)
    order_last = NULL;
}

// 1 when an order's target of `device` taken at generation `gen` is still that device's event
// (no device reset since, which forgets the pool's events), else 0.
static int order_target_current(int device, unsigned gen)
{
    pthread_mutex_lock(&cci__fence_pool_lock);
    int current = gen == cci__fence_generation[device];
    pthread_mutex_unlock(&cci__fence_pool_lock);
    return current;
}

// 1 when no order is outstanding (the last one's target passed, or there was none), else 0.
static int order_outstanding_done(void)
{
    if (!order_last)
        return 1;
    if (order_target_current(order_last_device, order_last_gen) &&
        cci__fence_event_passed(order_last, order_last_device) == 0)
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
        return CCI_ORDER_BEHIND;  // the core waits for the last order's target (catch_up)
    }
    if (census_busy() > CCI_FENCE_ORDER_MAX_BUSY) {
        cci_capture_gate_leave();
        return 0;
    }
    unsigned long long now = atomic_load(&cci__fence_clock);
    unsigned gen = 0;
    CUevent target = cci__fence_record_ctx_event(device, &gen);
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
            cci__fence_pool_give(device, target, gen);
        }
    }
    cci_capture_gate_leave();
    if (r != CUDA_SUCCESS) {
        cci_log(CCI_LOG_DEBUG, "device %d: cuCtxWaitEvent for a fence failed (CUresult %d)", device, r);
        return 0;
    }
    FENCE_COUNT(ctx_orders);
    raise_upto(&ordered_upto, now);
    return 1;
}

// ---- the order at reuse (fence_ops.reuse_order) -----------------------------------------------
// Where no stream is busy beside the device's own order, an order costs the GPU nothing, and a
// fence at every batch of frees only delays reuse: a freed block waited in its batch, and then
// behind the one order outstanding, while the allocation took another block. The layouts drifted
// from what immediate reuse makes, and PyTorch's idle stream pool alone kept a generation
// workload 7 % above native on an H200 (docs/benchmarks.md, "JAX's host wait priced ...",
// 2026-11-29). So a free asked here (`now` 0) may skip its fence: the core puts the block in its
// free set at once and, before it hands any block to a new owner, asks for one order (`now` 1),
// which covers every free made before it:
//   - no non-blocking stream live (THE BARRIER's situation): an event recorded on the legacy
//     stream; every stream that can exist is ordered through it;
//   - idle non-blocking streams, context fences on: a context event and cuCtxWaitEvent, as THE
//     ORDER's context round makes, without its one-order-at-a-time bound (that bound keeps the
//     host from running ever further ahead while orders wait for busy streams; none is busy here,
//     and a free that skipped its fence leaves nothing to catch up with).
// Not offered with non-blocking streams live once any of them was found busy (NCCL's under DDP): the
// program overlaps work across streams there, and a context wait before every reuse would hold
// each stream's next work behind all the work queued so far, communication behind compute; such
// programs keep THE ORDER's fences and their bound. Refused where the device has more than one
// primary context of ours, a capture may run, or a destroyed stream's last work may still run:
// the core then waits for a fence of its own. The stream rule's synchronisation of every device
// (cci_cuda_fence_reuse_sync_begin/_end) also covers every such free, so a capture begun after
// them finds nothing left to order.
static _Atomic int reuse_unordered;  // a free skipped its fence since the last order or sync

static int reuse_may(void)
{
    const cci_real_driver *t = cci_real_drv();
    if (!cci_settings_get()->reuse_orders || !t->cuStreamWaitEvent || cci_capture_maybe_active() ||
        atomic_load(&cci__stream_registry_incomplete) || cci_cuda_backend_primaries() != 1)
        return 0;
    if (!cci_fences_may_order() || cci_cuda_fence_retired_done() != 1)
        return 0;
    if (cci_fences_may_barrier())
        return 1;
    if (!cci_context_fences_usable() || atomic_load(&side_work_seen) || !cci_capture_gate_enter())
        return 0;
    unsigned busy = census_busy();
    cci_capture_gate_leave();
    return busy == 0;
}

// The order itself, inside the capture gate. 1 when made.
static int reuse_order_now(int device)
{
    CUcontext c = cci_cuda_backend_primary(device, 0);
    if (!c || cci_cuda_backend_primaries() != 1 || !cci_fences_may_order() ||
        cci_cuda_fence_retired_done() != 1)
        return 0;
    unsigned long long now = atomic_load(&cci__fence_clock);
    unsigned gen = 0;
    int barrier = cci_fences_may_barrier();
    CUevent e = barrier ? record_event(device, CCI_CU_STREAM_LEGACY, &gen)
                        : cci_context_fences_usable() ? cci__fence_record_ctx_event(device, &gen) : NULL;
    if (!e)
        return 0;
    CUresult r = CUDA_SUCCESS;
    if (!barrier) {
        cci_driver_scope sc;
        r = CUDA_ERROR_NOT_INITIALIZED;
        if (cci_cuda_enter(device, &sc) == 0) {
            r = cci_real_drv()->cuCtxWaitEvent(c, e);
            cci_cuda_leave(&sc);
        }
    }
    cci__fence_pool_give(device, e, gen);
    if (r != CUDA_SUCCESS)
        return 0;
    // Every fence recorded so far orders all later work too (as after a round of THE ORDER);
    // with a barrier only while it stays one, which the rule's synchronisation covers.
    if (!barrier)
        raise_upto(&ordered_upto, now);
    return 1;
}

int cci__fence_reuse_order(void *ctx, int device, int now)
{
    (void)ctx;
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return 0;
    if (!now) {
        int may = reuse_may();
        if (may) {
            atomic_store(&reuse_unordered, 1);  // before the core frees the block
            FENCE_COUNT(reuse_frees);
        }
        return may;
    }
    // Nothing skipped its fence since the last order or synchronisation: nothing to order.
    if (!atomic_exchange(&reuse_unordered, 0))
        return 1;
    unsigned long long t0 = cci_pl_now_ns();
    int ok = 0;
    if (!cci_capture_maybe_active() && cci_capture_gate_enter()) {
        ok = reuse_order_now(device);
        cci_capture_gate_leave();
    }
    if (!ok)
        atomic_store(&reuse_unordered, 1);  // still to order: the core waits for a fence instead
    if (ok)
        FENCE_COUNT(reuse_orders);
    else
        FENCE_COUNT(reuse_refused);
    cci__fence_cost_add(COST_REUSE_ORDER, t0, ok);
    return ok;
}

int cci_cuda_fence_reuse_sync_begin(void)
{
    return atomic_exchange(&reuse_unordered, 0);
}

void cci_cuda_fence_reuse_sync_end(int skipped, int synced)
{
    if (skipped && !synced)
        atomic_store(&reuse_unordered, 1);
}

// ---- the contract's side ----------------------------------------------------------------------

int cci__fence_order(void *ctx, int device, cci_fence handle)
{
    cuda_fence *f = (cuda_fence *)(uintptr_t)handle;
    const cci_real_driver *t = cci_real_drv();
    if (cci__fence_orders(ctx, device, handle)) {
        if (!f->barrier)
            FENCE_COUNT(orders_covered);  // by a round after its record
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
    if (rc == 1)
        FENCE_COUNT(orders_made);
    else if (rc == CCI_ORDER_BEHIND)
        FENCE_COUNT(orders_behind);
    else
        FENCE_COUNT(orders_refused);
    cci__fence_cost_add(COST_ORDER, t0, 0);
    return rc;
}

// The core's answer to CCI_ORDER_BEHIND, with its lock dropped: the host waits for the last
// order's target, recorded at that order, so the GPU still has the work queued since then when
// the host goes on; a wait for the fence the core wanted (newer) would drain it. The event is
// read inside the capture gate and waited for outside it. Given back to the pool meanwhile and
// recorded again by another fence, it makes this wait longer, never too short; destroyed by a
// device reset, the wait fails and the core waits for its fence instead.
int cci__fence_catch_up(void *ctx, int device)
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
    int rc = current ? cci__fence_event_wait(e, dev) : 0;
    cci__fence_cost_add(COST_CATCH_UP, t0, current);
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
        cci__fence_pool_give(device, e, gen);
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

void cci__fence_order_atfork_child(void)
{
    atomic_store(&ordered_upto, 0);
    census_end = 0;
    order_last = NULL;  // the parent's event
    atomic_store(&reuse_unordered, 0);  // (the child's allocators start anew)
    atomic_store(&side_work_seen, 0);
}
