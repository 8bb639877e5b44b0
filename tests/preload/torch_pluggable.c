// SPDX-License-Identifier: MIT
// PyTorch's pluggable allocator entry points (cci_torch_alloc / cci_torch_free), as PyTorch calls
// them: the stream comes with every call, so a free is stream-ordered. Checked against the same
// program through cudaMalloc/cudaFree, where with non-blocking streams alive a free is fenced:
// - reuse on the same stream at once, with no fence recorded (cudaFree: a fence per batch);
// - another stream does not get the block while the old stream's slow write is pending, and the
//   new owner's data is intact after it ran;
// - an allocation for another device than the current one leaves the current device as it was.
#include <dlfcn.h>

#include "ptest.h"

#define N ((size_t)512 << 10)

typedef void *(*torch_alloc_fn)(size_t, int, cudaStream_t);
typedef void (*torch_free_fn)(void *, size_t, int, cudaStream_t);

int main(void)
{
    ptest_api api = ptest_get_api();
    torch_alloc_fn talloc = (torch_alloc_fn)dlsym(RTLD_DEFAULT, "cci_torch_alloc");
    torch_free_fn tfree = (torch_free_fn)dlsym(RTLD_DEFAULT, "cci_torch_free");
    CHECK(talloc && tfree, "the preload exports cci_torch_alloc and cci_torch_free");
    cudaStream_t s1 = ptest_stream(cudaStreamNonBlocking), s2 = ptest_stream(cudaStreamNonBlocking);

    // The control: cudaMalloc/cudaFree with streams alive, fenced.
    void *c;
    CUDA_OK(cudaMalloc(&c, N));
    CUDA_OK(cudaFree(c));
    CUDA_OK(cudaMalloc(&c, N));
    CUDA_OK(cudaFree(c));
    cci_stats c0 = ptest_stats(&api, 0);
    for (int i = 0; i < 64; i++) {
        CUDA_OK(cudaMalloc(&c, N));
        CUDA_OK(cudaFree(c));
    }
    cci_stats c1 = ptest_stats(&api, 0);
    uint64_t fenced_records = c1.num_fence_records - c0.num_fence_records,
             reuse_orders = c1.fence_reuse_orders - c0.fence_reuse_orders;
    CHECK(fenced_records + reuse_orders > 0, "control: 64 cudaMalloc+cudaFree pairs recorded %llu fences "
          "and made %llu orders at reuse", (unsigned long long)fenced_records, (unsigned long long)reuse_orders);

    // Same stream: reused at once, no fence.
    void *p = talloc(N, 0, s1);
    CHECK(p != NULL, "allocated on s1");
    tfree(p, N, 0, s1);
    uint64_t records1 = ptest_stats(&api, 0).num_fence_records;
    int same = 1;
    for (int i = 0; i < 64; i++) {
        void *q = talloc(N, 0, s1);
        same &= q == p;
        tfree(q, N, 0, s1);
    }
    CHECK(same, "64 pairs on s1 got the same block back each time");
    uint64_t records = ptest_stats(&api, 0).num_fence_records - records1;
    CHECK(records == 0, "with no fence recorded (%llu)", (unsigned long long)records);

    // Another stream while s1's slow write to the block is pending.
    p = talloc(N, 0, s1);
    fakecuda_delayed_fill(p, 0xAA, N, s1, 200000);
    tfree(p, N, 0, s1);
    void *q = talloc(N, 0, s2);
    CHECK(q != p || ptest_all_bytes(q, N, 0xAA), "s2 does not get s1's block before s1's write ran");
    fakecuda_delayed_fill(q, 0x55, N, s2, 0);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(ptest_all_bytes(q, N, 0x55), "s2's data intact after s1's write ran");
    tfree(q, N, 0, s2);

    // A device other than the current one.
    int n = 0, cur = -1;
    CUDA_OK(cudaGetDeviceCount(&n));
    if (n > 1) {
        void *r = talloc(N, 1, 0);
        CUDA_OK(cudaGetDevice(&cur));
        CHECK(r != NULL && cur == 0, "allocated on device 1; device 0 still current");
        CHECK(ptest_stats(&api, 1).allocation[CCI_POOL_ALL].current == 1, "served by device 1's allocator");
        tfree(r, N, 1, 0);
    }
    CUDA_OK(cudaStreamDestroy(s1));
    CUDA_OK(cudaStreamDestroy(s2));
    return 0;
}
