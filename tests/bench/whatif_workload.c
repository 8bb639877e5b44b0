// SPDX-License-Identifier: MIT
// The program behind the exit-replay benchmark (bench_whatif.py): N history events through
// cudaMalloc/cudaFree (the history records an allocation as one event and a free as two, its
// request and its completion), sizes spread log-uniformly from 512 B to 64 MiB and up to 96
// blocks alive at once, from a fixed seed, so the preload's history holds exactly N events and
// its replay does the work a training loop would give it (splits, merges, new segments).
//
//   whatif_workload [EVENTS]      (default 400000)
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define LIVE 96

static unsigned long long rng = 0x9e3779b97f4a7c15ULL;

static unsigned next(void)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)(rng >> 33);
}

int main(int argc, char **argv)
{
    long events = argc > 1 ? strtol(argv[1], NULL, 10) : 400000;
    if (events < 2 || events > 100000000) {
        fprintf(stderr, "whatif_workload: EVENTS must be 2..100000000\n");
        return 2;
    }
    void *live[LIVE] = {0}, *last = NULL;
    long allocs = 0, frees = 0;
    while (allocs + 2 * frees < events) {
        unsigned slot = next() % LIVE;
        if (events - (allocs + 2 * frees) == 1) {  // room for one event only: an allocation
            if (cudaMalloc(&last, 512) != cudaSuccess)
                return 1;
            allocs++;
        } else if (live[slot]) {
            if (cudaFree(live[slot]) != cudaSuccess)
                return 1;
            live[slot] = NULL;
            frees++;
        } else {
            size_t size = (size_t)512 << (next() % 18);  // 512 B .. 64 MiB
            size += (next() % 8) * (size / 8);
            if (cudaMalloc(&live[slot], size) != cudaSuccess)
                return 1;
            allocs++;
        }
    }
    printf("whatif_workload: %ld allocations, %ld frees\n", allocs, frees);
    return 0;
}
