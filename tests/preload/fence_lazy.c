// SPDX-License-Identifier: MIT
// The fence group's lazy coverage of non-blocking streams (preload/cuda/fence_looks.c): a
// fence record puts one event on the legacy stream; a non-blocking stream that existed at the
// record is looked at only once the legacy part has passed (idle now: covered; busy: one shared
// "sweep" event). Each scenario runs a real program under the preload on the fake CUDA, with a
// pool of idle non-blocking streams beside the one that matters (PyTorch keeps 32).
//
//   fence_lazy SCENARIO
//
//   sweep-query   a late write held on non-blocking stream W, its block freed: the fence's legacy
//                 part passes, W is busy, so the block must not be reused (the pool grows); once
//                 W has run, the block comes back.
//   sweep-wait    the same with no room to grow: the allocator waits for the fence, which must
//                 wait for W's sweep (the held write runs first), so the new owner's data is kept.
//   burst         many blocks written late on W and freed, one fence each: all share ONE sweep.
//   born-after    a stream created after the record, busy with unrelated work, does not hold the
//                 fence back (it cannot hold work from before the free).
//   threads       several threads free blocks that their own non-blocking streams still write
//                 (a real delay), destroying and creating streams meanwhile: nothing clobbered.
//   keeps-up      the GPU keeps up with the CPU (resnet on the H100): looks asked in passing are
//                 put off until several fences wait, so the idle pool is asked about once per
//                 8 records, not once per record, and the loop still never grows the pool.
//   poor-fits     poor fits that no pending block could improve (frees of another size, kept
//                 apart): asked in passing, so the idle pool is not asked once per record.
//   reset-with-sweep  cudaDeviceReset while a fence waits on a sweep: the dead context's events are
//                 forgotten, and fences, sweeps and reuse work afterwards.
//   poor-fit-idle / poor-fit-busy  a poor fit (a free block three times the request) beside two
//                 pending blocks that fit, in the two newest batches, the fence dear (the pool).
//                 With every side stream idle at the backend's last look the allocation reuses
//                 the older fitting block's batch, the side streams ordered after its fence
//                 instead of a host wait (THE ORDER); with a side stream busy then (a late write held
//                 on W), the newest batches are spared and the poor fit is split instead.
//   count K       the resnet-like pattern for the exit line and the bench suite: many fences,
//                 the CPU K fences ahead of the GPU (the legacy stream held for K records at a
//                 time); prints driver calls per fence record and checks the lazy bound.
// Each safety scenario checks that the block WAS reused after the right event (so it proves the
// path ran) and that no new owner's data was clobbered.
#include "fake_cuda_driver.h"

#include <pthread.h>

#include "ptest.h"

#define BIG ((size_t)12 << 20)  // >= 10 MiB: a segment of its own, so a reuse needs the fence
#define OLD 0xAA
#define NEW 0x5A
#define POOL 32    // idle non-blocking streams, as PyTorch's pool
#define BURST 16
#define STEP ((size_t)2 << 20)

static cudaStream_t pool[POOL];

static void make_pool(void)
{
    ptest_make_pool(pool, POOL);
}

static void drop_pool(void)
{
    for (int i = 0; i < POOL; i++)
        CUDA_OK(cudaStreamDestroy(pool[i]));
}

// The new owner's work: NEW on its stream, finished before any held work is released.
static void new_owner_writes(void *q, cudaStream_t s)
{
    CUDA_OK(cudaMemsetAsync(q, NEW, BIG, s));
    CUDA_OK(cudaStreamSynchronize(s));
}

// Bytes freed but not reusable yet (PyTorch's "active" minus "allocated").
static int64_t waiting_bytes(const ptest_api *api)
{
    cci_stats st = ptest_stats(api, 0);
    return st.active_bytes[CCI_POOL_ALL].current - st.allocated_bytes[CCI_POOL_ALL].current;
}

// A block freed while a late write to it is held on W, then two misses: the first records its
// fence; the second, after the legacy stream has caught up, asks it, finds W busy and records a
// sweep on W. The fence stays pending. Returns the block; *q (2 BIG) and *s2 (3 BIG) are the
// misses' blocks.
static void *pending_behind_sweep(cudaStream_t w, void **q, void **s2)
{
    void *p;
    CUDA_OK(cudaMalloc(&p, BIG));
    CUDA_OK(fakecuda_stream_hold(w, 1));
    fakecuda_delayed_fill(p, OLD, BIG, w, 0);
    CUDA_OK(cudaFree(p));
    CUDA_OK(cudaMalloc(q, 2 * BIG));
    CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
    CUDA_OK(cudaMalloc(s2, 3 * BIG));
    return p;
}

static void sweep_query(void)
{
    ptest_api api = ptest_get_api();
    make_pool();
    cudaStream_t w = ptest_stream(cudaStreamNonBlocking), o = ptest_stream(cudaStreamNonBlocking);
    void *q, *r, *s2;
    // Misses that p cannot serve (so nothing waits): the first records p's fence, the second
    // asks it once its legacy event has passed: W is busy, so it gets a sweep.
    struct fakecu_event_calls c0 = ptest_event_calls();
    void *p = pending_behind_sweep(w, &q, &s2);
    struct fakecu_event_calls c1 = ptest_event_calls();
    CHECK(waiting_bytes(&api) >= (int64_t)BIG,
          "the fence stays pending while W still holds a write to the block (%lld B waiting)",
          (long long)waiting_bytes(&api));
    CHECK(c1.event_records - c0.event_records >= 2, "W got a sweep beside the legacy event");
    new_owner_writes(q, o);
    CUDA_OK(cudaStreamSynchronize(w));  // W's late write runs now, into p only
    CUDA_OK(cudaMalloc(&r, BIG));
    CHECK(r == p, "once W has run, the block comes back (its sweep passed)");
    CHECK(waiting_bytes(&api) == 0, "nothing left waiting");
    new_owner_writes(r, o);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(ptest_all_bytes(r, BIG, NEW) && ptest_all_bytes(q, BIG, NEW),
          "both new owners' data intact");
    CUDA_OK(cudaFree(s2));
    CUDA_OK(cudaFree(q));
    CUDA_OK(cudaFree(r));
    CUDA_OK(cudaStreamDestroy(w));
    CUDA_OK(cudaStreamDestroy(o));
    drop_pool();
}

static void sweep_wait(void)
{
    // FAKECUDA_CAPACITY leaves room for one BIG block only: the allocator must wait.
    make_pool();
    cudaStream_t w = ptest_stream(cudaStreamNonBlocking), o = ptest_stream(cudaStreamNonBlocking);
    void *p, *q;
    CUDA_OK(cudaMalloc(&p, BIG));
    CUDA_OK(fakecuda_stream_hold(w, 1));
    fakecuda_delayed_fill(p, OLD, BIG, w, 0);
    CUDA_OK(cudaFree(p));
    CUDA_OK(cudaMalloc(&q, BIG));
    CHECK(q == p, "with no room to grow, the freed block is handed out after a wait");
    new_owner_writes(q, o);
    CUDA_OK(cudaDeviceSynchronize());  // whatever is still held runs now
    CHECK(ptest_all_bytes(q, BIG, NEW),
          "the new owner's data survived: the wait blocked on W's sweep, not only on the legacy stream");
    CUDA_OK(fakecuda_stream_hold(w, 0));
    CUDA_OK(cudaFree(q));
    CUDA_OK(cudaStreamDestroy(w));
    CUDA_OK(cudaStreamDestroy(o));
    drop_pool();
}

static void burst(void)
{
    ptest_api api = ptest_get_api();
    make_pool();
    cudaStream_t w = ptest_stream(cudaStreamNonBlocking), o = ptest_stream(cudaStreamNonBlocking);
    CUDA_OK(fakecuda_stream_hold(w, 1));
    void *p[BURST], *q[BURST];
    uint64_t records0 = ptest_stats(&api, 0).num_fence_records;
    struct fakecu_event_calls c0 = ptest_event_calls();
    // Growing sizes: no pending block can serve the next request, so nothing waits; each
    // request misses, which closes the batch before it (one fence per freed block).
    for (int i = 0; i < BURST; i++) {
        CUDA_OK(cudaMalloc(&p[i], BIG + (size_t)i * STEP));
        fakecuda_delayed_fill(p[i], OLD, BIG, w, 0);
        CUDA_OK(cudaFree(p[i]));
        // The legacy parts pass at once (as on an idle GPU): only W holds the fences back.
        CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
    }
    for (int i = 0; i < BURST; i++)
        CUDA_OK(cudaMalloc(&q[i], BIG + (size_t)(BURST + i) * STEP));
    struct fakecu_event_calls c1 = ptest_event_calls();
    uint64_t records = ptest_stats(&api, 0).num_fence_records - records0;
    // Events recorded = one legacy event per fence + the sweeps.
    unsigned long long sweeps = c1.event_records - c0.event_records - records;
    printf("burst: %llu fences, %llu sweeps, %llu stream queries\n", (unsigned long long)records,
           sweeps, c1.stream_queries - c0.stream_queries);
    CHECK(records >= BURST, "every freed block got a fence of its own (%llu)",
          (unsigned long long)records);
    CHECK(sweeps >= 1 && sweeps <= 2, "the fences waiting on W share its sweep (%llu sweeps for "
          "%llu fences)", sweeps, (unsigned long long)records);
    int reused = 0;
    for (int i = 0; i < BURST; i++)
        for (int j = 0; j < BURST; j++)
            reused += q[i] == p[j];
    CHECK(reused == 0, "none of the blocks W still writes was handed out");
    for (int i = 0; i < BURST; i++)
        CUDA_OK(cudaMemsetAsync(q[i], NEW, BIG, o));
    CUDA_OK(cudaStreamSynchronize(o));
    CUDA_OK(cudaStreamSynchronize(w));
    for (int i = 0; i < BURST; i++)
        CHECK(ptest_all_bytes(q[i], BIG, NEW), "owner %d's data intact", i);
    for (int i = 0; i < BURST; i++)
        CUDA_OK(cudaFree(q[i]));
    CUDA_OK(cudaStreamDestroy(w));
    CUDA_OK(cudaStreamDestroy(o));
    drop_pool();
}

static void born_after(void)
{
    make_pool();
    void *p, *q, *r;
    CUDA_OK(cudaMalloc(&p, BIG));
    CUDA_OK(cudaMalloc(&q, BIG));
    CUDA_OK(cudaFree(p));
    CUDA_OK(cudaFree(q));
    CUDA_OK(cudaMalloc(&r, 2 * BIG));  // a miss: p and q's fence is recorded (and passes)
    // Born after that record: busy with work that cannot touch p or q.
    cudaStream_t late = ptest_stream(cudaStreamNonBlocking);
    void *mine;
    CUDA_OK(cudaMalloc(&mine, 4096));
    CUDA_OK(fakecuda_stream_hold(late, 1));
    fakecuda_delayed_fill(mine, OLD, 4096, late, 0);
    void *again;
    CUDA_OK(cudaMalloc(&again, BIG));
    CHECK(again == p || again == q, "a stream created after the fence does not hold it back");
    CHECK(!ptest_all_bytes(mine, 4096, OLD), "its held work was not waited for (still held)");
    CUDA_OK(cudaStreamSynchronize(late));
    CUDA_OK(cudaFree(again));
    CUDA_OK(cudaFree(r));
    CUDA_OK(cudaFree(mine));
    CUDA_OK(cudaStreamDestroy(late));
    drop_pool();
}

// Threads at once, each with a writer and an owner stream of its own: late writes (a real delay)
// on the writer, the block freed, a new block written on the owner stream. Fences of every
// thread look at every thread's streams, share sweeps, and see streams destroyed and created
// again (retired events) while they are pending. No owner's data may be clobbered.
#define THREADS 4
#define ITERS 40
#define SMALLER ((size_t)1 << 20)

static void *churn_thread(void *arg)
{
    int id = (int)(intptr_t)arg;
    unsigned char mark = (unsigned char)(0x10 + id);
    cudaStream_t w = ptest_stream(cudaStreamNonBlocking), o = ptest_stream(cudaStreamNonBlocking);
    int clobbered = 0;
    for (int i = 0; i < ITERS; i++) {
        void *p, *q;
        size_t n = SMALLER * (size_t)(1 + (i + id) % 3);
        CUDA_OK(cudaMalloc(&p, n));
        fakecuda_delayed_fill(p, OLD, n, w, 200);
        CUDA_OK(cudaFree(p));
        CUDA_OK(cudaMalloc(&q, n));
        CUDA_OK(cudaMemsetAsync(q, mark, n, o));
        CUDA_OK(cudaStreamSynchronize(o));
        CUDA_OK(cudaStreamSynchronize(w));  // the late write has run by now, wherever it went
        clobbered += !ptest_all_bytes(q, n, mark);
        CUDA_OK(cudaFree(q));
        if (i % 8 == 7) {  // a destroyed writer: its last work is covered by its retired event
            CUDA_OK(cudaStreamDestroy(w));
            w = ptest_stream(cudaStreamNonBlocking);
        }
    }
    CUDA_OK(cudaStreamDestroy(w));
    CUDA_OK(cudaStreamDestroy(o));
    return (void *)(intptr_t)clobbered;
}

static void threads(void)
{
    make_pool();
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, churn_thread, (void *)(intptr_t)i) == 0, "thread %d started", i);
    int clobbered = 0;
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        clobbered += (int)(intptr_t)r;
    }
    CHECK(clobbered == 0, "no owner's data clobbered across %d threads x %d frees (%d clobbered)",
          THREADS, ITERS, clobbered);
    drop_pool();
}

static void count(int ahead)
{
    enum { ROUNDS = 8 };
    ptest_api api = ptest_get_api();
    make_pool();
    void *warm;
    CUDA_OK(cudaMalloc(&warm, BIG));  // the first segment, so that every step below is a miss
    CUDA_OK(cudaFree(warm));
    uint64_t records0 = ptest_stats(&api, 0).num_fence_records;
    struct fakecu_event_calls c0 = ptest_event_calls();
    for (int round = 0; round < ROUNDS; round++) {
        // The GPU is busy with the last `ahead` steps: their fences' legacy events wait.
        CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 1));
        // Growing sizes: every step misses (no pending block can serve it, so nothing waits)
        // and records the fence of the step before.
        for (int step = 0; step < ahead; step++) {
            void *p;
            CUDA_OK(cudaMalloc(&p, BIG + (size_t)step * STEP));
            CUDA_OK(cudaMemsetAsync(p, NEW, 4096, cudaStreamLegacy));
            CUDA_OK(cudaFree(p));
        }
        CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 0));
        CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));  // the GPU catches up
        CHECK(api.empty_cache(0) == 0, "round %d: cache emptied (the next round misses again)", round);
    }
    void *last;
    CUDA_OK(cudaMalloc(&last, BIG));  // the last batch's fence is recorded and asked
    struct fakecu_event_calls c1 = ptest_event_calls();
    double records = (double)(ptest_stats(&api, 0).num_fence_records - records0);
    double sq = (double)(c1.stream_queries - c0.stream_queries);
    double er = (double)(c1.event_records - c0.event_records);
    double eq = (double)(c1.event_queries - c0.event_queries);
    printf("count: %d idle non-blocking streams, CPU %d fences ahead: %.0f fence records; per "
           "record: %.2f cuStreamQuery, %.2f cuEventRecord, %.2f cuEventQuery\n",
           POOL, ahead, records, sq / records, er / records, eq / records);
    CHECK(records >= (double)(ROUNDS * ahead), "one fence per step (%.0f)", records);
    // Idle streams are asked at most once per round, for every fence recorded before it; a
    // round happens when the oldest fence's legacy part has passed, about once per catch-up.
    CHECK(sq <= (double)POOL * (ROUNDS + 1) * 1.5,
          "idle streams asked about once per catch-up, not once per record (%.0f asks)", sq);
    // An order (a wait for reuse answered on the GPU) records one legacy event of its own and
    // makes each idle stream wait for it (a round that swept a busy stream would add a wait of the
    // legacy stream: none here). Until that wait has run a stream answers busy, so a look in
    // between may sweep it: at most once per stream and order. Without orders, no sweep at all.
    unsigned long long sw = c1.stream_waits - c0.stream_waits, orders = sw / POOL;
    CHECK(sw % POOL == 0 && er <= records + (double)orders * (1 + POOL) + 1,
          "no sweeps on idle streams but after an order's waits: one legacy event per record and "
          "per order (%.0f events, %.0f records, %llu orders, %llu stream waits)", er, records, orders, sw);
    CUDA_OK(cudaFree(last));
    drop_pool();
}

// A device reset while a fence waits on a sweep: the reset destroys the context with its streams,
// the held write and the sweep's event. Everything of that context is forgotten (a later fence
// never asks the dead event, the event pool starts afresh), and the allocator goes on: a new
// stream, fenced frees, sweeps and reuse all work after it, and no new owner's data is touched.
static void reset_with_sweep(void)
{
    ptest_api api = ptest_get_api();
    make_pool();  // destroyed by the reset with every other stream of the context
    cudaStream_t w = ptest_stream(cudaStreamNonBlocking);
    void *q, *s2;
    struct fakecu_event_calls c0 = ptest_event_calls();
    (void)pending_behind_sweep(w, &q, &s2);
    struct fakecu_event_calls c1 = ptest_event_calls();
    CHECK(waiting_bytes(&api) >= (int64_t)BIG && c1.event_records - c0.event_records >= 2,
          "before the reset: p's fence pending behind a sweep on W");
    CUDA_OK(cudaDeviceReset());
    CHECK(waiting_bytes(&api) == 0, "the reset forgot the context's blocks, the pending one included");
    // Afresh: a non-blocking stream, a late write held on it, a fenced free, a sweep, then reuse.
    cudaStream_t w2 = ptest_stream(cudaStreamNonBlocking), o = ptest_stream(cudaStreamNonBlocking);
    void *b, *c, *d;
    void *a = pending_behind_sweep(w2, &b, &c);
    CHECK(waiting_bytes(&api) >= (int64_t)BIG, "after the reset: a new fence waits on the new stream's sweep");
    new_owner_writes(b, o);
    CUDA_OK(cudaStreamSynchronize(w2));
    CUDA_OK(cudaMalloc(&d, BIG));
    CHECK(d == a, "after the reset: the block comes back once its sweep passed");
    new_owner_writes(d, o);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(ptest_all_bytes(d, BIG, NEW) && ptest_all_bytes(b, BIG, NEW), "after the reset: data intact");
    CUDA_OK(cudaFree(b));
    CUDA_OK(cudaFree(c));
    CUDA_OK(cudaFree(d));
    CUDA_OK(cudaStreamDestroy(w2));
    CUDA_OK(cudaStreamDestroy(o));
}

// What a loop cost in fences: records, stream questions, and whether the pool grew meanwhile.
typedef struct fence_cost {
    uint64_t records0;
    int64_t reserved0;
    struct fakecu_event_calls c0;
    double records, asks_per_record;
    int64_t reserved;
    uint64_t waits;
} fence_cost;

static fence_cost cost_start(const ptest_api *api)
{
    cci_stats st = ptest_stats(api, 0);
    return (fence_cost){.records0 = st.num_fence_records, .reserved0 = st.reserved_bytes[0].current, .c0 = ptest_event_calls()};
}

// Prints the loop's figures and checks what both scenarios promise: fences were recorded, the
// pool did not grow, and the idle streams were asked at most once per 4 records (one look covers
// every fence recorded before it; without rationing, each record would get a look of its own).
static void cost_end(const ptest_api *api, fence_cost *fc, const char *name, int loops)
{
    struct fakecu_event_calls c1 = ptest_event_calls();
    cci_stats st = ptest_stats(api, 0);
    fc->records = (double)(st.num_fence_records - fc->records0);
    fc->asks_per_record = fc->records ? (double)(c1.stream_queries - fc->c0.stream_queries) / fc->records : 0;
    fc->reserved = st.reserved_bytes[0].current;
    fc->waits = st.num_fence_waits;
    printf("%s: %d idle non-blocking streams, %d loops: %.0f fence records, %.2f cuStreamQuery a "
           "record, %llu waits; reserved %lld -> %lld bytes\n", name, POOL, loops, fc->records,
           fc->asks_per_record, (unsigned long long)fc->waits, (long long)fc->reserved0, (long long)fc->reserved);
    CHECK(fc->records >= loops / 32, "%s: the loop recorded fences (%.0f)", name, fc->records);
    CHECK(fc->reserved == fc->reserved0, "%s: served from free blocks, no growth", name);
    CHECK(fc->asks_per_record <= POOL / 4, "%s: idle streams asked at most once per 4 records (%.2f a record)",
          name, fc->asks_per_record);
}

// The GPU keeps up with the CPU (no work queued): every fence's legacy part has passed by the next
// periodic tick, so without putting looks off every fence would get a look of its own (~POOL
// stream questions a record, what resnet paid on the H100). The steady loop is served from free
// blocks of its exact size (no miss, no poor fit: nothing asks in full), so only the periodic
// ticks ask, in passing.
static void keeps_up(void)
{
    enum { RESERVE = 512, LIVE = 64, FREES = 8192 };
    const size_t sz = 64 << 10;
    ptest_api api = ptest_get_api();
    make_pool();
    // Free blocks of exactly the loop's size, kept apart by live spacers so that they cannot
    // merge: every allocation below is an exact fit (no poor-fit check, which asks in full).
    static void *reserve[2 * RESERVE], *live[LIVE];
    for (int i = 0; i < 2 * RESERVE; i++)
        CUDA_OK(cudaMalloc(&reserve[i], sz));
    for (int i = 0; i < 2 * RESERVE; i += 2)
        CUDA_OK(cudaFree(reserve[i]));
    CUDA_OK(cudaDeviceSynchronize());
    for (int i = 0; i < LIVE; i++)
        CUDA_OK(cudaMalloc(&live[i], sz));
    fence_cost fc = cost_start(&api);
    for (int i = 0; i < FREES; i++) {
        int k = i % LIVE;
        CUDA_OK(cudaFree(live[k]));
        CUDA_OK(cudaMalloc(&live[k], sz));
    }
    cost_end(&api, &fc, "keeps-up", FREES);
    for (int i = 0; i < LIVE; i++)
        CUDA_OK(cudaFree(live[i]));
    for (int i = 1; i < 2 * RESERVE; i += 2)
        CUDA_OK(cudaFree(reserve[i]));
    drop_pool();
}

// Poor fits that no pending block could improve, many streams: every allocation takes a piece of
// a large free block while the frees are of another size, held apart by live neighbours. The
// answer to a poor-fit question could not help such a request, so it is asked in passing (the
// backend may put its look off) and nothing is waited for; before, each one asked in full, and
// with the GPU keeping up every fence got a look of its own.
static void poor_fits(void)
{
    enum { SEGS = 112, FREES = 2048 };  // 21 requests a segment: room for 2352
    const size_t held = 64 << 10, asked = 96 << 10;
    ptest_api api = ptest_get_api();
    make_pool();
    static void *seg[2 * SEGS], *small_blocks[2 * FREES], *got[FREES];
    // Whole free small-pool segments (2 MiB each, two 1 MiB blocks apiece, freed and merged):
    // room for every request below, each of which is then a poor fit (2 MiB >= 2 x 96 KiB).
    for (int i = 0; i < 2 * SEGS; i++)
        CUDA_OK(cudaMalloc(&seg[i], 1 << 20));
    // 64 KiB blocks side by side; every other one is freed below, so no two pending ones touch.
    for (int i = 0; i < 2 * FREES; i++)
        CUDA_OK(cudaMalloc(&small_blocks[i], held));
    for (int i = 0; i < 2 * SEGS; i++)
        CUDA_OK(cudaFree(seg[i]));
    CUDA_OK(cudaDeviceSynchronize());
    fence_cost fc = cost_start(&api);
    for (int i = 0; i < FREES; i++) {
        CUDA_OK(cudaFree(small_blocks[2 * i]));
        CUDA_OK(cudaMalloc(&got[i], asked));
    }
    cost_end(&api, &fc, "poor-fits", FREES);
    for (int i = 0; i < FREES; i++) {
        CUDA_OK(cudaFree(got[i]));
        CUDA_OK(cudaFree(small_blocks[2 * i + 1]));
    }
    drop_pool();
}

// A look at the streams: a fenced free (512 KiB: the small pool, which no request below can use),
// a miss that puts it behind a fence, the legacy stream caught up, a second miss that asks the
// fence in full. With `busy`, a late write is held on W at that moment: the look finds W busy.
static void look_at_streams(cudaStream_t w, int busy, void **keep)
{
    void *x;
    CUDA_OK(cudaMalloc(&x, (size_t)512 << 10));
    if (busy) {
        CUDA_OK(fakecuda_stream_hold(w, 1));
        fakecuda_delayed_fill(x, OLD, (size_t)512 << 10, w, 0);
    }
    CUDA_OK(cudaFree(x));
    CUDA_OK(cudaMalloc(&keep[0], 5 * BIG));
    CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
    CUDA_OK(cudaMalloc(&keep[1], 6 * BIG));
}

static void poor_fit(int busy)
{
    ptest_api api = ptest_get_api();
    make_pool();
    cudaStream_t w = ptest_stream(cudaStreamNonBlocking);
    void *keep[4], *big, *a, *b, *r;
    look_at_streams(w, busy, keep);
    // The GPU is busy from here on: no fence below passes unless the host waits for it.
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 1));
    CUDA_OK(cudaMalloc(&big, 3 * BIG));
    CUDA_OK(cudaMalloc(&a, BIG));
    CUDA_OK(cudaMalloc(&b, BIG));
    CUDA_OK(cudaFreeAsync(big, cudaStreamLegacy));  // reusable at once on the legacy stream
    // Misses that nothing free or pending could hold close a's batch, then b's.
    CUDA_OK(cudaFree(a));
    CUDA_OK(cudaMalloc(&keep[2], 4 * BIG));
    CUDA_OK(cudaFree(b));
    CUDA_OK(cudaMalloc(&keep[3], 4 * BIG));
    uint64_t waits0 = ptest_stats(&api, 0).num_fence_waits;
    struct fakecu_event_calls c0 = ptest_event_calls();
    CUDA_OK(cudaMalloc(&r, BIG));
    struct fakecu_event_calls c1 = ptest_event_calls();
    uint64_t waits = ptest_stats(&api, 0).num_fence_waits - waits0;
    unsigned long long ordered = c1.stream_waits - c0.stream_waits;
    printf("poor-fit-%s: r %s, %llu host waits, %llu stream waits queued\n", busy ? "busy" : "idle",
           r == a ? "= a (its batch reused)" : r == big ? "= the poor fit (split)" : "elsewhere",
           (unsigned long long)waits, ordered);
    if (busy) {
        CHECK(r == big, "a side stream busy at the last look: the newest batches are spared, the poor fit split");
        CHECK(waits == 0 && ordered == 0, "and the host did not wait (%llu waits, %llu stream waits)",
              (unsigned long long)waits, ordered);
    } else {
        CHECK(r == a, "every side stream idle at the last look: the older fitting block's batch reused");
        // THE ORDER: every side stream idle, so the fence is ordered instead of waited for: each
        // live non-blocking stream (the pool and W) waits for its legacy event; the host does not.
        CHECK(waits == 0, "no host wait (%llu)", (unsigned long long)waits);
        CHECK(ordered == POOL + 1, "each of the %d side streams ordered after the fence (%llu)", POOL + 1, ordered);
    }
    CUDA_OK(fakecuda_stream_hold(cudaStreamLegacy, 0));
    CUDA_OK(fakecuda_stream_hold(w, 0));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaFree(r));
    for (int i = 0; i < 4; i++)
        CUDA_OK(cudaFree(keep[i]));
    CUDA_OK(cudaStreamDestroy(w));
    drop_pool();
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("usage: fence_lazy sweep-query|sweep-wait|burst|born-after|threads|keeps-up|poor-fits|"
               "poor-fit-idle|poor-fit-busy|reset-with-sweep|count K\n");
        return 2;
    }
    const char *sc = argv[1];
    if (!strcmp(sc, "sweep-query"))
        sweep_query();
    else if (!strcmp(sc, "sweep-wait"))
        sweep_wait();
    else if (!strcmp(sc, "burst"))
        burst();
    else if (!strcmp(sc, "born-after"))
        born_after();
    else if (!strcmp(sc, "threads"))
        threads();
    else if (!strcmp(sc, "keeps-up"))
        keeps_up();
    else if (!strcmp(sc, "poor-fits"))
        poor_fits();
    else if (!strcmp(sc, "poor-fit-idle"))
        poor_fit(0);
    else if (!strcmp(sc, "poor-fit-busy"))
        poor_fit(1);
    else if (!strcmp(sc, "reset-with-sweep"))
        reset_with_sweep();
    else if (!strcmp(sc, "count") && argc == 3 && atoi(argv[2]) > 0)
        count(atoi(argv[2]));
    else {
        printf("unknown scenario %s\n", sc);
        return 2;
    }
    return 0;
}
