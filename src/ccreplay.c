// SPDX-License-Identifier: MIT
// ccreplay: replay a recorded allocation trace through the core under any configuration.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "replay.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: ccreplay [--conf STR] [--capacity BYTES[K|M|G]] [--json] TRACE\n"
               "  TRACE    a cci text trace (scripts/snapshot2trace.py makes one from a PyTorch snapshot)\n"
               "  --conf   allocator configuration, CCI_ALLOC_CONF grammar (default: PyTorch's defaults)\n"
               "  --capacity  simulated device size; allocations past it count as OOMs (default: unlimited)\n"
               "  --json   print one JSON object instead of the table\n");
}

static int parse_bytes(const char *s, size_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *s == '-')
        return -1;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    else if (*end)
        return -1;
    if (shift && end[1])
        return -1;
    if (v > (SIZE_MAX >> shift))
        return -1;
    *out = (size_t)v << shift;
    return 0;
}

static double mib(uint64_t b) { return (double)b / 1048576.0; }

int main(int argc, char **argv)
{
    const char *conf = "", *path = NULL;
    size_t capacity = 0;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--conf") && i + 1 < argc) {
            conf = argv[++i];
        } else if (!strcmp(argv[i], "--capacity") && i + 1 < argc) {
            if (parse_bytes(argv[++i], &capacity) != 0) {
                fprintf(stderr, "ccreplay: --capacity: '%s' is not a size (expected e.g. 80G, 512M, 1048576)\n",
                        argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' || path) {
            fprintf(stderr, "ccreplay: unexpected argument '%s' (see ccreplay --help)\n", argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    cci_config cfg;
    cci_config_default(&cfg);
    char err[512];
    if (cci_config_parse(&cfg, conf, "--conf", err, sizeof err, NULL, NULL) != 0) {
        fprintf(stderr, "ccreplay: %s\n", err);
        return 2;
    }
    cci_trace t;
    if (cci_trace_read_text(path, &t, err, sizeof err) != 0) {
        fprintf(stderr, "ccreplay: %s\n", err);
        return 2;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cci_replay_result r;
    int rc = cci_replay(&t, &cfg, capacity, &r);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cci_trace_free(&t);
    if (rc != 0) {
        fprintf(stderr, "ccreplay: out of host memory during the replay\n");
        return 1;
    }
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    double ratio = r.peak_allocated ? (double)r.peak_reserved / (double)r.peak_allocated : 0;
    if (json) {
        printf("{\"events\": %llu, \"peak_allocated_bytes\": %llu, \"peak_reserved_bytes\": %llu, "
               "\"reserved_to_allocated\": %.4f, \"num_device_alloc\": %llu, \"num_ooms\": %llu, "
               "\"num_alloc_retries\": %llu, \"unmatched_frees\": %llu, \"replay_seconds\": %.6f}\n",
               (unsigned long long)r.events, (unsigned long long)r.peak_allocated,
               (unsigned long long)r.peak_reserved, ratio, (unsigned long long)r.num_device_alloc,
               (unsigned long long)r.num_ooms, (unsigned long long)r.num_alloc_retries,
               (unsigned long long)r.unmatched_frees, secs);
    } else {
        printf("trace               %s\n", path);
        printf("configuration       %s\n", *conf ? conf : "(PyTorch defaults)");
        printf("events              %llu (%.1f M events/s)\n", (unsigned long long)r.events,
               secs > 0 ? (double)r.events / secs / 1e6 : 0.0);
        printf("peak allocated      %.1f MiB\n", mib(r.peak_allocated));
        printf("peak reserved       %.1f MiB\n", mib(r.peak_reserved));
        printf("reserved/allocated  %.3f\n", ratio);
        printf("device allocations  %llu\n", (unsigned long long)r.num_device_alloc);
        printf("OOMs                %llu\n", (unsigned long long)r.num_ooms);
        printf("alloc retries       %llu\n", (unsigned long long)r.num_alloc_retries);
    }
    return 0;
}
