// SPDX-License-Identifier: MIT
// Counts what reaches the device for 100 cudaMalloc/cudaFree and 100 cudaMallocAsync/cudaFreeAsync
// pairs, and checks it against the expected mode:
//   passthrough      the preload is loaded but steps aside: every call reaches CUDA,
//                    cci_is_active() is 0 and the configuration string is empty
//   not-intercepted  our hooks are never reached (a library whose exports bind nothing)
//   cached           the preload serves the pairs from its cache
#include "ptest.h"

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "passthrough";
    fakecuda_reset_counters();
    for (int i = 0; i < 100; i++) {
        void *p;
        CUDA_OK(cudaMalloc(&p, 4096));
        ptest_fill(p, 4096, (uint64_t)i);
        if (!ptest_verify(p, 4096, (uint64_t)i))
            return 2;
        CUDA_OK(cudaFree(p));
        CUDA_OK(cudaMallocAsync(&p, 4096, 0));
        CUDA_OK(cudaFreeAsync(p, 0));
    }
    CUDA_OK(cudaDeviceSynchronize());
    unsigned long long allocs = fakecuda_device_allocs(), frees = fakecuda_device_frees();
    printf("200 allocations made %llu device allocations and %llu device frees\n", allocs, frees);
    if (strcmp(mode, "cached") == 0) {
        CHECK(allocs <= 2, "the preload served the allocations from its cache");
        return 0;
    }
    CHECK(allocs == 200 && frees == 200, "every allocation and free reached CUDA (%s)", mode);
    void *sym = dlsym(RTLD_DEFAULT, "cci_is_active");
    if (strcmp(mode, "not-intercepted") == 0)
        CHECK(sym != NULL, "the preloaded library is loaded (its cci_is_active is visible), yet "
              "its cudaMalloc caught nothing");
    if (strcmp(mode, "passthrough") == 0) {
        ptest_api api = ptest_get_api();
        CHECK(sym && api.is_active() == 0, "cci_is_active() returns 0");
        CHECK(strcmp(api.config_string(), "") == 0, "cci_config_string() is empty");
        cci_stats s;
        memset(&s, 0, sizeof s);
        s.size = sizeof s;
        CHECK(api.get_stats(0, &s) == -1, "cci_get_stats() fails");
    }
    return 0;
}
