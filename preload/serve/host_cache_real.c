// SPDX-License-Identifier: MIT
// The pinned host cache's real calls (host_cache_real.h).
#include "host_cache_real.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_context.h"
#include "forwarding.h"
#include "levels.h"
#include "real.h"

// A driver entry the library lacks: what CUDA answers without a driver.
#define NO_DRIVER 3
// Pages of a registered buffer are faulted in by threads only from this size on: below it a
// thread's start costs more than the faults it takes over.
#define FAULT_IN_PARALLEL_MIN ((size_t)16 << 20)
// cudaHostRegister's bits for portable and mapped memory (cuMemHostRegister's are the same).
#define REGISTER_PORTABLE 0x1u
#define REGISTER_DEVICEMAP 0x2u

// The runtime's call, marked as ours when the runtime level is served: the cache decided it, the
// driver level must not decide it again. With the runtime level off, the driver level serves.
#define RT_CALL(expr)                                                                        \
    do {                                                                                     \
        int mark_ = cci_pl_serving(CCI_LEVEL_RUNTIME);                                       \
        if (mark_)                                                                           \
            cci_pl_forwarding_begin();                                                       \
        code = (expr);                                                                       \
        if (mark_)                                                                           \
            cci_pl_forwarding_end();                                                         \
    } while (0)

int cci_host_real_alloc(int level, void **ptr, size_t size, unsigned flags)
{
    int code;
    if (level == CCI_LEVEL_RUNTIME) {
        RT_CALL(cci_real_rt()->cudaHostAlloc(ptr, size, flags));
        return code;
    }
    const cci_real_driver *t = cci_real_drv();
    return t->cuMemHostAlloc ? t->cuMemHostAlloc(ptr, size, flags) : NO_DRIVER;
}

static size_t page_size(void)
{
    long pg = sysconf(_SC_PAGESIZE);
    return pg > 0 ? (size_t)pg : 4096;
}

typedef struct fault_range {
    char *p;
    size_t n, page;
} fault_range;

static void *fault_in(void *arg)
{
    fault_range *r = arg;
    for (size_t o = 0; o < r->n; o += r->page)
        ((volatile char *)r->p)[o] = 0;
    return NULL;
}

// Touches every page of [p, p + n) with up to `threads` threads, so that the registration finds
// them present: page faults are the part of pinning that parallelises.
static void fault_in_pages(char *p, size_t n, size_t page, unsigned threads)
{
    enum { MAX_THREADS = 128 };
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    if (threads < 2 || n < FAULT_IN_PARALLEL_MIN) {
        fault_range all = {p, n, page};
        fault_in(&all);
        return;
    }
    size_t chunk = (n / threads + page - 1) / page * page;
    pthread_t th[MAX_THREADS];
    fault_range r[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (unsigned i = 0; i < threads; i++) {
        size_t off = (size_t)i * chunk;
        r[i] = (fault_range){p + off, off >= n ? 0 : (n - off < chunk ? n - off : chunk), page};
        started[i] = i > 0 && pthread_create(&th[i], NULL, fault_in, &r[i]) == 0;
    }
    fault_in(&r[0]);
    for (unsigned i = 1; i < threads; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            fault_in(&r[i]);  // no thread: this one does it
    }
}

int cci_host_real_register(int level, void **ptr, size_t size, unsigned flags, unsigned threads)
{
    size_t page = page_size();
    size_t n = (size + page - 1) / page * page;
    // An anonymous mapping of our own: page-aligned, its pages faulted in by our threads only, and
    // given back to the system whole when the buffer is unregistered.
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 2;
    fault_in_pages(p, n, page, threads);
    unsigned rflags = (flags & 0x1u ? REGISTER_PORTABLE : 0) | (flags & 0x2u ? REGISTER_DEVICEMAP : 0);
    int code;
    if (level == CCI_LEVEL_RUNTIME) {
        RT_CALL(cci_real_rt()->cudaHostRegister(p, n, rflags));
    } else {
        const cci_real_driver *t = cci_real_drv();
        code = t->cuMemHostRegister_v2 ? t->cuMemHostRegister_v2(p, n, rflags) : NO_DRIVER;
    }
    if (code != 0) {
        munmap(p, n);
        return code;
    }
    *ptr = p;
    return 0;
}

void cci_host_real_free(int level, int device, void *ptr, size_t size, int registered)
{
    int code;
    if (level == CCI_LEVEL_RUNTIME) {
        RT_CALL(registered ? cci_real_rt()->cudaHostUnregister(ptr) : cci_real_rt()->cudaFreeHost(ptr));
    } else {
        const cci_real_driver *t = cci_real_drv();
        cci_driver_scope sc;
        int entered = cci_cuda_enter(device, &sc) == 0;
        if (registered)
            code = t->cuMemHostUnregister ? t->cuMemHostUnregister(ptr) : NO_DRIVER;
        else
            code = t->cuMemFreeHost ? t->cuMemFreeHost(ptr) : NO_DRIVER;
        if (entered)
            cci_cuda_leave(&sc);
    }
    (void)code;  // nothing to tell the program: the buffer was already freed in its eyes
    if (registered)
        munmap(ptr, (size + page_size() - 1) / page_size() * page_size());
}

int cci_host_current_device(void)
{
    const cci_real_driver *t = cci_real_drv();
    CUdevice d = 0;
    if (!t->cuCtxGetDevice || t->cuCtxGetDevice(&d) != CUDA_SUCCESS || d < 0 || d >= CCI_PL_MAX_DEVICES)
        return 0;
    return d;
}

int cci_host_real_pass_alloc(int level, void **ptr, size_t size, unsigned flags, int plain)
{
    int code;
    if (level == CCI_LEVEL_RUNTIME) {
        const cci_real_runtime *rt = cci_real_rt();
        RT_CALL(plain ? rt->cudaMallocHost(ptr, size) : rt->cudaHostAlloc(ptr, size, flags));
        return code;
    }
    const cci_real_driver *t = cci_real_drv();
    if (plain)
        return t->cuMemAllocHost_v2 ? t->cuMemAllocHost_v2(ptr, size) : NO_DRIVER;
    return t->cuMemHostAlloc ? t->cuMemHostAlloc(ptr, size, flags) : NO_DRIVER;
}

int cci_host_real_pass_free(int level, void *ptr)
{
    int code;
    if (level == CCI_LEVEL_RUNTIME) {
        RT_CALL(cci_real_rt()->cudaFreeHost(ptr));
        return code;
    }
    const cci_real_driver *t = cci_real_drv();
    return t->cuMemFreeHost ? t->cuMemFreeHost(ptr) : NO_DRIVER;
}

int cci_host_real_get_flags(int level, unsigned *flags, void *ptr)
{
    int code;
    if (level == CCI_LEVEL_RUNTIME) {
        RT_CALL(cci_real_rt()->cudaHostGetFlags(flags, ptr));
        return code;
    }
    const cci_real_driver *t = cci_real_drv();
    return t->cuMemHostGetFlags ? t->cuMemHostGetFlags(flags, ptr) : NO_DRIVER;
}

int cci_host_real_get_device_pointer(int level, void **dptr, void *ptr, unsigned flags)
{
    int code;
    if (level == CCI_LEVEL_RUNTIME) {
        RT_CALL(cci_real_rt()->cudaHostGetDevicePointer(dptr, ptr, flags));
        return code;
    }
    const cci_real_driver *t = cci_real_drv();
    if (!t->cuMemHostGetDevicePointer_v2)
        return NO_DRIVER;
    CUdeviceptr d = 0;
    code = t->cuMemHostGetDevicePointer_v2(dptr ? &d : NULL, ptr, flags);
    if (code == 0 && dptr)
        *dptr = (void *)(uintptr_t)d;
    return code;
}
