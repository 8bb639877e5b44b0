// SPDX-License-Identifier: MIT
// Reuse hazards on a real GPU: work queued before a free must never land in the block's next
// owner. Each scenario queues a slow kernel that writes an "old" pattern into a block, frees the
// block while the kernel still runs, allocates the same size again and writes a "new" pattern on
// another stream (or thread); after a full synchronisation every new block must hold the new
// pattern. Natively cudaFree waits for the device, so every scenario passes; under the preload
// they pass only if reuse respects stream order. With CCI_ALLOC_CONF=immediate_reuse:True (unsafe
// by design) the scenarios that cross streams are expected to show corruption: that run proves
// the program can see the hazard (scripts/gpu-check.sh runs it as a control).
//
//   hazard_gpu [SCENARIO...]     (none: all)   prints one line per scenario, exit 1 on corruption
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_WORDS (1u << 18)  // 1 MiB blocks
#define SPIN_NS 20000000ull // the "old" write lands about 20 ms after its launch

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

__global__ void slow_fill(uint32_t *p, uint32_t n, uint32_t v, unsigned long long ns)
{
    unsigned long long t0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (;;) {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 >= ns)
            break;
    }
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = v;
}

__global__ void count_bad(const uint32_t *p, uint32_t n, uint32_t v, unsigned *bad)
{
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        if (p[i] != v)
            atomicAdd(bad, 1u);
}

// The blocks' size in words: 1 MiB (the small pool, a thread's own fenced batches), or 8 MiB for
// the large- scenarios (the allocator's free set, where a free skips its fence and the next
// allocation orders: orders at reuse).
static uint32_t words = N_WORDS;
static void old_write(void *p, cudaStream_t s) { slow_fill<<<64, 256, 0, s>>>((uint32_t *)p, words, 0xA0A0A0A0u, SPIN_NS); }
static void new_write(void *p, uint32_t v, cudaStream_t s) { slow_fill<<<64, 256, 0, s>>>((uint32_t *)p, words, v, 0); }

typedef struct verdict { int rounds, reused, corrupt; } verdict;

static unsigned *d_bad;

// Checks after everything has run: every new block holds its own pattern.
static int intact(void *p, uint32_t v)
{
    CK(cudaMemset(d_bad, 0, sizeof *d_bad));
    count_bad<<<64, 256>>>((const uint32_t *)p, words, v, d_bad);
    unsigned bad = 0;
    CK(cudaMemcpy(&bad, d_bad, sizeof bad, cudaMemcpyDeviceToHost));
    return bad == 0;
}

#define ROUNDS 8

// The common shape: old work on `a`, free (plain or async on `a`), new owner writes on `b`.
static verdict cross(cudaStream_t a, cudaStream_t b, int async_free)
{
    verdict r = {ROUNDS, 0, 0};
    void *q[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) {
        void *p;
        CK(cudaMalloc(&p, words * 4));
        old_write(p, a);
        if (async_free)
            CK(cudaFreeAsync(p, a));
        else
            CK(cudaFree(p));
        CK(cudaMalloc(&q[i], words * 4));
        r.reused += q[i] == p;
        new_write(q[i], 0x10000u + i, b);
    }
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < ROUNDS; i++) {
        r.corrupt += !intact(q[i], 0x10000u + i);
        CK(cudaFree(q[i]));
    }
    return r;
}

static verdict two_blocking(void)
{
    cudaStream_t a, b;
    CK(cudaStreamCreate(&a));
    CK(cudaStreamCreate(&b));
    verdict r = cross(a, b, 0);
    CK(cudaStreamDestroy(a));
    CK(cudaStreamDestroy(b));
    return r;
}

static verdict legacy_then_nonblocking(void)
{
    cudaStream_t b;
    CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    verdict r = cross(cudaStreamLegacy, b, 0);
    CK(cudaStreamDestroy(b));
    return r;
}

static verdict large(verdict (*fn)(void))
{
    words = 8u << 18;
    verdict r = fn();
    words = N_WORDS;
    return r;
}
static verdict large_two_blocking(void) { return large(two_blocking); }
static verdict large_legacy_then_nonblocking(void) { return large(legacy_then_nonblocking); }

static verdict nonblocking_then_legacy(void)
{
    cudaStream_t a;
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    verdict r = cross(a, cudaStreamLegacy, 0);
    CK(cudaStreamDestroy(a));
    return r;
}

static verdict driver_stream(void)
{
    CUstream a;
    if (cuStreamCreate(&a, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        fprintf(stderr, "cuStreamCreate failed\n");
        exit(2);
    }
    verdict r = cross((cudaStream_t)a, cudaStreamLegacy, 0);
    cuStreamDestroy(a);
    return r;
}

static verdict free_async_then_other(void)
{
    cudaStream_t a, b;
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    verdict r = cross(a, b, 1);
    CK(cudaStreamDestroy(a));
    CK(cudaStreamDestroy(b));
    return r;
}

// Two threads, each on its own per-thread default stream: thread 1 queues the old write and
// frees; thread 2 then allocates and writes on its per-thread stream.
typedef struct pt_shared { pthread_mutex_t m; pthread_cond_t c; int stage; void *p, *q; } pt_shared;

static void *pt_second(void *arg)
{
    pt_shared *s = (pt_shared *)arg;
    pthread_mutex_lock(&s->m);
    while (s->stage < 1)
        pthread_cond_wait(&s->c, &s->m);
    pthread_mutex_unlock(&s->m);
    CK(cudaMalloc(&s->q, N_WORDS * 4));
    new_write(s->q, 0x20000u, cudaStreamPerThread);
    CK(cudaStreamSynchronize(cudaStreamPerThread));
    return NULL;
}

static verdict per_thread_streams(void)
{
    verdict r = {ROUNDS, 0, 0};
    for (int i = 0; i < ROUNDS; i++) {
        pt_shared s = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, NULL, NULL};
        pthread_t t;
        pthread_create(&t, NULL, pt_second, &s);
        CK(cudaMalloc(&s.p, N_WORDS * 4));
        old_write(s.p, cudaStreamPerThread);
        CK(cudaFree(s.p));
        pthread_mutex_lock(&s.m);
        s.stage = 1;
        pthread_cond_signal(&s.c);
        pthread_mutex_unlock(&s.m);
        pthread_join(t, NULL);
        CK(cudaDeviceSynchronize());
        r.reused += s.q == s.p;
        r.corrupt += !intact(s.q, 0x20000u);
        CK(cudaFree(s.q));
    }
    return r;
}

// A graph whose one node is the slow old write, launched on `a`; the block is freed right after
// the launch and reused on `b`.
static verdict graph_launch(void)
{
    verdict r = {ROUNDS, 0, 0};
    cudaStream_t a, b;
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    void *q[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) {
        void *p;
        CK(cudaMalloc(&p, N_WORDS * 4));
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal));
        old_write(p, a);
        CK(cudaStreamEndCapture(a, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        CK(cudaGraphLaunch(ge, a));
        CK(cudaFree(p));
        CK(cudaMalloc(&q[i], N_WORDS * 4));
        r.reused += q[i] == p;
        new_write(q[i], 0x30000u + i, b);
        CK(cudaStreamSynchronize(a));
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
    }
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < ROUNDS; i++) {
        r.corrupt += !intact(q[i], 0x30000u + i);
        CK(cudaFree(q[i]));
    }
    CK(cudaStreamDestroy(a));
    CK(cudaStreamDestroy(b));
    return r;
}

// The CPU runs far ahead: 256 blocks with old writes queued and freed, then 256 new owners
// written on another stream, all before one synchronisation.
static verdict many_in_flight(void)
{
    enum { MANY = 256 };
    verdict r = {MANY, 0, 0};
    cudaStream_t a, b;
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    static void *old[MANY], *q[MANY];
    for (int i = 0; i < MANY; i++) {
        CK(cudaMalloc(&old[i], N_WORDS * 4));
        slow_fill<<<4, 256, 0, a>>>((uint32_t *)old[i], N_WORDS, 0xA0A0A0A0u, i == 0 ? SPIN_NS : 0);
        CK(cudaFree(old[i]));
    }
    for (int i = 0; i < MANY; i++) {
        CK(cudaMalloc(&q[i], N_WORDS * 4));
        for (int j = 0; j < MANY; j++)
            r.reused += q[i] == old[j];
        new_write(q[i], 0x40000u + i, b);
    }
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < MANY; i++) {
        r.corrupt += !intact(q[i], 0x40000u + i);
        CK(cudaFree(q[i]));
    }
    CK(cudaStreamDestroy(a));
    CK(cudaStreamDestroy(b));
    return r;
}

// Frees of small blocks: under the preload, after the last created stream is destroyed, fenced
// frees are where the stream rule tries to return to ordered (preload/stream_registry.h).
static void small_pairs(int n)
{
    for (int i = 0; i < n; i++) {
        void *t;
        CK(cudaMalloc(&t, 4096));
        CK(cudaFree(t));
    }
}

// One round's new owner: q (freed block p back or not) written with v on s, checked after a full
// synchronisation, and freed.
static void new_owner_round(verdict *r, void *p, uint32_t v, cudaStream_t s)
{
    void *q;
    CK(cudaMalloc(&q, N_WORDS * 4));
    r->reused += q == p;
    new_write(q, v, s);
    CK(cudaDeviceSynchronize());
    r->corrupt += !intact(q, v);
    CK(cudaFree(q));
}

// A destroyed stream's slow kernel still writes p while other blocks are freed; then p is freed
// and its next owner writes on the legacy stream, which is not ordered after that kernel.
static verdict destroyed_stream_busy(void)
{
    verdict r = {ROUNDS, 0, 0};
    for (int i = 0; i < ROUNDS; i++) {
        cudaStream_t a;
        void *p;
        CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
        CK(cudaMalloc(&p, N_WORDS * 4));
        old_write(p, a);
        CK(cudaStreamDestroy(a));
        small_pairs(64);
        CK(cudaFree(p));
        new_owner_round(&r, p, 0x50000u + i, cudaStreamLegacy);
    }
    return r;
}

// A stream came and went (the rule may be ordered again), p is freed while a slow kernel on the
// legacy stream still writes it, and a new stream's owner gets the same size: the new stream's
// creation must wait for that kernel, as the first stream's did.
static verdict return_then_new_stream(void)
{
    verdict r = {ROUNDS, 0, 0};
    for (int i = 0; i < ROUNDS; i++) {
        cudaStream_t a, b;
        void *p;
        CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
        CK(cudaStreamDestroy(a));
        small_pairs(64);
        CK(cudaMalloc(&p, N_WORDS * 4));
        old_write(p, cudaStreamLegacy);
        CK(cudaFree(p));
        CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
        new_owner_round(&r, p, 0x60000u + i, b);
        CK(cudaStreamDestroy(b));
    }
    return r;
}

// A thread's own fenced batches (src/core/tcache_fenced.c): small blocks freed while a slow kernel
// on a non-blocking stream still writes the first of them (the rest queue behind it), then new
// owners taken one a millisecond on another stream, so that the first ones come while the
// batches' fences are pending and the later ones, once they have passed, from the thread's
// passed blocks. `reused` counts the new owners that got an old block back.
#define SMALL_WORDS (1u << 14)  // 64 KiB blocks
static verdict thread_batches(void)
{
    enum { MANY = 96 };
    verdict r = {MANY, 0, 0};
    cudaStream_t a, b;
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    static void *old[MANY], *q[MANY];
    for (int i = 0; i < 4 * MANY; i++) {  // warm: the fast paths' credits grow with the peaks
        void *t;
        CK(cudaMalloc(&t, SMALL_WORDS * 4));
        CK(cudaFree(t));
    }
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < MANY; i++) {
        CK(cudaMalloc(&old[i], SMALL_WORDS * 4));
        slow_fill<<<4, 256, 0, a>>>((uint32_t *)old[i], SMALL_WORDS, 0xA0A0A0A0u, i == 0 ? SPIN_NS : 0);
        CK(cudaFree(old[i]));
    }
    for (int i = 0; i < MANY; i++) {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do
            clock_gettime(CLOCK_MONOTONIC, &t);
        while ((t.tv_sec - t0.tv_sec) * 1000000000ll + (t.tv_nsec - t0.tv_nsec) < 1000000);
        CK(cudaMalloc(&q[i], SMALL_WORDS * 4));
        for (int j = 0; j < MANY; j++)
            r.reused += q[i] == old[j];
        slow_fill<<<4, 256, 0, b>>>((uint32_t *)q[i], SMALL_WORDS, 0x70000u + i, 0);
    }
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < MANY; i++) {
        CK(cudaMemset(d_bad, 0, sizeof *d_bad));
        count_bad<<<64, 256>>>((const uint32_t *)q[i], SMALL_WORDS, 0x70000u + i, d_bad);
        unsigned bad = 0;
        CK(cudaMemcpy(&bad, d_bad, sizeof bad, cudaMemcpyDeviceToHost));
        r.corrupt += bad != 0;
        CK(cudaFree(q[i]));
    }
    CK(cudaStreamDestroy(a));
    CK(cudaStreamDestroy(b));
    return r;
}

// The two scenarios of the rule's return come first: a second thread (per-thread-streams) keeps
// the rule fenced for the rest of the process.
static const struct { const char *name; verdict (*fn)(void); } scenarios[] = {
    {"destroyed-stream-busy", destroyed_stream_busy},
    {"return-then-new-stream", return_then_new_stream},
    {"two-blocking-streams", two_blocking},
    {"legacy-then-nonblocking", legacy_then_nonblocking},
    {"large-two-blocking-streams", large_two_blocking},
    {"large-legacy-then-nonblocking", large_legacy_then_nonblocking},
    {"nonblocking-then-legacy", nonblocking_then_legacy},
    {"driver-stream", driver_stream},
    {"per-thread-streams", per_thread_streams},
    {"freeasync-then-other-stream", free_async_then_other},
    {"graph-launch", graph_launch},
    {"many-in-flight", many_in_flight},
    {"thread-batches", thread_batches},
};

int main(int argc, char **argv)
{
    CK(cudaFree(0));
    CK(cudaMalloc(&d_bad, sizeof *d_bad));
    int failed = 0;
    for (size_t k = 0; k < sizeof scenarios / sizeof scenarios[0]; k++) {
        int wanted = argc < 2;
        for (int i = 1; i < argc; i++)
            wanted |= strcmp(argv[i], scenarios[k].name) == 0;
        if (!wanted)
            continue;
        verdict v = scenarios[k].fn();
        printf("HAZARD %-28s rounds %3d  reused %3d  corrupt %3d  %s\n", scenarios[k].name, v.rounds,
               v.reused, v.corrupt, v.corrupt ? "CORRUPT" : "ok");
        failed |= v.corrupt != 0;
    }
    CK(cudaFree(d_bad));
    return failed;
}
