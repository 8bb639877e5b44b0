// SPDX-License-Identifier: MIT
// The mixed workload (bench_alloc's: 256 slots, log-uniform 512 B .. 64 MiB, random alloc-or-free)
// through cudaMalloc/cudaFree, then every block freed. Its sizes seldom repeat, so nearly every
// allocation takes the locked path, and each locked section's stop hands the history a batch of
// the one or two records the thread cache logged since the previous one: thousands of small
// chunks (history.c carves them from slabs). test_json.py --exit-history checks that the exit
// report's history holds every event and replays to the run's own peaks.
//
//   ptest_mixed_history [OPS]   (default 40000)
#include "ptest.h"
#include "../bench/bench_util.h"

#define SLOTS 256

int main(int argc, char **argv)
{
    long ops = argc > 1 ? atol(argv[1]) : 40000;
    if (ops <= 0) {
        fprintf(stderr, "usage: ptest_mixed_history [OPS > 0]\n");
        return 2;
    }
    void *slot[SLOTS] = {0};
    uint64_t rng = 0x9e3779b97f4a7c15ull;  // bench_alloc's sequence
    for (long op = 0; op < ops; op++) {
        unsigned k = (unsigned)(bu_rand(&rng) % SLOTS);
        if (slot[k]) {
            CUDA_OK(cudaFree(slot[k]));
            slot[k] = NULL;
        } else {
            CUDA_OK(cudaMalloc(&slot[k], bu_log_uniform(&rng, 512, 64 * BU_MiB)));
        }
    }
    for (int k = 0; k < SLOTS; k++)
        if (slot[k])
            CUDA_OK(cudaFree(slot[k]));
    printf("ok: %ld mixed operations through the hooks\n", ops);
    return 0;
}
