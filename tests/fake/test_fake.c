// SPDX-License-Identifier: MIT
/*
 * Checks that the fake CUDA libraries behave the way the preload tests rely
 * on. Expects FAKECUDA_CAPACITY=64M and FAKECUDA_DEVICES=2 (set by meson).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fake_cuda_driver.h"
#include "fake_cuda_runtime.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#define MiB ((size_t)1 << 20)
#define CAPACITY (64 * MiB)

#include "fake_check.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static bool all_bytes(const void *p, int byte, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != (unsigned char)byte)
            return false;
    return true;
}

static void *thread_driver_alloc_no_ctx(void *arg)
{
    CUdeviceptr p = 0;
    *(CUresult *)arg = cuMemAlloc_v2(&p, 4096);
    return NULL;
}

static void *thread_driver_alloc_after_runtime(void *arg)
{
    CUresult *r = arg;
    cudaFree(NULL); /* the runtime makes the primary context current here */
    CUdeviceptr p = 0;
    r[0] = cuMemAlloc_v2(&p, 4096);
    r[1] = cuMemFree_v2(p);
    return NULL;
}

static void test_driver_before_init(void)
{
    CUdeviceptr p;
    CHECK_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
    int v = 0;
    CHECK_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS);
    CHECK_EQ(v, 13000);
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
    CUcontext c = (CUcontext)1;
    CHECK_EQ(cuCtxGetCurrent(&c), CUDA_SUCCESS);
    CHECK(c == NULL);
    int n = 0;
    CHECK_EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
    CHECK_EQ(n, 2);
    size_t total = 0;
    CHECK_EQ(cuDeviceTotalMem_v2(&total, 1), CUDA_SUCCESS);
    CHECK_EQ(total, CAPACITY);
    CHECK_EQ(cuDeviceTotalMem_v2(&total, 2), CUDA_ERROR_INVALID_DEVICE);
    const void *tbl = (const void *)1;
    CUuuid id = {{0}};
    CHECK(cuGetExportTable(&tbl, &id) != CUDA_SUCCESS);
    CHECK(tbl == NULL);
    const char *s = NULL;
    CHECK_EQ(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s), CUDA_SUCCESS);
    CHECK(s && !strcmp(s, "CUDA_ERROR_OUT_OF_MEMORY"));
}

static void test_procaddress(void)
{
    fakecuda_reset_counters();
    void *fn = NULL;
    CUdriverProcAddressQueryResult st = 99;
    CHECK_EQ(cuGetProcAddress_v2("cuMemAlloc", &fn, 12000, 0, &st), CUDA_SUCCESS);
    CHECK(fn == (void *)cuMemAlloc_v2);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
    CHECK_EQ(cuGetProcAddress_v2("cuMemFree", &fn, 13000, 0, &st), CUDA_SUCCESS);
    CHECK(fn == (void *)cuMemFree_v2);
    /* One name, two ABIs: the version asked for picks (cuStreamBeginCapture: mode-less until 10.1). */
    CHECK_EQ(cuGetProcAddress_v2("cuStreamBeginCapture", &fn, 10010, 0, &st), CUDA_SUCCESS);
    CHECK(fn == (void *)cuStreamBeginCapture_v2 && st == CU_GET_PROC_ADDRESS_SUCCESS);
    CHECK_EQ(cuGetProcAddress_v2("cuStreamBeginCapture", &fn, 10000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
             CUDA_SUCCESS);
    CHECK(fn == (void *)cuStreamBeginCapture_ptsz && st == CU_GET_PROC_ADDRESS_SUCCESS);
    CHECK_EQ(cuGetProcAddress_v2("cuStreamBeginCapture", &fn, 9020, 0, &st), CUDA_SUCCESS);
    CHECK(fn == NULL && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    CHECK_EQ(cuGetProcAddress_v2("cuMemAllocAsync", &fn, 12000, 0, &st), CUDA_SUCCESS);
    CHECK(fn == (void *)cuMemAllocAsync);
    CHECK_EQ(cuGetProcAddress_v2("cuMemAllocAsync", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
             CUDA_SUCCESS);
    CHECK(fn == (void *)cuMemAllocAsync_ptsz);
    CHECK_EQ(cuGetProcAddress_v2("cuMemFreeAsync", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
             CUDA_SUCCESS);
    CHECK(fn == (void *)cuMemFreeAsync_ptsz);
    /* Functions without a per-thread variant come back as they are. */
    CHECK_EQ(cuGetProcAddress_v2("cuCtxSynchronize", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
             CUDA_SUCCESS);
    CHECK(fn == (void *)cuCtxSynchronize);
    CHECK_EQ(cuGetProcAddress_v2("cuStreamSynchronize", &fn, 12000, 0, &st), CUDA_SUCCESS);
    CHECK(fn == (void *)cuStreamSynchronize);
    CHECK_EQ(cuGetProcAddress_v2("cuGetProcAddress", &fn, 12000, 0, &st), CUDA_SUCCESS);
    CHECK(fn == (void *)cuGetProcAddress_v2);
    CHECK_EQ(cuGetProcAddress_v2("cuGetProcAddress", &fn, 11030, 0, &st), CUDA_SUCCESS);
    CHECK(fn == (void *)cuGetProcAddress);

    fn = (void *)1;
    CHECK_EQ(cuGetProcAddress_v2("cuNoSuchThing", &fn, 12000, 0, &st), CUDA_SUCCESS);
    CHECK(fn == NULL);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    fn = (void *)1;
    CHECK_EQ(cuGetProcAddress_v2("cuMemAllocAsync", &fn, 11000, 0, &st), CUDA_SUCCESS);
    CHECK(fn == NULL);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    CHECK_EQ(cuGetProcAddress_v2("cuMemAlloc", &fn, 13010, 0, &st), CUDA_ERROR_INVALID_VALUE);
    /* The 11.3 entry point behaves the same, minus the status. */
    CHECK_EQ(cuGetProcAddress("cuMemAlloc", &fn, 12000, 0), CUDA_SUCCESS);
    CHECK(fn == (void *)cuMemAlloc_v2);

    CHECK_EQ(fakecuda_procaddress_calls("cuMemAlloc"), 3);
    CHECK_EQ(fakecuda_procaddress_calls("cuMemAllocAsync"), 3);
    CHECK_EQ(fakecuda_procaddress_calls("cuNoSuchThing"), 1);
    CHECK_EQ(fakecuda_procaddress_calls("cuMemcpy"), 0);
    CHECK_EQ(fakecuda_procaddress_calls("cuStreamBeginCapture"), 3);
    CHECK_EQ(fakecuda_procaddress_calls(NULL), 16);

    /* The runtime's entry-point lookup reaches the same driver table. */
    enum cudaDriverEntryPointQueryResult q = 9;
    CHECK_EQ(cudaGetDriverEntryPoint("cuMemFreeAsync", &fn, cudaEnableDefault, &q), cudaSuccess);
    CHECK(fn == (void *)cuMemFreeAsync);
    CHECK_EQ(q, cudaDriverEntryPointSuccess);
    CHECK_EQ(cudaGetDriverEntryPoint_ptsz("cuMemFreeAsync", &fn, cudaEnableDefault, &q), cudaSuccess);
    CHECK(fn == (void *)cuMemFreeAsync_ptsz);
    CHECK_EQ(cudaGetDriverEntryPointByVersion("cuMemAllocAsync", &fn, 11000, cudaEnableDefault, &q), cudaSuccess);
    CHECK(fn == NULL);
    CHECK_EQ(q, cudaDriverEntryPointVersionNotSufficent);
    CHECK_EQ(fakecuda_procaddress_calls("cuMemFreeAsync"), 3);
}

static void test_runtime_alloc_and_errors(void)
{
    CHECK_EQ(cudaGetLastError(), cudaSuccess);
    int ver = 0;
    CHECK_EQ(cudaRuntimeGetVersion(&ver), cudaSuccess);
    CHECK_EQ(ver, 13000);
    CHECK_EQ(cudaDriverGetVersion(&ver), cudaSuccess);
    CHECK_EQ(ver, 13000);

    fakecuda_reset_counters();
    size_t used0 = fakecuda_used_bytes(0);
    void *p = NULL;
    CHECK_EQ(cudaMalloc(&p, MiB), cudaSuccess);
    CHECK(p != NULL && ((uintptr_t)p & 255) == 0);
    CHECK_EQ(fakecuda_used_bytes(0), used0 + MiB);
    CHECK_EQ(fakecuda_device_allocs(), 1);
    memset(p, 0x5a, MiB); /* it is host memory */

    size_t fr = 0, tot = 0;
    CHECK_EQ(cudaMemGetInfo(&fr, &tot), cudaSuccess);
    CHECK_EQ(tot, CAPACITY);
    CHECK_EQ(fr, CAPACITY - used0 - MiB);

    /* OOM at capacity, recorded as last error. */
    void *q = (void *)1;
    CHECK_EQ(cudaMalloc(&q, CAPACITY), cudaErrorMemoryAllocation);
    CHECK_EQ(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    CHECK_EQ(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    CHECK_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
    CHECK_EQ(cudaGetLastError(), cudaSuccess);
    CHECK_EQ(cudaMalloc(&q, (size_t)-1), cudaErrorMemoryAllocation);
    CHECK_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
    CHECK_EQ(fakecuda_device_allocs(), 1);
    CHECK_EQ(fakecuda_used_bytes(0), used0 + MiB);

    /* The whole capacity can be used, not a byte more. */
    void *big = NULL;
    CHECK_EQ(cudaMalloc(&big, CAPACITY - used0 - MiB), cudaSuccess);
    CHECK_EQ(cudaMalloc(&q, 1), cudaErrorMemoryAllocation);
    CHECK_EQ(cudaFree(big), cudaSuccess);
    cudaGetLastError();

    /* Interior and unknown pointers. */
    CHECK_EQ(cudaFree((char *)p + 16), cudaErrorInvalidValue);
    CHECK_EQ(cudaGetLastError(), cudaErrorInvalidValue);
    int local;
    CHECK_EQ(cudaFree(&local), cudaErrorInvalidValue);
    CHECK_EQ(cudaFree(NULL), cudaSuccess);
    cudaGetLastError();

    CUdeviceptr base = 0;
    size_t sz = 0;
    CHECK_EQ(cuMemGetAddressRange_v2(&base, &sz, (CUdeviceptr)(uintptr_t)p + 1000), CUDA_SUCCESS);
    CHECK(base == (CUdeviceptr)(uintptr_t)p);
    CHECK_EQ(sz, MiB);
    CHECK_EQ(cuMemGetAddressRange_v2(&base, &sz, (CUdeviceptr)(uintptr_t)&local), CUDA_ERROR_NOT_FOUND);

    cudaIpcMemHandle_t h;
    CHECK_EQ(cudaIpcGetMemHandle(&h, (char *)p + 4096), cudaSuccess);
    CHECK(fakecuda_ipc_handle_base(&h) == p);
    memset(&h, 0, sizeof h);
    CHECK(fakecuda_ipc_handle_base(&h) == NULL);

    CHECK_EQ(cudaFree(p), cudaSuccess);
    CHECK_EQ(cudaFree(p), cudaErrorInvalidValue);
    cudaGetLastError();
    CHECK_EQ(fakecuda_device_frees(), 2);
    CHECK_EQ(fakecuda_used_bytes(0), used0);

    /* size 0 succeeds with NULL, like the real runtime. */
    q = (void *)1;
    CHECK_EQ(cudaMalloc(&q, 0), cudaSuccess);
    CHECK(q == NULL);

    void *m = NULL, *pp = NULL;
    size_t pitch = 0;
    CHECK_EQ(cudaMallocManaged(&m, 1000, cudaMemAttachGlobal), cudaSuccess);
    CHECK_EQ(cudaMallocPitch(&pp, &pitch, 1000, 3), cudaSuccess);
    CHECK(pitch >= 1000 && pitch % 256 == 0);
    CHECK_EQ(fakecuda_used_bytes(0), used0 + 1000 + pitch * 3);
    CHECK_EQ(cudaFree(m), cudaSuccess);
    CHECK_EQ(cudaFree(pp), cudaSuccess);

    const char *name = cudaGetErrorName(cudaErrorStreamCaptureUnsupported);
    CHECK(!strcmp(name, "cudaErrorStreamCaptureUnsupported"));
    CHECK(strlen(cudaGetErrorString(cudaErrorMemoryAllocation)) > 0);
}

static void test_fault_injection(void)
{
    void *a = NULL, *b = NULL, *c = NULL;
    fakecuda_fail_alloc_at(2);
    CHECK_EQ(cudaMalloc(&a, 4096), cudaSuccess);
    CHECK_EQ(cudaMalloc(&b, 4096), cudaErrorMemoryAllocation);
    CHECK_EQ(cudaMalloc(&c, 4096), cudaSuccess);
    CHECK_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
    fakecuda_fail_alloc_at(1);
    fakecuda_fail_alloc_at(0); /* disarmed */
    CHECK_EQ(cudaMalloc(&b, 4096), cudaSuccess);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
}

static void test_streams_and_events(void)
{
    const size_t n = 64 * 1024;
    unsigned char *p = NULL;
    CHECK_EQ(cudaMalloc((void **)&p, n), cudaSuccess);
    memset(p, 0, n);

    cudaStream_t s;
    CHECK_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cudaEvent_t ev;
    CHECK_EQ(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), cudaSuccess);
    CHECK_EQ(cudaEventQuery(ev), cudaSuccess); /* never recorded */

    double t0 = now_ms();
    fakecuda_delayed_fill(p, 0xab, n, s, 400000);
    CHECK(now_ms() - t0 < 300); /* enqueueing does not block */
    CHECK_EQ(cudaEventRecord(ev, s), cudaSuccess);
    CHECK_EQ(cudaStreamQuery(s), cudaErrorNotReady);
    CHECK_EQ(cudaEventQuery(ev), cudaErrorNotReady);
    CHECK_EQ(cudaGetLastError(), cudaSuccess); /* "not ready" is not an error */
    CHECK(all_bytes(p, 0, n));

    /* A legacy-stream memset is not ordered after a non-blocking stream:
     * it lands first and is overwritten later. This is the hazard tests see. */
    CHECK_EQ(cudaMemset(p, 0x11, n), cudaSuccess);
    CHECK(all_bytes(p, 0x11, n));
    unsigned long long syncs = fakecuda_sync_calls();
    CHECK_EQ(cudaEventSynchronize(ev), cudaSuccess);
    CHECK(now_ms() - t0 >= 390);
    CHECK(all_bytes(p, 0xab, n));
    CHECK_EQ(cudaStreamQuery(s), cudaSuccess);
    CHECK_EQ(fakecuda_sync_calls(), syncs + 1);

    /* A blocking stream is ordered with the legacy stream both ways. */
    cudaStream_t b;
    CHECK_EQ(cudaStreamCreate(&b), cudaSuccess);
    t0 = now_ms();
    fakecuda_delayed_fill(p, 0x22, n, b, 100000);
    CHECK_EQ(cudaMemset(p, 0x33, n), cudaSuccess); /* waits for b's fill */
    CHECK(now_ms() - t0 >= 90);
    CHECK(all_bytes(p, 0x33, n));
    fakecuda_delayed_fill(p, 0x44, n, 0, 100000);       /* legacy */
    fakecuda_delayed_fill(p, 0x55, n, b, 0);            /* runs after the legacy fill */
    CHECK_EQ(cudaStreamSynchronize(b), cudaSuccess);
    CHECK(all_bytes(p, 0x55, n));

    /* Stream-ordered copy, then synchronous copy back. */
    unsigned char *src = malloc(n), *dst = malloc(n);
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 7);
    fakecuda_delayed_fill(p, 0x66, n, s, 50000);
    CHECK_EQ(cudaMemcpyAsync(p, src, n, cudaMemcpyHostToDevice, s), cudaSuccess);
    CHECK_EQ(cudaStreamSynchronize(s), cudaSuccess);
    CHECK_EQ(cudaMemcpy(dst, p, n, cudaMemcpyDeviceToHost), cudaSuccess);
    CHECK(memcmp(src, dst, n) == 0);
    CHECK_EQ(cudaMemcpy(dst, p, n, (enum cudaMemcpyKind)7), cudaErrorInvalidMemcpyDirection);
    cudaGetLastError();
    CHECK_EQ(cudaMemsetAsync(p, 0x77, n, s), cudaSuccess);
    CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
    CHECK(all_bytes(p, 0x77, n));

    /* Per-thread default stream has its own worker. */
    t0 = now_ms();
    fakecuda_delayed_fill(p, 0x88, n, cudaStreamPerThread, 300000);
    CHECK(now_ms() - t0 < 250);
    CHECK_EQ(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);
    CHECK(all_bytes(p, 0x88, n));

    /* cudaFree synchronises the device before host memory goes away. */
    fakecuda_delayed_fill(p, 0x99, n, s, 100000);
    t0 = now_ms();
    CHECK_EQ(cudaFree(p), cudaSuccess);
    CHECK(now_ms() - t0 >= 90);

    /* Stream-ordered allocation and free. */
    size_t used0 = fakecuda_used_bytes(0);
    void *a = NULL;
    CHECK_EQ(cudaMallocAsync(&a, n, s), cudaSuccess);
    CHECK_EQ(fakecuda_used_bytes(0), used0 + n);
    fakecuda_delayed_fill(a, 1, n, s, 100000);
    CHECK_EQ(cudaFreeAsync(a, s), cudaSuccess);
    CHECK_EQ(cudaFreeAsync(a, s), cudaErrorInvalidValue); /* already queued */
    cudaGetLastError();
    CHECK_EQ(fakecuda_used_bytes(0), used0 + n); /* not yet executed */
    CHECK_EQ(cudaStreamSynchronize(s), cudaSuccess);
    CHECK_EQ(fakecuda_used_bytes(0), used0);
    CHECK_EQ(cudaMallocAsync_ptsz(&a, n, 0), cudaSuccess);
    CHECK_EQ(cudaFreeAsync_ptsz(a, 0), cudaSuccess);
    CHECK_EQ(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);
    CHECK_EQ(fakecuda_used_bytes(0), used0);

    CHECK_EQ(cudaEventDestroy(ev), cudaSuccess);
    CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
    CHECK_EQ(cudaStreamDestroy(b), cudaSuccess);
    CHECK_EQ(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
    CHECK_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    CHECK_EQ(cudaStreamDestroy(cudaStreamLegacy), cudaErrorInvalidResourceHandle);
    cudaGetLastError();
    free(src);
    free(dst);
}

static void *thread_capture_local(void *arg)
{
    cudaStream_t s = arg;
    CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    void *p = NULL;
    CHECK_EQ(cudaMalloc(&p, 4096), cudaErrorStreamCaptureUnsupported);
    cudaGraph_t g;
    CHECK_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    CHECK(g == NULL);
    CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    return NULL;
}

static void test_capture(void)
{
    cudaStream_t s;
    CHECK_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    enum cudaStreamCaptureStatus st = 7;
    CHECK_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
    CHECK_EQ(st, cudaStreamCaptureStatusNone);
    CHECK(!fakecuda_capturing_any());

    CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    CHECK(fakecuda_capturing_any());
    CHECK_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
    CHECK_EQ(st, cudaStreamCaptureStatusActive);
    CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
    cudaGetLastError();
    /* Captured work does not run. */
    unsigned char buf[64] = {0};
    void *d = NULL;
    CHECK_EQ(cudaMallocAsync(&d, 4096, s), cudaSuccess); /* allowed in capture */
    fakecuda_delayed_fill(buf, 0xee, sizeof buf, s, 0);
    unsigned long long allocs = fakecuda_device_allocs();
    void *p = NULL;
    CHECK_EQ(cudaMalloc(&p, 4096), cudaErrorStreamCaptureUnsupported);
    CHECK_EQ(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
    CHECK_EQ(fakecuda_device_allocs(), allocs);
    CHECK_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
    CHECK_EQ(st, cudaStreamCaptureStatusInvalidated);
    CHECK_EQ(cudaMemsetAsync(buf, 1, 1, s), cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();
    cudaGraph_t g = (cudaGraph_t)1;
    CHECK_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    CHECK(g == NULL);
    cudaGetLastError();
    CHECK(!fakecuda_capturing_any());
    CHECK(all_bytes(buf, 0, sizeof buf));

    /* Device-wide sync during capture fails and invalidates it. */
    CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    CHECK_EQ(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);
    CHECK_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();

    /* Clean capture yields a graph; cudaFree during relaxed capture is fine. */
    CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
    CHECK_EQ(cudaMalloc(&p, 4096), cudaSuccess);
    CHECK_EQ(cudaFree(p), cudaSuccess);
    CHECK_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    CHECK(g != NULL);

    /* Capturing a blocking stream makes legacy-stream work an error. */
    cudaStream_t b;
    CHECK_EQ(cudaStreamCreate(&b), cudaSuccess);
    CHECK_EQ(cudaStreamBeginCapture(b, cudaStreamCaptureModeRelaxed), cudaSuccess);
    CHECK_EQ(cudaStreamIsCapturing(0, &st), cudaErrorStreamCaptureImplicit);
    CHECK_EQ(cudaMemset(buf, 0, 1), cudaErrorStreamCaptureImplicit);
    CHECK_EQ(cudaStreamEndCapture(b, &g), cudaErrorStreamCaptureInvalidated);
    CHECK_EQ(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal),
             cudaErrorStreamCaptureUnsupported);
    cudaGetLastError();

    /* Thread-local capture elsewhere does not restrict this thread. */
    pthread_t t;
    pthread_create(&t, NULL, thread_capture_local, s);
    pthread_join(t, NULL);
    CHECK(fakecuda_capturing_any());
    CHECK_EQ(cudaMalloc(&p, 4096), cudaSuccess);
    CHECK_EQ(cudaFree(p), cudaSuccess);
    CHECK_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureWrongThread);
    cudaGetLastError();
    /* Leave it to a stream destroy to clean up. */
    CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
    CHECK(!fakecuda_capturing_any());
    CHECK_EQ(cudaFree(d), cudaSuccess);
    CHECK_EQ(cudaStreamDestroy(b), cudaSuccess);
}

static void test_devices_and_contexts(void)
{
    int dev = -1;
    CHECK_EQ(cudaGetDevice(&dev), cudaSuccess);
    CHECK_EQ(dev, 0);
    CHECK_EQ(cudaSetDevice(2), cudaErrorInvalidDevice);
    CHECK_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
    size_t u0 = fakecuda_used_bytes(0), u1 = fakecuda_used_bytes(1);
    CHECK_EQ(cudaSetDevice(1), cudaSuccess);
    CHECK_EQ(cudaGetDevice(&dev), cudaSuccess);
    CHECK_EQ(dev, 1);
    void *p = NULL;
    CHECK_EQ(cudaMalloc(&p, 8192), cudaSuccess);
    CHECK_EQ(fakecuda_used_bytes(1), u1 + 8192);
    CHECK_EQ(fakecuda_used_bytes(0), u0);
    /* A pointer can be freed with any device current, like with UVA. */
    CHECK_EQ(cudaSetDevice(0), cudaSuccess);
    CHECK_EQ(cudaFree(p), cudaSuccess);
    CHECK_EQ(fakecuda_used_bytes(1), u1);

    /* Driver calls work only where a context is current. */
    CUresult r = CUDA_SUCCESS;
    pthread_t t;
    pthread_create(&t, NULL, thread_driver_alloc_no_ctx, &r);
    pthread_join(t, NULL);
    CHECK_EQ(r, CUDA_ERROR_INVALID_CONTEXT);
    CUresult rr[2] = {99, 99};
    pthread_create(&t, NULL, thread_driver_alloc_after_runtime, rr);
    pthread_join(t, NULL);
    CHECK_EQ(rr[0], CUDA_SUCCESS);
    CHECK_EQ(rr[1], CUDA_SUCCESS);

    /* Push/pop and primary contexts. */
    CUcontext c1, cur;
    CHECK_EQ(cuDevicePrimaryCtxRetain(&c1, 1), CUDA_SUCCESS);
    CHECK_EQ(cuCtxPushCurrent_v2(c1), CUDA_SUCCESS);
    CUdevice d;
    CHECK_EQ(cuCtxGetDevice(&d), CUDA_SUCCESS);
    CHECK_EQ(d, 1);
    CUdeviceptr dp;
    CHECK_EQ(cuMemAlloc_v2(&dp, 4096), CUDA_SUCCESS);
    CHECK_EQ(fakecuda_used_bytes(1), u1 + 4096);
    CHECK_EQ(cuMemFree_v2(dp), CUDA_SUCCESS);
    CHECK_EQ(cuCtxPopCurrent_v2(&cur), CUDA_SUCCESS);
    CHECK(cur == c1);
    CHECK_EQ(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
    CHECK_EQ(cudaGetDevice(&dev), cudaSuccess);
    CHECK_EQ(dev, 0);

    /* Reset frees everything on the device. */
    CHECK_EQ(cudaMalloc(&p, 4096), cudaSuccess);
    CHECK(fakecuda_live_allocs(0) > 0);
    CHECK_EQ(cudaDeviceReset(), cudaSuccess);
    CHECK_EQ(fakecuda_used_bytes(0), 0);
    CHECK_EQ(fakecuda_live_allocs(0), 0);
    CHECK_EQ(cudaFree(p), cudaErrorInvalidValue);
    cudaGetLastError();
    CHECK_EQ(cudaMalloc(&p, 4096), cudaSuccess);
    CHECK_EQ(cudaFree(p), cudaSuccess);
}

#define STRESS_THREADS 8
#define STRESS_ITERS 1500

static void *stress_thread(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, (seed & 1) ? cudaStreamNonBlocking : 0) != cudaSuccess) {
        CHECK(0);
        return NULL;
    }
    cudaEvent_t e;
    cudaEventCreate(&e);
    for (int i = 0; i < STRESS_ITERS; i++) {
        seed = seed * 1103515245u + 12345u;
        size_t n = 256 + (seed >> 8) % 65536;
        void *p = NULL;
        cudaError_t r = (i & 1) ? cudaMallocAsync(&p, n, s) : cudaMalloc(&p, n);
        if (r == cudaErrorMemoryAllocation) {
            cudaGetLastError();
            continue;
        }
        CHECK_EQ(r, cudaSuccess);
        fakecuda_delayed_fill(p, i & 0xff, n, s, (seed >> 4) % 50);
        cudaEventRecord(e, s);
        if (i % 3 == 0)
            cudaEventSynchronize(e);
        else
            cudaEventQuery(e);
        if (i & 1)
            CHECK_EQ(cudaFreeAsync(p, s), cudaSuccess);
        else
            CHECK_EQ(cudaFree(p), cudaSuccess);
        if (i % 100 == 0) {
            cudaStream_t tmp;
            CHECK_EQ(cudaStreamCreate(&tmp), cudaSuccess);
            static unsigned char scratch[16];
            fakecuda_delayed_fill(scratch, 0, 0, tmp, 10); /* pending work at destroy */
            CHECK_EQ(cudaStreamDestroy(tmp), cudaSuccess);
        }
    }
    CHECK_EQ(cudaStreamSynchronize(s), cudaSuccess);
    cudaEventDestroy(e);
    cudaStreamDestroy(s);
    return NULL;
}

static void test_stress(void)
{
    unsigned long long a0 = fakecuda_device_allocs(), f0 = fakecuda_device_frees();
    pthread_t t[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++)
        pthread_create(&t[i], NULL, stress_thread, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < STRESS_THREADS; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
    CHECK_EQ(fakecuda_used_bytes(0), 0);
    CHECK_EQ(fakecuda_live_allocs(0), 0);
    CHECK_EQ(fakecuda_device_allocs() - a0, fakecuda_device_frees() - f0);
    CHECK(fakecuda_device_allocs() - a0 > STRESS_THREADS * STRESS_ITERS / 2);
}

/* Held work, cross-stream waits and graph replay: what the hazard tests rely on. */
static void test_holds_waits_graphs(void)
{
    CHECK(cudaSetDevice(0) == cudaSuccess);
    cudaStream_t a, b, cap;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess);
    CHECK(cudaStreamCreateWithPriority(&b, cudaStreamNonBlocking, -1) == cudaSuccess);
    CHECK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking) == cudaSuccess);
    unsigned char *p;
    CHECK(cudaMalloc((void **)&p, 8192) == cudaSuccess);
    memset(p, 0, 4096);

    /* Held: the work stays queued through queries; the event's synchronisation runs it. */
    cudaEvent_t ev;
    CHECK(cudaEventCreate(&ev) == cudaSuccess);
    CHECK(fakecuda_stream_hold(a, 1) == cudaSuccess);
    fakecuda_delayed_fill(p, 0x11, 4096, a, 0);
    CHECK(cudaEventRecord(ev, a) == cudaSuccess);
    usleep(20000);
    CHECK(cudaStreamQuery(a) == cudaErrorNotReady);
    CHECK(cudaEventQuery(ev) == cudaErrorNotReady);
    CHECK(all_bytes(p, 0, 4096));
    CHECK(cudaEventSynchronize(ev) == cudaSuccess);
    CHECK(all_bytes(p, 0x11, 4096));

    /* A wait on another stream demands the held work it depends on, in order. */
    fakecuda_delayed_fill(p, 0x22, 4096, a, 0);
    CHECK(cudaEventRecord(ev, a) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(b, ev, 0) == cudaSuccess);
    fakecuda_delayed_fill(p, 0x33, 4096, b, 0);
    CHECK(cudaStreamSynchronize(b) == cudaSuccess);
    CHECK(all_bytes(p, 0x33, 4096));
    CHECK(fakecuda_stream_hold(a, 0) == cudaSuccess);

    /* Capture records; each launch replays on the launch stream; destroy order is free. */
    CHECK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    fakecuda_delayed_fill(p, 0x44, 4096, cap, 0);
    cudaGraph_t g;
    cudaGraphExec_t exec;
    CHECK(cudaStreamEndCapture(cap, &g) == cudaSuccess && g != NULL);
    CHECK(all_bytes(p, 0x33, 4096));
    CHECK(cudaGraphInstantiate(&exec, g, 0) == cudaSuccess);
    CHECK(cudaGraphDestroy(g) == cudaSuccess);
    CHECK(cudaGraphLaunch(exec, a) == cudaSuccess);
    CHECK(cudaStreamSynchronize(a) == cudaSuccess);
    CHECK(all_bytes(p, 0x44, 4096));
    memset(p, 0, 4096);
    CHECK(cudaGraphLaunch(exec, b) == cudaSuccess);
    CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
    CHECK(cudaStreamSynchronize(b) == cudaSuccess);
    CHECK(all_bytes(p, 0x44, 4096));
    CHECK(cudaGraphLaunch(exec, b) == cudaErrorInvalidValue);

    /* A capture into the program's own graph (cudaStreamBeginCaptureToGraph): appended after
     * the graph's earlier work; the end hands back that graph; a graph that is not one fails. */
    cudaGraph_t mine, got = NULL;
    int not_a_graph;
    CHECK(cudaGraphCreate(&mine, 0) == cudaSuccess);
    CHECK(cudaStreamBeginCaptureToGraph(cap, (cudaGraph_t)&not_a_graph, NULL, NULL, 0, cudaStreamCaptureModeRelaxed) ==
          cudaErrorInvalidValue);
    CHECK(cudaStreamBeginCaptureToGraph(cap, mine, NULL, NULL, 1, cudaStreamCaptureModeRelaxed) ==
          cudaErrorInvalidValue);
    CHECK(cudaStreamBeginCaptureToGraph(cap, mine, NULL, NULL, 0, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    fakecuda_delayed_fill(p, 0x55, 4096, cap, 0);
    CHECK(cudaStreamEndCapture(cap, &got) == cudaSuccess && got == mine);
    CHECK(cuStreamBeginCaptureToGraph((CUstream)cap, mine, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_RELAXED) ==
          CUDA_SUCCESS);
    fakecuda_delayed_fill(p + 4096, 0x66, 4096, cap, 0);
    CHECK(cuStreamEndCapture((CUstream)cap, &got) == CUDA_SUCCESS && got == mine);
    CHECK(all_bytes(p, 0x44, 4096));
    CHECK(cudaGraphInstantiate(&exec, mine, 0) == cudaSuccess);
    CHECK(cudaGraphDestroy(mine) == cudaSuccess);
    CHECK(cudaGraphLaunch(exec, a) == cudaSuccess);
    CHECK(cudaStreamSynchronize(a) == cudaSuccess);
    CHECK(all_bytes(p, 0x55, 4096) && all_bytes(p + 4096, 0x66, 4096));
    CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);

    /* A driver-created stream resolves through cuGetProcAddress too. */
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CHECK(cuGetProcAddress_v2("cuStreamCreateWithPriority", &fn, 12000, 0, &st) == CUDA_SUCCESS &&
          fn == (void *)cuStreamCreateWithPriority);
    CHECK(cuGetProcAddress_v2("cuGraphLaunch", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                              &st) == CUDA_SUCCESS && fn == (void *)cuGraphLaunch_ptsz);

    CHECK(cudaEventDestroy(ev) == cudaSuccess);
    CHECK(cudaFree(p) == cudaSuccess);
    CHECK(cudaStreamDestroy(a) == cudaSuccess);
    CHECK(cudaStreamDestroy(b) == cudaSuccess);
    CHECK(cudaStreamDestroy(cap) == cudaSuccess);
}

/* Context events (CUDA 12.5) as a probe on the H100 showed them (docs/benchmarks.md, "context
 * fences", 2026-11-25, 885baee): the record covers the
 * earlier work of every stream of the context (non-blocking, per-thread, destroyed but draining)
 * and no later work; a context wait holds later work of every stream, created later too; both
 * refuse during a capture of any mode and invalidate it. */
static void test_context_events(void)
{
    CHECK(cudaSetDevice(0) == cudaSuccess);
    CUcontext ctx;
    CHECK(cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx);
    cudaStream_t a, b, gone, cap;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess);
    CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) == cudaSuccess);
    CHECK(cudaStreamCreateWithFlags(&gone, cudaStreamNonBlocking) == cudaSuccess);
    CHECK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking) == cudaSuccess);
    unsigned char *p;
    CHECK(cudaMalloc((void **)&p, 8192) == cudaSuccess);
    memset(p, 0, 8192);
    CUevent ev;
    CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS);
    CHECK(cuCtxRecordEvent(NULL, ev) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuCtxRecordEvent(ctx, NULL) == CUDA_ERROR_INVALID_HANDLE);

    /* Earlier work of a non-blocking stream and of a destroyed one: covered; later work: not. */
    CHECK(fakecuda_stream_hold(a, 1) == cudaSuccess);
    fakecuda_delayed_fill(p, 0x11, 4096, a, 0);
    CHECK(fakecuda_stream_hold(gone, 1) == cudaSuccess);
    fakecuda_delayed_fill(p + 4096, 0x12, 4096, gone, 0);
    CHECK(fakecuda_stream_hold(gone, 0) == cudaSuccess);  /* (a destroyed stream's work runs) */
    CHECK(cudaStreamDestroy(gone) == cudaSuccess);
    CHECK(cuCtxRecordEvent(ctx, ev) == CUDA_SUCCESS);
    CHECK(cuEventQuery(ev) == CUDA_ERROR_NOT_READY);
    CHECK(fakecuda_stream_hold(b, 1) == cudaSuccess);
    fakecuda_delayed_fill(p, 0x22, 4096, b, 0);  /* after the record */
    CHECK(cuEventSynchronize(ev) == CUDA_SUCCESS);
    CHECK(all_bytes(p, 0x11, 4096) && all_bytes(p + 4096, 0x12, 4096));
    CHECK(cuEventQuery(ev) == CUDA_SUCCESS);
    CHECK(cudaStreamQuery(b) == cudaErrorNotReady);
    CHECK(cudaStreamSynchronize(b) == cudaSuccess);
    CHECK(fakecuda_stream_hold(b, 0) == cudaSuccess);

    /* A context wait: later work on another stream, and on a stream created after it, runs after
     * the recorded work. */
    fakecuda_delayed_fill(p, 0x33, 4096, a, 0);
    CHECK(cuCtxRecordEvent(ctx, ev) == CUDA_SUCCESS);
    CHECK(cuCtxWaitEvent(ctx, ev) == CUDA_SUCCESS);
    fakecuda_delayed_fill(p, 0x44, 4096, b, 0);
    cudaStream_t later;
    CHECK(cudaStreamCreateWithFlags(&later, cudaStreamNonBlocking) == cudaSuccess);
    fakecuda_delayed_fill(p + 4096, 0x55, 4096, later, 0);
    CHECK(cudaStreamSynchronize(b) == cudaSuccess && cudaStreamSynchronize(later) == cudaSuccess);
    CHECK(all_bytes(p, 0x44, 4096) && all_bytes(p + 4096, 0x55, 4096));
    CHECK(fakecuda_stream_hold(a, 0) == cudaSuccess);

    /* A capture of any mode: both calls refuse and invalidate it. */
    const enum cudaStreamCaptureMode modes[3] = {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal,
                                            cudaStreamCaptureModeRelaxed};
    for (int m = 0; m < 6; m++) {
        CHECK(cudaStreamBeginCapture(cap, modes[m % 3]) == cudaSuccess);
        CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
        CHECK(cuThreadExchangeStreamCaptureMode(&relaxed) == CUDA_SUCCESS);
        CHECK((m < 3 ? cuCtxRecordEvent(ctx, ev) : cuCtxWaitEvent(ctx, ev)) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        CHECK(cuThreadExchangeStreamCaptureMode(&relaxed) == CUDA_SUCCESS);
        cudaGraph_t g = NULL;
        CHECK(cudaStreamEndCapture(cap, &g) == cudaErrorStreamCaptureInvalidated);
    }
    struct fakecu_event_calls calls;
    fakecu_get_event_calls(&calls);
    CHECK(calls.ctx_records >= 4 && calls.ctx_waits >= 4);
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CHECK(cuGetProcAddress_v2("cuCtxRecordEvent", &fn, 12050, 0, &st) == CUDA_SUCCESS && fn == (void *)cuCtxRecordEvent);
    CHECK(cuEventDestroy_v2(ev) == CUDA_SUCCESS);
    CHECK(cudaFree(p) == cudaSuccess);
    CHECK(cudaStreamDestroy(a) == cudaSuccess && cudaStreamDestroy(b) == cudaSuccess);
    CHECK(cudaStreamDestroy(later) == cudaSuccess && cudaStreamDestroy(cap) == cudaSuccess);
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    test_driver_before_init();
    test_procaddress();
    test_runtime_alloc_and_errors();
    test_fault_injection();
    test_streams_and_events();
    test_capture();
    test_holds_waits_graphs();
    test_context_events();
    test_devices_and_contexts();
    test_stress();
    if (g_failures) {
        fprintf(stderr, "%d check(s) failed\n", g_failures);
        return 1;
    }
    printf("fake CUDA: all checks passed\n");
    return 0;
}
