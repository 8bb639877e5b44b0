// SPDX-License-Identifier: MIT
// Many threads allocate and free random sizes (512 B ... 8 MiB) through the hooks, each block
// filled with its own pattern and verified before it is freed: any block handed to two owners,
// or reused while still live, shows up as a broken pattern. Some threads use the stream-ordered
// entry points on a stream of their own.
#include <pthread.h>

#include "ptest.h"

#define THREADS 8
#define LIVE_MAX 16

typedef struct worker {
    int id;
    long iters;
    long corrupt, ops, failures;
} worker;

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

// Log-uniform between 512 B and 8 MiB, so small and large pools both see traffic.
static size_t random_size(uint64_t *s)
{
    unsigned shift = 9 + (unsigned)(rnd(s) % 14);  // 2^9 .. 2^22
    size_t base = (size_t)1 << shift;
    return base + (size_t)(rnd(s) % base);          // up to 2^23 = 8 MiB
}

static void *run(void *arg)
{
    worker *w = arg;
    uint64_t seed = 0x1234567ull * (uint64_t)(w->id + 1);
    int async = w->id % 3 == 2;
    cudaStream_t s = NULL;
    if (async && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        w->failures++;
    struct { void *p; size_t n; uint64_t tag; } live[LIVE_MAX];
    int nlive = 0;
    for (long i = 0; i < w->iters; i++) {
        int do_alloc = nlive == 0 || (nlive < LIVE_MAX && rnd(&seed) % 2);
        if (do_alloc) {
            size_t n = random_size(&seed);
            void *p;
            cudaError_t e = async ? cudaMallocAsync(&p, n, s) : cudaMalloc(&p, n);
            if (e != cudaSuccess) {
                w->failures++;
                continue;
            }
            uint64_t tag = ((uint64_t)w->id << 48) ^ (uint64_t)i;
            ptest_fill(p, n, tag);
            live[nlive].p = p;
            live[nlive].n = n;
            live[nlive].tag = tag;
            nlive++;
        } else {
            int k = (int)(rnd(&seed) % (uint64_t)nlive);
            if (!ptest_verify(live[k].p, live[k].n, live[k].tag))
                w->corrupt++;
            cudaError_t e = async ? cudaFreeAsync(live[k].p, s) : cudaFree(live[k].p);
            if (e != cudaSuccess)
                w->failures++;
            live[k] = live[--nlive];
        }
        w->ops++;
    }
    while (nlive > 0) {
        nlive--;
        if (!ptest_verify(live[nlive].p, live[nlive].n, live[nlive].tag))
            w->corrupt++;
        if ((async ? cudaFreeAsync(live[nlive].p, s) : cudaFree(live[nlive].p)) != cudaSuccess)
            w->failures++;
    }
    if (async) {
        cudaStreamSynchronize(s);
        cudaStreamDestroy(s);
    }
    return NULL;
}

int main(void)
{
    ptest_api api = ptest_get_api();
    CHECK(api.is_active() == 1, "the preload is active");
    long iters = ptest_scale(1000);
    worker w[THREADS];
    pthread_t t[THREADS];
    fakecuda_reset_counters();
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.id = i, .iters = iters};
        pthread_create(&t[i], NULL, run, &w[i]);
    }
    long corrupt = 0, ops = 0, failures = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        corrupt += w[i].corrupt;
        ops += w[i].ops;
        failures += w[i].failures;
    }
    cci_stats st = ptest_stats(&api, 0);
    printf("%d threads, %ld operations, %llu device allocations, %lld segments held, peak reserved "
           "%lld MiB\n", THREADS, ops, fakecuda_device_allocs(),
           (long long)st.segment[CCI_POOL_ALL].current,
           (long long)(st.reserved_bytes[CCI_POOL_ALL].peak >> 20));
    CHECK(failures == 0, "no CUDA call failed (%ld failures)", failures);
    CHECK(corrupt == 0, "every block kept its pattern until its free (%ld corrupt)", corrupt);
    CHECK(st.allocation[CCI_POOL_ALL].current == 0 && st.allocated_bytes[CCI_POOL_ALL].current == 0,
          "statistics return to zero allocated blocks and bytes");
    CHECK(fakecuda_device_allocs() < (unsigned long long)ops / 10,
          "the cache absorbed most allocations (%llu device allocations for %ld operations)",
          fakecuda_device_allocs(), ops);
    return 0;
}
