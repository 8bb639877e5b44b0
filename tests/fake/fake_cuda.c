// SPDX-License-Identifier: MIT
/*
 * Fake CUDA driver (libcuda.so.1): initialisation, devices, contexts.
 * The model (streams, holds, events, graphs) is described in fake_internal.h;
 * device memory lives in fake_memory.c, streams in fake_stream.c (capture in
 * fake_capture.c), events in fake_event.c, graphs in fake_graph.c,
 * cuGetProcAddress and the test-only API in fake_procs.c.
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
