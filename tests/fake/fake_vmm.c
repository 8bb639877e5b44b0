// SPDX-License-Identifier: MIT
/*
 * The CUDA virtual-memory API (cuMemAddressReserve, cuMemCreate, cuMemMap,
 * cuMemSetAccess, ...) in the fake libcuda.so.1, over host memory in which
 * aliasing is real:
 *
 *  - a reservation is address space mapped PROT_NONE, so a host touch of a
 *    page nobody mapped faults (SIGSEGV), as a device touch would;
 *  - a physical allocation ("handle") is a memfd charged to its device and
 *    named after it, for an import (fake_vmm_share.c) to find;
 *  - cuMemMap maps that memfd MAP_SHARED|MAP_FIXED over the reservation, so
 *    one handle mapped at two addresses is one set of bytes: a write through
 *    one is read through the other;
 *  - a new mapping stays PROT_NONE until cuMemSetAccess grants access, as on
 *    the device, where every mapping starts without access;
 *  - cuMemUnmap puts PROT_NONE address space back.
 *
 * The fake's device touches memory only through fakecu_device_write (and the
 * stream-ordered fakecu_memset_async / fakecu_memcpy_async built on it),
 * which refuses and reports an access to a reserved page that is unmapped or
 * lacks access for the accessing device. That is how a test sees a kernel
 * still writing a page after cuMemUnmap: the delayed write finds no mapping.
 *
 * fork: the child inherits every mapping. Because pages are MAP_SHARED
 * memfds, parent and child then share the bytes (a write in one is seen by
 * the other), unlike a real GPU, where a forked child cannot use the parent's
 * device memory at all. The child must not call the fake VMM API while
 * another parent thread held its lock at the fork.
 *
 * Locking: vmm_lock (a rwlock) protects everything here. Mutations take it for
 * writing; device accesses take it for reading and hold it across the copy,
 * so an unmap waits for a copy in progress but never for a delayed job's
 * sleep (a real cuMemUnmap does not wait for kernels either). fake_cuda.c's
 * lock is always taken before vmm_lock, never after: device charges happen
 * outside vmm_lock.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fake_cuda_driver.h"
#include "fake_vmm.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <uthash.h>

#define VMM_DEFAULT_GRANULARITY ((size_t)2 << 20)

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* A physical allocation. It lives while a handle reference or a mapping
 * holds it: cuMemRelease of a mapped handle is legal and the memory goes
 * with the last mapping. */
struct phys {
    CUmemGenericAllocationHandle id; /* never reused, so a stale handle is caught */
    UT_hash_handle hh;
    int dev;
    int fd;
    size_t size;
    size_t granularity; /* in force at creation: the alignment cuMemMap needs */
    unsigned handle_types;
    unsigned refs; /* cuMemCreate or import + cuMemRetainAllocationHandle - cuMemRelease */
    unsigned maps;
};

struct reservation {
    struct span at;
};

enum vmm_op { OP_CREATE, OP_RESERVE, OP_MAP, OP_SET_ACCESS, OP_COUNT };
static const char *const k_op_names[OP_COUNT] = {"cuMemCreate", "cuMemAddressReserve", "cuMemMap",
                                                  "cuMemSetAccess"};

pthread_rwlock_t vmm_lock = PTHREAD_RWLOCK_INITIALIZER;
static pthread_once_t vmm_lock_once = PTHREAD_ONCE_INIT;
static struct phys *g_phys;
static CUmemGenericAllocationHandle g_next_id = 1;
struct span_vec vmm_res = {.elem = sizeof(struct reservation)};
struct span_vec vmm_maps = {.elem = sizeof(struct mapping)};
static size_t g_phys_bytes[VMM_MAX_DEVICES];
static atomic_size_t g_granularity = VMM_DEFAULT_GRANULARITY;
static unsigned long long g_op_calls[OP_COUNT], g_op_fail_at[OP_COUNT];
static struct fakecu_vmm_stats g_stats; /* fault counters are the atomics below */
atomic_ullong vmm_faults_unmapped, vmm_faults_no_access;

/* ------------------------------------------------------------------ */
/* Sorted span vectors                                                 */

struct span *vmm_vec_at(const struct span_vec *v, size_t i)
{
    return (struct span *)(v->v + i * v->elem);
}

/* First index whose span starts at or after p. */
size_t vmm_vec_lower_bound(const struct span_vec *v, uintptr_t p)
{
    size_t lo = 0, hi = v->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (vmm_vec_at(v, mid)->va < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Index of the span containing p, or v->n. */
size_t vmm_vec_find(const struct span_vec *v, uintptr_t p)
{
    size_t i = vmm_vec_lower_bound(v, p);
    if (i < v->n && vmm_vec_at(v, i)->va == p)
        return i;
    if (i > 0 && p - vmm_vec_at(v, i - 1)->va < vmm_vec_at(v, i - 1)->size)
        return i - 1;
    return v->n;
}

static bool vec_insert(struct span_vec *v, const void *elem)
{
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 64;
        char *nv = realloc(v->v, nc * v->elem);
        if (!nv)
            return false;
        v->v = nv;
        v->cap = nc;
    }
    size_t i = vmm_vec_lower_bound(v, ((const struct span *)elem)->va);
    memmove(v->v + (i + 1) * v->elem, v->v + i * v->elem, (v->n - i) * v->elem);
    memcpy(v->v + i * v->elem, elem, v->elem);
    v->n++;
    return true;
}

static void vec_remove(struct span_vec *v, size_t i, size_t count)
{
    memmove(v->v + i * v->elem, v->v + (i + count) * v->elem, (v->n - i - count) * v->elem);
    v->n -= count;
}

struct mapping *vmm_map_at(size_t i)
{
    return (struct mapping *)vmm_vec_at(&vmm_maps, i);
}

/* Does any mapping overlap [p, p + n)? */
static bool maps_overlap_locked(uintptr_t p, size_t n)
{
    size_t i = vmm_vec_lower_bound(&vmm_maps, p);
    if (i < vmm_maps.n && vmm_map_at(i)->at.va < p + n)
        return true;
    return i > 0 && vmm_map_at(i - 1)->at.va + vmm_map_at(i - 1)->at.size > p;
}

/* [p, p + n) is exactly a run of adjacent whole mappings: the only ranges
 * cuMemUnmap and cuMemSetAccess accept. */
static bool exact_mappings_locked(uintptr_t p, size_t n, size_t *first, size_t *count)
{
    size_t i = vmm_vec_lower_bound(&vmm_maps, p), k = i;
    uintptr_t cur = p, end = p + n;
    while (cur < end) {
        if (k == vmm_maps.n || vmm_map_at(k)->at.va != cur)
            return false;
        cur += vmm_map_at(k)->at.size;
        k++;
    }
    if (cur != end || k == i)
        return false;
    *first = i;
    *count = k - i;
    return true;
}

/* ------------------------------------------------------------------ */
/* Set-up, argument checks, fault injection                            */

static bool granularity_ok(size_t g)
{
    long page = sysconf(_SC_PAGESIZE);
    return g && !(g & (g - 1)) && page > 0 && g % (size_t)page == 0;
}

static void vmm_init(void)
{
    const char *g = getenv("FAKECUDA_VMM_GRANULARITY");
    if (g && *g) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(g, &end, 10);
        if (*end == 'k' || *end == 'K')
            v <<= 10, end++;
        else if (*end == 'm' || *end == 'M')
            v <<= 20, end++;
        if (errno || *end || *g == '-' || !granularity_ok((size_t)v))
            fprintf(stderr, "fakecuda: ignoring invalid FAKECUDA_VMM_GRANULARITY=%s "
                            "(a power of two, a multiple of the page size; K/M suffixes)\n", g);
        else
            atomic_store(&g_granularity, (size_t)v);
    }
    const char *f = getenv("FAKECUDA_FAIL_CREATE_AT");
    if (f && *f) {
        char *end;
        unsigned long long n = strtoull(f, &end, 10);
        if (*end || *f == '-')
            fprintf(stderr, "fakecuda: ignoring invalid FAKECUDA_FAIL_CREATE_AT=%s\n", f);
        else
            g_op_fail_at[OP_CREATE] = n;
    }
}

/* Initialisation and teardown state come from fake_cuda.c through an
 * ordinary entry point; *ndev gets the device count. */
CUresult vmm_enter(int *ndev)
{
    pthread_once(&vmm_lock_once, vmm_init);
    return cuDeviceGetCount(ndev);
}

static bool device_location_ok(const CUmemLocation *loc, int ndev)
{
    return loc->type == CU_MEM_LOCATION_TYPE_DEVICE && loc->id >= 0 && loc->id < ndev;
}

static CUresult check_prop(const CUmemAllocationProp *prop, int ndev)
{
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (!device_location_ok(&prop->location, ndev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED; /* no Windows or fabric handles on the fake */
    return CUDA_SUCCESS;
}

/* Counts one call of op that passed its checks; true when it must fail. */
static bool injected_failure_locked(enum vmm_op op)
{
    g_op_calls[op]++;
    if (g_op_fail_at[op] && g_op_calls[op] >= g_op_fail_at[op]) {
        g_op_fail_at[op] = 0;
        return true;
    }
    return false;
}

/* Frees a physical allocation no handle or mapping holds any more. Called
 * with vmm_lock held for writing; the caller uncharges the device after
 * dropping it (fake_cuda.c's lock comes first). */
static void phys_destroy_locked(struct phys *ph)
{
    HASH_DEL(g_phys, ph);
    close(ph->fd);
    g_phys_bytes[ph->dev] -= ph->size;
    g_stats.physical_bytes -= ph->size;
    g_stats.handles--;
}

static struct phys *phys_find_locked(CUmemGenericAllocationHandle h)
{
    struct phys *ph = NULL;
    HASH_FIND(hh, g_phys, &h, sizeof h, ph);
    return ph && ph->refs ? ph : NULL; /* released: the handle value is dead */
}

/* ------------------------------------------------------------------ */
/* Granularity, address space                                          */

VMM_API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option)
{
    int ndev;
    CUresult r = vmm_enter(&ndev);
    if (r)
        return r;
    if (!granularity || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                         option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = check_prop(prop, ndev)))
        return r;
    *granularity = atomic_load(&g_granularity);
    return CUDA_SUCCESS;
}

static void *reserve_at_hint(uintptr_t hint, size_t size)
{
    void *p = mmap((void *)hint, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                   -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if ((uintptr_t)p != hint) { /* a kernel without MAP_FIXED_NOREPLACE took it as a hint */
        munmap(p, size);
        return NULL;
    }
    return p;
}

/* Over-reserves by the alignment and trims both ends. */
static void *reserve_aligned(size_t size, size_t alignment)
{
    if (size > SIZE_MAX - alignment)
        return NULL;
    char *p = mmap(NULL, size + alignment, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    char *start = (char *)(((uintptr_t)p + alignment - 1) & ~(uintptr_t)(alignment - 1));
    if (start > p)
        munmap(p, (size_t)(start - p));
    size_t tail = (size_t)(p + size + alignment - (start + size));
    if (tail)
        munmap(start + size, tail);
    return start;
}

/* addr is a hint, as in the real driver: honoured when that range is free. */
VMM_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                    unsigned long long flags)
{
    int ndev;
    CUresult r = vmm_enter(&ndev);
    if (r)
        return r;
    size_t gran = atomic_load(&g_granularity);
    if (!alignment)
        alignment = gran;
    if (!ptr || flags || !size || size % gran || (alignment & (alignment - 1)) || alignment % gran)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_rwlock_wrlock(&vmm_lock);
    bool fail = injected_failure_locked(OP_RESERVE);
    pthread_rwlock_unlock(&vmm_lock);
    if (fail)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = addr && addr % alignment == 0 ? reserve_at_hint((uintptr_t)addr, size) : NULL;
    if (!p && !(p = reserve_aligned(size, alignment)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct reservation res = {.at = {(uintptr_t)p, size}};
    pthread_rwlock_wrlock(&vmm_lock);
    bool ok = vec_insert(&vmm_res, &res);
    if (ok)
        g_stats.reserved_bytes += size;
    pthread_rwlock_unlock(&vmm_lock);
    if (!ok) {
        munmap(p, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* Only a whole reservation with nothing mapped in it may be freed: freeing
 * address space under live mappings would leave them unreachable. */
VMM_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    int ndev;
    CUresult r = vmm_enter(&ndev);
    if (r)
        return r;
    pthread_rwlock_wrlock(&vmm_lock);
    size_t i = vmm_vec_find(&vmm_res, (uintptr_t)ptr);
    if (i == vmm_res.n || vmm_vec_at(&vmm_res, i)->va != (uintptr_t)ptr || vmm_vec_at(&vmm_res, i)->size != size) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (maps_overlap_locked((uintptr_t)ptr, size)) {
        fprintf(stderr, "fakecuda: cuMemAddressFree(%p, %zu): the range still has mappings\n",
                (void *)(uintptr_t)ptr, size);
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        vec_remove(&vmm_res, i, 1);
        g_stats.reserved_bytes -= size;
        munmap((void *)(uintptr_t)ptr, size);
    }
    pthread_rwlock_unlock(&vmm_lock);
    return r;
}

/* ------------------------------------------------------------------ */
/* Physical allocations                                                */

VMM_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                            unsigned long long flags)
{
    int ndev;
    CUresult r = vmm_enter(&ndev);
    if (r)
        return r;
    if (!handle || flags || !size || size % atomic_load(&g_granularity))
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = check_prop(prop, ndev)))
        return r;
    int dev = prop->location.id;
    pthread_rwlock_wrlock(&vmm_lock);
    bool fail = injected_failure_locked(OP_CREATE);
    pthread_rwlock_unlock(&vmm_lock);
    if (fail || !fc_device_charge(dev, size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    char name[32];
    snprintf(name, sizeof name, VMM_MEMFD_PREFIX "%d", dev);
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)size)) {
        if (fd >= 0)
            close(fd);
        fc_device_uncharge(dev, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return vmm_phys_add(dev, fd, size, prop->requestedHandleTypes, false, handle);
}

CUresult vmm_phys_add(int dev, int fd, size_t size, unsigned handle_types, bool imported,
                      CUmemGenericAllocationHandle *handle)
{
    struct phys *ph = calloc(1, sizeof *ph);
    if (!ph) {
        close(fd);
        fc_device_uncharge(dev, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ph = (struct phys){.dev = dev, .fd = fd, .size = size, .handle_types = handle_types, .refs = 1,
                        .granularity = atomic_load(&g_granularity)};
    pthread_rwlock_wrlock(&vmm_lock);
    CUmemGenericAllocationHandle id = ph->id = g_next_id++;
    HASH_ADD(hh, g_phys, id, sizeof ph->id, ph);
    g_phys_bytes[dev] += size;
    g_stats.physical_bytes += size;
    g_stats.handles++;
    if (imported)
        g_stats.imports++;
    else
        g_stats.creates++;
    pthread_rwlock_unlock(&vmm_lock);
    *handle = id;
    return CUDA_SUCCESS;
}

VMM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    int ndev;
    CUresult r = vmm_enter(&ndev);
    if (r)
        return r;
    pthread_rwlock_wrlock(&vmm_lock);
    struct phys *ph = phys_find_locked(handle);
    struct phys gone = {.dev = -1};
    if (!ph) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        g_stats.releases++;
        if (--ph->refs == 0 && ph->maps == 0) {
            gone = *ph;
            phys_destroy_locked(ph);
            free(ph);
        }
    }
    pthread_rwlock_unlock(&vmm_lock);
    if (gone.dev >= 0)
        fc_device_uncharge(gone.dev, gone.size);
    return r;
}

VMM_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                        CUmemGenericAllocationHandle handle)
{
    int ndev;
    CUresult r = vmm_enter(&ndev);
    if (r)
        return r;
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_rwlock_rdlock(&vmm_lock);
    struct phys *ph = phys_find_locked(handle);
    if (ph) {
        memset(prop, 0, sizeof *prop);
        prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop->requestedHandleTypes = (CUmemAllocationHandleType)ph->handle_types;
        prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop->location.id = ph->dev;
    }
    pthread_rwlock_unlock(&vmm_lock);
    return ph ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Any address inside a mapping gives back that mapping's handle, with one
 * more reference the caller must cuMemRelease. */
VMM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    int ndev;
    CUresult r = vmm_enter(&ndev);
    if (r)
        return r;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_rwlock_wrlock(&vmm_lock);
    size_t i = vmm_vec_find(&vmm_maps, (uintptr_t)addr);
    if (i < vmm_maps.n) {
        vmm_map_at(i)->ph->refs++;
        *handle = vmm_map_at(i)->ph->id;
        g_stats.retains++;
    }
    pthread_rwlock_unlock(&vmm_lock);
    return i < vmm_maps.n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* A POSIX file descriptor (a dup of the memfd, the caller's to close), and
 * only for allocations created asking for that handle type. */
VMM_API CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                             CUmemAllocationHandleType handleType, unsigned long long flags)
{
    int ndev;
    CUresult r = vmm_enter(&ndev);
    if (r)
        return r;
    if (!shareableHandle || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_rwlock_rdlock(&vmm_lock);
    struct phys *ph = phys_find_locked(handle);
    int fd = -1;
    if (!ph)
        r = CUDA_ERROR_INVALID_VALUE;
    else if (!(ph->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        r = CUDA_ERROR_INVALID_VALUE; /* not requested in cuMemCreate's prop */
    else if ((fd = dup(ph->fd)) < 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_rwlock_unlock(&vmm_lock);
    if (!r)
        *(int *)shareableHandle = fd;
    return r;
}

/* ------------------------------------------------------------------ */
/* Mapping and access                                                  */

/* The whole handle, at a granularity-aligned address inside one
 * reservation, where nothing is mapped yet. */
VMM_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                         unsigned long long flags)
{
    int ndev;
    CUresult r = vmm_enter(&ndev);
    if (r)
        return r;
    if (flags || offset)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t p = (uintptr_t)ptr;
    pthread_rwlock_wrlock(&vmm_lock);
    struct phys *ph = phys_find_locked(handle);
    size_t ri = vmm_vec_find(&vmm_res, p);
    const struct span *res = ri < vmm_res.n ? vmm_vec_at(&vmm_res, ri) : NULL;
    if (!ph) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (size != ph->size || p % ph->granularity || !res || size > res->size - (p - res->va)) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (maps_overlap_locked(p, size)) {
        r = CUDA_ERROR_INVALID_VALUE; /* already mapped: unmap first */
    } else if (injected_failure_locked(OP_MAP)) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        struct mapping m = {.at = {p, size}, .ph = ph};
        /* Insert first: a failed mmap is then undone without touching
         * the reservation, and a failed insert leaves nothing to undo. */
        if (!vec_insert(&vmm_maps, &m)) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else if (mmap((void *)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, ph->fd, 0) == MAP_FAILED) {
            vec_remove(&vmm_maps, vmm_vec_find(&vmm_maps, p), 1);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            ph->maps++;
            g_stats.mapped_bytes += size;
            g_stats.maps++;
        }
    }
    pthread_rwlock_unlock(&vmm_lock);
    return r;
}

/* Exactly whole mappings (one call may cover several adjacent ones), as the
 * real driver demands; the pages become reserved, unmapped address space. */
VMM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    int ndev;
    CUresult r = vmm_enter(&ndev);
    if (r)
        return r;
    uintptr_t p = (uintptr_t)ptr;
    size_t first, count;
    struct phys **gone = NULL;
    size_t ngone = 0;
    pthread_rwlock_wrlock(&vmm_lock);
    if (!size || p + size < p || !exact_mappings_locked(p, size, &first, &count)) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (!(gone = calloc(count, sizeof *gone)) ||
        mmap((void *)p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) ==
            MAP_FAILED) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    for (size_t k = 0; k < count; k++) {
        struct phys *ph = vmm_map_at(first + k)->ph;
        if (--ph->maps == 0 && ph->refs == 0) {
            phys_destroy_locked(ph);
            gone[ngone++] = ph;
        }
    }
    vec_remove(&vmm_maps, first, count);
    g_stats.mapped_bytes -= size;
    g_stats.unmaps += count;
out:
    pthread_rwlock_unlock(&vmm_lock);
    for (size_t k = 0; k < ngone; k++) {
        fc_device_uncharge(gone[k]->dev, gone[k]->size);
        free(gone[k]);
    }
    free(gone);
    return r;
}

static int host_prot(const struct mapping *m)
{
    if (m->write_mask)
        return PROT_READ | PROT_WRITE;
    return m->read_mask ? PROT_READ : PROT_NONE;
}

/* The host view follows the most any device may do, so a test can read
 * through a read-only mapping but not write it, and touch nothing that no
 * device may touch. */
VMM_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    int ndev;
    CUresult r = vmm_enter(&ndev);
    if (r)
        return r;
    if (!desc || !count)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            return CUDA_ERROR_INVALID_VALUE;
        if (!device_location_ok(&desc[i].location, ndev))
            return CUDA_ERROR_INVALID_DEVICE;
        if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
    }
    uintptr_t p = (uintptr_t)ptr;
    size_t first, n;
    pthread_rwlock_wrlock(&vmm_lock);
    if (!size || p + size < p || !exact_mappings_locked(p, size, &first, &n)) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (injected_failure_locked(OP_SET_ACCESS)) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        for (size_t k = first; k < first + n; k++) {
            struct mapping *m = vmm_map_at(k);
            for (size_t i = 0; i < count; i++) {
                uint32_t bit = 1u << desc[i].location.id;
                m->read_mask = desc[i].flags & CU_MEM_ACCESS_FLAGS_PROT_READ ? m->read_mask | bit
                                                                             : m->read_mask & ~bit;
                m->write_mask = desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? m->write_mask | bit
                                                                                    : m->write_mask & ~bit;
            }
            mprotect((void *)m->at.va, m->at.size, host_prot(m));
        }
        g_stats.set_access_calls++;
    }
    pthread_rwlock_unlock(&vmm_lock);
    return r;
}

VMM_API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
    int ndev;
    CUresult r = vmm_enter(&ndev);
    if (r)
        return r;
    if (!flags || !location || !device_location_ok(location, ndev))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_rwlock_rdlock(&vmm_lock);
    size_t i = vmm_vec_find(&vmm_maps, (uintptr_t)ptr);
    if (i < vmm_maps.n) {
        uint32_t bit = 1u << location->id;
        const struct mapping *m = vmm_map_at(i);
        *flags = m->write_mask & bit ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                 : m->read_mask & bit ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                      : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    }
    pthread_rwlock_unlock(&vmm_lock);
    return i < vmm_maps.n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

bool fc_vmm_mapping_of(uintptr_t p, int *dev, uintptr_t *base, size_t *size)
{
    pthread_once(&vmm_lock_once, vmm_init);
    pthread_rwlock_rdlock(&vmm_lock);
    size_t i = vmm_vec_find(&vmm_maps, p);
    bool found = i < vmm_maps.n;
    if (found) {
        const struct mapping *m = vmm_map_at(i);
        *dev = m->ph->dev;
        *base = m->at.va;
        *size = m->at.size;
    }
    pthread_rwlock_unlock(&vmm_lock);
    return found;
}

/* ------------------------------------------------------------------ */
/* Device reset (called from fake_cuda.c)                              */

void fc_vmm_device_reset(int dev)
{
    pthread_once(&vmm_lock_once, vmm_init);
    if (dev < 0 || dev >= VMM_MAX_DEVICES)
        return;
    pthread_rwlock_wrlock(&vmm_lock);
    size_t unmapped = 0;
    for (size_t i = 0; i < vmm_maps.n;) {
        struct mapping *m = vmm_map_at(i);
        if (m->ph->dev != dev) {
            i++;
            continue;
        }
        mmap((void *)m->at.va, m->at.size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        g_stats.mapped_bytes -= m->at.size;
        m->ph->maps--;
        vec_remove(&vmm_maps, i, 1);
        unmapped++;
    }
    size_t destroyed = 0;
    struct phys *ph, *tmp;
    HASH_ITER(hh, g_phys, ph, tmp) {
        if (ph->dev != dev)
            continue;
        phys_destroy_locked(ph); /* the caller zeroes the device's charge */
        free(ph);
        destroyed++;
    }
    g_stats.reset_destroyed += destroyed;
    pthread_rwlock_unlock(&vmm_lock);
    if (destroyed)
        fprintf(stderr, "fakecuda: reset of device %d destroyed %zu VMM allocation(s) still alive "
                        "(%zu mapping(s) unmapped)\n", dev, destroyed, unmapped);
}

/* ------------------------------------------------------------------ */
/* Test-only controls and statistics                                   */

VMM_API void fakecu_vmm_get_stats(struct fakecu_vmm_stats *out)
{
    if (!out)
        return;
    pthread_rwlock_rdlock(&vmm_lock);
    *out = g_stats;
    pthread_rwlock_unlock(&vmm_lock);
    out->faults_unmapped = atomic_load(&vmm_faults_unmapped);
    out->faults_no_access = atomic_load(&vmm_faults_no_access);
}

VMM_API size_t fakecu_vmm_physical_bytes(int dev)
{
    if (dev < 0 || dev >= VMM_MAX_DEVICES)
        return 0;
    pthread_rwlock_rdlock(&vmm_lock);
    size_t v = g_phys_bytes[dev];
    pthread_rwlock_unlock(&vmm_lock);
    return v;
}

VMM_API int fakecu_vmm_set_granularity(size_t bytes)
{
    pthread_once(&vmm_lock_once, vmm_init);
    if (!granularity_ok(bytes))
        return -1;
    atomic_store(&g_granularity, bytes);
    return 0;
}

VMM_API int fakecu_vmm_fail_at(const char *fn, unsigned long long n)
{
    pthread_once(&vmm_lock_once, vmm_init);
    for (int op = 0; op < OP_COUNT; op++)
        if (fn && !strcmp(fn, k_op_names[op])) {
            pthread_rwlock_wrlock(&vmm_lock);
            g_op_fail_at[op] = n ? g_op_calls[op] + n : 0;
            pthread_rwlock_unlock(&vmm_lock);
            return 0;
        }
    return -1;
}
