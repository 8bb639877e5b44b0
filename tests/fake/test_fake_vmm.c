// SPDX-License-Identifier: MIT
/*
 * Checks the fake driver's virtual-memory API (fake_vmm.c): real aliasing,
 * faults on unmapped or no-access pages, OOM, granularity, two devices,
 * release while mapped, fork and exit. Expects FAKECUDA_CAPACITY=16M and
 * FAKECUDA_DEVICES=2 (set by meson).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fake_cuda_driver.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define CAPACITY (16 * MiB)
#define PAGE (2 * MiB)

#include "fake_check.h"

static CUcontext g_ctx[2];

static CUmemAllocationProp prop_on(int dev)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    return p;
}

static CUmemAccessDesc access_for(int dev, CUmemAccess_flags flags)
{
    CUmemAccessDesc d = {.location = {CU_MEM_LOCATION_TYPE_DEVICE, dev}, .flags = flags};
    return d;
}

static CUmemGenericAllocationHandle create_page(int dev)
{
    CUmemAllocationProp p = prop_on(dev);
    CUmemGenericAllocationHandle h = 0;
    CHECK_EQ(cuMemCreate(&h, PAGE, &p, 0), CUDA_SUCCESS);
    return h;
}

static void map_rw(CUdeviceptr at, CUmemGenericAllocationHandle h, int dev)
{
    CHECK_EQ(cuMemMap(at, PAGE, 0, h, 0), CUDA_SUCCESS);
    CUmemAccessDesc d = access_for(dev, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CHECK_EQ(cuMemSetAccess(at, PAGE, &d, 1), CUDA_SUCCESS);
}

static size_t free_bytes(int dev)
{
    size_t fr = 0, total = 0;
    CHECK_EQ(cuCtxSetCurrent(g_ctx[dev]), CUDA_SUCCESS);
    CHECK_EQ(cuMemGetInfo_v2(&fr, &total), CUDA_SUCCESS);
    CHECK_EQ(total, CAPACITY);
    CHECK_EQ(cuCtxSetCurrent(g_ctx[0]), CUDA_SUCCESS);
    return fr;
}

static struct fakecu_vmm_stats stats(void)
{
    struct fakecu_vmm_stats s;
    fakecu_vmm_get_stats(&s);
    return s;
}

static bool all_bytes(const void *p, int byte, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != (unsigned char)byte)
            return false;
    return true;
}

/* Runs fn(arg) in a forked child; returns the signal that killed it, or
 * 0x100 + exit status when it exited. */
static int in_child(void (*fn)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* The kernel's default action, not a sanitizer's handler (ASan turns a SEGV into
         * exit status 1): the parent asks how the child died. */
        signal(SIGSEGV, SIG_DFL);
        signal(SIGBUS, SIG_DFL);
        fn(arg);
        _exit(0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFSIGNALED(st) ? WTERMSIG(st) : 0x100 + WEXITSTATUS(st);
}

static void touch_byte(void *p)
{
    *(volatile char *)p = 1;
}

/* stderr into a temporary file, to check the fake's one-line reports. */
static FILE *g_cap;
static int g_saved_stderr = -1;

static void capture_stderr(void)
{
    fflush(stderr);
    g_cap = tmpfile();
    g_saved_stderr = dup(2);
    if (g_cap && g_saved_stderr >= 0)
        dup2(fileno(g_cap), 2);
}

static bool captured_contains(const char *needle)
{
    fflush(stderr);
    if (g_saved_stderr >= 0) {
        dup2(g_saved_stderr, 2);
        close(g_saved_stderr);
        g_saved_stderr = -1;
    }
    if (!g_cap)
        return false;
    char buf[4096] = {0};
    rewind(g_cap);
    size_t n = fread(buf, 1, sizeof buf - 1, g_cap);
    buf[n] = 0;
    fclose(g_cap);
    g_cap = NULL;
    fputs(buf, stderr); /* keep the lines in the test log */
    return strstr(buf, needle) != NULL;
}

/* ------------------------------------------------------------------ */

static void test_granularity(void)
{
    CUmemAllocationProp p = prop_on(0);
    size_t g = 0;
    CHECK_EQ(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
    CHECK_EQ(g, 2 * MiB);
    CHECK_EQ(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
    CHECK_EQ(g, 2 * MiB);

    /* A caller that assumes 2 MiB instead of asking breaks when it changes. */
    CHECK_EQ(fakecu_vmm_set_granularity(64 << 10), 0);
    CHECK_EQ(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
    CHECK_EQ(g, 64 << 10);
    CUmemGenericAllocationHandle h;
    CHECK_EQ(cuMemCreate(&h, 64 << 10, &p, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
    CHECK_EQ(cuMemCreate(&h, 96 << 10, &p, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(fakecu_vmm_set_granularity(4 * MiB), 0);
    CHECK_EQ(cuMemCreate(&h, PAGE, &p, 0), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr va;
    CHECK_EQ(cuMemAddressReserve(&va, PAGE, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(fakecu_vmm_set_granularity(3000), -1);
    CHECK_EQ(fakecu_vmm_set_granularity(0), -1);
    CHECK_EQ(fakecu_vmm_set_granularity(PAGE), 0);

    /* Bad properties. */
    CHECK_EQ(cuMemGetAllocationGranularity(&g, NULL, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemGetAllocationGranularity(&g, &p, (CUmemAllocationGranularity_flags)7), CUDA_ERROR_INVALID_VALUE);
    CUmemAllocationProp bad = prop_on(5);
    CHECK_EQ(cuMemCreate(&h, PAGE, &bad, 0), CUDA_ERROR_INVALID_DEVICE);
    bad = prop_on(0);
    bad.location.type = CU_MEM_LOCATION_TYPE_HOST;
    CHECK_EQ(cuMemCreate(&h, PAGE, &bad, 0), CUDA_ERROR_INVALID_VALUE);
    bad = prop_on(0);
    bad.type = CU_MEM_ALLOCATION_TYPE_INVALID;
    CHECK_EQ(cuMemCreate(&h, PAGE, &bad, 0), CUDA_ERROR_INVALID_VALUE);
    bad = prop_on(0);
    bad.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
    CHECK_EQ(cuMemCreate(&h, PAGE, &bad, 0), CUDA_ERROR_NOT_SUPPORTED);
    CHECK_EQ(cuMemCreate(&h, PAGE, &p, 1), CUDA_ERROR_INVALID_VALUE);
}

/* One page at two addresses is one set of bytes, and only it is charged. */
static void test_alias(void)
{
    size_t free0 = free_bytes(0);
    struct fakecu_vmm_stats s0 = stats();
    CUdeviceptr va;
    CHECK_EQ(cuMemAddressReserve(&va, 4 * PAGE, 0, 0, 0), CUDA_SUCCESS);
    CHECK_EQ(va % PAGE, 0);
    CUmemGenericAllocationHandle h = create_page(0);
    map_rw(va, h, 0);
    map_rw(va + 2 * PAGE, h, 0);
    CHECK_EQ(free_bytes(0), free0 - PAGE);
    CHECK_EQ(fakecu_vmm_physical_bytes(0), PAGE);
    struct fakecu_vmm_stats s1 = stats();
    CHECK_EQ(s1.mapped_bytes - s0.mapped_bytes, 2 * PAGE);
    CHECK_EQ(s1.reserved_bytes - s0.reserved_bytes, 4 * PAGE);

    char *a = (char *)(uintptr_t)va, *b = (char *)(uintptr_t)(va + 2 * PAGE);
    memset(a, 0x5a, PAGE);
    CHECK(all_bytes(b, 0x5a, PAGE));
    /* The device's write through b shows through a. */
    CHECK_EQ(fakecu_memset_async(va + 2 * PAGE + 100, 0x77, 50, NULL, 0), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK(all_bytes(a + 100, 0x77, 50));
    CHECK(all_bytes(a, 0x5a, 100));
    /* Device copy from one alias into a third page. */
    CUmemGenericAllocationHandle h2 = create_page(0);
    map_rw(va + PAGE, h2, 0);
    CHECK_EQ(fakecu_memcpy_async(va + PAGE, va + 2 * PAGE, PAGE, NULL, 0), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK(!memcmp(a + PAGE, a, PAGE));

    /* Adjacent whole mappings unmap in one call; a range with a hole does not. */
    CHECK_EQ(cuMemUnmap(va, 4 * PAGE), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemUnmap(va, 3 * PAGE), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(h2), CUDA_SUCCESS);
    CHECK_EQ(cuMemAddressFree(va, 4 * PAGE), CUDA_SUCCESS);
    CHECK_EQ(free_bytes(0), free0);
    CHECK_EQ(stats().mapped_bytes, s0.mapped_bytes);
    CHECK_EQ(stats().reserved_bytes, s0.reserved_bytes);
}

static void test_map_rules(void)
{
    CUdeviceptr va;
    CHECK_EQ(cuMemAddressReserve(&va, 4 * PAGE, 0, 0, 0), CUDA_SUCCESS);
    CUmemGenericAllocationHandle h = create_page(0);
    CUmemAllocationProp p = prop_on(0);
    CUmemGenericAllocationHandle big;
    CHECK_EQ(cuMemCreate(&big, 2 * PAGE, &p, 0), CUDA_SUCCESS);

    CHECK_EQ(cuMemMap(va, PAGE, 0, h, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemMap(va, PAGE, 0, h, 0), CUDA_ERROR_INVALID_VALUE);        /* already mapped */
    CHECK_EQ(cuMemMap(va + PAGE, 2 * PAGE, 0, big, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemMap(va + 3 * PAGE, PAGE, 0, big, 0), CUDA_ERROR_INVALID_VALUE); /* not the whole handle */
    CHECK_EQ(cuMemMap(va + 3 * PAGE + 4096, PAGE, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* unaligned */
    CHECK_EQ(cuMemMap(va + 4 * PAGE, PAGE, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* outside the reservation */
    CHECK_EQ(cuMemMap(va + 3 * PAGE, PAGE, PAGE, h, 0), CUDA_ERROR_INVALID_VALUE); /* offset */
    CHECK_EQ(cuMemMap(va + 3 * PAGE, PAGE, 0, 0xdeadbeef, 0), CUDA_ERROR_INVALID_VALUE);

    /* Only whole mappings unmap or get access. */
    CUmemAccessDesc d = access_for(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CHECK_EQ(cuMemUnmap(va + PAGE, PAGE), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemSetAccess(va + PAGE, PAGE, &d, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemSetAccess(va, 3 * PAGE, &d, 1), CUDA_SUCCESS); /* one call, two mappings */
    CUmemAccessDesc bad = access_for(0, (CUmemAccess_flags)2);
    CHECK_EQ(cuMemSetAccess(va, PAGE, &bad, 1), CUDA_ERROR_INVALID_VALUE);
    bad = access_for(7, CU_MEM_ACCESS_FLAGS_PROT_READ);
    CHECK_EQ(cuMemSetAccess(va, PAGE, &bad, 1), CUDA_ERROR_INVALID_DEVICE);

    /* Address space with mappings in it cannot be freed; nor can a part of it. */
    CHECK_EQ(cuMemAddressFree(va, 4 * PAGE), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemUnmap(va, 3 * PAGE), CUDA_SUCCESS);
    CHECK_EQ(cuMemAddressFree(va, 2 * PAGE), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(big), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(big), CUDA_ERROR_INVALID_VALUE); /* dead handle */
    CHECK_EQ(cuMemAddressFree(va, 4 * PAGE), CUDA_SUCCESS);
    CHECK_EQ(cuMemAddressFree(va, 4 * PAGE), CUDA_ERROR_INVALID_VALUE);

    /* An address hint is honoured when free. */
    CUdeviceptr again;
    CHECK_EQ(cuMemAddressReserve(&again, 2 * PAGE, 0, va, 0), CUDA_SUCCESS);
    CHECK_EQ(again, va);
    CHECK_EQ(cuMemAddressFree(again, 2 * PAGE), CUDA_SUCCESS);
}

/* Every mapping starts without access: the device may not touch it, nor may
 * the host, until cuMemSetAccess. */
static void test_access(void)
{
    struct fakecu_vmm_stats s0 = stats();
    CUdeviceptr va;
    CHECK_EQ(cuMemAddressReserve(&va, 2 * PAGE, 0, 0, 0), CUDA_SUCCESS);
    CUmemGenericAllocationHandle h = create_page(0);
    CHECK_EQ(cuMemMap(va, PAGE, 0, h, 0), CUDA_SUCCESS);
    char *p = (char *)(uintptr_t)va;
    unsigned long long flags = 99;
    CUmemLocation loc0 = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CHECK_EQ(cuMemGetAccess(&flags, &loc0, va), CUDA_SUCCESS);
    CHECK_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);

    capture_stderr();
    CHECK_EQ(fakecu_device_write(0, p, NULL, 1, 16), CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK(captured_contains("without access"));
    CHECK_EQ(stats().faults_no_access - s0.faults_no_access, 1);
    CHECK_EQ(in_child(touch_byte, p), SIGSEGV);

    /* Read-only: the device may read it (as a copy source), not write it. */
    CUmemAccessDesc ro = access_for(0, CU_MEM_ACCESS_FLAGS_PROT_READ);
    CHECK_EQ(cuMemSetAccess(va, PAGE, &ro, 1), CUDA_SUCCESS);
    CHECK_EQ(cuMemGetAccess(&flags, &loc0, va), CUDA_SUCCESS);
    CHECK_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READ);
    char buf[16];
    CHECK_EQ(fakecu_device_write(0, buf, p, 0, sizeof buf), CUDA_SUCCESS);
    CHECK(all_bytes(buf, 0, sizeof buf)); /* a fresh page reads zero */
    capture_stderr();
    CHECK_EQ(fakecu_device_write(0, p, NULL, 1, 16), CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK(captured_contains("device fault"));
    CHECK_EQ(in_child(touch_byte, p), SIGSEGV);

    CUmemAccessDesc rw = access_for(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CHECK_EQ(cuMemSetAccess(va, PAGE, &rw, 1), CUDA_SUCCESS);
    CHECK_EQ(fakecu_device_write(0, p, NULL, 1, 16), CUDA_SUCCESS);
    CHECK(all_bytes(p, 1, 16));

    /* Remapping starts without access again. */
    CHECK_EQ(cuMemUnmap(va, PAGE), CUDA_SUCCESS);
    CHECK_EQ(cuMemMap(va, PAGE, 0, h, 0), CUDA_SUCCESS);
    CHECK_EQ(fakecu_device_write(0, p, NULL, 2, 16), CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK_EQ(cuMemSetAccess(va, PAGE, &rw, 1), CUDA_SUCCESS);
    CHECK(all_bytes(p, 1, 16)); /* the page kept its bytes */
    CHECK_EQ(stats().faults_no_access - s0.faults_no_access, 3);

    CHECK_EQ(cuMemUnmap(va, PAGE), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
    CHECK_EQ(cuMemAddressFree(va, 2 * PAGE), CUDA_SUCCESS);
}

/* A touch of a reserved page that nobody mapped: the device is refused and
 * writes nothing, the host faults. */
static void test_unmapped_touch(void)
{
    struct fakecu_vmm_stats s0 = stats();
    CUdeviceptr va;
    CHECK_EQ(cuMemAddressReserve(&va, 2 * PAGE, 0, 0, 0), CUDA_SUCCESS);
    CUmemGenericAllocationHandle h = create_page(0);
    map_rw(va, h, 0);
    char *p = (char *)(uintptr_t)va;
    memset(p, 0x11, PAGE);
    capture_stderr();
    /* Straddles the mapped page and the unmapped one after it. */
    CHECK_EQ(fakecu_device_write(0, p + PAGE - 8, NULL, 0x22, 16), CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK(captured_contains("not mapped"));
    CHECK(all_bytes(p + PAGE - 8, 0x11, 8));
    CHECK_EQ(stats().faults_unmapped - s0.faults_unmapped, 1);
    CHECK_EQ(in_child(touch_byte, p + PAGE), SIGSEGV);
    CHECK_EQ(in_child(touch_byte, p), 0x100); /* the mapped page is fine */
    /* Ordinary host memory is not VMM memory: no checks. */
    char host[8];
    CHECK_EQ(fakecu_device_write(1, host, NULL, 3, sizeof host), CUDA_SUCCESS);
    CHECK(all_bytes(host, 3, sizeof host));
    CHECK_EQ(cuMemUnmap(va, PAGE), CUDA_SUCCESS);
    CHECK_EQ(in_child(touch_byte, p), SIGSEGV);
    CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
    CHECK_EQ(cuMemAddressFree(va, 2 * PAGE), CUDA_SUCCESS);
}

/* A delayed write still queued when its page is unmapped finds no mapping:
 * counted, reported, nothing written, even when the page comes back. */
static void test_unmap_under_delayed_write(void)
{
    struct fakecu_vmm_stats s0 = stats();
    CUdeviceptr va;
    CHECK_EQ(cuMemAddressReserve(&va, PAGE, 0, 0, 0), CUDA_SUCCESS);
    CUmemGenericAllocationHandle h = create_page(0);
    map_rw(va, h, 0);
    char *p = (char *)(uintptr_t)va;
    memset(p, 0x33, PAGE);
    CUstream s;
    CHECK_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    capture_stderr();
    CHECK_EQ(fakecu_memset_async(va, 0xee, 4096, s, 100000), CUDA_SUCCESS);
    CHECK_EQ(cuMemUnmap(va, PAGE), CUDA_SUCCESS); /* does not wait for the stream */
    CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    CHECK(captured_contains("not mapped"));
    CHECK_EQ(stats().faults_unmapped - s0.faults_unmapped, 1);
    map_rw(va, h, 0);
    CHECK(all_bytes(p, 0x33, PAGE));

    /* Correct order: wait for the stream, then unmap. No fault. */
    CHECK_EQ(fakecu_memset_async(va, 0xee, 4096, s, 20000), CUDA_SUCCESS);
    CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    CHECK_EQ(cuMemUnmap(va, PAGE), CUDA_SUCCESS);
    CHECK_EQ(stats().faults_unmapped - s0.faults_unmapped, 1);
    map_rw(va, h, 0);
    CHECK(all_bytes(p, 0xee, 4096));
    CHECK_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
    CHECK_EQ(cuMemUnmap(va, PAGE), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
    CHECK_EQ(cuMemAddressFree(va, PAGE), CUDA_SUCCESS);
}

/* cuMemRelease of a mapped handle is legal; the memory goes with the last
 * mapping, and the handle value is dead at once. */
static void test_release_while_mapped(void)
{
    size_t free0 = free_bytes(0);
    CUdeviceptr va;
    CHECK_EQ(cuMemAddressReserve(&va, 2 * PAGE, 0, 0, 0), CUDA_SUCCESS);
    CUmemGenericAllocationHandle h = create_page(0);
    map_rw(va, h, 0);
    map_rw(va + PAGE, h, 0);
    char *p = (char *)(uintptr_t)va;
    memset(p, 0x44, 64);

    CUmemGenericAllocationHandle back = 0;
    CHECK_EQ(cuMemRetainAllocationHandle(&back, p + PAGE + 100), CUDA_SUCCESS);
    CHECK_EQ(back, h);
    CUmemAllocationProp got;
    CHECK_EQ(cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_SUCCESS);
    CHECK_EQ(got.location.id, 0);
    CHECK_EQ(got.type, CU_MEM_ALLOCATION_TYPE_PINNED);
    CHECK_EQ(cuMemRelease(back), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_ERROR_INVALID_VALUE);

    CHECK_EQ(free_bytes(0), free0 - PAGE); /* still held by its mappings */
    CHECK(all_bytes(p + PAGE, 0x44, 64));
    CHECK_EQ(cuMemUnmap(va, PAGE), CUDA_SUCCESS);
    CHECK_EQ(cuMemMap(va, PAGE, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(free_bytes(0), free0 - PAGE);
    CHECK(all_bytes(p + PAGE, 0x44, 64));
    CHECK_EQ(cuMemUnmap(va + PAGE, PAGE), CUDA_SUCCESS);
    CHECK_EQ(free_bytes(0), free0);
    CHECK_EQ(fakecu_vmm_physical_bytes(0), 0);
    CHECK_EQ(cuMemAddressFree(va, 2 * PAGE), CUDA_SUCCESS);
}

/* Physical pages count against the device; address space does not. */
static void test_oom(void)
{
    size_t free0 = free_bytes(0);
    size_t fit = free0 / PAGE;
    CHECK(fit >= 4);
    CUdeviceptr va;
    CHECK_EQ(cuMemAddressReserve(&va, 4 * CAPACITY, 0, 0, 0), CUDA_SUCCESS);
    CUmemGenericAllocationHandle h[16];
    size_t n = 0;
    CUmemAllocationProp p = prop_on(0);
    while (n < 16 && cuMemCreate(&h[n], PAGE, &p, 0) == CUDA_SUCCESS) {
        map_rw(va + n * PAGE, h[n], 0);
        n++;
    }
    CHECK_EQ(n, fit);
    CUmemGenericAllocationHandle extra;
    CHECK_EQ(cuMemCreate(&extra, PAGE, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CUdeviceptr plain;
    if (free0 % PAGE == 0)
        CHECK_EQ(cuMemAlloc_v2(&plain, 4096), CUDA_ERROR_OUT_OF_MEMORY); /* one pool of memory */
    /* Device 1 is unaffected. */
    CUmemAllocationProp p1 = prop_on(1);
    CHECK_EQ(cuMemCreate(&extra, PAGE, &p1, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(extra), CUDA_SUCCESS);
    /* What was mapped before the OOM still works. */
    CHECK_EQ(fakecu_memset_async(va, 9, PAGE * n, NULL, 0), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK(all_bytes((void *)(uintptr_t)va, 9, PAGE * n));
    CHECK_EQ(cuMemUnmap(va, n * PAGE), CUDA_SUCCESS);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(cuMemRelease(h[i]), CUDA_SUCCESS);
    CHECK_EQ(free_bytes(0), free0);

    /* Injected failures, once each. */
    CHECK_EQ(fakecu_vmm_fail_at("cuMemCreate", 2), 0);
    CHECK_EQ(cuMemCreate(&h[0], PAGE, &p, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemCreate(&h[1], PAGE, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(cuMemCreate(&h[1], PAGE, &p, 0), CUDA_SUCCESS);
    CHECK_EQ(fakecu_vmm_fail_at("cuMemMap", 1), 0);
    CHECK_EQ(cuMemMap(va, PAGE, 0, h[0], 0), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(cuMemMap(va, PAGE, 0, h[0], 0), CUDA_SUCCESS);
    CHECK_EQ(fakecu_vmm_fail_at("cuMemSetAccess", 1), 0);
    CUmemAccessDesc d = access_for(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CHECK_EQ(cuMemSetAccess(va, PAGE, &d, 1), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(cuMemSetAccess(va, PAGE, &d, 1), CUDA_SUCCESS);
    CHECK_EQ(fakecu_vmm_fail_at("cuMemAddressReserve", 1), 0);
    CUdeviceptr va2;
    CHECK_EQ(cuMemAddressReserve(&va2, PAGE, 0, 0, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(fakecu_vmm_fail_at("cuMemCreate", 1), 0);
    CHECK_EQ(fakecu_vmm_fail_at("cuMemCreate", 0), 0); /* disarmed */
    CHECK_EQ(cuMemCreate(&extra, PAGE, &p, 0), CUDA_SUCCESS);
    CHECK_EQ(fakecu_vmm_fail_at("cuMemFoo", 1), -1);
    CHECK_EQ(cuMemUnmap(va, PAGE), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(h[0]), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(h[1]), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(extra), CUDA_SUCCESS);
    CHECK_EQ(cuMemAddressFree(va, 4 * CAPACITY), CUDA_SUCCESS);
    CHECK_EQ(free_bytes(0), free0);
}

/* Pages belong to one device; access is granted per device. */
static void test_two_devices(void)
{
    size_t free0 = free_bytes(0), free1 = free_bytes(1);
    CUdeviceptr va;
    CHECK_EQ(cuMemAddressReserve(&va, PAGE, 0, 0, 0), CUDA_SUCCESS);
    CUmemGenericAllocationHandle h = create_page(1);
    CHECK_EQ(fakecu_vmm_physical_bytes(1), PAGE);
    CHECK_EQ(fakecu_vmm_physical_bytes(0), 0);
    CHECK_EQ(free_bytes(1), free1 - PAGE);
    CHECK_EQ(free_bytes(0), free0);
    map_rw(va, h, 1);
    char *p = (char *)(uintptr_t)va;
    CHECK_EQ(fakecu_device_write(1, p, NULL, 5, 64), CUDA_SUCCESS);
    capture_stderr();
    CHECK_EQ(fakecu_device_write(0, p, NULL, 6, 64), CUDA_ERROR_ILLEGAL_ADDRESS); /* no peer access */
    CHECK(captured_contains("device 0"));
    CHECK(all_bytes(p, 5, 64));
    CUmemAccessDesc both[2] = {access_for(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
                               access_for(1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)};
    CHECK_EQ(cuMemSetAccess(va, PAGE, both, 2), CUDA_SUCCESS);
    CHECK_EQ(fakecu_device_write(0, p, NULL, 6, 64), CUDA_SUCCESS);
    CHECK(all_bytes(p, 6, 64));
    CUmemLocation loc0 = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    unsigned long long flags;
    CHECK_EQ(cuMemGetAccess(&flags, &loc0, va), CUDA_SUCCESS);
    CHECK_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CHECK_EQ(cuMemUnmap(va, PAGE), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
    CHECK_EQ(free_bytes(1), free1);
    CHECK_EQ(cuMemAddressFree(va, PAGE), CUDA_SUCCESS);
}

struct fork_page {
    char *p;
    int ok;
};

static void child_reads_and_writes(void *arg)
{
    struct fork_page *f = arg;
    if (!all_bytes(f->p, 0x61, PAGE))
        _exit(3);
    memset(f->p, 0x62, 128);
    _exit(0);
}

static void child_exits_with_live_mappings(void *arg)
{
    (void)arg;
    CUdeviceptr va;
    if (cuMemAddressReserve(&va, PAGE, 0, 0, 0))
        _exit(4);
    CUmemGenericAllocationHandle h;
    CUmemAllocationProp p = prop_on(0);
    if (cuMemCreate(&h, PAGE, &p, 0))
        _exit(5);
    if (cuMemMap(va, PAGE, 0, h, 0))
        _exit(6);
    exit(0); /* atexit handlers and library destructors run with it all live */
}

/* fork: the child inherits the mappings, and because pages are MAP_SHARED
 * memfds, parent and child share the bytes. */
static void test_fork_and_exit(void)
{
    CUdeviceptr va;
    CHECK_EQ(cuMemAddressReserve(&va, PAGE, 0, 0, 0), CUDA_SUCCESS);
    CUmemGenericAllocationHandle h = create_page(0);
    map_rw(va, h, 0);
    struct fork_page f = {.p = (char *)(uintptr_t)va};
    memset(f.p, 0x61, PAGE);
    CHECK_EQ(in_child(child_reads_and_writes, &f), 0x100);
    CHECK(all_bytes(f.p, 0x62, 128));
    CHECK(all_bytes(f.p + 128, 0x61, PAGE - 128));
    CHECK_EQ(in_child(child_exits_with_live_mappings, NULL), 0x100);
    CHECK_EQ(cuMemUnmap(va, PAGE), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
    CHECK_EQ(cuMemAddressFree(va, PAGE), CUDA_SUCCESS);
}

/* A POSIX fd export maps the same bytes elsewhere (as another process would). */
static void test_export(void)
{
    CUmemAllocationProp p = prop_on(0);
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemGenericAllocationHandle h;
    CHECK_EQ(cuMemCreate(&h, PAGE, &p, 0), CUDA_SUCCESS);
    CUdeviceptr va;
    CHECK_EQ(cuMemAddressReserve(&va, PAGE, 0, 0, 0), CUDA_SUCCESS);
    map_rw(va, h, 0);
    memset((void *)(uintptr_t)va, 0x71, 256);
    int fd = -1;
    CHECK_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
    CHECK(fd >= 0);
    if (fd >= 0) {
        void *q = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, fd, 0);
        CHECK(q != MAP_FAILED);
        if (q != MAP_FAILED) {
            CHECK(all_bytes(q, 0x71, 256));
            munmap(q, PAGE);
        }
        close(fd);
    }
    CUmemGenericAllocationHandle plain = create_page(0);
    CHECK_EQ(cuMemExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
             CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_FABRIC, 0), CUDA_ERROR_NOT_SUPPORTED);
    CHECK_EQ(cuMemRelease(plain), CUDA_SUCCESS);
    CHECK_EQ(cuMemUnmap(va, PAGE), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
    CHECK_EQ(cuMemAddressFree(va, PAGE), CUDA_SUCCESS);
}

static void test_proc_address(void)
{
    static const char *const names[] = {"cuMemGetAllocationGranularity", "cuMemAddressReserve", "cuMemAddressFree",
                                        "cuMemCreate", "cuMemRelease", "cuMemMap", "cuMemUnmap",
                                        "cuMemSetAccess", "cuMemGetAccess", "cuMemRetainAllocationHandle",
                                        "cuMemGetAllocationPropertiesFromHandle", "cuMemExportToShareableHandle",
                                        "cuMemImportFromShareableHandle"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult st;
        CHECK_EQ(cuGetProcAddress_v2(names[i], &fn, 13000, 0, &st), CUDA_SUCCESS);
        CHECK_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
        CHECK(fn != NULL);
    }
    void *fn = NULL;
    CHECK_EQ(cuGetProcAddress_v2("cuMemCreate", &fn, 13000, 0, NULL), CUDA_SUCCESS);
    CHECK(fn == (void *)cuMemCreate);
}

/* A device reset destroys the device's pages, says so, and leaves their
 * address space reserved but unmapped. Runs last: device 1 is reset. */
static void test_device_reset(void)
{
    struct fakecu_vmm_stats s0 = stats();
    CUdeviceptr va;
    CHECK_EQ(cuMemAddressReserve(&va, PAGE, 0, 0, 0), CUDA_SUCCESS);
    CUmemGenericAllocationHandle h = create_page(1);
    map_rw(va, h, 1);
    capture_stderr();
    CHECK_EQ(cuDevicePrimaryCtxReset_v2(1), CUDA_SUCCESS);
    CHECK(captured_contains("reset of device 1 destroyed 1 VMM allocation"));
    CHECK_EQ(stats().reset_destroyed - s0.reset_destroyed, 1);
    CHECK_EQ(fakecu_vmm_physical_bytes(1), 0);
    CHECK_EQ(fakecu_used_bytes(1), 0);
    CHECK_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(fakecu_device_write(1, (void *)(uintptr_t)va, NULL, 0, 8), CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK_EQ(cuMemAddressFree(va, PAGE), CUDA_SUCCESS);
}

int main(void)
{
    CUmemAllocationProp p = prop_on(0);
    CUmemGenericAllocationHandle h;
    CHECK_EQ(cuMemCreate(&h, PAGE, &p, 0), CUDA_ERROR_NOT_INITIALIZED);
    if (cuInit(0) != CUDA_SUCCESS) {
        fprintf(stderr, "test_fake_vmm: cuInit failed\n");
        return 1;
    }
    CHECK_EQ(cuDevicePrimaryCtxRetain(&g_ctx[0], 0), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&g_ctx[1], 1), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(g_ctx[0]), CUDA_SUCCESS);

    test_granularity();
    test_alias();
    test_map_rules();
    test_access();
    test_unmapped_touch();
    test_unmap_under_delayed_write();
    test_release_while_mapped();
    test_oom();
    test_two_devices();
    test_fork_and_exit();
    test_export();
    test_proc_address();
    test_device_reset();

    struct fakecu_vmm_stats s = stats();
    CHECK_EQ(s.mapped_bytes, 0);
    CHECK_EQ(s.reserved_bytes, 0);
    CHECK_EQ(s.handles, 0);
    CHECK_EQ(s.physical_bytes, 0);
    if (g_failures) {
        fprintf(stderr, "test_fake_vmm: %d check(s) failed\n", g_failures);
        return 1;
    }
    printf("test_fake_vmm: all checks passed\n");
    return 0;
}
