// SPDX-License-Identifier: MIT
// An allocator's life around the policy: creation, the one teardown (destroy and the in-place
// reset share it), fork, observers, and the statistics readers. Kept apart from allocator.c,
// which holds only the decisions of the allocation and free paths.
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "allocator_impl.h"
#include "tcache.h"
#include "expandable.h"
#include "stats_list.h"

cci_allocator *cci_allocator_create(int device, const cci_config *cfg, cci_backend be)
{
    cci_allocator *a = calloc(1, sizeof *a);  // the lock free (lock.h)
    if (!a)
        return NULL;
    static _Atomic uint64_t next_uid = 1;
    a->uid = atomic_fetch_add(&next_uid, 1);
    cci_solo_init(&a->solo);
    a->device = device;
    a->cfg = *cfg;
    a->be = be;
    a->fences = (be.ops->caps & CCI_CAP_FENCES) ? be.ops->fence : NULL;
    a->capacity = be.ops->capacity ? be.ops->capacity(be.ctx, device) : 0;
    size_t base = a->capacity ? a->capacity : SIZE_MAX;
    a->capped = cfg->memory_fraction > 0 && a->capacity;
    a->allowed_max = a->capped ? (size_t)(cfg->memory_fraction * (double)a->capacity) : base;
    a->st.size = sizeof a->st;
    a->st.version = CCI_STATS_VERSION;
    a->st.max_split_size = cfg->max_split_size == SIZE_MAX ? UINT64_MAX : cfg->max_split_size;
    a->st.device_capacity = a->capacity;
    if (cci__exp_init(a) != 0) {
        free(a);
        return NULL;
    }
    return a;
}

void cci__allocator_clear(cci_allocator *a, int release)
{
    cci__tc_forget_all(a);
    cci_live_clear(&a->live);
    cci__fenced_destroy(a, release);
    a->fopen_head = a->fopen_tail = NULL;
    a->fenced_count = 0;
    for (size_t i = 0; i < a->nsegs; i++) {
        cci_segment *s = a->segs[i];
        if (s->vmm)  // [expandable]
            cci__exp_segment_destroy(a, s, release);
        else if (release)
            a->be.ops->release(a->be.ctx, a->device, s->addr, s->size);
        for (cci_block *b = s->first, *n; b; b = n) {
            n = b->next;
            free(b);
        }
        free(s);
    }
    a->nsegs = 0;
    while (a->spare) {
        cci_block *b = a->spare;
        a->spare = b->pend_next;
        free(b);
    }
    a->nspare = 0;
    cci_free_set_empty(&a->free_set[0]);
    cci_free_set_empty(&a->free_set[1]);
    cci_layout_free(&a->peak);
    memset(&a->peak, 0, sizeof a->peak);
    a->have_peak = 0;
    cci__exp_fini(a);
}

void cci_allocator_destroy(cci_allocator *a, int release_segments)
{
    if (!a)
        return;
    cci__tc_detach_all(a);
    cci__allocator_clear(a, release_segments);
    cci_free_set_destroy(&a->free_set[0]);
    cci_free_set_destroy(&a->free_set[1]);
    free(a->segs);
    free(a);
}

void cci_allocator_fork_prepare(cci_allocator *a) { cci__lock(a); }
void cci_allocator_fork_parent(cci_allocator *a) { cci__unlock(a); }

void cci_allocator_fork_child(cci_allocator *a)
{
    // The forking thread took the lock in prepare and is the one thread that exists here.
    cci__tc_fork_child(a);
    cci__lock_give(a);
    cci_allocator_destroy(a, 0);
}

// ---- observers ------------------------------------------------------------------------------

void cci__tell(cci_allocator *a, const cci_event *ev, int which) { cci__tell_inline(a, ev, which); }

// The lists cci__tell reads: for each kind and door, the observers that want the kind and listen
// at the door, in the order they were added (the order every event reaches them in). Lock held.
static void rebuild_tell_lists(cci_allocator *a)
{
    memset(a->tell_n, 0, sizeof a->tell_n);
    for (int i = 0; i < a->nobs; i++) {
        int door = a->obs[i].batch ? CCI_TELL_BATCH : CCI_TELL_SERIAL;
        for (int kind = 0; kind < CCI_TELL_KINDS; kind++) {
            if (!(a->obs[i].kinds & (1u << kind)))
                continue;
            for (int which = 1; which <= CCI_TELL_ALL; which++)
                if (which & door)
                    a->tell_at[kind][which][a->tell_n[kind][which]++] =
                        (struct cci_tell_entry){a->obs[i].fn, a->obs[i].ud};
        }
    }
}

void cci__notify(cci_allocator *a, cci_event_kind kind, uint64_t stream, uintptr_t addr, size_t size)
{
    cci__notify_full(a, kind, stream, addr, size, 0);
}

void cci_allocator_thread_cache(cci_allocator *a, int on)
{
    cci__lock(a);
    cci__tc_drain_all(a);
    a->tc_on = on;  // switched off, the caches are empty now and never fill again
    __atomic_store_n(&a->tc_fast, on, __ATOMIC_RELAXED);
    cci__unlock(a);
}

int cci_allocator_add_observer(cci_allocator *a, cci_observer_fn fn, void *ud)
{
    return cci_allocator_add_observer_of(a, fn, ud, ~0u);
}

int cci_allocator_add_observer_of(cci_allocator *a, cci_observer_fn fn, void *ud, unsigned kinds)
{
    return cci_allocator_add_batch_observer(a, fn, NULL, ud, kinds);
}

int cci_allocator_add_batch_observer(cci_allocator *a, cci_observer_fn fn, cci_batch_fn batch, void *ud,
                                     unsigned kinds)
{
    cci__lock(a);
    int rc = -1;
    if (a->nobs < CCI_MAX_OBSERVERS) {
        a->obs[a->nobs].fn = fn;
        a->obs[a->nobs].batch = batch;
        a->obs[a->nobs].ud = ud;
        a->obs[a->nobs].kinds = kinds;
        a->nobs++;
        if (!batch && (kinds & CCI_FAST_KINDS))
            a->nobs_serial_fast++;
        rebuild_tell_lists(a);
        rc = 0;
    }
    cci__unlock(a);
    return rc;
}

void cci_allocator_flush_events(cci_allocator *a)
{
    cci__lock(a);
    cci__unlock(a);
}

void cci_allocator_with_lock(cci_allocator *a, void (*fn)(void *ud), void *ud)
{
    cci__lock(a);
    fn(ud);
    cci__unlock(a);
}

void cci_alloc_stats(cci_allocator *a, cci_stats *out)
{
    cci__lock(a);
    *out = a->st;
    out->largest_free_block = cci__largest_free(a);
    cci_backend_costs(a->be, a->device, out);
    cci__unlock(a);
}

void cci_alloc_reset_peaks(cci_allocator *a)
{
    cci__lock(a);
    // Every counter family of the one list, whether it is per pool (an array) or a single cci_stat.
#define RESET_PEAKS(field, label, per_pool, bytes)                                                 \
    for (size_t i = 0; i < sizeof a->st.field / sizeof(cci_stat); i++)                            \
        ((cci_stat *)&a->st.field)[i].peak = ((cci_stat *)&a->st.field)[i].current;
    CCI_STAT_FAMILIES(RESET_PEAKS)
#undef RESET_PEAKS
    cci__unlock(a);
}

const cci_config *cci_allocator_config(const cci_allocator *a) { return &a->cfg; }
int cci_allocator_device(const cci_allocator *a) { return a->device; }
int cci_allocator_simulated(const cci_allocator *a) { return a->be.ops == cci_sim_backend(NULL).ops; }
