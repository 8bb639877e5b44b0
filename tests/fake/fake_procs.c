// SPDX-License-Identifier: MIT
/* Fake CUDA driver: cuGetProcAddress table and the test-only fakecu_* API (model: fake_internal.h). */
#include "fake_internal.h"

/* ------------------------------------------------------------------ */
/* cuGetProcAddress                                                    */

struct proc_entry {
    const char *name;
    int since; /* first CUDA version whose ABI this entry point matches */
    void *fn;
    void *fn_ptsz;
};

#define P(name, since, fn) {name, since, (void *)fn, NULL}
#define PT(name, since, fn, fnp) {name, since, (void *)fn, (void *)fnp}

static const struct proc_entry k_procs[] = {
    P("cuInit", 2000, cuInit),
    P("cuDriverGetVersion", 2020, cuDriverGetVersion),
    P("cuGetErrorString", 6000, cuGetErrorString),
    P("cuGetErrorName", 6000, cuGetErrorName),
    P("cuGetExportTable", 3000, cuGetExportTable),
    P("cuDeviceGet", 2000, cuDeviceGet),
    P("cuDeviceGetCount", 2000, cuDeviceGetCount),
    P("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    P("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    P("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    P("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    P("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    P("cuCtxCreate", 3020, cuCtxCreate_v2),
    P("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    P("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    P("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    P("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    P("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    P("cuCtxGetDevice", 2000, cuCtxGetDevice),
    P("cuCtxSynchronize", 2000, cuCtxSynchronize),
    P("cuCtxRecordEvent", 12050, cuCtxRecordEvent),
    P("cuCtxWaitEvent", 12050, cuCtxWaitEvent),
    P("cuMemAlloc", 3020, cuMemAlloc_v2),
    P("cuMemFree", 3020, cuMemFree_v2),
    P("cuMemAllocManaged", 6000, cuMemAllocManaged),
    P("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    P("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    P("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    P("cuMemPoolCreate", 11020, cuMemPoolCreate),
    P("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    P("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
    P("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute),
    P("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    PT("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz),
    PT("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
    PT("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
    P("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    P("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    P("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    P("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2),
    P("cuIpcOpenMemHandle", 4010, cuIpcOpenMemHandle), /* the first ABI */
    P("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle),
    P("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    P("cuMemAddressReserve", 10020, cuMemAddressReserve),
    P("cuMemAddressFree", 10020, cuMemAddressFree),
    P("cuMemCreate", 10020, cuMemCreate),
    P("cuMemRelease", 10020, cuMemRelease),
    P("cuMemMap", 10020, cuMemMap),
    P("cuMemUnmap", 10020, cuMemUnmap),
    P("cuMemSetAccess", 10020, cuMemSetAccess),
    P("cuMemGetAccess", 10020, cuMemGetAccess),
    P("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    P("cuMemHostAlloc", 2020, cuMemHostAlloc),
    P("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    P("cuMemFreeHost", 2000, cuMemFreeHost),
    P("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    P("cuMemHostUnregister", 4000, cuMemHostUnregister),
    P("cuMemHostGetFlags", 2030, cuMemHostGetFlags),
    P("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    P("cuPointerGetAttributes", 7000, cuPointerGetAttributes),
    P("cuDeviceCanAccessPeer", 4000, cuDeviceCanAccessPeer),
    P("cuCtxEnablePeerAccess", 4000, cuCtxEnablePeerAccess),
    P("cuCtxDisablePeerAccess", 4000, cuCtxDisablePeerAccess),
    P("cuMemGetAllocationPropertiesFromHandle", 10020, cuMemGetAllocationPropertiesFromHandle),
    P("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle),
    P("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle),
    P("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle),
    P("cuStreamCreate", 2000, cuStreamCreate),
    P("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    PT("cuStreamWaitEvent", 3020, cuStreamWaitEvent, cuStreamWaitEvent_ptsz),
    P("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    PT("cuStreamSynchronize", 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
    PT("cuStreamQuery", 2000, cuStreamQuery, cuStreamQuery_ptsz),
    PT("cuStreamGetCtx", 9020, cuStreamGetCtx, cuStreamGetCtx_ptsz),
    PT("cuStreamIsCapturing", 10000, cuStreamIsCapturing, cuStreamIsCapturing_ptsz),
    PT("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz),
    PT("cuStreamBeginCapture", 10000, cuStreamBeginCapture, cuStreamBeginCapture_ptsz), /* the first ABI */
    PT("cuStreamBeginCaptureToGraph", 12030, cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph_ptsz),
    PT("cuStreamEndCapture", 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz),
    P("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),
    PT("cuLaunchHostFunc", 10000, cuLaunchHostFunc, cuLaunchHostFunc_ptsz),
    P("cuEventCreate", 2000, cuEventCreate),
    PT("cuEventRecord", 2000, cuEventRecord, cuEventRecord_ptsz),
    P("cuEventQuery", 2000, cuEventQuery),
    P("cuEventSynchronize", 2000, cuEventSynchronize),
    P("cuEventDestroy", 4000, cuEventDestroy_v2),
    P("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    PT("cuGraphLaunch", 10000, cuGraphLaunch, cuGraphLaunch_ptsz),
    P("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    P("cuGraphDestroy", 10000, cuGraphDestroy),
    P("cuGraphCreate", 10000, cuGraphCreate),
    /* Add new entry points here (one line each; PT for a _ptsz/_ptds twin).
     * Functions defined in other files need a prototype in fake_cuda_driver.h. */
};

static void count_procaddress(const char *symbol)
{
    pthread_mutex_lock(&g_lock);
    g_pa_total++;
    for (size_t i = 0; i < g_npa; i++)
        if (!strcmp(g_pa[i].name, symbol)) {
            g_pa[i].n++;
            goto out;
        }
    struct pa_count *n = realloc(g_pa, (g_npa + 1) * sizeof *n);
    if (n) {
        g_pa = n;
        g_pa[g_npa].name = strdup(symbol);
        g_pa[g_npa].n = 1;
        if (g_pa[g_npa].name)
            g_npa++;
    }
out:
    pthread_mutex_unlock(&g_lock);
}

static CUresult proc_lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                            CUdriverProcAddressQueryResult *status)
{
    ensure_init();
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    count_procaddress(symbol);
    *pfn = NULL;
    if (cudaVersion > FAKECUDA_DRIVER_VERSION)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (!strcmp(symbol, "cuGetProcAddress")) {
        if (cudaVersion >= 12000) {
            *pfn = (void *)cuGetProcAddress_v2;
            st = CU_GET_PROC_ADDRESS_SUCCESS;
        } else if (cudaVersion >= 11030) {
            *pfn = (void *)cuGetProcAddress;
            st = CU_GET_PROC_ADDRESS_SUCCESS;
        } else {
            st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        }
    } else {
        for (size_t i = 0; i < sizeof k_procs / sizeof k_procs[0]; i++) {
            const struct proc_entry *e = &k_procs[i];
            if (strcmp(e->name, symbol))
                continue;
            if (cudaVersion < e->since) {
                st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
                continue; /* an older ABI of the same name may follow (newest first) */
            }
            *pfn = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && e->fn_ptsz ? e->fn_ptsz : e->fn;
            st = CU_GET_PROC_ADDRESS_SUCCESS;
            break;
        }
    }
    if (status)
        *status = st;
    return CUDA_SUCCESS;
}

FC_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *symbolStatus)
{
    return proc_lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

/* The 11.3 ABI has no status argument; a caller passing one anyway is harmless
 * because it is never read. */
FC_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return proc_lookup(symbol, pfn, cudaVersion, flags, NULL);
}

/* ------------------------------------------------------------------ */
/* Test-only API                                                       */

FC_API unsigned long long fakecu_device_allocs(void)
{
    return atomic_load(&g_cnt_allocs);
}

FC_API unsigned long long fakecu_device_frees(void)
{
    return atomic_load(&g_cnt_frees);
}

FC_API size_t fakecu_used_bytes(int dev)
{
    ensure_init();
    if (dev < 0 || dev >= FC_MAX_DEVICES)
        return 0;
    pthread_mutex_lock(&g_lock);
    size_t v = g_dev[dev].used;
    pthread_mutex_unlock(&g_lock);
    return v;
}

FC_API size_t fakecu_live_allocs(int dev)
{
    ensure_init();
    if (dev < 0 || dev >= FC_MAX_DEVICES)
        return 0;
    pthread_mutex_lock(&g_lock);
    size_t v = g_dev[dev].live;
    pthread_mutex_unlock(&g_lock);
    return v;
}

FC_API unsigned long long fakecu_sync_calls(void)
{
    return atomic_load(&g_cnt_sync);
}

FC_API unsigned long long fakecu_ctx_sync_calls(void)
{
    return atomic_load(&g_cnt_ctx_sync);
}

FC_API void fakecu_fail_alloc_at(unsigned long long n)
{
    ensure_init();
    pthread_mutex_lock(&g_lock);
    g_fail_at = n ? g_alloc_attempts + n : 0;
    pthread_mutex_unlock(&g_lock);
}

FC_API unsigned long long fakecu_procaddress_calls(const char *name)
{
    unsigned long long v = 0;
    pthread_mutex_lock(&g_lock);
    if (!name)
        v = g_pa_total;
    else
        for (size_t i = 0; i < g_npa; i++)
            if (!strcmp(g_pa[i].name, name))
                v = g_pa[i].n;
    pthread_mutex_unlock(&g_lock);
    return v;
}

FC_API void *fakecu_ipc_handle_base(const void *handle, int *dev)
{
    if (!handle || memcmp(handle, k_ipc_magic, 8))
        return NULL;
    uint64_t base;
    int32_t d;
    memcpy(&base, (const char *)handle + 8, 8);
    memcpy(&d, (const char *)handle + 16, 4);
    if (dev)
        *dev = d;
    return (void *)(uintptr_t)base;
}

FC_API int fakecu_capturing_any(void)
{
    pthread_mutex_lock(&g_lock);
    int v = any_capture_locked(false);
    pthread_mutex_unlock(&g_lock);
    return v;
}

FC_API void fakecu_get_event_calls(struct fakecu_event_calls *out)
{
    out->stream_queries = atomic_load(&g_cnt_stream_query);
    out->event_records = atomic_load(&g_cnt_event_record);
    out->event_queries = atomic_load(&g_cnt_event_query);
    out->event_syncs = atomic_load(&g_cnt_event_sync);
    out->stream_waits = atomic_load(&g_cnt_stream_wait_event);
    out->ctx_records = atomic_load(&g_cnt_ctx_record);
    out->ctx_waits = atomic_load(&g_cnt_ctx_wait);
}

FC_API void fakecu_reset_counters(void)
{
    atomic_store(&g_cnt_allocs, 0);
    atomic_store(&g_cnt_frees, 0);
    atomic_store(&g_cnt_sync, 0);
    atomic_store(&g_cnt_ctx_sync, 0);
    atomic_store(&g_cnt_stream_query, 0);
    atomic_store(&g_cnt_event_record, 0);
    atomic_store(&g_cnt_event_query, 0);
    atomic_store(&g_cnt_event_sync, 0);
    atomic_store(&g_cnt_stream_wait_event, 0);
    atomic_store(&g_cnt_ctx_record, 0);
    atomic_store(&g_cnt_ctx_wait, 0);
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_npa; i++)
        g_pa[i].n = 0;
    g_pa_total = 0;
    pthread_mutex_unlock(&g_lock);
}
