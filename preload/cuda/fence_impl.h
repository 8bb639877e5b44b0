// SPDX-License-Identifier: MIT
// What the pieces of the CUDA fence group share. Private to them (fence_*.c); the other files of
// the room and the rooms above see fence.h only.
//
// A fence is recorded for CCI_STREAM_ALL: a block freed with cudaFree may have been used by any
// stream, so the fence passes only once every piece of work queued before the free, on any
// stream that may touch our memory, has finished (docs/reuse-modes.md gives the ordering facts).
// Each kind of stream is covered in its own way:
//   - the legacy stream of every device whose primary context we hold, and with it every blocking
//     and per-thread default stream of that context: one event per device at the record, on the
//     legacy stream (fence_ops.c), or a context event that covers every stream (context fences);
//   - every non-blocking stream that existed at the record: covered lazily, once the legacy part
//     has passed, by an idle answer or a shared "sweep" event (fence_looks.c);
//   - every destroyed stream whose last work may still run: its "retired" event, recorded just
//     before the destroy went to the driver (fence_retired.c), kept until it has passed.
// Every event comes from a pool per device (fence_events.c). The core may ask a fence to order
// later work on the GPU instead of waiting for it (fence_order.c). The watcher, a thread of ours,
// finds fences passed in the background (fence_watcher.c, through fence_for_watcher.c).
#ifndef CCI_PRELOAD_FENCE_IMPL_H
#define CCI_PRELOAD_FENCE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "cuda_context.h"
#include "export.h"
#include "fence.h"
#include "fence_costs.h"
#include "log.h"
#include "real.h"
#include "stream_registry.h"

// ---- the data -------------------------------------------------------------------------------

// An event shared by many fences, held by reference: a "retired" event (the last work of a
// destroyed stream, in the retired list) or a "sweep" (a live non-blocking stream's work up to
// some point on the fence clock, in the stream's cover). A waiter takes a reference for as long
// as it blocks on the event, so the event cannot go back to the pool (and be recorded again)
// under it.
typedef struct shared_event {
    CUevent ev;
    int device;
    unsigned gen;             // the device's context generation the event belongs to
    int refs;                 // its list's own reference, plus one per waiter; pool lock
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
    int barrier;                   // its legacy event orders all later work (fence_order.c)
    int ctxwide;                   // context events: every live stream is covered by them
} cuda_fence;

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

typedef struct event_pool {
    CUevent *ev;
    size_t n, cap;
} event_pool;

// ---- the state ------------------------------------------------------------------------------

// fence_events.c: one lock for the pools, the retired list and shared events' references; taken
// inside the registry lock (never around it).
extern pthread_mutex_t cci__fence_pool_lock CCI_HIDDEN;
extern event_pool cci__fence_pools[CCI_PL_MAX_DEVICES] CCI_HIDDEN;
// Bumped when a device's primary context goes (cudaDeviceReset, cuDevicePrimaryCtxReset): its
// events went with it, so an event of an older generation is forgotten, never reused. Pool lock.
extern unsigned cci__fence_generation[CCI_PL_MAX_DEVICES] CCI_HIDDEN;
// fence_retired.c: the retired events, newest first (pool lock).
extern shared_event *cci__fence_retired CCI_HIDDEN;
// fence_ops.c: the fence clock, the last fence's seq. Read (seq_cst) before a stream is asked or
// swept, so that every fence numbered up to the value read was recorded, hence its frees issued,
// before the question (fence_looks.c, cci__fence_cover_stream).
extern _Atomic unsigned long long cci__fence_clock CCI_HIDDEN;
// fence_for_watcher.c: every fence with seq <= this has passed, legacy events, non-blocking
// streams and retired events alike, as a look of the watcher thread found. Asking such a fence
// costs no driver call.
extern _Atomic unsigned long long cci__fence_watched_upto CCI_HIDDEN;
// fence_looks.c: how many non-blocking streams the last look that found anything out saw busy
// (with context fences: the last census of THE ORDER); fence_ops.busy reports it.
extern _Atomic unsigned cci__fence_last_look_busy CCI_HIDDEN;
// fence_for_watcher.c: what the watcher registered (no-ops until it did).
extern void (*cci__fence_watcher_news)(void) CCI_HIDDEN;
extern int (*cci__fence_watcher_running)(void) CCI_HIDDEN;

// Live streams up to which a look is cheap: it is neither rationed nor left to the watcher.
#define LOOK_CHEAP_STREAMS 4

// Raises *v to at least `upto` (threads may publish out of order; the clock value only grows).
static inline void raise_upto(_Atomic unsigned long long *v, unsigned long long upto)
{
    unsigned long long cur = atomic_load(v);
    while (cur < upto && !atomic_compare_exchange_weak(v, &cur, upto))
        ;
}

// ---- events (fence_events.c) ----------------------------------------------------------------

static inline int have_events(const cci_real_driver *t)
{
    return t->cuEventCreate && t->cuEventRecord && t->cuEventQuery && t->cuEventSynchronize &&
           t->cuEventDestroy_v2 && t->cuStreamQuery;
}

/// An event of `device` from the pool (created when the pool is empty). Pool lock held; inside
/// the device's scope.
CUevent cci__fence_pool_get_locked(int device);
/// An event back to the pool, unless its generation is gone. Pool lock held.
void cci__fence_pool_put_locked(int device, CUevent e, unsigned gen);
/// The same, taking the pool lock. Also for an event streams wait for: a wait took the event's
/// state at its call, so a later record of the event cannot move it.
void cci__fence_pool_give(int device, CUevent e, unsigned gen);
/// One reference of a shared event less; the last one gives the event back. Pool lock held, or
/// (the second) taken inside.
void cci__fence_drop_shared_ref_locked(shared_event *r);
void cci__fence_drop_shared_ref(shared_event *r);
/// A pooled event of `device`, recorded on stream `s`, or when `ctx` is set for all the work of
/// that context so far (cuCtxRecordEvent); NULL on failure, *r the driver's answer.
CUevent cci__fence_record_pooled(int device, CUstream s, CUcontext ctx, unsigned *gen, CUresult *r);
/// A pooled event of `device` recording all the work of its primary context so far, or NULL.
/// The caller holds the capture gate with no capture underway.
CUevent cci__fence_record_ctx_event(int device, unsigned *gen);
/// 1 passed, 0 pending, -1 error.
int cci__fence_event_passed(CUevent e, int device);
/// Blocks until the event has passed. 0 or -1.
int cci__fence_event_wait(CUevent e, int device);
/// A shared event: 1 passed (now or before), 0 pending, -1 error.
int cci__fence_shared_passed(shared_event *r);
/// A fence's events back to the pool, and the fence freed.
void cci__fence_free(cuda_fence *f);

// A pooled event of `device` recorded on `s`, or NULL.
static inline CUevent record_event(int device, CUstream s, unsigned *gen)
{
    CUresult r;
    CUevent e = cci__fence_record_pooled(device, s, NULL, gen, &r);
    if (!e)
        cci_log(CCI_LOG_DEBUG, "device %d: recording a fence event on stream %p failed "
                "(CUresult %d)", device, (void *)s, r);
    return e;
}

// ---- looks at the non-blocking streams (fence_looks.c) ----------------------------------------

/// Is the stream's work from before fence lk->f done? For cci_stream_registry_each_nonblocking
/// (registry lock held). 0 to go on (covered, or pending / collected: lk says which), -1 on error.
int cci__fence_cover_stream(const cci_stream_ref *ref, void *arg);
/// The wait will block on r: a reference keeps it out of the pool meanwhile. Pool lock held.
int cci__fence_look_collect_locked(look *lk, shared_event *r);
/// A look asked in passing is put off (CCI_FENCE_PUT_OFF): the last one was too recent for its cost.
int cci__fence_look_put_off(void);
/// The live non-blocking streams (unless the fence is context-wide), then the retired events.
/// 0 or -1; lk->pending or lk->wait_on say what was found.
int cci__fence_look_at_streams(look *lk);
/// The references a wait's look collected, given back.
void cci__fence_look_drop(look *lk);

// ---- destroyed streams (fence_retired.c) -----------------------------------------------------

/// The retired events a fence must include: those of streams that existed at its record and whose
/// last work has not been seen to pass (passed ones leave the list). After the live streams.
/// 0 or -1.
int cci__fence_cover_retired(look *lk);

// ---- THE ORDER (fence_order.c) -----------------------------------------------------------------

int cci__fence_orders(void *ctx, int device, cci_fence handle);
int cci__fence_order(void *ctx, int device, cci_fence handle);
int cci__fence_catch_up(void *ctx, int device);
int cci__fence_reuse_order(void *ctx, int device, int now);
/// In a fork child: no order outstanding, none made.
void cci__fence_order_atfork_child(void);

#endif
