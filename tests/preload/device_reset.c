// SPDX-License-Identifier: MIT
// cudaDeviceReset: our segments of the device go back to CUDA before the reset, the pool starts
// empty afterwards, and pointers from before the reset are no longer ours.
#include "ptest.h"

int main(void)
{
    ptest_api api = ptest_get_api();
    CHECK(api.is_active() == 1, "the preload is active");
    void *p[6];
    for (int i = 0; i < 6; i++)
        CUDA_OK(cudaMalloc(&p[i], (size_t)(i + 1) << 20));
    for (int i = 0; i < 6; i += 2)
        CUDA_OK(cudaFree(p[i]));
    cci_stats st = ptest_stats(&api, 0);
    long long segs = st.segment[CCI_POOL_ALL].current;
    unsigned long long frees = fakecuda_device_frees();
    CHECK(segs > 0 && fakecuda_live_allocs(0) == (size_t)segs, "%lld segments held before the reset",
          segs);

    CHECK(cudaDeviceReset() == cudaSuccess, "cudaDeviceReset succeeds");
    CHECK(fakecuda_device_frees() - frees == (unsigned long long)segs,
          "every segment was given back with cuMemFree before the reset");
    CHECK(fakecuda_live_allocs(0) == 0 && fakecuda_used_bytes(0) == 0, "the device is empty");
    st = ptest_stats(&api, 0);
    CHECK(st.reserved_bytes[CCI_POOL_ALL].current == 0 && st.allocation[CCI_POOL_ALL].current == 0,
          "device 0's pool starts empty");

    cudaError_t e = cudaFree(p[1]);
    cudaGetLastError();
    CHECK(e != cudaSuccess, "a pointer from before the reset is not ours any more (CUDA says %d)", (int)e);

    fakecuda_reset_counters();
    for (int i = 0; i < 1000; i++) {
        void *q;
        CUDA_OK(cudaMalloc(&q, 4096));
        ptest_fill(q, 4096, (uint64_t)i);
        if (!ptest_verify(q, 4096, (uint64_t)i))
            return 2;
        CUDA_OK(cudaFree(q));
    }
    CHECK(fakecuda_device_allocs() <= 2, "after the reset, caching works again (%llu device allocations)",
          fakecuda_device_allocs());
    return 0;
}
