// SPDX-License-Identifier: MIT
/*
 * The fake runtime's device memory: cudaMalloc and its kin, cudaMemGetInfo,
 * cudaIpc{Get,Open,Close}MemHandle, and the copies and fills (cudaMemcpy*,
 * cudaMemset*, the test-only fakecuda_delayed_fill), which run as host
 * functions on a stream so that stream-ordering mistakes show up in the
 * bytes. Reaches the driver through the runtime's driver table like every
 * call of fake_cudart.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fake_cudart_internal.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ */
/* Memory                                                              */

RT_API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    if (!devPtr)
        return fcrt_ret(cudaErrorInvalidValue);
    ENTER_OR_RETURN(NULL);
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr p;
    CUresult r = D.cuMemAlloc_v2(&p, size);
    if (r)
        return fcrt_ret_drv(r);
    *devPtr = (void *)(uintptr_t)p;
    return cudaSuccess;
}

RT_API cudaError_t cudaFree(void *devPtr)
{
    ENTER_OR_RETURN(NULL);
    if (!devPtr)
        return cudaSuccess;
    return fcrt_ret_drv(D.cuMemFree_v2((CUdeviceptr)(uintptr_t)devPtr));
}

static cudaError_t malloc_async(void **devPtr, size_t size, cudaStream_t s, bool ptsz)
{
    if (!devPtr)
        return fcrt_ret(cudaErrorInvalidValue);
    ENTER_OR_RETURN(NULL);
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr p;
    CUresult r = ptsz ? D.cuMemAllocAsync_ptsz(&p, size, s) : D.cuMemAllocAsync(&p, size, s);
    if (r)
        return fcrt_ret_drv(r);
    *devPtr = (void *)(uintptr_t)p;
    return cudaSuccess;
}

static cudaError_t free_async(void *devPtr, cudaStream_t s, bool ptsz)
{
    ENTER_OR_RETURN(NULL);
    if (!devPtr)
        return cudaSuccess;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)devPtr;
    return fcrt_ret_drv(ptsz ? D.cuMemFreeAsync_ptsz(p, s) : D.cuMemFreeAsync(p, s));
}

RT_API cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    return malloc_async(devPtr, size, hStream, false);
}

RT_API cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
    return malloc_async(devPtr, size, hStream, true);
}

RT_API cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    return free_async(devPtr, hStream, false);
}

RT_API cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
    return free_async(devPtr, hStream, true);
}

RT_API cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    if (!devPtr)
        return fcrt_ret(cudaErrorInvalidValue);
    ENTER_OR_RETURN(NULL);
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr p;
    CUresult r = D.cuMemAllocManaged(&p, size, flags);
    if (r)
        return fcrt_ret_drv(r);
    *devPtr = (void *)(uintptr_t)p;
    return cudaSuccess;
}

RT_API cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
    if (!devPtr || !pitch)
        return fcrt_ret(cudaErrorInvalidValue);
    ENTER_OR_RETURN(NULL);
    if (width == 0 || height == 0) {  /* as the real runtime answers (H200, CUDA 13.0) */
        *devPtr = NULL;
        *pitch = 0;
        return cudaSuccess;
    }
    CUdeviceptr p;
    CUresult r = D.cuMemAllocPitch_v2(&p, pitch, width, height, 4);
    if (r)
        return fcrt_ret_drv(r);
    *devPtr = (void *)(uintptr_t)p;
    return cudaSuccess;
}

RT_API cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    ENTER_OR_RETURN(NULL);
    return fcrt_ret_drv(D.cuMemGetInfo_v2(free_bytes, total));
}

RT_API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    if (!handle)
        return fcrt_ret(cudaErrorInvalidValue);
    ENTER_OR_RETURN(NULL);
    _Static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(CUipcMemHandle), "IPC handle size");
    return fcrt_ret_drv(D.cuIpcGetMemHandle((CUipcMemHandle *)(void *)handle, (CUdeviceptr)(uintptr_t)devPtr));
}

/* The driver's answers (fake_cuda_driver.h): no handle ever opens here. */
RT_API cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
    if (!devPtr)
        return fcrt_ret(cudaErrorInvalidValue);
    ENTER_OR_RETURN(NULL);
    CUipcMemHandle h;
    memcpy(&h, &handle, sizeof h);
    CUdeviceptr p;
    CUresult r = D.cuIpcOpenMemHandle_v2(&p, h, flags);
    if (r)
        return fcrt_ret_drv(r);
    *devPtr = (void *)(uintptr_t)p;
    return cudaSuccess;
}

RT_API cudaError_t cudaIpcCloseMemHandle(void *devPtr)
{
    ENTER_OR_RETURN(NULL);
    return fcrt_ret_drv(D.cuIpcCloseMemHandle((CUdeviceptr)(uintptr_t)devPtr));
}

/* ---- copies and fills run as host functions on the stream ---- */

struct xfer {
    void *dst;
    const void *src; /* NULL: fill with byte */
    int byte;
    size_t n;
    unsigned delay_us;
    /* synchronous callers wait on these; NULL for fire-and-forget work */
    pthread_mutex_t *m;
    pthread_cond_t *cv;
    bool *done;
};

static void sleep_us(unsigned us)
{
    struct timespec ts = {.tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000L};
    while (nanosleep(&ts, &ts))
        ;
}

static void xfer_run(struct xfer *x)
{
    if (x->delay_us)
        sleep_us(x->delay_us);
    if (x->src)
        memmove(x->dst, x->src, x->n);
    else
        memset(x->dst, x->byte, x->n);
}

/* Runs again on every launch of a graph it was captured into: the driver
 * frees the argument (the drop passed with it), never the job. */
static void xfer_async_job(void *arg)
{
    xfer_run(arg);
}

static void xfer_sync_job(void *arg)
{
    struct xfer *x = arg;
    xfer_run(x);
    pthread_mutex_lock(x->m);
    *x->done = true;
    pthread_cond_signal(x->cv);
    pthread_mutex_unlock(x->m);
}

static cudaError_t xfer_async(const struct xfer *tmpl, cudaStream_t s)
{
    struct xfer *x = malloc(sizeof *x);
    if (!x)
        return cudaErrorMemoryAllocation;
    *x = *tmpl;
    return fcrt_map_error(D.fakecu_launch(s, 0, xfer_async_job, x, free));
}

/* Ordered after earlier legacy-stream work (and, through the legacy stream's
 * implicit barrier, blocking streams), but not after non-blocking streams;
 * returns once the bytes are in place so tests can read them directly. */
static cudaError_t xfer_sync(struct xfer *x)
{
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    bool done = false;
    x->m = &m;
    x->cv = &cv;
    x->done = &done;
    CUresult r = D.fakecu_launch(CU_STREAM_LEGACY, 0, xfer_sync_job, x, NULL);
    if (r)
        return fcrt_map_error(r);
    D.fakecu_stream_demand(CU_STREAM_LEGACY, 0); /* the host waits for it: held work must run */
    pthread_mutex_lock(&m);
    while (!done)
        pthread_cond_wait(&cv, &m);
    pthread_mutex_unlock(&m);
    pthread_cond_destroy(&cv);
    pthread_mutex_destroy(&m);
    return cudaSuccess;
}

static cudaError_t check_copy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    if ((unsigned)kind > cudaMemcpyDefault)
        return cudaErrorInvalidMemcpyDirection;
    if (count && (!dst || !src))
        return cudaErrorInvalidValue;
    return cudaSuccess;
}

RT_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    cudaError_t e = check_copy(dst, src, count, kind);
    if (e)
        return fcrt_ret(e);
    ENTER_OR_RETURN(NULL);
    if (!count)
        return cudaSuccess;
    struct xfer x = {.dst = dst, .src = src, .n = count};
    return fcrt_ret(xfer_sync(&x));
}

RT_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                   cudaStream_t stream)
{
    cudaError_t e = check_copy(dst, src, count, kind);
    if (e)
        return fcrt_ret(e);
    ENTER_OR_RETURN(NULL);
    if (!count)
        return cudaSuccess;
    struct xfer x = {.dst = dst, .src = src, .n = count};
    return fcrt_ret(xfer_async(&x, stream));
}

RT_API cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    if (count && !devPtr)
        return fcrt_ret(cudaErrorInvalidValue);
    ENTER_OR_RETURN(NULL);
    if (!count)
        return cudaSuccess;
    struct xfer x = {.dst = devPtr, .byte = value, .n = count};
    return fcrt_ret(xfer_sync(&x));
}

RT_API cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    if (count && !devPtr)
        return fcrt_ret(cudaErrorInvalidValue);
    ENTER_OR_RETURN(NULL);
    if (!count)
        return cudaSuccess;
    struct xfer x = {.dst = devPtr, .byte = value, .n = count};
    return fcrt_ret(xfer_async(&x, stream));
}

/* ---- test-only ---- */

RT_API void fakecuda_delayed_fill(void *dst, int byte, size_t n, cudaStream_t s, unsigned delay_us)
{
    cudaError_t e = fcrt_enter(NULL);
    if (!e) {
        struct xfer x = {.dst = dst, .byte = byte, .n = n, .delay_us = delay_us};
        e = xfer_async(&x, s);
    }
    if (e == cudaErrorInvalidResourceHandle) {
        fprintf(stderr, "fakecuda_delayed_fill: invalid stream %p\n", (void *)s);
        abort();
    }
    fcrt_ret(e);
}
