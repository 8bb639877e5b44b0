// SPDX-License-Identifier: MIT
// Managed memory (cudaMallocManaged, cuMemAllocManaged, and cuMemAllocManaged as cuGetProcAddress
// hands it out) is never cached: every allocation and every free reaches CUDA, and the statistics
// count it apart (managed_allocations, managed_bytes: current and peak). Plain allocations
// around it are still served. Bad flags get CUDA's own codes.
#include "fake_cuda_driver.h"
#include "ptest.h"

typedef CUresult (*managed_fn)(CUdeviceptr *, size_t, unsigned);

int main(void)
{
    ptest_api api = ptest_get_api();
    CUDA_OK(cudaFree(NULL));
    fakecuda_reset_counters();
    void *m[8];
    size_t total = 0;
    for (int i = 0; i < 8; i++) {
        size_t n = ((size_t)i + 1) << 16;
        CUDA_OK(cudaMallocManaged(&m[i], n, cudaMemAttachGlobal));
        ptest_fill(m[i], n, (uint64_t)i);
        total += n;
    }
    CUdeviceptr d;
    CU_OK(cuMemAllocManaged(&d, 3 << 20, CU_MEM_ATTACH_GLOBAL));
    managed_fn by_proc = NULL;
    CUdriverProcAddressQueryResult st;
    CU_OK(cuGetProcAddress_v2("cuMemAllocManaged", (void **)&by_proc, 13000, 0, &st));
    CUdeviceptr d2;
    CU_OK(by_proc(&d2, 1 << 20, CU_MEM_ATTACH_GLOBAL));
    total += (3 << 20) + (1 << 20);
    CHECK(fakecuda_device_allocs() == 10, "every managed allocation reached CUDA (%llu)", fakecuda_device_allocs());

    cci_stats s = ptest_stats(&api, 0);
    CHECK(s.version >= 5, "statistics version %u", s.version);
    CHECK(s.managed_allocations.current == 10 && s.managed_bytes.current == (int64_t)total,
          "counted: %lld allocations, %lld bytes (expected 10, %zu)", (long long)s.managed_allocations.current,
          (long long)s.managed_bytes.current, total);
    CHECK(s.allocation[CCI_POOL_ALL].allocated == 0, "none of it went through the pools");

    // Plain pairs beside it are still served.
    for (int i = 0; i < 20; i++) {
        void *p;
        CUDA_OK(cudaMalloc(&p, 4096));
        CUDA_OK(cudaFree(p));
    }
    CHECK(fakecuda_device_allocs() <= 11, "plain pairs served from the cache");

    unsigned long long frees = fakecuda_device_frees();
    for (int i = 0; i < 8; i++) {
        CHECK(ptest_verify(m[i], ((size_t)i + 1) << 16, (uint64_t)i), "managed contents kept");
        CUDA_OK(cudaFree(m[i]));
    }
    CU_OK(cuMemFree_v2(d));
    CU_OK(cuMemFree_v2(d2));
    CHECK(fakecuda_device_frees() == frees + 10, "every managed free reached CUDA");
    s = ptest_stats(&api, 0);
    CHECK(s.managed_allocations.current == 0 && s.managed_bytes.current == 0 &&
              s.managed_bytes.peak == (int64_t)total && s.managed_allocations.allocated == 10 &&
              s.managed_allocations.freed == 10,
          "after the frees: %lld live, peak %lld bytes", (long long)s.managed_allocations.current,
          (long long)s.managed_bytes.peak);

    void *bad = NULL;
    CHECK(cudaMallocManaged(&bad, 4096, 7) == cudaErrorInvalidValue, "bad flags (runtime)");
    CHECK(cuMemAllocManaged(&d, 4096, 7) == CUDA_ERROR_INVALID_VALUE, "bad flags (driver)");
    s = ptest_stats(&api, 0);
    CHECK(s.managed_allocations.allocated == 10, "refused calls are not counted");
    // One left live for the exit report's line.
    CUDA_OK(cudaMallocManaged(&bad, 1 << 20, cudaMemAttachGlobal));
    return 0;
}
