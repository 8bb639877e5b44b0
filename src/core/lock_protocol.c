// SPDX-License-Identifier: MIT
// The allocator's lock as the thread caches see it (tcache.h): cci__lock takes the lock word
// (lock.h), then stops every other thread's cache at its gate, swaps its event log out and folds
// its statistics into the allocator's; cci__unlock hands out fresh credits under the peaks, lets
// the caches run again and tells the observers without a batch door what happened meanwhile.
// Apart from the fast paths (tcache.c), which never take the lock; the shared state is in
// tcache_impl.h.
#include "tcache_impl.h"
#include "grow.h"

#include <sched.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define OWNER_WAIT_SPINS 1024  // pauses before a lock holder waiting for a fast path yields its CPU

// The statistics behind each kind in each pool, as offsets into cci_stats (NO_STAT: none), one per
// family. A table rather than a computation: the unlock reads it for every kind at every stop.
#define NO_STAT SIZE_MAX
#define STAT_AT(field, pool) (offsetof(cci_stats, field) + (size_t)(pool) * sizeof(cci_stat))
#define KIND_STATS(pool)                                                                           \
    {                                                                                              \
        [K_COUNT] = {STAT_AT(allocation, pool), STAT_AT(active, pool)},                            \
        [K_BYTES] = {STAT_AT(allocated_bytes, pool), STAT_AT(active_bytes, pool)},                 \
        [K_REQUESTED] = {STAT_AT(requested_bytes, pool), NO_STAT},                                 \
        [K_SPLIT] = {STAT_AT(inactive_split, pool), NO_STAT},                                      \
        [K_SPLIT_BYTES] = {STAT_AT(inactive_split_bytes, pool), NO_STAT},                          \
        /* a single statistic, not per pool: only in the `all` row */                              \
        [K_OVERSIZE] = {(pool) == CCI_POOL_ALL ? offsetof(cci_stats, oversize_allocations) : NO_STAT, \
                        NO_STAT},                                                                  \
    }
static const size_t kind_stat_at[CCI_POOL_KINDS][NKIND][FAMILIES_PER_KIND] = {
    [CCI_POOL_ALL] = KIND_STATS(CCI_POOL_ALL),
    [CCI_POOL_SMALL] = KIND_STATS(CCI_POOL_SMALL),
    [CCI_POOL_LARGE] = KIND_STATS(CCI_POOL_LARGE),
};

// ---- stops ----------------------------------------------------------------------------------

// A stop swaps each cache's log out (tc->handed). Observers with a batch door get the swapped logs
// at once, at the stop, and the locked section's own events as they happen (cci__notify_full).
// The others hear of events one at a time, in time order, at the unlock, with the caches running
// again and the mutex still held: the swapped logs merged by stamp, then the section's events
// (a->evq, queued by cci__notify_full meanwhile).
static void swap_logs(cci_allocator *a)
{
    for (cci_tc *tc = a->tcs; tc; tc = tc->next) {
        int n = log_count(tc);
        if (!n)
            continue;
        tc_event *t = tc->handed;
        tc->handed = tc->log;
        tc->nhanded = n;
        tc->nhanded_freed = tc->nlog_freed;
        tc->handed_order = tc->order;
        tc->log = t;
        log_restart(tc);
    }
}

// The observers with a batch door get `n` events of one thread at once. One of them may keep a
// full log when the cache has a spare to replace it (a partial one would keep its unused tail
// too); then the spare takes its place in *log, and a new spare is made (none without host
// memory: the next logs are only copied). Called by the cache's owner inside its gate, or by the
// lock holder while the cache is stopped: the only two that touch `spare`.
void cci__tc_tell_batch(cci_allocator *a, cci_tc *tc, uint64_t order, tc_event **log, int n, int freed)
{
    cci_fast_batch b = {order, *log, (size_t)n, (size_t)n + (size_t)freed, tc->spare && n >= LOG_KEEP_MIN};
    int kept = 0;
    for (int i = 0; i < a->nobs; i++)
        if (a->obs[i].batch && (a->obs[i].kinds & CCI_FAST_KINDS)) {
            kept |= a->obs[i].batch(a->obs[i].ud, &b);
            b.may_keep &= !kept;
        }
    if (kept) {
        *log = tc->spare;
        tc->spare = malloc(LOG_EVENTS * sizeof *tc->spare);
    }
}

// The handed log has been told to every observer.
static void handed_done(cci_tc *tc)
{
    tc->nhanded = tc->told = 0;
    tc->told_log = NULL;
}

// A logged event as the observers without a batch door hear it: an allocation, or one of the two
// events a free reusable at once stands for (`second`: its completion).
static void tell_one(cci_allocator *a, const tc_event *e, uint64_t order, int second)
{
    cci_event ev = {CCI_EV_ALLOC, a->device, e->stream, e->addr, e->size, e->requested, order, e->stamp};
    if (e->requested == CCI_FAST_FREED) {
        ev.kind = second ? CCI_EV_FREE_COMPLETED : CCI_EV_FREE_REQUESTED;
        ev.requested = second ? 0 : CCI_FREE_NOW;
    } else if (e->requested == CCI_FAST_FENCED) {
        ev.kind = CCI_EV_FREE_REQUESTED;
        ev.requested = CCI_FREE_FENCED;
    } else if (e->requested == CCI_FAST_COMPLETED) {
        ev.kind = CCI_EV_FREE_COMPLETED;
        ev.requested = 0;
    }
    cci__tell(a, &ev, CCI_TELL_SERIAL);
}

// Lock held, caches running: the swapped logs, merged by stamp, to the observers without a
// batch door (only when one of them wants the fast paths' kinds: a trace, call sites).
static void tell_handed(cci_allocator *a)
{
    if (!a->nobs_serial_fast) {
        for (cci_tc *tc = a->tcs; tc; tc = tc->next)
            handed_done(tc);
        return;
    }
    for (;;) {
        cci_tc *best = NULL;
        for (cci_tc *tc = a->tcs; tc; tc = tc->next)
            if (tc->told < tc->nhanded && (!best || tc->told_log[tc->told].stamp < best->told_log[best->told].stamp))
                best = tc;
        if (!best)
            break;
        const tc_event *e = &best->told_log[best->told++];
        tell_one(a, e, best->handed_order, 0);
        if (e->requested == CCI_FAST_FREED)  // its completion, made together with the request
            tell_one(a, e, best->handed_order, 1);
    }
    for (cci_tc *tc = a->tcs; tc; tc = tc->next)
        handed_done(tc);
}

// Adds a shard to the allocator's statistics, without touching peaks: its increases stayed within
// credits under the peaks. Unrolled for each pool, the table's offsets are constants
// (stats_fold_in): the loop over the table had cost more than the rest of a stop.
static inline __attribute__((always_inline)) void stats_fold_in(cci_stats *stats, int pool, const shard_pool *sh)
{
    const int pools[2] = {CCI_POOL_ALL, pool};
#pragma GCC unroll 6
    for (int k = 0; k < NKIND; k++) {
        int64_t cur = sh->cur[k], inc = sh->inc[k];
#pragma GCC unroll 2
        for (int f = 0; f < FAMILIES_PER_KIND; f++)
#pragma GCC unroll 2
            for (int i = 0; i < 2; i++) {
                size_t at = kind_stat_at[pools[i]][k][f];
                if (at == NO_STAT)
                    continue;
                cci_stat *st = (cci_stat *)((char *)stats + at);
                st->current += cur;
                st->allocated += inc;
                st->freed += inc - cur;
            }
    }
}

// At every stop: the cache's statistics join the allocator's, so every reader sees exact figures.
// Its magazine blocks stay where they are (see cci__tc_drain_all): they count as freed already.
static void fold_cache(cci_allocator *a, cci_tc *tc)
{
    if (!tc->dirty) {
        tc->held.quiet += tc->held.quiet < HELD_QUIET_STOPS;
        return;
    }
    tc->dirty = 0;
    tc->held.quiet = 0;
    // The net change is what the credits moved since the unlock gave them. What the fast paths
    // raised is spent, what they lowered earned (the value moved away from its peak): the credits
    // stay where the fast paths left them, and the unlock hands out what is left.
    for (int pool = CCI_POOL_SMALL; pool <= CCI_POOL_LARGE; pool++)
#pragma GCC unroll 6
        for (int k = 0; k < NKIND; k++)
            tc->shard[pool].cur[k] = tc->given[pool][k] - tc->credit[pool][k];
    stats_fold_in(&a->st, CCI_POOL_SMALL, &tc->shard[CCI_POOL_SMALL]);
    stats_fold_in(&a->st, CCI_POOL_LARGE, &tc->shard[CCI_POOL_LARGE]);
    memset(tc->shard, 0, sizeof tc->shard);
}

// What the cache's fast paths declined since the last stop joins the allocator's figures.
static void fold_declined(cci_allocator *a, cci_tc *tc)
{
    uint64_t *into[TC_DECLINED_KINDS] = {
        [TC_DECLINED_CREDIT] = &a->st.tc_declined_credit,
        [TC_DECLINED_KEPT_WAIT] = &a->st.tc_declined_kept_wait,
        [TC_DECLINED_BUSY] = &a->st.tc_declined_busy,
        [TC_DECLINED_KEEP_FULL] = &a->st.tc_declined_keep_full,
    };
    for (int k = 0; k < TC_DECLINED_KINDS; k++) {
        uint64_t n = atomic_load_explicit(&tc->declined[k], memory_order_relaxed);
        *into[k] += n - tc->declined_folded[k];
        tc->declined_folded[k] = n;
    }
}

// One step of a lock holder's wait for an owner in a fast path (or, at the end of the solo state,
// in a locked section): tens of nanoseconds, unless the owner lost its CPU there (more threads
// than cores), so every OWNER_WAIT_SPINS-th step yields the CPU.
static inline void owner_wait_step(unsigned *spins)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (++*spins % OWNER_WAIT_SPINS == 0)
        sched_yield();
}

// The general stop: every other thread's cache waited for at its gate, the logs swapped, the
// shards folded, the batch doors told. Out of line: the mixed workload's lock (its only cache its
// own, set aside) needs none of it, and this part's frame (six registers saved and restored) had
// cost that lock as much as the rest of it.
static __attribute__((noinline)) void stop_caches(cci_allocator *a)
{
    unsigned spins = 0;
    for (cci_tc *tc = a->tcs; tc; tc = tc->next) {
        if (tc == a->tc_mine) {
            // Its owner is this thread, here and not in a fast path: nothing to wait for, and no
            // other thread touches the gate while the mutex is held. A plain store, not a CAS.
            atomic_store_explicit(&tc->gate, GATE_STOPPED, memory_order_relaxed);
            continue;
        }
        int open = GATE_OPEN;
        while (!atomic_compare_exchange_weak_explicit(&tc->gate, &open, GATE_STOPPED, memory_order_acquire,
                                                      memory_order_relaxed)) {
            if (open == GATE_STOPPED)
                break;  // joined the list stopped (attach_cache)
            open = GATE_OPEN;  // its owner is inside a fast path
            owner_wait_step(&spins);
        }
    }
    swap_logs(a);
    for (cci_tc *tc = a->tcs; tc; tc = tc->next) {
        fold_cache(a, tc);
        a->st.num_fence_records += tc->held.records;  // fences of its kept frees (tcache_fenced.c)
        tc->held.records = 0;
        fold_declined(a, tc);
        // The batch doors hear of the fast paths' events now, before any event of this section
        // (which they are told at once: cci__notify_full), so that inside a locked section a batch
        // observer has seen every event before it (cci_batch_fn).
        if (tc->nhanded) {
            tc->told_log = tc->handed;
            cci__tc_tell_batch(a, tc, tc->handed_order, &tc->handed, tc->nhanded, tc->nhanded_freed);
        }
    }
}

// Until the owner of the solo state has left what it had entered solo (a locked section, a fast
// path).
static void wait_while_set(_Atomic int *flag)
{
    unsigned spins = 0;
    while (atomic_load_explicit(flag, memory_order_acquire))
        owner_wait_step(&spins);
}

// The lock word taken (by a thread that is not, or no longer, solo). When that ends the solo state
// (solo.h), the owner's section and fast path in flight, if any, end before this thread goes on;
// every later one takes the lock word and the gate.
static __attribute__((noinline)) void take_lock_word(cci_allocator *a, uintptr_t self)
{
    cci_lock_take(&a->lock);
    if (cci_solo_note_lock(&a->solo, self)) {
        wait_while_set(&a->solo.in_section);
        for (cci_tc *tc = a->tcs; tc; tc = tc->next)
            wait_while_set(&tc->in_fast);
    }
}

void cci__lock(cci_allocator *a)
{
    // A thread's token: the address of its own slots (initial-exec TLS: one instruction).
    uintptr_t self = (uintptr_t)&cci__tc_slots[0];
    if (!cci_solo_enter_section(&a->solo, self))
        take_lock_word(a, self);
    a->epoch++;
    // The locking thread's cache, looked up once for the section (attach_cache sets it when the
    // section creates it; a thread that leaves has dropped its slot before it locks).
    cci_tc *tcs = a->tcs;
    cci_tc *mine = tcs ? my_cache(a) : NULL;
    a->tc_mine = mine;
    if (!tcs)
        return;
    if (tcs == mine && !mine->next && !mine->dirty && mine->log_at == mine->log && !mine->nhanded) {
        // The only cache is this thread's, and no fast path ran since the last stop (set aside,
        // the mixed workload's case, or every call missed): nothing to fold, swap or tell but
        // what it declined.
        atomic_store_explicit(&mine->gate, GATE_STOPPED, memory_order_relaxed);
        fold_declined(a, mine);
        return;
    }
    stop_caches(a);
}

// The room under every peak that each (pool, kind) can raise: the smallest distance from a
// statistic of the kind to its peak (0 when a statistic is past it: a peak reset), a kind with no
// statistic in a pool (oversize is counted once, for all) is bounded by its `all` room alone.
// Unrolled in full, the table's offsets become constants and its empty entries vanish: a third of
// the instructions of the loop (callgrind).
static inline void credit_rooms(const cci_allocator *a, int64_t room[CCI_POOL_KINDS][NKIND])
{
#pragma GCC unroll 3
    for (int pool = 0; pool < CCI_POOL_KINDS; pool++)
#pragma GCC unroll 6
        for (int k = 0; k < NKIND; k++) {
            const size_t *at = kind_stat_at[pool][k];
            int64_t r = INT64_MAX / 4;
#pragma GCC unroll 2
            for (int f = 0; f < FAMILIES_PER_KIND; f++) {
                if (at[f] == NO_STAT)
                    break;  // the families of a kind come first in its row
                const cci_stat *st = (const cci_stat *)((const char *)&a->st + at[f]);
                int64_t d = st->peak - st->current;
                r = f == 0 || d < r ? d : r;
            }
            room[pool][k] = r > 0 ? r : 0;
        }
}

// Credits, at every unlock: every thread keeps what it has as long as all of them together stay
// within the room under the peaks; the calling thread gets what is left. Flat loops over the
// (pool, kind) pairs: this runs in every locked section, on the locked path's own clock.
static void hand_out_credits(cci_allocator *a)
{
    cci_tc *mine = a->tc_mine;
    if (mine && mine->aside && mine->alone) {
        // The only cache, set aside: nothing to share. It gets none, so that its first fast path
        // when it comes back misses, and the unlock after that gives it fresh credits.
        if (!mine->no_credit) {  // once per setting aside, not at every unlock
            memset(mine->credit, 0, sizeof mine->credit);
            memset(mine->given, 0, sizeof mine->given);
            mine->no_credit = 1;
        }
        return;
    }
    int64_t room[CCI_POOL_KINDS][NKIND];
    credit_rooms(a, room);
    int64_t *left = &room[0][0];
    for (cci_tc *tc = a->tcs; tc; tc = tc->next) {
        if (tc == mine)
            continue;
        // A credit is never below 0 (fold_cache spends at most what was covered), nor the room.
        int64_t *credit = &tc->credit[0][0], *given = &tc->given[0][0];
        for (int i = 0; i < CCI_POOL_KINDS * NKIND; i++) {
            int64_t c = credit[i] < left[i] ? credit[i] : left[i];
            credit[i] = given[i] = c;
            left[i] -= c;
        }
    }
    if (mine) {
        memcpy(mine->credit, room, sizeof room);
        memcpy(mine->given, room, sizeof room);
        mine->no_credit = 0;
    }
}

// Every cache running again, with its credits; then the handed logs to the observers without a
// batch door, one event at a time (the caches running again). Out of line as stop_caches is.
static __attribute__((noinline)) void restart_caches(cci_allocator *a)
{
    hand_out_credits(a);
    for (cci_tc *tc = a->tcs; tc; tc = tc->next) {
        tc->order = 2 * a->epoch + 1;
        atomic_store_explicit(&tc->gate, GATE_OPEN, memory_order_release);
    }
    tell_handed(a);
}

// The section's queued events to the observers without a batch door. Out of line: most sections
// queue none (an observer without a batch door that wants allocations or frees is rare: a trace),
// and the loop's frame had cost every unlock six instructions.
static __attribute__((noinline)) void tell_queued(cci_allocator *a)
{
    for (size_t i = 0; i < a->nevq; i++)
        cci__tell(a, &a->evq[i], CCI_TELL_SERIAL);
    a->nevq = 0;
}

void cci__unlock(cci_allocator *a)
{
    cci_tc *mine = a->tc_mine;
    if (a->tcs) {
        // The only cache this thread's, set aside, without credit already and nothing handed at
        // the stop (the mixed workload's case): restart_caches would only set its order and open
        // its gate (hand_out_credits leaves such a cache as it is, tell_handed has nothing to tell).
        int aside_alone = mine && mine->alone && mine->aside;
        if (aside_alone)
            set_fast(a, 0);
        if (aside_alone && mine->no_credit && !mine->nhanded) {
            mine->order = 2 * a->epoch + 1;
            atomic_store_explicit(&mine->gate, GATE_OPEN, memory_order_release);
        } else {
            restart_caches(a);
        }
    }
    // The section's own events (queued even when the last cache left meanwhile: thread exit).
    if (a->nevq)
        tell_queued(a);
    cci__lock_give(a);
}

void cci__lock_give(cci_allocator *a)
{
    if (!cci_solo_leave_section(&a->solo))
        cci_lock_give(&a->lock);
}

int cci__tc_queue_event(cci_allocator *a, const cci_event *ev)
{
    if (!a->tcs)
        return 0;
    cci_tc_event *q = cci_grow(a->evq, &a->evq_cap, a->nevq, sizeof *q, 256);
    if (!q)
        return 0;  // host out of memory: told at once, a little out of order
    a->evq = q;
    a->evq[a->nevq++] = *ev;
    return 1;
}
