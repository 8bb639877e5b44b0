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
#include "program_vmm_impl.h"

#include <stdatomic.h>

#include "levels.h"
#include "log.h"
#include "real.h"
#include "settings.h"

static _Atomic int keep_on = -1;  // -1 until start-up decided it

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
    device_kept *k = &cci__pv.dev[device];
    atomic_store_explicit(&cci__pvmm_used, 1, memory_order_relaxed);
    pthread_mutex_lock(&cci__pv.lock);
    k->st.program_vmm_creates++;
    k->st.program_vmm_create_bytes += size;
    // Its reservation taken back first (and not its handle yet): that unit, if the shape agrees;
    // else the newest kept unit of this shape.
    unit *take = NULL;
    for (unit *u = cci__pv.claimed.newest; u && !take; u = u->older)
        if (u->prog_va && !u->prog_refs && u->size == size && pv_same_prop(&u->prop, prop))
            take = u;
    for (unit *u = k->list.newest; u && !take; u = u->older)
        if (u->size == size && !u->shared && pv_same_prop(&u->prop, prop))
            take = u;
    if (take) {
        if (take->kept)
            pv_claim(take);
        take->prog_refs = 1;
        k->st.program_vmm_reused++;
        k->st.program_vmm_reused_bytes += size;
        *h = take->h;
        cci_log(CCI_LOG_DEBUG, "program VMM: cuMemCreate(%zu) on device %d answered with a kept buffer "
                "(handle %#llx of %#llx)", size, device, (unsigned long long)take->h, (unsigned long long)take->va);
        pthread_mutex_unlock(&cci__pv.lock);
        return CUDA_SUCCESS;
    }
    pv_make_room(device, size);
    CUresult r = t->cuMemCreate(h, size, prop, flags);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && k->list.oldest) {
        pv_give_back_all(device);
        r = t->cuMemCreate(h, size, prop, flags);
    }
    if (r == CUDA_SUCCESS)
        pv_add_loose_handle(*h, size, prop, 1, 0);
    cci_log(CCI_LOG_DEBUG, "program VMM: cuMemCreate(%zu, handle types %#x) on device %d: new (CUresult %d)", size,
            (unsigned)prop->requestedHandleTypes, device, (int)r);
    pthread_mutex_unlock(&cci__pv.lock);
    return r;
}

CUresult cci_pvmm_release(CUmemGenericAllocationHandle h)
{
    const cci_real_driver *t = drv();
    if (!t->cuMemRelease)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&cci__pv.lock);
    unit *u = pv_unit_of(h);
    if (u) {
        CUresult r = CUDA_SUCCESS;
        if (!u->prog_refs || u->kept)
            r = CUDA_ERROR_INVALID_VALUE;  // released already: the driver would not know it either
        else if (u->prog_refs-- > 1 && u->lent_refs)
            u->lent_refs--;  // a lent reference: no real one to give back
        else if (u->prog_refs)
            r = t->cuMemRelease(h);  // one real reference per program reference not lent, ours the last
        else
            pv_maybe_keep(u);
        pthread_mutex_unlock(&cci__pv.lock);
        return r;
    }
    loose_handle *l = pv_loose_handle_of(h);
    if (l && --l->refs == 0)
        pv_drop_loose_handle(l);
    pthread_mutex_unlock(&cci__pv.lock);
    return t->cuMemRelease(h);
}

CUresult cci_pvmm_reserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags)
{
    const cci_real_driver *t = drv();
    if (!t->cuMemAddressReserve)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ptr || !on() || flags)
        return t->cuMemAddressReserve(ptr, size, align, addr, flags);
    pthread_mutex_lock(&cci__pv.lock);
    if (!addr) {
        // A unit whose handle the program took back has its reservation first; else (the
        // reservation asked before the handle) the newest kept unit of that size on any device.
        unit *take = NULL;
        for (unit *u = cci__pv.claimed.newest; u && !take; u = u->older)
            if (u->prog_refs && !u->prog_va && u->va_size == size && !(align && u->va % align))
                take = u;
        for (int d = 0; d < CCI_PL_MAX_DEVICES && !take; d++)
            for (unit *u = cci__pv.dev[d].list.newest; u && !take; u = u->older)
                if (u->va_size == size && !u->shared && !(align && u->va % align))
                    take = u;
        if (take) {
            if (take->kept)
                pv_claim(take);
            take->prog_va = 1;
            *ptr = take->va;
            pthread_mutex_unlock(&cci__pv.lock);
            return CUDA_SUCCESS;
        }
    }
    CUresult r = t->cuMemAddressReserve(ptr, size, align, addr, flags);
    if (r == CUDA_SUCCESS)
        pv_add_loose_range(*ptr, size);
    pthread_mutex_unlock(&cci__pv.lock);
    return r;
}

// The program lets go of the mapping or the reservation of a buffer: for a whole unit it is only
// noted (and the unit kept once the program holds nothing of it); the reservation only after the
// mapping, as the driver demands. Anything else settles what the range meets and goes to CUDA.
enum part { MAPPING, RESERVATION };

static CUresult let_go(enum part part, CUdeviceptr ptr, size_t size, CUresult (*real)(CUdeviceptr, size_t))
{
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&cci__pv.lock);
    unit *u = pv_unit_at(ptr);
    if (u) {
        int *held = part == MAPPING ? &u->prog_mapped : &u->prog_va;
        size_t whole = part == MAPPING ? u->size : u->va_size;
        if (*held && size == whole && (part == MAPPING || !u->prog_mapped)) {
            *held = 0;
            pv_maybe_keep(u);
            pthread_mutex_unlock(&cci__pv.lock);
            return CUDA_SUCCESS;
        }
    }
    pv_settle_overlapping(ptr, size);  // may leave the reservation loose: forgotten just below
    loose_range *l;
    if (part == RESERVATION && (l = pv_loose_range_of(ptr)) && l->size == size)
        pv_drop_loose_range(l);
    pthread_mutex_unlock(&cci__pv.lock);
    return real(ptr, size);
}

CUresult cci_pvmm_address_free(CUdeviceptr ptr, size_t size)
{
    return let_go(RESERVATION, ptr, size, drv()->cuMemAddressFree);
}

CUresult cci_pvmm_unmap(CUdeviceptr ptr, size_t size)
{
    return let_go(MAPPING, ptr, size, drv()->cuMemUnmap);
}

CUresult cci_pvmm_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                      unsigned long long flags)
{
    const cci_real_driver *t = drv();
    if (!t->cuMemMap)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&cci__pv.lock);
    unit *u = pv_unit_at(ptr);
    if (u && u->h == h && u->prog_va && u->prog_refs && !u->prog_mapped && !u->kept && size == u->size &&
        !offset && !flags) {
        u->prog_mapped = 1;  // it never stopped being mapped
        pv_claimed_unlink(u);
        pthread_mutex_unlock(&cci__pv.lock);
        return CUDA_SUCCESS;
    }
    if ((u = pv_unit_of(h)))
        pv_settle(u);
    pv_settle_overlapping(ptr, size);
    CUresult r = t->cuMemMap(ptr, size, offset, h, flags);
    if (r == CUDA_SUCCESS && !offset && !flags)
        pv_make_unit(ptr, size, h);
    pthread_mutex_unlock(&cci__pv.lock);
    return r;
}

CUresult cci_pvmm_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    const cci_real_driver *t = drv();
    if (!t->cuMemSetAccess)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&cci__pv.lock);
    unit *u = pv_unit_at(ptr);
    if (u && u->prog_mapped && size == u->size) {
        if (pv_access_granted(u, desc, count)) {
            pthread_mutex_unlock(&cci__pv.lock);
            return CUDA_SUCCESS;  // granted already, before the program last let go of it
        }
        CUresult r = t->cuMemSetAccess(ptr, size, desc, count);
        if (r == CUDA_SUCCESS)
            pv_access_note(u, desc, count);
        else
            u->naccess = 0;  // a failed call may have granted part of it
        pthread_mutex_unlock(&cci__pv.lock);
        return r;
    }
    pv_settle_overlapping(ptr, size);  // a range that is not one mapped unit: the driver decides
    pthread_mutex_unlock(&cci__pv.lock);
    return t->cuMemSetAccess(ptr, size, desc, count);
}

// A retain of a buffer the program has mapped is answered from its unit: XLA retains and releases
// once per buffer it frees, two driver calls that tell it what it already knows. Such a reference
// is lent (the unit's one real reference stands behind it) and made real if the unit is settled.
CUresult cci_pvmm_retain(CUmemGenericAllocationHandle *h, void *addr)
{
    const cci_real_driver *t = drv();
    if (!t->cuMemRetainAllocationHandle)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&cci__pv.lock);
    unit *u = h ? pv_unit_at((CUdeviceptr)(uintptr_t)addr) : NULL;
    if (u && u->prog_mapped) {
        if (u->prog_refs++)
            u->lent_refs++;  // else ours was the one real reference; now the program's is
        *h = u->h;
        pthread_mutex_unlock(&cci__pv.lock);
        return CUDA_SUCCESS;
    }
    CUresult r = t->cuMemRetainAllocationHandle(h, addr);
    if (r == CUDA_SUCCESS) {
        loose_handle *l;
        if ((u = pv_unit_of(*h)) && !u->prog_mapped) {
            t->cuMemRelease(*h);  // the program unmapped it: the driver would find no mapping here
            r = CUDA_ERROR_INVALID_VALUE;
        } else if (u) {
            if (u->prog_refs++ == 0)
                t->cuMemRelease(*h);  // ours was the one real reference; now the program's is
        } else if ((l = pv_loose_handle_of(*h))) {
            l->refs++;
        }
    }
    pthread_mutex_unlock(&cci__pv.lock);
    return r;
}

int cci_pvmm_address_range(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
    if (!atomic_load_explicit(&cci__pvmm_used, memory_order_relaxed))
        return 0;
    pthread_mutex_lock(&cci__pv.lock);
    unit *u = pv_unit_containing(dptr);
    int answered = u && u->prog_mapped;
    if (answered) {
        if (base)
            *base = u->va;  // the unit is one whole mapping in a reservation of its own size
        if (size)
            *size = u->size;
    } else if (u) {
        pv_settle(u);
    }
    pthread_mutex_unlock(&cci__pv.lock);
    return answered;
}

CUresult cci_pvmm_export(void *shareable, CUmemGenericAllocationHandle h, int type, unsigned long long flags)
{
    const cci_real_driver *t = drv();
    if (!t->cuMemExportToShareableHandle)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&cci__pv.lock);
    pv_mark_shared_handle(h);  // before the call: once the other side has it, it may map it
    pthread_mutex_unlock(&cci__pv.lock);
    return t->cuMemExportToShareableHandle(shareable, h, type, flags);
}

CUresult cci_pvmm_range_handle(void *handle, CUdeviceptr ptr, size_t size, int type, unsigned long long flags)
{
    const cci_real_driver *t = drv();
    if (!t->cuMemGetHandleForAddressRange)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&cci__pv.lock);
    pv_mark_shared_overlapping(ptr, size);
    pthread_mutex_unlock(&cci__pv.lock);
    return t->cuMemGetHandleForAddressRange(handle, ptr, size, type, flags);
}

CUresult cci_pvmm_multicast_bind_mem(CUmemGenericAllocationHandle mc, size_t mc_offset,
                                     CUmemGenericAllocationHandle h, size_t offset, size_t size,
                                     unsigned long long flags)
{
    const cci_real_driver *t = drv();
    if (!t->cuMulticastBindMem)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&cci__pv.lock);
    pv_mark_shared_handle(h);
    pthread_mutex_unlock(&cci__pv.lock);
    return t->cuMulticastBindMem(mc, mc_offset, h, offset, size, flags);
}

CUresult cci_pvmm_multicast_bind_addr(CUmemGenericAllocationHandle mc, size_t mc_offset, CUdeviceptr ptr,
                                      size_t size, unsigned long long flags)
{
    const cci_real_driver *t = drv();
    if (!t->cuMulticastBindAddr)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&cci__pv.lock);
    pv_mark_shared_overlapping(ptr, size);
    pthread_mutex_unlock(&cci__pv.lock);
    return t->cuMulticastBindAddr(mc, mc_offset, ptr, size, flags);
}

