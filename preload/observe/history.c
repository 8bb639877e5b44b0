// SPDX-License-Identifier: MIT
// The in-memory allocation history and the what-ifs replayed from it (history.h).
#include "history.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "log.h"
#include "sweep.h"

// One record, 16 bytes:
//   w0: bits 0-51 the block address, 52-55 the event kind, 56-63 the stream's slot;
//   w1: the size the program asked for (alloc, OOM) or the block size (frees).
// 52 bits of address cover every user-space address of x86-64 and AArch64 (<= 2^48).
#define ADDR_BITS 52
#define ADDR_MASK (((uint64_t)1 << ADDR_BITS) - 1)
// Streams get a slot in a small table; a program with more streams than that shares the last
// slot among the rest (their blocks then replay as one stream's), and the note says so.
#define STREAM_SLOTS 256
// A block size fits in 56 bits; a free_requested keeps the cci_free_mode taken above them.
#define MODE_SHIFT 56
#define SIZE_MASK (((uint64_t)1 << MODE_SHIFT) - 1)

// The per-thread caches' events come in batches, each thread's own (cci_batch_fn), possibly
// from several threads at once: each batch becomes a chunk of its own, in the thread that made
// it, and only linking it takes a lock. A chunk keeps the records as the thread cache logged them
// (cci_fast_event: the stream itself, the time stamp that merges the threads' chunks, a free
// reusable at once as one record for its request and completion): a record-by-record translation
// had cost ~20 instructions a served allocation or free. They are translated once,
// when the history becomes a trace (merge_chunks). A full log is kept as it is when the cache
// lets us (cci_batch_fn: it becomes the chunk's records, and the cache takes a new log), which a
// fast loop's batches all are; the others are copied.
typedef struct chunk {
    struct chunk *next;
    uint64_t order;
    size_t n;              // records
    cci_fast_event *rec;   // `copied`, or a log kept whole (a block of its own)
    cci_fast_event copied[];
} chunk;

// Chunks are carved from slabs of SLAB_BYTES, under the chunk lock; a larger one (a partial log
// of more than ~200 records) gets a block of its own. Where the thread caches rarely serve (the
// mixed workload: sizes that seldom repeat), every locked section's stop hands over the one or two
// records the thread's fast paths logged since the previous one, and a malloc for each of those
// chunks had cost more than the rest of the history's work (callgrind, commit 0e13f7f).
#define SLAB_BYTES ((size_t)64 << 10)
#define SLAB_CHUNK_MAX (SLAB_BYTES / 8)
typedef struct slab {
    struct slab *next;
    uint64_t align_;  // the chunks after the header start 16-byte aligned
} slab;

static size_t chunk_bytes(int kept, size_t n)
{
    return (sizeof(chunk) + (kept ? 0 : n * sizeof(cci_fast_event)) + 15) & ~(size_t)15;
}

// Where the order of the locked sections' records changes: records [start, next mark's start)
// have this order (cci_event.order).
typedef struct {
    uint64_t order, start;
} mark;

struct cci_history {
    cci_allocator *owner;
    uint64_t (*rec)[2];
    uint64_t max, n, dropped;
    size_t map_bytes;
    uint64_t streams[STREAM_SLOTS];
    unsigned nstreams, last_slot;
    int streams_shared;
    mark *marks;
    size_t nmarks, marks_cap;
    uint64_t mark_order;         // the newest mark's order (UINT64_MAX before the first): one
                                 // load on every event, where marks[nmarks - 1] took three
    pthread_mutex_t chunk_lock;  // the list and the slabs; chunks never change once linked
    chunk *chunks;
    slab *slabs;                 // the newest first: chunks are carved from its tail
    size_t slab_used;            // bytes of the newest slab handed out (its header included)
    _Atomic uint64_t batched, batch_dropped;  // events in chunks, and those past the cap
};

static uint64_t record_w0(const cci_event *ev, unsigned slot)
{
    return ((uint64_t)ev->addr & ADDR_MASK) | (uint64_t)ev->kind << ADDR_BITS | (uint64_t)slot << 56;
}

// The size word of a block event; 0 for a kind the history does not keep.
static int record_w1(const cci_event *ev, uint64_t *w1)
{
    switch (ev->kind) {
    case CCI_EV_ALLOC:
    case CCI_EV_OOM:
        *w1 = ev->requested;  // the replay rounds it by the configuration it tries
        return 1;
    case CCI_EV_FREE_REQUESTED:  // the free mode taken rides in the size word's top byte
        *w1 = ev->size | (uint64_t)(ev->requested & 0xFF) << MODE_SHIFT;
        return 1;
    case CCI_EV_FREE_COMPLETED:
        *w1 = ev->size;
        return 1;
    default:
        return 0;  // segments follow from the policy in a replay
    }
}

// A stream other than the last one's slot. Out of line, as the marks' growth below: the observer
// itself then needs no registers saved around it (callgrind: 10 instructions an event, commit be4dc09).
static __attribute__((noinline)) unsigned stream_slot_search(cci_history *h, uint64_t stream)
{
    for (unsigned i = 0; i < h->nstreams; i++)
        if (h->streams[i] == stream)
            return h->last_slot = i;
    if (h->nstreams < STREAM_SLOTS) {
        h->streams[h->nstreams] = stream;
        return h->last_slot = h->nstreams++;
    }
    h->streams_shared = 1;
    return STREAM_SLOTS - 1;
}

static inline unsigned stream_slot(cci_history *h, uint64_t stream)
{
    if (h->last_slot < h->nstreams && h->streams[h->last_slot] == stream)
        return h->last_slot;
    return stream_slot_search(h, stream);
}

// Room for one more mark: the array doubles. Without host memory it stays full, and the records
// join the last mark, a little out of order against the batches.
static __attribute__((noinline)) void grow_marks(cci_history *h)
{
    size_t cap = h->marks_cap ? 2 * h->marks_cap : 1024;
    mark *m = realloc(h->marks, cap * sizeof *m);
    if (m) {
        h->marks = m;
        h->marks_cap = cap;
    }
}

// Under the allocator lock, on every event: a few stores into memory reserved at attach.
static void observe(void *ud, const cci_event *ev)
{
    cci_history *h = ud;
    uint64_t size;
    if (!record_w1(ev, &size))
        return;
    if (h->n + atomic_load_explicit(&h->batched, memory_order_relaxed) >= h->max) {
        h->dropped++;
        return;
    }
    if (h->mark_order != ev->order) {
        if (h->nmarks == h->marks_cap)
            grow_marks(h);
        if (h->nmarks < h->marks_cap) {
            h->marks[h->nmarks++] = (mark){ev->order, h->n};
            h->mark_order = ev->order;
        }
    }
    uint64_t *r = h->rec[h->n];
    r[0] = record_w0(ev, stream_slot(h, ev->stream));
    r[1] = size;
    h->n++;
}

// Events a run of fast-path records stands for (a free reusable at once is two).
static uint64_t fast_events(const cci_fast_event *ev, size_t n)
{
    uint64_t events = n;
    for (size_t i = 0; i < n; i++)
        events += ev[i].requested == CCI_FAST_FREED;
    return events;
}

// `bytes` (chunk_bytes, at most SLAB_CHUNK_MAX) from the newest slab, or from a new one when it
// has no room left (its tail stays unused). NULL without host memory. Chunk lock held.
static chunk *carve(cci_history *h, size_t bytes)
{
    if (!h->slabs || SLAB_BYTES - h->slab_used < bytes) {
        slab *s = malloc(SLAB_BYTES);
        if (!s)
            return NULL;
        s->next = h->slabs;
        h->slabs = s;
        h->slab_used = sizeof *s;
    }
    chunk *c = (chunk *)((char *)h->slabs + h->slab_used);
    h->slab_used += bytes;
    return c;
}

// Kept: the log becomes the chunk's records, and the doors after ours still read it, and then the
// cache's unlock (never freed before cci_history_destroy, in a fork child).
static void fill_chunk(chunk *c, uint64_t order, cci_fast_event *ev, size_t n, int keep)
{
    c->rec = keep ? ev : memcpy(c->copied, ev, n * sizeof *ev);
    c->order = order;
    c->n = n;
}

// The fast paths' events of one thread (cci_batch_fn): a chunk, kept or copied, then linked.
static int observe_batch(void *ud, const cci_fast_batch *b)
{
    cci_history *h = ud;
    cci_fast_event *ev = b->ev;
    size_t n = b->n;
    uint64_t events = b->events;
    uint64_t before = atomic_fetch_add_explicit(&h->batched, events, memory_order_relaxed);
    uint64_t room = h->max > before ? h->max - before : 0;  // the locked side's count is checked there
    size_t take = n;
    uint64_t kept = events;
    if (__builtin_expect(events > room, 0)) {  // at the cap: the records whose events fit
        take = 0;
        kept = 0;
        for (uint64_t e; take < n && kept + (e = 1 + (ev[take].requested == CCI_FAST_FREED)) <= room; take++)
            kept += e;
    }
    int keep = b->may_keep && take == n;
    size_t bytes = chunk_bytes(keep, take);
    chunk *c = NULL;
    if (take && bytes > SLAB_CHUNK_MAX && (c = malloc(bytes)) != NULL)
        fill_chunk(c, b->order, ev, take, keep);  // outside the lock: the copy is long
    if (take) {
        pthread_mutex_lock(&h->chunk_lock);
        // A large chunk whose own block could not be had is not carved: it would run past a
        // slab's end, and cci_history_destroy frees large chunks one by one.
        if (!c && bytes <= SLAB_CHUNK_MAX && (c = carve(h, bytes)) != NULL)
            fill_chunk(c, b->order, ev, take, keep);
        if (c) {
            c->next = h->chunks;
            h->chunks = c;
        }
        pthread_mutex_unlock(&h->chunk_lock);
    }
    if (!c)
        take = kept = 0;
    if (kept < events) {  // past the cap, or no host memory for the chunk
        atomic_fetch_add_explicit(&h->batch_dropped, events - kept, memory_order_relaxed);
        atomic_fetch_sub_explicit(&h->batched, events - kept, memory_order_relaxed);
    }
    return take ? keep : 0;
}

cci_history *cci_history_attach(cci_allocator *a, uint64_t max_events, uint64_t capacity)
{
    (void)capacity;
    if (!max_events)
        return NULL;
    cci_history *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->map_bytes = (size_t)max_events * sizeof *h->rec;
    // Address space only: pages are touched as records arrive.
    void *p = mmap(NULL, h->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        cci_log(CCI_LOG_WARNING, "device %d: no address space for a history of %llu events; no what-ifs",
                cci_allocator_device(a), (unsigned long long)max_events);
        free(h);
        return NULL;
    }
    h->rec = p;
    h->max = max_events;
    h->mark_order = UINT64_MAX;  // no event has this order: the first one makes a mark
    h->owner = a;
    pthread_mutex_init(&h->chunk_lock, NULL);
    if (cci_allocator_add_batch_observer(a, observe, observe_batch, h, ~0u) != 0) {
        cci_log(CCI_LOG_WARNING, "device %d: no free observer slot for the history; no what-ifs",
                cci_allocator_device(a));
        munmap(p, h->map_bytes);
        pthread_mutex_destroy(&h->chunk_lock);
        free(h);
        return NULL;
    }
    return h;
}

void cci_history_destroy(cci_history *h)
{
    if (!h)
        return;
    munmap(h->rec, h->map_bytes);
    for (chunk *c = h->chunks, *next; c; c = next) {
        next = c->next;
        int kept = c->rec != c->copied;
        if (kept)
            free(c->rec);
        if (chunk_bytes(kept, c->n) > SLAB_CHUNK_MAX)
            free(c);  // one of its own (observe_batch); the others go with their slab
    }
    for (slab *s = h->slabs, *next; s; s = next) {
        next = s->next;
        free(s);
    }
    free(h->marks);
    pthread_mutex_destroy(&h->chunk_lock);
    free(h);
}

// What was recorded up to now, read under the allocator lock (records below n never change,
// nor do linked chunks).
struct extent {
    cci_history *h;
    uint64_t n, dropped, streams[STREAM_SLOTS];
    unsigned nstreams;
    int streams_shared;
    mark *marks;  // a copy: the observer may grow the array after the lock is dropped
    size_t nmarks;
    chunk *chunks;
    int no_memory;
};

static void read_extent(void *ud)
{
    struct extent *e = ud;
    cci_history *h = e->h;
    e->n = h->n;
    e->dropped = h->dropped + atomic_load(&h->batch_dropped);
    e->nstreams = h->nstreams;
    memcpy(e->streams, h->streams, sizeof e->streams);
    e->streams_shared = h->streams_shared;
    e->nmarks = h->nmarks;
    e->marks = malloc((h->nmarks ? h->nmarks : 1) * sizeof *e->marks);
    e->no_memory = !e->marks;
    if (e->marks && h->nmarks)
        memcpy(e->marks, h->marks, h->nmarks * sizeof *e->marks);
    pthread_mutex_lock(&h->chunk_lock);
    e->chunks = h->chunks;
    pthread_mutex_unlock(&h->chunk_lock);
}

// A run of records of one order: the locked sections' [start, end) of the shared array, or a chunk.
typedef struct {
    uint64_t order;
    uint64_t start, end;
    const chunk *c;
    uint64_t pos;  // the merge's next record of a chunk
} order_run;

static int cmp_run(const void *x, const void *y)
{
    const order_run *a = x, *b = y;
    return (a->order > b->order) - (a->order < b->order);
}

static void emit(cci_trace *t, int device, uint64_t w0, uint64_t w1, uint64_t stream)
{
    t->ev[t->n++] = (cci_trace_event){.addr = w0 & ADDR_MASK, .size = w1 & SIZE_MASK, .stream = stream,
                                      .device = (uint32_t)device, .action = (uint8_t)((w0 >> ADDR_BITS) & 0xF),
                                      .free_mode = (uint8_t)(w1 >> MODE_SHIFT)};
}

static uint64_t head_stamp(const order_run *r) { return r->c->rec[r->pos].stamp; }

// A fast-path record as the events it stands for.
static void emit_fast(cci_trace *t, int device, const cci_fast_event *e)
{
    uint64_t addr = (uint64_t)e->addr & ADDR_MASK;
    if (CCI_FAST_IS_ALLOC(e->requested)) {
        emit(t, device, addr | (uint64_t)CCI_EV_ALLOC << ADDR_BITS, e->requested, e->stream);
        return;
    }
    if (e->requested == CCI_FAST_FENCED) {  // a thread's kept fenced free: request, completion later
        emit(t, device, addr | (uint64_t)CCI_EV_FREE_REQUESTED << ADDR_BITS,
             (e->size & SIZE_MASK) | (uint64_t)CCI_FREE_FENCED << MODE_SHIFT, e->stream);
        return;
    }
    if (e->requested == CCI_FAST_COMPLETED) {
        emit(t, device, addr | (uint64_t)CCI_EV_FREE_COMPLETED << ADDR_BITS, e->size & SIZE_MASK, e->stream);
        return;
    }
    emit(t, device, addr | (uint64_t)CCI_EV_FREE_REQUESTED << ADDR_BITS,
         (e->size & SIZE_MASK) | (uint64_t)CCI_FREE_NOW << MODE_SHIFT, e->stream);
    emit(t, device, addr | (uint64_t)CCI_EV_FREE_COMPLETED << ADDR_BITS, e->size & SIZE_MASK, e->stream);
}

// The chunks of one order (several threads' batches between two locked sections), merged by
// time stamp through a binary heap of run indices.
static void merge_chunks(cci_trace *t, int device, order_run *r, size_t k, size_t *heap)
{
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        size_t j = m++;
        for (heap[j] = i; j && head_stamp(&r[heap[(j - 1) / 2]]) > head_stamp(&r[heap[j]]); j = (j - 1) / 2) {
            size_t x = heap[j];
            heap[j] = heap[(j - 1) / 2];
            heap[(j - 1) / 2] = x;
        }
    }
    while (m) {
        order_run *top = &r[heap[0]];
        emit_fast(t, device, &top->c->rec[top->pos++]);
        if (top->pos == top->c->n)
            heap[0] = heap[--m];
        for (size_t j = 0;;) {  // sift down
            size_t l = 2 * j + 1, small = j;
            if (l < m && head_stamp(&r[heap[l]]) < head_stamp(&r[heap[small]]))
                small = l;
            if (l + 1 < m && head_stamp(&r[heap[l + 1]]) < head_stamp(&r[heap[small]]))
                small = l + 1;
            if (small == j)
                break;
            size_t x = heap[j];
            heap[j] = heap[small];
            heap[small] = x;
            j = small;
        }
    }
}

// The history as a trace the replay reads: 32 bytes an event for the time of the replay. The
// locked sections' records and the batches' chunks are put in the allocator's order
// (cci_event.order, then the stamps between threads).
static int to_trace(cci_history *h, cci_allocator *a, cci_trace *t, struct extent *e)
{
    memset(t, 0, sizeof *t);
    memset(e, 0, sizeof *e);
    e->h = h;
    cci_allocator_flush_events(a);  // the caches' last events, in their batches
    cci_allocator_with_lock(a, read_extent, e);
    size_t nchunks = 0, total = e->n;
    for (const chunk *c = e->chunks; c; c = c->next) {
        nchunks++;
        total += fast_events(c->rec, c->n);
    }
    size_t nruns = nchunks + e->nmarks + 1;
    order_run *r = e->no_memory ? NULL : malloc(nruns * sizeof *r);
    size_t *heap = malloc((nchunks ? nchunks : 1) * sizeof *heap);
    t->ev = malloc((total ? total : 1) * sizeof *t->ev);
    if (!r || !heap || !t->ev) {
        free(r);
        free(heap);
        free(e->marks);
        free(t->ev);
        t->ev = NULL;
        return -1;
    }
    size_t k = 0;
    uint64_t first = e->nmarks ? e->marks[0].start : e->n;
    if (first > 0)  // records before any mark (no host memory for one): first of all
        r[k++] = (order_run){0, 0, first, NULL, 0};
    for (size_t i = 0; i < e->nmarks; i++)
        r[k++] = (order_run){e->marks[i].order, e->marks[i].start, i + 1 < e->nmarks ? e->marks[i + 1].start : e->n,
                       NULL, 0};
    for (const chunk *c = e->chunks; c; c = c->next)
        r[k++] = (order_run){c->order, 0, 0, c, 0};
    qsort(r, k, sizeof *r, cmp_run);
    int device = cci_allocator_device(a);
    for (size_t i = 0; i < k;) {
        if (!r[i].c) {
            for (uint64_t j = r[i].start; j < r[i].end; j++)
                emit(t, device, h->rec[j][0], h->rec[j][1], e->streams[(h->rec[j][0] >> 56) % STREAM_SLOTS]);
            i++;
            continue;
        }
        size_t g = i;
        while (g < k && r[g].c && r[g].order == r[i].order)
            g++;
        merge_chunks(t, device, r + i, g - i, heap);
        i = g;
    }
    free(r);
    free(heap);
    free(e->marks);
    e->marks = NULL;
    e->n = t->n;  // every event, the batches' included
    t->cap = t->n;
    t->format = "history";
    // Recorded by our own allocator, like a CCI_TRACE trace: frees completed by its own
    // synchronisation are left to the replay's allocator to decide (trace.h).
    t->policy_frees = 1;
    return 0;
}

static const cci_sweep_row *baseline_of(const cci_sweep_outcome *o)
{
    for (size_t i = 0; i < o->n; i++)
        if (o->rows[i].is_baseline)
            return &o->rows[i];
    return NULL;
}

static const cci_sweep_row *rank_base;

// Fewest OOMs, lowest peak, fewest device allocations, fewest keys, then plan order: a total
// order, so the table does not depend on which thread finished first.
static int cmp_rank(const void *a, const void *b)
{
    const cci_sweep_row *x = &rank_base[*(const size_t *)a], *y = &rank_base[*(const size_t *)b];
#define CMP(v)                                                                                    \
    if (x->v != y->v)                                                                             \
        return x->v < y->v ? -1 : 1;
    CMP(res.num_ooms)
    CMP(res.peak_reserved)
    CMP(res.num_device_alloc)
    CMP(nkeys)
#undef CMP
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    return (i > j) - (i < j);
}

// Runs the plan; 0 with *o filled, or -1 with w->note set.
static int run(cci_history *h, cci_allocator *a, const char *conf_text, const char (*extra)[192], size_t nextra,
               uint64_t capacity, double seconds, int jobs, cci_report_whatif *w, cci_sweep_outcome *o)
{
    cci_trace t;
    struct extent e;
    if (to_trace(h, a, &t, &e) != 0) {
        snprintf(w->note, sizeof w->note, "no host memory to replay the history");
        return -1;
    }
    w->events = e.n;
    w->events_dropped = e.dropped;
    w->history_cap = h->max;
    w->capacity = capacity;
    w->bound_seconds = seconds;
    const char *ptrs[8];
    size_t np = 0;
    for (size_t i = 0; i < nextra && np < 8; i++)
        ptrs[np++] = extra[i];
    cci_sweep_plan plan = {.capacity = (size_t)capacity, .jobs = jobs, .baseline = cci_allocator_config(a),
                           .baseline_conf = conf_text, .extra = ptrs, .nextra = np, .seconds = seconds};
    char err[256];
    int rc = cci_sweep_measure(&t, &plan, o, err, sizeof err);
    free(t.ev);
    if (rc != 0) {
        snprintf(w->note, sizeof w->note, "replay failed: %.150s", err);
        return -1;
    }
    if (e.streams_shared)
        cci_log(CCI_LOG_INFO, "what-ifs: more than %d streams; the later ones replay as one", STREAM_SLOTS - 1);
    return 0;
}

void cci_history_measure(cci_history *h, cci_allocator *a, const char *conf_text, const char (*extra)[192],
                         size_t nextra, uint64_t capacity, double seconds, int jobs, cci_report_whatif *w)
{
    memset(w, 0, sizeof *w);
    cci_sweep_outcome o;
    if (run(h, a, conf_text, extra, nextra, capacity, seconds, jobs, w, &o) != 0)
        return;
    const cci_sweep_row *base = baseline_of(&o);
    w->seconds = o.seconds;
    w->planned = o.n;
    w->replayed = o.done;
    size_t *order = malloc((o.n ? o.n : 1) * sizeof *order), n = 0;
    w->rows = malloc((o.n ? o.n : 1) * sizeof *w->rows);
    if (!base || base->state != CCI_SWEEP_DONE) {
        snprintf(w->note, sizeof w->note,
                 "the %.1f s bound (CCI_WHATIF_SECONDS) ran out before this run's own setting was replayed", seconds);
    } else if (!order || !w->rows) {
        snprintf(w->note, sizeof w->note, "no host memory for the what-if table");
    } else {
        for (size_t i = 0; i < o.n; i++)
            if (!o.rows[i].is_baseline && o.rows[i].state == CCI_SWEEP_DONE)
                order[n++] = i;
        rank_base = o.rows;  // one measurement at a time: exit, or an OOM under the caller's once
        qsort(order, n, sizeof *order, cmp_rank);
        for (size_t k = 0; k < n; k++)
            cci_sweep_whatif_row(&w->rows[k], &o.rows[order[k]]);
        w->nrows = n;
        cci_sweep_whatif_row(&w->current, base);
        w->measured = 1;
    }
    if (!w->measured) {
        free(w->rows);
        w->rows = NULL;
    }
    free(order);
    cci_sweep_outcome_free(&o);
}

void cci_history_oom_line(cci_history *h, cci_allocator *a, const char *conf_text, double seconds, int jobs,
                          char *buf, size_t len)
{
    buf[0] = '\0';
    cci_stats st;
    cci_alloc_stats(a, &st);
    if (!st.device_capacity)
        return;  // without the capacity a replay cannot fail as the program did
    cci_report_whatif w;
    cci_history_measure(h, a, conf_text, NULL, 0, st.device_capacity, seconds, jobs, &w);
    if (!w.measured) {
        snprintf(buf, len, "What-if not measured: %s.", w.note);
        return;
    }
    char cap[16];
    cci_report_bytes((int64_t)st.device_capacity, cap, sizeof cap);
    if (w.current.num_ooms == 0) {
        snprintf(buf, len,
                 "Replaying this run's %llu events at the device's %s does not reproduce the failure: memory "
                 "that others hold on the device is not in the replay.",
                 (unsigned long long)w.events, cap);
    } else if (w.nrows && w.rows[0].num_ooms == 0) {
        snprintf(buf, len,
                 "Replaying this run's %llu events at the device's %s: CCI_ALLOC_CONF='%s' would have avoided "
                 "this failure (peak reserved %.1f MiB).",
                 (unsigned long long)w.events, cap, w.rows[0].conf, (double)w.rows[0].peak_reserved / 1048576.0);
    } else {
        snprintf(buf, len,
                 "Replaying this run's %llu events at the device's %s under %zu configurations: none avoids "
                 "this failure; the program needs more memory at its peak than the device has.",
                 (unsigned long long)w.events, cap, w.replayed);
    }
    free(w.rows);
}
