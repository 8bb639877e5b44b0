// SPDX-License-Identifier: MIT
// Two devices (FAKECUDA_DEVICES=2): one pool per device, each segment on the device that was
// current at cudaMalloc, frees found whichever device is current, threads on both at once.
#include <pthread.h>

#include "ptest.h"

#define MiB ((size_t)1 << 20)

static void *pairs_on(void *arg)
{
    int dev = (int)(intptr_t)arg;
    CUDA_OK(cudaSetDevice(dev));
    for (int i = 0; i < 2000; i++) {
        void *p;
        CUDA_OK(cudaMalloc(&p, 8192));
        ptest_fill(p, 8192, (uint64_t)(dev * 100000 + i));
        if (!ptest_verify(p, 8192, (uint64_t)(dev * 100000 + i)))
            exit(2);
        CUDA_OK(cudaFree(p));
    }
    return NULL;
}

int main(void)
{
    ptest_api api = ptest_get_api();
    CHECK(api.is_active() == 1, "the preload is active");
    int n = 0;
    CUDA_OK(cudaGetDeviceCount(&n));
    CHECK(n == 2, "the fake has two devices");

    void *a, *b;
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaMalloc(&a, MiB));
    CUDA_OK(cudaSetDevice(1));
    size_t used1 = fakecuda_used_bytes(1);
    CUDA_OK(cudaMalloc(&b, MiB));
    CHECK(fakecuda_used_bytes(1) > used1 && fakecuda_live_allocs(1) == 1,
          "device 1's block lives in a segment on device 1");
    CHECK(ptest_stats(&api, 0).allocation[CCI_POOL_ALL].current == 1 &&
              ptest_stats(&api, 1).allocation[CCI_POOL_ALL].current == 1,
          "each device's statistics count its own block");

    CUDA_OK(cudaSetDevice(0));
    unsigned long long frees = fakecuda_device_frees();
    CHECK(cudaFree(b) == cudaSuccess && fakecuda_device_frees() == frees,
          "a device-1 block freed while device 0 is current goes back to device 1's pool");
    CHECK(ptest_stats(&api, 1).allocation[CCI_POOL_ALL].current == 0, "device 1 has no live block");

    CUDA_OK(cudaSetDevice(1));
    typedef cudaError_t (*info_fn)(size_t *, size_t *);
    info_fn real_info;
    // CUDA's own numbers: the runtime's cudaMemGetInfo is caught at driver level too.
    memcpy(&real_info, &(void *){ptest_real_driver("cuMemGetInfo_v2")}, sizeof real_info);
    CUDA_OK(cudaMallocAsync(&b, 4 * MiB, 0));
    CUDA_OK(cudaFreeAsync(b, 0));
    cci_stats s1 = ptest_stats(&api, 1);
    size_t cached1 = (size_t)(s1.reserved_bytes[CCI_POOL_ALL].current - s1.active_bytes[CCI_POOL_ALL].current);
    size_t f, t, rf, rt;
    CUDA_OK(cudaMemGetInfo(&f, &t));
    CUDA_OK(real_info(&rf, &rt));
    CHECK(cached1 > 0 && f == rf + cached1, "cudaMemGetInfo on device 1 adds device 1's cached bytes");

    fakecuda_reset_counters();
    pthread_t t0, t1;
    pthread_create(&t0, NULL, pairs_on, (void *)(intptr_t)0);
    pthread_create(&t1, NULL, pairs_on, (void *)(intptr_t)1);
    pthread_join(t0, NULL);
    pthread_join(t1, NULL);
    CHECK(fakecuda_device_allocs() <= 2,
          "threads on both devices, 2000 pairs each: %llu device allocations, patterns intact",
          fakecuda_device_allocs());

    CUDA_OK(cudaSetDevice(1));
    CHECK(cudaFree(a) == cudaSuccess && ptest_stats(&api, 0).allocation[CCI_POOL_ALL].current == 0,
          "a device-0 block freed while device 1 is current");
    cci_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    CHECK(api.get_stats(2, &s) == -1, "cci_get_stats(2) fails: there is no device 2");
    return 0;
}
