// SPDX-License-Identifier: MIT
// Cost of a cached cudaMalloc+cudaFree pair through the hooks, next to the fake's own calls.
// A benchmark, not a test: it prints and never fails on a number.
#include <time.h>

#include "ptest.h"

typedef cudaError_t (*malloc_fn)(void **, size_t);
typedef cudaError_t (*free_fn)(void *);

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static malloc_fn real_malloc;
static free_fn real_free;
static void *p;
static int dev;

static void hooked_pair(void) { cudaMalloc(&p, 4096); cudaFree(p); }
static void async_pair(void) { cudaMallocAsync(&p, 4096, 0); cudaFreeAsync(p, 0); }
static void fake_pair(void) { real_malloc(&p, 4096); real_free(p); }
static void get_device(void) { cudaGetDevice(&dev); }

// Median over 21 runs of n calls, in ns per call.
static double median_ns(long n, void (*body)(void))
{
    double runs[21];
    for (int r = 0; r < 21; r++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++)
            body();
        runs[r] = (now_ns() - t0) / (double)n;
    }
    qsort(runs, 21, sizeof runs[0], cmp);
    return runs[10];
}

int main(void)
{
    ptest_api api = ptest_get_api();
    printf("configuration: %s\n", api.is_active() ? api.config_string() : "(inactive)");
    // The fake driver's own functions (same ABI shape): the fake libcudart's cudaMalloc would be
    // served by the preload's driver level and would not show the uncached cost.
    memcpy(&real_malloc, &(void *){ptest_real_driver("cuMemAlloc_v2")}, sizeof real_malloc);
    memcpy(&real_free, &(void *){ptest_real_driver("cuMemFree_v2")}, sizeof real_free);
    CUDA_OK(cudaFree(NULL));  // the runtime makes the primary context current, as they need
    CUDA_OK(real_malloc(&p, 4096));
    CUDA_OK(real_free(p));
    long n = ptest_scale(100000);
    double hooked = median_ns(n, hooked_pair);
    double async = median_ns(n, async_pair);
    double fake = median_ns(2000, fake_pair);
    double getdev = median_ns(n, get_device);
    printf("hooked cudaMalloc+cudaFree (4 KiB, cached):   %8.1f ns/pair\n", hooked);
    printf("hooked cudaMallocAsync+cudaFreeAsync (same):  %8.1f ns/pair\n", async);
    printf("fake cuMemAlloc_v2+cuMemFree_v2, no cache:    %8.1f ns/pair\n", fake);
    printf("fake cudaGetDevice (part of every hooked malloc): %5.1f ns\n", getdev);
    // Run it again with CCI_STACKS=8 (and unset) to see the call-site cost: the pairs above are
    // called from a few frames deep, so 8 frames are captured per allocation.
    printf("CCI_STACKS=%s\n", getenv("CCI_STACKS") ? getenv("CCI_STACKS") : "(unset)");
    return 0;
}
