// SPDX-License-Identifier: MIT
// Every runtime hook is reached and does its job: cached pairs cost no device allocation, what we
// do not own reaches CUDA with CUDA's return code, bad frees are refused without damage,
// cudaMemGetInfo counts cached bytes, cudaIpcGetMemHandle never hands out a misleading handle.
//
// CCI_TEST_MEMGETINFO=raw: the run has memgetinfo_cached_as_free:False.
#include "ptest.h"

typedef cudaError_t (*memgetinfo_fn)(size_t *, size_t *);
typedef cudaError_t (*free_fn)(void *);

static void check_cached_pairs(const ptest_api *api)
{
    cci_stats before = ptest_stats(api, 0);
    fakecuda_reset_counters();
    for (int i = 0; i < 1000; i++) {
        void *p;
        CUDA_OK(cudaMalloc(&p, 4096));
        ptest_fill(p, 4096, (uint64_t)i);
        CUDA_OK(cudaFree(p));
    }
    unsigned long long allocs = fakecuda_device_allocs(), syncs = fakecuda_ctx_sync_calls();
    cci_stats after = ptest_stats(api, 0);
    CHECK(allocs <= 2, "1000 cudaMalloc+cudaFree pairs of 4 KiB: %llu device allocations", allocs);
    CHECK(after.allocation[CCI_POOL_ALL].allocated - before.allocation[CCI_POOL_ALL].allocated == 1000,
          "the allocator served all 1000 cudaMalloc calls");
    CHECK(fakecuda_device_frees() == 0, "no cudaFree reached the device");
    // The program has created no stream yet and runs one thread: its work can only be ordered,
    // so the stream rule makes every free reusable at once (no synchronisation, no fence).
    CHECK(syncs == 0 && after.num_fence_records == before.num_fence_records &&
              after.num_sync_all_streams == before.num_sync_all_streams,
          "ordered program: frees reusable at once, %llu device synchronisations, %llu fences",
          syncs, (unsigned long long)(after.num_fence_records - before.num_fence_records));
}

static void check_async_pairs(void)
{
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    fakecuda_reset_counters();
    void *first = NULL;
    int same = 1;
    for (int i = 0; i < 1000; i++) {
        void *p;
        CUDA_OK(cudaMallocAsync(&p, 65536, s));
        if (!first)
            first = p;
        same &= p == first;
        CUDA_OK(cudaFreeAsync(p, s));
    }
    CHECK(fakecuda_device_allocs() <= 1 && fakecuda_device_frees() == 0,
          "1000 cudaMallocAsync+cudaFreeAsync pairs: %llu device allocations, %llu frees",
          fakecuda_device_allocs(), fakecuda_device_frees());
    CHECK(same, "a block freed with cudaFreeAsync on its own stream is reusable at once");

    fakecuda_reset_counters();
    first = NULL;
    same = 1;
    for (int i = 0; i < 1000; i++) {
        void *p;
        CUDA_OK(cudaMallocAsync_ptsz(&p, 65536, 0));
        if (!first)
            first = p;
        same &= p == first;
        CUDA_OK(cudaFreeAsync_ptsz(p, 0));
    }
    CHECK(fakecuda_device_allocs() <= 1 && same,
          "1000 cudaMallocAsync_ptsz+cudaFreeAsync_ptsz pairs on the per-thread stream: %llu device "
          "allocations, one block reused", fakecuda_device_allocs());
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaStreamDestroy(s));
}

static void check_not_ours(void)
{
    free_fn real_free;
    memcpy(&real_free, &(void *){ptest_real("cudaFree")}, sizeof real_free);
    fakecuda_reset_counters();
    CHECK(cudaFree(NULL) == cudaSuccess && fakecuda_device_frees() == 0,
          "cudaFree(NULL) is forwarded and succeeds");

    void *m;
    CUDA_OK(cudaMallocManaged(&m, 1 << 20, cudaMemAttachGlobal));
    CHECK(cudaFree(m) == cudaSuccess && fakecuda_device_frees() == 1,
          "cudaFree of managed memory reaches CUDA (device frees: %llu)", fakecuda_device_frees());

    void *pitched;
    size_t pitch;
    CUDA_OK(cudaMallocPitch(&pitched, &pitch, 1000, 10));
    // Pitched memory is served from the pool (tests/preload/pitched.c): its free stays with us.
    CHECK(pitch == 1024 && cudaFree(pitched) == cudaSuccess && fakecuda_device_frees() == 1,
          "cudaFree of served pitched memory stays in the cache");

    int on_stack;
    cudaError_t ours = cudaFree(&on_stack);
    cudaGetLastError();
    cudaError_t theirs = real_free(&on_stack);
    cudaGetLastError();
    CHECK(ours == theirs && ours != cudaSuccess,
          "cudaFree of a pointer nobody allocated returns CUDA's own code (%d == %d)", (int)ours,
          (int)theirs);
}

static void check_bad_frees(const ptest_api *api)
{
    cci_stats base = ptest_stats(api, 0);
    void *p;
    CUDA_OK(cudaMalloc(&p, 8192));
    CUDA_OK(cudaFree(p));
    ptest_capture c = ptest_stderr_begin();
    cudaError_t e = cudaFree(p);
    int lines = ptest_stderr_end(&c, NULL, NULL, 0);
    CHECK(e == cudaErrorInvalidValue, "double cudaFree returns cudaErrorInvalidValue");
    CHECK(cudaGetLastError() == cudaErrorInvalidValue && cudaGetLastError() == cudaSuccess,
          "... and leaves it in the runtime's error state once, as CUDA's own refusal would");
    CHECK(lines == 1, "double cudaFree writes one warning line (%d)", lines);

    CUDA_OK(cudaMalloc(&p, 8192));
    c = ptest_stderr_begin();
    e = cudaFree((char *)p + 512);
    lines = ptest_stderr_end(&c, "warning", NULL, 0);
    CHECK(e == cudaErrorInvalidValue && lines == 1,
          "cudaFree of a pointer inside a block: cudaErrorInvalidValue and one warning line");
    cudaGetLastError();
    ptest_fill(p, 8192, 7);
    CHECK(ptest_verify(p, 8192, 7), "the block survives the bad free");
    CUDA_OK(cudaFree(p));

    CUDA_OK(cudaMallocAsync(&p, 8192, 0));
    CUDA_OK(cudaFreeAsync(p, 0));
    c = ptest_stderr_begin();
    e = cudaFreeAsync(p, 0);
    lines = ptest_stderr_end(&c, "warning", NULL, 0);
    CHECK(e == cudaErrorInvalidValue && lines == 1, "double cudaFreeAsync: cudaErrorInvalidValue");
    cudaGetLastError();

    cci_stats now = ptest_stats(api, 0);
    CHECK(now.allocation[CCI_POOL_ALL].current == base.allocation[CCI_POOL_ALL].current &&
              now.allocated_bytes[CCI_POOL_ALL].current == base.allocated_bytes[CCI_POOL_ALL].current,
          "allocator statistics unchanged by the refused frees");
}

static void check_memgetinfo(const ptest_api *api, int raw)
{
    memgetinfo_fn real_info;
    memcpy(&real_info, &(void *){ptest_real("cudaMemGetInfo")}, sizeof real_info);
    memgetinfo_fn driver_info;  // CUDA's own numbers: the runtime's call is caught at driver level
    memcpy(&driver_info, &(void *){ptest_real_driver("cuMemGetInfo_v2")}, sizeof driver_info);
    void *p;
    CUDA_OK(cudaMallocAsync(&p, (size_t)30 << 20, 0));
    CUDA_OK(cudaFreeAsync(p, 0));  // freed on its own stream: cached and reusable at once
    cci_stats st = ptest_stats(api, 0);
    size_t cached = (size_t)(st.reserved_bytes[CCI_POOL_ALL].current - st.active_bytes[CCI_POOL_ALL].current);
    size_t f, t, rf, rt;
    CUDA_OK(cudaMemGetInfo(&f, &t));
    CUDA_OK(driver_info(&rf, &rt));
    CHECK(cached > 0, "the cache holds %zu free bytes", cached);
    if (raw)
        CHECK(f == rf && t == rt, "memgetinfo_cached_as_free:False: cudaMemGetInfo is CUDA's (%zu)", f);
    else
        CHECK(f == rf + cached && t == rt,
              "cudaMemGetInfo free = CUDA's %zu + cached %zu = %zu", rf, cached, f);
    cudaError_t a = cudaMemGetInfo(NULL, &t), b = real_info(NULL, &rt);
    cudaGetLastError();
    CHECK(a == b, "cudaMemGetInfo(NULL, &total) returns CUDA's own code (%d)", (int)a);
}

static void check_ipc(const ptest_api *api)
{
    CHECK(api->empty_cache(0) == 0, "cci_empty_cache(0) gives the cached segments back");
    void *big, *a, *b;
    CUDA_OK(cudaMalloc(&big, (size_t)40 << 20));
    cudaIpcMemHandle_t h;
    CHECK(cudaIpcGetMemHandle(&h, big) == cudaSuccess && fakecuda_ipc_handle_base(&h) == big,
          "cudaIpcGetMemHandle of a block that starts its segment: CUDA's handle, base %p", big);
    CUDA_OK(cudaMalloc(&a, 256 << 10));
    CUDA_OK(cudaMalloc(&b, 256 << 10));
    void *inner = (char *)a < (char *)b ? b : a;  // the second block of the fresh 2 MiB segment
    ptest_capture c = ptest_stderr_begin();
    cudaError_t e = cudaIpcGetMemHandle(&h, inner);
    char text[2048];
    int lines = ptest_stderr_end(&c, NULL, text, sizeof text);
    CHECK(e == cudaErrorInvalidValue && cudaGetLastError() == cudaErrorInvalidValue,
          "cudaIpcGetMemHandle of a sub-allocated block is refused");
    CHECK(lines == 1 && strstr(text, "cudaIpcGetMemHandle") && strstr(text, "max_split_size_mb"),
          "... with one warning line that says why and what to do");
    CUDA_OK(cudaFree(big));
    CUDA_OK(cudaFree(a));
    CUDA_OK(cudaFree(b));
    // A block reused at once while its old owner's write is still queued (the ordered rule): the
    // export lets the device finish first, since the importer's work is ordered with none of ours
    // (CUDA's own cudaFree would have waited before the memory could be allocated again).
    void *p, *q;
    CUDA_OK(cudaMalloc(&p, (size_t)40 << 20));
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 1));
    fakecuda_delayed_fill(p, 0xAA, 4096, cudaStreamLegacy, 0);
    CUDA_OK(cudaFree(p));
    CUDA_OK(cudaMalloc(&q, (size_t)40 << 20));
    CHECK(q == p && !ptest_all_bytes(q, 4096, 0xAA), "reused at once, the old write still queued");
    CHECK(cudaIpcGetMemHandle(&h, q) == cudaSuccess && ptest_all_bytes(q, 4096, 0xAA),
          "cudaIpcGetMemHandle: the old owner's queued write ran before the handle was handed out");
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 0));
    CUDA_OK(cudaFree(q));
}

static void check_report(const ptest_api *api)
{
    char path[] = "/tmp/cci-report-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(api->dump_report(path) == 0, "cci_dump_report(%s) succeeds", path);
    FILE *f = fopen(path, "r");
    static char buf[1 << 16];  // the whole report: its sections move as the report grows
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = 0;
    if (f)
        fclose(f);
    unlink(path);
    CHECK(n > 0 && strstr(buf, "device 0") && strstr(buf, "reserved"),
          "the report names device 0 and its reserved memory");
}

int main(void)
{
    ptest_api api = ptest_get_api();
    CHECK(api.is_active() == 1, "the preload is active");
    printf("configuration: %s\n", api.config_string());
    int raw = getenv("CCI_TEST_MEMGETINFO") && strcmp(getenv("CCI_TEST_MEMGETINFO"), "raw") == 0;
    CHECK(strstr(api.config_string(), raw ? "memgetinfo_cached_as_free:False"
                                          : "memgetinfo_cached_as_free:True") != NULL,
          "cci_config_string reflects the configuration");
    check_ipc(&api);
    check_cached_pairs(&api);
    check_async_pairs();
    check_not_ours();
    check_bad_frees(&api);
    check_memgetinfo(&api, raw);
    check_report(&api);
    cci_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    CHECK(api.get_stats(7, &s) == -1, "cci_get_stats of a device that does not exist fails");
    printf("all hook checks passed\n");
    return 0;
}
