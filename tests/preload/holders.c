// SPDX-License-Identifier: MIT
// Who holds the memory (CCI_STACKS): blocks from two named functions of this program, one of
// them kept until exit. holders_check.py reads the JSON report and checks that the holders at
// peak and the blocks still allocated at exit name these functions (built with -rdynamic so
// that dladdr finds them). noinline: each function must be a frame of its own.
#include "ptest.h"

// Not static: -rdynamic exports them, so dladdr can name them.
void holders_make_weights(void **out);
void holders_make_scratch(void **out);

#define WEIGHTS 4
#define SCRATCH 2

__attribute__((noinline)) void holders_make_weights(void **out)
{
    for (int i = 0; i < WEIGHTS; i++)
        CUDA_OK(cudaMalloc(&out[i], (size_t)8 << 20));   // 32 MiB in all: the largest holder
}

__attribute__((noinline)) void holders_make_scratch(void **out)
{
    for (int i = 0; i < SCRATCH; i++)
        CUDA_OK(cudaMalloc(&out[i], (size_t)1 << 20));
}

int main(void)
{
    void *weights[WEIGHTS], *scratch[SCRATCH];
    holders_make_weights(weights);
    holders_make_scratch(scratch);
    for (int i = 0; i < SCRATCH; i++)
        CUDA_OK(cudaFree(scratch[i]));
    CUDA_OK(cudaFree(weights[0]));
    printf("exiting with %d weight blocks still allocated\n", WEIGHTS - 1);
    return 0;
}
