// SPDX-License-Identifier: MIT
/*
 * Memory pools of the fake driver: each device's default pool (what
 * cuMemAllocAsync draws from) and pools made with cuMemPoolCreate, with the
 * attributes a program reads (bytes used and held, current and high).
 * cuMemAllocFromPoolAsync allocates on the pool's device, in stream order
 * like cuMemAllocAsync. A pool holds memory in 2 MiB steps to cover what is
 * used and never trims it (a release threshold of "keep everything"); a
 * device reset does not touch a pool's figures.
 */
#include <pthread.h>
#include <stdlib.h>

#include "fake_internal.h"

#define POOL_STEP ((size_t)2 << 20)

static struct CUmemPoolHandle_st g_default_pools[64];
static struct CUmemPoolHandle_st *default_pool(int dev);

void fake_pool_charge_locked(struct CUmemPoolHandle_st *pool, size_t size)
{
    pool->used += size;
    if (pool->used > pool->used_high)
        pool->used_high = pool->used;
    size_t want = (pool->used + POOL_STEP - 1) / POOL_STEP * POOL_STEP;
    if (want > pool->reserved)
        pool->reserved = want;
    if (pool->reserved > pool->reserved_high)
        pool->reserved_high = pool->reserved;
}

void fake_pool_uncharge_locked(struct CUmemPoolHandle_st *pool, size_t size)
{
    pool->used -= size < pool->used ? size : pool->used;
}

struct CUmemPoolHandle_st *fake_default_pool(int dev)
{
    return default_pool(dev);
}

// Each default pool's device is written once, before any thread can ask for one (writing it at
// every call raced between threads, as ThreadSanitizer found).
static pthread_once_t g_default_pools_once = PTHREAD_ONCE_INIT;

static void default_pools_init(void)
{
    for (int d = 0; d < 64; d++)
        g_default_pools[d].dev = d;
}

static struct CUmemPoolHandle_st *default_pool(int dev)
{
    pthread_once(&g_default_pools_once, default_pools_init);
    return &g_default_pools[dev];
}

FC_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    ENTER();
    if (!pool_out)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= g_ndev || dev >= 64)
        return CUDA_ERROR_INVALID_DEVICE;
    *pool_out = default_pool(dev);
    return CUDA_SUCCESS;
}

FC_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    ENTER();
    if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->location.id < 0 || props->location.id >= g_ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->dev = props->location.id;
    *pool = p;
    return CUDA_SUCCESS;
}

// A pool is never freed: allocations still made from it keep pointing at it.
FC_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    ENTER();
    if (!pool || (pool >= g_default_pools && pool < g_default_pools + 64))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

FC_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    ENTER();
    if (!pool || !value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    CUresult r = CUDA_SUCCESS;
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: *(int *)value = 1; break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = UINT64_MAX; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = pool->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = pool->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = pool->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = pool->used_high; break;
    default: r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

// The two high-water marks may only be reset (to 0, which makes them the current figure), as in
// CUDA; the reuse flags and the release threshold are accepted.
FC_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    ENTER();
    if (!pool || !value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    CUresult r = CUDA_SUCCESS;
    if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH || attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH) {
        if (*(cuuint64_t *)value != 0)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
            pool->reserved_high = pool->reserved;
        else
            pool->used_high = pool->used;
    } else if (attr < CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES || attr > CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
        r = CUDA_ERROR_INVALID_VALUE;  // (the reuse flags and the release threshold are accepted)
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

// A pool keeps what it reserved (the release threshold is infinite); trimming gives back what is
// neither in use nor asked to be kept, in POOL_STEP units.
FC_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    ENTER();
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    size_t keep = pool->used > minBytesToKeep ? pool->used : minBytesToKeep;
    keep = (keep + POOL_STEP - 1) / POOL_STEP * POOL_STEP;
    if (pool->reserved > keep)
        pool->reserved = keep;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

static CUresult alloc_from_pool(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream h, int per_thread)
{
    ENTER();
    if (!dptr || size == 0 || !pool)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *s;
    CUresult r = resolve_stream_locked(h, per_thread, &s);
    if (!r)
        r = stream_accepts_locked(s);
    pthread_mutex_unlock(&g_lock);
    return r ? r : mem_alloc_core_pool(pool->dev, size, dptr, pool);
}

FC_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream h)
{
    return alloc_from_pool(dptr, size, pool, h, 0);
}

FC_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream h)
{
    return alloc_from_pool(dptr, size, pool, h, 1);
}
