// SPDX-License-Identifier: MIT
/*
 * The fake runtime's pinned host memory, over the fake driver's (fake_host.c) through the
 * runtime's driver table, as CUDA's runtime reaches the driver: cudaHostAlloc, cudaMallocHost,
 * cudaFreeHost, cudaHostRegister, cudaHostUnregister, cudaHostGetFlags,
 * cudaHostGetDevicePointer; and the test-only fakecuda_delayed_copy, a copy that runs late on a
 * stream (a copy from pinned memory still queued when the program frees the buffer).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fake_cudart_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

RT_API cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    cudaError_t e = fcrt_enter(NULL);
    if (e)
        return fcrt_ret(e);
    return fcrt_ret_drv(D.cuMemHostAlloc(pHost, size, flags));
}

RT_API cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    return cudaHostAlloc(ptr, size, 0);
}

RT_API cudaError_t cudaFreeHost(void *ptr)
{
    if (!ptr)
        return cudaSuccess;
    cudaError_t e = fcrt_enter(NULL);
    if (e)
        return fcrt_ret(e);
    return fcrt_ret_drv(D.cuMemFreeHost(ptr));
}

RT_API cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    cudaError_t e = fcrt_enter(NULL);
    if (e)
        return fcrt_ret(e);
    return fcrt_ret_drv(D.cuMemHostRegister_v2(ptr, size, flags));
}

RT_API cudaError_t cudaHostUnregister(void *ptr)
{
    cudaError_t e = fcrt_enter(NULL);
    if (e)
        return fcrt_ret(e);
    return fcrt_ret_drv(D.cuMemHostUnregister(ptr));
}

RT_API cudaError_t cudaHostGetFlags(unsigned int *pFlags, void *pHost)
{
    cudaError_t e = fcrt_enter(NULL);
    if (e)
        return fcrt_ret(e);
    return fcrt_ret_drv(D.cuMemHostGetFlags(pFlags, pHost));
}

RT_API cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags)
{
    if (!pDevice)
        return fcrt_ret(cudaErrorInvalidValue);
    cudaError_t e = fcrt_enter(NULL);
    if (e)
        return fcrt_ret(e);
    CUdeviceptr d = 0;
    CUresult r = D.cuMemHostGetDevicePointer_v2(&d, pHost, flags);
    if (!r)
        *pDevice = (void *)(uintptr_t)d;
    return fcrt_ret_drv(r);
}

struct late_copy {
    void *dst;
    const void *src;
    size_t n;
    unsigned delay_us;
};

static void late_copy_run(void *arg)
{
    struct late_copy *c = arg;
    struct timespec ts = {(time_t)(c->delay_us / 1000000), (long)(c->delay_us % 1000000) * 1000};
    nanosleep(&ts, NULL);
    memcpy(c->dst, c->src, c->n);
}

RT_API void fakecuda_delayed_copy(void *dst, const void *src, size_t n, cudaStream_t s, unsigned delay_us)
{
    struct late_copy *c = malloc(sizeof *c);
    if (!c || fcrt_enter(NULL)) {
        fprintf(stderr, "fakecuda_delayed_copy: no memory or no device\n");
        abort();
    }
    *c = (struct late_copy){dst, src, n, delay_us};
    if (D.fakecu_launch(s, 0, late_copy_run, c, free) != CUDA_SUCCESS) {
        fprintf(stderr, "fakecuda_delayed_copy: invalid stream %p\n", (void *)s);
        abort();
    }
}
