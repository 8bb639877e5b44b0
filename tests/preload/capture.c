// SPDX-License-Identifier: MIT
// Graph capture: calls on a capturing stream pass through to CUDA untouched, no device
// synchronisation runs while a capture is underway, and caching resumes after it. The same for a
// capture begun through the driver with the driver's stream-ordered calls (what a static cudart
// or a driver-API program makes): the driver hooks ask the stream only while a counted capture
// is underway.
#include "ptest.h"
#include "fake_cuda_driver.h"

// A capture begun through the driver's own entry point: cuMemAllocAsync on it must reach CUDA (a
// graph allocation node), and a non-capturing stream keeps its cached pairs meanwhile and after.
static void driver_capture(cudaStream_t rs, cudaStream_t rother)
{
    CUstream s = (CUstream)rs, other = (CUstream)rother;
    // Both streams' pools hold a block of each size first: a served allocation during the capture
    // would then reach no CUDA allocation at all.
    CUdeviceptr warm;
    for (int i = 0; i < 2; i++) {
        CUstream on = i ? s : other;
        CHECK(cuMemAllocAsync(&warm, 4096, on) == CUDA_SUCCESS && cuMemFreeAsync(warm, on) == CUDA_SUCCESS,
              "a 4 KiB driver pair before the capture");
        CHECK(cuMemAllocAsync(&warm, 65536, on) == CUDA_SUCCESS && cuMemFreeAsync(warm, on) == CUDA_SUCCESS,
              "a 64 KiB driver pair before the capture");
    }
    CHECK(cuStreamSynchronize(s) == CUDA_SUCCESS && cuStreamSynchronize(other) == CUDA_SUCCESS, "streams idle");
    fakecuda_reset_counters();
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS, "driver capture begins");
    CUdeviceptr g;
    CHECK(cuMemAllocAsync(&g, 65536, s) == CUDA_SUCCESS, "cuMemAllocAsync on the capturing stream");
    CHECK(fakecuda_device_allocs() == 1, "cuMemAllocAsync on a stream captured through the driver reached CUDA");
    CHECK(cuMemFreeAsync(g, s) == CUDA_SUCCESS, "cuMemFreeAsync on the capturing stream");
    for (int i = 0; i < 100; i++) {
        CUdeviceptr p;
        CHECK(cuMemAllocAsync(&p, 4096, other) == CUDA_SUCCESS && cuMemFreeAsync(p, other) == CUDA_SUCCESS,
              "a pair on the other stream during the capture");
    }
    CHECK(fakecuda_device_allocs() == 1, "a non-capturing stream is served from the cache during the capture");
    CUgraph graph;
    CHECK(cuStreamEndCapture(s, &graph) == CUDA_SUCCESS, "the driver capture ends cleanly");
    fakecuda_reset_counters();
    for (int i = 0; i < 100; i++) {
        CUdeviceptr p;
        CHECK(cuMemAllocAsync(&p, 4096, s) == CUDA_SUCCESS && cuMemFreeAsync(p, s) == CUDA_SUCCESS,
              "a pair on the stream after its capture");
    }
    CHECK(fakecuda_device_allocs() <= 1, "after the capture the stream's pairs are cached again (%llu allocations)",
          (unsigned long long)fakecuda_device_allocs());
}

// `unseen`, run with FAKECUDA_DRIVER_VERSION newer than 13.0: a capture begun through an entry
// point the layer does not wrap (CUDA 13.3's recapture begin; here the fake's own helper) counts
// nowhere, so with such a driver the stream-ordered calls of both levels ask their stream every
// time: allocations on the capturing stream reach CUDA.
static int unseen(void)
{
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < 4; i++) {  // the stream's pool holds blocks of both sizes first
        void *p;
        CUdeviceptr d;
        CUDA_OK(cudaMallocAsync(&p, 65536, s));
        CUDA_OK(cudaFreeAsync(p, s));
        CHECK(cuMemAllocAsync(&d, 4096, (CUstream)s) == CUDA_SUCCESS &&
                  cuMemFreeAsync(d, (CUstream)s) == CUDA_SUCCESS,
              "a driver pair before the capture");
    }
    CUDA_OK(cudaStreamSynchronize(s));
    fakecuda_reset_counters();
    CHECK(fakecu_stream_begin_capture_unseen((CUstream)s, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS,
          "a capture begun behind the layer's back");
    void *g;
    CUdeviceptr d;
    CUDA_OK(cudaMallocAsync(&g, 65536, s));
    CHECK(fakecuda_device_allocs() == 1, "cudaMallocAsync on the unseen capture reached CUDA");
    CHECK(cuMemAllocAsync(&d, 4096, (CUstream)s) == CUDA_SUCCESS, "cuMemAllocAsync on the unseen capture");
    CHECK(fakecuda_device_allocs() == 2, "cuMemAllocAsync on the unseen capture reached CUDA");
    CUDA_OK(cudaFreeAsync(g, s));
    CHECK(cuMemFreeAsync(d, (CUstream)s) == CUDA_SUCCESS, "cuMemFreeAsync on the unseen capture");
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess, "the unseen capture ends cleanly");
    CUDA_OK(cudaStreamDestroy(s));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "unseen") == 0)
        return unseen();
    ptest_api api = ptest_get_api();
    CHECK(api.is_active() == 1, "the preload is active");
    cudaStream_t s, other;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));

    // Warm the cache so a deferred free is pending when the capture starts.
    void *pending;
    CUDA_OK(cudaMalloc(&pending, 4096));
    CUDA_OK(cudaFree(pending));

    cci_stats before = ptest_stats(&api, 0);
    fakecuda_reset_counters();
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    void *g;
    CUDA_OK(cudaMallocAsync(&g, 65536, s));
    CHECK(fakecuda_device_allocs() == 1,
          "cudaMallocAsync on the capturing stream reached CUDA (graph allocation node)");
    CUDA_OK(cudaFreeAsync(g, s));

    // Relaxed mode: a plain cudaMalloc is allowed and gets real memory outside our pools.
    void *r;
    CUDA_OK(cudaMalloc(&r, 8192));
    CHECK(fakecuda_device_allocs() == 2, "cudaMalloc during a capture passes through to CUDA");

    // Another stream is not capturing: it is served from the cache, and the deferred frees
    // batched meanwhile must not trigger a synchronisation (it would break the capture).
    for (int i = 0; i < 200; i++) {
        void *p;
        CUDA_OK(cudaMallocAsync(&p, 4096, other));
        CUDA_OK(cudaFree(p));
    }
    CHECK(fakecuda_device_allocs() <= 3, "a non-capturing stream is still served from the cache");
    CHECK(fakecuda_ctx_sync_calls() == 0, "no device synchronisation while the capture is underway");
    cci_stats mid = ptest_stats(&api, 0);
    CHECK(mid.num_sync_all_streams == before.num_sync_all_streams,
          "the core kept its deferred blocks pending");

    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess, "the capture ends cleanly (not invalidated)");
    unsigned long long frees = fakecuda_device_frees();
    CUDA_OK(cudaFree(r));
    CHECK(fakecuda_device_frees() == frees + 1,
          "the memory CUDA allocated during the capture is freed by CUDA");

    // 1000 pairs of 4 KiB outgrow one 2 MiB segment: reuse needs a batch synchronisation, or
    // (the program created a stream and captured: the stream rule fences its frees) fences.
    fakecuda_reset_counters();
    for (int i = 0; i < 1000; i++) {
        void *p;
        CUDA_OK(cudaMalloc(&p, 4096));
        CUDA_OK(cudaFree(p));
    }
    cci_stats after = ptest_stats(&api, 0);
    CHECK(fakecuda_device_allocs() <= 1 &&
              (after.num_sync_all_streams > mid.num_sync_all_streams ||
               after.num_fence_records > mid.num_fence_records),
          "after the capture, caching and batched synchronisation (or fences) resume");

    // Global mode: CUDA refuses a plain cudaMalloc (and invalidates the capture); so do we.
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaError_t e = cudaMalloc(&r, 8192);
    CHECK(e == cudaErrorStreamCaptureUnsupported,
          "cudaMalloc inside a global-mode capture fails as CUDA's does (%d)", (int)e);
    CHECK(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated,
          "... and the capture is invalidated, as without the preload");
    cudaGetLastError();
    void *p;
    fakecuda_reset_counters();
    CUDA_OK(cudaMalloc(&p, 4096));
    CHECK(fakecuda_device_allocs() == 0, "once the capture has ended, cudaMalloc is cached again");
    CUDA_OK(cudaFree(p));
    driver_capture(s, other);
    CUDA_OK(cudaStreamDestroy(s));
    CUDA_OK(cudaStreamDestroy(other));
    return 0;
}
