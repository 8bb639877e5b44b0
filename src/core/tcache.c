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
#include "tcache_fast.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

// The thread's slots (tcache_impl.h).
__thread struct tls_slot cci__tc_slots[TLS_SLOTS] __attribute__((tls_model("initial-exec")));

// `recent` when it names no block of the table (tcache_impl.h).
cci_block cci__tc_no_block;

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
static __attribute__((noinline)) void drain_cache(cci_allocator *a, cci_tc *tc, int all)
{
    FOR_EACH_CLASS(c, tc->filled)
        drain_class(a, tc, (int)c);
    if (all && tc->held.nheld)
        cci__tc_held_drain(a, tc);
}

void cci__tc_drain_all(cci_allocator *a)
{
    for (cci_tc *tc = a->tcs; tc; tc = tc->next)
        drain_cache(a, tc, 1);
}

void cci__tc_drain_mine(cci_allocator *a)
{
    cci_tc *tc = a->tc_mine;
    if (tc && tc->filled)
        drain_cache(a, tc, 0);
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
// the credits cover it. CCI_OK, MAG_MISS, CREDIT_SHORT (a hit the credits could not cover),
// HELD_WAIT or LOG_FULL.
static inline __attribute__((always_inline)) int alloc_in_gate(cci_allocator *a, cci_tc *tc, size_t rounded,
                                                               size_t requested, uint64_t stream,
                                                               uintptr_t *out)
{
    unsigned c;
    mag_class *m = class_holding(tc, rounded, stream, &c);
    if (!m)
        return tc->held.nheld ? cci__tc_alloc_held(a, tc, rounded, requested, stream, out) : MAG_MISS;
    int top = m->n - 1;
    cci_block *b = m->b[top];
    delta v;
    credits after;
    alloc_delta(b, m, top, requested, &v);
    if (!covered(tc, &v, ALLOCATING, &after))
        return CREDIT_SHORT;
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
    else
        tc_declined(tc, rc);
    return rc == CCI_OK ? CCI_OK : CCI_ENOTOURS;
}

static int try_alloc(cci_allocator *a, cci_tc *tc, size_t rounded, size_t requested, uint64_t stream,
                     uintptr_t *out)
{
    if (!enter(tc))
        return GATE_BUSY;
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
// is within the thread's credits. CCI_OK, or CCI_ENOTOURS (no class has room) or CREDIT_SHORT
// for the locked path.
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
        return CREDIT_SHORT;
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
// (not a block this thread may free here: the locked path answers), CREDIT_SHORT or LOG_FULL.
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
    return tc_free_gated(a, tc, ptr, stream, free_in_gate);
}

static __attribute__((noinline, cold)) int free_general(cci_allocator *a, cci_tc *tc, uintptr_t ptr,
                                                        uint64_t stream)
{
    int rc = try_free(a, tc, ptr, stream);
    if (rc == LOG_FULL) {
        cci_allocator_flush_events(a);  // a stop that moves no block
        rc = try_free(a, tc, ptr, stream);
    }
    return free_answer(tc, rc);
}

// An inline free once entered, compiled apart for each entry as alloc_entered is.
static inline __attribute__((always_inline)) int free_entered(cci_allocator *a, cci_tc *tc, uintptr_t ptr,
                                                              uint64_t stream, int solo)
{
    int rc = free_in_gate(a, tc, ptr, stream);
    leave_inline(tc, solo);
    if (__builtin_expect(rc == LOG_FULL, 0))
        return free_general(a, tc, ptr, stream);  // from the start, as if it came now
    return free_answer(tc, rc);
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
        cci__tc_held_forget(a, tc);
        tc->filled = 0;
        memset(tc->shard, 0, sizeof tc->shard);
        memset(tc->credit, 0, sizeof tc->credit);
        memset(tc->given, 0, sizeof tc->given);
        log_restart(tc);
        tc->nhanded = tc->told = tc->nhanded_freed = 0;
    }
}
