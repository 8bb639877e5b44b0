// SPDX-License-Identifier: MIT
/*
 * The fake device's accesses to memory (see fake_vmm.c for the VMM model).
 *
 * The device touches memory only through fakecu_device_write and the
 * stream-ordered jobs built on it. Inside a reservation every byte must be
 * mapped with access for the accessing device; otherwise nothing is written,
 * the fault is counted and reported in one line, and the caller gets
 * CUDA_ERROR_ILLEGAL_ADDRESS (a stream job only reports, as a kernel's fault
 * surfaces later on the real device). The check and the copy happen under
 * vmm_lock held for reading, so an unmap cannot pull a page away mid-copy,
 * while a delayed job sleeps without the lock: an unmap during the delay is
 * exactly the bug the fake must show.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fake_cuda_driver.h"
#include "fake_vmm.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VMM_MAX_FAULT_LINES 32

static atomic_int g_fault_lines;

/* ------------------------------------------------------------------ */
/* Device-side accesses                                                */

enum verdict { V_OK, V_UNMAPPED, V_NO_ACCESS };

/* Every reserved byte of [p, p + n) must be mapped with access for dev;
 * bytes outside every reservation are not VMM memory and pass. */
static enum verdict check_range_locked(uintptr_t p, size_t n, int dev, bool write, uintptr_t *bad)
{
    uintptr_t end = p + n;
    size_t ri = vmm_vec_lower_bound(&vmm_res, p);
    if (ri > 0 && vmm_vec_at(&vmm_res, ri - 1)->va + vmm_vec_at(&vmm_res, ri - 1)->size > p)
        ri--;
    for (; ri < vmm_res.n && vmm_vec_at(&vmm_res, ri)->va < end; ri++) {
        const struct span *res = vmm_vec_at(&vmm_res, ri);
        uintptr_t cur = res->va > p ? res->va : p;
        uintptr_t stop = res->va + res->size < end ? res->va + res->size : end;
        size_t mi = vmm_vec_find(&vmm_maps, cur);
        while (cur < stop) {
            if (mi >= vmm_maps.n || vmm_map_at(mi)->at.va > cur) {
                *bad = cur;
                return V_UNMAPPED;
            }
            const struct mapping *m = vmm_map_at(mi);
            if (!((write ? m->write_mask : m->read_mask) & (1u << dev))) {
                *bad = cur;
                return V_NO_ACCESS;
            }
            cur = m->at.va + m->at.size;
            mi++;
        }
    }
    return V_OK;
}

static void report_fault(int dev, bool write, const void *p, size_t n, enum verdict v, uintptr_t bad)
{
    atomic_fetch_add(v == V_UNMAPPED ? &vmm_faults_unmapped : &vmm_faults_no_access, 1);
    int line = atomic_fetch_add(&g_fault_lines, 1);
    if (line < VMM_MAX_FAULT_LINES)
        fprintf(stderr, "fakecuda: device fault: device %d %s [%p, +%zu) hits %p, %s\n", dev,
                write ? "writing" : "reading", p, n, (void *)bad,
                v == V_UNMAPPED ? "a reserved page that is not mapped" : "a page mapped without access for it");
    else if (line == VMM_MAX_FAULT_LINES)
        fprintf(stderr, "fakecuda: further device faults are counted, not printed\n");
}

VMM_API int fakecu_vmm_access(int dev, const void *p, size_t n)
{
    if (dev < 0 || dev >= VMM_MAX_DEVICES || !n || (uintptr_t)p + n < (uintptr_t)p)
        return -1;
    uint32_t bit = 1u << dev;
    int least = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    uintptr_t cur = (uintptr_t)p, end = cur + n;
    pthread_rwlock_rdlock(&vmm_lock);
    size_t mi = vmm_vec_find(&vmm_maps, cur);
    while (cur < end) {
        if (mi >= vmm_maps.n || vmm_map_at(mi)->at.va > cur) {
            least = -1;
            break;
        }
        const struct mapping *m = vmm_map_at(mi);
        int here = m->write_mask & bit ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                   : m->read_mask & bit ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                        : CU_MEM_ACCESS_FLAGS_PROT_NONE;
        if (here < least)
            least = here;
        cur = m->at.va + m->at.size;
        mi++;
    }
    pthread_rwlock_unlock(&vmm_lock);
    return least;
}

VMM_API CUresult fakecu_device_write(int dev, void *dst, const void *src, int byte, size_t n)
{
    if (dev < 0 || dev >= VMM_MAX_DEVICES || (n && !dst) || (uintptr_t)dst + n < (uintptr_t)dst ||
        (src && (uintptr_t)src + n < (uintptr_t)src))
        return CUDA_ERROR_INVALID_VALUE;
    if (!n)
        return CUDA_SUCCESS;
    uintptr_t bad = 0;
    bool bad_is_write = true;
    pthread_rwlock_rdlock(&vmm_lock);
    enum verdict v = check_range_locked((uintptr_t)dst, n, dev, true, &bad);
    if (v == V_OK && src) {
        v = check_range_locked((uintptr_t)src, n, dev, false, &bad);
        bad_is_write = false;
    }
    if (v == V_OK) { /* under the lock: no unmap can pull the pages away mid-copy */
        if (src)
            memmove(dst, src, n);
        else
            memset(dst, byte, n);
    }
    pthread_rwlock_unlock(&vmm_lock);
    if (v == V_OK)
        return CUDA_SUCCESS;
    report_fault(dev, bad_is_write, bad_is_write ? dst : src, n, v, bad);
    return CUDA_ERROR_ILLEGAL_ADDRESS;
}

struct device_job {
    int dev;
    void *dst;
    const void *src;
    int byte;
    size_t n;
    unsigned delay_us;
};

static void device_job_run(void *arg)
{
    struct device_job *j = arg;
    if (j->delay_us) {
        struct timespec ts = {.tv_sec = j->delay_us / 1000000u, .tv_nsec = (long)(j->delay_us % 1000000u) * 1000L};
        while (nanosleep(&ts, &ts))
            ;
    }
    (void)fakecu_device_write(j->dev, j->dst, j->src, j->byte, j->n); /* a fault was reported */
}

static CUresult enqueue_device_job(const struct device_job *tmpl, CUstream s)
{
    CUdevice dev;
    CUresult r = cuCtxGetDevice(&dev);
    if (r)
        return r;
    if (tmpl->n && !tmpl->dst)
        return CUDA_ERROR_INVALID_VALUE;
    struct device_job *j = malloc(sizeof *j);
    if (!j)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *j = *tmpl;
    j->dev = dev;
    return fakecu_launch(s, 0, device_job_run, j, free);  /* the fake frees j after the job */
}

VMM_API CUresult fakecu_memset_async(CUdeviceptr dst, int byte, size_t n, CUstream hStream, unsigned delay_us)
{
    struct device_job j = {.dst = (void *)(uintptr_t)dst, .byte = byte, .n = n, .delay_us = delay_us};
    return enqueue_device_job(&j, hStream);
}

VMM_API CUresult fakecu_memcpy_async(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream hStream,
                                     unsigned delay_us)
{
    if (n && !src)
        return CUDA_ERROR_INVALID_VALUE;
    struct device_job j = {.dst = (void *)(uintptr_t)dst, .src = (const void *)(uintptr_t)src, .n = n,
                           .delay_us = delay_us};
    return enqueue_device_job(&j, hStream);
}

