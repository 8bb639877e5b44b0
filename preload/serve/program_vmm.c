// SPDX-License-Identifier: MIT
// The program's own virtual-memory allocations kept for reuse (program_vmm.h says what and why).
//
// A buffer we can keep is a unit: one handle created through us, mapped whole at the start of a
// reservation made through us of exactly its size. Three flags say what the program holds of it:
// its handle references, its mapping and its reservation. The real state behind a unit never
// changes while we track it: the handle mapped, access granted, the reservation held, and one real
// handle reference at least (the program's, or ours once it released all of its own). A unit that
// the program holds nothing of is kept; a new buffer of the same shape takes it back piece by
// piece, in whatever order the program asks (XLA: create, reserve, map, access; NCCL releases its
// handle right after the map). Anything else that touches a unit first settles it: the calls the
// program already made are made for real, the unit is forgotten, and the call goes on to CUDA.
//
// Handles and reservations made through us that are not (yet) part of a unit are loose: tracked
// only so that a later map can make a unit of them. One lock for all of it: these calls cost the
// driver microseconds each, so none of them is a fast path.
static _Thread_local int hash_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) (hash_oom = 1)

#include "program_vmm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "cuda_context.h"
#include "levels.h"
#include "log.h"
#include "real.h"
#include "settings.h"
#include "stats_list.h"

enum { MAX_ACCESS = 4 };  // access descriptors remembered per unit (one per device that maps it)

typedef struct unit {
    CUdeviceptr va;
    size_t va_size;
    CUmemGenericAllocationHandle h;
    size_t size;
    CUmemAllocationProp prop;
    int device;
    unsigned prog_refs;  // the program's references to h: creates + retains - releases
    int prog_mapped;     // the program believes h is mapped at va
    int prog_va;         // the program believes it holds the reservation
    int shared;          // seen by another process or a multicast object: never kept
    int kept;            // on the device's kept list
    int claimed;         // on the claimed list
    size_t naccess;      // the access last granted over exactly the unit (0: not known)
    CUmemAccessDesc access[MAX_ACCESS];
    struct unit *older, *newer;  // the kept list
    UT_hash_handle by_va, by_h;
} unit;

typedef struct loose_handle {
    CUmemGenericAllocationHandle h;
    size_t size;
    CUmemAllocationProp prop;
    int device;
    unsigned refs;
    int shared;
    UT_hash_handle hh;
} loose_handle;

typedef struct loose_range {
    CUdeviceptr va;
    size_t size;
    UT_hash_handle hh;
} loose_range;

typedef struct unit_list {
    struct unit *oldest, *newest;
} unit_list;

typedef struct device_kept {
    unit_list list;  // the kept units, oldest first
    size_t held, held_peak;  // bytes of handles the program holds (units not kept, loose handles)
    size_t kept;
    cci_stats st;  // the program_vmm_* fields only
} device_kept;

static struct {
    pthread_mutex_t lock;
    unit *units_by_va, *units_by_h;
    loose_handle *handles;
    loose_range *ranges;
    unit_list claimed;
    device_kept dev[CCI_PL_MAX_DEVICES];
} pv = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Atomic int keep_on = -1;  // -1 until start-up decided it
static _Atomic int used;

void cci_pvmm_start(const cci_settings *s)
{
    atomic_store(&keep_on, s->keep_mappings ? 1 : 0);
}

static const cci_real_driver *drv(void)
{
    return cci_real_drv();
}

// 1 when the calls are ours to track: the driver level serving and the setting on. Asked once per
// call, so a process that decides late tracks only what it made after (untracked objects pass).
static int on(void)
{
    return cci_pl_serving(CCI_LEVEL_DRIVER) && atomic_load_explicit(&keep_on, memory_order_relaxed) == 1;
}

static void stat_add(cci_stat *s, int64_t d)
{
    s->current += d;
    if (d > 0)
        s->allocated += d;
    else
        s->freed -= d;
    if (s->current > s->peak)
        s->peak = s->current;
}

static void held_add(int device, int64_t d)
{
    device_kept *k = &pv.dev[device];
    k->held = (size_t)((int64_t)k->held + d);
    if (k->held > k->held_peak)
        k->held_peak = k->held;
    stat_add(&k->st.program_vmm_held_bytes, d);
}

static int same_prop(const CUmemAllocationProp *a, const CUmemAllocationProp *b)
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
    device_kept *k = &pv.dev[u->device];
    list_unlink(&k->list, u);
    u->kept = 0;
    k->kept -= u->size;
    stat_add(&k->st.program_vmm_kept_bytes, -(int64_t)u->size);
    held_add(u->device, (int64_t)u->size);
}

static void kept_push(unit *u)
{
    device_kept *k = &pv.dev[u->device];
    list_push(&k->list, u);
    u->kept = 1;
    k->kept += u->size;
    stat_add(&k->st.program_vmm_kept_bytes, (int64_t)u->size);
    held_add(u->device, -(int64_t)u->size);
}

static void claimed_unlink(unit *u)
{
    if (u->claimed) {
        list_unlink(&pv.claimed, u);
        u->claimed = 0;
    }
}

// Taken back from the kept list by a create (handle) or a reserve (reservation).
static void claim(unit *u)
{
    kept_unlink(u);
    list_push(&pv.claimed, u);
    u->claimed = 1;
}

// ---- loose objects -----------------------------------------------------------------------------

static loose_handle *loose_handle_of(CUmemGenericAllocationHandle h)
{
    loose_handle *l;
    HASH_FIND(hh, pv.handles, &h, sizeof h, l);
    return l;
}

static loose_range *loose_range_of(CUdeviceptr va)
{
    loose_range *l;
    HASH_FIND(hh, pv.ranges, &va, sizeof va, l);
    return l;
}

// Tracking is best effort: an object we fail to record (no memory) simply passes through.
static void add_loose_handle(CUmemGenericAllocationHandle h, size_t size, const CUmemAllocationProp *prop,
                             unsigned refs, int shared)
{
    loose_handle *l = calloc(1, sizeof *l);
    if (!l)
        return;
    *l = (loose_handle){.h = h, .size = size, .prop = *prop, .device = prop->location.id, .refs = refs,
                        .shared = shared};
    hash_oom = 0;
    HASH_ADD(hh, pv.handles, h, sizeof l->h, l);
    if (hash_oom) {
        free(l);
        return;
    }
    held_add(l->device, (int64_t)size);
}

static void drop_loose_handle(loose_handle *l)
{
    HASH_DELETE(hh, pv.handles, l);
    held_add(l->device, -(int64_t)l->size);
    free(l);
}

static void add_loose_range(CUdeviceptr va, size_t size)
{
    loose_range *l = calloc(1, sizeof *l);
    if (!l)
        return;
    l->va = va;
    l->size = size;
    hash_oom = 0;
    HASH_ADD(hh, pv.ranges, va, sizeof l->va, l);
    if (hash_oom)
        free(l);
}

static void drop_loose_range(loose_range *l)
{
    HASH_DELETE(hh, pv.ranges, l);
    free(l);
}

// ---- units -------------------------------------------------------------------------------------

static unit *unit_at(CUdeviceptr va)
{
    unit *u;
    HASH_FIND(by_va, pv.units_by_va, &va, sizeof va, u);
    return u;
}

static unit *unit_of(CUmemGenericAllocationHandle h)
{
    unit *u;
    HASH_FIND(by_h, pv.units_by_h, &h, sizeof h, u);
    return u;
}

static void unit_forget(unit *u)
{
    if (u->kept)
        kept_unlink(u);
    claimed_unlink(u);
    HASH_DELETE(by_va, pv.units_by_va, u);
    HASH_DELETE(by_h, pv.units_by_h, u);
    held_add(u->device, -(int64_t)u->size);
    free(u);
}

// Makes the real state what the program believes and forgets the unit: the unmap, free and
// release it already made are made now; what it still holds becomes loose again.
static void settle(unit *u)
{
    const cci_real_driver *t = drv();
    cci_log(CCI_LOG_DEBUG, "program VMM: buffer %#llx (%zu bytes) settled: program holds %u references%s%s%s",
            (unsigned long long)u->va, u->size, u->prog_refs, u->prog_mapped ? ", the mapping" : "",
            u->prog_va ? ", the reservation" : "", u->shared ? "; shared" : "");
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
        add_loose_handle(h, size, &prop, refs, shared);
    if (prog_va)
        add_loose_range(va, va_size);
}

// Every unit whose range meets [va, va + size): for the calls over ranges that are not one unit.
static void settle_overlapping(CUdeviceptr va, size_t size)
{
    unit *u, *tmp;
    HASH_ITER(by_va, pv.units_by_va, u, tmp) {
        if (u->va < va + size && va < u->va + u->va_size)
            settle(u);
    }
}

static void mark_shared_overlapping(CUdeviceptr va, size_t size)
{
    unit *u, *tmp;
    HASH_ITER(by_va, pv.units_by_va, u, tmp) {
        if (u->va < va + size && va < u->va + u->va_size)
            u->shared = 1;
    }
}

// The program let go of all of it: kept, unless it was shared (then torn down for real now).
static void maybe_keep(unit *u)
{
    if (u->prog_refs || u->prog_mapped || u->prog_va)
        return;
    claimed_unlink(u);
    if (u->shared)
        settle(u);
    else
        kept_push(u);
}

static void give_back(unit *u)
{
    pv.dev[u->device].st.program_vmm_given_back++;
    settle(u);  // kept: the program holds nothing, so all three calls are made
}

// Room for `size` new bytes on `device`: the oldest kept buffers go while what we would hold
// passes half as much again as the program's own high-water mark (or the new buffer's, if that is
// higher). The half: with no slack at all a training step that asks its buffers in another order
// than the last one gives back the very buffers it asks next (XLA on an H200: 65 % of the bytes
// reused, against 98.4 % with the half and 98.6 % unbounded, at the same peak; docs/benchmarks.md).
static void make_room(int device, size_t size)
{
    device_kept *k = &pv.dev[device];
    size_t target = k->held_peak > k->held + size ? k->held_peak : k->held + size;
    target += k->held_peak / 2;
    while (k->list.oldest && k->held + k->kept + size > target)
        give_back(k->list.oldest);
}

static void give_back_all(int device)
{
    while (pv.dev[device].list.oldest)
        give_back(pv.dev[device].list.oldest);
}

// ---- the calls ---------------------------------------------------------------------------------

static int trackable(const CUmemAllocationProp *prop, unsigned long long flags)
{
    return prop && !flags && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
           prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
           (unsigned)prop->location.id < CCI_PL_MAX_DEVICES;
}

CUresult cci_pvmm_create(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                         unsigned long long flags)
{
    const cci_real_driver *t = drv();
    if (!t->cuMemCreate)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!h || !on() || !trackable(prop, flags))
        return t->cuMemCreate(h, size, prop, flags);
    int device = prop->location.id;
    device_kept *k = &pv.dev[device];
    atomic_store_explicit(&used, 1, memory_order_relaxed);
    pthread_mutex_lock(&pv.lock);
    k->st.program_vmm_creates++;
    k->st.program_vmm_create_bytes += size;
    // Its reservation taken back first (and not its handle yet): that unit, if the shape agrees;
    // else the newest kept unit of this shape.
    unit *take = NULL;
    for (unit *u = pv.claimed.newest; u && !take; u = u->older)
        if (u->prog_va && !u->prog_refs && u->size == size && same_prop(&u->prop, prop))
            take = u;
    for (unit *u = k->list.newest; u && !take; u = u->older)
        if (u->size == size && same_prop(&u->prop, prop))
            take = u;
    if (take) {
        if (take->kept)
            claim(take);
        take->prog_refs = 1;
        k->st.program_vmm_reused++;
        k->st.program_vmm_reused_bytes += size;
        *h = take->h;
        cci_log(CCI_LOG_DEBUG, "program VMM: cuMemCreate(%zu) on device %d answered with a kept buffer "
                "(handle %#llx of %#llx)", size, device, (unsigned long long)take->h, (unsigned long long)take->va);
        pthread_mutex_unlock(&pv.lock);
        return CUDA_SUCCESS;
    }
    make_room(device, size);
    CUresult r = t->cuMemCreate(h, size, prop, flags);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && k->list.oldest) {
        give_back_all(device);
        r = t->cuMemCreate(h, size, prop, flags);
    }
    if (r == CUDA_SUCCESS)
        add_loose_handle(*h, size, prop, 1, 0);
    cci_log(CCI_LOG_DEBUG, "program VMM: cuMemCreate(%zu, handle types %#x) on device %d: new (CUresult %d)", size,
            (unsigned)prop->requestedHandleTypes, device, (int)r);
    pthread_mutex_unlock(&pv.lock);
    return r;
}

CUresult cci_pvmm_release(CUmemGenericAllocationHandle h)
{
    const cci_real_driver *t = drv();
    if (!t->cuMemRelease)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&pv.lock);
    unit *u = unit_of(h);
    if (u) {
        CUresult r = CUDA_SUCCESS;
        if (!u->prog_refs || u->kept)
            r = CUDA_ERROR_INVALID_VALUE;  // released already: the driver would not know it either
        else if (u->prog_refs-- > 1)
            r = t->cuMemRelease(h);  // one real reference per program reference, ours the last
        else
            maybe_keep(u);
        pthread_mutex_unlock(&pv.lock);
        return r;
    }
    loose_handle *l = loose_handle_of(h);
    if (l && --l->refs == 0)
        drop_loose_handle(l);
    pthread_mutex_unlock(&pv.lock);
    return t->cuMemRelease(h);
}

CUresult cci_pvmm_reserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags)
{
    const cci_real_driver *t = drv();
    if (!t->cuMemAddressReserve)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ptr || !on() || flags)
        return t->cuMemAddressReserve(ptr, size, align, addr, flags);
    pthread_mutex_lock(&pv.lock);
    if (!addr) {
        // A unit whose handle the program took back has its reservation first; else (the
        // reservation asked before the handle) the newest kept unit of that size on any device.
        unit *take = NULL;
        for (unit *u = pv.claimed.newest; u && !take; u = u->older)
            if (u->prog_refs && !u->prog_va && u->va_size == size && !(align && u->va % align))
                take = u;
        for (int d = 0; d < CCI_PL_MAX_DEVICES && !take; d++)
            for (unit *u = pv.dev[d].list.newest; u && !take; u = u->older)
                if (u->va_size == size && !(align && u->va % align))
                    take = u;
        if (take) {
            if (take->kept)
                claim(take);
            take->prog_va = 1;
            *ptr = take->va;
            pthread_mutex_unlock(&pv.lock);
            return CUDA_SUCCESS;
        }
    }
    CUresult r = t->cuMemAddressReserve(ptr, size, align, addr, flags);
    if (r == CUDA_SUCCESS)
        add_loose_range(*ptr, size);
    pthread_mutex_unlock(&pv.lock);
    return r;
}

CUresult cci_pvmm_address_free(CUdeviceptr ptr, size_t size)
{
    const cci_real_driver *t = drv();
    if (!t->cuMemAddressFree)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&pv.lock);
    unit *u = unit_at(ptr);
    if (u && u->prog_va && !u->prog_mapped && size == u->va_size) {
        u->prog_va = 0;
        maybe_keep(u);
        pthread_mutex_unlock(&pv.lock);
        return CUDA_SUCCESS;
    }
    loose_range *l = loose_range_of(ptr);
    if (l && l->size == size)
        drop_loose_range(l);
    settle_overlapping(ptr, size);
    pthread_mutex_unlock(&pv.lock);
    return t->cuMemAddressFree(ptr, size);
}

// A new unit: h and [ptr, ptr + size) are both loose and just became one whole mapping.
static void make_unit(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle h)
{
    loose_handle *lh = loose_handle_of(h);
    loose_range *lr = loose_range_of(ptr);
    if (!lh || !lr || lh->size != size || lr->size != size)
        return;
    unit *u = calloc(1, sizeof *u);
    if (!u)
        return;
    *u = (unit){.va = ptr, .va_size = size, .h = h, .size = size, .prop = lh->prop, .device = lh->device,
                .prog_refs = lh->refs, .prog_mapped = 1, .prog_va = 1, .shared = lh->shared};
    drop_loose_handle(lh);  // first, so that the held bytes never count it twice
    drop_loose_range(lr);
    hash_oom = 0;
    HASH_ADD(by_va, pv.units_by_va, va, sizeof u->va, u);
    if (!hash_oom) {
        HASH_ADD(by_h, pv.units_by_h, h, sizeof u->h, u);
        if (hash_oom)
            HASH_DELETE(by_va, pv.units_by_va, u);
    }
    if (hash_oom) {  // untracked from now on: its calls pass through
        free(u);
        return;
    }
    held_add(u->device, (int64_t)size);
}

CUresult cci_pvmm_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                      unsigned long long flags)
{
    const cci_real_driver *t = drv();
    if (!t->cuMemMap)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&pv.lock);
    unit *u = unit_at(ptr);
    if (u && u->h == h && u->prog_va && u->prog_refs && !u->prog_mapped && !u->kept && size == u->size &&
        !offset && !flags) {
        u->prog_mapped = 1;  // it never stopped being mapped
        claimed_unlink(u);
        pthread_mutex_unlock(&pv.lock);
        return CUDA_SUCCESS;
    }
    if ((u = unit_of(h)))
        settle(u);
    settle_overlapping(ptr, size);
    CUresult r = t->cuMemMap(ptr, size, offset, h, flags);
    if (r == CUDA_SUCCESS && !offset && !flags)
        make_unit(ptr, size, h);
    pthread_mutex_unlock(&pv.lock);
    return r;
}

CUresult cci_pvmm_unmap(CUdeviceptr ptr, size_t size)
{
    const cci_real_driver *t = drv();
    if (!t->cuMemUnmap)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&pv.lock);
    unit *u = unit_at(ptr);
    if (u && u->prog_mapped && size == u->size) {
        u->prog_mapped = 0;
        maybe_keep(u);
        pthread_mutex_unlock(&pv.lock);
        return CUDA_SUCCESS;
    }
    settle_overlapping(ptr, size);
    pthread_mutex_unlock(&pv.lock);
    return t->cuMemUnmap(ptr, size);
}

static int same_access(const unit *u, const CUmemAccessDesc *desc, size_t count)
{
    return u->naccess && u->naccess == count && !memcmp(u->access, desc, count * sizeof *desc);
}

CUresult cci_pvmm_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    const cci_real_driver *t = drv();
    if (!t->cuMemSetAccess)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&pv.lock);
    unit *u = unit_at(ptr);
    int whole = u && size == u->size && u->prog_mapped;
    if (whole && desc && same_access(u, desc, count)) {
        pthread_mutex_unlock(&pv.lock);
        return CUDA_SUCCESS;  // granted already, before the program last let go of it
    }
    if (!whole) {  // forget what we knew of every unit the range meets
        unit *x, *tmp;
        HASH_ITER(by_va, pv.units_by_va, x, tmp) {
            if (x->va < ptr + size && ptr < x->va + x->va_size)
                x->naccess = 0;
        }
    }
    CUresult r = t->cuMemSetAccess(ptr, size, desc, count);
    if (whole) {
        u->naccess = 0;
        if (r == CUDA_SUCCESS && desc && count && count <= MAX_ACCESS) {
            memcpy(u->access, desc, count * sizeof *desc);
            u->naccess = count;
        }
    }
    pthread_mutex_unlock(&pv.lock);
    return r;
}

CUresult cci_pvmm_retain(CUmemGenericAllocationHandle *h, void *addr)
{
    const cci_real_driver *t = drv();
    if (!t->cuMemRetainAllocationHandle)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&pv.lock);
    CUresult r = t->cuMemRetainAllocationHandle(h, addr);
    if (r == CUDA_SUCCESS) {
        unit *u = unit_of(*h);
        loose_handle *l;
        if (u && !u->prog_mapped) {
            t->cuMemRelease(*h);  // the program unmapped it: the driver would find no mapping here
            r = CUDA_ERROR_INVALID_VALUE;
        } else if (u) {
            if (u->prog_refs++ == 0)
                t->cuMemRelease(*h);  // ours was the one real reference; now the program's is
        } else if ((l = loose_handle_of(*h))) {
            l->refs++;
        }
    }
    pthread_mutex_unlock(&pv.lock);
    return r;
}

static void mark_shared_handle(CUmemGenericAllocationHandle h)
{
    unit *u = unit_of(h);
    loose_handle *l;
    if (u)
        u->shared = 1;
    else if ((l = loose_handle_of(h)))
        l->shared = 1;
}

CUresult cci_pvmm_export(void *shareable, CUmemGenericAllocationHandle h, int type, unsigned long long flags)
{
    const cci_real_driver *t = drv();
    if (!t->cuMemExportToShareableHandle)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&pv.lock);
    mark_shared_handle(h);  // before the call: once the other side has it, it may map it
    pthread_mutex_unlock(&pv.lock);
    return t->cuMemExportToShareableHandle(shareable, h, type, flags);
}

CUresult cci_pvmm_range_handle(void *handle, CUdeviceptr ptr, size_t size, int type, unsigned long long flags)
{
    const cci_real_driver *t = drv();
    if (!t->cuMemGetHandleForAddressRange)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&pv.lock);
    mark_shared_overlapping(ptr, size);
    pthread_mutex_unlock(&pv.lock);
    return t->cuMemGetHandleForAddressRange(handle, ptr, size, type, flags);
}

CUresult cci_pvmm_multicast_bind_mem(CUmemGenericAllocationHandle mc, size_t mc_offset,
                                     CUmemGenericAllocationHandle h, size_t offset, size_t size,
                                     unsigned long long flags)
{
    const cci_real_driver *t = drv();
    if (!t->cuMulticastBindMem)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&pv.lock);
    mark_shared_handle(h);
    pthread_mutex_unlock(&pv.lock);
    return t->cuMulticastBindMem(mc, mc_offset, h, offset, size, flags);
}

CUresult cci_pvmm_multicast_bind_addr(CUmemGenericAllocationHandle mc, size_t mc_offset, CUdeviceptr ptr,
                                      size_t size, unsigned long long flags)
{
    const cci_real_driver *t = drv();
    if (!t->cuMulticastBindAddr)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&pv.lock);
    mark_shared_overlapping(ptr, size);
    pthread_mutex_unlock(&pv.lock);
    return t->cuMulticastBindAddr(mc, mc_offset, ptr, size, flags);
}

// ---- teardown and statistics -------------------------------------------------------------------

void cci_pvmm_empty(int device)
{
    pthread_mutex_lock(&pv.lock);
    for (int d = 0; d < CCI_PL_MAX_DEVICES; d++)
        if (device < 0 || d == device)
            give_back_all(d);
    pthread_mutex_unlock(&pv.lock);
}

void cci_pvmm_drop_device(int device)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return;
    pthread_mutex_lock(&pv.lock);
    give_back_all(device);
    unit *u, *tmp;
    HASH_ITER(by_va, pv.units_by_va, u, tmp) {
        if (u->device == device)
            settle(u);
    }
    loose_handle *l, *ltmp;
    HASH_ITER(hh, pv.handles, l, ltmp) {
        if (l->device == device)
            drop_loose_handle(l);
    }
    pthread_mutex_unlock(&pv.lock);
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
    pthread_mutex_lock(&pv.lock);
    for (int d = 0; d < CCI_PL_MAX_DEVICES; d++) {
        if (device >= 0 && d != device)
            continue;
        const cci_stats *s = &pv.dev[d].st;
#define CCI_X_FAMILY(field, ...) stat_sum(&out->field, &s->field);
#define CCI_X_COUNT(field, ...) out->field += s->field;
        CCI_STAT_PROGRAM_VMM_FAMILIES(CCI_X_FAMILY)
        CCI_STAT_PROGRAM_VMM_COUNTS(CCI_X_COUNT)
#undef CCI_X_FAMILY
#undef CCI_X_COUNT
    }
    pthread_mutex_unlock(&pv.lock);
}

// A fork child cannot use its parent's CUDA objects: everything is forgotten (no CUDA call), and
// the lock, which another parent thread may have held at the fork, starts afresh.
void cci_pvmm_atfork_child(void)
{
    pthread_mutex_init(&pv.lock, NULL);
    unit *u, *tmp;
    HASH_ITER(by_va, pv.units_by_va, u, tmp) {
        HASH_DELETE(by_va, pv.units_by_va, u);
        HASH_DELETE(by_h, pv.units_by_h, u);
        free(u);
    }
    loose_handle *lh, *lhtmp;
    HASH_ITER(hh, pv.handles, lh, lhtmp) {
        HASH_DELETE(hh, pv.handles, lh);
        free(lh);
    }
    loose_range *lr, *lrtmp;
    HASH_ITER(hh, pv.ranges, lr, lrtmp) {
        HASH_DELETE(hh, pv.ranges, lr);
        free(lr);
    }
    pv.claimed = (unit_list){0};
    memset(pv.dev, 0, sizeof pv.dev);
    atomic_store(&used, 0);
}

int cci_pvmm_used(void)
{
    return atomic_load_explicit(&used, memory_order_relaxed);
}
