// SPDX-License-Identifier: MIT
// Per-thread caches in front of the allocator lock: the rules are in tcache.h.
// The lock that stops them is in lock_protocol.c; their creation and exit in tcache_threads.c.
//
// Each (thread, allocator) pair has one cache, reached through a thread-local slot. Its `gate`
// word is the only thing two threads ever contend on, and only while a lock holder stops the
// caches: GATE_OPEN (idle) -> GATE_OWNER (the owning thread is in a fast path) -> GATE_OPEN, or
// GATE_OPEN -> GATE_STOPPED (a lock holder owns the cache) -> GATE_OPEN. A fast path never waits:
// when it finds the gate stopped it takes the locked path, which waits on the mutex instead.
// While its thread is the only one that has ever locked the allocator, the inline fast paths mark
// themselves in `in_fast` instead, with plain stores (solo.h).
#include "tcache_impl.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

// The thread's slots (tcache_impl.h).
__thread struct tls_slot cci__tc_slots[TLS_SLOTS] __attribute__((tls_model("initial-exec")));

// `recent` when it names no block of the table (tcache_impl.h).
cci_block cci__tc_no_block;

// `b` leaves the cache's table (its free goes to the locked path, or it was drained).
static void table_remove(cci_tc *tc, cci_block *b)
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
static uint64_t stamp_now(cci_tc *tc)
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

// One magazine class's blocks back to the free set. Lock held.
static size_t drain_class(cci_allocator *a, cci_tc *tc, int c)
{
    mag_class *m = &tc->mag[c];
    for (int i = 0; i < m->n; i++) {
        cci_block *b = m->b[i];
        // Counted as freed when it entered the magazine (folded since), with the merges foreseen
        // then: the locked side counts the merges made now instead.
        table_remove(tc, b);
        b->state = BLOCK_ALLOCATED;
        cci__release_cached(a, b, (int)m->split[i][0], m->split[i][1]);
    }
    size_t n = (size_t)m->n;
    m->n = 0;
    tc->filled &= ~(1u << c);
    return n;
}

// Out of line: a locked allocation asks for it with the magazines mostly empty (a cache set
// aside), and inlined its frame cost the empty case more than the test (drain_mine).
static __attribute__((noinline)) void drain_cache(cci_allocator *a, cci_tc *tc)
{
    FOR_EACH_CLASS(c, tc->filled)
        drain_class(a, tc, (int)c);
}

void cci__tc_drain_all(cci_allocator *a)
{
    for (cci_tc *tc = a->tcs; tc; tc = tc->next)
        drain_cache(a, tc);
}

void cci__tc_drain_mine(cci_allocator *a)
{
    cci_tc *tc = a->tc_mine;
    if (tc && tc->filled)
        drain_cache(a, tc);
}

// A magazine class of another thread that holds blocks able to serve `rounded` on `stream` in
// the pool, smaller than `than` (the free set's own best fit, or SIZE_MAX without one).
static int class_fits(const mag_class *m, uint64_t stream, int small, size_t rounded, size_t than)
{
    return m->n && m->stream == stream && m->size >= rounded && m->size < than &&
           cci_is_small(m->size) == small;
}

size_t cci__tc_fitting(cci_allocator *a, uint64_t stream, int small, size_t rounded, size_t than, int drain)
{
    cci_tc *mine = a->tc_mine;
    size_t found = 0;
    for (cci_tc *tc = a->tcs; tc; tc = tc->next) {
        if (tc == mine)
            continue;
        FOR_EACH_CLASS(c, tc->filled)
            if (class_fits(&tc->mag[c], stream, small, rounded, than))
                found += drain ? drain_class(a, tc, (int)c) : (size_t)tc->mag[c].n;
    }
    return found;
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
static int enter(cci_tc *tc)
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
static int log_to_batch(cci_allocator *a, cci_tc *tc)
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

// A thread whose magazines seldom serve its allocations (sizes that rarely repeat: the mixed
// workload) pays for them on every call and gains nothing: each free goes into a magazine and each
// locked allocation drains it back into the free set, and each locked section stops the cache,
// folds its figures and hands out credits. On the H100 host the mixed workload ran at 479 ns an
// operation with the caches and 233 without (commit 148a44c). So a cache that served fewer than
// ASIDE_MIN_HITS of a window of ASIDE_WINDOW allocations is set aside for the next ASIDE_OPS:
// its thread allocates and frees on the locked path, as with CCI_THREAD_CACHE=0, and then tries
// its magazines again. Counted in operations, not time, so the same calls make the same decisions
// (replay, tests). Fast loops (pairs of one size) are served every time and never set aside.
#define ASIDE_WINDOW 256
#define ASIDE_MIN_HITS (ASIDE_WINDOW / 8)
#define ASIDE_OPS 4096

// The filled magazine class of `rounded` bytes on `stream` (its index in *c), or NULL.
static inline __attribute__((always_inline)) mag_class *class_holding(cci_tc *tc, size_t rounded,
                                                                      uint64_t stream, unsigned *c)
{
    FOR_EACH_CLASS(i, tc->filled) {
        mag_class *m = &tc->mag[i];
        if (m->size == rounded && m->stream == stream) {
            *c = i;
            return m;
        }
    }
    return NULL;
}

// Inside the gate: the last block freed into the class of `rounded` on `stream`, handed out if
// the credits cover it. CCI_OK, MAG_MISS, CCI_ENOTOURS (a hit the credits could not cover) or
// LOG_FULL.
static inline __attribute__((always_inline)) int alloc_in_gate(cci_allocator *a, cci_tc *tc, size_t rounded,
                                                               size_t requested, uint64_t stream,
                                                               uintptr_t *out)
{
    unsigned c;
    mag_class *m = class_holding(tc, rounded, stream, &c);
    if (!m)
        return MAG_MISS;
    int top = m->n - 1;
    cci_block *b = m->b[top];
    delta v;
    credits after;
    alloc_delta(b, m, top, requested, &v);
    if (!covered(tc, &v, ALLOCATING, &after))
        return CCI_ENOTOURS;
    if (!log_has_room(a, tc))
        return LOG_FULL;
    m->n = top;
    if (top == 0)
        tc->filled &= ~(1u << c);
    spend(tc, &v, ALLOCATING, &after);
    __atomic_store_n(&b->state, BLOCK_ALLOCATED, __ATOMIC_RELAXED);  // neighbours read it
    b->requested = requested;
    tc->recent = b;
    tc->dirty = 1;
    uintptr_t addr = b->addr;
    if (a->nobs)
        log_record(tc, addr, rounded, requested, stream);  // the class's size and stream are b's
    *out = addr;
    return CCI_OK;
}

// The owner's count of what its magazines served; sets the cache aside after a poor window.
static inline void count_window(cci_tc *tc, int served)
{
    tc->window_hits += served;
    if (++tc->window < ASIDE_WINDOW)
        return;
    if (tc->window_hits < ASIDE_MIN_HITS)
        tc->aside = ASIDE_OPS;
    tc->window = tc->window_hits = 0;
}

// An allocation's answer from alloc_in_gate's; a hit or a miss counts in the window.
static inline int alloc_answer(cci_tc *tc, int rc)
{
    if (rc == CCI_OK || rc == MAG_MISS)
        count_window(tc, rc == CCI_OK);
    return rc == CCI_OK ? CCI_OK : CCI_ENOTOURS;
}

static int try_alloc(cci_allocator *a, cci_tc *tc, size_t rounded, size_t requested, uint64_t stream,
                     uintptr_t *out)
{
    if (!enter(tc))
        return CCI_ENOTOURS;
    int rc = alloc_in_gate(a, tc, rounded, requested, stream, out);
    if (rc == LOG_FULL && log_to_batch(a, tc))
        rc = alloc_in_gate(a, tc, rounded, requested, stream, out);  // the same choice, with room now
    leave(tc);
    return rc;
}

static __attribute__((noinline, cold)) int alloc_general(cci_allocator *a, cci_tc *tc, size_t rounded,
                                                         size_t requested, uint64_t stream, uintptr_t *out)
{
    int rc = try_alloc(a, tc, rounded, requested, stream, out);
    if (rc == LOG_FULL) {
        cci_allocator_flush_events(a);  // a stop that moves no block
        rc = try_alloc(a, tc, rounded, requested, stream, out);
    }
    return alloc_answer(tc, rc);
}

// An inline allocation once entered. Compiled apart for each entry (`solo` a constant): a flag
// kept across the steps had cost spills (20 instructions a pair, callgrind).
static inline __attribute__((always_inline)) int alloc_entered(cci_allocator *a, cci_tc *tc, size_t rounded,
                                                               size_t requested, uint64_t stream,
                                                               uintptr_t *out, int solo)
{
    int rc = alloc_in_gate(a, tc, rounded, requested, stream, out);
    leave_inline(tc, solo);
    if (__builtin_expect(rc == LOG_FULL, 0))
        return alloc_general(a, tc, rounded, requested, stream, out);  // from the start, as if it came now
    return alloc_answer(tc, rc);
}

// `aside` and the window are the owner's own fields: read and written without the gate.
int cci__tc_alloc(cci_allocator *a, size_t rounded, size_t requested, uint64_t stream, uintptr_t *out)
{
    cci_tc *tc = my_cache(a);
    if (__builtin_expect(!tc, 0))
        return CCI_ENOTOURS;
    if (__builtin_expect(tc->aside != 0, 0)) {
        tc->aside--;
        return CCI_ENOTOURS;
    }
    if (__builtin_expect(enter_solo(a, tc), 1))
        return alloc_entered(a, tc, rounded, requested, stream, out, 1);
    if (__builtin_expect(!enter_at_once(tc), 0))
        return alloc_general(a, tc, rounded, requested, stream, out);
    return alloc_entered(a, tc, rounded, requested, stream, out, 0);
}

// The class a block of `size` freed on `stream` goes into: the first of its size and stream with
// room, else the first empty one; -1 when none. Every class: an empty one keeps its size and
// stream, and is taken first by a block of them, which decides the order the blocks are drained
// in, and so the inactive-split running totals.
static inline __attribute__((always_inline)) int class_for_free(const cci_tc *tc, size_t size, uint64_t stream)
{
    for (int c = 0; c < MAG_CLASSES; c++)
        if (tc->mag[c].n < MAG_DEPTH && tc->mag[c].size == size && tc->mag[c].stream == stream)
            return c;
    unsigned empty = ~tc->filled & ALL_CLASSES;
    return empty ? __builtin_ctz(empty) : -1;
}

// Puts b, freed on its own stream, into a magazine of the thread, if one has room and the change
// is within the thread's credits. CCI_OK, or CCI_ENOTOURS for the locked path.
static inline __attribute__((always_inline)) int cache_block(cci_allocator *a, cci_tc *tc, cci_block *b, uint64_t stream)
{
    size_t size = b->size;
    int at = class_for_free(tc, size, stream);
    if (at < 0)
        return CCI_ENOTOURS;
    mag_class *m = &tc->mag[at];
    delta v;
    credits after;
    free_delta(a, b, split_on_free(b), &v);
    if (!covered(tc, &v, FREEING, &after))
        return CCI_ENOTOURS;
    int n = m->n;
    m->size = size;
    m->stream = stream;
    m->oversize = v.grow[1][1];
    set_row_pair(m->split[n], 0, v.split);
    m->b[n] = b;
    m->n = n + 1;
    tc->filled |= 1u << at;
    spend(tc, &v, FREEING, &after);
    __atomic_store_n(&b->state, BLOCK_CACHED, __ATOMIC_RELAXED);  // neighbours read it
    tc->dirty = 1;
    if (a->nobs) {
        // A free reusable at once: one record for its request and its completion (cci_fast_event),
        // the allocation's record with CCI_FAST_FREED where the requested size would be.
        log_record(tc, b->addr, size, CCI_FAST_FREED, stream);
        tc->nlog_freed++;
    }
    return CCI_OK;
}

// Inside the gate: b, allocated by this thread on `stream`, into a magazine. CCI_OK, CCI_ENOTOURS
// (not a block this thread may free here: the locked path answers) or LOG_FULL.
static inline __attribute__((always_inline)) int free_in_gate(cci_allocator *a, cci_tc *tc, uintptr_t ptr,
                                                              uint64_t stream)
{
    cci_block *b = tc->recent;
    if (b->addr != ptr)
        b = cci_live_find(&tc->table, ptr);
    if (!b || b->state != BLOCK_ALLOCATED || b->stream != stream)
        return CCI_ENOTOURS;
    if (!log_has_room(a, tc))
        return LOG_FULL;
    return cache_block(a, tc, b, stream);
}

static int try_free(cci_allocator *a, cci_tc *tc, uintptr_t ptr, uint64_t stream)
{
    if (!enter(tc))
        return CCI_ENOTOURS;
    int rc = free_in_gate(a, tc, ptr, stream);
    if (rc == LOG_FULL && log_to_batch(a, tc))
        rc = free_in_gate(a, tc, ptr, stream);  // the same choice, with room now
    leave(tc);
    return rc;
}

static __attribute__((noinline, cold)) int free_general(cci_allocator *a, cci_tc *tc, uintptr_t ptr,
                                                        uint64_t stream)
{
    int rc = try_free(a, tc, ptr, stream);
    if (rc == LOG_FULL) {
        cci_allocator_flush_events(a);  // a stop that moves no block
        rc = try_free(a, tc, ptr, stream);
    }
    return rc == CCI_OK ? CCI_OK : CCI_ENOTOURS;
}

// An inline free once entered, compiled apart for each entry as alloc_entered is.
static inline __attribute__((always_inline)) int free_entered(cci_allocator *a, cci_tc *tc, uintptr_t ptr,
                                                              uint64_t stream, int solo)
{
    int rc = free_in_gate(a, tc, ptr, stream);
    leave_inline(tc, solo);
    if (__builtin_expect(rc == LOG_FULL, 0))
        return free_general(a, tc, ptr, stream);  // from the start, as if it came now
    return rc == CCI_OK ? CCI_OK : CCI_ENOTOURS;
}

int cci__tc_free(cci_allocator *a, uintptr_t ptr, uint64_t stream)
{
    cci_tc *tc = my_cache(a);
    if (__builtin_expect(!tc || tc->aside, 0))
        return CCI_ENOTOURS;  // set aside: straight into the free set, as without the caches
    if (__builtin_expect(enter_solo(a, tc), 1))
        return free_entered(a, tc, ptr, stream, 1);
    if (__builtin_expect(!enter_at_once(tc), 0))
        return free_general(a, tc, ptr, stream);
    return free_entered(a, tc, ptr, stream, 0);
}

// ---- the locked side ------------------------------------------------------------------------------

void cci__tc_skipped(cci_allocator *a)
{
    cci_tc *tc = a->tc_mine;
    // tc_on: a cache switched off is not asked either (its time aside stays as it was).
    if (tc && tc->aside && a->tc_on && --tc->aside == 0)
        set_fast(a, 1);
}


void cci__tc_disown(cci_block *b)
{
    cci_tc *tc = b->owner;
    if (tc)
        table_remove(tc, b);
}

void cci__tc_forget_all(cci_allocator *a)
{
    for (cci_tc *tc = a->tcs; tc; tc = tc->next) {
        cci_live_clear(&tc->table);
        tc->recent = &cci__tc_no_block;
        memset(tc->mag, 0, sizeof tc->mag);
        tc->filled = 0;
        memset(tc->shard, 0, sizeof tc->shard);
        memset(tc->credit, 0, sizeof tc->credit);
        memset(tc->given, 0, sizeof tc->given);
        log_restart(tc);
        tc->nhanded = tc->told = tc->nhanded_freed = 0;
    }
}
