// SPDX-License-Identifier: MIT
// Early reuse across streams: a block freed while work queued before the free still writes it
// must not reach a new owner whose work is not ordered after that write.
//
//   hazard_streams SCENARIO intact|clobbered
//
// Every scenario: allocate p; hold a stream (the fake keeps its new work queued until a
// synchronisation or dependent work demands it: the GPU is "busy"); queue a write of OLD into p
// there; free p; allocate q (the allocator may hand p out again); the new owner writes NEW into q
// on its own stream and synchronises that stream only; then the whole device is synchronised, which
// runs the held write. q holding anything but NEW means the block was reused too early.
// "intact" asserts q is intact (the preload's default mode must pass); "clobbered" asserts the
// corruption is seen and q was the freed block (proves the scenario detects early reuse when the
// preload is made unsafe with immediate_reuse:True).
#include "fake_cuda_driver.h"

#include <pthread.h>

#include "ptest.h"

#define N ((size_t)1 << 20)
#define OLD 0xAA
#define NEW 0x5A
#define MANY 64

typedef struct outcome {
    int reused;     // new owners that got a freed block back
    int clobbered;  // new owners whose data the late write overwrote
    int owners;
} outcome;

// Queues the late write: the "kernel" the program launched before freeing p.
static void late_write(void *p, cudaStream_t s)
{
    fakecuda_delayed_fill(p, OLD, N, s, 0);
    CUDA_OK(cudaGetLastError());
}

// The new owner's work: NEW on its stream, finished before the held work is released.
static void new_owner_writes(void *q, cudaStream_t s)
{
    CUDA_OK(cudaMemsetAsync(q, NEW, N, s));
    CUDA_OK(cudaStreamSynchronize(s));
}

static void judge(outcome *o, void *p, void *q)
{
    o->owners++;
    o->reused += q == p;
    o->clobbered += !ptest_all_bytes(q, N, NEW);
}

static cudaStream_t make_stream(unsigned flags)
{
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, flags));
    return s;
}

// Late write on `writer` (held), new owner on `owner`; both runtime streams.
static outcome two_streams(cudaStream_t writer, cudaStream_t owner)
{
    outcome o = {0};
    void *p, *q;
    CUDA_OK(cudaMalloc(&p, N));
    CUDA_OK(fakecuda_stream_hold(writer, 1));
    late_write(p, writer);
    CUDA_OK(cudaFree(p));
    CUDA_OK(cudaMalloc(&q, N));
    new_owner_writes(q, owner);
    CUDA_OK(cudaDeviceSynchronize());
    judge(&o, p, q);
    CUDA_OK(fakecuda_stream_hold(writer, 0));
    CUDA_OK(cudaFree(q));
    return o;
}

static outcome blocking_streams(void)
{
    cudaStream_t a = make_stream(cudaStreamDefault), b = make_stream(cudaStreamDefault);
    outcome o = two_streams(a, b);
    CUDA_OK(cudaStreamDestroy(a));
    CUDA_OK(cudaStreamDestroy(b));
    return o;
}

static outcome legacy_then_nonblocking(void)
{
    cudaStream_t b = make_stream(cudaStreamNonBlocking);
    outcome o = two_streams(cudaStreamLegacy, b);
    CUDA_OK(cudaStreamDestroy(b));
    return o;
}

static outcome nonblocking_then_legacy(void)
{
    cudaStream_t a = make_stream(cudaStreamNonBlocking);
    outcome o = two_streams(a, cudaStreamLegacy);
    CUDA_OK(cudaStreamDestroy(a));
    return o;
}

// The legitimately safe case: one stream orders the late write before the new owner's work.
static outcome one_stream(void)
{
    return two_streams(cudaStreamLegacy, cudaStreamLegacy);
}

// A stream the runtime never saw (cuStreamCreateWithPriority), memory through the driver hooks.
static outcome driver_stream(void)
{
    CUDA_OK(cudaSetDevice(0));  // the driver calls below need the primary context current
    CUstream a;
    CU_OK(cuStreamCreateWithPriority(&a, CU_STREAM_NON_BLOCKING, -1));
    cudaStream_t b = make_stream(cudaStreamNonBlocking);
    outcome o = {0};
    CUdeviceptr p, q;
    CU_OK(cuMemAlloc_v2(&p, N));
    CU_OK(fakecu_stream_hold(a, 0, 1));
    late_write((void *)p, a);
    CU_OK(cuMemFree_v2(p));
    CU_OK(cuMemAlloc_v2(&q, N));
    new_owner_writes((void *)q, b);
    CU_OK(cuCtxSynchronize());
    judge(&o, (void *)p, (void *)q);
    CU_OK(cuMemFree_v2(q));
    CU_OK(cuStreamDestroy_v2(a));
    CUDA_OK(cudaStreamDestroy(b));
    return o;
}

// Two threads' per-thread default streams: the first thread's late write, the second's new owner.
struct ptds_shared {
    pthread_barrier_t freed, checked;
    void *p;
};

static void *ptds_writer(void *arg)
{
    struct ptds_shared *sh = arg;
    // The filler takes the rest of p's segment, so that only p can serve the other thread's
    // request without a new segment: where p is reusable at once (the unsafe controls), the other
    // thread gets p whether or not p sits in this thread's cache, and the late write shows.
    void *filler;
    CUDA_OK(cudaMalloc(&sh->p, N));
    CUDA_OK(cudaMalloc(&filler, N));
    CUDA_OK(fakecuda_stream_hold(cudaStreamPerThread, 1));
    late_write(sh->p, cudaStreamPerThread);
    CUDA_OK(cudaFree(sh->p));
    pthread_barrier_wait(&sh->freed);
    // Stay alive: a thread's exit retires its per-thread stream, which releases the held work.
    pthread_barrier_wait(&sh->checked);
    CUDA_OK(cudaFree(filler));
    return NULL;
}

static void *ptds_owner(void *arg)
{
    struct ptds_shared *sh = arg;
    pthread_barrier_wait(&sh->freed);
    void *q;
    CUDA_OK(cudaMalloc(&q, N));
    new_owner_writes(q, cudaStreamPerThread);
    return q;
}

static outcome per_thread_streams(void)
{
    struct ptds_shared sh;
    pthread_barrier_init(&sh.freed, NULL, 2);
    pthread_barrier_init(&sh.checked, NULL, 2);
    pthread_t w, n;
    pthread_create(&w, NULL, ptds_writer, &sh);
    pthread_create(&n, NULL, ptds_owner, &sh);
    void *q;
    pthread_join(n, &q);
    CUDA_OK(cudaDeviceSynchronize());
    outcome o = {0};
    judge(&o, sh.p, q);
    pthread_barrier_wait(&sh.checked);
    pthread_join(w, NULL);
    pthread_barrier_destroy(&sh.freed);
    pthread_barrier_destroy(&sh.checked);
    CUDA_OK(cudaFree(q));
    return o;
}

// cudaFreeAsync(p, a) with a late write still queued on a, then a new block of the same size used
// on another stream b, taken either with a plain cudaMalloc (on_b = 0) or with cudaMallocAsync on
// b (on_b = 1). p is reusable at once on a only, whose order covers the late write; b may take a's
// whole free segment (stream_handover.c), but only after a fence on a has passed. Either way the
// new owner's data must survive the late write.
static outcome free_async_then(int on_b)
{
    cudaStream_t a = make_stream(cudaStreamNonBlocking), b = make_stream(cudaStreamNonBlocking);
    outcome o = {0};
    void *p, *q;
    CUDA_OK(cudaMallocAsync(&p, N, a));
    CUDA_OK(fakecuda_stream_hold(a, 1));
    late_write(p, a);
    CUDA_OK(cudaFreeAsync(p, a));
    if (on_b)
        CUDA_OK(cudaMallocAsync(&q, N, b));
    else
        CUDA_OK(cudaMalloc(&q, N));
    new_owner_writes(q, b);
    CUDA_OK(cudaDeviceSynchronize());
    judge(&o, p, q);
    if (on_b) {
        CUDA_OK(fakecuda_stream_hold(a, 0));
        CUDA_OK(cudaFreeAsync(q, b));
    } else {
        CUDA_OK(cudaFree(q));
    }
    CUDA_OK(cudaStreamDestroy(a));
    CUDA_OK(cudaStreamDestroy(b));
    return o;
}

static outcome free_async_then_malloc(void) { return free_async_then(0); }
static outcome free_async_then_other_stream(void) { return free_async_then(1); }

// A graph whose captured work writes p, launched on a (held), p freed right after the launch.
static outcome graph_launch(void)
{
    cudaStream_t cap = make_stream(cudaStreamNonBlocking), a = make_stream(cudaStreamNonBlocking),
                 b = make_stream(cudaStreamNonBlocking);
    outcome o = {0};
    void *p, *q;
    CUDA_OK(cudaMalloc(&p, N));
    CUDA_OK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeRelaxed));
    late_write(p, cap);
    cudaGraph_t g;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamEndCapture(cap, &g));
    CUDA_OK(cudaGraphInstantiate(&exec, g, 0));
    CUDA_OK(fakecuda_stream_hold(a, 1));
    CUDA_OK(cudaGraphLaunch(exec, a));
    CUDA_OK(cudaFree(p));
    CUDA_OK(cudaMalloc(&q, N));
    new_owner_writes(q, b);
    CUDA_OK(cudaDeviceSynchronize());
    judge(&o, p, q);
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(g));
    CUDA_OK(cudaFree(q));
    CUDA_OK(cudaStreamDestroy(cap));
    CUDA_OK(cudaStreamDestroy(a));
    CUDA_OK(cudaStreamDestroy(b));
    return o;
}

// The CPU runs ahead: MANY blocks written late on one held stream and freed, then MANY new owners.
static outcome many_in_flight(void)
{
    cudaStream_t a = make_stream(cudaStreamNonBlocking), b = make_stream(cudaStreamNonBlocking);
    CUDA_OK(fakecuda_stream_hold(a, 1));
    void *p[MANY], *q[MANY];
    for (int i = 0; i < MANY; i++) {
        CUDA_OK(cudaMalloc(&p[i], N));
        late_write(p[i], a);
        CUDA_OK(cudaFree(p[i]));
    }
    for (int i = 0; i < MANY; i++) {
        CUDA_OK(cudaMalloc(&q[i], N));
        CUDA_OK(cudaMemsetAsync(q[i], NEW, N, b));
    }
    CUDA_OK(cudaStreamSynchronize(b));
    CUDA_OK(cudaDeviceSynchronize());
    outcome o = {0};
    for (int i = 0; i < MANY; i++) {
        int was_freed = 0;
        for (int j = 0; j < MANY; j++)
            was_freed |= q[i] == p[j];
        o.owners++;
        o.reused += was_freed;
        o.clobbered += !ptest_all_bytes(q[i], N, NEW);
    }
    for (int i = 0; i < MANY; i++)
        CUDA_OK(cudaFree(q[i]));
    CUDA_OK(cudaStreamDestroy(a));
    CUDA_OK(cudaStreamDestroy(b));
    return o;
}

// Fenced frees of a small size: the rule tries its return to ordered every few of them.
static void fenced_pairs(int n)
{
    for (int i = 0; i < n; i++) {
        void *t;
        CUDA_OK(cudaMalloc(&t, 4096));
        CUDA_OK(cudaFree(t));
    }
}

// A destroyed stream's last work still writes p (a slow kernel) while the program frees other
// blocks: the rule must not return to ordered before that work has run, or p, freed afterwards,
// would go at once to a new owner on the legacy stream, which is not ordered after it.
static outcome destroyed_stream_busy(void)
{
    cudaStream_t a = make_stream(cudaStreamNonBlocking);
    outcome o = {0};
    void *p, *q;
    CUDA_OK(cudaMalloc(&p, N));
    fakecuda_delayed_fill(p, OLD, N, a, 300000);  // runs 0.3 s, far longer than what follows
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaStreamDestroy(a));
    fenced_pairs(256);
    CUDA_OK(cudaFree(p));
    CUDA_OK(cudaMalloc(&q, N));
    new_owner_writes(q, cudaStreamLegacy);
    CUDA_OK(cudaDeviceSynchronize());
    judge(&o, p, q);
    CUDA_OK(cudaFree(q));
    return o;
}

// Back to ordered after a stream came and went, p is freed at once with a late write still held
// on the legacy stream; then a new stream appears and its owner gets p: the switch's
// synchronisation must run the late write first, as at the first switch.
static outcome return_then_new_stream(void)
{
    CUDA_OK(cudaStreamDestroy(make_stream(cudaStreamNonBlocking)));
    fenced_pairs(256);
    outcome o = {0};
    void *p, *q;
    CUDA_OK(cudaMalloc(&p, N));
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 1));
    late_write(p, cudaStreamLegacy);
    CUDA_OK(cudaFree(p));
    cudaStream_t b = make_stream(cudaStreamNonBlocking);
    CUDA_OK(cudaMalloc(&q, N));
    new_owner_writes(q, b);
    CUDA_OK(cudaDeviceSynchronize());
    judge(&o, p, q);
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 0));
    CUDA_OK(cudaFree(q));
    CUDA_OK(cudaStreamDestroy(b));
    return o;
}

// A blocking stream only: fences are barriers, so p, freed while a held legacy write still
// targets it, goes to a new owner as soon as a miss records its fence. The new owner then works
// on a non-blocking stream created afterwards, which no barrier orders: its creation must first
// let the held write finish.
static outcome barrier_then_nonblocking(void)
{
    cudaStream_t a = make_stream(cudaStreamDefault);
    outcome o = {0};
    void *p, *filler, *q;
    CUDA_OK(cudaMalloc(&p, N));
    CUDA_OK(cudaMalloc(&filler, N));  // the rest of p's segment
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 1));
    late_write(p, cudaStreamLegacy);
    CUDA_OK(cudaFree(p));
    CUDA_OK(cudaMalloc(&q, N));  // a miss: the batch's fence is recorded, a barrier
    cudaStream_t b = make_stream(cudaStreamNonBlocking);
    new_owner_writes(q, b);
    CUDA_OK(cudaDeviceSynchronize());
    judge(&o, p, q);
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 0));
    CUDA_OK(cudaFree(q));
    CUDA_OK(cudaFree(filler));
    CUDA_OK(cudaStreamDestroy(b));
    CUDA_OK(cudaStreamDestroy(a));
    return o;
}

// Orders at reuse (preload/cuda/fence_order.c): a large block (past the thread's own batches)
// freed while a held write still targets it joins the free set at once, and the next allocation
// takes it back behind one order. The new owner's write is queued and given 300 ms to run (it
// does, unordered) before the held write is let go: without the order it would run first and be
// overwritten. `nonblocking` 0: writer and owner on blocking streams of their own (the order is an
// event on the legacy stream); 1: the writer on the legacy stream, the owner on an idle
// non-blocking stream (a context event and a context wait).
#define LARGE ((size_t)8 << 20)
static outcome reuse_order(int nonblocking)
{
    cudaStream_t a = nonblocking ? cudaStreamLegacy : make_stream(cudaStreamDefault);
    cudaStream_t b = make_stream(nonblocking ? cudaStreamNonBlocking : cudaStreamDefault);
    outcome o = {0};
    void *p, *q;
    CUDA_OK(cudaMalloc(&p, LARGE));
    CUDA_OK(cudaMemset(p, 0, LARGE));
    CUDA_OK(fakecuda_stream_hold(a, 1));
    fakecuda_delayed_fill(p, OLD, LARGE, a, 0);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaFree(p));
    CUDA_OK(cudaMalloc(&q, LARGE));
    CUDA_OK(cudaMemsetAsync(q, NEW, LARGE, b));
    for (int i = 0; i < 300 && cudaStreamQuery(b) == cudaErrorNotReady; i++)
        usleep(1000);
    CUDA_OK(fakecuda_stream_hold(a, 0));
    CUDA_OK(cudaDeviceSynchronize());
    o.owners = 1;
    o.reused = q == p;
    o.clobbered = !ptest_all_bytes(q, LARGE, NEW);
    CUDA_OK(cudaFree(q));
    if (!nonblocking)
        CUDA_OK(cudaStreamDestroy(a));
    CUDA_OK(cudaStreamDestroy(b));
    return o;
}

static outcome reuse_order_blocking(void) { return reuse_order(0); }
static outcome reuse_order_nonblocking(void) { return reuse_order(1); }

static const struct {
    const char *name;
    outcome (*run)(void);
} scenarios[] = {
    {"blocking-streams", blocking_streams},
    {"legacy-then-nonblocking", legacy_then_nonblocking},
    {"nonblocking-then-legacy", nonblocking_then_legacy},
    {"one-stream", one_stream},
    {"driver-stream", driver_stream},
    {"per-thread-streams", per_thread_streams},
    {"free-async-then-malloc", free_async_then_malloc},
    {"free-async-then-other-stream", free_async_then_other_stream},
    {"graph-launch", graph_launch},
    {"many-in-flight", many_in_flight},
    {"destroyed-stream-busy", destroyed_stream_busy},
    {"return-then-new-stream", return_then_new_stream},
    {"barrier-then-nonblocking", barrier_then_nonblocking},
    {"reuse-order-blocking", reuse_order_blocking},
    {"reuse-order-nonblocking", reuse_order_nonblocking},
};

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[2], "intact") && strcmp(argv[2], "clobbered"))) {
        fprintf(stderr, "usage: %s SCENARIO intact|clobbered\n", argv[0]);
        return 2;
    }
    ptest_api api = ptest_get_api();
    CHECK(api.is_active() == 1, "the preload is active (%s)", api.config_string());
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
        if (strcmp(scenarios[i].name, argv[1]))
            continue;
        outcome o = scenarios[i].run();
        printf("%s: %d new owner(s), %d got a freed block back, %d clobbered\n", argv[1], o.owners,
               o.reused, o.clobbered);
        if (!strcmp(argv[2], "intact"))
            CHECK(o.clobbered == 0, "no new owner's data was overwritten by work queued before a free");
        else
            CHECK(o.clobbered > 0 && o.reused > 0,
                  "the late write clobbered a reused block: this scenario detects early reuse");
        return 0;
    }
    fprintf(stderr, "%s: unknown scenario '%s'\n", argv[0], argv[1]);
    return 2;
}
