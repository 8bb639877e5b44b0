// SPDX-License-Identifier: MIT
// Context fences (preload/context_fences.h): one cuCtxRecordEvent per device covers every stream,
// where the lazy coverage asked the non-blocking streams one by one. Real programs under the
// preload on the fake CUDA, whose context events cover every stream of the device and refuse,
// invalidating it, while a capture runs (as the H100 showed).
//
//   fence_context idle-pool MODE  32 idle non-blocking streams (PyTorch's pool), the legacy stream
//                 held so that fences pass only when waited for: 400 fenced pairs, each block
//                 written late on the legacy stream. MODE context: no stream is ever asked and
//                 context events are recorded; MODE per-stream (CCI_CONTEXT_FENCES=0): the
//                 streams are asked and no context event is recorded. Either way every new
//                 owner's data is intact and the pool does not grow.
//   one-order     8 idle streams, the legacy stream held: while an order's target is pending the
//                 host waits for that target before it orders the next fence wanted (one order
//                 at a time on the GPU; orders at reuse off).
//   reuse-order   the same with orders at reuse: the frees skip their fences, the next
//                 allocation orders, and the host never waits.
//   busy-once     orders at reuse stop for good once a side stream was found busy.
//   capture-race  a thread captures in global mode, 20 times, while another allocates and frees
//                 (fenced) without pause: every capture must survive, because a context event
//                 is recorded only inside the capture gate with no capture underway.
//   foreign       a stream created in a context of the program's own (cuCtxCreate): context
//                 fences stop, and the pool's fences look at each stream from then on.
//   unseen        a capture begun behind the layer's back (no wrapper saw it): the first context
//                 event recorded during it is refused and context fences stop for good. The
//                 capture is lost (the driver invalidates it), as it would be by the per-stream
//                 looks' questions on the program's threads. On a driver whose every capture
//                 begin we wrap this cannot happen; on a newer one context fences are never used.
#include "fake_cuda_driver.h"

#include <pthread.h>
#include <stdatomic.h>

#include "ptest.h"

#define POOL 32
#define N ((size_t)1 << 16)
// Small segments (2 MiB) the pool may grow by for a thread's own fenced batches (tcache_impl.h's
// HELD_MAX_BYTES, 16 MiB) before they go back to the allocator's policy.
#define KEPT_SEGMENTS 8
#define PAIRS 400

static cudaStream_t pool[POOL];

// PAIRS fenced pairs, the legacy stream held: each block gets a late write from its old owner on
// the held legacy stream, is freed, and the next allocation's owner writes its own byte on a pool
// stream and waits for that stream only. The last KEEP owners keep their blocks until the legacy
// stream is released: a block handed out before its old write was ordered first is clobbered then.
#define KEEP 8
static void held_pairs(void)
{
    void *kept[KEEP];
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 1));
    for (int i = 0; i < PAIRS; i++) {
        void *p, *q;
        CUDA_OK(cudaMalloc(&p, N));
        CUDA_OK(cudaMemsetAsync(p, 0xEE, N, cudaStreamLegacy));  // the old owner's late write
        CUDA_OK(cudaFree(p));
        CUDA_OK(cudaMalloc(&q, N));
        cudaStream_t s = pool[i % POOL];
        CUDA_OK(cudaMemsetAsync(q, 1 + i % 100, N, s));
        CUDA_OK(cudaStreamSynchronize(s));
        if (i >= PAIRS - KEEP)
            kept[i - (PAIRS - KEEP)] = q;
        else
            CUDA_OK(cudaFree(q));
    }
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 0));
    CUDA_OK(cudaDeviceSynchronize());
    int intact = 0;
    for (int k = 0; k < KEEP; k++) {
        int i = PAIRS - KEEP + k;
        intact += ptest_all_bytes(kept[k], N, (unsigned char)(1 + i % 100));
        CUDA_OK(cudaFree(kept[k]));
    }
    CHECK(intact == KEEP, "the last %d owners' data intact after the old owners' late writes ran (%d)", KEEP,
          intact);
}

static void idle_pool(const char *mode)
{
    int ctx = !strcmp(mode, "context");
    ptest_make_pool(pool, POOL);
    struct fakecu_event_calls c0 = ptest_event_calls();
    unsigned long long allocs0 = fakecuda_device_allocs();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    held_pairs();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    // THE ORDER's census of the streams (at most one every 20 ms) is all they are asked.
    unsigned long long census_bound = (unsigned long long)POOL * (2 + (unsigned long long)(ms / 20));
    struct fakecu_event_calls c1 = ptest_event_calls();
    unsigned long long sq = c1.stream_queries - c0.stream_queries, cr = c1.ctx_records - c0.ctx_records;
    printf("%s: %d pairs, %llu stream queries, %llu context records, %llu event records, %llu device "
           "allocations\n", mode, PAIRS, sq, cr, c1.event_records - c0.event_records,
           fakecuda_device_allocs() - allocs0);
    if (ctx)
        CHECK(sq <= census_bound && cr > 0, "context fences: the %d idle streams asked only by the order's "
              "census (%llu questions in %.0f ms, at most %llu), %llu context events recorded", POOL, sq, ms,
              census_bound, cr);
    else
        // (Each fence asks every stream; the thread's own batches record one fence a batch, so the
        // count is not compared with the census bound, which grows with the run's time.)
        CHECK(sq >= POOL && cr == 0, "per-stream fences: the streams asked (%llu questions), "
              "no context event (%llu)", sq, cr);
    // (Beyond the thread's own fenced batches, which the pool may grow for once: tcache_fenced.c.)
    CHECK(fakecuda_device_allocs() - allocs0 <= 1 + KEPT_SEGMENTS, "the pool did not grow (%llu device allocations)",
          fakecuda_device_allocs() - allocs0);
    for (int i = 0; i < POOL; i++)
        CUDA_OK(cudaStreamDestroy(pool[i]));
}

// ---- one-order ----

// 8 idle non-blocking streams (more than 4), the legacy stream held, the new owners' work queued on
// the legacy stream too, so nothing demands the held work but a host wait: while the last order's
// target has not passed, the host waits for it before the next order, so orders and host waits
// alternate (the host cannot run ever further ahead of the GPU). Run with CCI_REUSE_ORDERS=0: with
// orders at reuse (`reuse` set) the frees skip their fences, and the host never waits at all.
static void one_order(int reuse)
{
    ptest_api api = ptest_get_api();
    ptest_make_pool(pool, 8);
    cci_stats before = ptest_stats(&api, 0);
    struct fakecu_event_calls c0 = ptest_event_calls();
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 1));
    for (int i = 0; i < PAIRS; i++) {
        void *p, *q;
        CUDA_OK(cudaMalloc(&p, N));
        CUDA_OK(cudaMemsetAsync(p, 0xEE, N, cudaStreamLegacy));
        CUDA_OK(cudaFree(p));
        CUDA_OK(cudaMalloc(&q, N));
        CUDA_OK(cudaMemsetAsync(q, 0x11, N, cudaStreamLegacy));
        CUDA_OK(cudaFree(q));
    }
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 0));
    CUDA_OK(cudaDeviceSynchronize());
    cci_stats after = ptest_stats(&api, 0);
    unsigned long long orders = ptest_event_calls().ctx_waits - c0.ctx_waits;
    unsigned long long waits = after.num_fence_waits - before.num_fence_waits;
    unsigned long long catch_ups = after.num_fence_catch_ups - before.num_fence_catch_ups;
    printf("one-order: %d pairs, %llu context waits (orders), %llu host waits for the last order, "
           "%llu for a fence\n", PAIRS, orders, catch_ups, waits);
    if (reuse) {
        unsigned long long at_reuse = after.fence_reuse_orders - before.fence_reuse_orders;
        CHECK(at_reuse > 0 && catch_ups == 0 && waits == 0, "orders at reuse (%llu) and no host wait "
              "(%llu for the last order, %llu for a fence)", at_reuse, catch_ups, waits);
        // (Most of these small frees stay with the thread behind its own fences: tcache_fenced.c.)
        CHECK(after.fence_reuse_frees > before.fence_reuse_frees, "frees skipped their fences");
    } else {
        // (Not orders <= catch_ups + waits + 1: on the fake, the wait that an order queues on an
        // idle stream demands the held work when that stream's worker reaches it, which a GPU
        // would not do.)
        CHECK(orders > 0 && catch_ups > 0, "an order outstanding made the host wait for it before "
              "ordering again: %llu orders, %llu waits for the last order", orders, catch_ups);
    }
    for (int i = 0; i < 8; i++)
        CUDA_OK(cudaStreamDestroy(pool[i]));
}

// ---- busy-once ----

// Large fenced frees (past the thread's own batches) with two idle non-blocking streams skip their
// fences (orders at reuse); once a census has found one of the streams busy, they never do again,
// even with both idle: a program that overlaps work across streams keeps its fences.
static unsigned long long large_frees(int n)
{
    ptest_api api = ptest_get_api();
    unsigned long long before = ptest_stats(&api, 0).fence_reuse_frees;
    for (int i = 0; i < n; i++) {
        void *p;
        CUDA_OK(cudaMalloc(&p, (size_t)8 << 20));
        CUDA_OK(cudaFree(p));
        usleep(25000);  // past the census's 20 ms
    }
    return ptest_stats(&api, 0).fence_reuse_frees - before;
}

static void busy_once(void)
{
    ptest_make_pool(pool, 2);
    CHECK(large_frees(3) == 3, "idle side streams: the frees skipped their fences");
    void *w;
    CUDA_OK(cudaMalloc(&w, N));
    CUDA_OK(fakecuda_stream_hold(pool[0], 1));
    CUDA_OK(cudaMemsetAsync(w, 1, N, pool[0]));
    unsigned long long while_busy = large_frees(3);
    CUDA_OK(fakecuda_stream_hold(pool[0], 0));
    CUDA_OK(cudaDeviceSynchronize());
    unsigned long long after = large_frees(3);
    printf("busy-once: %llu frees skipped their fence while a side stream was busy, %llu after\n", while_busy,
           after);
    CHECK(while_busy == 0 && after == 0, "once a side stream was seen busy no free skips its fence "
          "(%llu while busy, %llu after)", while_busy, after);
    CUDA_OK(cudaFree(w));
    for (int i = 0; i < 2; i++)
        CUDA_OK(cudaStreamDestroy(pool[i]));
}

// ---- capture-race ----

static atomic_int captures_done;

static void *capturer(void *arg)
{
    (void)arg;
    cudaStream_t s = ptest_stream(cudaStreamNonBlocking);
    void *scratch;
    CUDA_OK(cudaMalloc(&scratch, N));
    int survived = 0;
    for (int c = 0; c < 20; c++) {
        CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        CUDA_OK(cudaMemsetAsync(scratch, c, N, s));
        ptest_sleep_ms(2);  // the other thread's frees and fences meanwhile
        cudaGraph_t g = NULL;
        cudaError_t e = cudaStreamEndCapture(s, &g);
        survived += e == cudaSuccess;
        if (g)
            CUDA_OK(cudaGraphDestroy(g));
        // Between captures, until the other thread has recorded a context event (at most 50 ms:
        // a sanitizer build is slow), so that records and capture begins interleave.
        unsigned long long seen = ptest_event_calls().ctx_records;
        for (int w = 0; w < 50 && ptest_event_calls().ctx_records == seen; w++)
            ptest_sleep_ms(1);
    }
    CHECK(survived == 20, "all 20 global-mode captures survived the other thread's fences (%d)", survived);
    CUDA_OK(cudaFree(scratch));
    CUDA_OK(cudaStreamDestroy(s));
    atomic_store(&captures_done, 1);
    return NULL;
}

static void capture_race(void)
{
    // This thread's frees during another thread's global capture are allowed (relaxed mode).
    CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
    CU_OK(cuThreadExchangeStreamCaptureMode(&relaxed));
    ptest_make_pool(pool, 4);
    struct fakecu_event_calls c0 = ptest_event_calls();
    pthread_t t;
    CHECK(pthread_create(&t, NULL, capturer, NULL) == 0, "capturing thread started");
    unsigned long long pairs = 0;
    void *keep[8] = {0};
    while (!atomic_load(&captures_done)) {
        void *p;
        size_t size = N << (pairs % 7);  // several sizes: misses and poor fits record fences
        CUDA_OK(cudaMalloc(&p, size));
        CUDA_OK(cudaMemsetAsync(p, 1, size, cudaStreamLegacy));
        if (keep[pairs % 8])
            CUDA_OK(cudaFree(keep[pairs % 8]));
        keep[pairs % 8] = p;
        pairs++;
    }
    pthread_join(t, NULL);
    for (int i = 0; i < 8; i++)
        if (keep[i])
            CUDA_OK(cudaFree(keep[i]));
    struct fakecu_event_calls c1 = ptest_event_calls();
    printf("capture-race: %llu allocations beside the captures, %llu context records\n", pairs,
           c1.ctx_records - c0.ctx_records);
    CHECK(c1.ctx_records > c0.ctx_records, "context fences were recorded between the captures (%llu)",
          c1.ctx_records - c0.ctx_records);
    for (int i = 0; i < 4; i++)
        CUDA_OK(cudaStreamDestroy(pool[i]));
}

// ---- foreign, unseen ----

// Fenced pairs with misses (sizes growing), so that fences are recorded. The context records made.
// `during_capture`: no device synchronisation at the end (it would be refused).
static unsigned long long fenced_misses(int during_capture)
{
    unsigned long long before = ptest_event_calls().ctx_records;
    void *keep[64];
    for (int i = 0; i < 64; i++) {
        CUDA_OK(cudaMalloc(&keep[i], N * (size_t)(1 + i % 8)));
        CUDA_OK(cudaMemsetAsync(keep[i], 2, N, cudaStreamLegacy));
    }
    for (int i = 0; i < 64; i++)
        CUDA_OK(cudaFree(keep[i]));
    for (int i = 0; i < 64; i++) {
        CUDA_OK(cudaMalloc(&keep[i], N * (size_t)(9 + i % 8)));
        CUDA_OK(cudaFree(keep[i]));
    }
    if (!during_capture)
        CUDA_OK(cudaDeviceSynchronize());
    return ptest_event_calls().ctx_records - before;
}

static void foreign(void)
{
    ptest_make_pool(pool, 2);
    CHECK(fenced_misses(0) > 0, "context fences recorded while every stream is the primary context's");
    CUdevice dev;
    CUcontext mine, popped;
    CU_OK(cuDeviceGet(&dev, 0));
    CU_OK(cuCtxCreate_v2(&mine, 0, dev));  // current now
    CUstream theirs;
    CU_OK(cuStreamCreate(&theirs, CU_STREAM_NON_BLOCKING));
    CU_OK(cuCtxPopCurrent_v2(&popped));
    unsigned long long later = fenced_misses(0);
    CHECK(later == 0, "after a stream in the program's own context: no context fence (%llu)", later);
    CU_OK(cuCtxPushCurrent_v2(mine));
    CU_OK(cuStreamDestroy_v2(theirs));
    CU_OK(cuCtxPopCurrent_v2(&popped));
    CU_OK(cuCtxDestroy_v2(mine));
    for (int i = 0; i < 2; i++)
        CUDA_OK(cudaStreamDestroy(pool[i]));
}

static void unseen(void)
{
    ptest_make_pool(pool, 2);
    cudaStream_t s = ptest_stream(cudaStreamNonBlocking);
    CHECK(fenced_misses(0) > 0, "context fences recorded before the capture");
    CU_OK(fakecu_stream_begin_capture_unseen((CUstream)s, CU_STREAM_CAPTURE_MODE_RELAXED));
    fenced_misses(1);
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(s, &g);
    CHECK(e == cudaErrorStreamCaptureInvalidated, "the unseen capture met a context event and was "
          "invalidated (error %d): the documented limit", (int)e);
    if (g)
        CUDA_OK(cudaGraphDestroy(g));
    CHECK(fenced_misses(0) == 0, "context fences stopped for good after the refusal");
    CUDA_OK(cudaStreamDestroy(s));
    for (int i = 0; i < 2; i++)
        CUDA_OK(cudaStreamDestroy(pool[i]));
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc == 3 && !strcmp(argv[1], "idle-pool"))
        idle_pool(argv[2]);
    else if (argc == 2 && !strcmp(argv[1], "one-order"))
        one_order(0);
    else if (argc == 2 && !strcmp(argv[1], "reuse-order"))
        one_order(1);
    else if (argc == 2 && !strcmp(argv[1], "busy-once"))
        busy_once();
    else if (argc == 2 && !strcmp(argv[1], "capture-race"))
        capture_race();
    else if (argc == 2 && !strcmp(argv[1], "foreign"))
        foreign();
    else if (argc == 2 && !strcmp(argv[1], "unseen"))
        unseen();
    else {
        fprintf(stderr, "usage: %s idle-pool context|per-stream | one-order | reuse-order | busy-once | capture-race | foreign | unseen\n", argv[0]);
        return 2;
    }
    printf("fence_context %s: passed\n", argv[1]);
    return 0;
}
