// SPDX-License-Identifier: MIT
// The in-memory allocation history and the what-ifs replayed from it (history.h).
#include "history.h"

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

struct cci_history {
    cci_allocator *owner;
    uint64_t (*rec)[2];
    uint64_t max, n, dropped;
    size_t map_bytes;
    uint64_t streams[STREAM_SLOTS];
    unsigned nstreams, last_slot;
    int streams_shared;
};

static unsigned stream_slot(cci_history *h, uint64_t stream)
{
    if (h->last_slot < h->nstreams && h->streams[h->last_slot] == stream)
        return h->last_slot;
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

// Under the allocator lock, on every event: a few stores into memory reserved at attach.
static void observe(void *ud, const cci_event *ev)
{
    cci_history *h = ud;
    uint64_t size;
    switch (ev->kind) {
    case CCI_EV_ALLOC:
    case CCI_EV_OOM:
        size = ev->requested;  // the replay rounds it by the configuration it tries
        break;
    case CCI_EV_FREE_REQUESTED:  // the free mode taken rides in the size word's top byte
        size = ev->size | (uint64_t)(ev->requested & 0xFF) << MODE_SHIFT;
        break;
    case CCI_EV_FREE_COMPLETED:
        size = ev->size;
        break;
    default:
        return;  // segments follow from the policy in a replay
    }
    if (h->n >= h->max) {
        h->dropped++;
        return;
    }
    uint64_t *r = h->rec[h->n];
    r[0] = ((uint64_t)ev->addr & ADDR_MASK) | (uint64_t)ev->kind << ADDR_BITS |
           (uint64_t)stream_slot(h, ev->stream) << 56;
    r[1] = size;
    h->n++;
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
    h->owner = a;
    if (cci_allocator_add_observer(a, observe, h) != 0) {
        cci_log(CCI_LOG_WARNING, "device %d: no free observer slot for the history; no what-ifs",
                cci_allocator_device(a));
        munmap(p, h->map_bytes);
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
    free(h);
}

// What was recorded up to now, read under the allocator lock (records below n never change).
struct extent {
    cci_history *h;
    uint64_t n, dropped, streams[STREAM_SLOTS];
    unsigned nstreams;
    int streams_shared;
};

static void read_extent(void *ud)
{
    struct extent *e = ud;
    e->n = e->h->n;
    e->dropped = e->h->dropped;
    e->nstreams = e->h->nstreams;
    memcpy(e->streams, e->h->streams, sizeof e->streams);
    e->streams_shared = e->h->streams_shared;
}

// The history as a trace the replay reads: 32 bytes an event for the time of the replay.
static int to_trace(cci_history *h, cci_allocator *a, cci_trace *t, struct extent *e)
{
    e->h = h;
    cci_allocator_with_lock(a, read_extent, e);
    memset(t, 0, sizeof *t);
    t->ev = malloc((e->n ? e->n : 1) * sizeof *t->ev);
    if (!t->ev)
        return -1;
    int device = cci_allocator_device(a);
    for (uint64_t i = 0; i < e->n; i++) {
        const uint64_t *r = h->rec[i];
        t->ev[i] = (cci_trace_event){.addr = r[0] & ADDR_MASK, .size = r[1] & SIZE_MASK,
                                     .stream = e->streams[(r[0] >> 56) % STREAM_SLOTS], .device = (uint32_t)device,
                                     .action = (uint8_t)((r[0] >> ADDR_BITS) & 0xF),
                                     .free_mode = (uint8_t)(r[1] >> MODE_SHIFT)};
    }
    t->n = t->cap = e->n;
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

static void to_row(cci_report_whatif_row *d, const cci_sweep_row *s)
{
    memcpy(d->conf, s->conf, sizeof d->conf);
    d->peak_reserved = s->res.peak_reserved;
    d->peak_allocated = s->res.peak_allocated;
    d->num_device_alloc = s->res.num_device_alloc;
    d->num_ooms = s->res.num_ooms;
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
            to_row(&w->rows[k], &o.rows[order[k]]);
        w->nrows = n;
        to_row(&w->current, base);
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
