// SPDX-License-Identifier: MIT
// Timing helpers shared by the benchmarks. Header-only so that nvcc can build bench_alloc.c for the
// GPU from this one directory, with no Meson in the way.
//
// A cached alloc+free pair costs tens of nanoseconds, below what one clock_gettime pair resolves
// reliably, so every sample times a batch of pairs and divides. Median and p99 are therefore over
// batch means: they show run-to-run jitter (preemption, a page fault, a slow path hit once per
// batch), not the spread of single calls.
#ifndef CCI_BENCH_UTIL_H
#define CCI_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline uint64_t bu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int bu_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct bu_result {
    double median_ns;  // per pair
    double p99_ns;     // per pair, over batch means
    unsigned batch;    // pairs per timed sample
    unsigned samples;
    int error;         // non-zero: the measured operation failed (its own code)
} bu_result;

// Sorts v in place.
static inline double bu_percentile(double *v, size_t n, double q)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, bu_cmp_double);
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

// One pair of the operation under test; returns 0 or an error code that stops the measurement.
typedef int (*bu_pair_fn)(void *ctx);

#define BU_MAX_SAMPLES 4000
#define BU_WARMUP_NS 20000000ull  // 20 ms of untimed pairs before each measurement (bu_measure)
#define BU_MAX_BATCH 1000u

// Times `fn` in batches: the batch grows until it lasts at least 20 us (so clock overhead is
// below 1 %) or reaches 1000 pairs; then samples are taken until `max_samples` or `budget_ns`
// of wall time is spent (at least 5 samples, so even 300 us operations get a median).
static inline bu_result bu_measure(bu_pair_fn fn, void *ctx, unsigned max_samples, uint64_t budget_ns)
{
    static double v[BU_MAX_SAMPLES];
    bu_result r = {0};
    if (max_samples > BU_MAX_SAMPLES)
        max_samples = BU_MAX_SAMPLES;
    // Warm-up, untimed, the same for every path: at least 3 pairs and BU_WARMUP_NS of wall time.
    // Three pairs took the first segment and the lazy initialisation, but not what a path only
    // pays during its first thousands of calls (first touches of per-thread logs and history
    // chunks, the CPU's clock ramping up after start-up): the first size measured had shown a
    // median twice the others' and a p99 of 2.2 us on the H100 host (docs/benchmarks.md,
    // "steady-state wall time, fence costs, merged fast path", 2026-11-23, 8f73f86). Time-bounded,
    // so a slow raw path (300 us a pair) spends no more than a fast one.
    uint64_t warm_start = bu_now_ns();
    for (int i = 0; i < 3 || bu_now_ns() - warm_start < BU_WARMUP_NS; i++)
        if ((r.error = fn(ctx)) != 0)
            return r;
    unsigned batch = 1;
    for (;;) {
        uint64_t best = UINT64_MAX;  // one slow batch (a sync, a preemption) must not end the search
        for (int rep = 0; rep < 3; rep++) {
            uint64_t t0 = bu_now_ns();
            for (unsigned i = 0; i < batch; i++)
                if ((r.error = fn(ctx)) != 0)
                    return r;
            uint64_t dt = bu_now_ns() - t0;
            best = dt < best ? dt : best;
        }
        if (best >= 20000 || batch >= BU_MAX_BATCH)
            break;
        batch = batch * 4 > BU_MAX_BATCH ? BU_MAX_BATCH : batch * 4;
    }
    uint64_t start = bu_now_ns();
    unsigned n = 0;
    while (n < max_samples && (n < 5 || bu_now_ns() - start < budget_ns)) {
        uint64_t t0 = bu_now_ns();
        for (unsigned i = 0; i < batch; i++)
            if ((r.error = fn(ctx)) != 0)
                return r;
        v[n++] = (double)(bu_now_ns() - t0) / batch;
    }
    r.batch = batch;
    r.samples = n;
    r.p99_ns = bu_percentile(v, n, 0.99);
    r.median_ns = bu_percentile(v, n, 0.5);
    return r;
}

// xorshift64: the same sequence on every machine, so every run and every allocator sees the same
// workload.
static inline uint64_t bu_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

// Log-uniform in [lo, hi]: as many requests of 512 B..1 KiB as of 32..64 MiB, which is roughly how
// tensor sizes spread in training. Integer-only so every libm gives the same sizes.
static inline size_t bu_log_uniform(uint64_t *s, size_t lo, size_t hi)
{
    for (;;) {
        unsigned lo_bits = 0, hi_bits = 0;
        while (((size_t)2 << lo_bits) <= lo)
            lo_bits++;
        while (((size_t)2 << hi_bits) <= hi)
            hi_bits++;
        unsigned b = lo_bits + (unsigned)(bu_rand(s) % (hi_bits - lo_bits + 1));
        size_t base = (size_t)1 << b;
        size_t v = base + (size_t)(bu_rand(s) % base);
        if (v >= lo && v <= hi)
            return v;
    }
}

#define BU_KiB ((size_t)1 << 10)
#define BU_MiB ((size_t)1 << 20)

// The sizes every per-size table uses, on the CPU and on the GPU alike.
static const size_t bu_sizes[] = {512, 64 * BU_KiB, BU_MiB, 20 * BU_MiB, 256 * BU_MiB};
#define BU_NSIZES (sizeof bu_sizes / sizeof bu_sizes[0])

static inline const char *bu_size_name(size_t s, char *buf, size_t len)
{
    if (s >= BU_MiB && s % BU_MiB == 0)
        snprintf(buf, len, "%zu MiB", s / BU_MiB);
    else if (s >= BU_KiB && s % BU_KiB == 0)
        snprintf(buf, len, "%zu KiB", s / BU_KiB);
    else
        snprintf(buf, len, "%zu B", s);
    return buf;
}

// The mixed workload: 256 slots; each op picks a slot at random and frees it when occupied or
// fills it with a log-uniform 512 B..64 MiB request when empty.
#define BU_MIXED_SLOTS 256
#define BU_MIXED_OPS 20000
#define BU_MIXED_LO 512
#define BU_MIXED_HI (64 * BU_MiB)

#endif
