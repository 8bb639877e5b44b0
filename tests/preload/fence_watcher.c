// SPDX-License-Identifier: MIT
// THE WATCHER (preload/fence_watcher.c): a thread of ours that finds fences passed in the
// background, so the program's threads need not ask the driver. Each scenario runs a real
// program under the preload on the fake CUDA with 32 idle non-blocking streams (PyTorch's pool),
// which makes looks dear and starts the watcher.
//
//   fence_watcher SCENARIO [--off]
//
//   answers        a block freed behind held legacy work; once the work has run and the watcher
//                  has had time, the next allocation reuses the block without a single event or
//                  stream question of the program's thread. With --off (CCI_FENCE_WATCHER=0) the
//                  same allocation asks every stream itself.
//   held           a late write held on non-blocking stream W, its block freed and many fences
//                  recorded after it: the watcher must not vouch for the block while W holds it
//                  (a new owner writing on another stream keeps its data).
//   held-legacy    the same with the late write held on the legacy stream: the watcher's marks
//                  must not pass before it.
//   capture-driver captures begun through the driver API (cuStreamBeginCapture, counted by the
//                  layer) while blocks are freed: nothing asks a stream while they run, and once
//                  they have ended the watcher looks again (each begin counted once, each end too).
//   capture-to-graph         the same, begun with the driver's cuStreamBeginCaptureToGraph into a
//                            graph of the program's (CUDA 12.3, XLA's command buffers).
//   capture-to-graph-runtime the same through the runtime's cudaStreamBeginCaptureToGraph, which
//                            calls the driver's: the capture is counted once.
//   capture-v1     the same with the driver's first ABI (mode-less, global), found as an old static
//                  cudart finds it: cuGetProcAddress("cuStreamBeginCapture", version 10000); the
//                  thread in relaxed interaction mode, so that it may free during the capture.
//   capture-unseen the same captures begun behind the layer's back: fences flow and the watcher
//                  looks; the captures survive (it asks each stream whether it captures first).
//   capture-global a capture in global mode begun through the runtime while the watcher polls a
//                  mark: the watcher's questions (relaxed mode) must not break it.
//   ahead          a fence whose legacy part is held back (so are the watcher's marks): once the
//                  watcher has looked ahead, a reuse ordered on the GPU (THE ORDER) asks no stream,
//                  and the new owner's data survives the late write. With --off every stream is
//                  asked.
//   busy-stream    a stream always busy while fences keep coming: the watcher still publishes.
//   fork           a fork while the watcher runs: the child exits at once, the parent goes on.
#include "fake_cuda_driver.h"

#include <pthread.h>
#include <sys/wait.h>

#include "ptest.h"

#define BIG ((size_t)12 << 20)  // a segment of its own: reusing it needs its fence
#define OLD 0xAA
#define NEW 0x5A
#define POOL 32

static cudaStream_t pool[POOL];

static void make_pool(void)
{
    ptest_make_pool(pool, POOL);
}

static cudaStream_t make_stream(void)
{
    return ptest_stream(cudaStreamNonBlocking);
}

// A block freed behind held legacy work, its fence recorded (a miss of another size) and still
// pending: the legacy stream stays held. Returns the block.
static void *freed_behind_held_legacy(void **other)
{
    void *p;
    CUDA_OK(cudaMalloc(&p, BIG));
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 1));
    CUDA_OK(cudaMemsetAsync(p, OLD, BIG, cudaStreamLegacy));
    CUDA_OK(cudaFree(p));
    CUDA_OK(cudaMalloc(other, 2 * BIG));  // a miss: p's batch gets its fence, still pending
    return p;
}

// The same, then the legacy stream released and the watcher given time. Returns the block.
static void *freed_and_settled(void **other)
{
    void *p = freed_behind_held_legacy(other);
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 0));
    // The watcher's round takes microseconds; sanitizers and loaded machines far more. Settled:
    // no event or stream question for 200 ms, after 300 ms at least and 10 s at most.
    ptest_sleep_ms(300);
    struct fakecu_event_calls last = ptest_event_calls();
    for (int quiet = 0, waited = 0; quiet < 4 && waited < 200; waited++) {
        ptest_sleep_ms(50);
        struct fakecu_event_calls now = ptest_event_calls();
        quiet = (now.event_queries == last.event_queries && now.stream_queries == last.stream_queries)
                    ? quiet + 1 : 0;
        last = now;
    }
    return p;
}

static void answers(int off)
{
    make_pool();
    void *other, *p = freed_and_settled(&other);
    struct fakecu_event_calls c0 = ptest_event_calls();
    void *q;
    CUDA_OK(cudaMalloc(&q, BIG));
    struct fakecu_event_calls c1 = ptest_event_calls();
    unsigned long long sq = c1.stream_queries - c0.stream_queries, eq = c1.event_queries - c0.event_queries;
    printf("answers%s: the reuse asked %llu stream and %llu event questions\n", off ? " (off)" : "", sq, eq);
    CHECK(q == p, "the block came back once its fence had passed");
    if (off)
        CHECK(sq >= POOL, "without the watcher the program's thread asked every stream (%llu)", sq);
    else
        CHECK(sq == 0 && eq == 0, "the watcher had found the fence passed: no question asked (%llu, %llu)", sq, eq);
    CUDA_OK(cudaMemsetAsync(q, NEW, BIG, cudaStreamLegacy));
    CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
    CHECK(ptest_all_bytes(q, BIG, NEW), "the new owner's data intact");
    CUDA_OK(cudaFree(q));
    CUDA_OK(cudaFree(other));
}

// A block freed behind held legacy work, its fence recorded by a miss of another size; the
// watcher's marks are held behind the same work, so it cannot publish. The next allocation of the
// block's size orders the reuse on the GPU: its round asks only streams nobody has found idle since
// the fence. Meanwhile no fence is recorded, so the watcher asks no stream (it polls its marks):
// the stream questions counted are the program's.
static void ahead(int off)
{
    make_pool();
    cudaStream_t o = make_stream();
    void *other, *q, *p = freed_behind_held_legacy(&other);
    ptest_sleep_ms(300);  // the watcher looks ahead, then polls its held marks
    struct fakecu_event_calls c0 = ptest_event_calls();
    CUDA_OK(cudaMalloc(&q, BIG));
    unsigned long long sq = ptest_event_calls().stream_queries - c0.stream_queries;
    CUDA_OK(cudaMemsetAsync(q, NEW, BIG, o));
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 0));
    CUDA_OK(cudaStreamSynchronize(o));
    CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
    printf("ahead%s: the block %s, its round asked %llu streams\n", off ? " (off)" : "",
           q == p ? "came back" : "did not come back", sq);
    CHECK(q == p, "the block came back (ordered on the GPU) while its fence was held back");
    if (off)
        CHECK(sq >= POOL, "without the watcher the round asked every stream (%llu)", sq);
    else
        CHECK(sq == 0, "the watcher had looked ahead: the round asked no stream (%llu)", sq);
    CHECK(ptest_all_bytes(q, BIG, NEW), "the new owner's data intact (the late write ran first)");
    CUDA_OK(cudaFree(q));
    CUDA_OK(cudaFree(other));
}

// The late write is held on W, a non-blocking stream (legacy = 0: the watcher's look must find W
// busy), or on the legacy stream (legacy = 1: the watcher's marks must not pass before it). The
// new owner writes on O, created first, and no round of THE ORDER may run before the block comes
// back (the fence's miss is of a size the block cannot serve): had the watcher vouched for the
// fence, the block would come back as a free block and O's write would run before the late one.
// Correctly, it comes back through a round (O then waits for the late write on the GPU).
static void held(int legacy)
{
    make_pool();
    cudaStream_t o = make_stream(), w = legacy ? cudaStreamLegacy : make_stream();
    void *p, *other;
    CUDA_OK(cudaMalloc(&p, BIG));
    CUDA_OK(fakecuda_stream_hold(w, 1));
    fakecuda_delayed_fill(p, OLD, BIG, w, 0);
    CUDA_OK(cudaFree(p));
    CUDA_OK(cudaMalloc(&other, 4 * BIG));  // a miss: p's batch gets its fence
    ptest_sleep_ms(300);  // time for a watcher that would vouch wrongly to do so
    void *q;
    CUDA_OK(cudaMalloc(&q, BIG));
    CUDA_OK(cudaMemsetAsync(q, NEW, BIG, o));
    CUDA_OK(fakecuda_stream_hold(w, 0));
    CUDA_OK(cudaStreamSynchronize(w));
    CUDA_OK(cudaStreamSynchronize(o));
    printf("held%s: the block %s\n", legacy ? "-legacy" : "", q == p ? "came back" : "did not come back");
    CHECK(ptest_all_bytes(q, BIG, NEW), "the new owner's data intact (the late write ran first)");
    CUDA_OK(cudaFree(q));
    CUDA_OK(cudaFree(other));
    ptest_sleep_ms(300);
    void *r;
    CUDA_OK(cudaMalloc(&r, BIG));
    CUDA_OK(cudaMemsetAsync(r, NEW, BIG, o));
    CUDA_OK(cudaStreamSynchronize(o));
    CHECK(ptest_all_bytes(r, BIG, NEW), "a later owner's data intact");
    CUDA_OK(cudaFree(r));
}

// Frees only while each capture runs: each few close a batch (a fence, news for the watcher), and
// the program's thread never asks about a fence (it allocates nothing). unseen = 0: begun with
// cuStreamBeginCapture, which the layer counts: no fence is recorded and no stream asked while it
// runs. unseen = 1: begun behind the layer's back, so fences are recorded and the watcher looks;
// every question to the capturing stream would be the watcher's, which asks first whether the
// stream captures (each capture begins while the watcher is idle: see the loop).
#define CAPTURES 20
#define FREES_PER_CAPTURE 4
// How capture_driver begins its captures.
enum begin_kind { BEGIN_DRIVER, BEGIN_UNSEEN, BEGIN_TO_GRAPH, BEGIN_TO_GRAPH_RUNTIME, BEGIN_V1 };
static const char *const begin_names[] = {"capture-driver", "capture-unseen", "capture-to-graph",
                                          "capture-to-graph-runtime", "capture-v1"};

// A capture into `into` (the to-graph kinds) or into a new graph.
static void begin_capture(enum begin_kind kind, cudaStream_t s, CUgraph into)
{
    switch (kind) {
    case BEGIN_DRIVER:
        CU_OK(cuStreamBeginCapture_v2((CUstream)s, CU_STREAM_CAPTURE_MODE_RELAXED));
        break;
    case BEGIN_UNSEEN:
        CU_OK(fakecu_stream_begin_capture_unseen((CUstream)s, CU_STREAM_CAPTURE_MODE_RELAXED));
        break;
    case BEGIN_TO_GRAPH:
        CU_OK(cuStreamBeginCaptureToGraph((CUstream)s, into, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_RELAXED));
        break;
    case BEGIN_TO_GRAPH_RUNTIME:
        CUDA_OK(cudaStreamBeginCaptureToGraph(s, into, NULL, NULL, 0, cudaStreamCaptureModeRelaxed));
        break;
    case BEGIN_V1: {
        CUresult (*begin_v1)(CUstream) = NULL;
        CUdriverProcAddressQueryResult st;
        CU_OK(cuGetProcAddress_v2("cuStreamBeginCapture", (void **)&begin_v1, 10000, 0, &st));
        CHECK(begin_v1 && st == CU_GET_PROC_ADDRESS_SUCCESS, "the first ABI of cuStreamBeginCapture found");
        CU_OK(begin_v1((CUstream)s));
        break;
    }
    }
}

static void capture_driver(enum begin_kind kind)
{
    int into_graph = kind == BEGIN_TO_GRAPH || kind == BEGIN_TO_GRAPH_RUNTIME;
    if (kind == BEGIN_V1) {  // its captures are global: this thread's frees during them are then allowed
        CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
        CU_OK(cuThreadExchangeStreamCaptureMode(&relaxed));
    }
    make_pool();
    cudaStream_t s = make_stream();
    void *held_blocks[CAPTURES * FREES_PER_CAPTURE];
    for (int i = 0; i < CAPTURES * FREES_PER_CAPTURE; i++)
        CUDA_OK(cudaMalloc(&held_blocks[i], 2 * BIG));
    struct fakecu_event_calls c0 = ptest_event_calls();
    for (int c = 0; c < CAPTURES; c++) {
        // The watcher idle at each begin (everything freed so far published): a look that an
        // unseen begin met half-way could ask the stream between its two questions, a window
        // nothing can close for a capture the layer cannot see (docs/reuse-modes.md).
        ptest_sleep_ms(50);
        CUgraph into = NULL;
        if (into_graph)
            CU_OK(cuGraphCreate(&into, 0));
        begin_capture(kind, s, into);
        for (int i = 0; i < FREES_PER_CAPTURE; i++) {
            CUDA_OK(cudaFree(held_blocks[c * FREES_PER_CAPTURE + i]));
            ptest_sleep_ms(1);
        }
        CUgraph g = NULL;
        CUresult r = cuStreamEndCapture((CUstream)s, &g);
        CHECK(r == CUDA_SUCCESS, "capture %d survived (CUresult %d)", c, (int)r);
        CHECK(!into_graph || g == into, "capture %d ended into the program's graph", c);
        if (g)
            CU_OK(cuGraphDestroy(g));
    }
    struct fakecu_event_calls c1 = ptest_event_calls();
    unsigned long long sq = c1.stream_queries - c0.stream_queries, cr = c1.ctx_records - c0.ctx_records;
    // Frees after the captures are fenced again, and the watcher looks (a begin counted twice,
    // or an end not counted, would leave a capture running for good: no fence, no look).
    // The blocks are taken again (all of the pool), freed, and one more wanted: only the frees'
    // fences can give it without growing the pool.
    for (int i = 0; i < CAPTURES * FREES_PER_CAPTURE; i++)
        CUDA_OK(cudaMalloc(&held_blocks[i], 2 * BIG));
    for (int i = 0; i < CAPTURES * FREES_PER_CAPTURE; i++)
        CUDA_OK(cudaFree(held_blocks[i]));
    void *q;
    CUDA_OK(cudaMalloc(&q, 2 * BIG));
    ptest_sleep_ms(200);
    struct fakecu_event_calls c2 = ptest_event_calls();
    unsigned long long sq_after = c2.stream_queries - c1.stream_queries, cr_after = c2.ctx_records - c1.ctx_records;
    printf("%s: %d captures, %llu stream queries and %llu context records meanwhile, %llu and %llu after "
           "them\n", begin_names[kind], CAPTURES, sq, cr, sq_after, cr_after);
    if (kind == BEGIN_UNSEEN)
        CHECK(sq > 0, "the watcher looked while the captures ran (%llu questions)", sq);
    else
        CHECK(sq == 0 && cr == 0, "a counted capture: no stream was asked and no context event recorded "
              "while it ran (%llu, %llu)", sq, cr);
    if (ptest_context_fences())  // (the meson tests set CCI_CONTEXT_FENCES=0 for the watcher's)
        CHECK(cr_after > 0, "context fences were recorded once the captures had ended (%llu)", cr_after);
    else
        CHECK(sq_after > 0, "fences were looked at once the captures had ended (%llu questions)", sq_after);
    CUDA_OK(cudaFree(q));
}

// A capture in global mode begun through the runtime while the watcher polls its mark (held
// behind legacy work): a question from any thread not in relaxed mode would break it.
static void capture_global(void)
{
    make_pool();
    cudaStream_t s = make_stream();
    void *p, *other, *g;
    CUDA_OK(cudaMalloc(&g, BIG));
    CUDA_OK(cudaMalloc(&p, BIG));
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 1));
    CUDA_OK(cudaMemsetAsync(p, OLD, BIG, cudaStreamLegacy));
    CUDA_OK(cudaFree(p));
    CUDA_OK(cudaMalloc(&other, 2 * BIG));  // the fence: the watcher marks, then polls its mark
    ptest_sleep_ms(50);
    for (int c = 0; c < 5; c++) {
        CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        CUDA_OK(cudaMemsetAsync(g, NEW, BIG, s));
        ptest_sleep_ms(10);  // the watcher polls meanwhile
        cudaGraph_t graph = NULL;
        cudaError_t e = cudaStreamEndCapture(s, &graph);
        CHECK(e == cudaSuccess, "global capture %d survived the watcher's polls (error %d)", c, (int)e);
        if (graph)
            CUDA_OK(cudaGraphDestroy(graph));
    }
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 0));
    CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
    CUDA_OK(cudaFree(other));
    CUDA_OK(cudaFree(g));
}

// Stream B always busy (each item of its work sleeps 2 ms on the fake's worker, one queued per
// iteration of about 1 ms, so its backlog grows) while blocks are freed and fences recorded faster
// than a sweep on B passes. Allocations hit spare free blocks, so the program's thread asks only in
// passing: every batch that becomes reusable during the loop is one the watcher published. It
// must publish while fences keep coming: a round that took a new target each time would sweep B
// anew each time and never publish until the fences stop.
#define BUSY_ITERS 160
static void busy_item(void *unused)
{
    (void)unused;
    ptest_sleep_ms(2);
}

static void busy_stream(void)
{
    ptest_api api = ptest_get_api();
    make_pool();
    cudaStream_t b = make_stream();
    void *spare[BUSY_ITERS + 16];
    for (int i = 0; i < BUSY_ITERS + 16; i++)
        CUDA_OK(cudaMalloc(&spare[i], BIG));
    for (int i = 0; i < BUSY_ITERS + 16; i++)
        CUDA_OK(cudaFree(spare[i]));
    CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
    ptest_sleep_ms(300);  // every spare published and reusable
    void *p;
    CUDA_OK(cudaMalloc(&p, BIG));  // a hit; its tick completes whatever was published
    CUDA_OK(cudaFree(p));
    cci_stats st0 = ptest_stats(&api, 0);
    for (int i = 0; i < BUSY_ITERS; i++) {
        CU_OK(fakecu_launch((CUstream)b, 0, busy_item, NULL, NULL));
        CUDA_OK(cudaMalloc(&p, BIG));
        CUDA_OK(cudaFree(p));
        ptest_sleep_ms(1);
    }
    cci_stats st1 = ptest_stats(&api, 0);
    int64_t waiting = st1.active_bytes[CCI_POOL_ALL].current - st1.allocated_bytes[CCI_POOL_ALL].current;
    printf("busy-stream: %llu fences during the loop, %lld MiB of %d MiB freed still waiting, %llu device allocations\n",
           (unsigned long long)(st1.num_fence_records - st0.num_fence_records), (long long)(waiting >> 20),
           BUSY_ITERS * (int)(BIG >> 20), (unsigned long long)(st1.num_device_alloc - st0.num_device_alloc));
    CHECK(st1.num_fence_records - st0.num_fence_records >= 3, "fences kept coming during the loop");
    // Each publication waits for B's sweep, whose wait grows with B's backlog (on the fake, f4ab74d:
    // 54 % of the freed bytes still waited after the loop; 100 % with a new target each round).
    CHECK(waiting <= (int64_t)(BUSY_ITERS * 3 / 4) * (int64_t)BIG,
          "the watcher published while B stayed busy: at most 3/4 of the freed bytes still wait");
    CUDA_OK(cudaStreamSynchronize(b));
}

static void fork_child(void)
{
    make_pool();
    void *other, *p = freed_and_settled(&other), *q;
    // The block back first, so no fence is pending at the fork: a child forgets the parent's
    // pending fences without releasing them (their events are the parent's), which a leak
    // checker in the child would report.
    CUDA_OK(cudaMalloc(&q, BIG));
    CHECK(q == p, "the block came back before the fork");
    pid_t pid = fork();
    if (pid == 0)
        exit(0);  // atexit handlers run: the parent's watcher is not the child's to stop
    CHECK(pid > 0, "forked");
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "the child exited cleanly while the parent's watcher ran");
    CUDA_OK(cudaFree(q));
    ptest_sleep_ms(300);
    void *r;
    CUDA_OK(cudaMalloc(&r, BIG));
    CHECK(r == p, "the parent goes on: its watcher found the block's new fence passed");
    CUDA_OK(cudaFree(r));
    CUDA_OK(cudaFree(other));
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: fence_watcher answers|held|held-legacy|capture-driver|capture-unseen|capture-to-graph|capture-to-graph-runtime|capture-v1|capture-global|ahead|busy-stream|fork [--off]\n");
        return 2;
    }
    const char *sc = argv[1];
    int off = argc > 2 && !strcmp(argv[2], "--off");
    if (!strcmp(sc, "answers"))
        answers(off);
    else if (!strcmp(sc, "held"))
        held(0);
    else if (!strcmp(sc, "held-legacy"))
        held(1);
    else if (!strcmp(sc, "capture-driver"))
        capture_driver(BEGIN_DRIVER);
    else if (!strcmp(sc, "capture-unseen"))
        capture_driver(BEGIN_UNSEEN);
    else if (!strcmp(sc, "capture-to-graph"))
        capture_driver(BEGIN_TO_GRAPH);
    else if (!strcmp(sc, "capture-to-graph-runtime"))
        capture_driver(BEGIN_TO_GRAPH_RUNTIME);
    else if (!strcmp(sc, "capture-v1"))
        capture_driver(BEGIN_V1);
    else if (!strcmp(sc, "capture-global"))
        capture_global();
    else if (!strcmp(sc, "ahead"))
        ahead(off);
    else if (!strcmp(sc, "busy-stream"))
        busy_stream();
    else if (!strcmp(sc, "fork"))
        fork_child();
    else {
        fprintf(stderr, "fence_watcher: unknown scenario %s\n", sc);
        return 2;
    }
    return 0;
}
