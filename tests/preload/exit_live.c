// SPDX-License-Identifier: MIT
// Exit with live blocks: no CUDA work at exit, no crash, the summary once (checked by the
// runner). A late cudaFree from an atexit handler registered before CUDA started runs after the
// runtime is torn down and must not crash either.
#include "ptest.h"

static void *late;

static void free_late(void)
{
    cudaError_t e = cudaFree(late);
    printf("late cudaFree at exit returned %d\n", (int)e);
    fflush(stdout);
}

int main(void)
{
    atexit(free_late);
    void *p[3];
    for (int i = 0; i < 3; i++)
        CUDA_OK(cudaMalloc(&p[i], (size_t)1 << 20));
    CUDA_OK(cudaMalloc(&late, 4096));
    CUDA_OK(cudaFree(p[1]));
    printf("exiting with 3 live blocks\n");
    return 0;
}
