// SPDX-License-Identifier: MIT
// The pinned host cache on a real GPU (scripts/gpu-pinned.sh runs it natively, under the preload,
// with a reserve segment, and as a control with CCI_DEBUG_UNSAFE=no-fences).
//
//   pinned_gpu hazard      a copy from a pinned buffer is queued behind a ~20 ms kernel on a
//                          non-blocking stream; the buffer is freed and one of its size allocated
//                          and written by the CPU; the copy must read the old bytes. Natively
//                          cudaFreeHost waits for the device; under the preload the fence must.
//                          Exit 1 on corruption (the control expects it).
//   pinned_gpu questions   small buffers (carved from the reserve segment when one is configured):
//                          cudaHostGetFlags, cudaHostGetDevicePointer and cudaPointerGetAttributes
//                          answer as for an allocation, and a kernel writes through the device
//                          pointer what the CPU then reads at the host address.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N ((size_t)4 << 20)
#define SPIN_NS 20000000ull

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

__global__ void spin(unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

__global__ void stamp(unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
}

static int hazard(void)
{
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned char *dev, *back = (unsigned char *)malloc(N);
    CK(cudaMalloc(&dev, N));
    int bad = 0;
    for (int round = 0; round < 5; round++) {
        void *a, *b;
        CK(cudaHostAlloc(&a, N, cudaHostAllocDefault));
        memset(a, 0xAA, N);
        spin<<<1, 1, 0, s>>>(SPIN_NS);
        CK(cudaMemcpyAsync(dev, a, N, cudaMemcpyHostToDevice, s));  // runs after the spin
        CK(cudaFreeHost(a));
        CK(cudaHostAlloc(&b, N, cudaHostAllocDefault));
        memset(b, 0x55, N);  // the new owner, with the CPU
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(back, dev, N, cudaMemcpyDeviceToHost));
        size_t wrong = 0;
        for (size_t i = 0; i < N; i++)
            wrong += back[i] != 0xAA;
        printf("hazard round %d: buffer %s, %zu of %zu bytes the copy read were the new owner's\n", round,
               a == b ? "handed out again" : "not handed out again", wrong, N);
        bad |= wrong != 0;
        CK(cudaFreeHost(b));
    }
    CK(cudaFree(dev));
    CK(cudaStreamDestroy(s));
    free(back);
    printf("hazard: %s\n", bad ? "CORRUPTED" : "intact");
    return bad;
}

static int questions(void)
{
    int bad = 0;
    void *p[3];
    for (int i = 0; i < 3; i++)
        CK(cudaHostAlloc(&p[i], 1000, cudaHostAllocDefault));
    for (int i = 0; i < 3; i++) {
        unsigned flags = 0;
        void *d = NULL;
        cudaPointerAttributes at;
        CK(cudaHostGetFlags(&flags, p[i]));
        CK(cudaHostGetDevicePointer(&d, p[i], 0));
        CK(cudaPointerGetAttributes(&at, p[i]));
        stamp<<<4, 128>>>((unsigned char *)d, 1000, (unsigned char)(0x30 + i));
        CK(cudaDeviceSynchronize());
        int ok = at.type == cudaMemoryTypeHost && at.hostPointer == p[i] && at.devicePointer == d;
        for (int k = 0; k < 1000; k++)
            ok &= ((unsigned char *)p[i])[k] == 0x30 + i;
        printf("buffer %d at %p: flags %u, device pointer %p, attributes type %d host %p device %p: %s\n", i, p[i],
               flags, d, (int)at.type, at.hostPointer, at.devicePointer, ok ? "ok" : "WRONG");
        bad |= !ok;
    }
    for (int i = 0; i < 3; i++)
        CK(cudaFreeHost(p[i]));
    return bad;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "hazard";
    if (!strcmp(what, "hazard"))
        return hazard();
    if (!strcmp(what, "questions"))
        return questions();
    fprintf(stderr, "usage: pinned_gpu hazard|questions\n");
    return 2;
}
