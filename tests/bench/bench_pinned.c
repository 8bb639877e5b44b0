// SPDX-License-Identifier: MIT
// A pinned host-to-device pipeline: every batch is written by the CPU into pinned memory and
// copied to the device asynchronously, on one of a few streams in turn.
//
//   bench_pinned --mode per-batch|upfront [--batches N] [--size BYTES] [--streams K]
//                [--rounds R] [--label TEXT] [--expect-reuse]
//
//   per-batch  cudaHostAlloc a buffer for each batch, fill it, queue the copy, cudaFreeHost it at
//              once (what a program that pins per batch does; without a cache CUDA's free waits
//              for the device, and every allocation locks pages anew)
//   upfront    K buffers pinned once before the loop; a buffer is filled again only after its
//              previous copy finished (an event per buffer): the hand-written pipeline the
//              per-batch program would need to match
//
// --expect-reuse: under the preload, fail unless its pinned cache served some batch from a freed
// buffer (the test on the fake checks that the cache is what it measures).
// After the loop every device buffer is copied back and checked against the batch last copied
// into it: a pinned buffer handed out while its copy was still queued shows up as corruption.
// One source, two builds: nvcc (the GPU; scripts/gpu-pinned.sh) and gcc against the fake CUDA
// (the test pinned-bench-fake). Prints one line per round and one JSON line (starting with '{').
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // RTLD_DEFAULT
#endif
#include <stddef.h>
#include <string.h>

#include "bench_util.h"

#include <cuda_runtime.h>

#include "cci_probe.h"

#define MAX_STREAMS 16
#define MAX_ROUNDS 32

#define CK(call)                                                                             \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "bench_pinned: %s failed: %d\n", #call, (int)e_);                \
            exit(2);                                                                         \
        }                                                                                    \
    } while (0)

static int per_batch = 1;
static long batches = 200;
static size_t size = (size_t)8 << 20;
static int nstreams = 4;

static cudaStream_t streams[MAX_STREAMS];
static void *dev[MAX_STREAMS];
static unsigned char last_byte[MAX_STREAMS];

static unsigned char batch_byte(long b)
{
    return (unsigned char)(b % 251 + 1);
}

// The CPU's share of a batch: writing it into the pinned buffer.
static void fill(void *h, long b)
{
    memset(h, batch_byte(b), size);
}

static double run_per_batch(void)
{
    uint64_t t0 = bu_now_ns();
    for (long b = 0; b < batches; b++) {
        int k = (int)(b % nstreams);
        void *h;
        CK(cudaHostAlloc(&h, size, cudaHostAllocDefault));
        fill(h, b);
        CK(cudaMemcpyAsync(dev[k], h, size, cudaMemcpyHostToDevice, streams[k]));
        last_byte[k] = batch_byte(b);
        CK(cudaFreeHost(h));
    }
    CK(cudaDeviceSynchronize());
    return (double)(bu_now_ns() - t0) / (double)batches;
}

static double run_upfront(void)
{
    void *h[MAX_STREAMS];
    cudaEvent_t done[MAX_STREAMS];
    for (int k = 0; k < nstreams; k++) {
        CK(cudaHostAlloc(&h[k], size, cudaHostAllocDefault));
        CK(cudaEventCreateWithFlags(&done[k], cudaEventDisableTiming));
    }
    uint64_t t0 = bu_now_ns();
    for (long b = 0; b < batches; b++) {
        int k = (int)(b % nstreams);
        if (b >= nstreams)
            CK(cudaEventSynchronize(done[k]));  // its previous copy has read the buffer
        fill(h[k], b);
        CK(cudaMemcpyAsync(dev[k], h[k], size, cudaMemcpyHostToDevice, streams[k]));
        CK(cudaEventRecord(done[k], streams[k]));
        last_byte[k] = batch_byte(b);
    }
    CK(cudaDeviceSynchronize());
    double per = (double)(bu_now_ns() - t0) / (double)batches;
    for (int k = 0; k < nstreams; k++) {
        CK(cudaEventDestroy(done[k]));
        CK(cudaFreeHost(h[k]));
    }
    return per;
}

// Every device buffer holds the last batch copied into it, whole.
static int check(void)
{
    unsigned char *back = malloc(size);
    int bad = 0;
    if (!back)
        return 1;
    for (int k = 0; k < nstreams && k < batches; k++) {
        CK(cudaMemcpy(back, dev[k], size, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < size; i++)
            if (back[i] != last_byte[k]) {
                fprintf(stderr, "bench_pinned: stream %d, byte %zu is %u, the batch wrote %u\n", k, i,
                        back[i], last_byte[k]);
                bad = 1;
                break;
            }
    }
    free(back);
    return bad;
}

// The preload's pinned cache figures, when it is loaded: hits and misses; -1 without it.
static void pinned_figures(long long *hits, long long *misses)
{
    int (*get_stats)(int, cci_stats *);
    *(void **)(&get_stats) = dlsym(RTLD_DEFAULT, "cci_get_stats");
    cci_stats s = {.size = sizeof s, .version = CCI_STATS_VERSION};
    *hits = *misses = -1;
    if (get_stats && get_stats(0, &s) == 0 && s.size >= offsetof(cci_stats, pinned_reserve_segment_bytes)) {
        *hits = (long long)s.pinned_hits;
        *misses = (long long)s.pinned_misses;
    }
}

int main(int argc, char **argv)
{
    int rounds = 3, expect_reuse = 0;
    const char *label = "";
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--mode") && v) {
            per_batch = !strcmp(v, "per-batch");
            if (!per_batch && strcmp(v, "upfront")) {
                fprintf(stderr, "bench_pinned: --mode per-batch or upfront\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--batches") && v) {
            batches = atol(v);
        } else if (!strcmp(argv[i], "--size") && v) {
            size = (size_t)strtoull(v, NULL, 0);
        } else if (!strcmp(argv[i], "--streams") && v) {
            nstreams = atoi(v);
        } else if (!strcmp(argv[i], "--rounds") && v) {
            rounds = atoi(v);
        } else if (!strcmp(argv[i], "--label") && v) {
            label = v;
        } else if (!strcmp(argv[i], "--expect-reuse")) {
            expect_reuse = 1;
            continue;
        } else {
            fprintf(stderr, "usage: bench_pinned --mode per-batch|upfront [--batches N] [--size BYTES] "
                            "[--streams K] [--rounds R] [--label TEXT]\n");
            return 2;
        }
        i++;
    }
    if (batches < 1 || !size || nstreams < 1 || nstreams > MAX_STREAMS || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "bench_pinned: batches >= 1, size >= 1, 1 <= streams <= %d, 1 <= rounds <= %d\n",
                MAX_STREAMS, MAX_ROUNDS);
        return 2;
    }
    for (int k = 0; k < nstreams; k++) {
        CK(cudaStreamCreateWithFlags(&streams[k], cudaStreamNonBlocking));
        CK(cudaMalloc(&dev[k], size));
    }
    double per[MAX_ROUNDS];
    int bad = 0;
    for (int r = 0; r < rounds; r++) {
        per[r] = per_batch ? run_per_batch() : run_upfront();
        bad |= check();
        printf("%s round %d: %.1f us per batch of %zu bytes (%d streams)\n", per_batch ? "per-batch" : "upfront",
               r + 1, per[r] / 1e3, size, nstreams);
    }
    double sorted[MAX_ROUNDS];
    memcpy(sorted, per, sizeof(double) * (size_t)rounds);
    double median = bu_percentile(sorted, (size_t)rounds, 0.5);
    cci_probe_print(0);
    long long hits, misses;
    pinned_figures(&hits, &misses);
    printf("{\"bench\": \"pinned\", \"label\": \"%s\", \"mode\": \"%s\", \"size\": %zu, \"streams\": %d, "
           "\"batches\": %ld, \"rounds\": %d, \"median_us_per_batch\": %.3f, \"data_ok\": %s, "
           "\"pinned_hits\": %lld, \"pinned_misses\": %lld}\n",
           label, per_batch ? "per-batch" : "upfront", size, nstreams, batches, rounds, median / 1e3,
           bad ? "false" : "true", hits, misses);
    if (expect_reuse && hits <= 0) {
        fprintf(stderr, "bench_pinned: the preload's pinned cache reused no buffer (hits %lld)\n", hits);
        bad = 1;
    }
    for (int k = 0; k < nstreams; k++) {
        CK(cudaFree(dev[k]));
        CK(cudaStreamDestroy(streams[k]));
    }
    return bad ? 1 : 0;
}
