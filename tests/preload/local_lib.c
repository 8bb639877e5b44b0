// SPDX-License-Identifier: MIT
// An extension module that needs libcudart, loaded RTLD_LOCAL by local_main.c (as Python loads
// extension modules): libcudart is then outside the global scope, where RTLD_NEXT cannot see it.
#include "ptest.h"

int local_pairs(unsigned long long *device_allocs);

int local_pairs(unsigned long long *device_allocs)
{
    fakecuda_reset_counters();
    for (int i = 0; i < 100; i++) {
        void *p;
        cudaError_t e = cudaMalloc(&p, 4096);
        if (e == cudaSuccess)
            e = cudaFree(p);
        if (e != cudaSuccess)
            return (int)e;
    }
    *device_allocs = fakecuda_device_allocs();
    return 0;
}
