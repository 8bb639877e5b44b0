// SPDX-License-Identifier: MIT
// A multi-stream producer/consumer pipeline. Each iteration, every stream produces a buffer
// (cudaMallocAsync, or plain cudaMalloc every third iteration), fills it asynchronously and records
// an event; the next stream consumes it after that event and frees it — on the consumer's stream
// (cudaFreeAsync) or with a plain cudaFree while the consumer's copies may still be queued. Those
// two frees are exactly where a caching allocator must not hand memory to a new owner too early.
//
//   nvcc -cudart shared -Iinclude -Iexamples examples/pipeline.c -o pipeline
//   LD_PRELOAD=build/preload/libccinterpose.so ./pipeline
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // RTLD_DEFAULT in cci_probe.h
#endif
#include "example_util.h"

#define NSTREAMS 4
#define ITERS 60
#define PIECE 4096  // bytes each consumer copies out of the head and the middle of a buffer
#define KiB ((size_t)1 << 10)

static unsigned long allocations;

static size_t size_for(int it, int s)
{
    // 256 KiB .. ~8 MiB, odd multiples of 512 B so the sizes are not all round.
    return 256 * KiB * (size_t)(1 + (it * 7 + s * 3) % 32) + (size_t)((it + s) % 5) * 512;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    cudaStream_t st[NSTREAMS];
    cudaEvent_t ev[NSTREAMS];
    for (int s = 0; s < NSTREAMS; s++) {
        CK(cudaStreamCreateWithFlags(&st[s], cudaStreamNonBlocking));
        CK(cudaEventCreateWithFlags(&ev[s], cudaEventDisableTiming));
    }
    // One pattern per stream; rewritten only after every stream was synchronised, because an
    // asynchronous copy may read it later than the call returns.
    unsigned char *pattern = ex_host_alloc(NSTREAMS * PIECE);
    unsigned char *out = ex_host_alloc(NSTREAMS * 2 * PIECE);
    uint64_t h = EX_HASH_SEED;

    for (int it = 0; it < ITERS; it++) {
        int plain = it % 3 == 2;
        unsigned char *buf[NSTREAMS];
        size_t size[NSTREAMS];
        for (int s = 0; s < NSTREAMS; s++) {
            size[s] = size_for(it, s);
            if (plain)
                CK(cudaMalloc((void **)&buf[s], size[s]));
            else
                CK(cudaMallocAsync((void **)&buf[s], size[s], st[s]));
            allocations++;
            unsigned char *pat = pattern + (size_t)s * PIECE;
            for (size_t k = 0; k < PIECE; k++)
                pat[k] = (unsigned char)(k ^ (k >> 7) ^ (unsigned)(it * 13 + s * 101));
            CK(cudaMemsetAsync(buf[s], (it * 31 + s * 7) & 0xff, size[s], st[s]));
            CK(cudaMemcpyAsync(buf[s] + size[s] / 2, pat, PIECE, cudaMemcpyHostToDevice, st[s]));
            CK(cudaEventRecord(ev[s], st[s]));
        }

        unsigned char *scratch;
        CK(cudaMalloc((void **)&scratch, NSTREAMS * 2 * PIECE));
        allocations++;
        for (int s = 0; s < NSTREAMS; s++) {
            cudaStream_t consumer = st[(s + 1) % NSTREAMS];
            CK(cudaEventSynchronize(ev[s]));  // the producer's writes are done before the consumer reads
            unsigned char *dst = scratch + (size_t)s * 2 * PIECE;
            CK(cudaMemcpyAsync(dst, buf[s], PIECE, cudaMemcpyDeviceToDevice, consumer));
            CK(cudaMemcpyAsync(dst + PIECE, buf[s] + size[s] / 2, PIECE, cudaMemcpyDeviceToDevice, consumer));
            if (plain)
                CK(cudaFree(buf[s]));  // the consumer's copies may still be queued
            else
                CK(cudaFreeAsync(buf[s], consumer));
        }
        // A new owner for memory just freed, written at once on another stream: it must get
        // memory the queued copies no longer read, or they copy 0xee instead of the pattern.
        unsigned char *spill;
        CK(cudaMalloc((void **)&spill, size[NSTREAMS - 1]));
        allocations++;
        CK(cudaMemsetAsync(spill, 0xee, size[NSTREAMS - 1], st[0]));
        for (int s = 0; s < NSTREAMS; s++)
            CK(cudaStreamSynchronize(st[s]));
        CK(cudaFree(spill));
        CK(cudaMemcpy(out, scratch, NSTREAMS * 2 * PIECE, cudaMemcpyDeviceToHost));
        CK(cudaFree(scratch));
        h = ex_hash(h, out, NSTREAMS * 2 * PIECE);
    }

    for (int s = 0; s < NSTREAMS; s++) {
        CK(cudaEventDestroy(ev[s]));
        CK(cudaStreamDestroy(st[s]));
    }
    free(pattern);
    free(out);
    printf("pipeline: %d streams, %d iterations\n", NSTREAMS, ITERS);
    ex_finish("pipeline", h, allocations);
    return 0;
}
