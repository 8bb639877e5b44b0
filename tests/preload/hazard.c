// SPDX-License-Identifier: MIT
// Reuse hazards: work queued before a free must never land in the block's next owner.
//
//   hazard default    a slow write on a non-blocking stream into p; cudaFree(p); cudaMalloc(q) of
//                     the same size; the new owner writes q with cudaMemcpy (the legacy stream:
//                     a CUDA program reaches device memory through streams, never by a CPU
//                     store); after cudaDeviceSynchronize q is intact.
//   hazard immediate  (immediate_reuse:True) the same program on one stream, with q written in
//                     stream order: q is p again and still intact.
//   hazard control    (immediate_reuse:True) the multi-stream program: q is p and the late write
//                     clobbers it. Proves that this test can see the hazard it guards against.
#include "ptest.h"

#define N ((size_t)1 << 20)
#define ROUNDS 100

static void run_default(void)
{
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *q[ROUNDS];
    void *host = malloc(N);
    CHECK(host != NULL, "host buffer");
    int reused = 0;
    for (int r = 0; r < ROUNDS; r++) {
        void *p;
        CUDA_OK(cudaMalloc(&p, N));
        fakecuda_delayed_fill(p, 0xAA, N, s, r == 0 ? 200000 : 2000);
        CUDA_OK(cudaFree(p));
        CUDA_OK(cudaMalloc(&q[r], N));
        reused += q[r] == p;
        if (r == 0)
            CHECK(q[0] != p, "a block with a write still queued is not handed out again");
        ptest_fill(host, N, (uint64_t)r + 1);
        CUDA_OK(cudaMemcpy(q[r], host, N, cudaMemcpyHostToDevice));
    }
    free(host);
    CUDA_OK(cudaDeviceSynchronize());
    int intact = 0;
    for (int r = 0; r < ROUNDS; r++)
        intact += ptest_verify(q[r], N, (uint64_t)r + 1);
    printf("%d of %d rounds got the freed block back (only after a batch synchronisation)\n",
           reused, ROUNDS);
    CHECK(intact == ROUNDS, "%d of %d new blocks intact after the delayed writes ran", intact, ROUNDS);
    for (int r = 0; r < ROUNDS; r++)
        CUDA_OK(cudaFree(q[r]));
    CUDA_OK(cudaStreamDestroy(s));
}

static void run_immediate(int control)
{
    cudaStream_t s = NULL;
    if (control)
        CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *p, *q;
    CUDA_OK(cudaMalloc(&p, N));
    fakecuda_delayed_fill(p, 0xAA, N, s, 200000);
    CUDA_OK(cudaFree(p));
    CUDA_OK(cudaMalloc(&q, N));
    CHECK(q == p, "immediate_reuse: the freed block is handed out again at once");
    if (control)
        memset(q, 0x55, N);
    else
        fakecuda_delayed_fill(q, 0x55, N, s, 0);  // the next kernel on the same stream
    CUDA_OK(cudaDeviceSynchronize());
    if (control)
        CHECK(!ptest_all_bytes(q, N, 0x55),
              "control: a write queued on another stream clobbers the reused block (the hazard "
              "this test detects)");
    else
        CHECK(ptest_all_bytes(q, N, 0x55),
              "single stream: work on the reused block runs after the old work, the block is intact");
    CUDA_OK(cudaFree(q));
    if (control)
        CUDA_OK(cudaStreamDestroy(s));
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "default";
    ptest_api api = ptest_get_api();
    CHECK(api.is_active() == 1, "the preload is active (%s)", api.config_string());
    int immediate = strstr(api.config_string(), "immediate_reuse:True") != NULL;
    if (strcmp(mode, "default") == 0) {
        CHECK(!immediate, "default mode: immediate_reuse is off");
        run_default();
    } else {
        CHECK(immediate, "immediate_reuse:True is in effect");
        run_immediate(strcmp(mode, "control") == 0);
    }
    return 0;
}
