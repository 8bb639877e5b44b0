// SPDX-License-Identifier: MIT
#include "workloads.h"

#include <stdio.h>
#include <string.h>

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)

const char *const workload_names[] = {"seedfrag", "mixed", "misses", NULL};

static int setup(workload *w, int device, size_t capacity, const char *conf)
{
    memset(w, 0, sizeof *w);
    cci_config cfg;
    cci_config_default(&cfg);
    // The workloads show fragmentation of ordinary segments (the goldens' figures): the default
    // would be compact segments on the simulated device. A conf may still name another mode.
    cfg.compact_segments = 0;
    char err[256];
    if (conf && cci_config_parse(&cfg, conf, "test", err, sizeof err, NULL, NULL) != 0) {
        fprintf(stderr, "workload config: %s\n", err);
        return -1;
    }
    w->sim = cci_sim_create(capacity);
    w->a = w->sim ? cci_allocator_create(device, &cfg, cci_sim_backend(w->sim)) : NULL;
    w->tl = cci_report_timeline_create(0, CCI_TIMELINE_CLOCK_EVENTS);
    if (!w->a || !w->tl || cci_report_timeline_attach(w->tl, w->a) != 0) {
        fprintf(stderr, "workload: setup failed\n");
        return -1;
    }
    cci_allocator_track_peak(w->a, 1);
    return 0;
}

static int must_alloc(workload *w, size_t size, uintptr_t *p)
{
    if (cci_malloc(w->a, size, 0, p) != CCI_OK) {
        fprintf(stderr, "workload: allocation of %zu bytes failed\n", size);
        return -1;
    }
    return 0;
}

// Ten 4 MiB blocks, every other one freed, then one 64 MiB request: the holes cannot serve it.
static int seedfrag(workload *w, int device)
{
    if (setup(w, device, (size_t)1 << 30, NULL) != 0)
        return -1;
    uintptr_t p[10], big;
    for (int i = 0; i < 10; i++)
        if (must_alloc(w, 4 * MiB, &p[i]) != 0)
            return -1;
    for (int i = 0; i < 10; i += 2)
        cci_free(w->a, p[i], 0, CCI_FREE_NOW);
    if (must_alloc(w, 64 * MiB, &big) != 0)
        return -1;
    cci_free(w->a, big, 0, CCI_FREE_NOW);
    return 0;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

// Small and large requests interleaved under max_split_size_mb:32, with some frees deferred to
// another stream, ending with half of the blocks still live.
static int mixed(workload *w, int device)
{
    if (setup(w, device, (size_t)4 << 30, "max_split_size_mb:32") != 0)
        return -1;
    rng = 0x2545F4914F6CDD1Dull;
    enum { LIVE = 48 };
    uintptr_t live[LIVE];
    size_t n = 0;
    for (int op = 0; op < 600; op++) {
        if (n == LIVE || (n > 0 && rnd() % 5 < 2)) {
            size_t i = (size_t)(rnd() % n);
            cci_free(w->a, live[i], rnd() % 8 == 0 ? 7 : 0, CCI_FREE_NOW);
            live[i] = live[--n];
            continue;
        }
        size_t size = rnd() % 10 < 7 ? 512 + (size_t)(rnd() % (1 * MiB - 512))
                                     : 1 * MiB + (size_t)(rnd() % (96 * MiB));
        if (must_alloc(w, size, &live[n]) != 0)
            return -1;
        n++;
    }
    while (n > LIVE / 2)
        cci_free(w->a, live[--n], 0, CCI_FREE_NOW);
    return 0;
}

// Three 64 MiB blocks are freed, then split by 40 MiB requests: 72 MiB stays free in 24 MiB
// pieces, so the next 64 MiB request needs a new segment (a fragmentation miss), and a 100 MiB
// request then runs out of the 320 MiB device.
static int misses(workload *w, int device)
{
    if (setup(w, device, 320 * MiB, NULL) != 0)
        return -1;
    uintptr_t big[3], mid[3], again, fail;
    for (int i = 0; i < 3; i++)
        if (must_alloc(w, 64 * MiB, &big[i]) != 0)
            return -1;
    for (int i = 0; i < 3; i++)
        cci_free(w->a, big[i], 0, CCI_FREE_NOW);
    for (int i = 0; i < 3; i++)
        if (must_alloc(w, 40 * MiB, &mid[i]) != 0)
            return -1;
    if (must_alloc(w, 64 * MiB, &again) != 0)
        return -1;
    w->oom_request = 100 * MiB;
    if (cci_malloc(w->a, w->oom_request, 0, &fail) != CCI_EOOM) {
        fprintf(stderr, "workload misses: the 100 MiB request should fail\n");
        return -1;
    }
    return 0;
}

int workload_run(const char *name, int device, workload *w)
{
    memset(w, 0, sizeof *w);
    if (strcmp(name, "seedfrag") == 0)
        return seedfrag(w, device);
    if (strcmp(name, "mixed") == 0)
        return mixed(w, device);
    if (strcmp(name, "misses") == 0)
        return misses(w, device);
    fprintf(stderr, "unknown workload '%s'\n", name);
    return -1;
}

void workload_free(workload *w)
{
    if (w->a)
        cci_allocator_destroy(w->a, 1);
    cci_report_timeline_destroy(w->tl);
    cci_sim_destroy(w->sim);
    memset(w, 0, sizeof *w);
}

void workload_fix_process(cci_report_snapshot *s)
{
    s->pid = 4242;
    s->rank = 0;
    snprintf(s->program, sizeof s->program, "./train");
    snprintf(s->host, sizeof s->host, "testhost");
    snprintf(s->time_utc, sizeof s->time_utc, "2026-01-01T00:00:00Z");
}
