// SPDX-License-Identifier: MIT
/*
 * Fake CUDA driver (libcuda.so.1): initialisation, devices, contexts, memory.
 * The model (streams, holds, events, graphs) is described in fake_internal.h;
 * streams live in fake_stream.c, events in fake_event.c, graphs in
 * fake_graph.c, cuGetProcAddress and the test-only API in fake_procs.c.
 */
#include "fake_internal.h"
#include "fake_vmm.h"

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_progress = PTHREAD_COND_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
pthread_key_t g_ptds_key;

atomic_int g_inited;
atomic_int g_deinit;

int g_ndev = 1;
struct device g_dev[FC_MAX_DEVICES];
struct CUctx_st *g_created_ctxs;
struct CUstream_st *g_all_streams;
struct CUstream_st *g_stream_reg;
struct CUevent_st *g_event_reg;

struct alloc *g_allocs;
size_t g_nallocs, g_cap_allocs;

unsigned long long g_alloc_attempts;
unsigned long long g_fail_at;

atomic_ullong g_cnt_allocs, g_cnt_frees, g_cnt_sync, g_cnt_ctx_sync;
atomic_ullong g_cnt_stream_query, g_cnt_event_record, g_cnt_event_query, g_cnt_event_sync,
    g_cnt_stream_wait_event, g_cnt_ctx_record, g_cnt_ctx_wait;

struct pa_count *g_pa;
size_t g_npa;
unsigned long long g_pa_total;

_Thread_local struct CUctx_st *tls_ctx[FC_CTX_STACK];
_Thread_local int tls_depth;
_Thread_local struct per_thread_streams *tls_ptds;

/* ------------------------------------------------------------------ */
/* Initialisation                                                      */

static size_t parse_size(const char *name, const char *s, size_t dflt)
{
    if (!s || !*s)
        return dflt;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-')
        goto bad;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && *end == 'i')
        end++;
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end)
        goto bad;
    if (shift && v > (~0ULL >> shift))
        goto bad;
    v <<= shift;
    if (v > SIZE_MAX)
        goto bad;
    return (size_t)v;
bad:
    fprintf(stderr, "fakecuda: ignoring invalid %s=%s\n", name, s);
    return dflt;
}

static void global_init(void)
{
    size_t cap = parse_size("FAKECUDA_CAPACITY", getenv("FAKECUDA_CAPACITY"), (size_t)1 << 30);
    const char *nd = getenv("FAKECUDA_DEVICES");
    if (nd && *nd) {
        char *end;
        long n = strtol(nd, &end, 10);
        if (*end || n < 0 || n > FC_MAX_DEVICES)
            fprintf(stderr, "fakecuda: ignoring invalid FAKECUDA_DEVICES=%s (0..%d)\n", nd,
                    FC_MAX_DEVICES);
        else
            g_ndev = (int)n;
    }
    for (int i = 0; i < FC_MAX_DEVICES; i++) {
        g_dev[i].capacity = cap;
        g_dev[i].primary.magic = FC_CTX_MAGIC;
        g_dev[i].primary.dev = i;
        g_dev[i].primary.primary = true;
    }
    const char *fa = getenv("FAKECUDA_FAIL_ALLOC_AT");
    if (fa && *fa) {
        char *end;
        unsigned long long n = strtoull(fa, &end, 10);
        if (*end)
            fprintf(stderr, "fakecuda: ignoring invalid FAKECUDA_FAIL_ALLOC_AT=%s\n", fa);
        else
            g_fail_at = n;
    }
    pthread_key_create(&g_ptds_key, ptds_destructor);
}

void ensure_init(void)
{
    pthread_once(&g_once, global_init);
}

/* Like the real driver after its teardown: calls made from other libraries'
 * destructors that run later get CUDA_ERROR_DEINITIALIZED. */
__attribute__((destructor)) static void fc_fini(void)
{
    atomic_store(&g_deinit, 1);
}


/* ------------------------------------------------------------------ */
/* Contexts                                                            */

struct CUctx_st *current_ctx(void)
{
    return tls_depth > 0 ? tls_ctx[tls_depth - 1] : NULL;
}

CUresult need_ctx(int *dev)
{
    struct CUctx_st *c = current_ctx();
    if (!c || c->dead)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (dev)
        *dev = c->dev;
    return CUDA_SUCCESS;
}

bool valid_ctx_locked(struct CUctx_st *c)
{
    for (int i = 0; i < g_ndev; i++)
        if (c == &g_dev[i].primary)
            return true;
    for (struct CUctx_st *p = g_created_ctxs; p; p = p->next)
        if (p == c)
            return !p->dead;
    return false;
}

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

static void host_free(const struct alloc *a)
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

/* Device memory accounting for the VMM half of the library (fake_vmm.h). */
bool fc_device_charge(int dev, size_t bytes)
{
    pthread_mutex_lock(&g_lock);
    bool ok = bytes <= g_dev[dev].capacity - g_dev[dev].used;
    if (ok)
        g_dev[dev].used += bytes;
    pthread_mutex_unlock(&g_lock);
    return ok;
}

void fc_device_uncharge(int dev, size_t bytes)
{
    pthread_mutex_lock(&g_lock);
    g_dev[dev].used -= bytes < g_dev[dev].used ? bytes : g_dev[dev].used; /* a reset zeroed it */
    pthread_mutex_unlock(&g_lock);
}

/* ------------------------------------------------------------------ */
/* Init, version, errors                                               */

FC_API CUresult cuInit(unsigned int Flags)
{
    ensure_init();
    if (atomic_load(&g_deinit))
        return CUDA_ERROR_DEINITIALIZED;
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (g_ndev == 0)
        return CUDA_ERROR_NO_DEVICE;
    atomic_store(&g_inited, 1);
    return CUDA_SUCCESS;
}

FC_API CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    /* FAKECUDA_DRIVER_VERSION in the environment: a newer (or older) driver, for the layer's
     * version rules (the capture question: preload/streams.c). */
    const char *v = getenv("FAKECUDA_DRIVER_VERSION");
    *driverVersion = v && *v ? atoi(v) : FAKECUDA_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

static const struct {
    CUresult code;
    const char *name;
    const char *text;
} k_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation is not valid in the current state"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_MERGE, "CUDA_ERROR_STREAM_CAPTURE_MERGE", "capture sequences merged"},
    {CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture not initiated in this stream"},
    {CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "capture sequence contains an unjoined fork"},
    {CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "dependency crosses the capture boundary"},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "implicit dependency on a capturing stream"},
    {CUDA_ERROR_CAPTURED_EVENT, "CUDA_ERROR_CAPTURED_EVENT", "operation not permitted on an event last recorded in a capturing stream"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "capture was not ended in the thread that began it"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult error_lookup(CUresult e, const char **p, bool name)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof k_errors / sizeof k_errors[0]; i++)
        if (k_errors[i].code == e) {
            *p = name ? k_errors[i].name : k_errors[i].text;
            return CUDA_SUCCESS;
        }
    *p = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

FC_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    return error_lookup(error, pStr, false);
}

FC_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    return error_lookup(error, pStr, true);
}

FC_API CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    (void)pExportTableId;
    if (ppExportTable)
        *ppExportTable = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------ */
/* Devices and contexts                                                */

static CUresult check_dev(CUdevice dev)
{
    return dev >= 0 && dev < g_ndev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

FC_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    ENTER();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (check_dev(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetCount(int *count)
{
    ENTER();
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = g_ndev;
    return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    ENTER();
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (check_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = g_dev[dev].capacity;
    return CUDA_SUCCESS;
}

FC_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    ENTER();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (check_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    g_dev[dev].primary_refs++;
    pthread_mutex_unlock(&g_lock);
    *pctx = &g_dev[dev].primary;
    return CUDA_SUCCESS;
}

/* Active while retained (the fake's runtime retains it at its first call). */
FC_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    ENTER();
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    if (check_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    *flags = 0;
    *active = g_dev[dev].primary_refs > 0;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

/* Tears down what a real primary context owns: allocations and streams.
 * Called with the lock held; returns with it held. */
void device_reset_locked(int dev)
{
    device_sync_locked(dev);
    fc_vmm_device_reset(dev);
    fc_peer_device_reset(dev);
    fc_host_device_reset(dev);
    for (struct CUstream_st *t = g_all_streams; t; t = t->all_next)
        if (t->live && t->dev == dev && t->kind == SK_CREATED)
            stream_retire_locked(t);
    size_t keep = 0;
    struct alloc *gone = NULL;
    size_t ngone = 0;
    for (size_t i = 0; i < g_nallocs; i++)
        if (g_allocs[i].dev == dev)
            ngone++;
    if (ngone)
        gone = malloc(ngone * sizeof *gone);
    ngone = 0;
    for (size_t i = 0; i < g_nallocs; i++) {
        if (g_allocs[i].dev == dev) {
            if (gone)
                gone[ngone++] = g_allocs[i];
        } else {
            g_allocs[keep++] = g_allocs[i];
        }
    }
    g_nallocs = keep;
    g_dev[dev].used = 0;
    g_dev[dev].live = 0;
    g_dev[dev].primary_refs = 0;
    pthread_mutex_unlock(&g_lock);
    for (size_t i = 0; i < ngone; i++)
        host_free(&gone[i]);
    free(gone);
    pthread_mutex_lock(&g_lock);
}

/* Dropping the last reference destroys the primary context with everything
 * in it, as the real driver does. */
FC_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    ENTER();
    if (check_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    CUresult r = CUDA_SUCCESS;
    if (g_dev[dev].primary_refs <= 0)
        r = CUDA_ERROR_INVALID_CONTEXT;
    else if (--g_dev[dev].primary_refs == 0)
        device_reset_locked(dev);
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    ENTER();
    if (check_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    device_reset_locked(dev);
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    ENTER();
    (void)flags;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (check_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (tls_depth >= FC_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct CUctx_st *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->magic = FC_CTX_MAGIC;
    c->dev = dev;
    pthread_mutex_lock(&g_lock);
    c->next = g_created_ctxs;
    g_created_ctxs = c;
    pthread_mutex_unlock(&g_lock);
    tls_ctx[tls_depth++] = c;
    *pctx = c;
    return CUDA_SUCCESS;
}

/* The object stays on g_created_ctxs (marked dead) because other threads may
 * still have it on their stacks. */
FC_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    ENTER();
    pthread_mutex_lock(&g_lock);
    bool ok = ctx && valid_ctx_locked(ctx) && !ctx->primary;
    if (ok)
        ctx->dead = true;
    pthread_mutex_unlock(&g_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (current_ctx() == ctx)
        tls_depth--;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    ENTER();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = current_ctx();
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    ENTER();
    if (!ctx) {
        if (tls_depth > 0)
            tls_depth--;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&g_lock);
    bool ok = valid_ctx_locked(ctx);
    pthread_mutex_unlock(&g_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_depth == 0)
        tls_depth = 1;
    tls_ctx[tls_depth - 1] = ctx;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    ENTER();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&g_lock);
    bool ok = valid_ctx_locked(ctx);
    pthread_mutex_unlock(&g_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_depth >= FC_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    tls_ctx[tls_depth++] = ctx;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    ENTER();
    if (tls_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct CUctx_st *c = tls_ctx[--tls_depth];
    if (pctx)
        *pctx = c;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxGetDevice(CUdevice *device)
{
    ENTER();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    int dev;
    CUresult r = need_ctx(&dev);
    if (r)
        return r;
    *device = dev;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxSynchronize(void)
{
    ENTER();
    atomic_fetch_add(&g_cnt_sync, 1);
    atomic_fetch_add(&g_cnt_ctx_sync, 1);
    int dev;
    CUresult r = need_ctx(&dev);
    if (r)
        return r;
    pthread_mutex_lock(&g_lock);
    if (any_capture_locked(true))
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    else
        r = device_sync_locked(dev);
    pthread_mutex_unlock(&g_lock);
    return r;
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

/* Handle layout: magic, base, device, size. Opaque to real code; decodable
 * by tests through fakecu_ipc_handle_base. */
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
    return CUDA_SUCCESS;
}

