// SPDX-License-Identifier: MIT
// Data through many allocation cycles, for comparing a run under the preload in a VMM mode with
// a native run (compare_checksums.py): 2000 seeded operations keep up to 64 blocks of 256 B to
// 12 MiB alive, each written from the host with a pattern, read back with cudaMemcpy and checked
// when freed. The checksum covers every byte read back, so a block served from a page that was
// remapped under it, or handed out twice, changes it.
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../examples/cci_probe.h"
#include "fake_cuda_runtime.h"

#define SLOTS 64
#define OPS 2000
#define MAX_BYTES ((size_t)12 << 20)

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

// Whole words (sizes are rounded down to 8 bytes): the host side stays cheap.
static void fill(uint64_t *h, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n / 8; i++)
        h[i] = seed ^ (i * 0x9e3779b97f4a7c15ull);
}

int main(void)
{
    void *slot[SLOTS] = {0};
    size_t size[SLOTS] = {0};
    uint64_t seed[SLOTS] = {0};
    uint64_t *host = malloc(MAX_BYTES), *back = malloc(MAX_BYTES);
    uint64_t sum = 1469598103934665603ull;
    long allocations = 0, bad = 0;
    if (!host || !back)
        return 2;
    for (int op = 0; op < OPS + SLOTS; op++) {
        int i = op < OPS ? (int)(next() % SLOTS) : op - OPS;  // the tail frees every slot
        if (slot[i]) {
            if (cudaMemcpy(back, slot[i], size[i], cudaMemcpyDeviceToHost) != cudaSuccess)
                return 3;
            fill(host, size[i], seed[i]);
            for (size_t k = 0; k < size[i] / 8; k++) {
                bad += back[k] != host[k];
                sum = (sum ^ back[k]) * 1099511628211ull;
            }
            if (cudaFree(slot[i]) != cudaSuccess)
                return 4;
            slot[i] = NULL;
        } else if (op < OPS) {
            // Mostly small, sometimes large: both pools, growth and reuse.
            size[i] = (next() % 8 ? 256 + next() % (1 << 20) : ((size_t)1 << 20) + next() % (MAX_BYTES - (1 << 20))) & ~(size_t)7;
            seed[i] = next();
            if (cudaMalloc(&slot[i], size[i]) != cudaSuccess)
                return 5;
            allocations++;
            fill(host, size[i], seed[i]);
            if (cudaMemcpy(slot[i], host, size[i], cudaMemcpyHostToDevice) != cudaSuccess)
                return 6;
        }
    }
    printf("vmm_integrity: %ld allocations\n", allocations);
    printf("mismatched words: %ld\n", bad);
    printf("checksum: %016llx\n", (unsigned long long)sum);
    cci_probe_print(0);
    free(host);
    free(back);
    return bad ? 1 : 0;
}
