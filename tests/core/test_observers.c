// SPDX-License-Identifier: MIT
// Who hears which event. The allocator tells an event only to the observers listed for its kind
// and door (allocator_life.c: lists built as observers are added, and a locked section's event
// queued for the unlock only when an observer without a batch door wants it). This checks those
// lists against the rule they stand for, with a reference observer that hears everything:
//   - an observer without a batch door (serial) hears exactly the reference's events of its
//     kinds, in the same order;
//   - an observer with a batch door hears, through `fn`, exactly the reference's events of
//     locked sections (even order) of its kinds, in order; through `batch`, the fast paths'
//     events (odd order) in order.
// and the reference itself hears every event the statistics count. A random workload (repeating
// sizes, so the thread cache serves some; deferred frees; emptied caches, so segments come and go;
// a small device, so some allocations fail) runs with the thread caches on and off, and with
// expandable segments (pages mapped and unmapped). No batch door wants OOMs or freed segments:
// only serial observers do, so their events must still be queued for the unlock.
#include <string.h>

#include "allocator.h"
#include "testutil.h"

#define MAX_EVENTS 200000
#define SLOTS 64
#define BLOCK_KINDS (1u << CCI_EV_ALLOC | 1u << CCI_EV_FREE_REQUESTED | 1u << CCI_EV_FREE_COMPLETED)
#define SEGMENT_KINDS (1u << CCI_EV_SEGMENT_ALLOC | 1u << CCI_EV_SEGMENT_FREE)

typedef struct {
    uint8_t kind;
    uint64_t addr, size, requested, order;
} heard;

typedef struct {
    const char *name;
    unsigned kinds;
    int batch_door;
    heard *ev, *fast;  // through fn; through batch (records expanded into their events)
    size_t n, nfast;
    int overflow;
} listener;

static void keep(listener *l, heard **v, size_t *n, heard h)
{
    if (*n == MAX_EVENTS) {
        l->overflow = 1;
        return;
    }
    (*v)[(*n)++] = h;
}

static void on_event(void *ud, const cci_event *ev)
{
    listener *l = ud;
    keep(l, &l->ev, &l->n, (heard){(uint8_t)ev->kind, ev->addr, ev->size, ev->requested, ev->order});
}

static int on_batch(void *ud, const cci_fast_batch *b)
{
    listener *l = ud;
    for (size_t i = 0; i < b->n; i++) {
        const cci_fast_event *e = &b->ev[i];
        if (CCI_FAST_IS_ALLOC(e->requested)) {
            keep(l, &l->fast, &l->nfast, (heard){CCI_EV_ALLOC, e->addr, e->size, e->requested, b->order});
            continue;
        }
        if (e->requested == CCI_FAST_FENCED) {
            keep(l, &l->fast, &l->nfast, (heard){CCI_EV_FREE_REQUESTED, e->addr, e->size, CCI_FREE_FENCED, b->order});
            continue;
        }
        if (e->requested == CCI_FAST_COMPLETED) {
            keep(l, &l->fast, &l->nfast, (heard){CCI_EV_FREE_COMPLETED, e->addr, e->size, 0, b->order});
            continue;
        }
        keep(l, &l->fast, &l->nfast, (heard){CCI_EV_FREE_REQUESTED, e->addr, e->size, CCI_FREE_NOW, b->order});
        keep(l, &l->fast, &l->nfast, (heard){CCI_EV_FREE_COMPLETED, e->addr, e->size, 0, b->order});
    }
    return 0;
}

static int same(const heard *x, const heard *y)
{
    return x->kind == y->kind && x->addr == y->addr && x->size == y->size && x->requested == y->requested &&
           x->order == y->order;
}

// The reference's events that `kinds` and `parity` select (parity: 0 even orders, 1 odd, 2 any),
// against `got`: the same, in the same order.
static void expect(const listener *ref, unsigned kinds, int parity, const heard *got, size_t n, const char *what,
                   const char *name)
{
    size_t j = 0, bad = 0;
    for (size_t i = 0; i < ref->n; i++) {
        const heard *r = &ref->ev[i];
        if (!(kinds & (1u << r->kind)) || (parity != 2 && (int)(r->order & 1) != parity))
            continue;
        if (j >= n || !same(r, &got[j]))
            bad++;
        j++;
    }
    CHECK(bad == 0 && j == n, "%s, %s: %zu events expected, %zu heard, %zu differ", name, what, j, n, bad);
}

static long count_kind(const listener *l, cci_event_kind kind)
{
    long n = 0;
    for (size_t i = 0; i < l->n; i++)
        n += l->ev[i].kind == kind;
    return n;
}

static void run(int thread_cache, const char *conf)
{
    cci_sim_device *sim = cci_sim_create((size_t)640 << 20);
    cci_config cfg;
    cci_config_default(&cfg);
    cfg.compact_segments = 0;  // ordinary segments: the policy under test (the default is compact with VMM)
    char err[256];
    CHECK(cci_config_parse(&cfg, conf, "test", err, sizeof err, NULL, NULL) == 0, "'%s': %s", conf, err);
    cci_allocator *a = sim ? cci_allocator_create(0, &cfg, cci_sim_backend(sim)) : NULL;
    if (!a) {
        CHECK(0, "out of host memory");
        return;
    }
    cci_allocator_thread_cache(a, thread_cache);
    // The reference first (it hears every event); then one of each door, each wanting a part.
    listener ls[] = {
        {"reference (serial, every kind)", ~0u, 0, NULL, NULL, 0, 0, 0},
        {"serial, segments", SEGMENT_KINDS, 0, NULL, NULL, 0, 0, 0},
        {"batch door, all but OOMs and freed segments", ~(1u << CCI_EV_OOM | 1u << CCI_EV_SEGMENT_FREE), 1, NULL,
         NULL, 0, 0, 0},
        {"batch door, blocks and new segments", BLOCK_KINDS | 1u << CCI_EV_SEGMENT_ALLOC, 1, NULL, NULL, 0, 0, 0},
    };
    enum { NL = sizeof ls / sizeof ls[0] };
    for (int i = 0; i < NL; i++) {
        ls[i].ev = malloc(MAX_EVENTS * sizeof *ls[i].ev);
        ls[i].fast = malloc(MAX_EVENTS * sizeof *ls[i].fast);
        int rc = ls[i].batch_door ? cci_allocator_add_batch_observer(a, on_event, on_batch, &ls[i], ls[i].kinds)
                                  : cci_allocator_add_observer_of(a, on_event, &ls[i], ls[i].kinds);
        CHECK(rc == 0 && ls[i].ev && ls[i].fast, "%s attached", ls[i].name);
    }
    uintptr_t slot[SLOTS] = {0};
    size_t sizes[8];
    rng_state = 0x2545F4914F6CDD1Dull;
    for (int i = 0; i < 8; i++)
        sizes[i] = (size_t)512 << (rnd() % 17);  // 512 B .. 32 MiB
    long ooms = 0;
    for (long op = 0; op < 20000 * t_scale(); op++) {
        unsigned k = (unsigned)(rnd() % SLOTS);
        if (slot[k]) {
            cci_free_mode mode = rnd() % 8 ? CCI_FREE_NOW : CCI_FREE_DEFERRED;
            CHECK(cci_free(a, slot[k], 0, mode) == CCI_OK, "free");
            slot[k] = 0;
        } else {
            size_t size = rnd() % 4 ? sizes[rnd() % 8] : 512 + rnd() % (64 * MiB);
            int rc = cci_malloc(a, size, 0, &slot[k]);
            CHECK(rc == CCI_OK || rc == CCI_EOOM, "allocation: %d", rc);
            ooms += rc == CCI_EOOM;
            if (rc != CCI_OK)
                slot[k] = 0;
        }
        if (op % 2500 == 2499)
            cci_alloc_empty_cache(a);
    }
    cci_allocator_flush_events(a);
    const listener *ref = &ls[0];
    size_t fast = 0;
    for (size_t i = 0; i < ref->n; i++)
        fast += ref->ev[i].order & 1;
    // (Expandable segments fit this workload on the small device: no OOM there.)
    CHECK((ooms > 0 || cfg.expandable_segments) && ref->n > 10000, "%s: the workload made OOMs (%ld) and events (%zu)",
          conf, ooms, ref->n);
    CHECK(!thread_cache || fast > 1000, "%s: thread caches on: fast-path events (%zu)", conf, fast);
    // The reference against the statistics: it heard every event they count.
    cci_stats st;
    cci_alloc_stats(a, &st);
    CHECK_EQ_U(count_kind(ref, CCI_EV_ALLOC), st.allocation[CCI_POOL_ALL].allocated, "allocations heard");
    CHECK_EQ_U(count_kind(ref, CCI_EV_FREE_REQUESTED), st.allocation[CCI_POOL_ALL].freed, "frees heard");
    CHECK_EQ_U(count_kind(ref, CCI_EV_FREE_COMPLETED), st.active[CCI_POOL_ALL].freed, "completions heard");
    CHECK_EQ_U(count_kind(ref, CCI_EV_OOM), st.num_ooms, "OOMs heard");
    if (cfg.expandable_segments) {
        CHECK(count_kind(ref, CCI_EV_SEGMENT_MAP) > 0 && count_kind(ref, CCI_EV_SEGMENT_UNMAP) > 0,
              "%s: pages mapped and unmapped", conf);
    } else {
        CHECK_EQ_U(count_kind(ref, CCI_EV_SEGMENT_ALLOC), st.segment[CCI_POOL_ALL].allocated, "segments heard");
        CHECK_EQ_U(count_kind(ref, CCI_EV_SEGMENT_FREE), st.segment[CCI_POOL_ALL].freed, "freed segments heard");
    }
    for (int i = 0; i < NL; i++) {
        const listener *l = &ls[i];
        CHECK(!l->overflow, "%s: kept every event", l->name);
        if (!l->batch_door) {
            expect(ref, l->kinds, 2, l->ev, l->n, "every event", l->name);
            CHECK(l->nfast == 0, "%s: no batch", l->name);
        } else {
            expect(ref, l->kinds, 0, l->ev, l->n, "locked sections' events", l->name);
            expect(ref, BLOCK_KINDS, 1, l->fast, l->nfast, "fast paths' events", l->name);
        }
    }
    cci_allocator_destroy(a, 1);
    cci_sim_destroy(sim);
    for (int i = 0; i < NL; i++) {
        free(ls[i].ev);
        free(ls[i].fast);
    }
}

int main(void)
{
    run(1, "");
    run(0, "");
    run(1, "expandable_segments:True");
    return t_finish();
}
