// SPDX-License-Identifier: MIT
// Out of memory (run with FAKECUDA_CAPACITY=256M): a failing segment allocation makes the core
// free its cache and retry; a request that cannot fit returns cudaErrorMemoryAllocation and
// leaves the runtime's error state as a real failed cudaMalloc does.
#include "ptest.h"

#define MiB ((size_t)1 << 20)

int main(void)
{
    ptest_api api = ptest_get_api();
    CHECK(api.is_active() == 1, "the preload is active");

    void *a, *b, *c;
    CUDA_OK(cudaMalloc(&a, 100 * MiB));
    CUDA_OK(cudaFree(a));  // 100 MiB cached (deferred)
    unsigned long long frees0 = fakecuda_device_frees();
    cci_stats s0 = ptest_stats(&api, 0);
    fakecuda_fail_alloc_at(1);  // the next segment allocation fails
    CHECK(cudaMalloc(&b, 120 * MiB) == cudaSuccess,
          "cudaMalloc succeeds although the device refused the first segment allocation");
    cci_stats s1 = ptest_stats(&api, 0);
    CHECK(s1.num_alloc_retries == s0.num_alloc_retries + 1,
          "it succeeded through the retry path (num_alloc_retries %llu -> %llu)",
          (unsigned long long)s0.num_alloc_retries, (unsigned long long)s1.num_alloc_retries);
    CHECK(fakecuda_device_frees() > frees0, "the retry gave the cached segment back first");
    CHECK(cudaGetLastError() == cudaSuccess, "a recovered allocation leaves no error behind");
    ptest_fill(b, 120 * MiB, 3);

    CHECK(cudaMalloc(&c, 200 * MiB) == cudaErrorMemoryAllocation,
          "200 MiB more on a 256 MiB device: cudaErrorMemoryAllocation");
    CHECK(cudaGetLastError() == cudaErrorMemoryAllocation,
          "cudaGetLastError then returns cudaErrorMemoryAllocation");
    CHECK(cudaGetLastError() == cudaSuccess, "... and cudaSuccess after that");
    cci_stats s2 = ptest_stats(&api, 0);
    CHECK(s2.num_ooms == s1.num_ooms + 1, "the allocator counted one out-of-memory");
    CHECK(ptest_verify(b, 120 * MiB, 3), "live memory untouched by the failed allocation");

    CUDA_OK(cudaFree(b));
    CHECK(cudaMalloc(&c, 200 * MiB) == cudaSuccess,
          "after the free, 200 MiB fit (the cached 120 MiB segment is given back on demand)");
    ptest_fill(c, 200 * MiB, 4);
    CHECK(ptest_verify(c, 200 * MiB, 4), "the new block holds its pattern");
    CUDA_OK(cudaFree(c));
    return 0;
}
