// SPDX-License-Identifier: MIT
// The allocator's private state, shared by allocator.c (policy) and inspect.c (layout, checks).
#ifndef CCI_ALLOCATOR_IMPL_H
#define CCI_ALLOCATOR_IMPL_H

#include <pthread.h>

#include "allocator.h"
#include "block.h"
#include "live_map.h"
#include "lock.h"
#include "solo.h"
#include "stats_list.h"

// Deferred frees are made reusable in batches: one device synchronisation per batch, not per
// call. A batch is closed when it holds this many blocks, or when its bytes reach
// max(reserved / PENDING_RESERVED_DIVISOR, PENDING_MIN_BYTES), or when memory runs out.
#define PENDING_BATCH 256
#define PENDING_RESERVED_DIVISOR 16
#define PENDING_MIN_BYTES ((size_t)64 << 20)
// Fenced frees: how many allocations pass between fence records and fence queries (fenced.c).
// Counted in allocations, not time, so that a replay takes the same decisions on every run.
#ifndef FENCE_TICK  // a build-time override, for policy experiments (docs/reuse-modes.md)
#define FENCE_TICK 16
#endif

// Fenced frees (fenced.c): a batch of blocks made reusable together once one fence has passed.
typedef struct cci_fence_batch {
    cci_fence fence;
    cci_block *head, *tail;        // linked through pend_next
    size_t count, bytes;
    int waiters;                   // threads waiting for the fence with the lock dropped
    int completed;                 // its blocks are reusable; the last waiter frees the record
    struct cci_fence_batch *next;  // closed batches, oldest first
} cci_fence_batch;

/// Which observers an event is told to: those with a batch door, those without, or both.
enum { CCI_TELL_BATCH = 1, CCI_TELL_SERIAL = 2, CCI_TELL_ALL = 3 };
/// Event kinds an observer can be told (cci_event_kind's values, 6 unused).
#define CCI_TELL_KINDS (CCI_EV_SEGMENT_UNMAP + 1)

// An event of a locked section kept for the observers until the next unlock (lock_protocol.c).
typedef cci_event cci_tc_event;

struct cci_allocator {
    cci_lock lock;  // lock.h; taken through cci__lock and cci__unlock (lock_protocol.c)
    int device;
    cci_config cfg;
    cci_backend be;
    size_t capacity;     // 0 = unknown
    size_t allowed_max;  // fraction cap (or capacity) that GC and the cap work against
    int capped;          // per_process_memory_fraction set: reservations past allowed_max fail

    cci_free_set free_set[2];    // [0] large pool, [1] small pool
    uint64_t free_searches[2];   // GC's clock: a block's age is counted in searches of its pool
    cci_live_map live;           // allocated and pending blocks, by address

    cci_segment **segs;          // sorted by address, for interior-pointer and ownership lookups
    size_t nsegs, segcap;

    cci_block *pend_head, *pend_tail;
    size_t pend_count, pend_bytes;
    uint64_t pend_seq;

    cci_stats st;

    cci_block *spare;            // recycled block records: splitting must not cost a malloc
    size_t nspare;

    struct {
        cci_observer_fn fn;
        cci_batch_fn batch;  // NULL: told every event one at a time, in order, under the lock
        void *ud;
        unsigned kinds;      // 1u << kind
    } obs[CCI_MAX_OBSERVERS];
    int nobs;
    int nobs_serial_fast;  // observers without a batch door that want the fast paths' kinds
    // Who hears an event of each kind through each door (CCI_TELL_BATCH, _SERIAL, _ALL): the
    // observers' calls (function and argument), in the order they were added, rebuilt as an
    // observer is added. Testing every observer's kinds and door on each event had cost as much
    // as the two observers that want an allocation (the mixed workload's locked path, callgrind);
    // the calls themselves rather than indices into obs spare the event path a load and an
    // index computation an observer (callgrind, commit 9ee292b).
    uint8_t tell_n[CCI_TELL_KINDS][CCI_TELL_ALL + 1];
    struct cci_tell_entry {
        cci_observer_fn fn;
        void *ud;
    } tell_at[CCI_TELL_KINDS][CCI_TELL_ALL + 1][CCI_MAX_OBSERVERS];
    uint64_t epoch;        // locked sections so far: the `order` of events (cci_event)

    struct cci_exp *exp;         // expandable-segment mode (expandable.c); NULL = ordinary segments

    int track_peak;
    int have_peak;
    cci_layout peak;

    // Fenced frees (fenced.c), after the hot fields so that the fast path's layout is unchanged.
    const cci_backend_fence_ops *fences;  // NULL: the backend has no fences, FENCED acts as DEFERRED
    cci_block *fopen_head, *fopen_tail;   // the open batch: fenced frees not yet behind a fence
    size_t fopen_count, fopen_bytes;
    cci_fence_batch *fb_head, *fb_tail;   // closed batches, each behind its fence, oldest first
    size_t fenced_count;                  // blocks in the open and the closed batches
    uint32_t fence_tick;                  // allocations since the last fence_tick work (fenced.c)
    uint64_t stream_handovers;            // whole free segments given to another stream (stream_handover.c)
    size_t slack_used;                    // bytes grown instead of waiting for or ordering a fence
    size_t held_grown;                    // bytes grown while the allocating thread kept fenced
                                          // frees (tcache_fenced.c), since the last empty_cache
    int slack_grow;                       // this allocation passed a pending batch by on the budget
    uint64_t unordered_frees;             // fenced frees that joined the free set at once (fence
    uint64_t ordered_frees;               // ops' reuse_order), and how many of them an order covers

    // Per-thread caches (tcache.c).
    int tc_on;                            // cci_allocator_thread_cache: fast paths allowed
    int tc_fast;                          // tc_on, but 0 while the only cache is set aside (tcache.c):
                                          // then no fast path would serve, and none is asked. Read
                                          // without the lock (relaxed atomics), written under it
    cci_solo solo;                        // one thread has locked it so far: its fast paths take
                                          // no locked instruction (solo.h)
    uint64_t uid;                         // never reused: a thread's slot names its allocator by it
    struct cci_tc *tcs;                   // every thread's cache of this allocator
    struct cci_tc *tc_mine;               // the lock holder's cache (NULL: none), set by cci__lock
    int ntcs;                             // caches in `tcs`: written under the lock, read by the
                                          // fast paths too (relaxed atomics: held_batch_frees)
    cci_tc_event *evq;                    // events of the locked section, told at its unlock
    size_t nevq, evq_cap;
};

// `small` is 0 or 1 everywhere (cci_is_small, a block's `small`): a subtraction, not a test
// (the thread caches' fast paths index their rows with it).
_Static_assert(CCI_POOL_SMALL == CCI_POOL_LARGE - 1, "the pools' rows follow each other");
static inline unsigned pool_index(unsigned small) { return CCI_POOL_LARGE - small; }

// A pool's counter and the all-pools one changed together (cci_stat_change, stats_list.h): every
// file that keeps the statistics (allocator.c, expandable.c, compact.c) inlines this.
static inline void stat_pool(cci_stat *arr, int small, int64_t d)
{
    cci_stat_change(&arr[CCI_POOL_ALL], d);
    cci_stat_change(&arr[pool_index(small)], d);
}

/// A block size the oversize statistic counts (max_split_size and above).
static inline int is_oversize(const cci_allocator *a, size_t size) { return size >= a->cfg.max_split_size; }

/// A block alone in its segment (a whole segment, when free: one the device may have back).
static inline int is_whole(const cci_block *b) { return !b->prev && !b->next; }

// Internal, lock held.
/// Merges the free neighbour `c` (b->prev or b->next, in the free set) into `b`: out of the free
/// set, unlinked, its record recycled. The callers keep their own counters.
void cci__absorb_free_neighbour(cci_allocator *a, cci_block *b, cci_block *c);
/// Gives back (release = 1) or forgets (0) everything the allocator holds: fences, segments
/// (ordinary and expandable), block records, the kept peak layout. The one teardown shared by
/// cci_allocator_destroy and the in-place reset (allocator_reset.c); the lock, the segment
/// array and the free sets' per-stream bins (emptied) survive it.
void cci__allocator_clear(cci_allocator *a, int release);
int cci__layout_fill(cci_allocator *a, cci_layout *out);
size_t cci__largest_free(cci_allocator *a);
// The free path's two ends, shared with fenced.c: a freed block joins the deferred queue (made
// reusable by a device synchronisation), or becomes reusable now (FREE_COMPLETED).
void cci__defer_block(cci_allocator *a, cci_block *b);
void cci__complete_block(cci_allocator *a, cci_block *b);
/// The policy's search of the free set (allocator.c), for fit_rules.c: the best block for the
/// request, out of the free set, or NULL.
cci_block *cci__take_free_block(cci_allocator *a, size_t rounded, int small, uint64_t stream);
/// Gives a whole free segment (one block, in the free set) back to the device (allocator.c).
void cci__release_block(cci_allocator *a, cci_block *b);

// Fenced frees (fenced.c). The lock is held on entry and exit; the functions that wait drop it
// around the wait, so callers search the free set again afterwards.
void cci__fenced_free(cci_allocator *a, cci_block *b);
/// How a harvest or poll asks the fences: IN_PASSING where a pending answer costs only a later
/// reuse (the periodic tick; a poor fit that no pending block could improve), so the backend may
/// put an expensive check off (backend.h, poll); IN_FULL where a pending answer leads to a wait,
/// a worse fit or a growth.
enum { CCI_ASK_IN_FULL = 0, CCI_ASK_IN_PASSING = 1 };
/// Without blocking: puts the open batch behind a fence and makes every batch whose fence has
/// passed reusable. 1 when something became reusable.
int cci__fenced_harvest(cci_allocator *a, int ask);
/// The same without closing the open batch (no fence recorded): only the closed batches whose
/// fence has passed become reusable. 1 when some did.
int cci__fenced_poll(cci_allocator *a, int ask);
/// Whether fence f has passed: 1 (ordered by a later order, backend.h's orders, or found passed),
/// 0 (pending, or a poll in passing put off), < 0 (the device cannot vouch for it). Safe without
/// the lock (the thread caches' kept batches ask their own fences).
int cci__fence_passed(const cci_allocator *a, cci_fence f, int ask);
/// Could a pending block (in the open batch or a closed one), with its free and pending
/// neighbours, hold a request of this pool and stream in a run smaller than `fit`? Nothing is
/// asked of the device.
int cci__fenced_could_fit(const cci_allocator *a, size_t rounded, int small, uint64_t stream, size_t fit);
/// Waits for the oldest fence whose batches (with the older ones) free at least `rounded` bytes
/// usable by a request of this pool and stream, and makes them reusable. 0 when no pending batch
/// would be enough (or the wait failed and the blocks went to the deferred queue). The `spare`
/// newest closed batches are not considered (0: all are). Where the backend can order all later
/// work after that fence instead (fence_ops.order), the host does not wait.
/// `slack`: CCI_SLACK_GROW (a miss: where the fence budget has room, mark the allocation
/// a->slack_grow and let the pool grow rather than wait or order), CCI_SLACK_NO_WAIT (a poor fit:
/// where the budget has room, an order is taken but never a host wait), or CCI_SLACK_NONE.
int cci__fenced_wait_for(cci_allocator *a, size_t rounded, int small, uint64_t stream, unsigned spare, int slack);
enum { CCI_SLACK_NONE, CCI_SLACK_GROW, CCI_SLACK_NO_WAIT };
/// Whether the fence budget (config fence_slack_mb) still has room for `bytes` of growth.
int cci__fence_slack_left(const cci_allocator *a, size_t bytes);
/// Charges growth made instead of a fence wait or order; gives back budget when segments go.
void cci__fence_slack_charge(cci_allocator *a, int64_t delta);
/// Waits for the oldest closed batch (or has the backend order it) and makes it reusable. 0 when
/// there is none (or the wait failed: its blocks went to the deferred queue).
int cci__fenced_wait_oldest(cci_allocator *a);
/// Bytes in the closed batches still behind their fence.
size_t cci__fenced_pending_bytes(const cci_allocator *a);
/// Every FENCE_TICK allocations while fenced frees exist: puts the open batch behind its fence and
/// makes the batches whose fence has passed reusable, without blocking. Why: a fence recorded
/// only at the next pool miss covers everything queued up to that miss, so waiting for it is
/// waiting for the whole device; and a passed batch left unharvested until a miss lets the
/// best fit settle for a worse block while the ideal one sits pending.
void cci__fenced_tick(cci_allocator *a);
/// Waits until every fenced free is reusable. 1 when something became reusable.
int cci__fenced_drain(cci_allocator *a);
/// Records a fence for `stream` now (one more in *recorded when it was) and waits for it with the
/// lock dropped, then releases it: no work queued before the call can still touch memory last
/// used there. CCI_OK, or CCI_EBACKEND where the backend has no fences or the record or the wait
/// failed.
int cci__fence_wait_now(cci_allocator *a, uint64_t stream, uint64_t *recorded);
/// At a fenced free: 1 when the backend lets the block join the free set at once, its fence
/// skipped (fence_ops.reuse_order); the next block handed out is then ordered first.
int cci__free_unfenced(cci_allocator *a);
/// Some block of the free set may be one whose fence was skipped and which no order covers yet.
static inline int cci__reuse_unordered(const cci_allocator *a) { return a->unordered_frees != a->ordered_frees; }
/// Before a block goes to a new owner: the backend's order at reuse, without blocking. 1 when
/// every such block is covered now.
int cci__reuse_order(cci_allocator *a);
/// The same where the backend could not order: a fence of its own waited for, else the device
/// synchronised, with the lock dropped. 1 when every such block freed before is covered.
int cci__reuse_wait(cci_allocator *a);
/// Forgets every batch; release_fences = 0 leaves the backend's handles alone (fork child).
void cci__fenced_destroy(cci_allocator *a, int release_fences);
/// At a pool miss, before a new segment is reserved: the smallest whole free ordinary segment of
/// another stream that fits, given to `stream` once a fence recorded on its old stream has passed
/// (waited for, lock held, if it has not). Its one block, out of the free set; NULL when none.
cci_block *cci__stream_handover(cci_allocator *a, size_t rounded, int small, uint64_t stream);
cci_segment *cci__segment_of(cci_allocator *a, uintptr_t p);
// Segment bookkeeping and block records, shared with expandable.c.
int cci__seg_grow(cci_allocator *a);
void cci__seg_insert(cci_allocator *a, cci_segment *s);
void cci__seg_remove(cci_allocator *a, cci_segment *s);
cci_block *cci__block_new(cci_allocator *a);
void cci__block_drop(cci_allocator *a, cci_block *b);
void cci__notify(cci_allocator *a, cci_event_kind kind, uint64_t stream, uintptr_t addr, size_t size);
/// The kinds a fast path makes (tcache.c): observers that want one of them get its log.
#define CCI_FAST_KINDS (1u << CCI_EV_ALLOC | 1u << CCI_EV_FREE_REQUESTED | 1u << CCI_EV_FREE_COMPLETED)
/// Queues an event for the unlock while thread caches exist: 1 when queued.
int cci__tc_queue_event(cci_allocator *a, const cci_event *ev);

/// Tells ev to the observers that want its kind and listen at door `which` (CCI_TELL_*).
void cci__tell(cci_allocator *a, const cci_event *ev, int which);
/// The same, inline, for the event path.
static inline void cci__tell_inline(cci_allocator *a, const cci_event *ev, int which)
{
    const struct cci_tell_entry *at = a->tell_at[ev->kind][which];
    for (int i = 0, n = a->tell_n[ev->kind][which]; i < n; i++)
        at[i].fn(at[i].ud, ev);
}

/// Tells the observers, at once when no thread cache exists, else at the unlock (tcache.h).
/// Inline: an allocation and a locked free make three events, and a call for each had cost
/// ~20 instructions of register saves beside the event itself (callgrind, commit 9ee292b).
static inline void cci__notify_full(cci_allocator *a, cci_event_kind kind, uint64_t stream, uintptr_t addr,
                                    size_t size, size_t requested)
{
    if (!a->nobs)
        return;
    cci_event ev = {kind, a->device, stream, addr, size, requested, 2 * a->epoch, 0};
    if (!a->tcs) {
        cci__tell_inline(a, &ev, CCI_TELL_ALL);
        return;
    }
    // With thread caches, the observers with a batch door are told now (they have had the fast
    // paths' events at this section's stop); the others at the unlock, after the swapped logs.
    cci__tell_inline(a, &ev, CCI_TELL_BATCH);
    // Queued only when an observer without a batch door wants it: the unlock would tell nobody.
    if (a->tell_n[kind][CCI_TELL_SERIAL] && !cci__tc_queue_event(a, &ev))
        cci__tell(a, &ev, CCI_TELL_SERIAL);  // host out of memory: told at once, a little out of order
}
/// A block a thread cache kept (its events already told, its free counted with the inactive-split
/// change `split`, `split_bytes` it foresaw) goes back to the free set (tcache.c, at a stop).
void cci__release_cached(cci_allocator *a, cci_block *b, int split, int64_t split_bytes);
/// A block of a thread's fenced batches (tcache_fenced.c), counted as a cached one is, whose
/// fence has passed: back to the free set, its completion told now.
void cci__complete_held(cci_allocator *a, cci_block *b);
/// The same block whose fence has not passed (or was never recorded): into the open batch
/// (fenced.c), counted as a locked fenced free counts it.
void cci__release_held_pending(cci_allocator *a, cci_block *b);

#endif
