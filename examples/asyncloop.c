// SPDX-License-Identifier: MIT
// A stream-ordered allocation loop: cudaMallocAsync / cudaFreeAsync with sizes from 512 B to 7 MiB,
// a ring of eight buffers alive at a time, everything queued on one stream. Each new buffer is
// filled and its tail collected into an accumulator that is copied back every 100 iterations.
//
//   nvcc -cudart shared -Iinclude -Iexamples examples/asyncloop.c -o asyncloop
//   LD_PRELOAD=build/preload/libccinterpose.so ./asyncloop
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // RTLD_DEFAULT in cci_probe.h
#endif
#include "example_util.h"

#define ITERS 1200
#define RING 8
#define TAIL 64
#define ACC_SLOTS 100

static size_t size_for(int i)
{
    // Powers of two from 512 B to 4 MiB, each stretched by up to 3/4 of itself (7 MiB at most).
    size_t base = (size_t)512 << (i % 14);
    return base + base / 4 * (size_t)((i / 14) % 4) + (size_t)(i % 7) * 8;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned long allocations = 0;

    unsigned char *acc;
    CK(cudaMalloc((void **)&acc, ACC_SLOTS * TAIL));
    allocations++;
    CK(cudaMemsetAsync(acc, 0, ACC_SLOTS * TAIL, s));
    unsigned char *host = ex_host_alloc(ACC_SLOTS * TAIL);

    unsigned char *ring[RING] = {0};
    uint64_t h = EX_HASH_SEED;
    for (int i = 0; i < ITERS; i++) {
        int slot = i % RING;
        if (ring[slot])
            CK(cudaFreeAsync(ring[slot], s));
        size_t n = size_for(i);
        CK(cudaMallocAsync((void **)&ring[slot], n, s));
        allocations++;
        CK(cudaMemsetAsync(ring[slot], (i * 7 + 3) & 0xff, n, s));
        // Mark two tail bytes with the iteration, so equal-sized buffers still leave distinct tails.
        CK(cudaMemsetAsync(ring[slot] + n - TAIL / 2, i & 0xff, 2, s));
        CK(cudaMemcpyAsync(acc + (size_t)(i % ACC_SLOTS) * TAIL, ring[slot] + n - TAIL, TAIL,
                           cudaMemcpyDeviceToDevice, s));
        if (i % ACC_SLOTS == ACC_SLOTS - 1) {
            CK(cudaStreamSynchronize(s));
            CK(cudaMemcpy(host, acc, ACC_SLOTS * TAIL, cudaMemcpyDeviceToHost));
            h = ex_hash(h, host, ACC_SLOTS * TAIL);
        }
    }
    for (int k = 0; k < RING; k++)
        CK(cudaFreeAsync(ring[k], s));
    CK(cudaStreamSynchronize(s));
    CK(cudaFree(acc));
    CK(cudaStreamDestroy(s));
    free(host);
    printf("asyncloop: %d iterations, sizes 512 B .. %zu KiB\n", ITERS, size_for(13 + 14 * 3) / 1024);
    ex_finish("asyncloop", h, allocations);
    return 0;
}
