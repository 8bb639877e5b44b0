// SPDX-License-Identifier: MIT
// The stream rule (preload/stream_registry.h) on the fake CUDA:
//   stream_rule ordered  - no stream, one thread: a freed block comes back at once (q == p) and
//                          nothing is synchronised or fenced;
//   stream_rule runtime  - after cudaStreamCreateWithFlags the frees are fenced: fences are
//                          recorded and no device synchronisation makes blocks reusable;
//   stream_rule driver   - the same after a stream created through the driver (cuStreamCreate).
#include "fake_cuda_driver.h"

#include <string.h>

#include "ptest.h"

#define N ((size_t)1 << 16)

static void ordered(const ptest_api *api)
{
    void *p, *q;
    CUDA_OK(cudaMalloc(&p, N));
    CUDA_OK(cudaMemset(p, 1, N));
    fakecuda_reset_counters();
    cci_stats before = ptest_stats(api, 0);
    CUDA_OK(cudaFree(p));
    CUDA_OK(cudaMalloc(&q, N));
    cci_stats after = ptest_stats(api, 0);
    CHECK(q == p, "ordered program: the freed block is reused at once");
    CHECK(fakecuda_ctx_sync_calls() == 0 && after.num_sync_all_streams == before.num_sync_all_streams,
          "ordered program: no device synchronisation");
    CHECK(after.num_fence_records == before.num_fence_records, "ordered program: no fence");
    CUDA_OK(cudaFree(q));
}

// Many frees on a stream-using program: more than the 2 MiB small segment holds, so reuse needs
// fences (the old default needed a device synchronisation per batch).
static void fenced(const ptest_api *api, const char *how)
{
    cci_stats before = ptest_stats(api, 0);
    fakecuda_reset_counters();
    for (int i = 0; i < 1000; i++) {
        void *p;
        CUDA_OK(cudaMalloc(&p, 4096));
        CUDA_OK(cudaFree(p));
    }
    cci_stats after = ptest_stats(api, 0);
    CHECK(after.num_fence_records > before.num_fence_records,
          "%s stream: frees are fenced (%llu fences recorded)", how,
          (unsigned long long)(after.num_fence_records - before.num_fence_records));
    CHECK(after.num_sync_all_streams == before.num_sync_all_streams && fakecuda_ctx_sync_calls() == 0,
          "%s stream: no device synchronisation made blocks reusable", how);
    CHECK(fakecuda_device_allocs() <= 1, "%s stream: blocks were reused (%llu device allocations)",
          how, fakecuda_device_allocs());
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s ordered|runtime|driver\n", argv[0]);
        return 2;
    }
    ptest_api api = ptest_get_api();
    CUDA_OK(cudaSetDevice(0));
    ordered(&api);
    if (!strcmp(argv[1], "runtime")) {
        cudaStream_t s;
        CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        fenced(&api, "runtime");
        CUDA_OK(cudaStreamDestroy(s));
    } else if (!strcmp(argv[1], "driver")) {
        CUstream s;
        CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        fenced(&api, "driver");
        CU_OK(cuStreamDestroy_v2(s));
    }
    printf("stream rule %s: ok\n", argv[1]);
    return 0;
}
