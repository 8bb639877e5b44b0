// SPDX-License-Identifier: MIT
// The fragmentation scenario from the articles that started this project: ten buffers, free every
// other one, then ask for one large buffer that none of the holes can hold. Repeated with growing
// sizes. Every buffer carries a known pattern; what survives is copied back and checksummed, so a
// block handed out twice or a copy landing in the wrong place changes the result.
//
//   nvcc -cudart shared -Iinclude -Iexamples examples/seedfrag.c -o seedfrag
//   LD_PRELOAD=build/preload/libccinterpose.so ./seedfrag
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // RTLD_DEFAULT in cci_probe.h
#endif
#include "example_util.h"

#define NBUF 10
#define ROUNDS 4
#define PATTERN 4096
#define MiB ((size_t)1 << 20)

static unsigned long allocations;

static void *dev_alloc(size_t n)
{
    void *p;
    CK(cudaMalloc(&p, n));
    allocations++;
    return p;
}

// A pattern no memset could produce, different per buffer and round.
static void fill_pattern(unsigned char *h, int round, int buf)
{
    for (size_t k = 0; k < PATTERN; k++)
        h[k] = (unsigned char)(k * 131u + (unsigned)round * 17u + (unsigned)buf * 7u + (k >> 8));
}

static uint64_t run_round(int round, uint64_t h, unsigned char *host, unsigned char *pattern)
{
    size_t small = 4 * MiB * (size_t)(round + 1);
    size_t big = 64 * MiB + 32 * MiB * (size_t)round;  // still room for all ten small ones
    unsigned char *buf[NBUF];
    for (int i = 0; i < NBUF; i++) {
        buf[i] = dev_alloc(small);
        CK(cudaMemset(buf[i], 0x10 + round * NBUF + i, small));
        fill_pattern(pattern, round, i);
        CK(cudaMemcpy(buf[i] + small / 2, pattern, PATTERN, cudaMemcpyHostToDevice));
    }
    for (int i = 0; i < NBUF; i += 2)
        CK(cudaFree(buf[i]));

    // The request that the five freed holes cannot satisfy together.
    unsigned char *large = dev_alloc(big);
    CK(cudaMemset(large, 0xa5, big));
    for (int i = 1; i < NBUF; i += 2)
        CK(cudaMemcpy(large + (size_t)i * small, buf[i], small, cudaMemcpyDeviceToDevice));

    // The survivors must still hold their own bytes after the large buffer was written.
    for (int i = 1; i < NBUF; i += 2) {
        CK(cudaMemcpy(host, buf[i], small, cudaMemcpyDeviceToHost));
        h = ex_hash(h, host, small);
        CK(cudaFree(buf[i]));
    }
    for (size_t off = 0; off < big; off += small) {
        size_t n = big - off < small ? big - off : small;
        CK(cudaMemcpy(host, large + off, n, cudaMemcpyDeviceToHost));
        h = ex_hash(h, host, n);
    }
    CK(cudaFree(large));
    printf("round %d: 10 x %zu MiB, freed every other one, then %zu MiB\n", round, small / MiB, big / MiB);
    return h;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    unsigned char *host = ex_host_alloc(4 * MiB * ROUNDS);
    unsigned char *pattern = ex_host_alloc(PATTERN);
    uint64_t h = EX_HASH_SEED;
    for (int r = 0; r < ROUNDS; r++)
        h = run_round(r, h, host, pattern);
    CK(cudaDeviceSynchronize());
    free(host);
    free(pattern);
    ex_finish("seedfrag", h, allocations);
    return 0;
}
