// SPDX-License-Identifier: MIT
// The thread caches' insides, shared by the three files that touch them: tcache.c (the fast paths
// and the magazines), lock_protocol.c (the lock, which stops every cache, folds its figures and
// hands out credits) and tcache_threads.c (a cache's creation at its thread's first locked
// allocation, its end at thread exit). The rules are in tcache.h.
//
// What a fast path or cci__lock calls on every operation is `static inline` here (my_cache, the
// log's bounds): the library is built without link-time optimisation, so only a body the compiler
// sees in the caller's file can be inlined.
#ifndef CCI_TCACHE_IMPL_H
#define CCI_TCACHE_IMPL_H

#include "tcache.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

enum { GATE_OPEN = 0, GATE_OWNER = 1, GATE_STOPPED = 2 };

#define MAG_CLASSES 8   // (stream, size) classes a thread keeps at once
#define MAG_DEPTH 4     // blocks per class: a burst of frees of one size, taken back in turn
#define ALL_CLASSES ((1u << MAG_CLASSES) - 1)
#define LOG_EVENTS 2048  // records kept for the observers between two stops (2 x 80 KiB a thread)
#define TLS_SLOTS 8     // allocators (devices) one thread reaches through a fast path
// A log this full may be kept whole by an observer (cci_fast_batch.may_keep): a full one, or one
// that a kept fenced batch's completions did not fit into (tcache_fenced.c), whose unused tail is
// at most HELD_BATCH + 1 records. Copying it instead had cost a fresh block each time.
#define LOG_KEEP_MIN (LOG_EVENTS - HELD_BATCH - 1)

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
// stores, where it had taken twelve compares and twelve updates (callgrind, commit 90f1550: the
// credits were a quarter of a cached pair's instructions in the core). The split kinds, which move
// either way, are the last pair (K_SIGNED).
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
                       // built from two registers, dearer than two plain stores (commit 7265d94)
    // What each block's free did to the inactive-split blocks and their bytes (split_on_free), as
    // a pair: its allocation undoes exactly that.
    int64_t split[MAG_DEPTH][2];
} mag_class;
// 128 bytes: a class is found by a shift, not a multiplication (every fast path indexes one).
_Static_assert(sizeof(mag_class) == 128 || sizeof(void *) != 8, "a magazine class is 128 bytes");

typedef cci_fast_event tc_event;

// Why a fast path sent an operation to the lock (cci_stats.tc_declined_*).
enum { TC_DECLINED_CREDIT, TC_DECLINED_KEPT_WAIT, TC_DECLINED_BUSY, TC_DECLINED_KEEP_FULL, TC_DECLINED_KINDS };

// Fenced frees a thread keeps (tcache_fenced.c): small blocks freed with CCI_FREE_FENCED wait in
// the thread's own batches for their fence instead of in the allocator's, so that a thread's
// malloc+free loop with non-blocking streams alive takes no lock. Bounds per thread, each settable
// at build time (-DHELD_BATCH=N) to measure another shape (two are in docs/benchmarks.md, "JAX's
// host wait priced, driver costs per handle, batch and page shapes"):
#ifndef HELD_BATCH
#define HELD_BATCH 64                    // blocks behind one fence
#endif
#ifndef HELD_CLOSED
#define HELD_CLOSED 3                    // batches behind their fence at once
#endif
#ifndef HELD_MAX_BYTES
#define HELD_MAX_BYTES ((size_t)16 << 20)  // bytes held at once: open, closed and passed
#endif
// Stops in a row a thread's fast paths must have been idle for to count as idle in the
// virtual-memory modes' rules for kept frees (cci__tc_held_may_grow, cci__tc_held_give_back).
#ifndef HELD_QUIET_STOPS
#define HELD_QUIET_STOPS 2
#endif
#define HELD_SCAN 8                      // passed blocks an allocation looks at for its size
// A batch's frees: HELD_BATCH times the thread caches over HELD_CROWD, at least once and at most
// HELD_CROWD_SCALE times (held_batch_frees). A fence record is a driver call that threads take in
// turn: on an H200 (2026-11-29) one took 0.5-0.6 us at one thread and 3.0-3.6 us at eight, a fifth
// of eight threads' time. Batches that grow with the threads keep a process's records per second
// from growing with them. Fewer than 2 x HELD_CROWD threads keep HELD_BATCH: PyTorch's main and
// backward threads, where fences are barriers and a longer batch is memory the pool grows by
// (docs/benchmarks.md, 'batch shapes'). Counted in caches, not in threads at work: the stops' idle
// count moved with the stops' rate, and a batch length that moved with it sent eight threads'
// frees to the lock (an H200, 2026-11-29).
#ifndef HELD_CROWD
#define HELD_CROWD 4
#endif
#define HELD_CROWD_SCALE 4
// A batch's bytes: it closes once it holds this much, whatever its count, so that an open batch
// of large small blocks (512 KiB, 1 MiB) is never left open at the thread's bound with no fence
// to take it past (every later free went to the lock until a growth, empty_cache or the thread's
// exit gave the batch back).
#define HELD_BATCH_BYTES (HELD_MAX_BYTES / 2)

typedef struct {
    cci_fence fence;
    cci_block *head;                     // linked by pend_next
    unsigned n;                          // its blocks
} held_batch;

typedef struct {
    cci_block *open, *open_tail;         // freed, no fence yet (linked by pend_next)
    unsigned nopen;
    size_t open_bytes;                   // the open batch's bytes
    held_batch closed[HELD_CLOSED];      // behind their fences, oldest first (recorded in order
    unsigned nclosed;                    // by this thread, for all streams: they pass in order)
    cci_block *passed;                   // reusable on their own stream (linked by pend_next)
    unsigned nheld;                      // blocks in all three
    size_t bytes;                        // their bytes
    uint64_t records;                    // fences recorded since the last stop (fold_cache)
    int no_fence;                        // a record failed: no more fenced frees kept until a
                                         // locked allocation hands the open ones over
    unsigned quiet;                      // stops in a row that found its fast paths idle since the
                                         // one before (fold_cache): its kept frees lie unused
} tc_held;

// The classes of a `filled` mask, lowest first: the order a scan of every class would take.
#define FOR_EACH_CLASS(c, mask) \
    for (unsigned left_ = (mask), c; left_ && ((c = (unsigned)__builtin_ctz(left_)), 1); left_ &= left_ - 1)

// What the fast paths changed since the last stop: the net change of each figure and the sum of
// its increases (cci_stat.allocated); the decreases (cci_stat.freed) are their difference.
typedef struct {
    int64_t cur[NKIND];
    int64_t inc[NKIND];
} shard_pool;

// Aligned to, and a multiple of, CCI_TC_ALIGN: two threads' caches never share a cache line (or
// the adjacent-line prefetch pair). With them packed one after the other, one thread's writes to
// the end of its cache (its window, its kept batches) took the next cache's gate line away from
// its owner: at two threads on the fake CUDA, the gate's compare-and-swap was 80-90 % of each
// fast path's time.
#define CCI_TC_ALIGN 128
struct cci_tc {
    _Alignas(CCI_TC_ALIGN) _Atomic int gate;
    _Atomic int in_fast;       // 1 while the owner is in an inline fast path entered solo (solo.h)
    cci_allocator *a;          // NULL once the allocator is destroyed (registry lock)
    struct cci_tc *next;       // the allocator's list (its mutex)
    mag_class mag[MAG_CLASSES];
    unsigned filled;           // bit c: mag[c] holds blocks. Allocations, drains and the fitting
                               // search look at those only (a scan of every class cost more than a
                               // hit's statistics); a free looks at every class (cache_block)
    cci_live_map table;        // the blocks this thread may free on its fast path, by address
    cci_block *recent;         // the block last handed to this thread while it is in `table`, else
                               // cci__tc_no_block: a free of it (alloc-free pairs) skips the probe
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
    tc_held held;              // fenced frees kept by the thread (tcache_fenced.c)
    // Why the fast paths sent operations to the lock (tc_declined), by TC_DECLINED_* kind. Written
    // by the owner alone, at any time (relaxed stores); a stop reads them and adds what is new.
    _Atomic uint64_t declined[TC_DECLINED_KINDS];
    uint64_t declined_folded[TC_DECLINED_KINDS];  // what the stops have added (the stopper's)
};

// The frees a kept batch closes at: HELD_BATCH times one for each HELD_CROWD thread caches (read
// without the lock: a stale count only moves one batch's length).
static inline unsigned held_batch_frees(const cci_allocator *a)
{
    int crowd = __atomic_load_n(&a->ntcs, __ATOMIC_RELAXED) / HELD_CROWD;
    return HELD_BATCH * (unsigned)(crowd <= 1 ? 1 : crowd < HELD_CROWD_SCALE ? crowd : HELD_CROWD_SCALE);
}

// The log empty (a new or swapped-in log, or one handed to the batch doors).
static inline void log_restart(cci_tc *tc)
{
    tc->log_at = tc->log;
    tc->log_end = tc->log + LOG_EVENTS;
    tc->nlog_freed = 0;
}

// Records in the log.
static inline int log_count(const cci_tc *tc) { return (int)(tc->log_at - tc->log); }

// `recent` when it names no block of the table: its address is 0, which no free of a block asks
// for (a block that compared equal would fail the state test anyway: it is never ALLOCATED).
extern cci_block cci__tc_no_block __attribute__((visibility("hidden")));  // (tcache.c)

struct tls_slot {
    cci_allocator *a;
    uint64_t uid;
    cci_tc *tc;
};
// Initial-exec: the preload is loaded at start-up, so this lives in the static TLS block and a
// fast path reaches it without a __tls_get_addr call.
extern __thread struct tls_slot cci__tc_slots[TLS_SLOTS]
    __attribute__((tls_model("initial-exec"), visibility("hidden")));

static inline int slot_names(const struct tls_slot *s, const cci_allocator *a)
{
    return s->a == a && s->uid == a->uid;
}

// The calling thread's cache of `a`, or NULL. Slot 0 is asked on its own first: a thread that
// reaches one allocator (one device) finds it there without a loop, on every fast path.
static inline cci_tc *my_cache(const cci_allocator *a)
{
    if (__builtin_expect(slot_names(&cci__tc_slots[0], a), 1))
        return cci__tc_slots[0].tc;
    for (int i = 1; i < TLS_SLOTS; i++)
        if (slot_names(&cci__tc_slots[i], a))
            return cci__tc_slots[i].tc;
    return NULL;
}

// The allocator's tc_fast (allocator_impl.h). It is 0 with tc_on set only while the list holds
// one cache, set aside: the owner sets it so at its unlock (cci__unlock), and itself sets it back
// when its time aside ends (cci__tc_skipped); any change of the list sets it back. So a thread that
// reads 0 (without the lock, perhaps a stale value) is that owner, set aside, or a thread without
// a cache: cci__tc_alloc and cci__tc_free would have answered CCI_ENOTOURS to either, and the
// owner's allocations count down its time aside in cci__tc_skipped instead.
static inline void set_fast(cci_allocator *a, int on) { __atomic_store_n(&a->tc_fast, on, __ATOMIC_RELAXED); }

// Fenced frees kept by the thread (tcache_fenced.c).
/// Inside the gate, after a magazine miss: a passed block of `rounded` on `stream`. CCI_OK,
/// MAG_MISS, HELD_WAIT, CCI_ENOTOURS (the credits) or LOG_FULL (tcache_fast.h).
int cci__tc_alloc_held(cci_allocator *a, cci_tc *tc, size_t rounded, size_t requested, uint64_t stream,
                       uintptr_t *out);
/// Lock held: every kept block back to the allocator: the passed ones and those whose fence has
/// passed to the free set, the others into the allocator's open batch.
void cci__tc_held_drain(cci_allocator *a, cci_tc *tc);
/// The allocator forgets every block: the kept batches go, their fences released.
void cci__tc_held_forget(cci_allocator *a, cci_tc *tc);

/// The observers with a batch door get `n` events of one thread at once (lock_protocol.c): at a
/// stop, or from the owner's fast path when its log is full.
void cci__tc_tell_batch(cci_allocator *a, cci_tc *tc, uint64_t order, tc_event **log, int n, int freed);

#endif
