// SPDX-License-Identifier: MIT
// Replay speed: loads a trace once (any format ccreplay reads) and replays it repeatedly under
// the default configuration on one core, printing events per second. Target: >= 5 M events/s.
//
// usage: bench_replay TRACE [REPEATS]   (exit 77 when TRACE is missing)
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "replay.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 2 || access(argv[1], R_OK) != 0) {
        printf("SKIP: no trace to replay\n");
        return 77;
    }
    int reps = argc > 2 ? atoi(argv[2]) : 30;
    if (reps < 1 || reps > 1000)
        reps = 30;
    cci_trace t;
    char err[512];
    double l0 = now_s();
    if (cci_trace_load(argv[1], &t, err, sizeof err) != 0) {
        fprintf(stderr, "bench_replay: %s\n", err);
        return 1;
    }
    double load = now_s() - l0;
    cci_config cfg;
    cci_config_default(&cfg);
    double *rate = calloc((size_t)reps, sizeof *rate);
    uint64_t peak = 0;
    for (int i = 0; i < reps; i++) {
        cci_replay_result r;
        double t0 = now_s();
        if (cci_replay(&t, &cfg, 0, &r) != 0)
            return 1;
        rate[i] = (double)r.events / (now_s() - t0) / 1e6;
        peak = r.peak_reserved;
    }
    qsort(rate, (size_t)reps, sizeof *rate, cmp);
    printf("%s (%s): %zu events, loaded in %.3f s, peak reserved %.1f MiB\n", argv[1], t.format, t.n, load,
           (double)peak / 1048576.0);
    printf("replay: median %.1f M events/s, best %.1f, worst %.1f over %d runs (target >= 5: %s)\n",
           rate[reps / 2], rate[reps - 1], rate[0], reps, rate[reps / 2] >= 5.0 ? "ok" : "MISSED");
    free(rate);
    cci_trace_free(&t);
    return 0;
}
