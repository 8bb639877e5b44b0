// SPDX-License-Identifier: MIT
// One allocator behind both levels: a program that uses the runtime (the fake libcudart, hooked
// at runtime level) and driver functions it got from the runtime's cudaGetDriverEntryPoint
// (answered through our resolver), freeing at one level what it allocated at the other.
//
// argv[1]: "both" (default), "driver" (intercept_level:driver: the runtime hooks pass through and
// the runtime's own driver calls are served at driver level), "runtime" (intercept_level:runtime:
// driver lookups are the driver's own functions, and only the runtime calls are served).
// The runner checks the exit line that counts allocations per level: both on, 503 at runtime
// level and 502 at driver level; driver only, 0 and 1005; runtime only, 501 and 0.
#include "fake_cuda_driver.h"
#include "ptest.h"

#define MiB ((size_t)1 << 20)
#define PAIRS 500

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);

static void *entry_point(const char *base, unsigned long long flags)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult st;
    CUDA_OK(cudaGetDriverEntryPoint(base, &fn, flags, &st));
    if (!fn) {
        printf("FAIL: no entry point for %s\n", base);
        exit(1);
    }
    return fn;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "both";
    int drv_on = strcmp(mode, "runtime") != 0;
    ptest_api api = ptest_get_api();
    CHECK(api.is_active() == 1, "the preload is active (%s)", api.config_string());

    alloc_fn cu_alloc;
    free_fn cu_free;
    alloc_async_fn cu_alloc_async;
    free_async_fn cu_free_async;
    memcpy(&cu_alloc, &(void *){entry_point("cuMemAlloc", cudaEnableDefault)}, sizeof(void *));
    memcpy(&cu_free, &(void *){entry_point("cuMemFree", cudaEnableDefault)}, sizeof(void *));
    memcpy(&cu_alloc_async, &(void *){entry_point("cuMemAllocAsync", cudaEnableDefault)}, sizeof(void *));
    memcpy(&cu_free_async, &(void *){entry_point("cuMemFreeAsync", cudaEnableDefault)}, sizeof(void *));
    void *driver_own = ptest_real_driver("cuMemAlloc_v2");
    Dl_info di;
    CHECK(dladdr((void *)cu_alloc, &di) &&
              (drv_on ? strstr(di.dli_fname, "libccinterpose") != NULL : (void *)cu_alloc == driver_own),
          "cudaGetDriverEntryPoint(\"cuMemAlloc\") gives %s (%s)",
          drv_on ? "our cuMemAlloc_v2" : "the driver's own cuMemAlloc_v2", di.dli_fname);

    cudaStream_t s;
    CUDA_OK(cudaStreamCreate(&s));
    void *p;
    CUdeviceptr d;
    if (drv_on) {
        // Across levels, both ways, with the data intact.
        CUDA_OK(cudaMalloc(&p, 3 * MiB));
        ptest_fill(p, 3 * MiB, 1);
        CHECK(ptest_verify(p, 3 * MiB, 1), "cudaMalloc'd memory holds its pattern");
        CHECK(cu_free((CUdeviceptr)(uintptr_t)p) == CUDA_SUCCESS &&
                  ptest_stats(&api, 0).allocation[CCI_POOL_ALL].current == 0,
              "cudaMalloc -> cuMemFree_v2: freed in our pool");
        CU_OK(cu_alloc(&d, 5 * MiB));
        ptest_fill((void *)(uintptr_t)d, 5 * MiB, 2);
        CHECK(ptest_verify((void *)(uintptr_t)d, 5 * MiB, 2) &&
                  ptest_stats(&api, 0).allocation[CCI_POOL_ALL].current == 1,
              "cuMemAlloc_v2 is served from our pool");
        CHECK(cudaFree((void *)(uintptr_t)d) == cudaSuccess &&
                  ptest_stats(&api, 0).allocation[CCI_POOL_ALL].current == 0,
              "cuMemAlloc_v2 -> cudaFree: freed");

        CUDA_OK(cudaMallocAsync(&p, 4096, s));
        CHECK(cu_free_async((CUdeviceptr)(uintptr_t)p, (CUstream)s) == CUDA_SUCCESS,
              "cudaMallocAsync -> cuMemFreeAsync on the same stream");
        CU_OK(cu_alloc_async(&d, 4096, (CUstream)s));
        CHECK(cudaFreeAsync((void *)(uintptr_t)d, s) == cudaSuccess &&
                  ptest_stats(&api, 0).allocation[CCI_POOL_ALL].current == 0,
              "cuMemAllocAsync -> cudaFreeAsync on the same stream");
        CUDA_OK(cudaStreamSynchronize(s));
    }

    // Many pairs: one allocator, so one cache; crossing levels when both are ours.
    fakecuda_reset_counters();
    for (int i = 0; i < PAIRS; i++) {
        CUDA_OK(cudaMalloc(&p, 8192));
        if (drv_on)
            CU_OK(cu_free((CUdeviceptr)(uintptr_t)p));
        else
            CUDA_OK(cudaFree(p));
        CU_OK(cu_alloc(&d, 8192));
        if (drv_on)
            CUDA_OK(cudaFree((void *)(uintptr_t)d));
        else
            CU_OK(cu_free(d));
    }
    unsigned long long n = fakecuda_device_allocs();
    if (drv_on)
        CHECK(n <= 1, "%d cudaMalloc->cuMemFree_v2 and %d cuMemAlloc_v2->cudaFree pairs: %llu device "
              "allocations", PAIRS, PAIRS, n);
    else
        CHECK(n >= PAIRS && n <= PAIRS + 1, "%d cuMemAlloc_v2 calls reach the driver (%llu device "
              "allocations with the runtime's cached ones)", PAIRS, n);

    // cudaMemGetInfo counts our cache once: the runtime hook adds it and the runtime's own
    // cuMemGetInfo_v2 (our wrapper) must not add it again; at driver level only, the wrapper adds.
    CUDA_OK(cudaMallocAsync(&p, 6 * MiB, s));
    CUDA_OK(cudaFreeAsync(p, s));
    cci_stats st = ptest_stats(&api, 0);
    size_t cached = (size_t)(st.reserved_bytes[CCI_POOL_ALL].current - st.active_bytes[CCI_POOL_ALL].current);
    CUresult (*raw_info)(size_t *, size_t *);
    memcpy(&raw_info, &(void *){ptest_real_driver("cuMemGetInfo_v2")}, sizeof(void *));
    size_t f, t, rf, rt;
    CUDA_OK(cudaMemGetInfo(&f, &t));
    CU_OK(raw_info(&rf, &rt));
    CHECK(cached > 0 && f == rf + cached && t == rt,
          "cudaMemGetInfo = CUDA's free %zu + cached %zu, counted once", rf, cached);
    return 0;
}
