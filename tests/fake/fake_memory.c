// SPDX-License-Identifier: MIT
/*
 * Fake CUDA driver: device memory. The allocation table (host memory, sorted by
 * base so interior pointers resolve) and the cuMem* / cuIpcGetMemHandle entry
 * points over it; kept apart from fake_cuda.c's devices and contexts, which only
 * need host_free for a device reset.
 */
#include "fake_internal.h"

/* ------------------------------------------------------------------ */
/* Allocation table (sorted by base so interior pointers can be found)  */

static size_t alloc_lower_bound(uintptr_t p)
{
    size_t lo = 0, hi = g_nallocs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (g_allocs[mid].base < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

struct alloc *alloc_exact_locked(uintptr_t p)
{
    size_t i = alloc_lower_bound(p);
    return i < g_nallocs && g_allocs[i].base == p ? &g_allocs[i] : NULL;
}

struct alloc *alloc_containing_locked(uintptr_t p)
{
    size_t i = alloc_lower_bound(p);
    if (i < g_nallocs && g_allocs[i].base == p)
        return &g_allocs[i];
    if (i == 0)
        return NULL;
    struct alloc *a = &g_allocs[i - 1];
    return p - a->base < a->size ? a : NULL;
}

static bool alloc_insert_locked(struct alloc a)
{
    if (g_nallocs == g_cap_allocs) {
        size_t nc = g_cap_allocs ? g_cap_allocs * 2 : 256;
        struct alloc *na = realloc(g_allocs, nc * sizeof *na);
        if (!na)
            return false;
        g_allocs = na;
        g_cap_allocs = nc;
    }
    size_t i = alloc_lower_bound(a.base);
    memmove(&g_allocs[i + 1], &g_allocs[i], (g_nallocs - i) * sizeof *g_allocs);
    g_allocs[i] = a;
    g_nallocs++;
    return true;
}

/* Removes the entry and uncharges its device; returns the removed record. */
static struct alloc alloc_remove_locked(struct alloc *a)
{
    struct alloc r = *a;
    size_t i = (size_t)(a - g_allocs);
    memmove(&g_allocs[i], &g_allocs[i + 1], (g_nallocs - i - 1) * sizeof *g_allocs);
    g_nallocs--;
    g_dev[r.dev].used -= r.size;
    g_dev[r.dev].live--;
    if (r.pool)
        fake_pool_uncharge_locked(r.pool, r.size);
    return r;
}

static void *host_alloc(size_t size, bool *mapped)
{
    if (size >= FC_MMAP_THRESHOLD) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        *mapped = true;
        return p == MAP_FAILED ? NULL : p;
    }
    void *p = NULL;
    *mapped = false;
    return posix_memalign(&p, 4096, size) ? NULL : p;
}

void host_free(const struct alloc *a)
{
    if (a->mapped)
        munmap((void *)a->base, a->size);
    else
        free((void *)a->base);
}

CUresult mem_alloc_core(int dev, size_t size, CUdeviceptr *out)
{
    return mem_alloc_core_pool(dev, size, out, NULL);
}

CUresult mem_alloc_core_pool(int dev, size_t size, CUdeviceptr *out, struct CUmemPoolHandle_st *pool)
{
    pthread_mutex_lock(&g_lock);
    g_alloc_attempts++;
    if (g_fail_at && g_alloc_attempts >= g_fail_at) {
        g_fail_at = 0;
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct device *d = &g_dev[dev];
    if (size > d->capacity - d->used) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d->used += size; /* reserve before dropping the lock */
    d->live++;
    pthread_mutex_unlock(&g_lock);

    struct alloc a = {.size = size, .dev = dev, .pool = pool};
    void *p = host_alloc(size, &a.mapped);
    a.base = (uintptr_t)p;

    pthread_mutex_lock(&g_lock);
    if (!p || !alloc_insert_locked(a)) {
        d->used -= size;
        d->live--;
        pthread_mutex_unlock(&g_lock);
        if (p)
            host_free(&a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (pool)
        fake_pool_charge_locked(pool, size);
    pthread_mutex_unlock(&g_lock);
    atomic_fetch_add(&g_cnt_allocs, 1);
    *out = (CUdeviceptr)a.base;
    return CUDA_SUCCESS;
}

/* Executed by a stream worker: the stream-ordered free. */
static void async_free_job(void *arg)
{
    pthread_mutex_lock(&g_lock);
    struct alloc *a = alloc_exact_locked((uintptr_t)arg);
    if (!a || !a->pending_free) { /* gone in a device reset meanwhile */
        pthread_mutex_unlock(&g_lock);
        return;
    }
    struct alloc r = alloc_remove_locked(a);
    pthread_mutex_unlock(&g_lock);
    host_free(&r);
}

/* ------------------------------------------------------------------ */
/* Memory                                                              */

static CUresult sync_alloc_checks(CUdeviceptr *dptr, size_t bytesize, int *dev)
{
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = need_ctx(dev);
    if (r)
        return r;
    if (bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    bool conflict = unsafe_call_conflicts_locked();
    pthread_mutex_unlock(&g_lock);
    return conflict ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

FC_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    ENTER();
    int dev;
    CUresult r = sync_alloc_checks(dptr, bytesize, &dev);
    return r ? r : mem_alloc_core(dev, bytesize, dptr);
}

FC_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    ENTER();
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    int dev;
    CUresult r = sync_alloc_checks(dptr, bytesize, &dev);
    return r ? r : mem_alloc_core(dev, bytesize, dptr);
}

FC_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                   unsigned int ElementSizeBytes)
{
    ENTER();
    if (!pPitch || (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t align = fake_texture_alignment();
    if (WidthInBytes == 0 || Height == 0 || WidthInBytes > SIZE_MAX - (align - 1))
        return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = (WidthInBytes + align - 1) & ~(align - 1);
    if (Height > SIZE_MAX / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    int dev;
    CUresult r = sync_alloc_checks(dptr, pitch * Height, &dev);
    if (!r)
        r = mem_alloc_core(dev, pitch * Height, dptr);
    if (!r)
        *pPitch = pitch;
    return r;
}

FC_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    ENTER();
    CUresult r = need_ctx(NULL);
    if (r)
        return r;
    if (dptr == 0)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&g_lock);
    struct alloc *a = alloc_exact_locked((uintptr_t)dptr);
    if (!a || a->pending_free) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (unsafe_call_conflicts_locked()) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    /* Claim it so a racing free fails, then let in-flight work that may
     * still write the buffer finish before the host memory goes away. */
    a->pending_free = true;
    int dev = a->dev;
    atomic_fetch_add(&g_cnt_frees, 1);
    device_sync_locked(dev);
    a = alloc_exact_locked((uintptr_t)dptr);
    struct alloc gone = {0};
    if (a)
        gone = alloc_remove_locked(a);
    pthread_mutex_unlock(&g_lock);
    if (gone.base)
        host_free(&gone);
    return CUDA_SUCCESS;
}

static CUresult mem_alloc_async(CUdeviceptr *dptr, size_t bytesize, CUstream h, int per_thread)
{
    ENTER();
    if (!dptr || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *s;
    CUresult r = resolve_stream_locked(h, per_thread, &s);
    if (!r)
        r = stream_accepts_locked(s);
    int dev = r ? 0 : s->dev;
    pthread_mutex_unlock(&g_lock);
    return r ? r : mem_alloc_core_pool(dev, bytesize, dptr, fake_default_pool(dev));
}

FC_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return mem_alloc_async(dptr, bytesize, hStream, 0);
}

FC_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return mem_alloc_async(dptr, bytesize, hStream, 1);
}

static CUresult mem_free_async(CUdeviceptr dptr, CUstream h, int per_thread)
{
    ENTER();
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *s;
    CUresult r = resolve_stream_locked(h, per_thread, &s);
    if (r)
        goto out;
    struct alloc *a = alloc_exact_locked((uintptr_t)dptr);
    if (!a || a->pending_free) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    uint64_t seq;
    r = enqueue_locked(s, async_free_job, (void *)(uintptr_t)dptr, NULL, &seq);
    if (r)
        goto out;
    /* A captured free only runs when the graph does, i.e. never here: the
     * allocation stays live. */
    if (seq)
        a->pending_free = true;
    atomic_fetch_add(&g_cnt_frees, 1);
out:
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return mem_free_async(dptr, hStream, 0);
}

FC_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return mem_free_async(dptr, hStream, 1);
}

FC_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    ENTER();
    if (!free_bytes || !total)
        return CUDA_ERROR_INVALID_VALUE;
    int dev;
    CUresult r = need_ctx(&dev);
    if (r)
        return r;
    pthread_mutex_lock(&g_lock);
    *free_bytes = g_dev[dev].capacity - g_dev[dev].used;
    *total = g_dev[dev].capacity;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

FC_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    ENTER();
    CUresult r = need_ctx(NULL);
    if (r)
        return r;
    pthread_mutex_lock(&g_lock);
    struct alloc *a = alloc_containing_locked((uintptr_t)dptr);
    if (a) {
        if (pbase)
            *pbase = a->base;
        if (psize)
            *psize = a->size;
    }
    pthread_mutex_unlock(&g_lock);
    return a ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* Handle layout: magic, base, device, size, exporting pid. Opaque to real
 * code; decodable by tests through fakecu_ipc_handle_base. */
const char k_ipc_magic[8] = {'F', 'K', 'C', 'U', 'I', 'P', 'C', '1'};

FC_API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    ENTER();
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = need_ctx(NULL);
    if (r)
        return r;
    pthread_mutex_lock(&g_lock);
    struct alloc *a = alloc_containing_locked((uintptr_t)dptr);
    struct alloc copy = a ? *a : (struct alloc){0};
    pthread_mutex_unlock(&g_lock);
    if (!a)
        return CUDA_ERROR_INVALID_VALUE;
    memset(pHandle, 0, sizeof *pHandle);
    uint64_t base = copy.base, size = copy.size;
    int32_t dev = copy.dev;
    memcpy(pHandle->reserved, k_ipc_magic, 8);
    memcpy(pHandle->reserved + 8, &base, 8);
    memcpy(pHandle->reserved + 16, &dev, 4);
    memcpy(pHandle->reserved + 24, &size, 8);
    int32_t pid = (int32_t)getpid();
    memcpy(pHandle->reserved + 32, &pid, 4);
    return CUDA_SUCCESS;
}

static atomic_ullong g_ipc_opens, g_ipc_closes;

/* Device memory here is host memory private to the process, so no handle
 * ever opens (fake_cuda_driver.h says what each case answers). The exporting
 * process gets CUDA_ERROR_INVALID_CONTEXT, as from the real driver there. */
static CUresult ipc_open(CUdeviceptr *pdptr, const CUipcMemHandle *handle, unsigned int flags)
{
    atomic_fetch_add(&g_ipc_opens, 1);
    ENTER();
    if (!pdptr || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = need_ctx(NULL);
    if (r)
        return r;
    if (memcmp(handle->reserved, k_ipc_magic, 8))
        return CUDA_ERROR_INVALID_VALUE; /* not ours: a clean refusal, never a mapping */
    int32_t pid;
    memcpy(&pid, handle->reserved + 32, 4);
    return pid == (int32_t)getpid() ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_NOT_SUPPORTED;
}

FC_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return ipc_open(pdptr, &handle, Flags);
}

FC_API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return ipc_open(pdptr, &handle, Flags);
}

/* Nothing was ever opened, so there is nothing to close. */
FC_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    (void)dptr;
    atomic_fetch_add(&g_ipc_closes, 1);
    ENTER();
    CUresult r = need_ctx(NULL);
    return r ? r : CUDA_ERROR_INVALID_VALUE;
}

FC_API unsigned long long fakecu_ipc_opens(void)
{
    return atomic_load(&g_ipc_opens);
}

FC_API unsigned long long fakecu_ipc_closes(void)
{
    return atomic_load(&g_ipc_closes);
}
