// SPDX-License-Identifier: MIT
// A library whose constructor allocates device memory: it runs before main, at a time when the
// preload has seen no CUDA call yet, so our lazy start-up happens inside someone else's
// constructor.
#include "ptest.h"

int ctor_result = -1;
int ctor_cached = -1;

__attribute__((constructor)) static void allocate_early(void)
{
    void *p = NULL, *q = NULL;
    fakecuda_reset_counters();
    cudaError_t e = cudaMalloc(&p, 4096);
    if (e == cudaSuccess)
        e = cudaFree(p);
    for (int i = 0; e == cudaSuccess && i < 100; i++) {
        e = cudaMalloc(&q, 4096);
        if (e == cudaSuccess)
            e = cudaFree(q);
    }
    ctor_result = (int)e;
    ctor_cached = fakecuda_device_allocs() <= 1;
}
