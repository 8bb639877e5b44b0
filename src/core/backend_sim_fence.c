// SPDX-License-Identifier: MIT
// The simulated device's fences: deterministic, so tests and replays decide when work completes.
//
// The device has a logical clock that advances by one at every fence record. A fence remembers its
// stream and the clock value it was recorded at, and passes once the device has completed its
// stream up to there. The device completes work in two ways: by itself, `lag` records behind the
// host (lag 0, the default: at once, so every fence passes as soon as it is recorded and replays
// behave as without fences), and when a test calls cci_sim_complete. A wait makes the device catch
// up with the fence, as a real host wait ends when the device gets there, and is counted.
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "backend_sim_fence.h"
#include "ccinterpose.h"
#include "grow.h"

typedef struct sim_stream {
    uint64_t key;
    uint64_t done;  // clock value this stream has completed up to
} sim_stream;

typedef struct sim_fence {
    uint64_t stream;
    uint64_t at;        // clock value at record; 0 marks a free slot
    int orders;         // recorded while the device's fences ordered at once (fence_ops.orders)
    size_t next_free;   // free-slot chain (index + 1; 0 ends it)
} sim_fence;

struct cci_sim_fences {
    pthread_mutex_t lock;
    uint64_t clock;
    uint64_t lag;
    uint64_t done_all;  // every stream has completed up to here
    sim_stream *streams;
    size_t nstreams, stream_cap;
    sim_fence *fences;
    size_t nfences, fence_cap, free_head;
    uint64_t records, waits, live, queries;
    unsigned width;  // the stream events a fence costs, as the backend reports it (0: 1)
    unsigned busy;   // the streams it reports busy at its looks (fence_ops.busy)
    int orders;      // fences recorded now order all later work (fence_ops.orders)
    int order;       // a wait for reuse is answered by ordering instead (fence_ops.order)
    uint64_t orders_made;
    // With more than CCI_FENCE_ORDER_MAX_BUSY streams, one order outstanding at a time, as the
    // CUDA backend keeps: the clock value of the last order (0: none), which the device has
    // reached once every stream has completed up to it.
    uint64_t order_last;
    uint64_t catch_ups;  // catch_up calls that made the device catch up with the last order
    uint64_t wait_calls, order_calls, catch_up_calls;  // every call, for the cost figures
    uint64_t orders_behind, orders_refused;            // the orders not made
    // Orders at reuse (fence_ops.reuse_order): offered while `reuse` is set and no stream is
    // modelled busy; `refuse` orders refused from now on (tests of the core's fallback).
    int reuse;
    uint64_t refuse;
    uint64_t ordered_upto;  // fences recorded up to here order all later work (an order at reuse)
    uint64_t reuse_frees, reuse_orders, reuse_refused;
};

cci_sim_fences *cci__sim_fences_create(void)
{
    cci_sim_fences *f = calloc(1, sizeof *f);
    if (f)
        pthread_mutex_init(&f->lock, NULL);
    return f;
}

void cci__sim_fences_destroy(cci_sim_fences *f)
{
    if (!f)
        return;
    pthread_mutex_destroy(&f->lock);
    free(f->streams);
    free(f->fences);
    free(f);
}

// The stream's entry, created on first use (NULL on host out-of-memory). Lock held.
static sim_stream *stream_entry(cci_sim_fences *f, uint64_t key)
{
    for (size_t i = 0; i < f->nstreams; i++)
        if (f->streams[i].key == key)
            return &f->streams[i];
    sim_stream *n = cci_grow(f->streams, &f->stream_cap, f->nstreams, sizeof *n, 8);
    if (!n)
        return NULL;
    f->streams = n;
    f->streams[f->nstreams] = (sim_stream){key, 0};
    return &f->streams[f->nstreams++];
}

static sim_fence *fence_at(cci_sim_fences *f, cci_fence h)
{
    return h >= 1 && h <= f->nfences && f->fences[h - 1].at ? &f->fences[h - 1] : NULL;
}

// Whether the device has completed every stream up to clock value `at`. Lock held.
static int reached(const cci_sim_fences *f, uint64_t at)
{
    return f->clock - at >= f->lag || f->done_all >= at;
}

static int passed(cci_sim_fences *f, const sim_fence *x)
{
    if (reached(f, x->at))
        return 1;
    if (x->stream == CCI_STREAM_ALL)
        return 0;
    const sim_stream *s = stream_entry(f, x->stream);
    return s && s->done >= x->at;
}

static int sim_fence_record(void *ctx, int device, uint64_t stream, cci_fence *out)
{
    (void)device;
    cci_sim_fences *f = cci__sim_fences_of(ctx);
    int rc = CCI_EBACKEND;
    pthread_mutex_lock(&f->lock);
    if (stream != CCI_STREAM_ALL && !stream_entry(f, stream))
        goto out;
    if (!f->free_head) {
        sim_fence *n = cci_grow(f->fences, &f->fence_cap, f->nfences, sizeof *n, 16);
        if (!n)
            goto out;
        f->fences = n;
    }
    size_t slot;
    if (f->free_head) {
        slot = f->free_head - 1;
        f->free_head = f->fences[slot].next_free;
    } else {
        slot = f->nfences++;
    }
    f->fences[slot] = (sim_fence){.stream = stream, .at = ++f->clock, .orders = f->orders};
    f->records++;
    f->live++;
    *out = slot + 1;
    rc = CCI_OK;
out:
    pthread_mutex_unlock(&f->lock);
    return rc;
}

static int sim_fence_query(void *ctx, int device, cci_fence h)
{
    (void)device;
    cci_sim_fences *f = cci__sim_fences_of(ctx);
    pthread_mutex_lock(&f->lock);
    sim_fence *x = fence_at(f, h);
    int rc = x ? passed(f, x) : CCI_EBACKEND;
    f->queries++;
    pthread_mutex_unlock(&f->lock);
    return rc;
}

static unsigned sim_fence_width(void *ctx, int device)
{
    (void)device;
    cci_sim_fences *f = cci__sim_fences_of(ctx);
    pthread_mutex_lock(&f->lock);
    unsigned w = f->width ? f->width : 1;
    pthread_mutex_unlock(&f->lock);
    return w;
}

static unsigned sim_fence_busy(void *ctx, int device)
{
    (void)device;
    cci_sim_fences *f = cci__sim_fences_of(ctx);
    pthread_mutex_lock(&f->lock);
    unsigned b = f->busy;
    pthread_mutex_unlock(&f->lock);
    return b;
}

static int sim_fence_wait(void *ctx, int device, cci_fence h)
{
    (void)device;
    cci_sim_fences *f = cci__sim_fences_of(ctx);
    int rc = CCI_OK;
    pthread_mutex_lock(&f->lock);
    f->wait_calls++;
    sim_fence *x = fence_at(f, h);
    if (!x) {
        rc = CCI_EBACKEND;
    } else if (!passed(f, x)) {
        f->waits++;
        if (x->stream == CCI_STREAM_ALL) {
            f->done_all = x->at;
        } else {
            sim_stream *s = stream_entry(f, x->stream);  // exists: record created it
            if (s->done < x->at)
                s->done = x->at;
        }
    }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

static int sim_fence_orders(void *ctx, int device, cci_fence h)
{
    (void)device;
    cci_sim_fences *f = cci__sim_fences_of(ctx);
    pthread_mutex_lock(&f->lock);
    sim_fence *x = fence_at(f, h);
    int rc = x ? x->orders || x->at <= f->ordered_upto : CCI_EBACKEND;
    pthread_mutex_unlock(&f->lock);
    return rc;
}

// An order at reuse, as the CUDA backend makes it where no side stream is busy: the device does
// not catch up (the host never blocks), and every fence recorded so far orders all later work.
static int sim_fence_reuse_order(void *ctx, int device, int now)
{
    (void)device;
    cci_sim_fences *f = cci__sim_fences_of(ctx);
    pthread_mutex_lock(&f->lock);
    int rc = f->reuse && f->busy == 0;
    if (!now) {
        f->reuse_frees += (uint64_t)rc;
    } else if (f->refuse) {
        f->refuse--;
        f->reuse_refused++;
        rc = 0;
    } else {
        f->reuse_orders++;
        f->ordered_upto = f->clock;
        rc = 1;  // (also where reuse has been turned off since: the order is still made)
    }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

// Orders instead of waiting: the device does not catch up (the host never blocked), so fences
// recorded after stay behind it as before. Where more than CCI_FENCE_ORDER_MAX_BUSY streams are
// modelled (width), an order is refused as behind while the last one's point is not reached.
static int sim_fence_order(void *ctx, int device, cci_fence h)
{
    (void)device;
    cci_sim_fences *f = cci__sim_fences_of(ctx);
    pthread_mutex_lock(&f->lock);
    f->order_calls++;
    int rc = fence_at(f, h) ? f->order : CCI_EBACKEND;
    int bounded = f->width > CCI_FENCE_ORDER_MAX_BUSY;
    if (rc == 1 && bounded && f->order_last && !reached(f, f->order_last))
        rc = CCI_ORDER_BEHIND;
    f->orders_behind += rc == CCI_ORDER_BEHIND;
    f->orders_refused += rc != 1 && rc != CCI_ORDER_BEHIND;
    if (rc == 1) {
        f->orders_made++;
        // (An order's point is the work queued so far; a record advances the clock past it.)
        f->order_last = bounded ? f->clock : 0;
    }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

// The device catches up with the last order's point, as a host wait for it would end there.
static int sim_fence_catch_up(void *ctx, int device)
{
    (void)device;
    cci_sim_fences *f = cci__sim_fences_of(ctx);
    pthread_mutex_lock(&f->lock);
    f->catch_up_calls++;
    if (f->order_last && !reached(f, f->order_last)) {
        f->catch_ups++;
        f->done_all = f->order_last;
    }
    pthread_mutex_unlock(&f->lock);
    return CCI_OK;
}

static void sim_fence_release(void *ctx, int device, cci_fence h)
{
    (void)device;
    cci_sim_fences *f = cci__sim_fences_of(ctx);
    pthread_mutex_lock(&f->lock);
    sim_fence *x = fence_at(f, h);
    if (x) {
        x->at = 0;
        x->next_free = f->free_head;
        f->free_head = h;
        f->live--;
    }
    pthread_mutex_unlock(&f->lock);
}

const cci_backend_fence_ops cci__sim_fence_ops = {
    .record = sim_fence_record,
    .query = sim_fence_query,
    .wait = sim_fence_wait,
    .release = sim_fence_release,
    .width = sim_fence_width,
    .busy = sim_fence_busy,
    .orders = sim_fence_orders,
    .order = sim_fence_order,
    .catch_up = sim_fence_catch_up,
    .reuse_order = sim_fence_reuse_order,
};

// ---- control from tests and replay (backend.h) -----------------------------------------------

// One of the settings tests and replay change between calls, written under the group's lock.
#define SET_UNDER_LOCK(sim, field, value)                                                          \
    do {                                                                                           \
        cci_sim_fences *f_ = cci__sim_fences_of(sim);                                              \
        pthread_mutex_lock(&f_->lock);                                                             \
        f_->field = (value);                                                                       \
        pthread_mutex_unlock(&f_->lock);                                                           \
    } while (0)

void cci_sim_set_fence_lag(cci_sim_device *sim, uint64_t lag) { SET_UNDER_LOCK(sim, lag, lag); }

void cci_sim_set_fence_width(cci_sim_device *sim, unsigned streams) { SET_UNDER_LOCK(sim, width, streams); }

void cci_sim_set_fence_busy(cci_sim_device *sim, unsigned streams) { SET_UNDER_LOCK(sim, busy, streams); }

void cci_sim_set_fence_orders(cci_sim_device *sim, int orders) { SET_UNDER_LOCK(sim, orders, orders != 0); }

void cci_sim_set_fence_order(cci_sim_device *sim, int order) { SET_UNDER_LOCK(sim, order, order != 0); }

void cci_sim_set_reuse_order(cci_sim_device *sim, int on) { SET_UNDER_LOCK(sim, reuse, on != 0); }

void cci_sim_refuse_reuse_orders(cci_sim_device *sim, uint64_t n) { SET_UNDER_LOCK(sim, refuse, n); }

void cci_sim_reuse_counts(const cci_sim_device *sim, uint64_t *frees, uint64_t *orders, uint64_t *refused)
{
    cci_sim_fences *f = cci__sim_fences_of(sim);
    pthread_mutex_lock(&f->lock);
    *frees = f->reuse_frees;
    *orders = f->reuse_orders;
    *refused = f->reuse_refused;
    pthread_mutex_unlock(&f->lock);
}

// One of the counters tests and replay read, under the group's lock.
static uint64_t counter_under_lock(const cci_sim_device *sim, size_t offset)
{
    cci_sim_fences *f = cci__sim_fences_of(sim);
    pthread_mutex_lock(&f->lock);
    uint64_t v;
    memcpy(&v, (const char *)f + offset, sizeof v);
    pthread_mutex_unlock(&f->lock);
    return v;
}

uint64_t cci_sim_fence_orders_made(const cci_sim_device *sim)
{
    return counter_under_lock(sim, offsetof(cci_sim_fences, orders_made));
}

uint64_t cci_sim_fence_catch_ups(const cci_sim_device *sim)
{
    return counter_under_lock(sim, offsetof(cci_sim_fences, catch_ups));
}

uint64_t cci_sim_fence_queries(const cci_sim_device *sim)
{
    return counter_under_lock(sim, offsetof(cci_sim_fences, queries));
}

void cci_sim_complete(cci_sim_device *sim, uint64_t stream)
{
    cci_sim_fences *f = cci__sim_fences_of(sim);
    pthread_mutex_lock(&f->lock);
    if (stream == CCI_STREAM_ALL) {
        f->done_all = f->clock;
    } else {
        sim_stream *s = stream_entry(f, stream);
        if (s)
            s->done = f->clock;
    }
    pthread_mutex_unlock(&f->lock);
}

void cci_sim_fence_counts(const cci_sim_device *sim, uint64_t *records, uint64_t *waits, uint64_t *live)
{
    cci_sim_fences *f = cci__sim_fences_of(sim);
    pthread_mutex_lock(&f->lock);
    if (records)
        *records = f->records;
    if (waits)
        *waits = f->waits;
    if (live)
        *live = f->live;
    pthread_mutex_unlock(&f->lock);
}

// The cost figures the simulated device has (backend.h, costs): its calls as counted above, a
// record as one event, a wait that made the device catch up as one event blocked on, and no time
// (nothing runs).
void cci__sim_fence_costs(const cci_sim_device *sim, struct cci_stats *out)
{
    cci_sim_fences *f = cci__sim_fences_of(sim);
    pthread_mutex_lock(&f->lock);
    out->fence_record_calls = f->records;
    out->fence_record_events = f->records;
    out->fence_query_calls = f->queries;
    out->fence_wait_calls = f->wait_calls;
    out->fence_wait_events = f->waits;
    out->fence_order_calls = f->order_calls;
    out->fence_orders_made = f->orders_made;
    out->fence_orders_behind = f->orders_behind;
    out->fence_orders_refused = f->orders_refused;
    out->fence_catch_up_calls = f->catch_up_calls;
    out->fence_catch_up_events = f->catch_ups;
    out->fence_reuse_frees = f->reuse_frees;
    out->fence_reuse_orders = f->reuse_orders;
    out->fence_reuse_refused = f->reuse_refused;
    pthread_mutex_unlock(&f->lock);
}
