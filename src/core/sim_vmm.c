// SPDX-License-Identifier: MIT
// The simulated device's virtual-memory group: address ranges, physical pages and mappings, kept
// page-accurate without any memory behind them.
//
// The simulation is strict where the CUDA driver is strict, so that replay and the tests catch
// what would fail (or silently corrupt memory) on a GPU: a mapping may not overlap another, an
// unmap must cover whole mappings exactly, access can only be given to mapped bytes, and a range
// can only be freed once nothing is mapped in it. Every refusal is counted and its reason kept
// (cci_sim_vmm_stats_get), so a test can assert both that misuse is refused and that correct use
// never is. Physical pages are counted against the device's capacity together with its ordinary
// segments; a released page's memory goes with its last mapping, as in the driver.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_vmm.h"
#include "grow.h"

// Ranges come from their own part of the simulated address space, below the ordinary segments
// (backend_sim.c starts those at 0x7f0000000000), and are never reused.
#define VA_BASE ((uintptr_t)0x100000000000ull)
#define VA_LIMIT ((uintptr_t)0x7f0000000000ull)
#define DEFAULT_GRANULARITY ((size_t)2 << 20)

typedef struct va_range {
    uintptr_t base;
    size_t size;
} va_range;

typedef struct page {
    size_t size;
    uint32_t mappings;
    uint8_t alive;     // memory still exists (not released, or released but still mapped)
    uint8_t released;  // the handle was given back
} page;

typedef struct mapping {
    uintptr_t va;
    size_t size;
    uint64_t page;
    uint8_t access;
} mapping;

struct sim_vmm {
    pthread_mutex_t *lock;
    const size_t *segment_bytes;
    size_t capacity;
    size_t granularity;
    uintptr_t cursor;

    va_range *ranges;
    size_t nranges, rangecap;
    page *pages;  // handle h is pages[h - 1]; handles are never reused
    size_t npages, pagecap;
    mapping *maps;  // sorted by va
    size_t nmaps, mapcap;

    size_t live_pages, physical, mapped;
    uint64_t calls[6];  // create, release, map, unmap, set_access, va_reserve
    uint64_t errors;
    char last_error[160];
};

enum { CALL_CREATE, CALL_RELEASE, CALL_MAP, CALL_UNMAP, CALL_ACCESS, CALL_RESERVE };

sim_vmm *cci__sim_vmm_create(pthread_mutex_t *device_lock, const size_t *segment_bytes, size_t capacity)
{
    sim_vmm *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    v->lock = device_lock;
    v->segment_bytes = segment_bytes;
    v->capacity = capacity;
    v->granularity = DEFAULT_GRANULARITY;
    v->cursor = VA_BASE;
    return v;
}

void cci__sim_vmm_destroy(sim_vmm *v)
{
    if (!v)
        return;
    free(v->ranges);
    free(v->pages);
    free(v->maps);
    free(v);
}

size_t cci__sim_vmm_physical(const sim_vmm *v) { return v ? v->physical : 0; }

// Records a refusal (lock held) and returns CCI_EBACKEND, as the driver would return an error.
__attribute__((format(printf, 2, 3))) static int refuse(sim_vmm *v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->last_error, sizeof v->last_error, fmt, ap);
    va_end(ap);
    v->errors++;
    return CCI_EBACKEND;
}

static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    void *p = cci_grow(*arr, cap, n, elem, 64);
    if (!p)
        return -1;
    *arr = p;
    return 0;
}

static int aligned(const sim_vmm *v, size_t x) { return x % v->granularity == 0; }

static const va_range *range_holding(const sim_vmm *v, uintptr_t va, size_t size)
{
    for (size_t i = 0; i < v->nranges; i++) {
        const va_range *r = &v->ranges[i];
        if (va >= r->base && va - r->base < r->size)
            return size <= r->size - (va - r->base) ? r : NULL;
    }
    return NULL;
}

// First mapping whose end lies after va (the one holding va, or the next one above it).
static size_t map_search(const sim_vmm *v, uintptr_t va)
{
    size_t lo = 0, hi = v->nmaps;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v->maps[mid].va + v->maps[mid].size <= va)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static page *page_of(sim_vmm *v, uint64_t h) { return h && h <= v->npages ? &v->pages[h - 1] : NULL; }

static void page_drop_memory(sim_vmm *v, page *p)
{
    p->alive = 0;
    v->physical -= p->size;
    v->live_pages--;
}

// ---- the ops ------------------------------------------------------------------------------

static size_t vmm_granularity(void *ctx, int device)
{
    (void)device;
    sim_vmm *v = cci__sim_vmm_of(ctx);
    pthread_mutex_lock(v->lock);
    size_t g = v->granularity;
    pthread_mutex_unlock(v->lock);
    return g;
}

static int vmm_va_reserve(void *ctx, int device, size_t size, size_t align, uintptr_t *va)
{
    (void)device;
    sim_vmm *v = cci__sim_vmm_of(ctx);
    pthread_mutex_lock(v->lock);
    v->calls[CALL_RESERVE]++;
    int rc = CCI_OK;
    if (!size || !aligned(v, size) || (align && (!aligned(v, align) || (align & (align - 1))))) {
        rc = refuse(v, "va_reserve: size %zu or alignment %zu is not a multiple of the granularity %zu",
                    size, align, v->granularity);
    } else {
        uintptr_t a = align > v->granularity ? align : v->granularity;
        uintptr_t base = (v->cursor + a - 1) & ~(a - 1);
        if (base > VA_LIMIT || size > VA_LIMIT - base)
            rc = refuse(v, "va_reserve: simulated address space exhausted (%zu bytes asked)", size);
        else if (grow((void **)&v->ranges, &v->rangecap, v->nranges, sizeof *v->ranges) != 0)
            rc = CCI_EOOM;
        else {
            v->ranges[v->nranges++] = (va_range){base, size};
            v->cursor = base + size;
            *va = base;
        }
    }
    pthread_mutex_unlock(v->lock);
    return rc;
}

static int vmm_va_free(void *ctx, int device, uintptr_t va, size_t size)
{
    (void)device;
    sim_vmm *v = cci__sim_vmm_of(ctx);
    pthread_mutex_lock(v->lock);
    int rc = CCI_OK;
    size_t i = 0;
    while (i < v->nranges && !(v->ranges[i].base == va && v->ranges[i].size == size))
        i++;
    size_t m = map_search(v, va);
    if (i == v->nranges)
        rc = refuse(v, "va_free: [%#lx, +%zu) is not a reserved range", (unsigned long)va, size);
    else if (m < v->nmaps && v->maps[m].va < va + size)
        rc = refuse(v, "va_free: range %#lx still has a page mapped at %#lx", (unsigned long)va,
                    (unsigned long)v->maps[m].va);
    else {
        memmove(&v->ranges[i], &v->ranges[i + 1], (v->nranges - i - 1) * sizeof *v->ranges);
        v->nranges--;
    }
    pthread_mutex_unlock(v->lock);
    return rc;
}

static int vmm_page_create(void *ctx, int device, size_t size, uint64_t *handle)
{
    (void)device;
    sim_vmm *v = cci__sim_vmm_of(ctx);
    pthread_mutex_lock(v->lock);
    v->calls[CALL_CREATE]++;
    int rc = CCI_OK;
    size_t used = v->physical + *v->segment_bytes;
    if (!size || !aligned(v, size))
        rc = refuse(v, "page_create: size %zu is not a multiple of the granularity %zu", size, v->granularity);
    else if (size > v->capacity || used > v->capacity - size)
        rc = CCI_EOOM;
    else if (grow((void **)&v->pages, &v->pagecap, v->npages, sizeof *v->pages) != 0)
        rc = CCI_EOOM;
    else {
        v->pages[v->npages++] = (page){.size = size, .alive = 1};
        *handle = v->npages;
        v->physical += size;
        v->live_pages++;
    }
    pthread_mutex_unlock(v->lock);
    return rc;
}

static int vmm_page_release(void *ctx, int device, uint64_t handle)
{
    (void)device;
    sim_vmm *v = cci__sim_vmm_of(ctx);
    pthread_mutex_lock(v->lock);
    v->calls[CALL_RELEASE]++;
    int rc = CCI_OK;
    page *p = page_of(v, handle);
    if (!p || p->released)
        rc = refuse(v, "page_release: %llu is not a live page handle", (unsigned long long)handle);
    else {
        p->released = 1;
        if (!p->mappings)
            page_drop_memory(v, p);
    }
    pthread_mutex_unlock(v->lock);
    return rc;
}

static int vmm_map(void *ctx, int device, uintptr_t va, size_t size, uint64_t handle)
{
    (void)device;
    sim_vmm *v = cci__sim_vmm_of(ctx);
    pthread_mutex_lock(v->lock);
    v->calls[CALL_MAP]++;
    int rc = CCI_OK;
    page *p = page_of(v, handle);
    size_t m = map_search(v, va);
    if (!p || p->released)
        rc = refuse(v, "map: %llu is not a live page handle", (unsigned long long)handle);
    else if (size != p->size)
        rc = refuse(v, "map: size %zu is not the page's size %zu", size, p->size);
    else if (!aligned(v, va) || !range_holding(v, va, size))
        rc = refuse(v, "map: [%#lx, +%zu) is not inside a reserved range", (unsigned long)va, size);
    else if (m < v->nmaps && v->maps[m].va < va + size)
        rc = refuse(v, "map: [%#lx, +%zu) overlaps the page mapped at %#lx", (unsigned long)va, size,
                    (unsigned long)v->maps[m].va);
    else if (grow((void **)&v->maps, &v->mapcap, v->nmaps, sizeof *v->maps) != 0)
        rc = CCI_EOOM;
    else {
        memmove(&v->maps[m + 1], &v->maps[m], (v->nmaps - m) * sizeof *v->maps);
        v->maps[m] = (mapping){va, size, handle, 0};
        v->nmaps++;
        v->mapped += size;
        p->mappings++;
    }
    pthread_mutex_unlock(v->lock);
    return rc;
}

// The run of adjacent mappings that covers exactly [va, va+size): CCI_OK with its first index and
// count, or a refusal naming what does not line up.
static int exact_run(sim_vmm *v, const char *op, uintptr_t va, size_t size, size_t *first, size_t *count)
{
    size_t m = map_search(v, va), k = m;
    uintptr_t at = va, end = va + size;
    if (!size)
        return refuse(v, "%s: empty range at %#lx", op, (unsigned long)va);
    while (k < v->nmaps && at < end && v->maps[k].va == at) {
        at += v->maps[k].size;
        k++;
    }
    if (at != end)
        return refuse(v, "%s: [%#lx, +%zu) is not exactly covered by mappings (stops at %#lx)", op,
                      (unsigned long)va, size, (unsigned long)at);
    *first = m;
    *count = k - m;
    return CCI_OK;
}

static int vmm_unmap(void *ctx, int device, uintptr_t va, size_t size)
{
    (void)device;
    sim_vmm *v = cci__sim_vmm_of(ctx);
    pthread_mutex_lock(v->lock);
    v->calls[CALL_UNMAP]++;
    size_t first = 0, count = 0;
    int rc = exact_run(v, "unmap", va, size, &first, &count);
    if (rc == CCI_OK) {
        for (size_t k = first; k < first + count; k++) {
            page *p = page_of(v, v->maps[k].page);
            p->mappings--;
            if (p->released && !p->mappings)
                page_drop_memory(v, p);
        }
        memmove(&v->maps[first], &v->maps[first + count], (v->nmaps - first - count) * sizeof *v->maps);
        v->nmaps -= count;
        v->mapped -= size;
    }
    pthread_mutex_unlock(v->lock);
    return rc;
}

static int vmm_set_access(void *ctx, int device, uintptr_t va, size_t size)
{
    (void)device;
    sim_vmm *v = cci__sim_vmm_of(ctx);
    pthread_mutex_lock(v->lock);
    v->calls[CALL_ACCESS]++;
    size_t first = 0, count = 0;
    int rc = CCI_OK;
    // Access may be set on any granularity-aligned part of the mapped bytes, across mappings. It is
    // tracked per mapping (part of a mapping grants all of it): the core always sets it over
    // whole mappings, and the checks that matter are on unmapped bytes.
    if (!aligned(v, va) || !aligned(v, size))
        rc = refuse(v, "set_access: [%#lx, +%zu) is not granularity-aligned", (unsigned long)va, size);
    else {
        size_t m = map_search(v, va);
        uintptr_t start = m < v->nmaps && v->maps[m].va <= va ? v->maps[m].va : va;
        uintptr_t at = start, end = va + size;
        size_t k = m;
        while (k < v->nmaps && at < end && v->maps[k].va == at) {
            at += v->maps[k].size;
            k++;
        }
        if (!size || at < end)
            rc = refuse(v, "set_access: [%#lx, +%zu) is not all mapped (stops at %#lx)", (unsigned long)va,
                        size, (unsigned long)(at > va ? at : va));
        first = m;
        count = k - m;
    }
    for (size_t k = first; rc == CCI_OK && k < first + count; k++)
        v->maps[k].access = 1;
    pthread_mutex_unlock(v->lock);
    return rc;
}

// The simulated device keeps no released pages: a release drops the memory with the page's last
// mapping, so its pool is always empty. Answered rather than left out: the honest figure is 0,
// not "unknown".
static int vmm_pooled(void *ctx, int device, size_t *pages, size_t *bytes)
{
    (void)ctx;
    (void)device;
    *pages = 0;
    *bytes = 0;
    return CCI_OK;
}

const cci_backend_vmm_ops cci__sim_vmm_ops = {
    .granularity = vmm_granularity,
    .va_reserve = vmm_va_reserve,
    .va_free = vmm_va_free,
    .page_create = vmm_page_create,
    .page_release = vmm_page_release,
    .map = vmm_map,
    .unmap = vmm_unmap,
    .set_access = vmm_set_access,
    .pooled = vmm_pooled,
};

// ---- test hooks (backend.h) ---------------------------------------------------------------

int cci_sim_set_granularity(cci_sim_device *sim, size_t granularity)
{
    sim_vmm *v = cci__sim_vmm_of(sim);
    if (granularity < 512 || (granularity & (granularity - 1)))
        return -1;
    pthread_mutex_lock(v->lock);
    int rc = v->npages || v->nranges ? -1 : 0;
    if (!rc)
        v->granularity = granularity;
    pthread_mutex_unlock(v->lock);
    return rc;
}

void cci_sim_vmm_stats_get(cci_sim_device *sim, cci_sim_vmm_stats *out)
{
    sim_vmm *v = cci__sim_vmm_of(sim);
    pthread_mutex_lock(v->lock);
    *out = (cci_sim_vmm_stats){
        .granularity = v->granularity,
        .va_ranges = v->nranges,
        .pages = v->live_pages,
        .physical_bytes = v->physical,
        .mappings = v->nmaps,
        .mapped_bytes = v->mapped,
        .page_creates = v->calls[CALL_CREATE],
        .page_releases = v->calls[CALL_RELEASE],
        .maps = v->calls[CALL_MAP],
        .unmaps = v->calls[CALL_UNMAP],
        .set_access_calls = v->calls[CALL_ACCESS],
        .va_reserves = v->calls[CALL_RESERVE],
        .errors = v->errors,
    };
    memcpy(out->last_error, v->last_error, sizeof out->last_error);
    pthread_mutex_unlock(v->lock);
}

int cci_sim_vmm_accessible(cci_sim_device *sim, uintptr_t va, size_t size)
{
    sim_vmm *v = cci__sim_vmm_of(sim);
    pthread_mutex_lock(v->lock);
    size_t k = map_search(v, va);
    uintptr_t at = va, end = va + size;
    while (k < v->nmaps && at < end && v->maps[k].va <= at && v->maps[k].access) {
        at = v->maps[k].va + v->maps[k].size;
        k++;
    }
    pthread_mutex_unlock(v->lock);
    return size && at >= end;
}
