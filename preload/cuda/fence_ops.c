// SPDX-License-Identifier: MIT
// The CUDA fence group as the core's contract sees it (src/core/backend.h, cci_backend_fence_ops):
// record, query and poll, wait, release, and the figures the core's policy asks (width, busy).
//
// A record touches the legacy streams only: one pooled event per device we hold a primary context
// of (fence_impl.h says what that covers), and notes the fence clock and the registry's epoch for
// the lazy part (fence_looks.c), which a query or a wait does once the legacy events have passed.
// During a capture nothing may be recorded on a legacy stream (it would invalidate a global
// capture): a record then fails with CCI_EBACKEND and the core falls back (its frees wait, as
// DEFERRED). wait() blocks; the core never calls it with the allocator lock held.
//
// CONTEXT FENCES (context_fences.h, where the driver has cuCtxRecordEvent): a fence that is no
// barrier records instead one context event per device, which covers every stream of that
// device's primary context at once. It needs no look at the non-blocking streams, only at the
// retired events. Recorded inside the capture gate (its shared side) only: the call would
// invalidate any capture of the context. A barrier keeps its legacy event: its place on the legacy
// stream is what orders later work (a context event orders nothing after it).
#include "fence_impl.h"

#include <limits.h>
#include <stdlib.h>

#include "backend_cuda.h"
#include "captures.h"
#include "clock.h"
#include "context_fences.h"

_Atomic unsigned long long cci__fence_clock;

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

static void fence_drop_events(cuda_fence *f)
{
    pthread_mutex_lock(&cci__fence_pool_lock);
    for (size_t i = 0; i < f->n; i++)
        cci__fence_pool_put_locked(f->ev[i].device, f->ev[i].ev, f->ev[i].gen);
    pthread_mutex_unlock(&cci__fence_pool_lock);
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
        CUevent e = ctxwide ? cci__fence_record_ctx_event(d, &gen) : record_event(d, CCI_CU_STREAM_LEGACY, &gen);
        if (!e || fence_push(f, e, d, gen)) {
            if (e)
                cci__fence_pool_give(d, e, gen);
            rc = -1;
        }
    }
    return rc;
}

// Context events. 0, or -1 with none left in f (the caller then records legacy events instead).
static int record_ctx_fence(cuda_fence *f)
{
    if (!cci_capture_gate_share())
        return -1;  // a capture may be underway: nothing may be recorded context-wide
    int rc = record_each_device(f, 1);
    cci_capture_gate_unshare();
    if (rc || f->n == 0) {
        fence_drop_events(f);
        return -1;
    }
    f->ctxwide = 1;
    FENCE_COUNT(ctx_records);
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
    f->seq = atomic_fetch_add(&cci__fence_clock, 1) + 1;
    // A context fence where the fence would be no barrier (a barrier needs its legacy event).
    int rc = cci_context_fences_usable() && !cci_fences_may_barrier() && record_ctx_fence(f) == 0
                 ? 0
                 : record_each_device(f, 0);
    cci__fence_cost_add(COST_RECORD, t0, f->n);
    if (rc != 0 || f->n == 0) {
        cci__fence_free(f);
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
        FENCE_COUNT(barrier_records);
    else if (cci_stream_registry_live() > LOOK_CHEAP_STREAMS)
        cci__fence_watcher_news();  // looks are dear: the watcher makes them (started at the first)
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

// Whether the watcher found f passed; then f says so from now on.
static int watched(cuda_fence *f)
{
    if (f->seq > atomic_load_explicit(&cci__fence_watched_upto, memory_order_acquire))
        return 0;
    passed_at_least(f, f->n);
    atomic_store_explicit(&f->streams_covered, 1, memory_order_release);
    FENCE_COUNT(watched_answers);
    return 1;
}

static int fence_ask(cci_fence handle, int in_passing)
{
    cuda_fence *f = (cuda_fence *)(uintptr_t)handle;
    if (watched(f))
        return 1;
    // The watcher asks in the background what a poll would ask in passing; it tells when it knows.
    if (in_passing && !f->ctxwide && cci__fence_watcher_running())
        return CCI_FENCE_PUT_OFF;
    unsigned long long t0 = cci_pl_now_ns();
    size_t i = atomic_load_explicit(&f->passed, memory_order_relaxed), first = i;
    int rc = 1;
    for (; i < f->n; i++) {
        int p = cci__fence_event_passed(f->ev[i].ev, f->ev[i].device);
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
        if (in_passing && !f->ctxwide && cci__fence_look_put_off())
            rc = CCI_FENCE_PUT_OFF;
        else if (cci__fence_look_at_streams(&lk))
            rc = CCI_EBACKEND;
        else if (lk.pending)
            rc = 0;
        else
            atomic_store_explicit(&f->streams_covered, 1, memory_order_release);
        cci__fence_look_drop(&lk);
    }
    cci__fence_cost_add(COST_QUERY, t0, i - first);
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
        if (cci__fence_event_wait(f->ev[i].ev, f->ev[i].device)) {
            rc = CCI_EBACKEND;
            break;
        }
        passed_at_least(f, i + 1);
    }
    waited = i - first;
    if (rc == CCI_OK && !atomic_load_explicit(&f->streams_covered, memory_order_acquire)) {
        look lk = {.f = f, .waiting = 1};
        if (cci__fence_look_at_streams(&lk))
            rc = CCI_EBACKEND;
        // Locks dropped: block on every sweep and retired event collected (each held by a
        // reference), and mark it passed for the fences that share it.
        for (size_t k = 0; rc == CCI_OK && k < lk.n; k++) {
            if (atomic_load(&lk.wait_on[k]->passed))
                continue;
            if (cci__fence_event_wait(lk.wait_on[k]->ev, lk.wait_on[k]->device)) {
                rc = CCI_EBACKEND;
                break;
            }
            atomic_store_explicit(&lk.wait_on[k]->passed, 1, memory_order_release);
            waited++;
        }
        if (rc == CCI_OK)
            atomic_store_explicit(&f->streams_covered, 1, memory_order_release);
        cci__fence_look_drop(&lk);
    }
    cci__fence_cost_add(COST_WAIT, t0, waited);
    return rc;
}

static void fence_release(void *ctx, int device, cci_fence handle)
{
    (void)ctx;
    (void)device;
    cci__fence_free((cuda_fence *)(uintptr_t)handle);
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
    // immediate reuse) with ~12 000 records, against 3622 and ~2 400 (2026-11-25, 2b17582).
    size_t n = cci_stream_registry_live() + cci_cuda_backend_primaries();  // a moment's figure
    if (n == 0)
        n = 1;
    return n > UINT_MAX ? UINT_MAX : (unsigned)n;
}

// Busy side streams, as the last look that asked or found a sweep saw them (with context fences:
// the last census of THE ORDER), whichever device's fence it was for: a fence covers every
// device's non-blocking streams. 0 when every one was idle (PyTorch's stream pool on one GPU) or
// none exists; a moment's figure, read without a lock.
static unsigned fence_busy(void *ctx, int device)
{
    (void)ctx;
    (void)device;
    return atomic_load_explicit(&cci__fence_last_look_busy, memory_order_relaxed);
}

const cci_backend_fence_ops cci_cuda_fence_ops = {
    .width = fence_width,
    .busy = fence_busy,
    .orders = cci__fence_orders,
    .order = cci__fence_order,
    .catch_up = cci__fence_catch_up,
    .reuse_order = cci__fence_reuse_order,
    .record = fence_record,
    .query = fence_query,
    .poll = fence_poll,
    .wait = fence_wait,
    .release = fence_release,
};
