// SPDX-License-Identifier: MIT
// The per-thread caches (src/core/tcache.h):
//   1. exact statistics: one random program run twice, caches on and off; the statistics that do
//      not depend on which block served a request or when a deferred free completed (block
//      counts, requested bytes: current, peak and totals) are the same at every checkpoint, and with the caches the observers' event
//      stream recomputes the statistics' live bytes and peaks exactly (block sizes may differ
//      between the runs: a block taken whole may exceed the rounded size);
//   2. the fast path really serves: a same-size free/alloc loop takes the lock only once; a cache
//      whose magazines seldom serve (sizes that rarely repeat) is set aside, and comes back after
//      the same number of its allocations whether or not another thread's cache comes and goes;
//   3. threads: eight threads allocating and freeing on their own streams while another reads the
//      statistics and empties the cache; no two live blocks ever overlap, and the totals agree;
//   4. a thread that exits with blocks in its magazines gives them back, and its live blocks can
//      be freed by another thread;
//   5. a batch observer (cci_batch_fn) alone: the threads' full logs reach it as batches without a
//      stop, and its events, put in the allocator's order (order, then stamp), are a valid history
//      whose live bytes peak exactly at the statistics' peak.
#include <pthread.h>
#include <string.h>

#include "allocator.h"
#include "backend.h"
#include "config.h"
#include "cached_allocator.h"
#include "testutil.h"




// ---- 1. exact statistics -----------------------------------------------------------------------

// What the event stream says, recomputed: live bytes and blocks, and their peaks.
typedef struct {
    int64_t bytes, blocks, requested;
    int64_t peak_bytes, peak_blocks, peak_requested;
    long events;
} recount;

static void recount_event(void *ud, const cci_event *ev)
{
    recount *r = ud;
    r->events++;
    if (ev->kind == CCI_EV_ALLOC) {
        r->bytes += (int64_t)ev->size;
        r->blocks++;
        r->requested += (int64_t)ev->requested;
        if (r->bytes > r->peak_bytes)
            r->peak_bytes = r->bytes;
        if (r->blocks > r->peak_blocks)
            r->peak_blocks = r->blocks;
        if (r->requested > r->peak_requested)
            r->peak_requested = r->requested;
    } else if (ev->kind == CCI_EV_FREE_REQUESTED) {
        r->bytes -= (int64_t)ev->size;
        r->blocks--;
    }
}

static int same_stat(const cci_stat *x, const cci_stat *y)
{
    return x->current == y->current && x->peak == y->peak && x->allocated == y->allocated && x->freed == y->freed;
}

#define NLIVE 64

static void exact_statistics(uint64_t seed)
{
    cci_config cfg;
    cci_config_default(&cfg);
    cci_sim_device *sim[2] = {cci_sim_create((size_t)64 << 30), cci_sim_create((size_t)64 << 30)};
    cci_allocator *a[2];
    recount rc[2] = {{0}};
    for (int i = 0; i < 2; i++) {
        a[i] = cci_allocator_create(0, &cfg, cci_sim_backend(sim[i]));
        cci_allocator_thread_cache(a[i], i);  // a[1] has the caches
        cci_allocator_add_observer(a[i], recount_event, &rc[i]);
    }
    uintptr_t live[2][NLIVE];
    size_t req[NLIVE];
    int n = 0, mismatches = 0;
    rng_state = seed;
    // A few sizes, so that frees and allocations of one size follow each other as in a program's
    // steady state (the case the caches serve), with random sizes in between.
    static const size_t sizes[] = {512, 4096, 65536, 1 << 20, 3 << 20, 20 << 20};
    for (long op = 0; op < 40000; op++) {
        if (n < NLIVE && (n == 0 || rnd() % 100 < 50)) {
            size_t sz = rnd() % 4 ? sizes[rnd() % 6] - (size_t)(rnd() % 256) : 1 + (size_t)(rnd() % (8 << 20));
            for (int i = 0; i < 2; i++)
                CHECK(cci_malloc(a[i], sz, 0, &live[i][n]) == CCI_OK, "malloc %zu", sz);
            req[n++] = sz;
        } else {
            int k = (int)(rnd() % (uint64_t)n);
            cci_free_mode mode = rnd() % 8 ? CCI_FREE_NOW : CCI_FREE_DEFERRED;
            for (int i = 0; i < 2; i++) {
                CHECK(cci_free(a[i], live[i][k], 0, mode) == CCI_OK, "free");
                live[i][k] = live[i][n - 1];
            }
            req[k] = req[n - 1];
            n--;
        }
        if (op % 97 == 0) {
            cci_stats st[2];
            for (int i = 0; i < 2; i++) {
                st[i].size = sizeof st[i];
                cci_alloc_stats(a[i], &st[i]);
            }
            for (int p = 0; p < CCI_POOL_KINDS; p++) {
                mismatches += !same_stat(&st[0].allocation[p], &st[1].allocation[p]);
                mismatches += !same_stat(&st[0].requested_bytes[p], &st[1].requested_bytes[p]);
            }
            // The stream the observers saw gives the same figures and peaks as the statistics.
            CHECK_EQ_U(rc[1].bytes, st[1].allocated_bytes[CCI_POOL_ALL].current, "event stream: live bytes");
            CHECK_EQ_U(rc[1].peak_bytes, st[1].allocated_bytes[CCI_POOL_ALL].peak, "event stream: peak bytes");
            CHECK_EQ_U(rc[1].peak_blocks, st[1].allocation[CCI_POOL_ALL].peak, "event stream: peak blocks");
            char msg[256];
            CHECK(cci_allocator_check(a[1], msg, sizeof msg) == 0, "invariants: %s", msg);
        }
    }
    CHECK(mismatches == 0, "seed %llu: %d statistics differ between caches on and off",
          (unsigned long long)seed, mismatches);
    for (int i = 0; i < 2; i++) {  // a stop: the cached events reach the observers
        cci_stats st = {.size = sizeof st};
        cci_alloc_stats(a[i], &st);
    }
    CHECK_EQ_U(rc[0].blocks, rc[1].blocks, "as many live blocks in both event streams");
    CHECK_EQ_U(rc[0].peak_blocks, rc[1].peak_blocks, "the same peak of live blocks in both event streams");
    CHECK_EQ_U(rc[0].peak_requested, rc[1].peak_requested, "the same requested-bytes peak in both event streams");
    for (int i = 0; i < 2; i++) {
        cci_allocator_destroy(a[i], 1);
        cci_sim_destroy(sim[i]);
    }
}

// ---- 2. the fast path serves -----------------------------------------------------------------------

static void counting_observer(void *ud, const cci_event *ev)
{
    (void)ev;
    ++*(long *)ud;
}

static void fast_path_serves(void)
{
    cci_sim_device *sim;
    cci_allocator *a = t_cached_allocator((size_t)8 << 30, &sim);
    long events = 0;
    cci_allocator_add_observer(a, counting_observer, &events);
    uintptr_t first = 0, p = 0;
    int same = 1;
    for (int i = 0; i < 1000; i++) {
        CHECK(cci_malloc(a, 70000, 5, &p) == CCI_OK, "malloc");
        if (i == 0)
            first = p;
        same &= p == first;
        CHECK(cci_free(a, p, 5, CCI_FREE_NOW) == CCI_OK, "free");
        if (i == 49)  // the lock was taken once: observers heard of the segment and the first block
            CHECK_EQ_U(events, 2, "after 50 pairs, only the first allocation took the lock");
    }
    CHECK(same, "the same block comes back every time");
    // Observers hear of cached events at the next stop (this statistics read), in order.
    cci_stats st = {.size = sizeof st};
    cci_alloc_stats(a, &st);
    CHECK_EQ_U(events, 1 + 3 * 1000, "every event reached the observers (one segment, 3 per pair)");
    CHECK_EQ_U(st.allocation[CCI_POOL_ALL].allocated, 1000, "1000 allocations counted");
    CHECK_EQ_U(st.allocation[CCI_POOL_ALL].current, 0, "none live");
    CHECK_EQ_U(st.allocated_bytes[CCI_POOL_ALL].peak, 70144, "peak: one block");
    CHECK_EQ_U(st.num_device_alloc, 1, "one segment");
    // A free on another stream is never cached: it waits (deferred) as before.
    CHECK(cci_malloc(a, 70000, 5, &p) == CCI_OK, "malloc");
    CHECK(cci_free(a, p, 6, CCI_FREE_NOW) == CCI_OK, "free on another stream");
    uintptr_t q = 0;
    CHECK(cci_malloc(a, 70000, 5, &q) == CCI_OK && q != p, "a block freed on another stream is not reused at once");
    CHECK(cci_free(a, q, 5, CCI_FREE_NOW) == CCI_OK, "free");
    // A double free of a cached block is refused.
    CHECK(cci_free(a, q, 5, CCI_FREE_NOW) == CCI_EINVAL, "double free of a cached block refused");
    cci_allocator_destroy(a, 1);
    cci_sim_destroy(sim);
}

// ---- 2b. a cache whose magazines seldom serve is set aside, and comes back --------------------

typedef struct {
    long fast_frees, frees, locked_allocs;
} path_counts;

// Which path each free and allocation took: the fast paths' events carry an odd order.
static void path_observer(void *ud, const cci_event *ev)
{
    path_counts *c = ud;
    if (ev->kind == CCI_EV_FREE_REQUESTED) {
        c->frees++;
        c->fast_frees += (long)(ev->order & 1);
    } else if (ev->kind == CCI_EV_ALLOC) {
        c->locked_allocs += !(ev->order & 1);
    }
}

static void set_aside(void)
{
    cci_sim_device *sim;
    cci_allocator *a = t_cached_allocator((size_t)64 << 30, &sim);
    path_counts c = {0};
    CHECK(cci_allocator_add_observer(a, path_observer, &c) == 0, "observer attached");
    // Sizes that seldom repeat (the mixed workload's kind): 64 slots, 3001 sizes in turn.
    uintptr_t slot[64] = {0};
    uint64_t x = 12345;
    long allocs = 0;
    for (int op = 0; op < 40000; op++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        unsigned k = (unsigned)(x >> 58);
        if (slot[k]) {
            CHECK(cci_free(a, slot[k], 0, CCI_FREE_NOW) == CCI_OK, "free");
            slot[k] = 0;
        } else {
            CHECK(cci_malloc(a, 512 * (1 + (size_t)(allocs++ * 7 % 3001)), 0, &slot[k]) == CCI_OK, "malloc");
        }
    }
    cci_allocator_flush_events(a);
    // Each window of 256 allocations on the fast path is followed by 4096 set aside: about 6 % of
    // the frees can reach a magazine. With the cache always on, most of them did.
    CHECK(c.frees > 15000 && c.fast_frees * 8 < c.frees, "set aside: %ld of %ld frees took the fast path",
          c.fast_frees, c.frees);
    for (int k = 0; k < 64; k++)
        if (slot[k])
            CHECK(cci_free(a, slot[k], 0, CCI_FREE_NOW) == CCI_OK, "free");
    // One size again: within the time set aside and one window, the magazines serve every pair.
    uintptr_t p;
    for (int i = 0; i < 6000; i++) {
        if (i == 5000) {
            cci_allocator_flush_events(a);
            c.locked_allocs = 0;
        }
        CHECK(cci_malloc(a, 70000, 0, &p) == CCI_OK && cci_free(a, p, 0, CCI_FREE_NOW) == CCI_OK, "pair");
    }
    cci_allocator_flush_events(a);
    CHECK_EQ_U(c.locked_allocs, 0, "back on the fast path: none of the last 1000 pairs took the lock");
    cci_stats st = {.size = sizeof st};
    cci_alloc_stats(a, &st);
    CHECK_EQ_U(st.allocation[CCI_POOL_ALL].current, 0, "none live");
    CHECK_EQ_U(st.allocation[CCI_POOL_ALL].allocated, (uint64_t)allocs + 6000, "every allocation counted");
    cci_allocator_destroy(a, 1);
    cci_sim_destroy(sim);
}

// ---- 2c. the time set aside is counted in the owner's allocations, whoever joins meanwhile -----
//
// While a thread's cache is the only one and set aside, cci_malloc and cci_free do not ask it
// (tc_fast); its allocations count its time aside down on the locked path instead. The count must
// come out the same as when every allocation asks the cache: alone, and with another thread's
// cache joining and leaving in the middle (both of which switch tc_fast back on for a while).

typedef struct {
    long fast, locked;    // frees on stream 0 (the thread set aside), by path
    long other_fast;      // the other thread's allocations (stream 7) on the fast path
} free_paths;

static void free_path_observer(void *ud, const cci_event *ev)
{
    free_paths *f = ud;
    if (ev->kind == CCI_EV_FREE_REQUESTED && ev->stream == 0)
        *(ev->order & 1 ? &f->fast : &f->locked) += 1;
    if (ev->kind == CCI_EV_ALLOC && ev->stream == 7)
        f->other_fast += (long)(ev->order & 1);
}

// Two pairs of one size: the second allocation is its cache's (the fast paths are asked again).
static void *join_and_leave(void *arg)
{
    for (int i = 0; i < 2; i++) {
        uintptr_t p;
        CHECK(cci_malloc(arg, 4096, 7, &p) == CCI_OK && cci_free(arg, p, 7, CCI_FREE_NOW) == CCI_OK, "pair");
    }
    return NULL;
}

// Pairs of one size after a window of misses: locked until the time aside ends, then fast.
static long locked_frees_after_window(int other_joins)
{
    cci_sim_device *sim;
    cci_allocator *a = t_cached_allocator((size_t)64 << 30, &sim);
    free_paths f = {0};
    CHECK(cci_allocator_add_observer(a, free_path_observer, &f) == 0, "observer attached");
    uintptr_t p[257];
    for (int i = 0; i < 257; i++)  // the first makes the cache, the next 256 miss: set aside
        CHECK(cci_malloc(a, 512 * (size_t)(i + 1), 0, &p[i]) == CCI_OK, "malloc");
    for (int i = 0; i < 257; i++)
        CHECK(cci_free(a, p[i], 0, CCI_FREE_NOW) == CCI_OK, "free");
    cci_allocator_flush_events(a);
    f = (free_paths){0};
    for (int i = 0; i < 6000; i++) {
        if (other_joins && i == 1000) {
            pthread_t t;
            pthread_create(&t, NULL, join_and_leave, a);
            pthread_join(t, NULL);
        }
        uintptr_t q;
        CHECK(cci_malloc(a, 70000, 0, &q) == CCI_OK && cci_free(a, q, 0, CCI_FREE_NOW) == CCI_OK, "pair");
    }
    cci_allocator_flush_events(a);
    CHECK_EQ_U(f.fast + f.locked, 6000, "every free heard");
    CHECK_EQ_U(f.other_fast, (uint64_t)other_joins, "the other thread's second allocation on its fast path");
    cci_allocator_destroy(a, 1);
    cci_sim_destroy(sim);
    return f.locked;
}

static void aside_counted(void)
{
    // 4096 allocations aside (ASIDE_OPS): the last of them is owned by the cache again, so its
    // free is the first fast one.
    CHECK_EQ_U(locked_frees_after_window(0), 4095, "alone: the time aside");
    CHECK_EQ_U(locked_frees_after_window(1), 4095, "another cache came and went: the same time aside");
}

// ---- 3. threads ----------------------------------------------------------------------------

#define THREADS 8
#define RANGES 4096

static pthread_mutex_t ranges_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    uintptr_t addr;
    size_t size;
} ranges[RANGES];
static int nranges, overlaps;

static void range_add(uintptr_t p, size_t n)
{
    pthread_mutex_lock(&ranges_lock);
    for (int i = 0; i < nranges; i++)
        if (p < ranges[i].addr + ranges[i].size && ranges[i].addr < p + n)
            overlaps++;
    if (nranges < RANGES)
        ranges[nranges++].addr = p, ranges[nranges - 1].size = n;
    pthread_mutex_unlock(&ranges_lock);
}

static void range_remove(uintptr_t p)
{
    pthread_mutex_lock(&ranges_lock);
    for (int i = 0; i < nranges; i++)
        if (ranges[i].addr == p) {
            ranges[i] = ranges[--nranges];
            break;
        }
    pthread_mutex_unlock(&ranges_lock);
}

typedef struct {
    cci_allocator *a;
    int id;
    long ops, failures;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    uint64_t r = 0x9E3779B97F4A7C15ull * (uint64_t)(w->id + 1);
    uintptr_t mine[16];
    int n = 0;
    for (long i = 0; i < w->ops; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        uint64_t stream = 100 + (uint64_t)w->id;
        if (n < 16 && (n == 0 || r % 2)) {
            size_t sz = (size_t)512 << (r >> 8) % 12;
            if (cci_malloc(w->a, sz, stream, &mine[n]) != CCI_OK) {
                w->failures++;
                continue;
            }
            range_add(mine[n++], sz);
        } else {
            int k = (int)((r >> 16) % (uint64_t)n);
            range_remove(mine[k]);
            if (cci_free(w->a, mine[k], stream, CCI_FREE_NOW) != CCI_OK)
                w->failures++;
            mine[k] = mine[--n];
        }
    }
    while (n)
        range_remove(mine[--n]), w->failures += cci_free(w->a, mine[n], 100 + (uint64_t)w->id, CCI_FREE_NOW) != CCI_OK;
    return NULL;
}

// THREADS workers on `a`, while this thread does `meanwhile`; their failed calls in all.
static long run_workers(cci_allocator *a, void (*meanwhile)(cci_allocator *a))
{
    pthread_t t[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){a, i, 20000 * t_scale(), 0};
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    meanwhile(a);
    long failures = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        failures += w[i].failures;
    }
    return failures;
}

// Statistics readers and cache flushes meanwhile.
static void readers_and_flushes(cci_allocator *a)
{
    cci_stats st = {.size = sizeof st};
    for (int i = 0; i < 50; i++) {
        cci_alloc_stats(a, &st);
        if (i % 10 == 0)
            cci_alloc_empty_cache(a);
    }
}

// Stops meanwhile: batches handed over by a lock holder too.
static void readers(cci_allocator *a)
{
    cci_stats st = {.size = sizeof st};
    for (int i = 0; i < 20; i++)
        cci_alloc_stats(a, &st);
}

static void threads(void)
{
    cci_sim_device *sim;
    cci_allocator *a = t_cached_allocator((size_t)64 << 30, &sim);
    recount rc = {0};
    cci_allocator_add_observer(a, recount_event, &rc);
    long failures = run_workers(a, readers_and_flushes);
    cci_stats st = {.size = sizeof st};
    cci_alloc_stats(a, &st);
    CHECK(failures == 0, "%ld allocator calls failed", failures);
    CHECK(overlaps == 0, "%d overlaps between live blocks of different threads", overlaps);
    CHECK_EQ_U(st.allocation[CCI_POOL_ALL].current, 0, "no live block after every thread freed its own");
    CHECK_EQ_U(st.allocation[CCI_POOL_ALL].allocated, st.allocation[CCI_POOL_ALL].freed, "allocations == frees");
    CHECK_EQ_U(rc.bytes, 0, "event stream: nothing live");
    CHECK_EQ_U(rc.peak_bytes, st.allocated_bytes[CCI_POOL_ALL].peak, "event stream peak == statistics peak");
    char msg[256];
    CHECK(cci_allocator_check(a, msg, sizeof msg) == 0, "invariants: %s", msg);
    cci_alloc_empty_cache(a);
    cci_alloc_stats(a, &st);
    CHECK_EQ_U(st.reserved_bytes[CCI_POOL_ALL].current, 0, "everything released after the threads ended");
    cci_allocator_destroy(a, 1);
    cci_sim_destroy(sim);
}

// ---- 4. thread exit ----------------------------------------------------------------------------

typedef struct {
    cci_allocator *a;
    uintptr_t kept;
} exiting;

static void *allocate_and_exit(void *arg)
{
    exiting *x = arg;
    uintptr_t p;
    for (int i = 0; i < 10; i++) {  // its magazine holds a block when it exits
        cci_malloc(x->a, 1 << 20, 9, &p);
        cci_free(x->a, p, 9, CCI_FREE_NOW);
    }
    cci_malloc(x->a, 3 << 20, 9, &x->kept);  // and a live block it never frees
    return NULL;
}

static void thread_exit(void)
{
    cci_sim_device *sim;
    cci_allocator *a = t_cached_allocator((size_t)8 << 30, &sim);
    exiting x = {a, 0};
    pthread_t t;
    pthread_create(&t, NULL, allocate_and_exit, &x);
    pthread_join(t, NULL);
    cci_stats st = {.size = sizeof st};
    cci_alloc_stats(a, &st);
    CHECK_EQ_U(st.allocation[CCI_POOL_ALL].current, 1, "one live block after the thread exited");
    CHECK(cci_free(a, x.kept, 9, CCI_FREE_NOW) == CCI_OK, "another thread frees the exited thread's block");
    char msg[256];
    CHECK(cci_allocator_check(a, msg, sizeof msg) == 0, "invariants: %s", msg);
    cci_alloc_empty_cache(a);
    cci_alloc_stats(a, &st);
    CHECK_EQ_U(st.reserved_bytes[CCI_POOL_ALL].current, 0, "the exited thread's cached block was given back");
    cci_allocator_destroy(a, 1);
    cci_sim_destroy(sim);
}

// ---- 5. a batch observer -------------------------------------------------------------------------

typedef struct {
    cci_event ev;
    uint64_t seq;  // arrival: each thread's events arrive in the order it made them
} arrived;

static struct {
    pthread_mutex_t lock;
    arrived *ev;
    size_t n, cap;
    long batches;
    int bad_batch;  // a batch of an even order, an allocation of more than its block, a wrong count
} got = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 0, 0};

static void keep(const cci_event *ev)
{
    if (got.n == got.cap) {
        got.cap = got.cap ? 2 * got.cap : 65536;
        got.ev = realloc(got.ev, got.cap * sizeof *got.ev);
        if (!got.ev)
            abort();
    }
    got.ev[got.n] = (arrived){*ev, got.n};
    got.n++;
}

static void serial_door(void *ud, const cci_event *ev)
{
    (void)ud;
    pthread_mutex_lock(&got.lock);
    keep(ev);
    pthread_mutex_unlock(&got.lock);
}

// Each record as the events it stands for (cci_fast_event): an allocation, or a free's request
// and completion.
static int batch_door(void *ud, const cci_fast_batch *b)
{
    (void)ud;
    uint64_t order = b->order;
    const cci_fast_event *ev = b->ev;
    size_t n = b->n, events = 0;
    pthread_mutex_lock(&got.lock);
    got.batches++;
    if (order % 2 != 1)
        got.bad_batch = 1;
    for (size_t i = 0; i < n; i++) {
        cci_event e = {CCI_EV_ALLOC, 0, ev[i].stream, ev[i].addr, ev[i].size, ev[i].requested, order, ev[i].stamp};
        if (ev[i].requested == CCI_FAST_FREED) {
            e.kind = CCI_EV_FREE_REQUESTED;
            e.requested = CCI_FREE_NOW;
            keep(&e);
            e.kind = CCI_EV_FREE_COMPLETED;
            e.requested = 0;
            events++;
        } else if (ev[i].requested == CCI_FAST_FENCED) {
            e.kind = CCI_EV_FREE_REQUESTED;
            e.requested = CCI_FREE_FENCED;
        } else if (ev[i].requested == CCI_FAST_COMPLETED) {
            e.kind = CCI_EV_FREE_COMPLETED;
            e.requested = 0;
        } else if (ev[i].requested > ev[i].size) {
            got.bad_batch = 1;
        }
        keep(&e);
        events++;
    }
    if (events != b->events)
        got.bad_batch = 1;
    pthread_mutex_unlock(&got.lock);
    return 0;
}

static int by_order(const void *x, const void *y)
{
    const arrived *a = x, *b = y;
    if (a->ev.order != b->ev.order)
        return a->ev.order < b->ev.order ? -1 : 1;
    if (a->ev.stamp != b->ev.stamp)
        return a->ev.stamp < b->ev.stamp ? -1 : 1;
    return (a->seq > b->seq) - (a->seq < b->seq);
}

#define LIVE_SLOTS (1 << 16)

static void batch_observer(void)
{
    cci_sim_device *sim;
    cci_allocator *a = t_cached_allocator((size_t)64 << 30, &sim);
    CHECK(cci_allocator_add_batch_observer(a, serial_door, batch_door, NULL, ~0u) == 0, "batch observer attached");
    long failures = run_workers(a, readers);
    cci_stats st = {.size = sizeof st};
    cci_allocator_flush_events(a);
    cci_alloc_stats(a, &st);
    CHECK(failures == 0, "%ld allocator calls failed", failures);
    CHECK(!got.bad_batch, "every batch: an odd order, allocations within their block, its events counted");
    CHECK(got.batches > THREADS, "full logs went out as batches (%ld batches)", got.batches);
    qsort(got.ev, got.n, sizeof *got.ev, by_order);
    // Replayed in that order: every free is of a live block, every allocation of a free address.
    static uintptr_t live[LIVE_SLOTS];
    int64_t bytes = 0, peak = 0;
    long allocs = 0, bad = 0;
    for (size_t i = 0; i < got.n; i++) {
        const cci_event *e = &got.ev[i].ev;
        size_t h = (size_t)(e->addr >> 9) & (LIVE_SLOTS - 1);
        if (e->kind == CCI_EV_ALLOC) {
            while (live[h] && live[h] != e->addr)
                h = (h + 1) & (LIVE_SLOTS - 1);
            bad += live[h] == e->addr;
            live[h] = e->addr;
            allocs++;
            bytes += (int64_t)e->size;
            peak = bytes > peak ? bytes : peak;
        } else if (e->kind == CCI_EV_FREE_REQUESTED) {
            while (live[h] && live[h] != e->addr)
                h = (h + 1) & (LIVE_SLOTS - 1);
            if (live[h] != e->addr) {
                bad++;
                continue;
            }
            live[h] = 0;
            // Re-insert the probe run after the hole (open addressing without tombstones).
            for (size_t j = (h + 1) & (LIVE_SLOTS - 1); live[j]; j = (j + 1) & (LIVE_SLOTS - 1)) {
                uintptr_t v = live[j];
                live[j] = 0;
                size_t k = (size_t)(v >> 9) & (LIVE_SLOTS - 1);
                while (live[k])
                    k = (k + 1) & (LIVE_SLOTS - 1);
                live[k] = v;
            }
            bytes -= (int64_t)e->size;
        }
    }
    CHECK(bad == 0, "%ld events out of order (a free before its allocation, or an address handed out twice)", bad);
    CHECK_EQ_U(allocs, st.allocation[CCI_POOL_ALL].allocated, "every allocation reached the observer");
    CHECK_EQ_U(bytes, 0, "nothing live at the end");
    CHECK_EQ_U(peak, st.allocated_bytes[CCI_POOL_ALL].peak, "the ordered events peak at the statistics' peak");
    free(got.ev);
    cci_allocator_destroy(a, 1);
    cci_sim_destroy(sim);
}

int main(void)
{
    for (uint64_t seed = 1; seed <= 4; seed++)
        exact_statistics(seed * 7919);
    fast_path_serves();
    set_aside();
    aside_counted();
    threads();
    thread_exit();
    batch_observer();
    return t_finish();
}
