// SPDX-License-Identifier: MIT
// Replays a recorded allocation history through the core: the same requests in the same order,
// each block reusable again at its free_completed event, as it was in the recorded program.
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "replay.h"

#define MAX_DEVICES 64
#define PENDING UINT64_MAX  // map value of a block freed at free_requested, awaiting free_completed
#define HELD 1u             // tag on a map value: a fenced free held until its free_completed

// Open-addressing map from (device, recorded address) to our address. Replays run millions of
// events a second; a malloc per live block would dominate.
typedef struct addr_map {
    uint64_t *keys;  // 0 = empty, UINT64_MAX = deleted
    uint64_t *vals;
    size_t cap, used;
} addr_map;

static uint64_t map_key(uint32_t dev, uint64_t addr) { return (addr ^ ((uint64_t)dev << 56)) | 1ull << 63; }
static size_t map_slot(uint64_t k, size_t cap)
{
    return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
}

static int map_grow(addr_map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 1024;
    uint64_t *k = calloc(cap, sizeof *k), *v = calloc(cap, sizeof *v);
    if (!k || !v) {
        free(k);
        free(v);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] == 0 || m->keys[i] == UINT64_MAX)
            continue;
        size_t j = map_slot(m->keys[i], cap);
        while (k[j])
            j = (j + 1) & (cap - 1);
        k[j] = m->keys[i];
        v[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = k;
    m->vals = v;
    m->cap = cap;
    m->used = 0;
    for (size_t i = 0; i < cap; i++)
        m->used += k[i] != 0;
    return 0;
}

static int map_put(addr_map *m, uint64_t key, uint64_t val)
{
    if ((m->used + 1) * 2 > m->cap && map_grow(m) != 0)
        return -1;
    size_t j = map_slot(key, m->cap);
    while (m->keys[j] && m->keys[j] != UINT64_MAX && m->keys[j] != key)
        j = (j + 1) & (m->cap - 1);
    if (m->keys[j] == 0)
        m->used++;
    m->keys[j] = key;
    m->vals[j] = val;
    return 0;
}

static int map_take(addr_map *m, uint64_t key, uint64_t *val)
{
    if (!m->cap)
        return 0;
    size_t j = map_slot(key, m->cap);
    while (m->keys[j]) {
        if (m->keys[j] == key) {
            *val = m->vals[j];
            m->keys[j] = UINT64_MAX;
            return 1;
        }
        j = (j + 1) & (m->cap - 1);
    }
    return 0;
}

// The deadline is looked at every this many events: a clock read costs ~20 ns, an event ~200 ns.
#define DEADLINE_EVERY 4096

// Fenced replays measure the device's lag in allocations: before each allocation the simulated
// device's clock, which advances at every fence record, is moved on by one fence of our own. The
// allocator's own records then add only a few ticks, so policies that record fences more often are
// not flattered by a device that seems to run faster.
static void device_tick(cci_sim_device *sim)
{
    cci_backend be = cci_sim_backend(sim);
    cci_fence f;
    if (be.ops->fence->record(be.ctx, 0, CCI_STREAM_ALL, &f) == CCI_OK)
        be.ops->fence->release(be.ctx, 0, f);
}

static int past(const struct timespec *deadline)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > deadline->tv_sec || (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec);
}

// Sums one device's VMM counts into the result's: calls and pool figures add up, the bounds and
// the worst free-at-peak are the largest device's.
static void vmm_counts_add(cci_vmm_counts *sum, const cci_vmm_counts *c)
{
    sum->mode = c->mode;
    sum->va_reserves += c->va_reserves;
    sum->va_frees += c->va_frees;
    sum->page_creates += c->page_creates;
    sum->page_releases += c->page_releases;
    sum->maps += c->maps;
    sum->unmaps += c->unmaps;
    sum->unmapped_pages += c->unmapped_pages;
    sum->set_access += c->set_access;
    sum->pool_hits += c->pool_hits;
    sum->reclaims += c->reclaims;
    sum->syncs += c->syncs;
    sum->pool_pages += c->pool_pages;
    sum->pool_bytes += c->pool_bytes;
    sum->pool_bytes_peak += c->pool_bytes_peak;
    sum->deferred_unmaps += c->deferred_unmaps;
    sum->stream_waits += c->stream_waits;
    sum->retiring_bytes += c->retiring_bytes;
    sum->churn_raises += c->churn_raises;
#define MAX_OF(f) (sum->f = c->f > sum->f ? c->f : sum->f)
    MAX_OF(pool_limit);
    MAX_OF(slack);
    MAX_OF(free_at_peak_max);
    MAX_OF(churn_slack);
#undef MAX_OF
}

int cci_replay(const cci_trace *t, const cci_config *cfg, size_t capacity, cci_replay_result *res)
{
    return cci_replay_until(t, cfg, capacity, NULL, res);
}

int cci_replay_until(const cci_trace *t, const cci_config *cfg, size_t capacity, const struct timespec *deadline,
                     cci_replay_result *res)
{
    return cci_replay_opts_until(t, cfg, capacity, NULL, deadline, res);
}

// The first few failures, with the device's state right after the allocator gave up: how much
// the device still had, and the largest free block the allocator held (what a split could use).
static void keep_oom(cci_replay_result *res, size_t i, uint32_t d, uint64_t size, int recorded,
                     const cci_sim_device *sim, cci_allocator *a, size_t cap)
{
    if (res->nfirst_ooms >= CCI_REPLAY_OOMS_KEPT)
        return;
    cci_stats st;
    cci_alloc_stats(a, &st);
    size_t reserved = cci_sim_reserved(sim);
    res->first_ooms[res->nfirst_ooms++] = (cci_replay_oom){
        .event = i, .device = d, .recorded = recorded, .size = size,
        .device_free = cap > reserved ? cap - reserved : 0,
        .reserved = (uint64_t)st.reserved_bytes[CCI_POOL_ALL].current, .largest_free = st.largest_free_block};
}

int cci_replay_opts_until(const cci_trace *t, const cci_config *cfg, size_t capacity,
                          const cci_replay_opts *opts, const struct timespec *deadline, cci_replay_result *res)
{
    memset(res, 0, sizeof *res);
    int fenced = opts && opts->fenced && !cfg->immediate_reuse;
    cci_sim_device *sims[MAX_DEVICES] = {0};
    cci_allocator *allocs[MAX_DEVICES] = {0};
    addr_map map = {0};
    int rc = 0;
    size_t cap = capacity ? capacity : SIZE_MAX / 2;
    for (size_t i = 0; i < t->n && !rc; i++) {
        if (deadline && i % DEADLINE_EVERY == DEADLINE_EVERY - 1 && past(deadline)) {
            rc = 1;  // the statistics below are those of the events replayed so far
            break;
        }
        const cci_trace_event *e = &t->ev[i];
        uint32_t d = e->device % MAX_DEVICES;
        if (!allocs[d]) {
            sims[d] = cci_sim_create(cap);
            if (sims[d] && fenced) {
                cci_sim_set_fence_lag(sims[d], opts->fence_lag);
                cci_sim_set_fence_width(sims[d], opts->fence_streams);
                cci_sim_set_fence_busy(sims[d], opts->fence_busy);
                cci_sim_set_fence_order(sims[d], opts->fence_order && opts->fence_busy <= CCI_FENCE_ORDER_MAX_BUSY);
                // The preload orders at reuse where no side stream is busy (fence_ops.reuse_order).
                cci_sim_set_reuse_order(sims[d], opts->fence_order && opts->fence_busy == 0);
            }
            allocs[d] = sims[d] ? cci_allocator_create((int)d, cfg, cci_sim_backend(sims[d])) : NULL;
            if (!allocs[d]) {
                rc = -1;
                break;
            }
        }
        res->events++;
        uint64_t ours;
        switch (e->action) {
        case CCI_EV_ALLOC: {
            uintptr_t p = 0;
            res->allocs++;
            if (fenced)
                device_tick(sims[d]);
            if (cci_malloc(allocs[d], e->size, e->stream, &p) != CCI_OK) {
                res->failed_allocs++;
                keep_oom(res, i, d, e->size, 0, sims[d], allocs[d], cap);
                break;
            }
            if (map_put(&map, map_key(d, e->addr), p) != 0)
                rc = -1;
            break;
        }
        case CCI_EV_FREE_REQUESTED: {
            // Our recorder's traces: a deferred free's completion was the recording allocator's
            // own batched synchronisation, so the replay's allocator decides it too (same
            // configuration, same moment). Snapshots complete at the program's events.
            const cci_trace_event *nx = i + 1 < t->n ? &t->ev[i + 1] : NULL;
            int at_once =
                nx && nx->action == CCI_EV_FREE_COMPLETED && nx->addr == e->addr && nx->device == e->device;
            if (!t->policy_frees || at_once || !map_take(&map, map_key(d, e->addr), &ours))
                break;
            res->frees++;
            if (fenced) {  // the allocator decides when the device has passed the free
                cci_free(allocs[d], ours, e->stream, CCI_FREE_FENCED);
                if (map_put(&map, map_key(d, e->addr), PENDING) != 0)
                    rc = -1;
                break;
            }
            if (e->free_mode == CCI_FREE_FENCED && !cfg->immediate_reuse) {
                // A fenced free completed when the device had passed its fence: a fact of the
                // run, not of the configuration. Freed now, reusable at its recorded
                // free_completed (the address is kept, tagged: blocks are 512-aligned).
                cci_free(allocs[d], ours, e->stream, CCI_FREE_HELD);
                if (map_put(&map, map_key(d, e->addr), ours | HELD) != 0)
                    rc = -1;
                break;
            }
            cci_free(allocs[d], ours, e->stream, cfg->immediate_reuse ? CCI_FREE_NOW : CCI_FREE_DEFERRED);
            if (map_put(&map, map_key(d, e->addr), PENDING) != 0)
                rc = -1;
            break;
        }
        case CCI_EV_FREE_COMPLETED:
            if (!map_take(&map, map_key(d, e->addr), &ours)) {
                res->unmatched_frees++;
                break;
            }
            if (ours == PENDING)
                break;  // already handed to the allocator at its free_requested
            if (ours & HELD) {  // freed at its free_requested, reusable from now on
                cci_free_complete_held(allocs[d], ours & ~(uint64_t)HELD);
                break;
            }
            res->frees++;
            cci_free(allocs[d], ours, e->stream, fenced ? CCI_FREE_FENCED : CCI_FREE_NOW);
            break;
        case CCI_EV_OOM: {
            // The recorded run tried and failed: try too, so that at the recorded capacity the
            // same caches are flushed. Where it fits here, the program gave up on the block
            // anyway, so it goes straight back.
            uintptr_t p = 0;
            if (cci_malloc(allocs[d], e->size, e->stream, &p) == CCI_OK)
                cci_free(allocs[d], p, e->stream, CCI_FREE_NOW);
            else
                keep_oom(res, i, d, e->size, 1, sims[d], allocs[d], cap);
            break;
        }
        default:
            break;  // our own segments follow from the requests
        }
    }
    for (int d = 0; d < MAX_DEVICES; d++) {
        if (!allocs[d])
            continue;
        cci_stats st;
        cci_alloc_stats(allocs[d], &st);
        if (!res->stats.size)
            res->stats = st;
        res->peak_allocated += (uint64_t)st.allocated_bytes[CCI_POOL_ALL].peak;
        res->peak_reserved += (uint64_t)st.reserved_bytes[CCI_POOL_ALL].peak;
        res->num_device_alloc += st.num_device_alloc;
        res->num_device_free += st.num_device_free;
        res->device_alloc_bytes += (uint64_t)st.reserved_bytes[CCI_POOL_ALL].allocated;
        res->num_ooms += st.num_ooms;
        res->num_alloc_retries += st.num_alloc_retries;
        res->num_fence_records += st.num_fence_records;
        res->num_fence_waits += st.num_fence_waits;
        uint64_t records, blocking, live;
        cci_sim_fence_counts(sims[d], &records, &blocking, &live);
        res->num_blocking_waits += blocking;
        res->num_fence_queries += cci_sim_fence_queries(sims[d]);
        res->num_fence_orders += cci_sim_fence_orders_made(sims[d]);
        res->num_fence_catch_ups += cci_sim_fence_catch_ups(sims[d]);
        uint64_t rf, ro, rr;
        cci_sim_reuse_counts(sims[d], &rf, &ro, &rr);
        res->num_reuse_frees += rf;
        res->num_reuse_orders += ro;
        cci_vmm_counts vc;
        if (cci_alloc_vmm_counts(allocs[d], &vc) == 0)
            vmm_counts_add(&res->vmm, &vc);
        cci_allocator_destroy(allocs[d], 1);
        cci_sim_destroy(sims[d]);
    }
    free(map.keys);
    free(map.vals);
    return rc;
}
