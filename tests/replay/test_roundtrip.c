// SPDX-License-Identifier: MIT
// Record -> replay round trip: allocators on the simulated device run a fixed random workload
// (several threads, devices and streams, deferred and cross-stream frees, OOMs at a capacity)
// with the recorder attached; replaying the binary trace under the same configuration and
// capacity must give exactly the live peaks, device allocations and OOM counts.
//
// usage: test_roundtrip DIR   (a scratch directory for the traces)
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "allocator.h"
#include "replay.h"
#include "trace_record.h"

#define MiB ((size_t)1 << 20)
#define MAX_DEV 2
#define MAX_LIVE 400

static int failures;

#define EXPECT_EQ(name, what, got, want)                                                          \
    do {                                                                                          \
        if ((unsigned long long)(got) != (unsigned long long)(want)) {                            \
            fprintf(stderr, "FAIL %s: %s: replay %llu, live %llu\n", name, what,                  \
                    (unsigned long long)(got), (unsigned long long)(want));                       \
            failures++;                                                                           \
        }                                                                                         \
    } while (0)

typedef struct scenario {
    const char *name;
    const char *conf;
    size_t capacity;    // per device; 0 = unlimited
    int threads, devices, ops;
    int cross_stream;   // percent of frees on another stream (always deferred)
    int deferred;       // percent of frees with CCI_FREE_DEFERRED (a cudaFree)
} scenario;

static const scenario scenarios[] = {
    {"single-thread default", "", 0, 1, 1, 20000, 10, 20},
    // Several threads on ordinary segments: compact segments (the default) drop the lock inside an
    // allocation when they move pages behind a fence or retry after an OOM, so which other threads'
    // events fall in between is timing, not in the trace (as for deferred frees below).
    {"4 threads, 2 devices, split+roundup", "compact_segments:False,max_split_size_mb:128,roundup_power2_divisions:4",
     0, 4, 2, 20000, 10, 20},
    {"OOMs at 3 GiB, immediate frees", "compact_segments:False,max_split_size_mb:256", 3072 * MiB, 2, 1, 20000, 0, 0},
    {"OOMs at 3 GiB, gc and fraction", "garbage_collection_threshold:0.7,per_process_memory_fraction:0.9",
     3072 * MiB, 1, 1, 20000, 0, 0},
    // One thread: running out of memory with deferred frees synchronises the device with the lock
    // dropped, in the middle of one allocation; another thread's events recorded meanwhile come
    // before that allocation in the trace, and no event-by-event replay can split an allocation
    // in two. With three threads this scenario failed about one run in six (before 2026-11-23's
    // changes as well); the threads are covered by the scenario without a capacity above.
    {"OOMs at 4 GiB, deferred frees", "", 4096 * MiB, 1, 2, 20000, 10, 20},
};

typedef struct worker {
    const scenario *sc;
    cci_allocator **allocs;
    uint64_t seed;
} worker;

typedef struct live_block {
    int dev;
    uintptr_t p;
    uint64_t stream;
} live_block;

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static size_t pick_size(uint64_t *s)
{
    unsigned r = (unsigned)(rnd(s) % 100);
    if (r < 60)
        return 1 + rnd(s) % MiB;                  // small pool
    if (r < 90)
        return MiB + rnd(s) % (9 * MiB);          // 20 MiB segments
    return 10 * MiB + rnd(s) % (150 * MiB);       // large, own segments
}

static void *run_worker(void *arg)
{
    worker *w = arg;
    const scenario *sc = w->sc;
    static const uint64_t streams[] = {0, 0x7001, 0x7002};
    live_block live[MAX_LIVE];
    int n = 0;
    uint64_t s = w->seed;
    for (int op = 0; op < sc->ops; op++) {
        if (n < MAX_LIVE && (n == 0 || rnd(&s) % 100 < 52)) {
            int dev = (int)(rnd(&s) % (uint64_t)sc->devices);
            uint64_t stream = streams[rnd(&s) % 3];
            uintptr_t p;
            if (cci_malloc(w->allocs[dev], pick_size(&s), stream, &p) == CCI_OK)
                live[n++] = (live_block){dev, p, stream};
        } else {
            int i = (int)(rnd(&s) % (uint64_t)n);
            unsigned r = (unsigned)(rnd(&s) % 100);
            uint64_t stream = (int)r < sc->cross_stream ? live[i].stream ^ 0x100 : live[i].stream;
            cci_free_mode mode = (int)r >= 100 - sc->deferred ? CCI_FREE_DEFERRED : CCI_FREE_NOW;
            if (cci_free(w->allocs[live[i].dev], live[i].p, stream, mode) != CCI_OK) {
                fprintf(stderr, "FAIL %s: free of a live block refused\n", sc->name);
                failures++;
            }
            live[i] = live[--n];
        }
    }
    return NULL;  // the blocks still live stay allocated: a snapshot taken mid-run looks the same
}

static void run(const scenario *sc, const char *dir, int index)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/roundtrip-%d-%%p.cct", dir, index);
    char confstr[512];
    cci_config cfg;
    cci_config_default(&cfg);
    char err[512];
    if (cci_config_parse(&cfg, sc->conf, "test", err, sizeof err, NULL, NULL) != 0) {
        fprintf(stderr, "FAIL %s: %s\n", sc->name, err);
        failures++;
        return;
    }
    cci_config_format(&cfg, confstr, sizeof confstr);
    if (cci_trace_start(path, confstr) != 0) {
        fprintf(stderr, "FAIL %s: cci_trace_start\n", sc->name);
        failures++;
        return;
    }
    snprintf(path, sizeof path, "%s", cci_trace_path());

    cci_sim_device *sims[MAX_DEV];
    cci_allocator *allocs[MAX_DEV];
    size_t cap = sc->capacity ? sc->capacity : SIZE_MAX / 2;
    for (int d = 0; d < sc->devices; d++) {
        sims[d] = cci_sim_create(cap);
        allocs[d] = cci_allocator_create(d, &cfg, cci_sim_backend(sims[d]));
        cci_trace_attach(allocs[d], sc->capacity);
    }
    pthread_t th[8];
    worker w[8];
    for (int i = 0; i < sc->threads; i++) {
        w[i] = (worker){sc, allocs, 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1) + (uint64_t)index};
        pthread_create(&th[i], NULL, run_worker, &w[i]);
    }
    for (int i = 0; i < sc->threads; i++)
        pthread_join(th[i], NULL);
    cci_trace_stop();
    cci_trace_stop();  // a second stop (atexit after an explicit one) must be harmless

    uint64_t live_alloc = 0, live_res = 0, live_dev = 0, live_ooms = 0, live_retries = 0, recorded = 0,
             dropped = 0;
    for (int d = 0; d < sc->devices; d++) {
        cci_stats st;
        cci_alloc_stats(allocs[d], &st);
        live_alloc += (uint64_t)st.allocated_bytes[CCI_POOL_ALL].peak;
        live_res += (uint64_t)st.reserved_bytes[CCI_POOL_ALL].peak;
        live_dev += st.num_device_alloc;
        live_ooms += st.num_ooms;
        live_retries += st.num_alloc_retries;
        cci_allocator_destroy(allocs[d], 1);
        cci_sim_destroy(sims[d]);
    }
    cci_trace_counts(&recorded, &dropped);

    cci_trace t;
    if (cci_trace_load(path, &t, err, sizeof err) != 0) {
        fprintf(stderr, "FAIL %s: %s\n", sc->name, err);
        failures++;
        return;
    }
    cci_config rcfg;
    cci_config_default(&rcfg);
    if (!t.config || cci_config_parse(&rcfg, t.config, "recorded", err, sizeof err, NULL, NULL) != 0) {
        fprintf(stderr, "FAIL %s: the recorded configuration '%s' does not parse\n", sc->name,
                t.config ? t.config : "(none)");
        failures++;
    }
    cci_replay_result r;
    if (cci_replay(&t, &rcfg, (size_t)t.capacity, &r) != 0) {
        fprintf(stderr, "FAIL %s: replay ran out of memory\n", sc->name);
        failures++;
    }
    EXPECT_EQ(sc->name, "format is binary", strcmp(t.format, "binary"), 0);
    EXPECT_EQ(sc->name, "recorded capacity", t.capacity, sc->capacity);
    EXPECT_EQ(sc->name, "events dropped", dropped, 0);
    EXPECT_EQ(sc->name, "events in file (+1 device record each)", t.n + (size_t)sc->devices, recorded);
    EXPECT_EQ(sc->name, "missing events", t.missing_events, 0);
    EXPECT_EQ(sc->name, "truncated bytes", t.truncated_bytes, 0);
    EXPECT_EQ(sc->name, "unmatched frees", r.unmatched_frees, 0);
    EXPECT_EQ(sc->name, "peak allocated", r.peak_allocated, live_alloc);
    EXPECT_EQ(sc->name, "peak reserved", r.peak_reserved, live_res);
    EXPECT_EQ(sc->name, "device allocations", r.num_device_alloc, live_dev);
    EXPECT_EQ(sc->name, "OOMs", r.num_ooms, live_ooms);
    EXPECT_EQ(sc->name, "alloc retries", r.num_alloc_retries, live_retries);
    printf("%-40s %7zu events, %2llu OOMs, peak reserved %8.1f MiB (live %8.1f MiB)\n", sc->name, t.n,
           (unsigned long long)live_ooms, (double)r.peak_reserved / (double)MiB,
           (double)live_res / (double)MiB);
    cci_trace_free(&t);
    unlink(path);
}

// A process killed mid-run (SIGKILL: no exit handler, no final flush) leaves a trace that reads
// cleanly: what the writer thread had flushed, in whole records. A file cut inside a record (a
// write interrupted by a full disk, a copy cut short) reads up to the last whole record.
static void crash(const char *dir)
{
    char pattern[4096], path[4200], err[512];
    snprintf(pattern, sizeof pattern, "%s/crash-%%p.cct", dir);
    pid_t pid = fork();
    if (pid == 0) {
        cci_config cfg;
        cci_config_default(&cfg);
        if (cci_trace_start(pattern, "") != 0)
            _exit(3);
        cci_sim_device *sim = cci_sim_create(SIZE_MAX / 2);
        cci_allocator *a = cci_allocator_create(0, &cfg, cci_sim_backend(sim));
        cci_trace_attach(a, 0);
        cci_allocator *allocs[1] = {a};
        scenario sc = {"crash", "", 0, 1, 1, 2000, 10, 20};
        worker w = {&sc, allocs, 42};
        // At least 400 ms and 4 workloads, so the writer (which flushes every 100 ms) has flushed
        // several times; and, on a host so loaded that the writer was not scheduled in that time
        // (ASan beside other jobs on two cores), on until the file shows events past what it held
        // after the first workload, 60 s at most. Not a fixed 1000 workloads: those took ~100 s
        // under TSan, near the test's limit, while a plain build needs ~3 s for them.
        char mine[4200];
        snprintf(mine, sizeof mine, "%s/crash-%ld.cct", dir, (long)getpid());
        struct timespec t0, now;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        off_t first = -1;
        for (int i = 0;; i++) {
            run_worker(&w);
            usleep(250);
            struct stat st;
            off_t size = stat(mine, &st) == 0 ? st.st_size : 0;
            if (first < 0)
                first = size;
            clock_gettime(CLOCK_MONOTONIC, &now);
            long ms = (now.tv_sec - t0.tv_sec) * 1000L + (now.tv_nsec - t0.tv_nsec) / 1000000L;
            if ((i >= 3 && ms >= 400 && size > first) || ms >= 60000)
                break;
        }
        kill(getpid(), SIGKILL);
    }
    int status;
    waitpid(pid, &status, 0);
    snprintf(path, sizeof path, "%s/crash-%ld.cct", dir, (long)pid);
    cci_trace t;
    if (!WIFSIGNALED(status) || cci_trace_load(path, &t, err, sizeof err) != 0) {
        fprintf(stderr, "FAIL crash: child status %d, %s\n", status,
                WIFSIGNALED(status) ? err : "(not killed)");
        failures++;
        return;
    }
    size_t n = t.n;
    EXPECT_EQ("crash", "events survived (>0)", n > 0, 1);
    EXPECT_EQ("crash", "missing events", t.missing_events, 0);
    cci_trace_free(&t);
    // Cut the file inside record 100: 99 events (device record first) and a 20-byte tail remain.
    FILE *f = fopen(path, "r+b");
    char cut[4300];
    snprintf(cut, sizeof cut, "%s.cut", path);
    FILE *g = fopen(cut, "wb");
    uint8_t hdr[64];
    if (!f || !g || fread(hdr, 1, 64, f) != 64) {
        fprintf(stderr, "FAIL crash: cannot reread %s\n", path);
        failures++;
        return;
    }
    uint32_t hsize = hdr[12] | hdr[13] << 8 | (uint32_t)hdr[14] << 16 | (uint32_t)hdr[15] << 24;
    size_t keep = hsize + 100 * 48 + 20;
    uint8_t *buf = malloc(keep);
    rewind(f);
    size_t got = fread(buf, 1, keep, f);
    fwrite(buf, 1, got, g);
    fclose(f);
    fclose(g);
    free(buf);
    if (cci_trace_load(cut, &t, err, sizeof err) != 0) {
        fprintf(stderr, "FAIL crash: cut trace: %s\n", err);
        failures++;
    } else {
        EXPECT_EQ("cut", "truncated bytes", t.truncated_bytes, 20);
        EXPECT_EQ("cut", "events before the cut", t.n, 99);
        cci_trace_free(&t);
    }
    printf("%-40s %7zu events survived SIGKILL; a cut file reads to its last whole record\n", "crash", n);
    unlink(path);
    unlink(cut);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
        run(&scenarios[i], dir, (int)i);
    crash(dir);
    printf("%s\n", failures ? "FAILED" : "all round trips exact");
    return failures ? 1 : 0;
}
