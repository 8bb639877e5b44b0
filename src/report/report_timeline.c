// SPDX-License-Identifier: MIT
// The report timeline: allocated and reserved bytes over time, kept by an allocator observer in
// a fixed buffer (the per-thread caches' events come in batches: observe_batch). The observer
// runs under the allocator lock on every allocation and free of a locked section, so it
// does a few additions and, now and then, a merge of the buffer in place; it never allocates.
// Its cost is on the allocation fast path (about 50 ns a pair without it), hence the coarse
// clock, read only every few events (millisecond resolution is plenty for a run's timeline), and
// no lock of its own: the rare reader takes the allocator's lock instead (an atomic exchange per
// event had cost as much as the rest of the allocation).
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "report_impl.h"

#define DEFAULT_SAMPLES 1024
// Small-pool segments are exactly 2 MiB and large-pool ones at least 10 MiB; small-pool blocks
// are at most 1 MiB and large-pool ones larger. So an event's size tells its pool.
#define SMALL_SEGMENT_MAX ((uint64_t)2 << 20)
#define SMALL_BLOCK_MAX ((uint64_t)1 << 20)
#define SPLIT_FLOOR ((uint64_t)20 << 20)
#define CLOCK_EVERY 32

#ifdef CLOCK_MONOTONIC_COARSE
#define TIMELINE_CLOCK CLOCK_MONOTONIC_COARSE
#else
#define TIMELINE_CLOCK CLOCK_MONOTONIC
#endif

struct cci_report_timeline {
    cci_allocator *owner;  // its observer runs under this allocator's lock; readers take it too
    cci_timeline_clock clock;
    struct timespec t0;
    uint64_t events;
    cci_timeline_sample *s;
    size_t n, cap;
    uint64_t interval;     // minimum distance between two kept samples; doubles on each merge
    uint64_t alloc[2], reserved[2], pending[2];  // [0] large pool, [1] small pool
    uint64_t amax, rmax;   // highest values since the last kept sample
    uint64_t last_t;
    int dirty;             // changes after the last kept sample
    int seg_new;           // the last event was a new segment; the next ALLOC is its request
    int seg_pool;
    uint64_t seg_size, cached_before;
    cci_report_misses misses;
    // Batches of the fast paths (observe_batch) may come from several threads at once: they move
    // `alloc` and set `dirty` with atomic operations. Against everything else (the observer, the
    // readers: under the allocator lock) a stop orders them (cci_batch_fn).
};

cci_report_timeline *cci_report_timeline_create(size_t max_samples, cci_timeline_clock clock)
{
    if (max_samples == 0)
        max_samples = DEFAULT_SAMPLES;
    if (max_samples < 4)
        max_samples = 4;
    cci_report_timeline *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->s = calloc(max_samples, sizeof *t->s);
    if (!t->s) {
        free(t);
        return NULL;
    }
    t->cap = max_samples;
    t->clock = clock;
    clock_gettime(TIMELINE_CLOCK, &t->t0);
    return t;
}

void cci_report_timeline_destroy(cci_report_timeline *t)
{
    if (!t)
        return;
    free(t->s);
    free(t);
}

static uint64_t now_of(cci_report_timeline *t)
{
    if (t->clock == CCI_TIMELINE_CLOCK_EVENTS)
        return ++t->events;
    struct timespec ts;
    clock_gettime(TIMELINE_CLOCK, &ts);
    int64_t us = (int64_t)(ts.tv_sec - t->t0.tv_sec) * 1000000 + (ts.tv_nsec - t->t0.tv_nsec) / 1000;
    return us > 0 ? (uint64_t)us : 0;
}

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

// Halves the buffer: each pair becomes one sample that ends where the second ended and keeps the
// higher maxima, so no peak is lost however long the program runs.
static void merge_pairs(cci_report_timeline *t)
{
    size_t half = t->n / 2;
    for (size_t i = 0; i < half; i++) {
        cci_timeline_sample a = t->s[2 * i], b = t->s[2 * i + 1];
        b.allocated_max = max_u64(a.allocated_max, b.allocated_max);
        b.reserved_max = max_u64(a.reserved_max, b.reserved_max);
        t->s[i] = b;
    }
    if (t->n % 2)
        t->s[half++] = t->s[t->n - 1];
    t->n = half;
    uint64_t span = t->s[t->n - 1].t - t->s[0].t;
    t->interval = max_u64(t->interval * 2, span / (t->n ? t->n : 1));
    if (t->interval == 0)
        t->interval = 1;
}

static void record(cci_report_timeline *t, uint64_t now)
{
    uint64_t a = t->alloc[0] + t->alloc[1], r = t->reserved[0] + t->reserved[1];
    t->amax = max_u64(t->amax, a);
    t->rmax = max_u64(t->rmax, r);
    t->last_t = now;
    if (t->n > 0 && now - t->s[t->n - 1].t < t->interval) {
        t->dirty = 1;
        return;
    }
    t->s[t->n++] = (cci_timeline_sample){now, a, r, t->amax, t->rmax};
    t->amax = a;
    t->rmax = r;
    t->dirty = 0;
    if (t->n == t->cap)
        merge_pairs(t);
}

static void sub(uint64_t *v, uint64_t d) { *v = *v > d ? *v - d : 0; }

// v moved by d, never below 0 (as sub() takes a figure down).
static uint64_t moved(uint64_t v, int64_t d) { return d >= 0 || v > (uint64_t)-d ? v + (uint64_t)d : 0; }

// A batch's change of a figure: other threads' batches may move the same figure at once. A
// compare-and-swap rather than a lock of the timeline's own: on the mixed workload every locked
// section's stop hands a batch of one or two records over, and the lock's pair of calls had cost
// more than the rest of the batch's work (callgrind, commit 69c5af9).
static void move_shared(uint64_t *v, int64_t d)
{
    uint64_t old = __atomic_load_n(v, __ATOMIC_RELAXED);
    while (d && !__atomic_compare_exchange_n(v, &old, moved(old, d), 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

// An allocation right after a new segment that the cached bytes could have held: a
// fragmentation miss.
static void count_miss(cci_report_timeline *t, uint64_t size)
{
    cci_report_misses *m = &t->misses;
    if (m->count == 0 || size < m->min_request)
        m->min_request = size;
    m->max_request = max_u64(m->max_request, size);
    m->count++;
    m->segment_bytes += t->seg_size;
    if (size > SPLIT_FLOOR) {
        if (m->large_count == 0 || size < m->large_min_request)
            m->large_min_request = size;
        m->large_count++;
        m->large_segment_bytes += t->seg_size;
    }
}

// The events other than an allocation's and a free's.
static void observe_segment_or_oom(cci_report_timeline *t, const cci_event *ev)
{
    int spool = ev->size <= SMALL_SEGMENT_MAX;
    switch (ev->kind) {
    case CCI_EV_SEGMENT_ALLOC: {
        uint64_t used = t->alloc[spool] + t->pending[spool];
        t->cached_before = t->reserved[spool] > used ? t->reserved[spool] - used : 0;
        t->seg_new = 1;
        t->seg_pool = spool;
        t->seg_size = ev->size;
        t->reserved[spool] += ev->size;
        break;
    }
    case CCI_EV_SEGMENT_FREE:
        sub(&t->reserved[spool], ev->size);
        break;
    // Pages mapped into or out of an expandable segment: reserved memory follows them (an
    // expandable segment's own creation reserves address space only and is not an event). The
    // pool is told by the page size as above, which is exact for PyTorch's pages (2 MiB small,
    // 20 MiB large); compact mode's 2 MiB pages of the large pool count as small here, which
    // moves bytes between the two pools of the timeline, never in or out of the total. A
    // mapping is not counted as a fragmentation miss: it grows the one segment of the pool.
    case CCI_EV_SEGMENT_MAP:
        t->reserved[spool] += ev->size;
        t->seg_new = 0;
        break;
    case CCI_EV_SEGMENT_UNMAP:
        sub(&t->reserved[spool], ev->size);
        break;
    case CCI_EV_OOM:
        t->seg_new = 0;
        break;
    default:
        break;
    }
}

static void observe(void *ud, const cci_event *ev)
{
    cci_report_timeline *t = ud;  // runs under the allocator lock: no lock of its own
    int bpool = ev->size <= SMALL_BLOCK_MAX;
    // An allocation's and a free's events by compares, the rest by a switch: a jump table over
    // every kind mispredicted where allocations and frees come in random order (callgrind, commit
    // f1cb074).
    if (ev->kind == CCI_EV_ALLOC) {
        t->alloc[bpool] += ev->size;
        if (t->seg_new && t->seg_pool == bpool && t->cached_before >= ev->size)
            count_miss(t, ev->size);
        t->seg_new = 0;
    } else if (ev->kind == CCI_EV_FREE_REQUESTED) {
        sub(&t->alloc[bpool], ev->size);
        t->pending[bpool] += ev->size;
    } else if (ev->kind == CCI_EV_FREE_COMPLETED) {
        sub(&t->pending[bpool], ev->size);
    } else {
        observe_segment_or_oom(t, ev);
    }
    // Reading the clock is most of this observer's cost on the allocation fast path: with the
    // wall clock, look at it on segment events and every CLOCK_EVERY-th block event only. The
    // maxima are kept on every event, so no peak is lost between two readings.
    int segment_event = ev->kind == CCI_EV_SEGMENT_ALLOC || ev->kind == CCI_EV_SEGMENT_FREE ||
                        ev->kind == CCI_EV_SEGMENT_MAP || ev->kind == CCI_EV_SEGMENT_UNMAP;
    if (t->clock == CCI_TIMELINE_CLOCK_MONOTONIC && !segment_event && (++t->events & (CLOCK_EVERY - 1)) != 0) {
        t->amax = max_u64(t->amax, t->alloc[0] + t->alloc[1]);
        t->dirty = 1;
    } else {
        record(t, now_of(t));
    }
}

// The fast paths' events (per-thread caches: allocations and frees reusable at once) change the
// allocated bytes only; their sums are applied, and no sample is taken from them. The
// samples come from the events of locked sections, at which the sums are exact; and no peak is
// missed that way: a fast path never raises a figure past its peak (tcache.h), so every peak is
// reached by an event of a locked section.
static int observe_batch(void *ud, const cci_fast_batch *b)
{
    cci_report_timeline *t = ud;
    const cci_fast_event *ev = b->ev;
    size_t n = b->n;
    // Bytes allocated and freed per pool, summed without a branch: this runs for every record of
    // the hooks' fast path (callgrind, commit 709daa7). A fast free's request and completion come
    // together, so the waiting bytes do not move.
    // A thread's kept fenced free (tcache_fenced.c) comes as its request, which moves bytes from
    // allocated to waiting, and later its completion: rare next to the others, so counted apart.
    int64_t sum[2][2] = {{0, 0}, {0, 0}}, waiting[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
        size_t r = ev[i].requested;
        int small = ev[i].size <= SMALL_BLOCK_MAX;
        if (__builtin_expect(r == CCI_FAST_FENCED || r == CCI_FAST_COMPLETED, 0))
            waiting[small] += r == CCI_FAST_FENCED ? (int64_t)ev[i].size : -(int64_t)ev[i].size;
        sum[r >= CCI_FAST_FENCED][small] += r == CCI_FAST_COMPLETED ? 0 : (int64_t)ev[i].size;
    }
    for (int p = 0; p < 2; p++) {
        move_shared(&t->alloc[p], sum[0][p] - sum[1][p]);
        move_shared(&t->pending[p], waiting[p]);
    }
    __atomic_store_n(&t->dirty, 1, __ATOMIC_RELAXED);
    return 0;
}

int cci_report_timeline_attach(cci_report_timeline *t, cci_allocator *a)
{
    cci_stats st;
    cci_alloc_stats(a, &st);
    for (int small = 0; small < 2; small++) {
        int p = small ? CCI_POOL_SMALL : CCI_POOL_LARGE;
        t->alloc[small] = (uint64_t)st.allocated_bytes[p].current;
        t->reserved[small] = (uint64_t)st.reserved_bytes[p].current;
        int64_t pend = st.active_bytes[p].current - st.allocated_bytes[p].current;
        t->pending[small] = pend > 0 ? (uint64_t)pend : 0;
    }
    t->n = 0;
    t->amax = t->rmax = 0;
    record(t, t->clock == CCI_TIMELINE_CLOCK_EVENTS ? 0 : now_of(t));
    t->owner = a;
    return cci_allocator_add_batch_observer(a, observe, observe_batch, t, ~0u);
}

struct copy_args {
    cci_report_timeline *t;
    cci_timeline_sample **samples;
    size_t *n;
    cci_timeline_clock *clock;
    cci_report_misses *misses;
    int rc;
};

static void copy_locked(void *ud)
{
    struct copy_args *a = ud;
    cci_report_timeline *t = a->t;
    size_t total = t->n + (t->dirty ? 1 : 0);
    cci_timeline_sample *c = malloc((total ? total : 1) * sizeof *c);
    a->rc = c ? 0 : -1;
    if (!c)
        return;
    memcpy(c, t->s, t->n * sizeof *c);
    // The changes since the last kept sample are not lost: they close one more interval.
    uint64_t end = t->clock == CCI_TIMELINE_CLOCK_MONOTONIC ? max_u64(now_of(t), t->last_t) : t->last_t;
    if (t->dirty)
        c[t->n] = (cci_timeline_sample){end, t->alloc[0] + t->alloc[1], t->reserved[0] + t->reserved[1],
                                        t->amax, t->rmax};
    *a->samples = c;
    *a->n = total;
    *a->clock = t->clock;
    *a->misses = t->misses;
}

int cci__timeline_copy(cci_report_timeline *t, cci_timeline_sample **samples, size_t *n,
                       cci_timeline_clock *clock, cci_report_misses *misses)
{
    struct copy_args args = {t, samples, n, clock, misses, -1};
    if (t->owner)
        cci_allocator_with_lock(t->owner, copy_locked, &args);
    else
        copy_locked(&args);
    return args.rc;
}
