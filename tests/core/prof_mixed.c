// SPDX-License-Identifier: MIT
// The mixed workload of bench_core (the same sequence: 256 slots, log-uniform 512 B .. 64 MiB) for
// a profiler: a fixed number of operations, the per-thread caches on or off, and the free mode the
// hooks would use (now: immediate reuse or cudaFreeAsync; fenced: cudaFree beside a non-blocking
// stream; deferred: cudaFree without streams). Run it twice with different --ops under callgrind
// and subtract: the cost of one more operation, start-up excluded.
//
// With --fingerprint N it also prints a hash of every address handed out and of the whole
// statistics struct read every N operations: two builds that take the same decisions and keep the
// same statistics (peaks and running totals included) print the same hash.
//
// With --sizes N the requests take only N sizes (drawn once from the same distribution): the
// thread caches then serve most allocations, where on the mixed workload they almost never do.
//
// With --stats-version 3 the hash covers the statistics as a version-3 caller reads them (before
// the driver calls' costs were appended), so a build of either version can be compared.
//
//   prof_mixed [--ops N] [--thread-cache 0|1] [--mode now|fenced|deferred] [--fingerprint N]
//              [--sizes N] [--stats-version 3|4]
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocator.h"
#include "../bench/bench_util.h"

// FNV-1a over `n` bytes, continued from `h`.
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

static int parse_mode(const char *s, cci_free_mode *mode)
{
    static const struct { const char *name; cci_free_mode mode; } modes[] = {
        {"now", CCI_FREE_NOW}, {"fenced", CCI_FREE_FENCED}, {"deferred", CCI_FREE_DEFERRED}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (!strcmp(s, modes[i].name)) {
            *mode = modes[i].mode;
            return 0;
        }
    return -1;
}

int main(int argc, char **argv)
{
    long ops = BU_MIXED_OPS;
    int tc = 1;
    cci_free_mode mode = CCI_FREE_NOW;
    long every = 0, nsizes = 0;
    size_t stats_bytes = sizeof(cci_stats);
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(argv[i], "--ops") && (ops = atol(v)) > 0) {
            i++;
        } else if (v && !strcmp(argv[i], "--thread-cache")) {
            tc = atoi(argv[++i]) != 0;
        } else if (v && !strcmp(argv[i], "--mode") && parse_mode(v, &mode) == 0) {
            i++;
        } else if (v && !strcmp(argv[i], "--fingerprint") && (every = atol(v)) > 0) {
            i++;
        } else if (v && !strcmp(argv[i], "--sizes") && (nsizes = atol(v)) > 0 && nsizes <= 64) {
            i++;
        } else if (v && !strcmp(argv[i], "--stats-version") && (!strcmp(v, "3") || !strcmp(v, "4"))) {
            stats_bytes = !strcmp(v, "3") ? offsetof(cci_stats, fence_record_calls) : sizeof(cci_stats);
            i++;
        } else {
            fprintf(stderr, "usage: prof_mixed [--ops N] [--thread-cache 0|1] [--mode now|fenced|deferred] "
                            "[--fingerprint N] [--sizes 1..64] [--stats-version 3|4]\n");
            return 2;
        }
    }
    cci_sim_device *sim = cci_sim_create((size_t)1 << 40);
    cci_config cfg;
    cci_config_default(&cfg);
    cci_allocator *a = sim ? cci_allocator_create(0, &cfg, cci_sim_backend(sim)) : NULL;
    if (!a) {
        fprintf(stderr, "prof_mixed: out of host memory\n");
        return 1;
    }
    cci_allocator_thread_cache(a, tc);
    static uintptr_t slot[BU_MIXED_SLOTS];
    uint64_t rng = 0x9e3779b97f4a7c15ull;  // bench_core's sequence
    size_t sizes[64];
    for (long i = 0; i < nsizes; i++)
        sizes[i] = bu_log_uniform(&rng, BU_MIXED_LO, BU_MIXED_HI);
    uint64_t hash = 0xcbf29ce484222325ull;
    uint64_t t0 = bu_now_ns();
    for (long op = 0; op < ops; op++) {
        unsigned k = (unsigned)(bu_rand(&rng) % BU_MIXED_SLOTS);
        int rc;
        if (slot[k]) {
            rc = cci_free(a, slot[k], 0, mode);
            slot[k] = 0;
        } else {
            size_t n = nsizes ? sizes[bu_rand(&rng) % (uint64_t)nsizes] : bu_log_uniform(&rng, BU_MIXED_LO, BU_MIXED_HI);
            rc = cci_malloc(a, n, 0, &slot[k]);
            if (every)
                hash = fnv(hash, &slot[k], sizeof slot[k]);
        }
        if (rc != CCI_OK) {
            fprintf(stderr, "prof_mixed: allocator error %d at op %ld\n", rc, op);
            return 1;
        }
        if (every && (op + 1) % every == 0) {
            cci_stats s = {.size = sizeof s};
            cci_alloc_stats(a, &s);
            if (stats_bytes < sizeof(cci_stats)) {  // the header a version-3 library writes
                s.size = (uint32_t)stats_bytes;
                s.version = 3;
            }
            hash = fnv(hash, &s, stats_bytes);
        }
    }
    double ns = (double)(bu_now_ns() - t0) / (double)ops;
    cci_stats s = {.size = sizeof s};
    cci_alloc_stats(a, &s);
    printf("prof_mixed: %ld ops, %.1f ns/op, peak reserved %lld, peak allocated %lld, device allocations %llu\n",
           ops, ns, (long long)s.reserved_bytes[CCI_POOL_ALL].peak, (long long)s.allocated_bytes[CCI_POOL_ALL].peak,
           (unsigned long long)s.num_device_alloc);
    if (every)
        printf("prof_mixed: fingerprint %016llx\n", (unsigned long long)hash);
    cci_allocator_destroy(a, 1);
    cci_sim_destroy(sim);
    return 0;
}
