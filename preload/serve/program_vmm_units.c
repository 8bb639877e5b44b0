// SPDX-License-Identifier: MIT
// The bookkeeping of the program's own virtual-memory buffers (program_vmm.c has the calls and says
// what a unit is): the kept and claimed lists, the loose objects, units made, settled, kept and
// given back, the access a unit remembers, and the statistics. All of it runs under cci__pv.lock.
static _Thread_local int hash_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) (hash_oom = 1)

#include "program_vmm_impl.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "real.h"
#include "stats_list.h"

pvmm_state cci__pv = {.lock = PTHREAD_MUTEX_INITIALIZER};
_Atomic int cci__pvmm_used;

void pv_held_add(int device, int64_t d)
{
    device_kept *k = &cci__pv.dev[device];
    k->held = (size_t)((int64_t)k->held + d);
    if (k->held > k->held_peak)
        k->held_peak = k->held;
    cci_stat_change(&k->st.program_vmm_held_bytes, d);
}

int pv_same_prop(const CUmemAllocationProp *a, const CUmemAllocationProp *b)
{
    return a->type == b->type && a->requestedHandleTypes == b->requestedHandleTypes &&
           a->location.type == b->location.type && a->location.id == b->location.id &&
           a->win32HandleMetaData == b->win32HandleMetaData &&
           a->allocFlags.compressionType == b->allocFlags.compressionType &&
           a->allocFlags.gpuDirectRDMACapable == b->allocFlags.gpuDirectRDMACapable &&
           a->allocFlags.usage == b->allocFlags.usage;
}

// ---- the kept list and the claimed list ------------------------------------------------------
// A unit is on at most one list: its device's kept list (the program holds nothing of it), or the
// claimed list (the program took back its handle or its reservation, not yet both and the map).

static void list_unlink(unit_list *l, unit *u)
{
    if (u->older)
        u->older->newer = u->newer;
    else
        l->oldest = u->newer;
    if (u->newer)
        u->newer->older = u->older;
    else
        l->newest = u->older;
    u->older = u->newer = NULL;
}

static void list_push(unit_list *l, unit *u)
{
    u->older = l->newest;
    u->newer = NULL;
    if (l->newest)
        l->newest->newer = u;
    else
        l->oldest = u;
    l->newest = u;
}

static void kept_unlink(unit *u)
{
    device_kept *k = &cci__pv.dev[u->device];
    list_unlink(&k->list, u);
    u->kept = 0;
    k->kept -= u->size;
    cci_stat_change(&k->st.program_vmm_kept_bytes, -(int64_t)u->size);
    pv_held_add(u->device, (int64_t)u->size);
}

static void kept_push(unit *u)
{
    device_kept *k = &cci__pv.dev[u->device];
    list_push(&k->list, u);
    u->kept = 1;
    k->kept += u->size;
    cci_stat_change(&k->st.program_vmm_kept_bytes, (int64_t)u->size);
    pv_held_add(u->device, -(int64_t)u->size);
}

void pv_claimed_unlink(unit *u)
{
    if (u->claimed) {
        list_unlink(&cci__pv.claimed, u);
        u->claimed = 0;
    }
}

// Taken back from the kept list by a create (handle) or a reserve (reservation).
void pv_claim(unit *u)
{
    kept_unlink(u);
    list_push(&cci__pv.claimed, u);
    u->claimed = 1;
}

// ---- loose objects -----------------------------------------------------------------------------

loose_handle *pv_loose_handle_of(CUmemGenericAllocationHandle h)
{
    loose_handle *l;
    HASH_FIND(hh, cci__pv.handles, &h, sizeof h, l);
    return l;
}

loose_range *pv_loose_range_of(CUdeviceptr va)
{
    loose_range *l;
    HASH_FIND(hh, cci__pv.ranges, &va, sizeof va, l);
    return l;
}

// Tracking is best effort: an object we fail to record (no memory) simply passes through.
void pv_add_loose_handle(CUmemGenericAllocationHandle h, size_t size, const CUmemAllocationProp *prop,
                         unsigned refs, int shared)
{
    loose_handle *l = pv_loose_handle_of(h);
    if (l)  // never expected (a live handle's value is unique): the old entry goes
        pv_drop_loose_handle(l);
    l = calloc(1, sizeof *l);
    if (!l)
        return;
    *l = (loose_handle){.h = h, .size = size, .prop = *prop, .device = prop->location.id, .refs = refs,
                        .shared = shared};
    hash_oom = 0;
    HASH_ADD(hh, cci__pv.handles, h, sizeof l->h, l);
    if (hash_oom) {
        free(l);
        return;
    }
    pv_held_add(l->device, (int64_t)size);
}

void pv_drop_loose_handle(loose_handle *l)
{
    HASH_DELETE(hh, cci__pv.handles, l);
    pv_held_add(l->device, -(int64_t)l->size);
    free(l);
}

void pv_add_loose_range(CUdeviceptr va, size_t size)
{
    loose_range *l = pv_loose_range_of(va);
    if (l) {  // one the driver handed out again after a free that failed to tell us
        l->size = size;
        return;
    }
    l = calloc(1, sizeof *l);
    if (!l)
        return;
    l->va = va;
    l->size = size;
    hash_oom = 0;
    HASH_ADD(hh, cci__pv.ranges, va, sizeof l->va, l);
    if (hash_oom)
        free(l);
}

void pv_drop_loose_range(loose_range *l)
{
    HASH_DELETE(hh, cci__pv.ranges, l);
    free(l);
}

// ---- units -------------------------------------------------------------------------------------

unit *pv_unit_at(CUdeviceptr va)
{
    unit *u;
    HASH_FIND(by_va, cci__pv.units_by_va, &va, sizeof va, u);
    return u;
}

// Whether u's reservation meets [va, va + size).
static int meets(const unit *u, CUdeviceptr va, size_t size)
{
    return u->va < va + size && va < u->va + u->va_size;
}

// The unit whose reservation holds va: its start by the hash, an address inside it by a walk.
unit *pv_unit_containing(CUdeviceptr va)
{
    unit *u = pv_unit_at(va), *tmp;
    if (u)
        return u;
    HASH_ITER(by_va, cci__pv.units_by_va, u, tmp) {
        if (meets(u, va, 1))
            return u;
    }
    return NULL;
}

unit *pv_unit_of(CUmemGenericAllocationHandle h)
{
    unit *u;
    HASH_FIND(by_h, cci__pv.units_by_h, &h, sizeof h, u);
    return u;
}

static void unit_forget(unit *u)
{
    if (u->kept)
        kept_unlink(u);
    pv_claimed_unlink(u);
    HASH_DELETE(by_va, cci__pv.units_by_va, u);
    HASH_DELETE(by_h, cci__pv.units_by_h, u);
    pv_held_add(u->device, -(int64_t)u->size);
    free(u);
}

// Makes the real state what the program believes and forgets the unit: the unmap, free and
// release it already made are made now; what it still holds becomes loose again.
void pv_settle(unit *u)
{
    const cci_real_driver *t = cci_real_drv();
    cci_log(CCI_LOG_DEBUG, "program VMM: buffer %#llx (%zu bytes) settled: program holds %u references%s%s%s",
            (unsigned long long)u->va, u->size, u->prog_refs, u->prog_mapped ? ", the mapping" : "",
            u->prog_va ? ", the reservation" : "", u->shared ? "; shared" : "");
    // References lent without a real one become real while the mapping still is (a retain asks by
    // address); from here on the driver counts every one.
    for (; u->lent_refs; u->lent_refs--) {
        CUmemGenericAllocationHandle again;
        if (t->cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)u->va) != CUDA_SUCCESS)
            cci_log(CCI_LOG_WARNING, "program VMM: could not take back a reference to buffer %#llx: a later "
                    "cuMemRelease of it may fail", (unsigned long long)u->va);
    }
    if (!u->prog_mapped)
        t->cuMemUnmap(u->va, u->size);
    if (u->prog_refs == 0)
        t->cuMemRelease(u->h);
    if (!u->prog_va)
        t->cuMemAddressFree(u->va, u->va_size);
    CUdeviceptr va = u->va;
    size_t va_size = u->va_size;
    int prog_va = u->prog_va;
    CUmemGenericAllocationHandle h = u->h;
    size_t size = u->size;
    CUmemAllocationProp prop = u->prop;
    unsigned refs = u->prog_refs;
    int shared = u->shared;
    unit_forget(u);
    if (refs)
        pv_add_loose_handle(h, size, &prop, refs, shared);
    if (prog_va)
        pv_add_loose_range(va, va_size);
}

// Every unit whose range meets [va, va + size): for the calls over ranges that are not one unit.
void pv_settle_overlapping(CUdeviceptr va, size_t size)
{
    unit *u, *tmp;
    HASH_ITER(by_va, cci__pv.units_by_va, u, tmp) {
        if (meets(u, va, size))
            pv_settle(u);
    }
}

void pv_mark_shared_overlapping(CUdeviceptr va, size_t size)
{
    unit *u, *tmp;
    HASH_ITER(by_va, cci__pv.units_by_va, u, tmp) {
        if (meets(u, va, size))
            u->shared = 1;
    }
}

// The program let go of all of it: kept, unless it was shared (then torn down for real now).
void pv_maybe_keep(unit *u)
{
    if (u->prog_refs || u->prog_mapped || u->prog_va)
        return;
    pv_claimed_unlink(u);
    if (u->shared)
        pv_settle(u);
    else
        kept_push(u);
}

static void give_back(unit *u)
{
    cci__pv.dev[u->device].st.program_vmm_given_back++;
    pv_settle(u);  // kept: the program holds nothing, so all three calls are made
}

// Room for `size` new bytes on `device`: the oldest kept buffers go while what we would hold
// passes half as much again as the program's own high-water mark (or the new buffer's, if that is
// higher). The half: with no slack at all a training step that asks its buffers in another order
// than the last one gives back the very buffers it asks next (XLA on an H200: 65 % of the bytes
// reused, against 98.4 % with the half and 98.6 % unbounded, at the same peak; docs/benchmarks.md).
void pv_make_room(int device, size_t size)
{
    device_kept *k = &cci__pv.dev[device];
    size_t target = k->held_peak > k->held + size ? k->held_peak : k->held + size;
    target += k->held_peak / 2;
    while (k->list.oldest && k->held + k->kept + size > target)
        give_back(k->list.oldest);
}

void pv_give_back_all(int device)
{
    while (cci__pv.dev[device].list.oldest)
        give_back(cci__pv.dev[device].list.oldest);
}

// A new unit: h and [ptr, ptr + size) are both loose and just became one whole mapping.
void pv_make_unit(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle h)
{
    loose_handle *lh = pv_loose_handle_of(h);
    loose_range *lr = pv_loose_range_of(ptr);
    if (!lh || !lr || lh->size != size || lr->size != size)
        return;
    unit *u = calloc(1, sizeof *u);
    if (!u)
        return;
    *u = (unit){.va = ptr, .va_size = size, .h = h, .size = size, .prop = lh->prop, .device = lh->device,
                .prog_refs = lh->refs, .prog_mapped = 1, .prog_va = 1, .shared = lh->shared};
    pv_drop_loose_handle(lh);  // first, so that the held bytes never count it twice
    pv_drop_loose_range(lr);
    hash_oom = 0;
    HASH_ADD(by_va, cci__pv.units_by_va, va, sizeof u->va, u);
    if (!hash_oom) {
        HASH_ADD(by_h, cci__pv.units_by_h, h, sizeof u->h, u);
        if (hash_oom)
            HASH_DELETE(by_va, cci__pv.units_by_va, u);
    }
    if (hash_oom) {  // untracked from now on: its calls pass through
        free(u);
        return;
    }
    pv_held_add(u->device, (int64_t)size);
}

// The flags last granted to `loc` over the unit, or -1 when not known. Access is per location:
// granting one device leaves the others as they were, so XLA's loop over the peers (one call a
// device) finds each of them granted already when the buffer comes back.
static int access_of(const unit *u, const CUmemLocation *loc)
{
    for (size_t i = 0; i < u->naccess; i++)
        if (u->access[i].location.type == loc->type && u->access[i].location.id == loc->id)
            return u->access[i].flags;
    return -1;
}

int pv_access_granted(const unit *u, const CUmemAccessDesc *desc, size_t count)
{
    if (!desc || !count)
        return 0;
    for (size_t i = 0; i < count; i++)
        if (access_of(u, &desc[i].location) != desc[i].flags)
            return 0;
    return 1;
}

void pv_access_note(unit *u, const CUmemAccessDesc *desc, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        size_t k = 0;
        while (k < u->naccess && !(u->access[k].location.type == desc[i].location.type &&
                                   u->access[k].location.id == desc[i].location.id))
            k++;
        if (k == MAX_ACCESS)
            continue;  // not remembered: its next grant goes to the driver again
        u->access[k] = desc[i];
        if (k == u->naccess)
            u->naccess++;
    }
}

void pv_mark_shared_handle(CUmemGenericAllocationHandle h)
{
    unit *u = pv_unit_of(h);
    loose_handle *l;
    if (u)
        u->shared = 1;
    else if ((l = pv_loose_handle_of(h)))
        l->shared = 1;
}

// ---- teardown and statistics -------------------------------------------------------------------

void cci_pvmm_empty(int device)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return;
    pthread_mutex_lock(&cci__pv.lock);
    pv_give_back_all(device);
    pthread_mutex_unlock(&cci__pv.lock);
}

void cci_pvmm_drop_device(int device)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return;
    pthread_mutex_lock(&cci__pv.lock);
    pv_give_back_all(device);
    unit *u, *tmp;
    HASH_ITER(by_va, cci__pv.units_by_va, u, tmp) {
        if (u->device == device)
            pv_settle(u);
    }
    loose_handle *l, *ltmp;
    HASH_ITER(hh, cci__pv.handles, l, ltmp) {
        if (l->device == device)
            pv_drop_loose_handle(l);
    }
    pthread_mutex_unlock(&cci__pv.lock);
}

static void stat_sum(cci_stat *to, const cci_stat *from)
{
    to->current += from->current;
    to->peak += from->peak;  // a bound: the devices need not have peaked together
    to->allocated += from->allocated;
    to->freed += from->freed;
}

void cci_pvmm_stats(int device, cci_stats *out)
{
    if (device >= CCI_PL_MAX_DEVICES || device < -1)
        return;
#define CCI_X_FAMILY(field, ...) out->field = (cci_stat){0};
#define CCI_X_COUNT(field, ...) out->field = 0;
    CCI_STAT_PROGRAM_VMM_FAMILIES(CCI_X_FAMILY)
    CCI_STAT_PROGRAM_VMM_COUNTS(CCI_X_COUNT)
#undef CCI_X_FAMILY
#undef CCI_X_COUNT
    pthread_mutex_lock(&cci__pv.lock);
    for (int d = 0; d < CCI_PL_MAX_DEVICES; d++) {
        if (device >= 0 && d != device)
            continue;
        const cci_stats *s = &cci__pv.dev[d].st;
#define CCI_X_FAMILY(field, ...) stat_sum(&out->field, &s->field);
#define CCI_X_COUNT(field, ...) out->field += s->field;
        CCI_STAT_PROGRAM_VMM_FAMILIES(CCI_X_FAMILY)
        CCI_STAT_PROGRAM_VMM_COUNTS(CCI_X_COUNT)
#undef CCI_X_FAMILY
#undef CCI_X_COUNT
    }
    pthread_mutex_unlock(&cci__pv.lock);
}

// A fork child cannot use its parent's CUDA objects: everything is forgotten (no CUDA call), and
// the lock, which another parent thread may have held at the fork, starts afresh.
void cci_pvmm_atfork_child(void)
{
    pthread_mutex_init(&cci__pv.lock, NULL);
    unit *u, *tmp;
    HASH_ITER(by_va, cci__pv.units_by_va, u, tmp) {
        HASH_DELETE(by_va, cci__pv.units_by_va, u);
        HASH_DELETE(by_h, cci__pv.units_by_h, u);
        free(u);
    }
    loose_handle *lh, *lhtmp;
    HASH_ITER(hh, cci__pv.handles, lh, lhtmp) {
        HASH_DELETE(hh, cci__pv.handles, lh);
        free(lh);
    }
    loose_range *lr, *lrtmp;
    HASH_ITER(hh, cci__pv.ranges, lr, lrtmp) {
        HASH_DELETE(hh, cci__pv.ranges, lr);
        free(lr);
    }
    cci__pv.claimed = (unit_list){0};
    memset(cci__pv.dev, 0, sizeof cci__pv.dev);
    atomic_store(&cci__pvmm_used, 0);
}

int cci_pvmm_used(void)
{
    return atomic_load_explicit(&cci__pvmm_used, memory_order_relaxed);
}

