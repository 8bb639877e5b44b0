// SPDX-License-Identifier: MIT
// fork(): the child drops the inherited pools without freeing them and starts fresh; the parent's
// pools and blocks are untouched.
#include <sys/wait.h>

#include "ptest.h"

int main(void)
{
    ptest_api api = ptest_get_api();
    CHECK(api.is_active() == 1, "the preload is active");
    void *live[4];
    for (int i = 0; i < 4; i++) {
        CUDA_OK(cudaMalloc(&live[i], (size_t)(i + 1) << 16));
        ptest_fill(live[i], (size_t)(i + 1) << 16, (uint64_t)i);
    }
    void *cached;
    CUDA_OK(cudaMallocAsync(&cached, 65536, 0));
    CUDA_OK(cudaFreeAsync(cached, 0));
    cci_stats before = ptest_stats(&api, 0);
    fflush(stdout);

    pid_t pid = fork();
    if (pid == 0) {
        cci_stats fresh = ptest_stats(&api, 0);
        CHECK(fresh.allocation[CCI_POOL_ALL].allocated == 0 && fresh.reserved_bytes[CCI_POOL_ALL].current == 0,
              "child: statistics start from zero (the inherited pools are gone)");
        unsigned long long frees = fakecuda_device_frees();
        for (int i = 0; i < 50; i++) {
            void *p;
            CUDA_OK(cudaMalloc(&p, 65536));
            ptest_fill(p, 65536, 1000 + (uint64_t)i);
            if (!ptest_verify(p, 65536, 1000 + (uint64_t)i))
                _exit(3);
            CUDA_OK(cudaFree(p));
        }
        cci_stats st = ptest_stats(&api, 0);
        CHECK(st.allocation[CCI_POOL_ALL].allocated == 50 && st.num_device_alloc >= 1,
              "child: 50 allocations served from a pool of its own");
        CHECK(fakecuda_device_frees() == frees, "child: the inherited segments were not freed");
        exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child exited with 0");
    cci_stats after = ptest_stats(&api, 0);
    CHECK(after.allocation[CCI_POOL_ALL].current == before.allocation[CCI_POOL_ALL].current &&
              after.reserved_bytes[CCI_POOL_ALL].current == before.reserved_bytes[CCI_POOL_ALL].current,
          "parent: pools unchanged by the child");
    for (int i = 0; i < 4; i++)
        CHECK(ptest_verify(live[i], (size_t)(i + 1) << 16, (uint64_t)i), "parent: block %d intact", i);
    void *again;
    fakecuda_reset_counters();
    CUDA_OK(cudaMallocAsync(&again, 65536, 0));
    CHECK(again == cached && fakecuda_device_allocs() == 0, "parent: its cached block is still there");
    CUDA_OK(cudaFreeAsync(again, 0));
    for (int i = 0; i < 4; i++)
        CUDA_OK(cudaFree(live[i]));
    return 0;
}
