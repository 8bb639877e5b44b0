// SPDX-License-Identifier: MIT
// Thread scaling of cached alloc+free pairs: every thread allocates and frees one size in a loop
// for a fixed wall-clock budget, each on its own non-blocking stream, all on device 0.
//
//   bench_threads --api malloc|async|driver|driver-async [--threads 1,2,4,8,16] [--budget-ms N]
//                 [--pairs N] [--size BYTES] [--no-streams] [--label TEXT]
//   bench_threads --api core-fenced|core-now ...      (the build with -DBENCH_THREADS_CORE)
//
// One source, three builds: nvcc (the GPU), gcc against the fake CUDA, and gcc against the core
// library with -DBENCH_THREADS_CORE (no CUDA at all: the allocator core on the simulated device,
// mirroring what the hooks ask of it). tests/bench/thread_table.py runs them side by side.
//
//   malloc   cudaMalloc + cudaFree                      (the hooks: one stream key for all threads)
//   async    cudaMallocAsync + cudaFreeAsync on the thread's own stream
//   driver   cuMemAlloc_v2 + cuMemFree_v2, looked up with dlsym so that the program needs neither
//            the driver's header nor -lcuda (a preload's definitions come first in that lookup,
//            as they do for a program linked with -lcuda)
//   driver-async  cuMemAllocAsync + cuMemFreeAsync on the thread's own stream, looked up the same
//            way: what a static cudart's cudaMallocAsync reaches
//   core-fenced  cci_malloc/cci_free(CCI_FREE_FENCED), every thread on one stream key: what the
//            hooks' default-mode cudaFree does once the program has non-blocking streams
//   core-now cci_malloc/cci_free(CCI_FREE_NOW), each thread on its own stream key: same-stream
//            cudaFreeAsync, and cudaFree in immediate_reuse
//
// --pairs N: a fixed count per thread instead of the time budget (repeatable runs under callgrind).
// --thread-cache 0|1: the core build's per-thread caches (default 1, as the preload's default).
// --no-streams: create no stream (a program without streams: the hooks' cudaFree is then reusable
// at once). Prints one line per thread count, then one JSON line (starting with '{').
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // RTLD_DEFAULT
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "bench_util.h"

#ifdef BENCH_THREADS_CORE
#include "allocator.h"
#else
#include <cuda_runtime.h>

#include "cci_probe.h"
#endif

#define MAX_THREADS 64
// Stream-ordered frees complete on the device (the fake: on a worker thread) after the call
// returns; a loop that never waits would pile up pending frees faster than they drain. Every
// async thread synchronises its stream once per this many pairs, in every build alike.
#define ASYNC_SYNC_EVERY 256

enum api { API_MALLOC, API_ASYNC, API_DRIVER, API_DRIVER_ASYNC, API_CORE_FENCED, API_CORE_NOW };
static const char *const api_names[] = {"malloc", "async", "driver", "driver-async", "core-fenced", "core-now"};

static enum api api = API_MALLOC;
static size_t pair_size = 64 * BU_KiB;
static int use_streams = 1;
static int thread_cache = 1;  // the core build: per-thread caches on, as in the preload
static atomic_int stop_flag;

// Each worker on cache lines of its own: the loop writes `error` every pair, and workers side by
// side in one array would make every thread's pair miss on its neighbours' writes (false sharing
// that had made every path, CUDA's own included, look as if it did not scale).
typedef struct worker {
    _Alignas(128) pthread_t tid;
    int index;
    long fixed_pairs;  // > 0: run exactly this many; 0: until stop_flag
    uint64_t warmup_ns;  // untimed pairs before the start barrier
    pthread_barrier_t *start;
    long pairs;        // done in the timed region
    int error;         // the failing call's own code
    const char *what;  // which call failed
#ifdef BENCH_THREADS_CORE
    uint64_t stream_key;
#else
    cudaStream_t stream;
#endif
} worker;

#ifdef BENCH_THREADS_CORE
// ---- the core alone ---------------------------------------------------------------------------

static cci_sim_device *sim;
static cci_allocator *core;

static int global_setup(void)
{
    sim = cci_sim_create((size_t)1 << 40);  // touches no memory; no run here should see an OOM
    cci_config cfg;
    cci_config_default(&cfg);
    core = sim ? cci_allocator_create(0, &cfg, cci_sim_backend(sim)) : NULL;
    if (core)
        cci_allocator_thread_cache(core, thread_cache);
    if (!core)
        fprintf(stderr, "bench_threads: out of host memory\n");
    return core ? 0 : 1;
}

static void global_teardown(void)
{
    cci_allocator_destroy(core, 1);
    cci_sim_destroy(sim);
}

static int thread_setup(worker *w)
{
    // The hooks' cudaMalloc uses the legacy stream's key whatever stream the thread works on.
    w->stream_key = api == API_CORE_NOW ? (uint64_t)w->index + 1 : 0;
    return 0;
}

static void thread_teardown(worker *w)
{
    (void)w;
}

static int do_pair(worker *w, long i)
{
    (void)i;
    uintptr_t p;
    int rc = cci_malloc(core, pair_size, w->stream_key, &p);
    if (rc != CCI_OK) {
        w->what = "cci_malloc";
        return rc;
    }
    rc = cci_free(core, p, w->stream_key, api == API_CORE_NOW ? CCI_FREE_NOW : CCI_FREE_FENCED);
    if (rc != CCI_OK)
        w->what = "cci_free";
    return rc;
}

static void print_probe(void)
{
}

#else
// ---- CUDA: the runtime or the driver, raw or under a preload ----------------------------------

// The driver's ABI, spelled out (CUresult is an int-sized enum, CUdeviceptr a 64-bit integer).
typedef int (*drv_alloc_fn)(unsigned long long *dptr, size_t bytes);
typedef int (*drv_free_fn)(unsigned long long dptr);
typedef int (*drv_ctx_fn)(void **ctx);
typedef int (*drv_set_ctx_fn)(void *ctx);
typedef int (*drv_alloc_async_fn)(unsigned long long *dptr, size_t bytes, void *stream);
typedef int (*drv_free_async_fn)(unsigned long long dptr, void *stream);
static drv_alloc_fn drv_alloc;
static drv_free_fn drv_free;
static drv_alloc_async_fn drv_alloc_async;
static drv_free_async_fn drv_free_async;
static drv_set_ctx_fn drv_set_ctx;
static void *main_ctx;  // the runtime's primary context, made current in every driver thread

static void *driver_symbol(const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    if (!f)
        fprintf(stderr, "bench_threads: %s not found: %s\n", name, dlerror());
    return f;
}

static int global_setup(void)
{
    cudaError_t rc = cudaFree(0);  // create the context outside every timed region
    if (rc != cudaSuccess) {
        fprintf(stderr, "bench_threads: cudaFree(0): %s (%d)\n", cudaGetErrorString(rc), (int)rc);
        return 1;
    }
#ifndef FAKE_CUDA_RUNTIME_H
    if (api == API_ASYNC || api == API_DRIVER_ASYNC) {  // as bench_alloc: the pool keeps its memory
        int dev = 0;
        cudaMemPool_t pool;
        uint64_t threshold = UINT64_MAX;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess ||
            cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold) != cudaSuccess) {
            fprintf(stderr, "bench_threads: could not raise the pool's release threshold\n");
            return 1;
        }
    }
#endif
    if (api != API_DRIVER && api != API_DRIVER_ASYNC)
        return 0;
    // The runtime has loaded libcuda; make its symbols reachable from RTLD_DEFAULT.
    if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) &&
        !dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "bench_threads: libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    drv_ctx_fn get_ctx;
    *(void **)&drv_alloc = driver_symbol("cuMemAlloc_v2");
    *(void **)&drv_free = driver_symbol("cuMemFree_v2");
    *(void **)&drv_set_ctx = driver_symbol("cuCtxSetCurrent");
    *(void **)&get_ctx = driver_symbol("cuCtxGetCurrent");
    *(void **)&drv_alloc_async = driver_symbol("cuMemAllocAsync");
    *(void **)&drv_free_async = driver_symbol("cuMemFreeAsync");
    if (!drv_alloc || !drv_free || !drv_set_ctx || !get_ctx || !drv_alloc_async || !drv_free_async)
        return 1;
    if (get_ctx(&main_ctx) != 0 || !main_ctx) {
        fprintf(stderr, "bench_threads: no current context after cudaFree(0)\n");
        return 1;
    }
    return 0;
}

static void global_teardown(void)
{
}

static int thread_setup(worker *w)
{
    if ((api == API_DRIVER || api == API_DRIVER_ASYNC) && drv_set_ctx(main_ctx) != 0) {
        w->what = "cuCtxSetCurrent";
        return 1;
    }
    cudaError_t rc = cudaSetDevice(0);
    if (rc == cudaSuccess && use_streams)
        rc = cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking);
    if (rc != cudaSuccess)
        w->what = "thread setup";
    return (int)rc;
}

static void thread_teardown(worker *w)
{
    if (w->stream && cudaStreamDestroy(w->stream) != cudaSuccess && !w->error) {
        w->error = 1;
        w->what = "cudaStreamDestroy";
    }
}

static int do_pair(worker *w, long i)
{
    if (api == API_DRIVER) {
        unsigned long long p;
        int rc = drv_alloc(&p, pair_size);
        if (rc == 0)
            rc = drv_free(p);
        w->what = rc ? "cuMemAlloc_v2/cuMemFree_v2" : NULL;
        return rc;
    }
    if (api == API_DRIVER_ASYNC) {
        unsigned long long p;
        int rc = drv_alloc_async(&p, pair_size, (void *)w->stream);
        if (rc == 0)
            rc = drv_free_async(p, (void *)w->stream);
        if (rc == 0 && i % ASYNC_SYNC_EVERY == ASYNC_SYNC_EVERY - 1)
            rc = (int)cudaStreamSynchronize(w->stream);
        w->what = rc ? "cuMemAllocAsync/cuMemFreeAsync" : NULL;
        return rc;
    }
    void *p;
    cudaError_t rc;
    if (api == API_ASYNC) {
        rc = cudaMallocAsync(&p, pair_size, w->stream);
        if (rc == cudaSuccess)
            rc = cudaFreeAsync(p, w->stream);
        if (rc == cudaSuccess && i % ASYNC_SYNC_EVERY == ASYNC_SYNC_EVERY - 1)
            rc = cudaStreamSynchronize(w->stream);
        w->what = "cudaMallocAsync/cudaFreeAsync";
    } else {
        rc = cudaMalloc(&p, pair_size);
        if (rc == cudaSuccess)
            rc = cudaFree(p);
        w->what = "cudaMalloc/cudaFree";
    }
    return (int)rc;
}

static void print_probe(void)
{
    cci_probe_print(0);
}
#endif

// ---- the measurement, shared by every build ---------------------------------------------------

static void *worker_main(void *arg)
{
    worker *w = arg;
    int ok = (w->error = thread_setup(w)) == 0;
    // Warm: the thread's first segment, its stream's pool and any lazy state exist before timing;
    // then --warmup-ms of untimed pairs in this same thread (see main).
    uint64_t t0 = bu_now_ns();
    for (long i = 0; ok && (i < 3 || bu_now_ns() - t0 < w->warmup_ns); i++)
        ok = (w->error = do_pair(w, i)) == 0;
    pthread_barrier_wait(w->start);
    if (ok) {
        long i = 0;
        if (w->fixed_pairs) {
            for (; i < w->fixed_pairs; i++)
                if ((w->error = do_pair(w, i)) != 0)
                    break;
        } else {
            // The flag is read once per 64 pairs: a relaxed load each pair would cost nothing
            // measurable either, but this keeps the loop identical to the fixed-count one.
            while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
                long end = i + 64;
                for (; i < end; i++)
                    if ((w->error = do_pair(w, i)) != 0)
                        break;
                if (w->error)
                    break;
            }
        }
        w->pairs = i;
    }
    thread_teardown(w);
    return NULL;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull), .tv_nsec = (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

// Returns the pairs per second of all threads together; -1 when a call failed.
static double run_cell(int nthreads, uint64_t budget_ns, long fixed_pairs, uint64_t warmup_ns)
{
    static worker w[MAX_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)nthreads + 1);
    atomic_store(&stop_flag, 0);
    for (int i = 0; i < nthreads; i++) {
        w[i] = (worker){.index = i, .fixed_pairs = fixed_pairs, .warmup_ns = warmup_ns, .start = &start};
        if (pthread_create(&w[i].tid, NULL, worker_main, &w[i]) != 0) {
            fprintf(stderr, "bench_threads: pthread_create failed\n");
            exit(1);
        }
    }
    pthread_barrier_wait(&start);
    uint64_t t0 = bu_now_ns();
    if (!fixed_pairs) {
        sleep_ns(budget_ns);
        atomic_store(&stop_flag, 1);
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(w[i].tid, NULL);
    uint64_t dt = bu_now_ns() - t0;
    pthread_barrier_destroy(&start);
    long total = 0;
    for (int i = 0; i < nthreads; i++) {
        if (w[i].error) {
            fprintf(stderr, "bench_threads: thread %d: %s failed (%d)\n", i, w[i].what ? w[i].what : "?",
                    w[i].error);
            return -1;
        }
        total += w[i].pairs;
    }
    return dt ? (double)total / ((double)dt * 1e-9) : 0;
}

static int parse_threads(const char *s, int *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > MAX_THREADS || (*end && *end != ','))
            return 0;
        out[n++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return *s ? 0 : n;
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_threads --api malloc|async|driver|driver-async|core-fenced|core-now [--threads LIST]\n"
                    "       [--budget-ms N] [--warmup-ms N] [--pairs N] [--size BYTES] [--no-streams]\n"
                    "       [--thread-cache 0|1] [--label TEXT]\n");
    return 2;
}

int main(int argc, char **argv)
{
    int counts[16] = {1, 2, 4, 8, 16};
    int ncounts = 5;
    uint64_t budget_ns = 300000000ull, warmup_ns = 0;
    long fixed_pairs = 0;
    const char *label = "";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-streams")) {
            use_streams = 0;
            continue;
        }
        if (!v)
            return usage();
        i++;
        if (!strcmp(a, "--api")) {
            int found = 0;
            for (int k = 0; k < (int)(sizeof api_names / sizeof api_names[0]); k++)
                if (!strcmp(v, api_names[k])) {
                    api = (enum api)k;
                    found = 1;
                }
            if (!found)
                return usage();
        } else if (!strcmp(a, "--threads")) {
            if (!(ncounts = parse_threads(v, counts, 16)))
                return usage();
        } else if (!strcmp(a, "--budget-ms")) {
            budget_ns = strtoull(v, NULL, 10) * 1000000ull;
        } else if (!strcmp(a, "--warmup-ms")) {
            warmup_ns = strtoull(v, NULL, 10) * 1000000ull;
        } else if (!strcmp(a, "--pairs")) {
            fixed_pairs = strtol(v, NULL, 10);
        } else if (!strcmp(a, "--size")) {
            pair_size = strtoull(v, NULL, 10);
        } else if (!strcmp(a, "--thread-cache")) {
            thread_cache = atoi(v) != 0;
        } else if (!strcmp(a, "--label")) {
            label = v;
        } else {
            return usage();
        }
    }
#ifdef BENCH_THREADS_CORE
    if (api != API_CORE_FENCED && api != API_CORE_NOW) {
        fprintf(stderr, "bench_threads: this build is the core alone: --api core-fenced or core-now\n");
        return 2;
    }
#else
    if (api == API_CORE_FENCED || api == API_CORE_NOW) {
        fprintf(stderr, "bench_threads: the core variants need the build with -DBENCH_THREADS_CORE\n");
        return 2;
    }
#endif
    if (pair_size == 0 || budget_ns == 0 || fixed_pairs < 0)
        return usage();
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (global_setup())
        return 1;
    printf("%s %s, %zu-byte pairs, %s: pairs/s (all threads), ns/pair (per thread)\n", label, api_names[api],
           pair_size, use_streams ? "one non-blocking stream per thread" : "no streams");
    double rate[16];
    for (int c = 0; c < ncounts; c++) {
        // Each cell's threads first run warmup_ns of untimed pairs, in the threads that are then
        // timed (a separate warm-up thread would be a second thread to the stream rule). What a
        // process pays only once (under the preload its first ~1.3 M fast-path pairs fill the
        // what-if history, whose fresh host memory costs more than the pairs themselves on a
        // virtual machine) is then in no cell; without it the first cell alone paid for it, and
        // a ratio to that cell flattered every later one.
        rate[c] = run_cell(counts[c], budget_ns, fixed_pairs, warmup_ns);
        if (rate[c] < 0)
            return 1;
        printf("threads %-3d %14.0f pairs/s %10.1f ns/pair %7.2fx\n", counts[c], rate[c],
               rate[c] > 0 ? 1e9 * counts[c] / rate[c] : 0.0, rate[0] > 0 ? rate[c] / rate[0] : 0.0);
    }
    print_probe();
    printf("{\"label\": \"%s\", \"api\": \"%s\", \"size\": %zu, \"streams\": %s, \"cells\": [", label,
           api_names[api], pair_size, use_streams ? "true" : "false");
    for (int c = 0; c < ncounts; c++)
        printf("%s{\"threads\": %d, \"pairs_per_s\": %.0f}", c ? ", " : "", counts[c], rate[c]);
    printf("]}\n");
    global_teardown();
    return 0;
}
