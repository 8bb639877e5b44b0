// SPDX-License-Identifier: MIT
// Allocation cost as a CUDA program sees it, through the runtime API only, so the same source runs
// raw, under the preload, on the H100 (built with nvcc) and on the fake CUDA (built with gcc).
//
//   bench_alloc --api malloc|async [--quick] [--label TEXT]
//
// malloc: cudaMalloc + cudaFree.  async: cudaMallocAsync + cudaFreeAsync on one non-blocking stream,
// the device's default pool given an unlimited release threshold so the driver keeps its cache
// (the fairest anchor: the pool never hands memory back between pairs).
// Prints a table, then one JSON line (starting with '{') for scripts to collect.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // RTLD_DEFAULT in cci_probe.h
#endif
#include <cuda_runtime.h>
#include <string.h>

#include "bench_util.h"
#include "cci_probe.h"

static int use_async;
static cudaStream_t stream;

static cudaError_t dev_alloc(void **p, size_t n)
{
    return use_async ? cudaMallocAsync(p, n, stream) : cudaMalloc(p, n);
}

static cudaError_t dev_free(void *p)
{
    return use_async ? cudaFreeAsync(p, stream) : cudaFree(p);
}

static int pair(void *ctx)
{
    size_t n = *(size_t *)ctx;
    void *p;
    cudaError_t rc = dev_alloc(&p, n);
    if (rc == cudaSuccess)
        rc = dev_free(p);
    return (int)rc;
}

static int setup(void)
{
    cudaError_t rc = cudaFree(0);  // create the context outside every timed region
    if (rc == cudaSuccess && use_async)
        rc = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
#ifndef FAKE_CUDA_RUNTIME_H
    if (rc == cudaSuccess && use_async) {
        int dev = 0;
        cudaMemPool_t pool;
        uint64_t threshold = UINT64_MAX;
        rc = cudaGetDevice(&dev);
        if (rc == cudaSuccess)
            rc = cudaDeviceGetDefaultMemPool(&pool, dev);
        if (rc == cudaSuccess)
            rc = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
    }
#endif
    if (rc != cudaSuccess)
        fprintf(stderr, "bench_alloc: setup failed: %s (%d)\n", cudaGetErrorString(rc), (int)rc);
    return rc == cudaSuccess ? 0 : 1;
}

// One pass of the mixed workload; returns its wall time in ns, 0 on an error.
static uint64_t mixed_pass(void **slot, uint64_t *rng)
{
    uint64_t t0 = bu_now_ns();
    for (int op = 0; op < BU_MIXED_OPS; op++) {
        unsigned k = (unsigned)(bu_rand(rng) % BU_MIXED_SLOTS);
        cudaError_t rc;
        if (slot[k]) {
            rc = dev_free(slot[k]);
            slot[k] = NULL;
        } else {
            rc = dev_alloc(&slot[k], bu_log_uniform(rng, BU_MIXED_LO, BU_MIXED_HI));
        }
        if (rc != cudaSuccess) {
            fprintf(stderr, "bench_alloc: mixed workload, op %d: %s (%d)\n", op, cudaGetErrorString(rc),
                    (int)rc);
            return 0;
        }
    }
    if (use_async && cudaStreamSynchronize(stream) != cudaSuccess)
        return 0;
    return bu_now_ns() - t0;
}

int main(int argc, char **argv)
{
    const char *label = "";
    uint64_t budget = 300000000ull;  // ns per size
    int passes = 3;                   // mixed: the first is cold, the rest warm
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--api") && i + 1 < argc) {
            i++;
            use_async = !strcmp(argv[i], "async");
            if (!use_async && strcmp(argv[i], "malloc")) {
                fprintf(stderr, "bench_alloc: --api takes malloc or async\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--quick")) {
            budget = 30000000ull;
            passes = 2;
        } else if (!strcmp(argv[i], "--label") && i + 1 < argc) {
            label = argv[++i];
        } else {
            fprintf(stderr, "usage: bench_alloc --api malloc|async [--quick] [--label TEXT]\n");
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (setup())
        return 1;
    const char *api = use_async ? "cudaMallocAsync+cudaFreeAsync" : "cudaMalloc+cudaFree";
    printf("%s %s, ns per pair\n%-10s %12s %12s %7s %8s\n", label, api, "size", "median", "p99", "batch",
           "samples");
    bu_result r[BU_NSIZES];
    for (size_t i = 0; i < BU_NSIZES; i++) {
        size_t n = bu_sizes[i];
        r[i] = bu_measure(pair, &n, BU_MAX_SAMPLES, budget);
        if (r[i].error) {
            fprintf(stderr, "bench_alloc: %zu bytes: %s (%d)\n", n, cudaGetErrorString((cudaError_t)r[i].error),
                    r[i].error);
            return 1;
        }
        char name[32];
        printf("%-10s %12.1f %12.1f %7u %8u\n", bu_size_name(n, name, sizeof name), r[i].median_ns,
               r[i].p99_ns, r[i].batch, r[i].samples);
    }

    static void *slot[BU_MIXED_SLOTS];
    uint64_t rng = 0x9e3779b97f4a7c15ull;  // the same sequence as bench_core's mixed workload
    double cold = 0, warm = 0;
    for (int p = 0; p < passes; p++) {
        uint64_t dt = mixed_pass(slot, &rng);
        if (!dt)
            return 1;
        double per_op = (double)dt / BU_MIXED_OPS;
        if (p == 0)
            cold = per_op;
        else if (warm == 0 || per_op < warm)
            warm = per_op;  // best warm pass: noise only ever adds time
    }
    for (int k = 0; k < BU_MIXED_SLOTS; k++)
        if (slot[k] && dev_free(slot[k]) != cudaSuccess)
            return 1;
    printf("mixed (%d slots, %d ops, 512 B..64 MiB): first pass %.1f ns/op, best later pass %.1f ns/op\n",
           BU_MIXED_SLOTS, BU_MIXED_OPS, cold, warm);
    cci_probe_print(0);

    printf("{\"label\": \"%s\", \"api\": \"%s\", \"sizes\": [", label, use_async ? "async" : "malloc");
    for (size_t i = 0; i < BU_NSIZES; i++)
        printf("%s{\"bytes\": %zu, \"median_ns\": %.1f, \"p99_ns\": %.1f, \"batch\": %u}", i ? ", " : "",
               bu_sizes[i], r[i].median_ns, r[i].p99_ns, r[i].batch);
    printf("], \"mixed_cold_ns_per_op\": %.1f, \"mixed_warm_ns_per_op\": %.1f}\n", cold, warm);
    if (use_async && cudaStreamDestroy(stream) != cudaSuccess)
        return 1;
    return 0;
}
