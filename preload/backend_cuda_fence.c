// SPDX-License-Identifier: MIT
// The CUDA backend's fence group (src/core/backend.h, cci_backend_fence_ops).
//
// A fence is a set of events. The core records every fence for CCI_STREAM_ALL: a block freed with
// cudaFree may have been used by any stream. Which streams "all" must cover, from the ordering
// facts (docs/reuse-modes.md):
//   - the legacy stream of every device whose primary context we hold: an event there passes only
//     once all earlier work of every blocking stream and every per-thread default stream of that
//     context has finished (they are ordered with the legacy stream), and work of another device
//     (peer access, peer copies) is covered by that device's own legacy event;
//   - every live non-blocking stream (ordered with nothing but itself), runtime- or
//     driver-created (stream_registry.c);
//   - every destroyed stream whose last work may still be pending: an event recorded on it just
//     before the destroy was forwarded, kept until it has passed.
// Events come from a pool per device (created with CU_EVENT_DISABLE_TIMING only when the pool is
// empty), never one per free: the core records one fence per batch of frees.
//
// During a capture nothing may be recorded on the legacy stream (it would invalidate a global
// capture), so record fails with CCI_EBACKEND and the core falls back (frees wait, as DEFERRED).
// wait() blocks; the core never calls it with the allocator lock held.
#include "backend_cuda_fence.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "backend_cuda.h"
#include "log.h"
#include "real.h"
#include "stream_registry.h"
#include "streams.h"


// ---- events ---------------------------------------------------------------------------------

// The last work of a destroyed stream: shared by every fence recorded while it may be pending.
typedef struct retired {
    CUevent ev;
    int device;
    int refs;  // the retired list's own reference, plus one per fence holding it
    unsigned gen;
    struct retired *next;
} retired;

typedef struct fence_event {
    CUevent ev;
    int device;
    retired *shared;  // NULL: the fence's own event, back to the pool at release
    unsigned gen;     // the device's context generation the event belongs to
} fence_event;

typedef struct cuda_fence {
    size_t n, cap;
    // Events [0, passed) are known to have passed. Atomic: query runs under the allocator lock,
    // wait with it dropped, so both may look at one fence at once; it only ever grows.
    _Atomic size_t passed;
    fence_event *ev;
} cuda_fence;

// One lock for the pools and the retired list; taken inside the registry lock (never around it).
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
typedef struct event_pool {
    CUevent *ev;
    size_t n, cap;
} event_pool;
static event_pool pools[CCI_PL_MAX_DEVICES];
static retired *retired_list;
// Bumped when a device's primary context goes (cudaDeviceReset, cuDevicePrimaryCtxReset): its
// events went with it, so an event of an older generation is forgotten, never reused.
static unsigned generation[CCI_PL_MAX_DEVICES];

// ---- what fences cost the host --------------------------------------------------------------
// A fence is cheap when its events are recorded and queried, and costs the program's speed when
// the host blocks on one (the GPU's queue drains while the CPU waits). The exit log says how much
// of each happened, so that a slow run under the default mode can be put down to the waits or
// cleared of them (CCI_LOG=info).
enum { COST_RECORD, COST_QUERY, COST_WAIT, COST_KINDS };
static _Atomic unsigned long long cost_calls[COST_KINDS], cost_events[COST_KINDS], cost_ns[COST_KINDS];
static _Atomic unsigned long long idle_skips;  // non-blocking streams found idle: no event needed

static unsigned long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static void cost_add(int kind, unsigned long long since, size_t events)
{
    atomic_fetch_add_explicit(&cost_calls[kind], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&cost_events[kind], events, memory_order_relaxed);
    atomic_fetch_add_explicit(&cost_ns[kind], now_ns() - since, memory_order_relaxed);
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
    cci_log(CCI_LOG_INFO, "fence costs on the host: %llu records (%llu events, %llu idle streams "
            "skipped) %.1f ms; %llu queries (%llu events) %.1f ms; %llu waits (%llu events) blocked "
            "%.1f ms", c[COST_RECORD], e[COST_RECORD], atomic_load(&idle_skips), ns[COST_RECORD] / 1e6,
            c[COST_QUERY], e[COST_QUERY], ns[COST_QUERY] / 1e6, c[COST_WAIT], e[COST_WAIT],
            ns[COST_WAIT] / 1e6);
}

static int have_events(const cci_real_driver *t)
{
    return t->cuEventCreate && t->cuEventRecord && t->cuEventQuery && t->cuEventSynchronize &&
           t->cuEventDestroy_v2;
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

static void drop_retired_ref_locked(retired *r)
{
    if (--r->refs == 0) {
        pool_put_locked(r->device, r->ev, r->gen);
        free(r);
    }
}

static int fence_push(cuda_fence *f, CUevent e, int device, retired *shared, unsigned gen)
{
    if (f->n == f->cap) {
        size_t want = f->cap ? 2 * f->cap : 8;
        fence_event *grown = realloc(f->ev, want * sizeof *grown);
        if (!grown)
            return -1;
        f->ev = grown;
        f->cap = want;
    }
    f->ev[f->n++] = (fence_event){.ev = e, .device = device, .shared = shared, .gen = gen};
    return 0;
}

// Records one pooled event of `device` on `s` into f. pool_lock held. 0 or -1.
static int record_on_locked(cuda_fence *f, int device, CUstream s)
{
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc))
        return -1;
    CUevent e = pool_get_locked(device);
    CUresult r = e ? cci_real_drv()->cuEventRecord(e, s) : CUDA_ERROR_NOT_INITIALIZED;
    cci_cuda_leave(&sc);
    unsigned gen = generation[device];
    if (r != CUDA_SUCCESS) {
        if (e)
            pool_put_locked(device, e, gen);
        cci_log(CCI_LOG_DEBUG, "device %d: recording a fence event on stream %p failed "
                "(CUresult %d)", device, (void *)s, r);
        return -1;
    }
    if (fence_push(f, e, device, NULL, gen)) {
        pool_put_locked(device, e, gen);
        return -1;
    }
    return 0;
}

// A non-blocking stream with nothing queued needs no event: every piece of work queued on it
// before this record has finished already. PyTorch creates its pool of 32 such streams at the
// first use of one and mostly leaves them idle; an event on each, recorded at every fence and
// queried at every poll, cost resnet ~180 ms of host time over 32 steps on the H100 (the fence
// costs line at CCI_LOG=info). Work queued on the stream after the query is the program's after
// the free, which the fence need not cover. A busy stream, or an answer other than "idle" (an
// invalid handle: the record then reports it), gets its event.
static int stream_idle(CUstream s)
{
    const cci_real_driver *t = cci_real_drv();
    return t->cuStreamQuery && t->cuStreamQuery(s) == CUDA_SUCCESS;
}

static int record_on_stream(CUstream s, int device, void *arg)
{
    if (stream_idle(s)) {
        atomic_fetch_add_explicit(&idle_skips, 1, memory_order_relaxed);
        return 0;
    }
    pthread_mutex_lock(&pool_lock);
    int rc = record_on_locked(arg, device, s);
    pthread_mutex_unlock(&pool_lock);
    return rc;
}

// 1 passed, 0 pending, -1 error. Inside no lock but pool_lock's caller's choice.
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

static void fence_free(cuda_fence *f)
{
    pthread_mutex_lock(&pool_lock);
    for (size_t i = 0; i < f->n; i++) {
        if (f->ev[i].shared)
            drop_retired_ref_locked(f->ev[i].shared);
        else
            pool_put_locked(f->ev[i].device, f->ev[i].ev, f->ev[i].gen);
    }
    pthread_mutex_unlock(&pool_lock);
    free(f->ev);
    free(f);
}

// ---- the fence group ------------------------------------------------------------------------

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
    unsigned long long t0 = now_ns();
    int rc = 0;
    pthread_mutex_lock(&pool_lock);
    for (int d = 0; d < CCI_PL_MAX_DEVICES && rc == 0; d++)
        if (cci_cuda_backend_primary(d, 0))
            rc = record_on_locked(f, d, CCI_CU_STREAM_LEGACY);
    pthread_mutex_unlock(&pool_lock);
    if (rc == 0)
        rc = cci_stream_registry_each_nonblocking(record_on_stream, f);
    // After the live streams: a stream destroyed meanwhile was either recorded above or is in
    // the retired list by now (the registry retires it before it leaves the list).
    pthread_mutex_lock(&pool_lock);
    for (retired **pr = &retired_list; rc == 0 && *pr;) {
        retired *r = *pr;
        int passed = event_passed(r->ev, r->device);
        if (passed == 1) {
            *pr = r->next;
            drop_retired_ref_locked(r);
            continue;
        }
        if (passed < 0 || fence_push(f, r->ev, r->device, r, r->gen)) {
            rc = -1;
            break;
        }
        r->refs++;
        pr = &r->next;
    }
    pthread_mutex_unlock(&pool_lock);
    cost_add(COST_RECORD, t0, f->n);
    if (rc != 0 || f->n == 0) {
        fence_free(f);
        return CCI_EBACKEND;
    }
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

static int fence_query(void *ctx, int device, cci_fence handle)
{
    (void)ctx;
    (void)device;
    cuda_fence *f = (cuda_fence *)(uintptr_t)handle;
    unsigned long long t0 = now_ns();
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
    cost_add(COST_QUERY, t0, i - first);
    return rc;
}

static int fence_wait(void *ctx, int device, cci_fence handle)
{
    (void)ctx;
    (void)device;
    cuda_fence *f = (cuda_fence *)(uintptr_t)handle;
    unsigned long long t0 = now_ns();
    size_t i = atomic_load_explicit(&f->passed, memory_order_relaxed), first = i;
    int rc = CCI_OK;
    for (; i < f->n && rc == CCI_OK; i++) {
        cci_driver_scope sc;
        if (cci_cuda_enter(f->ev[i].device, &sc)) {
            rc = CCI_EBACKEND;
            break;
        }
        CUresult r = cci_real_drv()->cuEventSynchronize(f->ev[i].ev);
        cci_cuda_leave(&sc);
        if (r != CUDA_SUCCESS) {
            cci_log(CCI_LOG_DEBUG, "device %d: cuEventSynchronize on a fence failed (CUresult %d)",
                    f->ev[i].device, r);
            rc = CCI_EBACKEND;
            break;
        }
        passed_at_least(f, i + 1);
    }
    cost_add(COST_WAIT, t0, i - first);
    return rc;
}

static void fence_release(void *ctx, int device, cci_fence handle)
{
    (void)ctx;
    (void)device;
    fence_free((cuda_fence *)(uintptr_t)handle);
}

// A record makes one event on each device's legacy stream and one on each non-blocking stream:
// the live streams bound it (blocking ones are covered by the legacy event, so this overcounts
// them, which only makes the core more careful).
static unsigned fence_width(void *ctx, int device)
{
    (void)ctx;
    (void)device;
    size_t n = 1 + cci_stream_registry_live();
    return n > UINT_MAX ? UINT_MAX : (unsigned)n;
}

const cci_backend_fence_ops cci_cuda_fence_ops = {
    .width = fence_width,
    .record = fence_record,
    .query = fence_query,
    .wait = fence_wait,
    .release = fence_release,
};

// ---- destroyed streams ----------------------------------------------------------------------

void cci_cuda_fence_retire_stream(CUstream s, int device)
{
    const cci_real_driver *t = cci_real_drv();
    if ((unsigned)device >= CCI_PL_MAX_DEVICES || !have_events(t))
        return;
    retired *r = calloc(1, sizeof *r);
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc))
        goto fail;
    pthread_mutex_lock(&pool_lock);
    CUevent e = r ? pool_get_locked(device) : NULL;
    CUresult rc = e ? t->cuEventRecord(e, s) : CUDA_ERROR_NOT_INITIALIZED;
    if (rc == CUDA_SUCCESS) {
        *r = (retired){.ev = e, .device = device, .refs = 1, .gen = generation[device],
                       .next = retired_list};
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
    for (retired **pr = &retired_list; *pr;) {
        retired *r = *pr;
        if (r->device != device) {
            pr = &r->next;
            continue;
        }
        *pr = r->next;
        drop_retired_ref_locked(r);
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
    atomic_store(&idle_skips, 0);
    for (int k = 0; k < COST_KINDS; k++) {  // the child's exit line counts the child's fences
        atomic_store(&cost_calls[k], 0);
        atomic_store(&cost_events[k], 0);
        atomic_store(&cost_ns[k], 0);
    }
}
