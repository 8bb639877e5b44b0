// SPDX-License-Identifier: MIT
// Per-thread caches in front of the allocator lock: the rules are in tcache.h.
//
// Each (thread, allocator) pair has one cache, reached through a thread-local slot. Its `gate`
// word is the only thing two threads ever contend on, and only while a lock holder stops the
// caches: GATE_OPEN (idle) -> GATE_OWNER (the owning thread is in a fast path) -> GATE_OPEN, or
// GATE_OPEN -> GATE_STOPPED (a lock holder owns the cache) -> GATE_OPEN. A fast path never waits:
// when it finds the gate stopped it takes the locked path, which waits on the mutex instead.
#include "tcache.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { GATE_OPEN = 0, GATE_OWNER = 1, GATE_STOPPED = 2 };

#define MAG_CLASSES 8   // (stream, size) classes a thread keeps at once
#define MAG_DEPTH 4     // blocks per class: a burst of frees of one size, taken back in turn
#define LOG_EVENTS 256  // events kept for the observers between two stops
#define TLS_SLOTS 8     // allocators (devices) one thread reaches through a fast path

// The statistics a fast path changes: seven per-pool families and the oversize count. A credit
// is kept for each.
enum { F_ALLOCATION, F_ALLOCATED_BYTES, F_ACTIVE, F_ACTIVE_BYTES, F_REQUESTED, F_SPLIT, F_SPLIT_BYTES, F_COUNT };
#define NSTAT (F_COUNT * CCI_POOL_KINDS + 1)
#define K_OVERSIZE (NSTAT - 1)

typedef struct {
    uint64_t stream;
    size_t size;
    int n;
    cci_block *b[MAG_DEPTH];
} mag_class;

typedef struct {
    uint64_t stamp;
    uintptr_t addr;
    size_t size;
    size_t requested;  // the request for ALLOC, the free mode for FREE_REQUESTED
    uint64_t stream;
    int kind;
} tc_event;

typedef struct {
    int64_t cur;
    int64_t inc, dec;  // the running totals (cci_stat.allocated / .freed)
} shard_stat;

struct cci_tc {
    _Atomic int gate;
    cci_allocator *a;          // NULL once the allocator is destroyed (registry lock)
    struct cci_tc *next;       // the allocator's list (its mutex)
    mag_class mag[MAG_CLASSES];
    cci_block **table;         // the blocks this thread may free on its fast path, by address
    size_t table_cap, table_used;  // used counts tombstones too
    shard_stat shard[NSTAT];   // what the fast paths changed since the last stop
    int64_t credit[NSTAT];     // how far the fast paths may raise each statistic
    tc_event log[LOG_EVENTS];
    int nlog;
    uint64_t last_stamp;
};

struct tls_slot {
    cci_allocator *a;
    uint64_t uid;
    cci_tc *tc;
};
static __thread struct tls_slot slots[TLS_SLOTS];

static pthread_mutex_t registry = PTHREAD_MUTEX_INITIALIZER;  // cache <-> allocator links at exit
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key;

#define TOMBSTONE ((cci_block *)1)

// ---- time stamps ---------------------------------------------------------------------------

// Events of different threads are handed to the observers in stamp order. The time-stamp counter
// costs a few nanoseconds; where it is not there, the monotonic clock.
static uint64_t stamp_now(cci_tc *tc)
{
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

// ---- the statistics vector -------------------------------------------------------------------

static cci_stat *stat_of(cci_stats *st, int k)
{
    if (k == K_OVERSIZE)
        return &st->oversize_allocations;
    int pool = k % CCI_POOL_KINDS;
    switch (k / CCI_POOL_KINDS) {
    case F_ALLOCATION: return &st->allocation[pool];
    case F_ALLOCATED_BYTES: return &st->allocated_bytes[pool];
    case F_ACTIVE: return &st->active[pool];
    case F_ACTIVE_BYTES: return &st->active_bytes[pool];
    case F_REQUESTED: return &st->requested_bytes[pool];
    case F_SPLIT: return &st->inactive_split[pool];
    default: return &st->inactive_split_bytes[pool];
    }
}

typedef struct {
    int n;
    int k[2 * F_COUNT + 1];
    int64_t d[2 * F_COUNT + 1];
} delta;

static void delta_put(delta *v, int family, int pool, int64_t d)
{
    if (!d)
        return;
    for (int p = 0; p < 2; p++) {
        v->k[v->n] = family * CCI_POOL_KINDS + (p ? pool : CCI_POOL_ALL);
        v->d[v->n++] = d;
    }
}

// What handing out `b` (sign +1, for `requested` bytes) or taking it back (sign -1) changes, as
// the locked path would count it: a block of a split segment leaves (or joins) the inactive split
// blocks. A cached block is not merged with its free neighbours until the next stop, so while it
// waits the inactive-split block count may read higher than a merge would leave it (the bytes are
// the same either way).
static void delta_of(const cci_allocator *a, const cci_block *b, size_t requested, int sign, delta *v)
{
    int pool = b->small ? CCI_POOL_SMALL : CCI_POOL_LARGE;
    int64_t s = (int64_t)b->size * sign;
    v->n = 0;
    delta_put(v, F_ALLOCATION, pool, sign);
    delta_put(v, F_ALLOCATED_BYTES, pool, s);
    delta_put(v, F_ACTIVE, pool, sign);
    delta_put(v, F_ACTIVE_BYTES, pool, s);
    delta_put(v, F_REQUESTED, pool, (int64_t)requested * sign);
    if (b->prev || b->next) {
        delta_put(v, F_SPLIT, pool, -sign);
        delta_put(v, F_SPLIT_BYTES, pool, -s);
    }
    if (b->size >= a->cfg.max_split_size) {
        v->k[v->n] = K_OVERSIZE;
        v->d[v->n++] = sign;
    }
}

static int delta_covered(const cci_tc *tc, const delta *v)
{
    for (int i = 0; i < v->n; i++)
        if (v->d[i] > 0 && tc->credit[v->k[i]] < v->d[i])
            return 0;
    return 1;
}

// Applies v (reverse = 0) or takes it back exactly, totals included (reverse = 1). Credits follow
// the change: an increase spends credit, a decrease earns it (the value moved away from its peak).
static void delta_apply(cci_tc *tc, const delta *v, int reverse)
{
    for (int i = 0; i < v->n; i++) {
        shard_stat *s = &tc->shard[v->k[i]];
        int64_t d = reverse ? -v->d[i] : v->d[i];
        s->cur += d;
        int64_t mag = v->d[i] > 0 ? v->d[i] : -v->d[i];
        int64_t *total = v->d[i] > 0 ? &s->inc : &s->dec;
        *total += reverse ? -mag : mag;
        tc->credit[v->k[i]] -= d;
    }
}

// ---- the address table -----------------------------------------------------------------------

static size_t slot_of(uintptr_t addr, size_t cap)
{
    return (size_t)(((uint64_t)addr >> 9) * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1);
}

static cci_block **table_find(cci_tc *tc, uintptr_t addr)
{
    if (!tc->table)
        return NULL;
    for (size_t i = slot_of(addr, tc->table_cap);; i = (i + 1) & (tc->table_cap - 1)) {
        cci_block *b = tc->table[i];
        if (!b)
            return NULL;
        if (b != TOMBSTONE && b->addr == addr)
            return &tc->table[i];
    }
}

static int table_rehash(cci_tc *tc, size_t cap)
{
    cci_block **t = calloc(cap, sizeof *t);
    if (!t)
        return -1;
    size_t used = 0;
    for (size_t i = 0; i < tc->table_cap; i++) {
        cci_block *b = tc->table[i];
        if (!b || b == TOMBSTONE)
            continue;
        size_t j = slot_of(b->addr, cap);
        while (t[j])
            j = (j + 1) & (cap - 1);
        t[j] = b;
        used++;
    }
    free(tc->table);
    tc->table = t;
    tc->table_cap = cap;
    tc->table_used = used;
    return 0;
}

static int table_insert(cci_tc *tc, cci_block *b)
{
    if ((tc->table_used + 1) * 2 > tc->table_cap) {
        size_t live = 0;
        for (size_t i = 0; i < tc->table_cap; i++)
            live += tc->table[i] && tc->table[i] != TOMBSTONE;
        size_t cap = tc->table_cap ? tc->table_cap : 64;
        while ((live + 1) * 4 > cap)
            cap *= 2;
        if (table_rehash(tc, cap) != 0)
            return -1;
    }
    size_t i = slot_of(b->addr, tc->table_cap);
    while (tc->table[i] && tc->table[i] != TOMBSTONE)
        i = (i + 1) & (tc->table_cap - 1);
    if (!tc->table[i])
        tc->table_used++;
    tc->table[i] = b;
    return 0;
}

// ---- thread slots and the registry -------------------------------------------------------------

static cci_tc *my_cache(const cci_allocator *a)
{
    for (int i = 0; i < TLS_SLOTS; i++)
        if (slots[i].a == a && slots[i].uid == a->uid)
            return slots[i].tc;
    return NULL;
}

static void unlink_cache(cci_allocator *a, cci_tc *tc)
{
    for (cci_tc **p = &a->tcs; *p; p = &(*p)->next)
        if (*p == tc) {
            *p = tc->next;
            return;
        }
}

// At thread exit: each cache gives its blocks back (the stop does that) and leaves its allocator.
static void on_thread_exit(void *unused)
{
    (void)unused;
    for (int i = 0; i < TLS_SLOTS; i++) {
        cci_tc *tc = slots[i].tc;
        if (!tc)
            continue;
        slots[i] = (struct tls_slot){0};
        pthread_mutex_lock(&registry);
        cci_allocator *a = tc->a;
        if (a) {
            cci__lock(a);
            // Blocks this thread allocated and did not free live on: the locked path frees them.
            for (size_t j = 0; j < tc->table_cap; j++)
                if (tc->table[j] && tc->table[j] != TOMBSTONE)
                    tc->table[j]->owner = NULL;
            unlink_cache(a, tc);
            tc->a = NULL;
            cci__unlock(a);
        }
        pthread_mutex_unlock(&registry);
        free(tc->table);
        free(tc);
    }
}

static void make_key(void)
{
    if (pthread_key_create(&exit_key, on_thread_exit) != 0)
        exit_key = (pthread_key_t)-1;
}

// The calling thread's cache for `a`, created on its first locked allocation. Lock held.
static cci_tc *attach_cache(cci_allocator *a)
{
    cci_tc *tc = my_cache(a);
    if (tc || !a->tc_on)
        return tc;
    int free_slot = -1;
    for (int i = 0; i < TLS_SLOTS && free_slot < 0; i++)
        if (!slots[i].tc)
            free_slot = i;
    pthread_once(&key_once, make_key);
    if (free_slot < 0 || exit_key == (pthread_key_t)-1)
        return NULL;  // more allocators than slots: this one is served on the locked path only
    tc = calloc(1, sizeof *tc);
    if (!tc)
        return NULL;
    if (pthread_setspecific(exit_key, tc) != 0) {  // any non-NULL value runs the destructor
        free(tc);
        return NULL;
    }
    // The lock holder owns every cache it can see; a new one joins the list already stopped.
    atomic_store_explicit(&tc->gate, GATE_STOPPED, memory_order_relaxed);
    tc->a = a;
    tc->next = a->tcs;
    a->tcs = tc;
    slots[free_slot] = (struct tls_slot){a, a->uid, tc};
    return tc;
}

// ---- stops ----------------------------------------------------------------------------------

// Hands the events of up to MERGE_MAX caches to the observers, the oldest stamp first.
#define MERGE_MAX 64
static void merge_events(cci_allocator *a, cci_tc **tcs, int n)
{
    int pos[MERGE_MAX] = {0};
    for (;;) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (pos[i] < tcs[i]->nlog && (best < 0 || tcs[i]->log[pos[i]].stamp < tcs[best]->log[pos[best]].stamp))
                best = i;
        if (best < 0)
            break;
        tc_event *e = &tcs[best]->log[pos[best]++];
        cci__notify_full(a, (cci_event_kind)e->kind, e->stream, e->addr, e->size, e->requested);
    }
    for (int i = 0; i < n; i++)
        tcs[i]->nlog = 0;
}

// Every cache's events, in stamp order (by groups of MERGE_MAX caches when more threads than that
// logged events since the last stop: each group in order, groups one after the other).
static void flush_events(cci_allocator *a)
{
    cci_tc *tcs[MERGE_MAX];
    int n = 0;
    for (cci_tc *tc = a->tcs; tc; tc = tc->next) {
        if (!tc->nlog)
            continue;
        if (n == MERGE_MAX) {
            merge_events(a, tcs, n);
            n = 0;
        }
        tcs[n++] = tc;
    }
    merge_events(a, tcs, n);
}

// Folds a cache's statistics into the allocator's and returns its magazine blocks to the free set.
static void empty_cache(cci_allocator *a, cci_tc *tc)
{
    // A cached block counts as freed in the shard and as allocated in the allocator's books: the
    // shard takes its free back, and the locked free below counts it once, with its merges.
    for (int c = 0; c < MAG_CLASSES; c++)
        for (int i = 0; i < tc->mag[c].n; i++) {
            delta v;
            delta_of(a, tc->mag[c].b[i], tc->mag[c].b[i]->requested, -1, &v);
            delta_apply(tc, &v, 1);
        }
    for (int k = 0; k < NSTAT; k++) {
        cci_stat *s = stat_of(&a->st, k);
        s->current += tc->shard[k].cur;
        s->allocated += tc->shard[k].inc;
        s->freed += tc->shard[k].dec;
    }
    memset(tc->shard, 0, sizeof tc->shard);
    for (int c = 0; c < MAG_CLASSES; c++) {
        for (int i = 0; i < tc->mag[c].n; i++) {
            cci_block *b = tc->mag[c].b[i];
            cci_block **e = table_find(tc, b->addr);
            if (e)
                *e = TOMBSTONE;
            b->owner = NULL;
            b->state = BLOCK_ALLOCATED;
            cci__release_cached(a, b);
        }
        tc->mag[c].n = 0;
    }
}

void cci__lock(cci_allocator *a)
{
    pthread_mutex_lock(&a->lock);
    if (!a->tcs)
        return;
    for (cci_tc *tc = a->tcs; tc; tc = tc->next) {
        int open = GATE_OPEN;
        while (!atomic_compare_exchange_weak_explicit(&tc->gate, &open, GATE_STOPPED, memory_order_acquire,
                                                      memory_order_relaxed)) {
            if (open == GATE_STOPPED)
                break;  // joined the list stopped (attach_cache)
            open = GATE_OPEN;  // its owner is inside a fast path: tens of nanoseconds
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
    }
    flush_events(a);
    for (cci_tc *tc = a->tcs; tc; tc = tc->next)
        empty_cache(a, tc);
}

void cci__unlock(cci_allocator *a)
{
    if (a->tcs) {
        // Credits: every thread keeps what it has as long as all of them together stay within the
        // distance from the current value to its peak; the calling thread gets what is left.
        cci_tc *mine = my_cache(a);
        for (int k = 0; k < NSTAT; k++) {
            const cci_stat *s = stat_of(&a->st, k);
            int64_t room = s->peak - s->current;
            for (cci_tc *tc = a->tcs; tc; tc = tc->next) {
                if (tc == mine)
                    continue;
                if (tc->credit[k] > room)
                    tc->credit[k] = room;
                if (tc->credit[k] < 0)
                    tc->credit[k] = 0;
                room -= tc->credit[k];
            }
            if (mine)
                mine->credit[k] = room > 0 ? room : 0;
        }
        for (cci_tc *tc = a->tcs; tc; tc = tc->next)
            atomic_store_explicit(&tc->gate, GATE_OPEN, memory_order_release);
    }
    pthread_mutex_unlock(&a->lock);
}

// ---- the fast paths ---------------------------------------------------------------------------

static cci_tc *enter(cci_allocator *a)
{
    cci_tc *tc = my_cache(a);
    int open = GATE_OPEN;
    if (!tc || !atomic_compare_exchange_strong_explicit(&tc->gate, &open, GATE_OWNER, memory_order_acquire,
                                                        memory_order_relaxed))
        return NULL;
    return tc;
}

static void leave(cci_tc *tc) { atomic_store_explicit(&tc->gate, GATE_OPEN, memory_order_release); }

static void log_event(cci_tc *tc, int kind, const cci_block *b, size_t requested)
{
    tc->log[tc->nlog++] = (tc_event){stamp_now(tc), b->addr, b->size, requested, b->stream, kind};
}

int cci__tc_alloc(cci_allocator *a, size_t rounded, size_t requested, uint64_t stream, uintptr_t *out)
{
    cci_tc *tc = enter(a);
    if (!tc)
        return CCI_ENOTOURS;
    int rc = CCI_ENOTOURS;
    for (int c = 0; c < MAG_CLASSES; c++) {
        mag_class *m = &tc->mag[c];
        if (m->n == 0 || m->size != rounded || m->stream != stream)
            continue;
        cci_block *b = m->b[m->n - 1];
        delta v;
        delta_of(a, b, requested, +1, &v);
        if (!delta_covered(tc, &v) || (a->nobs && tc->nlog > LOG_EVENTS - 1))
            break;
        m->n--;
        delta_apply(tc, &v, 0);
        b->state = BLOCK_ALLOCATED;
        b->requested = requested;
        if (a->nobs)
            log_event(tc, CCI_EV_ALLOC, b, requested);
        *out = b->addr;
        rc = CCI_OK;
        break;
    }
    leave(tc);
    return rc;
}

int cci__tc_free(cci_allocator *a, uintptr_t ptr, uint64_t stream)
{
    cci_tc *tc = enter(a);
    if (!tc)
        return CCI_ENOTOURS;
    int rc = CCI_ENOTOURS;
    cci_block **e = table_find(tc, ptr);
    cci_block *b = e ? *e : NULL;
    if (b && b->state == BLOCK_ALLOCATED && b->stream == stream && !(a->nobs && tc->nlog > LOG_EVENTS - 2)) {
        mag_class *m = NULL;
        for (int c = 0; c < MAG_CLASSES && !m; c++)
            if (tc->mag[c].n < MAG_DEPTH && tc->mag[c].size == b->size && tc->mag[c].stream == stream)
                m = &tc->mag[c];
        for (int c = 0; c < MAG_CLASSES && !m; c++)
            if (tc->mag[c].n == 0)
                m = &tc->mag[c];
        delta v;
        delta_of(a, b, b->requested, -1, &v);
        if (m && delta_covered(tc, &v)) {
            m->size = b->size;
            m->stream = stream;
            m->b[m->n++] = b;
            delta_apply(tc, &v, 0);
            b->state = BLOCK_CACHED;
            if (a->nobs) {
                log_event(tc, CCI_EV_FREE_REQUESTED, b, CCI_FREE_NOW);
                log_event(tc, CCI_EV_FREE_COMPLETED, b, 0);
            }
            rc = CCI_OK;
        }
    }
    leave(tc);
    return rc;
}

// ---- the locked side ------------------------------------------------------------------------------

void cci__tc_own(cci_allocator *a, cci_block *b)
{
    cci_tc *tc = attach_cache(a);
    if (tc && table_insert(tc, b) == 0)
        b->owner = tc;
}

void cci__tc_disown(cci_block *b)
{
    cci_tc *tc = b->owner;
    if (!tc)
        return;
    cci_block **e = table_find(tc, b->addr);
    if (e)
        *e = TOMBSTONE;
    b->owner = NULL;
}

void cci__tc_forget_all(cci_allocator *a)
{
    for (cci_tc *tc = a->tcs; tc; tc = tc->next) {
        free(tc->table);
        tc->table = NULL;
        tc->table_cap = tc->table_used = 0;
        memset(tc->mag, 0, sizeof tc->mag);
        memset(tc->shard, 0, sizeof tc->shard);
        memset(tc->credit, 0, sizeof tc->credit);
        tc->nlog = 0;
    }
}

void cci__tc_detach_all(cci_allocator *a)
{
    pthread_mutex_lock(&registry);
    for (cci_tc *tc = a->tcs; tc; tc = tc->next)
        tc->a = NULL;
    a->tcs = NULL;
    pthread_mutex_unlock(&registry);
}

void cci__tc_fork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&registry, &fresh, sizeof fresh);
}
