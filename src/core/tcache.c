// SPDX-License-Identifier: MIT
// Per-thread caches in front of the allocator lock: the rules are in tcache.h.
//
// Each (thread, allocator) pair has one cache, reached through a thread-local slot. Its `gate`
// word is the only thing two threads ever contend on, and only while a lock holder stops the
// caches: GATE_OPEN (idle) -> GATE_OWNER (the owning thread is in a fast path) -> GATE_OPEN, or
// GATE_OPEN -> GATE_STOPPED (a lock holder owns the cache) -> GATE_OPEN. A fast path never waits:
// when it finds the gate stopped it takes the locked path, which waits on the mutex instead.
// While its thread is the only one that has ever locked the allocator, the inline fast paths mark
// themselves in `in_fast` instead, with plain stores (solo.h).
#include "tcache.h"
#include "grow.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <time.h>

enum { GATE_OPEN = 0, GATE_OWNER = 1, GATE_STOPPED = 2 };

#define MAG_CLASSES 8   // (stream, size) classes a thread keeps at once
#define MAG_DEPTH 4     // blocks per class: a burst of frees of one size, taken back in turn
#define ALL_CLASSES ((1u << MAG_CLASSES) - 1)
#define LOG_EVENTS 2048  // records kept for the observers between two stops (2 x 80 KiB a thread)
#define TLS_SLOTS 8     // allocators (devices) one thread reaches through a fast path
#define OWNER_WAIT_SPINS 1024  // pauses before a lock holder waiting for a fast path yields its CPU

// The statistics a fast path changes, grouped by how they move: a fast path changes the
// allocation and active counts together, the allocated and active bytes together, and each pool's
// figure together with the `all` one. Shards and credits are kept per kind (and per pool).
// The kinds before K_SPLIT move with the operation (up on an allocation, down on a free); the
// inactive-split ones either way (split_on_free). Knowing the sign spares the fast paths a test
// per kind (covered, spend).
enum { K_COUNT, K_BYTES, K_REQUESTED, K_OVERSIZE, K_SPLIT, K_SPLIT_BYTES, NKIND };
#define K_SIGNED K_SPLIT  // the kinds [0, K_SIGNED) have the operation's sign
#define FAMILIES_PER_KIND 2

// The fast paths handle the kinds two at a time, (count, bytes), (requested, oversize), (split,
// split bytes): a pair is one SSE2 (or NEON) register, so checking and spending the twelve credits
// of a change (its pool's six and `all`'s) takes six vector subtractions, one sign test and six
// stores, where it had taken twelve compares and twelve updates (issue 15: the credits were a
// quarter of a cached pair's instructions in the core). The split kinds, which move either way,
// are the last pair (K_SIGNED).
typedef int64_t kind_pair __attribute__((vector_size(2 * sizeof(int64_t))));
#define NPAIRS (NKIND / 2)
#define SIGNED_PAIR (K_SIGNED / 2)
_Static_assert(NKIND % 2 == 0 && K_SIGNED % 2 == 0, "the kinds pair up, the split kinds last");

// A row of six figures (a credit row, a shard's increases) as pairs. Through memcpy: the rows are
// also read as int64_t arrays (the unlock's loops), and a copy is a plain vector load or store.
static inline kind_pair row_pair(const int64_t *row, int i)
{
    kind_pair v;
    memcpy(&v, row + 2 * i, sizeof v);
    return v;
}

static inline void set_row_pair(int64_t *row, int i, kind_pair v) { memcpy(row + 2 * i, &v, sizeof v); }

typedef struct {
    size_t size;
    int n;
    int64_t oversize;  // 1 when `size` is at least max_split_size (the allocation's K_OVERSIZE)
    cci_block *b[MAG_DEPTH];
    uint64_t stream;   // apart from `size`: stored side by side, the two became one vector store
                       // built from two registers, dearer than two plain stores (issue 15)
    // What each block's free did to the inactive-split blocks and their bytes (split_on_free), as
    // a pair: its allocation undoes exactly that.
    int64_t split[MAG_DEPTH][2];
} mag_class;
// 128 bytes: a class is found by a shift, not a multiplication (every fast path indexes one).
_Static_assert(sizeof(mag_class) == 128 || sizeof(void *) != 8, "a magazine class is 128 bytes");

typedef cci_fast_event tc_event;

// The classes of a `filled` mask, lowest first: the order a scan of every class would take.
#define FOR_EACH_CLASS(c, mask) \
    for (unsigned left_ = (mask), c; left_ && ((c = (unsigned)__builtin_ctz(left_)), 1); left_ &= left_ - 1)

// What the fast paths changed since the last stop: the net change of each figure and the sum of
// its increases (cci_stat.allocated); the decreases (cci_stat.freed) are their difference.
typedef struct {
    int64_t cur[NKIND];
    int64_t inc[NKIND];
} shard_pool;

struct cci_tc {
    _Atomic int gate;
    _Atomic int in_fast;       // 1 while the owner is in an inline fast path entered solo (solo.h)
    cci_allocator *a;          // NULL once the allocator is destroyed (registry lock)
    struct cci_tc *next;       // the allocator's list (its mutex)
    mag_class mag[MAG_CLASSES];
    unsigned filled;           // bit c: mag[c] holds blocks. Allocations, drains and the fitting
                               // search look at those only (a scan of every class cost more than a
                               // hit's statistics); a free looks at every class (cache_block)
    cci_live_map table;        // the blocks this thread may free on its fast path, by address
    cci_block *recent;         // the block last handed to this thread while it is in `table`, else
                               // &no_block: a free of it (alloc-free pairs) skips the table's probe
    shard_pool shard[CCI_POOL_KINDS];       // what the fast paths changed since the last stop, by
                                            // pool: .inc kept by the fast paths, .cur worked out at
                                            // the stop (given - credit); [CCI_POOL_ALL] unused
    int64_t credit[CCI_POOL_KINDS][NKIND];  // how far the fast paths may still raise each statistic
                                            // before the next stop: what the unlock gave, less the
                                            // net change since (so the check is one compare a kind)
    int64_t given[CCI_POOL_KINDS][NKIND];   // the credits as the last unlock set them
    tc_event *log;             // the events of the fast paths since the last stop (LOG_EVENTS)
    tc_event *log_at, *log_end;  // the log's next free record and its end: a record costs a store
                                 // through one pointer and the room test one compare (log_count)
    tc_event *handed;          // the previous log, swapped out at a stop, told at its unlock
    tc_event *spare;           // a log ready to replace a full one an observer keeps (NULL: none, so
                               // no observer may keep one: cci_batch_fn)
    const tc_event *told_log;  // the handed events the unlock tells: `handed`, or the log an
                               // observer kept at the stop (it never frees it while we run)
    int nhanded, told;
    int nlog_freed, nhanded_freed;  // of the records, frees (each stands for two events)
    uint64_t handed_order;     // the `order` of the handed log's events
    int dirty;                 // a fast path ran since the last stop: shard or magazines not empty
    int alone;                 // the allocator's only cache (set under the lock: see stamp_now)
    uint64_t order;            // the `order` of this thread's fast-path events (set at each unlock)
    uint64_t last_stamp;
    int stamp_left;            // events until the clock is read again (stamp_now)
    // Set aside while its magazines seldom serve (count_window): only the owner reads or writes.
    unsigned aside;            // allocations left that go straight to the locked path
    unsigned window, window_hits;  // allocations asked of the fast path in this window, and served
    int no_credit;             // its credits are all 0 (set aside and alone: hand_out_credits)
};

// The log empty (a new or swapped-in log, or one handed to the batch doors).
static void log_restart(cci_tc *tc)
{
    tc->log_at = tc->log;
    tc->log_end = tc->log + LOG_EVENTS;
    tc->nlog_freed = 0;
}

// Records in the log.
static int log_count(const cci_tc *tc) { return (int)(tc->log_at - tc->log); }

// `recent` when it names no block of the table: its address is 0, which no free of a block asks
// for (a block that compared equal would fail the state test anyway: it is never ALLOCATED).
static cci_block no_block;

// Whether the thread's cache may free `b` on its fast path from now on, and `b` its recent block.
static void table_add(cci_tc *tc, cci_block *b)
{
    if (cci_live_add(&tc->table, b) == 0) {
        b->owner = tc;
        tc->recent = b;
    }
}

// `b` leaves the cache's table (its free goes to the locked path, or it was drained).
static void table_remove(cci_tc *tc, cci_block *b)
{
    cci_live_remove(&tc->table, b);
    b->owner = NULL;
    if (tc->recent == b)
        tc->recent = &no_block;
}

struct tls_slot {
    cci_allocator *a;
    uint64_t uid;
    cci_tc *tc;
};
// Initial-exec: the preload is loaded at start-up, so this lives in the static TLS block and a
// fast path reaches it without a __tls_get_addr call.
static __thread struct tls_slot slots[TLS_SLOTS] __attribute__((tls_model("initial-exec")));

static pthread_mutex_t registry = PTHREAD_MUTEX_INITIALIZER;  // cache <-> allocator links at exit
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key;

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

// ---- thread slots and the registry -------------------------------------------------------------

static inline int slot_names(const struct tls_slot *s, const cci_allocator *a)
{
    return s->a == a && s->uid == a->uid;
}

// The calling thread's cache of `a`, or NULL. Slot 0 is asked on its own first: a thread that
// reaches one allocator (one device) finds it there without a loop, on every fast path.
static inline cci_tc *my_cache(const cci_allocator *a)
{
    if (__builtin_expect(slot_names(&slots[0], a), 1))
        return slots[0].tc;
    for (int i = 1; i < TLS_SLOTS; i++)
        if (slot_names(&slots[i], a))
            return slots[i].tc;
    return NULL;
}

// The allocator's tc_fast (allocator_impl.h). It is 0 with tc_on set only while the list holds
// one cache, set aside: the owner sets it so at its unlock (cci__unlock), and itself sets it back
// when its time aside ends (cci__tc_skipped); any change of the list sets it back. So a thread that
// reads 0 (without the lock, perhaps a stale value) is that owner, set aside, or a thread without
// a cache: cci__tc_alloc and cci__tc_free would have answered CCI_ENOTOURS to either, and the
// owner's allocations count down its time aside in cci__tc_skipped instead.
static void set_fast(cci_allocator *a, int on) { __atomic_store_n(&a->tc_fast, on, __ATOMIC_RELAXED); }

// Lock held, whenever the list changes.
static void note_alone(cci_allocator *a)
{
    set_fast(a, a->tc_on);
    a->ntcs = 0;
    for (cci_tc *tc = a->tcs; tc; tc = tc->next) {
        tc->alone = a->tcs == tc && !tc->next;
        a->ntcs++;
    }
}

static void unlink_cache(cci_allocator *a, cci_tc *tc)
{
    for (cci_tc **p = &a->tcs; *p; p = &(*p)->next)
        if (*p == tc) {
            *p = tc->next;
            return;
        }
}

static void cache_free(cci_tc *tc)
{
    cci_live_clear(&tc->table);
    free(tc->log);
    free(tc->handed);
    free(tc->spare);
    free(tc);
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
            cci__lock(a);  // this stop returns the cache's blocks and swaps its log out ...
            cci__tc_drain_all(a);
            cci__unlock(a);  // ... which this unlock tells the observers, in order with the others'
            cci__lock(a);
            // Blocks this thread allocated and did not free live on: the locked path frees them.
            for (size_t j = 0; j < tc->table.cap; j++)
                if (tc->table.slot[j])
                    tc->table.slot[j]->owner = NULL;
            unlink_cache(a, tc);
            note_alone(a);
            tc->a = NULL;
            cci__unlock(a);
        }
        pthread_mutex_unlock(&registry);
        cache_free(tc);
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
    cci_tc *tc = a->tc_mine;
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
    if (tc) {
        tc->log = calloc(LOG_EVENTS, sizeof *tc->log);
        tc->handed = calloc(LOG_EVENTS, sizeof *tc->handed);
        tc->spare = malloc(LOG_EVENTS * sizeof *tc->spare);  // none: logs are only copied
    }
    if (!tc || !tc->log || !tc->handed || pthread_setspecific(exit_key, tc) != 0) {  // non-NULL: destructor runs
        if (tc)
            cache_free(tc);
        return NULL;
    }
    log_restart(tc);
    tc->recent = &no_block;
    // The lock holder owns every cache it can see; a new one joins the list already stopped.
    atomic_store_explicit(&tc->gate, GATE_STOPPED, memory_order_relaxed);
    tc->a = a;
    tc->next = a->tcs;
    a->tcs = tc;
    note_alone(a);
    slots[free_slot] = (struct tls_slot){a, a->uid, tc};
    a->tc_mine = tc;
    return tc;
}

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
static void tell_batch(cci_allocator *a, cci_tc *tc, uint64_t order, tc_event **log, int n, int freed)
{
    cci_fast_batch b = {order, *log, (size_t)n, (size_t)n + (size_t)freed, tc->spare && n == LOG_EVENTS};
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
    if (!tc->dirty)
        return;
    tc->dirty = 0;
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
        // The batch doors hear of the fast paths' events now, before any event of this section
        // (which they are told at once: cci__notify_full), so that inside a locked section a batch
        // observer has seen every event before it (cci_batch_fn).
        if (tc->nhanded) {
            tc->told_log = tc->handed;
            tell_batch(a, tc, tc->handed_order, &tc->handed, tc->nhanded, tc->nhanded_freed);
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
    uintptr_t self = (uintptr_t)&slots[0];
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
        // the mixed workload's case, or every call missed): nothing to fold, swap or tell.
        atomic_store_explicit(&mine->gate, GATE_STOPPED, memory_order_relaxed);
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

// ---- the fast paths ---------------------------------------------------------------------------
//
// Each fast path comes in two versions. The general one (alloc_general, free_general) does
// everything: it waits out a stop at the gate, hands a full log to the batch doors or flushes it
// (a stop that moves no block) to try once more. The usual call finds the gate open and room in
// the log: cci__tc_alloc and cci__tc_free serve it inline and hand anything else to the general
// version from its start, so they hold no call but those tail calls (issue 15: the retry inlined
// in them had made each save six registers, ~45 instructions a pair in prologues). Both run the
// same steps (alloc_in_gate, free_in_gate), so both decide the same.

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
// (every served allocation and free logs, issue 15: the observers' events are the hook path's
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
    tell_batch(a, tc, tc->order, &tc->log, log_count(tc), tc->nlog_freed);
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
// operation with the caches and 233 without (session 7). So a cache that served fewer than
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

// The cache made if the thread has none, and b into its table. Out of line: see cci__tc_own.
static __attribute__((noinline)) void own_block(cci_allocator *a, cci_block *b)
{
    cci_tc *tc = attach_cache(a);
    if (tc)
        table_add(tc, b);
}

void cci__tc_own(cci_allocator *a, cci_block *b)
{
    // Set aside: its free takes the lock anyway. Tested before the call that makes a cache and
    // fills its table, whose frame had cost every locked allocation of the mixed workload ~20
    // instructions (a new cache is never set aside).
    cci_tc *tc = a->tc_mine;
    if (tc && tc->aside)
        return;
    own_block(a, b);
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
        tc->recent = &no_block;
        memset(tc->mag, 0, sizeof tc->mag);
        tc->filled = 0;
        memset(tc->shard, 0, sizeof tc->shard);
        memset(tc->credit, 0, sizeof tc->credit);
        memset(tc->given, 0, sizeof tc->given);
        log_restart(tc);
        tc->nhanded = tc->told = tc->nhanded_freed = 0;
    }
}

void cci__tc_detach_all(cci_allocator *a)
{
    free(a->evq);
    a->evq = NULL;
    a->nevq = a->evq_cap = 0;
    pthread_mutex_lock(&registry);
    for (cci_tc *tc = a->tcs; tc; tc = tc->next)
        tc->a = NULL;
    a->tcs = NULL;
    a->ntcs = 0;
    pthread_mutex_unlock(&registry);
}

void cci__tc_fork_child(cci_allocator *a)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&registry, &fresh, sizeof fresh);
    // The forking thread is the only one here: every cache of `a` is unused from now on (the other
    // threads' never run again), and the allocator is about to be destroyed: free them, and the
    // slots that named them, or each fork generation would keep its parent's.
    for (cci_tc *tc = a->tcs, *next; tc; tc = next) {
        next = tc->next;
        for (int i = 0; i < TLS_SLOTS; i++)
            if (slots[i].tc == tc)
                slots[i] = (struct tls_slot){0};
        cache_free(tc);
    }
    a->tcs = NULL;
    a->ntcs = 0;
}
