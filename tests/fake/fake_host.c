// SPDX-License-Identifier: MIT
/*
 * Pinned host memory in the fake libcuda.so.1: cuMemHostAlloc, cuMemAllocHost_v2,
 * cuMemFreeHost, cuMemHostRegister_v2, cuMemHostUnregister, cuMemHostGetFlags and
 * cuMemHostGetDevicePointer_v2, with CUDA's strictness where a caching layer could slip:
 *   - a free, an unregister and the flag and device-pointer questions take an allocation's
 *     START only (an interior pointer is CUDA_ERROR_INVALID_VALUE), so a layer that carves
 *     buffers out of one allocation must ask about the allocation;
 *   - pointer attributes (fake_pointer.c) answer for interior pointers, as CUDA does;
 *   - cuMemFreeHost synchronises the current context first, as CUDA's free does (the fake's
 *     queued copies would otherwise read freed memory);
 *   - a reset of the allocating device's primary context frees its pinned allocations (and
 *     forgets its registrations), as the context's destruction does in CUDA.
 * FAKECUDA_PIN_US_PER_MB=N makes pinning cost N microseconds per MiB (default 0), so that a
 * benchmark on the fake shows what pinning per batch costs.
 */
#include "fake_internal.h"

#include <sys/mman.h>

struct pinned_range {
    uintptr_t base;
    size_t size;
    unsigned flags;  /* cuMemHostAlloc's, or cuMemHostRegister's for a registered range */
    int registered;
    int dev;
    int resident_pct; /* registered: the share of its pages present when it was registered */
    struct pinned_range *next;
};

static pthread_mutex_t g_host_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pinned_range *g_pinned;
static atomic_ullong g_cnt_pins, g_cnt_unpins;

static void pin_cost(size_t size)
{
    static atomic_long us_per_mb = -1;
    long v = atomic_load(&us_per_mb);
    if (v < 0) {
        const char *e = getenv("FAKECUDA_PIN_US_PER_MB");
        v = e && *e ? strtol(e, NULL, 10) : 0;
        atomic_store(&us_per_mb, v < 0 ? 0 : v);
    }
    unsigned long long us = (unsigned long long)v * size >> 20;
    if (us) {
        struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
}

/* The share of [p, p + n)'s pages that are present (mincore), in percent; -1 when unknown. */
static int resident_pct(void *p, size_t n)
{
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)p & ~(uintptr_t)(pg - 1);
    size_t len = (uintptr_t)p + n - start, pages = (len + (size_t)pg - 1) / (size_t)pg;
    unsigned char *vec = malloc(pages);
    if (!vec || mincore((void *)start, len, vec) != 0) {
        free(vec);
        return -1;
    }
    size_t in = 0;
    for (size_t i = 0; i < pages; i++)
        in += vec[i] & 1;
    free(vec);
    return (int)(100 * in / pages);
}

static void add_range(void *p, size_t size, unsigned flags, int registered, int dev)
{
    struct pinned_range *r = calloc(1, sizeof *r);
    if (!r)
        abort(); /* the fake's own books: a test machine out of memory is no test */
    *r = (struct pinned_range){(uintptr_t)p, size, flags, registered, dev,
                               registered ? resident_pct(p, size) : 100, NULL};
    pthread_mutex_lock(&g_host_lock);
    r->next = g_pinned;
    g_pinned = r;
    pthread_mutex_unlock(&g_host_lock);
    atomic_fetch_add(&g_cnt_pins, 1);
}

/* The range that starts at p (registered or not as asked), unlinked when take. */
static bool find_start(void *p, int registered, int take, struct pinned_range *out)
{
    bool found = false;
    pthread_mutex_lock(&g_host_lock);
    for (struct pinned_range **pp = &g_pinned; *pp; pp = &(*pp)->next) {
        struct pinned_range *r = *pp;
        if (r->base != (uintptr_t)p || (registered >= 0 && r->registered != registered))
            continue;
        *out = *r;
        if (take) {
            *pp = r->next;
            free(r);
        }
        found = true;
        break;
    }
    pthread_mutex_unlock(&g_host_lock);
    return found;
}

bool fc_host_range_of(uintptr_t p, int *dev, uintptr_t *base, size_t *size)
{
    bool found = false;
    pthread_mutex_lock(&g_host_lock);
    for (struct pinned_range *r = g_pinned; r; r = r->next) {
        if (p >= r->base && p - r->base < r->size) {
            *dev = r->dev;
            *base = r->base;
            *size = r->size;
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&g_host_lock);
    return found;
}

FC_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    ENTER();
    int dev = 0;
    CUresult r = need_ctx(&dev);
    if (r)
        return r;
    if (!pp || !bytesize || (Flags & ~7u))
        return CUDA_ERROR_INVALID_VALUE;
    size_t n = (bytesize + 4095) & ~(size_t)4095;
    void *p = aligned_alloc(4096, n);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pin_cost(n);
    add_range(p, bytesize, Flags, 0, dev);
    *pp = p;
    return CUDA_SUCCESS;
}

FC_API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return cuMemHostAlloc(pp, bytesize, 0);
}

FC_API CUresult cuMemFreeHost(void *p)
{
    ENTER();
    struct pinned_range r;
    if (!find_start(p, 0, 0, &r))
        return CUDA_ERROR_INVALID_VALUE;
    int dev;
    if (need_ctx(&dev) == CUDA_SUCCESS)
        cuCtxSynchronize();
    if (!find_start(p, 0, 1, &r))
        return CUDA_ERROR_INVALID_VALUE;  /* another thread freed it meanwhile */
    free(p);
    atomic_fetch_add(&g_cnt_unpins, 1);
    return CUDA_SUCCESS;
}

FC_API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    ENTER();
    int dev = 0;
    CUresult r = need_ctx(&dev);
    if (r)
        return r;
    if (!p || !bytesize || (Flags & ~0xfu))
        return CUDA_ERROR_INVALID_VALUE;
    int dummy;
    uintptr_t b;
    size_t s;
    if (fc_host_range_of((uintptr_t)p, &dummy, &b, &s))
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    pin_cost(bytesize);
    add_range(p, bytesize, Flags, 1, dev);
    return CUDA_SUCCESS;
}

FC_API CUresult cuMemHostUnregister(void *p)
{
    ENTER();
    struct pinned_range r;
    if (!find_start(p, 1, 1, &r))
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    atomic_fetch_add(&g_cnt_unpins, 1);
    return CUDA_SUCCESS;
}

FC_API CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    ENTER();
    struct pinned_range r;
    if (!pFlags || !find_start(p, 0, 0, &r))
        return CUDA_ERROR_INVALID_VALUE;
    *pFlags = r.flags;
    return CUDA_SUCCESS;
}

FC_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    ENTER();
    struct pinned_range r;
    if (!pdptr || Flags || !find_start(p, -1, 0, &r))
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p;  /* unified addressing: the host address */
    return CUDA_SUCCESS;
}

void fc_host_device_reset(int dev)
{
    pthread_mutex_lock(&g_host_lock);
    for (struct pinned_range **pp = &g_pinned; *pp;) {
        struct pinned_range *r = *pp;
        if (r->dev != dev) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        if (!r->registered)
            free((void *)r->base);  /* the context's allocation goes with it */
        free(r);
    }
    pthread_mutex_unlock(&g_host_lock);
}

FC_API int fakecu_host_registered(const void *p)
{
    struct pinned_range r;
    if (find_start((void *)p, 1, 0, &r))
        return r.resident_pct;
    return find_start((void *)p, 0, 0, &r) ? -1 : -2;
}

FC_API unsigned long long fakecu_host_pins(void)
{
    return atomic_load(&g_cnt_pins);
}

FC_API unsigned long long fakecu_host_unpins(void)
{
    return atomic_load(&g_cnt_unpins);
}
