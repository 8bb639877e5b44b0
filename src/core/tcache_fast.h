// SPDX-License-Identifier: MIT
// The thread caches' fast-path steps, shared by the two files that serve without the lock:
// tcache.c (the magazines) and tcache_fenced.c (the fenced frees a thread keeps). `static inline`
// here so that each fast path compiles them into its own body (no link-time optimisation).
#ifndef CCI_TCACHE_FAST_H
#define CCI_TCACHE_FAST_H

#include "tcache_impl.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

// `b` leaves the cache's table (its free goes to the locked path, or it was drained).
static inline void table_remove(cci_tc *tc, cci_block *b)
{
    cci_live_remove(&tc->table, b);
    b->owner = NULL;
    if (tc->recent == b)
        tc->recent = &cci__tc_no_block;
}

// ---- time stamps ---------------------------------------------------------------------------

// Events of different threads are handed to the observers in stamp order. Only then is a clock
// needed: while one thread alone has a cache (the list changes only under the lock, after a stop
// that emptied every log), a count keeps its events in order for nothing. The time-stamp counter
// costs 21 ns a read on the H100 host's virtual machine (where it was a fifth of a fast path's
// time at 8 threads, two reads a pair), so it is read once every STAMP_EVERY events, and the
// events between two readings count on from the last one.
//
// Why a clock read this seldom is enough: the stamps only interleave the threads' fast-path events
// of one `order` (the allocator's order keeps everything else in place), and any interleaving of
// those is a true history. Each thread's events keep their own order; no block passes between
// threads without the lock (a thread's fast path frees only the blocks it owns, into its own
// magazines); and each thread's running change stays within its credit, the credits of all
// threads within the room under every peak, so no interleaving passes a peak (tcache.h). What the
// clock buys is realism: a merged trace interleaves the threads as they ran, except that a
// thread's event may be placed up to STAMP_EVERY - 1 of its own events early (in a fast loop,
// a few hundred nanoseconds).
#define STAMP_EVERY 16
static inline uint64_t stamp_now(cci_tc *tc)
{
    if (tc->alone)  // its own copy: the list head's line is another thread's hot gate
        return ++tc->last_stamp;
    if (--tc->stamp_left > 0)
        return ++tc->last_stamp;
    tc->stamp_left = STAMP_EVERY;
#if defined(__x86_64__) || defined(__i386__)
    uint64_t t = __builtin_ia32_rdtsc();
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t t = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
    if (t <= tc->last_stamp)
        t = tc->last_stamp + 1;  // one thread's events keep their order whatever the clock does
    tc->last_stamp = t;
    return t;
}

// ---- the statistics -----------------------------------------------------------------------


// What a fast path changes, by kind, in its block's pool and the same in `all`. A free lowers the
// signed kinds by `grow` ((count, bytes), (requested, oversize)) and changes the inactive-split
// figures by `split` (split_on_free); an allocation from a magazine raises the signed kinds by
// `grow` and undoes its block's free's `split`. Kept as magnitudes, the sign in the code (FREEING,
// ALLOCATING): no negation on either path.
typedef struct {
    size_t pool;  // CCI_POOL_SMALL or CCI_POOL_LARGE (unsigned: an index, no sign extension)
    kind_pair grow[SIGNED_PAIR];
    kind_pair split;
} delta;
enum { FREEING = 0, ALLOCATING = 1 };

// A block's pool row, as an unsigned index (no sign extension on the fast paths).
static inline size_t block_pool(const cci_block *b) { return (size_t)pool_index(b->small); }

// What handing out `b`, the top block of the magazine class m, for `requested` bytes changes.
static inline __attribute__((always_inline)) void alloc_delta(const cci_block *b, const mag_class *m, int top,
                                                              size_t requested, delta *v)
{
    v->pool = block_pool(b);
    v->grow[0] = (kind_pair){1, (int64_t)m->size};
    v->grow[1] = (kind_pair){(int64_t)requested, m->oversize};
    v->split = row_pair(m->split[top], 0);
}

// What freeing `b` changes, the inactive split blocks by `split` (split_on_free).
static inline __attribute__((always_inline)) void free_delta(const cci_allocator *a, const cci_block *b,
                                                             kind_pair split, delta *v)
{
    v->pool = block_pool(b);
    v->grow[0] = (kind_pair){1, (int64_t)b->size};
    v->grow[1] = (kind_pair){(int64_t)b->requested, (int64_t)is_oversize(a, b->size)};
    v->split = split;
}

// What freeing `b` does to the inactive split blocks and their bytes, as the locked path counts it
// after merging b with its free neighbours (a cached neighbour is free for the program: it merges
// at the next stop). The merged block is inactive split unless it spans its whole segment; the
// free neighbours it absorbed were. Neighbour states change only under the lock, or between
// ALLOCATED and CACHED in their own thread's fast path: hence the relaxed atomic reads; their
// links change only under the lock.
static inline int is_free_for_program(const cci_block *n)
{
    unsigned st = __atomic_load_n(&n->state, __ATOMIC_RELAXED);
    return st == BLOCK_FREE || st == BLOCK_CACHED;
}

static inline __attribute__((always_inline)) kind_pair split_on_free(const cci_block *b)
{
    const cci_block *prev = b->prev, *next = b->next;
    int prev_free = prev && is_free_for_program(prev);
    int next_free = next && is_free_for_program(next);
    // The merged block's ends: a block alone in its segment (no neighbours) is whole by itself.
    const cci_block *first = prev_free ? prev : b, *last = next_free ? next : b;
    int whole = !first->prev && !last->next;
    int64_t absorbed = (prev_free ? (int64_t)prev->size : 0) + (next_free ? (int64_t)next->size : 0);
    int64_t count = !whole - prev_free - next_free;
    int64_t bytes = whole ? -absorbed : (int64_t)b->size;  // the merged block minus the neighbours it took in
    return (kind_pair){count, bytes};
}

// The thread's credits of v's pool and of `all` as they would be once v is spent from them (a
// figure v lowers earns its credit back).
typedef struct {
    kind_pair pool[NPAIRS], all[NPAIRS];
} credits;

// One pair of credits once the change `by` is spent (raise: 1) or earned back (0).
static inline kind_pair credit_after(const int64_t *row, int i, kind_pair by, int raise)
{
    return raise ? row_pair(row, i) - by : row_pair(row, i) + by;
}

// Whether the thread's credits cover v: every figure stays, with what the fast paths changed since
// the last stop, within its pool's credit and the `all` one; `after` gets the credits once v is
// spent. A credit is never below 0 (only a covered increase spends one), so a figure is covered
// exactly when its credit would not go below 0: one sign test for all. A free raises only the
// inactive-split figures, so only those are tested for it (the others only earn). Branch-free:
// most kinds pass, and a mispredicted branch per kind cost more than the arithmetic.
static inline __attribute__((always_inline)) int covered(const cci_tc *tc, const delta *v, int allocation,
                                                         credits *after)
{
    const int64_t *credit = tc->credit[v->pool], *credit_all = tc->credit[CCI_POOL_ALL];
    kind_pair below = {0, 0};
#pragma GCC unroll 2
    for (int i = 0; i < SIGNED_PAIR; i++) {
        after->pool[i] = credit_after(credit, i, v->grow[i], allocation);
        after->all[i] = credit_after(credit_all, i, v->grow[i], allocation);
        if (allocation)
            below |= after->pool[i] | after->all[i];
    }
    after->pool[SIGNED_PAIR] = credit_after(credit, SIGNED_PAIR, v->split, !allocation);
    after->all[SIGNED_PAIR] = credit_after(credit_all, SIGNED_PAIR, v->split, !allocation);
    below |= after->pool[SIGNED_PAIR] | after->all[SIGNED_PAIR];
    return (below[0] | below[1]) >= 0;
}

// A covered change made: the credits as `covered` worked them out, and the pool's running totals
// of increases (an allocation's signed kinds; the split kinds' when they rise). The net change is
// what the credits moved (fold_cache).
static inline __attribute__((always_inline)) void spend(cci_tc *tc, const delta *v, int allocation,
                                                        const credits *after)
{
    int64_t *credit = tc->credit[v->pool], *credit_all = tc->credit[CCI_POOL_ALL];
    int64_t *inc = tc->shard[v->pool].inc;
#pragma GCC unroll 3
    for (int i = 0; i < NPAIRS; i++) {
        set_row_pair(credit, i, after->pool[i]);
        set_row_pair(credit_all, i, after->all[i]);
    }
    if (allocation)
#pragma GCC unroll 2
        for (int i = 0; i < SIGNED_PAIR; i++)
            set_row_pair(inc, i, row_pair(inc, i) + v->grow[i]);
    kind_pair split = allocation ? -v->split : v->split;
    set_row_pair(inc, SIGNED_PAIR, row_pair(inc, SIGNED_PAIR) + (split & ~(split >> 63)));  // its rises
}

// ---- the fast paths ---------------------------------------------------------------------------
//
// Each fast path comes in two versions. The general one (alloc_general, free_general) does
// everything: it waits out a stop at the gate, hands a full log to the batch doors or flushes it (a
// stop that moves no block) to try once more. The usual call finds the gate open and room in the
// log: cci__tc_alloc and cci__tc_free serve it inline and hand anything else to the general version
// from its start, so they hold no call but those tail calls (callgrind, commit 90f1550: the retry
// inlined in them had made each save six registers, ~45 instructions a pair in prologues). Both run
// the same steps (alloc_in_gate, free_in_gate), so both decide the same.

// How long a fast path waits for a stop to end before it takes the locked path instead. A stop
// that only folds statistics and swaps logs lasts a few microseconds; one that runs the policy
// (a locked allocation that reserves a segment) can take far longer, and then the mutex, which
// sleeps, is the better wait. Falling to the locked path on every stop is what made threads
// slow each other down: each locked call stops every cache, so the others fell to the locked
// path in turn, and the stops never ended while more than one thread ran.
#define STOP_WAIT_SPINS 4096

// The gate taken at the first try: 1, or 0 while a stop holds it.
static inline int enter_at_once(cci_tc *tc)
{
    int open = GATE_OPEN;
    return atomic_compare_exchange_weak_explicit(&tc->gate, &open, GATE_OWNER, memory_order_acquire,
                                                 memory_order_relaxed);
}

// The inline fast paths' solo entry (solo.h): in_fast set, then `on` read, with only a compiler
// barrier between them. 1 when entered; 0: take the gate. The gate is still read, for a call from
// inside the owner's own locked section (an observer's), which finds it stopped.
static inline int enter_solo(const cci_allocator *a, cci_tc *tc)
{
    atomic_store_explicit(&tc->in_fast, 1, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    if (__builtin_expect(atomic_load_explicit(&a->solo.on, memory_order_relaxed), 1) &&
        atomic_load_explicit(&tc->gate, memory_order_relaxed) == GATE_OPEN)
        return 1;
    atomic_store_explicit(&tc->in_fast, 0, memory_order_release);
    return 0;
}

// The gate taken, waiting for a stop to end: 1, or 0 when the stop lasted too long.
static inline int enter(cci_tc *tc)
{
    for (int spins = 0;; spins++) {
        if (enter_at_once(tc))
            return 1;
        if (spins >= STOP_WAIT_SPINS)
            return 0;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

static inline void leave(cci_tc *tc) { atomic_store_explicit(&tc->gate, GATE_OPEN, memory_order_release); }

// Out of an inline fast path, entered solo or through the gate.
static inline void leave_inline(cci_tc *tc, int solo)
{
    if (solo)
        atomic_store_explicit(&tc->in_fast, 0, memory_order_release);
    else
        leave(tc);
}

// One record into the log, its fields passed as values: read from `b` or `tc` around the stores
// into the log (which may alias them for the compiler), they were reloaded between the stores
// (every served allocation and free logs, and the observers' events are the hook path's
// largest cost over the core alone).
static inline __attribute__((always_inline)) void log_record(cci_tc *tc, uintptr_t addr, size_t size,
                                                             size_t requested, uint64_t stream)
{
    uint64_t stamp = stamp_now(tc);
    tc_event *e = tc->log_at;
    *e = (tc_event){addr, size, requested, stream, stamp};
    tc->log_at = e + 1;
}

// Whether the log has room for one more record (or nobody reads it).
static inline int log_has_room(const cci_allocator *a, const cci_tc *tc)
{
    return !a->nobs || tc->log_at < tc->log_end;
}

// A full log emptied without a stop: where every observer of the fast paths' kinds has a batch
// door, it goes to them from here (inside the gate: a stop waits for it, so batches and stops keep
// their order). 1 when it did; 0 when only a stop can empty it.
static inline int log_to_batch(cci_allocator *a, cci_tc *tc)
{
    if (a->nobs_serial_fast)
        return 0;
    cci__tc_tell_batch(a, tc, tc->order, &tc->log, log_count(tc), tc->nlog_freed);
    log_restart(tc);  // (an observer that kept the log left the spare in its place)
    return 1;
}

// A fast path's answer when only a full log stopped it (log_to_batch could not empty it): flush,
// then try once more.
#define LOG_FULL 1
// A fast path's answer when no magazine held the size on the stream (the caches' miss).
#define MAG_MISS 2
// A miss while the thread's kept fenced frees are on their way back (their batch still filling,
// or behind a pending fence): not counted against the magazines (count_window), or a thread
// whose every reuse comes from its kept batches would be set aside between two of them.
#define HELD_WAIT 3

// A fast path's answer when another thread's stop outlasted the wait at the gate (enter).
#define GATE_BUSY 4
// A fast path's answer when the thread's credits did not cover the change (covered).
#define CREDIT_SHORT 5
// A fenced free's answer when the thread's kept batches are at their bounds (tcache_fenced.c).
#define KEEP_FULL 6

// A fast path's answer that sends its operation to the lock, counted by why (cci_stats'
// tc_declined_*). Out of line: the served path never calls it.
static __attribute__((noinline, cold, unused)) void tc_declined(cci_tc *tc, int rc)
{
    int k = rc == CREDIT_SHORT ? TC_DECLINED_CREDIT
            : rc == HELD_WAIT  ? TC_DECLINED_KEPT_WAIT
            : rc == GATE_BUSY  ? TC_DECLINED_BUSY
            : rc == KEEP_FULL  ? TC_DECLINED_KEEP_FULL
                               : -1;
    if (k >= 0)
        atomic_store_explicit(&tc->declined[k], atomic_load_explicit(&tc->declined[k], memory_order_relaxed) + 1,
                              memory_order_relaxed);
}

// A free's answer from its step's.
static inline int free_answer(cci_tc *tc, int rc)
{
    if (__builtin_expect(rc != CCI_OK, 0))
        tc_declined(tc, rc);
    return rc == CCI_OK ? CCI_OK : CCI_ENOTOURS;
}

// A free's step inside the gate (`step`: a magazine's or a kept batch's), the stop waited out, and
// once more after a full log went to the batch doors. Inlined with its constant step: a direct call.
typedef int (*tc_free_step)(cci_allocator *a, cci_tc *tc, uintptr_t ptr, uint64_t stream);
static inline __attribute__((always_inline)) int tc_free_gated(cci_allocator *a, cci_tc *tc, uintptr_t ptr,
                                                               uint64_t stream, tc_free_step step)
{
    if (!enter(tc))
        return GATE_BUSY;
    int rc = step(a, tc, ptr, stream);
    if (rc == LOG_FULL && log_to_batch(a, tc))
        rc = step(a, tc, ptr, stream);  // the same choice, with room now
    leave(tc);
    return rc;
}

#endif
