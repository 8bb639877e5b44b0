// SPDX-License-Identifier: MIT
// The _ptsz entry points (code built with --default-stream per-thread): stream 0 there is the
// calling thread's own default stream, so a block freed on it is reusable at once by that thread
// but not by another thread, whose per-thread stream is a different stream.
#include <pthread.h>

#include "ptest.h"

#define N ((size_t)256 << 10)

static void *a_block;
static int b_took_a_block;  // thread B got A's segment by a handover (set before `allocated`)
static pthread_barrier_t freed, allocated;

static void *thread_a(void *arg)
{
    void *p, *again;
    CUDA_OK(cudaMallocAsync_ptsz(&p, N, 0));
    a_block = p;
    fakecuda_delayed_fill(p, 0xAA, N, cudaStreamPerThread, 200000);  // a slow kernel
    CUDA_OK(cudaFreeAsync_ptsz(p, 0));
    pthread_barrier_wait(&freed);
    pthread_barrier_wait(&allocated);
    CUDA_OK(cudaMallocAsync_ptsz(&again, N, 0));
    CHECK(again == p || b_took_a_block, "thread A gets its block back at once on its own per-thread stream");
    fakecuda_delayed_fill(again, 0x11, N, cudaStreamPerThread, 0);
    CUDA_OK(cudaStreamSynchronize(cudaStreamPerThread));
    CHECK(ptest_all_bytes(again, N, 0x11), "thread A's stream-ordered write lands after the old work");
    CUDA_OK(cudaFreeAsync_ptsz(again, 0));
    return NULL;
}

static void *thread_b(void *arg)
{
    pthread_barrier_wait(&freed);
    void *q;
    CUDA_OK(cudaMallocAsync_ptsz(&q, N, 0));
    // Another stream may take a whole free segment once a fence on the old stream has
    // passed (src/core/stream_handover.c). So B gets A's block only after A's slow write landed.
    CHECK(q != a_block || ptest_all_bytes(q, N, 0xAA),
          "thread B does not get the block thread A freed on its per-thread stream before A's write ran");
    b_took_a_block = q == a_block;
    ptest_fill(q, N, 42);
    pthread_barrier_wait(&allocated);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(ptest_verify(q, N, 42), "thread B's block is intact after thread A's slow write ran");
    CUDA_OK(cudaFreeAsync_ptsz(q, 0));
    return NULL;
}

int main(void)
{
    ptest_api api = ptest_get_api();
    CHECK(api.is_active() == 1, "the preload is active");

    void *p, *q;
    CUDA_OK(cudaMallocAsync(&p, N, 0));
    CUDA_OK(cudaFreeAsync(p, 0));
    CUDA_OK(cudaMallocAsync(&q, N, 0));
    CHECK(q == p, "plain entry points: stream 0 is the legacy stream, freed and reused there");
    uint64_t orders = ptest_stats(&api, 0).fence_reuse_orders;
    CUDA_OK(cudaFreeAsync_ptsz(q, 0));
    CUDA_OK(cudaMallocAsync(&p, N, 0));
    CHECK(p != q || ptest_stats(&api, 0).fence_reuse_orders > orders,
          "a legacy block freed on the per-thread stream is reused only behind an order");
    CUDA_OK(cudaFree(p));

    CUDA_OK(cudaMallocAsync(&p, N, cudaStreamPerThread));
    CUDA_OK(cudaFreeAsync_ptsz(p, 0));
    CUDA_OK(cudaMallocAsync_ptsz(&q, N, 0));
    CHECK(q == p, "cudaStreamPerThread on a plain entry point and 0 on a _ptsz one are one stream");
    CUDA_OK(cudaFreeAsync_ptsz(q, 0));

    CUDA_OK(cudaMallocAsync_ptsz(&p, N, cudaStreamLegacy));
    CUDA_OK(cudaFreeAsync(p, 0));
    CUDA_OK(cudaMallocAsync(&q, N, 0));
    CHECK(q == p, "cudaStreamLegacy on a _ptsz entry point and 0 on a plain one are one stream");
    CUDA_OK(cudaFree(q));

    fakecuda_reset_counters();
    for (int i = 0; i < 1000; i++) {
        CUDA_OK(cudaMallocAsync_ptsz(&p, 4096, 0));
        CUDA_OK(cudaFreeAsync_ptsz(p, 0));
    }
    CHECK(fakecuda_device_allocs() <= 1, "1000 _ptsz pairs: %llu device allocations",
          fakecuda_device_allocs());

    pthread_barrier_init(&freed, NULL, 2);
    pthread_barrier_init(&allocated, NULL, 2);
    pthread_t a, b;
    pthread_create(&a, NULL, thread_a, NULL);
    pthread_create(&b, NULL, thread_b, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    return 0;
}
