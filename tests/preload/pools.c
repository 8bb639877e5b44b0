// SPDX-License-Identifier: MIT
// Allocations from memory pools. From the device's default pool (cudaMallocFromPoolAsync,
// cuMemAllocFromPoolAsync and its _ptsz twin, also as cuGetProcAddress hands it out) they are
// served like cudaMallocAsync: after the first, no allocation reaches the device. From a pool
// the program made they are CUDA's: every one reaches the device, is counted (pool_allocations,
// pool_bytes) and the pool's own figures are reported (pool_used_*, pool_reserved_*). Frees
// through cudaFreeAsync / cuMemFreeAsync reach CUDA's own free. Run as "served" under the
// preload, "native" without it: the same calls, the same contents and codes. The default pool's
// figures include what we serve in its place (PyTorch's stream-ordered backend reads them).
#include "fake_cuda_driver.h"
#include "ptest.h"

typedef CUresult (*from_pool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);

int main(int argc, char **argv)
{
    int served = argc > 1 && strcmp(argv[1], "served") == 0;
    cudaStream_t s = ptest_stream(cudaStreamNonBlocking);
    cudaMemPool_t dflt = NULL, own = NULL;
    CUDA_OK(cudaDeviceGetDefaultMemPool(&dflt, 0));
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = 1;
    props.location.type = 1;
    props.location.id = 0;
    CUDA_OK(cudaMemPoolCreate(&own, &props));
    from_pool_fn by_proc = NULL;
    CUdriverProcAddressQueryResult st;
    CU_OK(cuGetProcAddress_v2("cuMemAllocFromPoolAsync", (void **)&by_proc, 13000, 0, &st));

    fakecuda_reset_counters();
    for (int i = 0; i < 30; i++) {
        void *p;
        CUdeviceptr d, e;
        CUDA_OK(cudaMallocFromPoolAsync(&p, 8192, dflt, s));
        ptest_fill(p, 8192, (uint64_t)i);
        CHECK(ptest_verify(p, 8192, (uint64_t)i), "default pool contents");
        CUDA_OK(cudaFreeAsync(p, s));
        CU_OK(cuMemAllocFromPoolAsync(&d, 8192, (CUmemoryPool)dflt, (CUstream)s));
        CU_OK(cuMemFreeAsync(d, (CUstream)s));
        CU_OK(by_proc(&e, 8192, (CUmemoryPool)dflt, (CUstream)s));
        CU_OK(cuMemFreeAsync(e, (CUstream)s));
    }
    CUDA_OK(cudaStreamSynchronize(s));
    unsigned long long allocs = fakecuda_device_allocs();
    CHECK(served ? allocs <= 1 : allocs == 90, "default pool: 90 allocations made %llu device allocations", allocs);

    fakecuda_reset_counters();
    void *q[6];
    for (int i = 0; i < 6; i++) {
        CUDA_OK(cudaMallocFromPoolAsync(&q[i], (size_t)(i + 1) << 20, own, s));
        ptest_fill(q[i], (size_t)(i + 1) << 20, (uint64_t)i);
    }
    CUdeviceptr r;
    CU_OK(cuMemAllocFromPoolAsync(&r, 3 << 20, (CUmemoryPool)own, (CUstream)s));
    CHECK(fakecuda_device_allocs() == 7, "another pool: every allocation reached CUDA");
    uint64_t used = 0, used_high = 0, reserved = 0;
    CUDA_OK(cudaMemPoolGetAttribute(own, cudaMemPoolAttrUsedMemCurrent, &used));
    CUDA_OK(cudaMemPoolGetAttribute(own, cudaMemPoolAttrReservedMemCurrent, &reserved));
    CHECK(used == (24u << 20), "the pool uses %llu bytes", (unsigned long long)used);
    if (served) {
        ptest_api api = ptest_get_api();
        cci_stats c = ptest_stats(&api, 0);
        CHECK(c.version >= 5, "statistics version %u", c.version);
        CHECK(c.pool_allocations.current == 7 && c.pool_bytes.current == (int64_t)(24u << 20),
              "counted: %lld live, %lld bytes", (long long)c.pool_allocations.current, (long long)c.pool_bytes.current);
        CHECK(c.pool_used_bytes == used && c.pool_reserved_bytes == reserved,
              "the pool's own figures: used %llu, reserved %llu", (unsigned long long)c.pool_used_bytes,
              (unsigned long long)c.pool_reserved_bytes);
    }
    unsigned long long frees = fakecuda_device_frees();
    for (int i = 0; i < 6; i++) {
        CHECK(ptest_verify(q[i], (size_t)(i + 1) << 20, (uint64_t)i), "another pool's contents");
        CUDA_OK(cudaFreeAsync(q[i], s));
    }
    CU_OK(cuMemFreeAsync(r, (CUstream)s));
    CUDA_OK(cudaStreamSynchronize(s));
    CHECK(fakecuda_device_frees() == frees + 7, "another pool's frees reached CUDA");
    CUDA_OK(cudaMemPoolGetAttribute(own, cudaMemPoolAttrUsedMemHigh, &used_high));
    if (served) {
        ptest_api api = ptest_get_api();
        cci_stats c = ptest_stats(&api, 0);
        CHECK(c.pool_allocations.current == 0 && c.pool_allocations.allocated == 7 &&
                  c.pool_bytes.peak == (int64_t)(24u << 20) && c.pool_used_high == used_high && c.pool_used_bytes == 0,
              "after the frees: %lld live, peak %lld bytes, the pool's high %llu", (long long)c.pool_allocations.current,
              (long long)c.pool_bytes.peak, (unsigned long long)c.pool_used_high);
    }
    // The default pool as PyTorch's stream-ordered backend reads it: what we serve in its place
    // shows in its figures, a reset of its high mark resets ours, trimming it empties our cache.
    void *b[3];
    for (int i = 0; i < 3; i++)
        CUDA_OK(cudaMallocAsync(&b[i], 4u << 20, s));
    uint64_t d_used = 0, d_reserved = 0, d_high = 0, zero = 0;
    CUDA_OK(cudaMemPoolGetAttribute(dflt, cudaMemPoolAttrUsedMemCurrent, &d_used));
    CUDA_OK(cudaMemPoolGetAttribute(dflt, cudaMemPoolAttrReservedMemCurrent, &d_reserved));
    CHECK(d_used >= (12u << 20) && d_reserved >= d_used, "default pool with 12 MiB live: used %llu, reserved %llu",
          (unsigned long long)d_used, (unsigned long long)d_reserved);
    for (int i = 0; i < 3; i++)
        CUDA_OK(cudaFreeAsync(b[i], s));
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaMemPoolSetAttribute(dflt, cudaMemPoolAttrUsedMemHigh, &zero));
    CUDA_OK(cudaMemPoolGetAttribute(dflt, cudaMemPoolAttrUsedMemHigh, &d_high));
    CUDA_OK(cudaMemPoolGetAttribute(dflt, cudaMemPoolAttrUsedMemCurrent, &d_used));
    CHECK(d_high == d_used && d_used < (12u << 20), "after the frees and a reset, the high mark is the current %llu "
          "(read %llu)", (unsigned long long)d_used, (unsigned long long)d_high);
    CUDA_OK(cudaMemPoolTrimTo(dflt, 0));
    uint64_t trimmed = 0;
    CUDA_OK(cudaMemPoolGetAttribute(dflt, cudaMemPoolAttrReservedMemCurrent, &trimmed));
    CHECK(trimmed < d_reserved, "trimmed to nothing: reserved %llu, was %llu", (unsigned long long)trimmed,
          (unsigned long long)d_reserved);
    if (served) {
        ptest_api api = ptest_get_api();
        cci_stats c = ptest_stats(&api, 0);
        CHECK(c.reserved_bytes[CCI_POOL_ALL].current == 0, "our cache was emptied (%lld bytes left)",
              (long long)c.reserved_bytes[CCI_POOL_ALL].current);
    }

    // CUDA's own answers for bad arguments.
    void *p = NULL;
    CHECK(cudaMallocFromPoolAsync(NULL, 64, own, s) == cudaErrorInvalidValue, "no pointer (runtime)");
    CHECK(cuMemAllocFromPoolAsync(&r, 64, NULL, (CUstream)s) == CUDA_ERROR_INVALID_VALUE, "no pool (driver)");
    CHECK(cuMemAllocFromPoolAsync(&r, 0, (CUmemoryPool)own, (CUstream)s) == CUDA_ERROR_INVALID_VALUE, "size 0 (driver)");
    CHECK(cudaMallocFromPoolAsync(&p, 0, own, s) == cudaSuccess && p == NULL, "size 0 (runtime): success, NULL");
    // One left live for the exit report's line.
    CUDA_OK(cudaMallocFromPoolAsync(&p, 1 << 20, own, s));
    CUDA_OK(cudaStreamSynchronize(s));
    return 0;
}
