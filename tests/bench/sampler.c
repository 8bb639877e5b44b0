// SPDX-License-Identifier: MIT
// A sampling profiler to preload where `perf` is not available (the GPU hosts: a gVisor sandbox
// with no perf binary and no hardware events), so that "profile before optimising" holds there too.
//
//   SAMPLER_OUT=FILE [SAMPLER_HZ=N] LD_PRELOAD=libccsampler.so[:libccinterpose.so] PROGRAM...
//   tests/bench/sample_report.py FILE [--lib PATH...]
//
// Every 1/SAMPLER_HZ seconds of the process's CPU time (ITIMER_PROF, default 2000 Hz; the
// sandbox delivers fewer) the interrupted thread's instruction pointer is kept; at exit, one line
// "COUNT MODULE OFFSET" per distinct address (the offset into the module's file, what addr2line
// takes). Leaf addresses only: inlined callers come back through addr2line -i. Without SAMPLER_OUT
// it does nothing at all.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <ucontext.h>

#define MAX_SAMPLES (1u << 20)
#define MAX_MAPS 4096

static uint64_t ips[MAX_SAMPLES];
static atomic_uint nsamples;
static int on;

static uint64_t interrupted_ip(const ucontext_t *uc)
{
#if defined(__x86_64__)
    return (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    return (uint64_t)uc->uc_mcontext.pc;
#else
    (void)uc;
    return 0;
#endif
}

// Async-signal-safe: one atomic add and one store.
static void on_prof(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)si;
    unsigned i = atomic_fetch_add_explicit(&nsamples, 1, memory_order_relaxed);
    if (i < MAX_SAMPLES)
        ips[i] = interrupted_ip(ctx);
}

__attribute__((constructor)) static void sampler_start(void)
{
    const char *out = getenv("SAMPLER_OUT"), *hz_s = getenv("SAMPLER_HZ");
    if (!out || !*out)
        return;
    long hz = hz_s ? strtol(hz_s, NULL, 10) : 2000;
    if (hz < 1 || hz > 100000) {
        fprintf(stderr, "sampler: SAMPLER_HZ=%s: expected 1 to 100000; not sampling\n", hz_s);
        return;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_prof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    struct itimerval it = {{0, 1000000 / hz}, {0, 1000000 / hz}};
    if (sigaction(SIGPROF, &sa, NULL) != 0 || setitimer(ITIMER_PROF, &it, NULL) != 0) {
        perror("sampler: SIGPROF timer");
        return;
    }
    on = 1;
}

typedef struct {
    uint64_t lo, hi, off;
    char path[256];
} mapping;

static int by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

__attribute__((destructor)) static void sampler_stop(void)
{
    if (!on)
        return;
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    signal(SIGPROF, SIG_IGN);
    on = 0;
    unsigned n = atomic_load(&nsamples);
    if (n > MAX_SAMPLES)
        n = MAX_SAMPLES;
    static mapping maps[MAX_MAPS];
    int nmaps = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    while (f && nmaps < MAX_MAPS && fgets(line, sizeof line, f)) {
        mapping *m = &maps[nmaps];
        char perms[8];
        unsigned long lo, hi, off;
        strcpy(m->path, "?");
        if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %255s", &lo, &hi, perms, &off, m->path) >= 4 && perms[2] == 'x') {
            m->lo = lo, m->hi = hi, m->off = off;
            nmaps++;
        }
    }
    if (f)
        fclose(f);
    qsort(ips, n, sizeof ips[0], by_value);
    FILE *o = fopen(getenv("SAMPLER_OUT"), "w");
    if (!o) {
        perror("sampler: SAMPLER_OUT");
        return;
    }
    fprintf(o, "# sampler: %u samples\n", n);
    for (unsigned i = 0, j; i < n; i = j) {
        for (j = i; j < n && ips[j] == ips[i]; j++)
            ;
        const mapping *m = NULL;
        for (int k = 0; k < nmaps && !m; k++)
            if (ips[i] >= maps[k].lo && ips[i] < maps[k].hi)
                m = &maps[k];
        fprintf(o, "%u %s 0x%llx\n", j - i, m ? m->path : "?",
                (unsigned long long)(m ? ips[i] - m->lo + m->off : ips[i]));
    }
    fclose(o);
}
