// SPDX-License-Identifier: MIT
// The contract's virtual-memory group over the real driver functions (the VMM block of real.h,
// never our own hooks). What the driver charges (../shared/reference, H100): ~13 µs to create a
// page, ~30 µs per cuMemSetAccess call whatever it spans, ~22 µs to unmap, ~15 µs to release.
// Hence: access is set once per range the core maps in one go, and released pages are kept in a
// bounded pool and mapped again instead of being released and created anew.
//
// Book-keeping, all under one lock (these are slow paths: growth, shrinking, peer changes):
// - every live page (created, not yet really released) with its size and how often it is mapped;
// - per device: its mappings sorted by address (for peer re-grants), its reserved ranges (for
//   the IPC refusal), its pool of unmapped released pages, and the devices granted access to it.
// Driver calls that change mappings run with the lock held, so a peer re-grant never sees a
// mapping that is half gone.
//
// uthash would exit the process when it cannot grow its table: a failed insert is answered
// instead (the page is then released for real, or the call fails).
static _Thread_local int hash_oom;
#define uthash_nonfatal_oom(obj) (hash_oom = 1)

#include "vmm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uthash.h>

#include "backend_cuda.h"
#include "clock.h"
#include "log.h"
#include "real.h"

// ---- what the driver's virtual-memory calls cost the host -----------------------------------
// The reference costs above are an idle device's; while kernels run some calls take several times
// longer, and compact mode's page moves make them on a running program. Each real call is timed
// per device; the statistics carry the counts (cci_stats' vmm_* fields, through the backend's
// costs operation) and the exit log (CCI_LOG=info) prints them, so that a slow run under a VMM
// mode can be put down to these calls or cleared of them.
enum { VT_CREATE, VT_RELEASE, VT_MAP, VT_UNMAP, VT_ACCESS, VT_KINDS };
static _Atomic unsigned long long vt_calls[CCI_PL_MAX_DEVICES][VT_KINDS], vt_ns[CCI_PL_MAX_DEVICES][VT_KINDS];

// `device` is valid (every caller checked it before its driver call).
static void vt_add(int device, int kind, uint64_t since)
{
    atomic_fetch_add_explicit(&vt_calls[device][kind], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&vt_ns[device][kind], cci_pl_now_ns() - since, memory_order_relaxed);
}

void cci_cuda_vmm_costs(int device, cci_stats *out)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return;
    _Atomic unsigned long long *c = vt_calls[device], *ns = vt_ns[device];
    out->vmm_create_calls = atomic_load(&c[VT_CREATE]);
    out->vmm_create_ns = atomic_load(&ns[VT_CREATE]);
    out->vmm_map_calls = atomic_load(&c[VT_MAP]);
    out->vmm_map_ns = atomic_load(&ns[VT_MAP]);
    out->vmm_set_access_calls = atomic_load(&c[VT_ACCESS]);
    out->vmm_set_access_ns = atomic_load(&ns[VT_ACCESS]);
    out->vmm_unmap_calls = atomic_load(&c[VT_UNMAP]);
    out->vmm_unmap_ns = atomic_load(&ns[VT_UNMAP]);
    out->vmm_release_calls = atomic_load(&c[VT_RELEASE]);
    out->vmm_release_ns = atomic_load(&ns[VT_RELEASE]);
}

void cci_cuda_vmm_log_costs(const cci_stats *s)
{
    if (!(s->vmm_create_calls | s->vmm_map_calls | s->vmm_set_access_calls | s->vmm_unmap_calls |
          s->vmm_release_calls))
        return;
    cci_log(CCI_LOG_INFO, "virtual-memory calls on the host: %llu cuMemCreate %.1f ms, %llu cuMemMap %.1f ms, "
            "%llu cuMemSetAccess %.1f ms, %llu cuMemUnmap %.1f ms, %llu cuMemRelease %.1f ms",
            (unsigned long long)s->vmm_create_calls, s->vmm_create_ns / 1e6, (unsigned long long)s->vmm_map_calls,
            s->vmm_map_ns / 1e6, (unsigned long long)s->vmm_set_access_calls, s->vmm_set_access_ns / 1e6,
            (unsigned long long)s->vmm_unmap_calls, s->vmm_unmap_ns / 1e6, (unsigned long long)s->vmm_release_calls,
            s->vmm_release_ns / 1e6);
}

typedef struct page_rec {
    CUmemGenericAllocationHandle handle;
    size_t size;
    int device;
    unsigned maps;  // live mappings of this page
    UT_hash_handle hh;
} page_rec;

typedef struct span {
    uintptr_t va;
    size_t size;
    CUmemGenericAllocationHandle handle;  // mappings only
} span;

typedef struct span_vec {
    span *v;
    size_t n, cap;
} span_vec;

typedef struct vmm_device {
    int probed;
    size_t granularity;  // 0: this device has no VMM support
    int share_fd;        // pages are created exportable as file descriptors (CUDA IPC, vmm_share.c)
    size_t pool_limit;
    size_t pool_bytes;
    page_rec **pool;     // released pages waiting to be handed out again, unmapped
    size_t pool_n, pool_cap;
    span_vec maps;       // sorted by va
    span_vec ranges;
    uint64_t accessors;  // bit d: device d was granted access to this device's pages
} vmm_device;

static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static vmm_device devs[CCI_PL_MAX_DEVICES];
static page_rec *pages;

static int valid(int device)
{
    return (unsigned)device < CCI_PL_MAX_DEVICES;
}

static CUmemAllocationProp page_prop(int device)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    // Exportable pages cost nothing until exported; without them no block of the device could
    // be shared with CUDA IPC (PyTorch asks for the same type on its expandable segments).
    if (valid(device) && devs[device].share_fd)
        p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

// ---- span vectors -------------------------------------------------------------------------

static size_t span_lower_bound(const span_vec *sv, uintptr_t va)
{
    size_t lo = 0, hi = sv->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sv->v[mid].va < va)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int span_insert(span_vec *sv, span s)
{
    if (sv->n == sv->cap) {
        size_t cap = sv->cap ? sv->cap * 2 : 64;
        span *v = realloc(sv->v, cap * sizeof *v);
        if (!v)
            return -1;
        sv->v = v;
        sv->cap = cap;
    }
    size_t i = span_lower_bound(sv, s.va);
    memmove(&sv->v[i + 1], &sv->v[i], (sv->n - i) * sizeof *sv->v);
    sv->v[i] = s;
    sv->n++;
    return 0;
}

static void span_vec_free(span_vec *sv)
{
    free(sv->v);
    *sv = (span_vec){0};
}

// ---- pages --------------------------------------------------------------------------------

static page_rec *page_find(CUmemGenericAllocationHandle h)
{
    page_rec *r = NULL;
    HASH_FIND(hh, pages, &h, sizeof h, r);
    return r;
}

static void page_forget(page_rec *r)
{
    HASH_DEL(pages, r);
    free(r);
}

static void release_handle(int device, CUmemGenericAllocationHandle h)
{
    cci_driver_scope sc;
    CUresult r = CUDA_ERROR_NOT_INITIALIZED;
    if (cci_cuda_enter(device, &sc) == 0) {
        uint64_t t0 = cci_pl_now_ns();
        r = cci_real_drv()->cuMemRelease(h);
        vt_add(device, VT_RELEASE, t0);
        cci_cuda_leave(&sc);
    }
    if (r != CUDA_SUCCESS)
        cci_log(CCI_LOG_DEBUG, "device %d: cuMemRelease failed (CUresult %d)", device, r);
}

// Takes the device's pool out under the lock and releases its pages for real without it.
static void drain_pool(int device)
{
    vmm_device *d = &devs[device];
    pthread_mutex_lock(&vmm_lock);
    page_rec **pool = d->pool;
    size_t n = d->pool_n;
    d->pool = NULL;
    d->pool_n = d->pool_cap = 0;
    d->pool_bytes = 0;
    CUmemGenericAllocationHandle *handles = n ? malloc(n * sizeof *handles) : NULL;
    for (size_t i = 0; i < n; i++) {
        if (handles)
            handles[i] = pool[i]->handle;
        else  // host out of memory: release under the lock, one by one
            release_handle(device, pool[i]->handle);
        page_forget(pool[i]);
    }
    free(pool);
    pthread_mutex_unlock(&vmm_lock);
    for (size_t i = 0; handles && i < n; i++)
        release_handle(device, handles[i]);
    free(handles);
    if (n)
        cci_log(CCI_LOG_DEBUG, "device %d: released %zu pooled pages", device, n);
}

// ---- the contract's operations ------------------------------------------------------------

// Asks the device once: VMM support, the granularity (recommended, if the minimum divides it,
// as the driver documents), and the pool bound. Lock held.
static void probe(int device, vmm_device *d)
{
    const cci_real_driver *t = cci_real_drv();
    d->probed = 1;
    d->granularity = 0;
    CUdevice dev;
    if (t->cuDeviceGet(&dev, device) != CUDA_SUCCESS)
        return;
    // The attribute exists since CUDA 10.2 like the API; a driver without cuDeviceGetAttribute
    // (only test doubles) is judged by the granularity query alone.
    int supported = 1;
    if (t->cuDeviceGetAttribute &&
        (t->cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) !=
         CUDA_SUCCESS))
        supported = 0;
    if (!supported) {
        cci_log(CCI_LOG_INFO, "device %d does not support the virtual-memory API", device);
        return;
    }
    CUmemAllocationProp prop = page_prop(device);
    size_t min = 0, rec = 0;
    if (t->cuMemGetAllocationGranularity(&min, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || !min)
        return;
    if (t->cuMemGetAllocationGranularity(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS ||
        !rec || rec % min)
        rec = min;
    size_t total = 0;
    if (t->cuDeviceTotalMem_v2(&total, dev) != CUDA_SUCCESS)
        total = 0;
    d->granularity = rec;
    d->pool_limit = total / CCI_VMM_POOL_DIVISOR;
    int fd_ok = 0;
    d->share_fd = t->cuDeviceGetAttribute &&
                  t->cuDeviceGetAttribute(&fd_ok, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                          dev) == CUDA_SUCCESS &&
                  fd_ok;
    cci_log(CCI_LOG_DEBUG, "device %d: VMM pages of %zu bytes (minimum %zu), pool of at most %zu bytes", device,
            rec, min, d->pool_limit);
}

static size_t granularity(void *ctx, int device)
{
    (void)ctx;
    if (!valid(device))
        return 0;
    pthread_mutex_lock(&vmm_lock);
    vmm_device *d = &devs[device];
    if (!d->probed)
        probe(device, d);
    size_t g = d->granularity;
    pthread_mutex_unlock(&vmm_lock);
    return g;
}

static int va_reserve(void *ctx, int device, size_t size, size_t align, uintptr_t *va)
{
    size_t g = granularity(ctx, device);
    if (!g)
        return CCI_EBACKEND;
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc))
        return CCI_EBACKEND;
    CUdeviceptr p = 0;
    CUresult r = cci_real_drv()->cuMemAddressReserve(&p, size, align ? align : g, 0, 0);
    int rc = CCI_OK;
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&vmm_lock);
        if (span_insert(&devs[device].ranges, (span){.va = (uintptr_t)p, .size = size}) != 0)
            rc = CCI_EBACKEND;
        pthread_mutex_unlock(&vmm_lock);
        if (rc != CCI_OK)
            cci_real_drv()->cuMemAddressFree(p, size);
    } else {
        cci_log(CCI_LOG_DEBUG, "device %d: cuMemAddressReserve(%zu) failed (CUresult %d)", device, size, r);
        rc = CCI_EBACKEND;
    }
    cci_cuda_leave(&sc);
    if (rc == CCI_OK)
        *va = (uintptr_t)p;
    return rc;
}

static int va_free(void *ctx, int device, uintptr_t va, size_t size)
{
    (void)ctx;
    if (!valid(device))
        return CCI_EBACKEND;
    pthread_mutex_lock(&vmm_lock);
    span_vec *rs = &devs[device].ranges;
    size_t i = span_lower_bound(rs, va);
    if (i < rs->n && rs->v[i].va == va) {
        memmove(&rs->v[i], &rs->v[i + 1], (rs->n - i - 1) * sizeof *rs->v);
        rs->n--;
    }
    pthread_mutex_unlock(&vmm_lock);
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc))
        return CCI_EBACKEND;
    CUresult r = cci_real_drv()->cuMemAddressFree((CUdeviceptr)va, size);
    cci_cuda_leave(&sc);
    if (r != CUDA_SUCCESS)
        cci_log(CCI_LOG_DEBUG, "device %d: cuMemAddressFree failed (CUresult %d)", device, r);
    return r == CUDA_SUCCESS ? CCI_OK : CCI_EBACKEND;
}

// A pooled page of exactly `size` bytes, out of the pool; NULL when none. Lock held.
static page_rec *pool_take(vmm_device *d, size_t size)
{
    for (size_t i = d->pool_n; i-- > 0;) {
        page_rec *r = d->pool[i];
        if (r->size != size)
            continue;
        d->pool[i] = d->pool[--d->pool_n];
        d->pool_bytes -= r->size;
        return r;
    }
    return NULL;
}

static int page_create(void *ctx, int device, size_t size, uint64_t *page)
{
    (void)ctx;
    if (!valid(device))
        return CCI_EBACKEND;
    vmm_device *d = &devs[device];
    pthread_mutex_lock(&vmm_lock);
    page_rec *r = pool_take(d, size);
    pthread_mutex_unlock(&vmm_lock);
    if (r) {
        *page = r->handle;
        return CCI_OK;
    }
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc))
        return CCI_EBACKEND;
    CUmemAllocationProp prop = page_prop(device);
    CUmemGenericAllocationHandle h = 0;
    uint64_t t0 = cci_pl_now_ns();
    CUresult cr = cci_real_drv()->cuMemCreate(&h, size, &prop, 0);
    vt_add(device, VT_CREATE, t0);
    if (cr == CUDA_ERROR_OUT_OF_MEMORY && d->pool_n) {
        // The pool holds pages of other sizes (PyTorch's 2 MiB and 20 MiB pages): their memory
        // serves this page better than an out-of-memory does.
        drain_pool(device);
        t0 = cci_pl_now_ns();
        cr = cci_real_drv()->cuMemCreate(&h, size, &prop, 0);
        vt_add(device, VT_CREATE, t0);
    }
    if (cr != CUDA_SUCCESS && cr != CUDA_ERROR_OUT_OF_MEMORY && prop.requestedHandleTypes) {
        // A driver that offers the handle type but refuses it here: pages without it still serve;
        // only CUDA IPC on this device's blocks is lost (vmm_share.c says so when asked).
        cci_log(CCI_LOG_INFO, "device %d: pages exportable as file descriptors are refused (CUresult %d); "
                "blocks of this device cannot be shared with CUDA IPC", device, cr);
        pthread_mutex_lock(&vmm_lock);
        d->share_fd = 0;
        pthread_mutex_unlock(&vmm_lock);
        prop.requestedHandleTypes = 0;
        t0 = cci_pl_now_ns();
        cr = cci_real_drv()->cuMemCreate(&h, size, &prop, 0);
        vt_add(device, VT_CREATE, t0);
    }
    cci_cuda_leave(&sc);
    if (cr != CUDA_SUCCESS) {
        cci_log(CCI_LOG_DEBUG, "device %d: cuMemCreate(%zu) failed (CUresult %d)", device, size, cr);
        return cr == CUDA_ERROR_OUT_OF_MEMORY ? CCI_EOOM : CCI_EBACKEND;
    }
    r = calloc(1, sizeof *r);
    if (r) {
        *r = (page_rec){.handle = h, .size = size, .device = device};
        pthread_mutex_lock(&vmm_lock);
        hash_oom = 0;
        HASH_ADD(hh, pages, handle, sizeof r->handle, r);
        int failed = hash_oom;
        pthread_mutex_unlock(&vmm_lock);
        if (failed) {
            free(r);
            r = NULL;
        }
    }
    if (!r) {
        release_handle(device, h);
        return CCI_EBACKEND;
    }
    *page = h;
    return CCI_OK;
}

static int page_release(void *ctx, int device, uint64_t page)
{
    (void)ctx;
    if (!valid(device))
        return CCI_EBACKEND;
    vmm_device *d = &devs[device];
    pthread_mutex_lock(&vmm_lock);
    page_rec *r = page_find(page);
    // Only an unmapped page may be pooled: a pooled page mapped again elsewhere would alias a
    // mapping the core still believes in.
    if (r && !r->maps && d->pool_bytes + r->size <= d->pool_limit) {
        if (d->pool_n == d->pool_cap) {
            size_t cap = d->pool_cap ? d->pool_cap * 2 : 32;
            page_rec **pool = realloc(d->pool, cap * sizeof *pool);
            if (pool) {
                d->pool = pool;
                d->pool_cap = cap;
            }
        }
        if (d->pool_n < d->pool_cap) {
            d->pool[d->pool_n++] = r;
            d->pool_bytes += r->size;
            pthread_mutex_unlock(&vmm_lock);
            return CCI_OK;
        }
    }
    if (r)
        page_forget(r);
    pthread_mutex_unlock(&vmm_lock);
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc))
        return CCI_EBACKEND;
    uint64_t t0 = cci_pl_now_ns();
    CUresult cr = cci_real_drv()->cuMemRelease((CUmemGenericAllocationHandle)page);
    vt_add(device, VT_RELEASE, t0);
    cci_cuda_leave(&sc);
    if (cr != CUDA_SUCCESS)
        cci_log(CCI_LOG_DEBUG, "device %d: cuMemRelease failed (CUresult %d)", device, cr);
    return cr == CUDA_SUCCESS ? CCI_OK : CCI_EBACKEND;
}

static int map(void *ctx, int device, uintptr_t va, size_t size, uint64_t page)
{
    (void)ctx;
    if (!valid(device))
        return CCI_EBACKEND;
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc))
        return CCI_EBACKEND;
    pthread_mutex_lock(&vmm_lock);
    int rc = CCI_EBACKEND;
    uint64_t t0 = cci_pl_now_ns();
    CUresult cr = cci_real_drv()->cuMemMap((CUdeviceptr)va, size, 0, (CUmemGenericAllocationHandle)page, 0);
    vt_add(device, VT_MAP, t0);
    if (cr == CUDA_SUCCESS) {
        if (span_insert(&devs[device].maps, (span){.va = va, .size = size, .handle = page}) == 0) {
            page_rec *r = page_find(page);
            if (r)
                r->maps++;
            rc = CCI_OK;
        } else {
            uint64_t t1 = cci_pl_now_ns();
            cci_real_drv()->cuMemUnmap((CUdeviceptr)va, size);  // host out of memory: undo
            vt_add(device, VT_UNMAP, t1);
        }
    } else {
        cci_log(CCI_LOG_DEBUG, "device %d: cuMemMap(%#lx, %zu) failed (CUresult %d)", device, (unsigned long)va,
                size, cr);
    }
    pthread_mutex_unlock(&vmm_lock);
    cci_cuda_leave(&sc);
    return rc;
}

static int unmap(void *ctx, int device, uintptr_t va, size_t size)
{
    (void)ctx;
    if (!valid(device))
        return CCI_EBACKEND;
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc))
        return CCI_EBACKEND;
    pthread_mutex_lock(&vmm_lock);
    uint64_t t0 = cci_pl_now_ns();
    CUresult cr = cci_real_drv()->cuMemUnmap((CUdeviceptr)va, size);
    vt_add(device, VT_UNMAP, t0);
    if (cr == CUDA_SUCCESS) {
        span_vec *ms = &devs[device].maps;
        size_t i = span_lower_bound(ms, va), j = i;
        for (; j < ms->n && ms->v[j].va < va + size; j++) {
            page_rec *r = page_find(ms->v[j].handle);
            if (r && r->maps)
                r->maps--;
        }
        memmove(&ms->v[i], &ms->v[j], (ms->n - j) * sizeof *ms->v);
        ms->n -= j - i;
    } else {
        cci_log(CCI_LOG_DEBUG, "device %d: cuMemUnmap(%#lx, %zu) failed (CUresult %d)", device, (unsigned long)va,
                size, cr);
    }
    pthread_mutex_unlock(&vmm_lock);
    cci_cuda_leave(&sc);
    return cr == CUDA_SUCCESS ? CCI_OK : CCI_EBACKEND;
}

// Read/write for `device` and for every device granted access to its pages. Lock held.
static size_t access_descs(int device, CUmemAccessDesc *out)
{
    size_t n = 0;
    out[n++] = (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    for (int p = 0; p < CCI_PL_MAX_DEVICES; p++)
        if (p != device && (devs[device].accessors >> p & 1))
            out[n++] = (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, p}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    return n;
}

static int set_access(void *ctx, int device, uintptr_t va, size_t size)
{
    (void)ctx;
    if (!valid(device))
        return CCI_EBACKEND;
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc))
        return CCI_EBACKEND;
    CUmemAccessDesc desc[CCI_PL_MAX_DEVICES];
    pthread_mutex_lock(&vmm_lock);
    size_t n = access_descs(device, desc);
    uint64_t t0 = cci_pl_now_ns();
    CUresult cr = cci_real_drv()->cuMemSetAccess((CUdeviceptr)va, size, desc, n);
    vt_add(device, VT_ACCESS, t0);
    pthread_mutex_unlock(&vmm_lock);
    cci_cuda_leave(&sc);
    if (cr != CUDA_SUCCESS)
        cci_log(CCI_LOG_DEBUG, "device %d: cuMemSetAccess(%#lx, %zu, %zu devices) failed (CUresult %d)", device,
                (unsigned long)va, size, n, cr);
    return cr == CUDA_SUCCESS ? CCI_OK : CCI_EBACKEND;
}

static void drain(void *ctx, int device)
{
    (void)ctx;
    if (valid(device))
        drain_pool(device);
}

// The pool as the reports see it: pages kept, not mapped, counted nowhere else.
static int pooled(void *ctx, int device, size_t *npages, size_t *bytes)
{
    (void)ctx;
    if (!valid(device))
        return CCI_EBACKEND;
    pthread_mutex_lock(&vmm_lock);
    *npages = devs[device].pool_n;
    *bytes = devs[device].pool_bytes;
    pthread_mutex_unlock(&vmm_lock);
    return CCI_OK;
}

static const cci_backend_vmm_ops vmm_ops = {
    .granularity = granularity,
    .va_reserve = va_reserve,
    .va_free = va_free,
    .page_create = page_create,
    .page_release = page_release,
    .map = map,
    .unmap = unmap,
    .set_access = set_access,
    .drain = drain,
    .pooled = pooled,
};

void cci_cuda_vmm_wire(cci_backend_ops *ops)
{
    const cci_real_driver *t = cci_real_drv();
    if (!t->cuMemGetAllocationGranularity || !t->cuMemAddressReserve || !t->cuMemAddressFree || !t->cuMemCreate ||
        !t->cuMemRelease || !t->cuMemMap || !t->cuMemUnmap || !t->cuMemSetAccess) {
        cci_log(CCI_LOG_DEBUG, "the driver lacks the virtual-memory API; ordinary segments only");
        return;
    }
    ops->vmm = &vmm_ops;
    ops->caps |= CCI_CAP_VMM;
}

// ---- CUDA IPC: a block's pages as file descriptors ----------------------------------------

int cci_cuda_vmm_shareable(int device)
{
    if (!valid(device))
        return 0;
    pthread_mutex_lock(&vmm_lock);
    int ok = devs[device].share_fd;
    pthread_mutex_unlock(&vmm_lock);
    return ok;
}

int cci_cuda_vmm_export(int device, uintptr_t va, size_t size, cci_vmm_piece **out, size_t *n, size_t *skip)
{
    *out = NULL;
    *n = 0;
    if (!valid(device) || !size)
        return CCI_EINVAL;
    const cci_real_driver *t = cci_real_drv();
    if (!t->cuMemExportToShareableHandle)
        return CCI_EBACKEND;
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc))
        return CCI_EBACKEND;
    // Under the lock: the pages of a live block stay mapped, but the table may move meanwhile.
    pthread_mutex_lock(&vmm_lock);
    const span_vec *ms = &devs[device].maps;
    size_t first = span_lower_bound(ms, va + 1), last;  // the last mapping starting at or before va
    int rc = devs[device].share_fd ? CCI_OK : CCI_EBACKEND;
    if (rc == CCI_OK && !(first > 0 && va - ms->v[first - 1].va < ms->v[first - 1].size))
        rc = CCI_EINVAL;
    uintptr_t at = rc == CCI_OK ? ms->v[--first].va : 0;
    for (last = first; rc == CCI_OK && at < va + size; last++) {
        if (last == ms->n || ms->v[last].va != at)  // a hole: the block is not wholly mapped
            rc = CCI_EINVAL;
        else
            at += ms->v[last].size;
    }
    cci_vmm_piece *v = rc == CCI_OK ? calloc(last - first, sizeof *v) : NULL;
    if (rc == CCI_OK && !v)
        rc = CCI_EOOM;
    uint64_t t0 = cci_pl_now_ns();
    for (size_t i = first; rc == CCI_OK && i < last; i++) {
        int fd = -1;
        if (t->cuMemExportToShareableHandle(&fd, ms->v[i].handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) !=
            CUDA_SUCCESS) {
            rc = CCI_EBACKEND;
            break;
        }
        v[(*n)++] = (cci_vmm_piece){.fd = fd, .size = ms->v[i].size};
    }
    if (rc == CCI_OK)
        *skip = va - ms->v[first].va;
    pthread_mutex_unlock(&vmm_lock);
    cci_log(CCI_LOG_DEBUG, "device %d: %zu pages exported as descriptors in %.0f us", device, *n,
            (cci_pl_now_ns() - t0) / 1e3);
    cci_cuda_leave(&sc);
    if (rc != CCI_OK) {
        for (size_t k = 0; k < *n; k++)
            close(v[k].fd);
        free(v);
        *n = 0;
        return rc;
    }
    *out = v;
    return CCI_OK;
}

// ---- peers, questions, teardown -------------------------------------------------------------

int cci_vmm_peer_enabled(int dev, int peer)
{
    if (!valid(dev) || !valid(peer) || dev == peer)
        return -1;
    vmm_device *d = &devs[peer];
    cci_driver_scope sc;
    if (cci_cuda_enter(peer, &sc))
        return -1;
    int failed = 0;
    pthread_mutex_lock(&vmm_lock);
    if (!(d->accessors >> dev & 1)) {
        d->accessors |= (uint64_t)1 << dev;
        CUmemAccessDesc desc = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        // One call per run of adjacent mappings: a run is what the core mapped in one go, or
        // grew into since.
        for (size_t i = 0; i < d->maps.n;) {
            size_t j = i + 1;
            while (j < d->maps.n && d->maps.v[j - 1].va + d->maps.v[j - 1].size == d->maps.v[j].va)
                j++;
            uintptr_t lo = d->maps.v[i].va, hi = d->maps.v[j - 1].va + d->maps.v[j - 1].size;
            uint64_t t0 = cci_pl_now_ns();
            if (cci_real_drv()->cuMemSetAccess((CUdeviceptr)lo, hi - lo, &desc, 1) != CUDA_SUCCESS)
                failed++;
            vt_add(peer, VT_ACCESS, t0);  // the pages' device's calls
            i = j;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    cci_cuda_leave(&sc);
    if (failed)
        cci_log(CCI_LOG_WARNING, "device %d: granting peer device %d access to %d mapped ranges failed", peer, dev,
                failed);
    return failed ? -1 : 0;
}

int cci_cuda_vmm_owns(uintptr_t p)
{
    int owns = 0;
    pthread_mutex_lock(&vmm_lock);
    for (int d = 0; d < CCI_PL_MAX_DEVICES && !owns; d++) {
        const span_vec *rs = &devs[d].ranges;
        size_t i = span_lower_bound(rs, p + 1);  // the last range starting at or before p
        owns = i > 0 && p - rs->v[i - 1].va < rs->v[i - 1].size;
    }
    pthread_mutex_unlock(&vmm_lock);
    return owns;
}

size_t cci_cuda_vmm_pool_bytes(int device)
{
    if (!valid(device))
        return 0;
    pthread_mutex_lock(&vmm_lock);
    size_t n = devs[device].pool_bytes;
    pthread_mutex_unlock(&vmm_lock);
    return n;
}

// Forgets what the tables say about `device` (the pool must be empty or forgotten). Lock held.
static void forget_device(int device)
{
    vmm_device *d = &devs[device];
    span_vec_free(&d->maps);
    span_vec_free(&d->ranges);
    d->accessors = 0;
    for (int p = 0; p < CCI_PL_MAX_DEVICES; p++)
        devs[p].accessors &= ~((uint64_t)1 << device);
    page_rec *r, *tmp;
    HASH_ITER(hh, pages, r, tmp)
    {
        if (r->device == device)
            page_forget(r);
    }
}

void cci_cuda_vmm_drop_device(int device)
{
    if (!valid(device))
        return;
    drain_pool(device);
    pthread_mutex_lock(&vmm_lock);
    if (devs[device].maps.n || devs[device].ranges.n)
        cci_log(CCI_LOG_DEBUG, "device %d: %zu mappings and %zu ranges left at the reset; the reset frees them",
                device, devs[device].maps.n, devs[device].ranges.n);
    forget_device(device);
    pthread_mutex_unlock(&vmm_lock);
}

void cci_cuda_vmm_atfork_child(void)
{
    // The only thread; the lock may have been held by a parent thread that does not exist here.
    pthread_mutex_init(&vmm_lock, NULL);
    for (int d = 0; d < CCI_PL_MAX_DEVICES; d++) {
        free(devs[d].pool);
        devs[d].pool = NULL;
        devs[d].pool_n = devs[d].pool_cap = 0;
        devs[d].pool_bytes = 0;
        forget_device(d);
    }
    for (int d = 0; d < CCI_PL_MAX_DEVICES; d++)  // the child's exit line counts the child's calls
        for (int k = 0; k < VT_KINDS; k++) {
            atomic_store(&vt_calls[d][k], 0);
            atomic_store(&vt_ns[d][k], 0);
        }
}
