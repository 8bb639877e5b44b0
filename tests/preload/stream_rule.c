// SPDX-License-Identifier: MIT
// The stream rule (preload/stream_registry.h) on the fake CUDA:
//   stream_rule ordered  - no stream, one thread: a freed block comes back at once (q == p) and
//                          nothing is synchronised or fenced;
//   stream_rule runtime  - after cudaStreamCreateWithFlags the frees are fenced: fences are
//                          recorded and no device synchronisation makes blocks reusable;
//   stream_rule driver   - the same after a stream created through the driver (cuStreamCreate).
// The return to ordered once every created stream is destroyed (stream_registry.h, THE RETURN):
//   stream_rule return          - a runtime stream, then a driver stream, each destroyed: frees are
//                                 NOW again soon after each destroy, not while the other lives;
//   stream_rule return-recreate - after a return, a new stream switches to fenced again with one
//                                 device synchronisation;
//   stream_rule second-thread   - a second thread allocated: no return after the destroy.
// THE BARRIER (fences reusable once recorded while the legacy stream orders everything):
//   stream_rule barrier         - a blocking stream, the legacy stream held so that no fence can
//                                 pass: pairs never wait and never grow the pool; a non-blocking
//                                 stream then costs one synchronisation, and fences wait again.
#include "fake_cuda_driver.h"

#include <pthread.h>
#include <string.h>

#include "ptest.h"

#define N ((size_t)1 << 16)
// Small segments (2 MiB) the pool may grow by for a thread's own fenced batches (tcache_impl.h's
// HELD_MAX_BYTES, 16 MiB) before they go back to the allocator's policy.
#define KEPT_SEGMENTS 8

static void ordered(const ptest_api *api)
{
    void *p, *q;
    CUDA_OK(cudaMalloc(&p, N));
    CUDA_OK(cudaMemset(p, 1, N));
    fakecuda_reset_counters();
    cci_stats before = ptest_stats(api, 0);
    CUDA_OK(cudaFree(p));
    CUDA_OK(cudaMalloc(&q, N));
    cci_stats after = ptest_stats(api, 0);
    CHECK(q == p, "ordered program: the freed block is reused at once");
    CHECK(fakecuda_ctx_sync_calls() == 0 && after.num_sync_all_streams == before.num_sync_all_streams,
          "ordered program: no device synchronisation");
    CHECK(after.num_fence_records == before.num_fence_records, "ordered program: no fence");
    CUDA_OK(cudaFree(q));
}

// Many frees on a stream-using program: more than the 2 MiB small segment holds, so reuse needs
// fences (the old default needed a device synchronisation per batch).
static void fenced(const ptest_api *api, const char *how)
{
    cci_stats before = ptest_stats(api, 0);
    fakecuda_reset_counters();
    for (int i = 0; i < 1000; i++) {
        void *p;
        CUDA_OK(cudaMalloc(&p, 4096));
        CUDA_OK(cudaFree(p));
    }
    cci_stats after = ptest_stats(api, 0);
    CHECK(after.num_fence_records > before.num_fence_records,
          "%s stream: frees are fenced (%llu fences recorded)", how,
          (unsigned long long)(after.num_fence_records - before.num_fence_records));
    CHECK(after.num_sync_all_streams == before.num_sync_all_streams && fakecuda_ctx_sync_calls() == 0,
          "%s stream: no device synchronisation made blocks reusable", how);
    CHECK(fakecuda_device_allocs() <= 1, "%s stream: blocks were reused (%llu device allocations)",
          how, fakecuda_device_allocs());
}

// Pairs of one size until the freed block has come back at once, with no fence recorded, STREAK
// times in a row (the ordered rule's behaviour: see ordered()). The pairs that took, or -1 when
// that never happened in `limit` pairs.
#define STREAK 32
static int pairs_until_ordered(const ptest_api *api, int limit)
{
    int streak = 0;
    for (int i = 0; i < limit; i++) {
        void *p, *q;
        cci_stats before = ptest_stats(api, 0);
        CUDA_OK(cudaMalloc(&p, N));
        CUDA_OK(cudaFree(p));
        CUDA_OK(cudaMalloc(&q, N));
        CUDA_OK(cudaFree(q));
        cci_stats after = ptest_stats(api, 0);
        streak = q == p && after.num_fence_records == before.num_fence_records ? streak + 1 : 0;
        if (streak == STREAK)
            return i + 1;
    }
    return -1;
}

// A stream with work queued on it (the work runs: nothing holds it).
static cudaStream_t busy_stream(void)
{
    cudaStream_t s;
    void *p;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc(&p, N));
    CUDA_OK(cudaMemsetAsync(p, 3, N, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaFree(p));
    return s;
}

static void returns(const ptest_api *api)
{
    cudaStream_t a = busy_stream();
    CUstream b;
    CU_OK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    CUDA_OK(cudaStreamDestroy(a));
    CHECK(pairs_until_ordered(api, 600) < 0, "one stream of two destroyed: frees stay fenced");
    CU_OK(cuStreamDestroy_v2(b));
    int took = pairs_until_ordered(api, 600);
    CHECK(took > 0, "every created stream destroyed: frees are reusable at once again (after %d pairs)",
          took);
}

static void return_then_recreate(const ptest_api *api)
{
    CUDA_OK(cudaStreamDestroy(busy_stream()));
    CHECK(pairs_until_ordered(api, 600) > 0, "the stream destroyed: ordered again");
    fakecuda_reset_counters();
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(fakecuda_ctx_sync_calls() == 1, "a stream after the return: one synchronisation at the "
          "switch (%llu)", fakecuda_ctx_sync_calls());
    CHECK(pairs_until_ordered(api, 600) < 0, "a stream after the return: fenced again");
    CUDA_OK(cudaStreamDestroy(s));
}

static void *allocate_once(void *unused)
{
    (void)unused;
    void *p;
    CUDA_OK(cudaMalloc(&p, N));
    CUDA_OK(cudaFree(p));
    return NULL;
}

static void second_thread(const ptest_api *api)
{
    cudaStream_t s = busy_stream();
    pthread_t t;
    CHECK(pthread_create(&t, NULL, allocate_once, NULL) == 0, "second thread started");
    pthread_join(t, NULL);
    CUDA_OK(cudaStreamDestroy(s));
    CHECK(pairs_until_ordered(api, 600) < 0, "a second thread allocated: no return to ordered");
}

// 1000 pairs of 64 KiB with the legacy stream held: fences pass only when waited for.
static cci_stats held_pairs(const ptest_api *api)
{
    cci_stats before = ptest_stats(api, 0);
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 1));
    fakecuda_reset_counters();
    for (int i = 0; i < 1000; i++) {
        void *p;
        CUDA_OK(cudaMalloc(&p, N));
        CUDA_OK(cudaMemsetAsync(p, 7, N, cudaStreamLegacy));
        CUDA_OK(cudaFree(p));
    }
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 0));
    cci_stats after = ptest_stats(api, 0);
    after.num_fence_records -= before.num_fence_records;
    after.num_fence_waits -= before.num_fence_waits;
    return after;
}

static void barrier(const ptest_api *api)
{
    cudaStream_t blocking, nonblocking;
    CUDA_OK(cudaStreamCreate(&blocking));
    cci_stats d = held_pairs(api);
    CHECK(d.num_fence_records > 0, "a blocking stream: frees are fenced (%llu fences)",
          (unsigned long long)d.num_fence_records);
    CHECK(d.num_fence_waits == 0 && fakecuda_device_allocs() <= 1,
          "a blocking stream: the fences are barriers: no wait (%llu), no growth (%llu device "
          "allocations)", (unsigned long long)d.num_fence_waits, fakecuda_device_allocs());
    fakecuda_reset_counters();
    CUDA_OK(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking));
    struct fakecu_event_calls c;
    fakecu_get_event_calls(&c);
    CHECK(fakecuda_ctx_sync_calls() == 0 && fakecuda_sync_calls() == 0 && c.stream_waits == 1,
          "a non-blocking stream after barriers: no synchronisation (%llu), it waits for the legacy "
          "stream's earlier work instead (%llu stream waits)", fakecuda_ctx_sync_calls(), c.stream_waits);
    // Ordered on the GPU: by a context wait with context fences (one call whatever the streams),
    // else by a stream wait per non-blocking stream.
    int ctx = ptest_context_fences();
    d = held_pairs(api);
    fakecu_get_event_calls(&c);
    // (The thread keeps its small fenced frees in batches of its own, which the pool may grow for
    // once, up to 8 MiB a thread: src/core/tcache_fenced.c.)
    CHECK(d.num_fence_waits == 0 && (ctx ? c.ctx_waits > 0 && c.ctx_records > 0 : c.stream_waits > 0) &&
          fakecuda_device_allocs() <= 1 + KEPT_SEGMENTS,
          "a non-blocking stream live and idle: no barrier, but each fence wanted is ordered instead "
          "of waited for (%llu waits, %llu stream waits, %llu context waits, %llu device allocations)",
          (unsigned long long)d.num_fence_waits, c.stream_waits, c.ctx_waits, fakecuda_device_allocs());
    // The same with the side stream busy (work held on it): ordered on the GPU too, the legacy
    // stream waiting for a sweep of the side stream, then the side stream for the legacy one.
    void *side;
    CUDA_OK(cudaMalloc(&side, N));
    CUDA_OK(fakecuda_stream_hold(nonblocking, 1));
    CUDA_OK(cudaMemsetAsync(side, 1, N, nonblocking));
    d = held_pairs(api);
    fakecu_get_event_calls(&c);
    CHECK(d.num_fence_waits == 0 && (ctx ? c.ctx_waits > 0 : c.stream_waits >= 2) && fakecuda_device_allocs() <= 1,
          "a non-blocking stream busy: still ordered, not waited for (%llu waits, %llu stream waits, "
          "%llu context waits, %llu device allocations)", (unsigned long long)d.num_fence_waits, c.stream_waits,
          c.ctx_waits, fakecuda_device_allocs());
    CUDA_OK(fakecuda_stream_hold(nonblocking, 0));
    CUDA_OK(cudaStreamSynchronize(nonblocking));
    CUDA_OK(cudaFree(side));
    CUDA_OK(cudaStreamDestroy(nonblocking));
    CUDA_OK(cudaStreamDestroy(blocking));
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s ordered|runtime|driver|return|return-recreate|second-thread|barrier\n",
                argv[0]);
        return 2;
    }
    ptest_api api = ptest_get_api();
    CUDA_OK(cudaSetDevice(0));
    ordered(&api);
    if (!strcmp(argv[1], "runtime")) {
        cudaStream_t s;
        CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        fenced(&api, "runtime");
        CUDA_OK(cudaStreamDestroy(s));
    } else if (!strcmp(argv[1], "driver")) {
        CUstream s;
        CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        fenced(&api, "driver");
        CU_OK(cuStreamDestroy_v2(s));
    } else if (!strcmp(argv[1], "return")) {
        returns(&api);
    } else if (!strcmp(argv[1], "return-recreate")) {
        return_then_recreate(&api);
    } else if (!strcmp(argv[1], "second-thread")) {
        second_thread(&api);
    } else if (!strcmp(argv[1], "barrier")) {
        barrier(&api);
    } else if (strcmp(argv[1], "ordered")) {
        fprintf(stderr, "%s: unknown mode '%s'\n", argv[0], argv[1]);
        return 2;
    }
    printf("stream rule %s: ok\n", argv[1]);
    return 0;
}
