// SPDX-License-Identifier: MIT
// What the three examples share: stop at the first CUDA error with its location, and fold results
// into one checksum that must come out the same with and without the preload.
#ifndef CCI_EXAMPLE_UTIL_H
#define CCI_EXAMPLE_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cci_probe.h"

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t ck_rc_ = (call);                                                               \
        if (ck_rc_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call,              \
                    cudaGetErrorString(ck_rc_), (int)ck_rc_);                                      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

// A word-at-a-time FNV-style mix: fast enough for hundreds of MiB copied back from the device,
// and any changed, lost or moved byte changes it.
static inline uint64_t ex_hash(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; n; n--, p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

#define EX_HASH_SEED 0xcbf29ce484222325ull

static inline void *ex_host_alloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

// The lines the checksum comparison reads, then what the preload saw (if it is loaded).
static inline void ex_finish(const char *name, uint64_t checksum, unsigned long allocations)
{
    printf("%s: %lu allocations\n", name, allocations);
    printf("checksum: %016llx\n", (unsigned long long)checksum);
    cci_probe_print(0);
}

#endif
