// SPDX-License-Identifier: MIT
// A program that reaches the driver the way a statically linked cudart does (nvcc's default, and
// the cudart copies inside CuPy, cuBLAS, cuDNN): no libcudart, no link against libcuda; one
// dlopen("libcuda.so.1"), one dlsym of "cuGetProcAddress_v2", then lookups by base name with a
// CUDA version and flags, and every allocation through the looked-up pointers.
//
// argv[1] = "both" (default): the driver level is on; "untouched": it is off (intercept_level:
// runtime, or CCI_DISABLE=1), so every answer must be the driver's own and nothing is cached.
#include <pthread.h>

#include "fake_cuda_driver.h"
#include "ptest.h"

#define MiB ((size_t)1 << 20)
#define PER_THREAD CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM

typedef CUresult (*resolver_v2_fn)(const char *, void **, int, cuuint64_t,
                                   CUdriverProcAddressQueryResult *);
typedef CUresult (*resolver_v1_fn)(const char *, void **, int, cuuint64_t);

static void *(*glibc_dlsym)(void *, const char *);
static void *drv;         // libcuda.so.1
static void *pre;         // libccinterpose.so
static resolver_v2_fn resolve;  // what dlsym(libcuda, "cuGetProcAddress_v2") answered
static int on;            // the driver level is expected on

// The driver's own export, and ours, of `name`, as glibc finds them.
static void *theirs(const char *name) { return glibc_dlsym(drv, name); }
static void *ours(const char *name) { return pre ? glibc_dlsym(pre, name) : NULL; }
// What a lookup of `name` must give: ours when the driver level is on.
static void *expected(const char *name) { return on ? ours(name) : theirs(name); }

static void *fn_of(const char *base, int version, cuuint64_t flags)
{
    void *pfn = NULL;
    CUdriverProcAddressQueryResult st = 99;
    CUresult rc = resolve(base, &pfn, version, flags, &st);
    if (rc != CUDA_SUCCESS || !pfn || st != CU_GET_PROC_ADDRESS_SUCCESS) {
        printf("FAIL: cuGetProcAddress_v2(%s, %d, %llu): rc %d, status %d\n", base, version,
               (unsigned long long)flags, rc, st);
        exit(1);
    }
    return pfn;
}

#define GET(var, base, flags) memcpy(&(var), &(void *){fn_of((base), 13000, (flags))}, sizeof(void *))

static struct {
    CUresult (*init)(unsigned);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*set_current)(CUcontext);
    CUresult (*ctx_create)(CUcontext *, unsigned, CUdevice);
    CUresult (*ctx_destroy)(CUcontext);
    CUresult (*ctx_pop)(CUcontext *);
    CUresult (*reset)(CUdevice);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*free)(CUdeviceptr);
    CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream);
    CUresult (*free_async)(CUdeviceptr, CUstream);
    CUresult (*alloc_async_ptsz)(CUdeviceptr *, size_t, CUstream);
    CUresult (*free_async_ptsz)(CUdeviceptr, CUstream);
    CUresult (*info)(size_t *, size_t *);
    CUresult (*range)(CUdeviceptr *, size_t *, CUdeviceptr);
    CUresult (*ipc)(CUipcMemHandle *, CUdeviceptr);
    CUresult (*stream_create)(CUstream *, unsigned);
    CUresult (*stream_sync)(CUstream);
    CUresult (*ctx_sync)(void);
} cu;

static unsigned long long (*device_allocs)(void);
static unsigned long long (*device_frees)(void);
static unsigned long long (*procaddress_calls)(const char *);
static void *(*ipc_base)(const void *, int *);

// ---- finding the resolver, from several threads at once -------------------------------------

static void *first_lookups(void *arg)
{
    (void)arg;
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    void *r = h ? dlsym(h, "cuGetProcAddress_v2") : NULL;
    void *m = h ? dlsym(h, "cuMemAlloc_v2") : NULL;
    return (void *)(uintptr_t)(r && m && r == expected("cuGetProcAddress_v2") &&
                               m == expected("cuMemAlloc_v2"));
}

static void find_resolver(void)
{
    void *sym = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
    if (!sym)
        sym = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5");
    CHECK(sym != NULL, "glibc's own dlsym found with dlvsym");
    memcpy(&glibc_dlsym, &sym, sizeof sym);
    drv = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(drv != NULL, "dlopen(libcuda.so.1)");
    Dl_info di;
    void *api = glibc_dlsym(RTLD_DEFAULT, "cci_is_active");
    CHECK(api && dladdr(api, &di), "the preload is loaded");
    pre = dlopen(di.dli_fname, RTLD_NOW | RTLD_NOLOAD);

    // Before anything else: the table behind the answers is built on first use, maybe by
    // several threads at once.
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, first_lookups, NULL);
    int agree = 1;
    for (int i = 0; i < 8; i++) {
        void *ok;
        pthread_join(t[i], &ok);
        agree &= ok != NULL;
    }
    CHECK(agree, "8 threads racing on their first dlsym of the resolver and cuMemAlloc_v2 all get %s",
          on ? "ours" : "the driver's");

    void *r = dlsym(drv, "cuGetProcAddress_v2");
    CHECK(r == expected("cuGetProcAddress_v2") && r != NULL,
          "dlsym(libcuda, \"cuGetProcAddress_v2\") answers %s resolver", on ? "our" : "the driver's");
    memcpy(&resolve, &r, sizeof r);
    void *r1 = dlsym(drv, "cuGetProcAddress");
    CHECK(r1 == expected("cuGetProcAddress"), "dlsym(libcuda, \"cuGetProcAddress\"): %s 11.3 ABI",
          on ? "our" : "the driver's");
    CHECK(dlsym(drv, "cuDeviceGet") == theirs("cuDeviceGet") &&
              dlsym(drv, "cuGetExportTable") == theirs("cuGetExportTable"),
          "dlsym of names we do not wrap (cuDeviceGet, cuGetExportTable) is glibc's answer");
    dlerror();
    CHECK(dlsym(drv, "cuMemAlloc_v3") == NULL && dlerror() != NULL,
          "a name the driver lacks is not found, with a dlerror message");

    memcpy(&device_allocs, &(void *){theirs("fakecu_device_allocs")}, sizeof(void *));
    memcpy(&device_frees, &(void *){theirs("fakecu_device_frees")}, sizeof(void *));
    memcpy(&procaddress_calls, &(void *){theirs("fakecu_procaddress_calls")}, sizeof(void *));
    memcpy(&ipc_base, &(void *){theirs("fakecu_ipc_handle_base")}, sizeof(void *));
}

// ---- the resolver's answers -----------------------------------------------------------------

static void check_lookups(void)
{
    static const int versions[] = {11020, 12000, 12080, 13000};
    for (size_t v = 0; v < sizeof versions / sizeof versions[0]; v++) {
        int ver = versions[v];
        int all = 1;
        all &= fn_of("cuMemAlloc", ver, 0) == expected("cuMemAlloc_v2");
        all &= fn_of("cuMemFree", ver, 0) == expected("cuMemFree_v2");
        all &= fn_of("cuMemAllocAsync", ver, 0) == expected("cuMemAllocAsync");
        all &= fn_of("cuMemAllocAsync", ver, CU_GET_PROC_ADDRESS_LEGACY_STREAM) == expected("cuMemAllocAsync");
        all &= fn_of("cuMemAllocAsync", ver, PER_THREAD) == expected("cuMemAllocAsync_ptsz");
        all &= fn_of("cuMemFreeAsync", ver, 0) == expected("cuMemFreeAsync");
        all &= fn_of("cuMemFreeAsync", ver, PER_THREAD) == expected("cuMemFreeAsync_ptsz");
        all &= fn_of("cuMemGetInfo", ver, 0) == expected("cuMemGetInfo_v2");
        all &= fn_of("cuMemGetAddressRange", ver, 0) == expected("cuMemGetAddressRange_v2");
        all &= fn_of("cuIpcGetMemHandle", ver, 0) == expected("cuIpcGetMemHandle");
        all &= fn_of("cuDevicePrimaryCtxReset", ver, 0) == expected("cuDevicePrimaryCtxReset_v2");
        all &= fn_of("cuCtxDestroy", ver, 0) == expected("cuCtxDestroy_v2");
        // Not ours: the driver's answer, _ptsz variant included.
        all &= fn_of("cuDeviceGet", ver, 0) == theirs("cuDeviceGet");
        all &= fn_of("cuStreamSynchronize", ver, PER_THREAD) == theirs("cuStreamSynchronize_ptsz");
        all &= fn_of("cuGetExportTable", ver, 0) == theirs("cuGetExportTable");
        CHECK(all, "cudaVersion %d, flags 0/1/2: the variant the driver picked, as %s wrapper "
              "(cuMemAllocAsync vs _ptsz by flag); other functions untouched", ver,
              on ? "our" : "its own");
    }

    // The resolver's answer about itself decides every later lookup of cudart.
    CHECK(fn_of("cuGetProcAddress", 12000, 0) == expected("cuGetProcAddress_v2") &&
              fn_of("cuGetProcAddress", 13000, PER_THREAD) == expected("cuGetProcAddress_v2"),
          "self-lookup with cudaVersion >= 12000: %s cuGetProcAddress_v2", on ? "our" : "the driver's");
    CHECK(fn_of("cuGetProcAddress", 11030, 0) == expected("cuGetProcAddress"),
          "self-lookup with cudaVersion 11030: %s cuGetProcAddress (the 4-argument ABI)",
          on ? "our" : "the driver's");
    resolver_v1_fn v1;
    memcpy(&v1, &(void *){fn_of("cuGetProcAddress", 11030, 0)}, sizeof v1);
    void *pfn = NULL;
    CHECK(v1("cuMemAlloc", &pfn, 11030, 0) == CUDA_SUCCESS && pfn == expected("cuMemAlloc_v2"),
          "lookups through the 11.3 ABI resolver substitute too");

    // What the driver says passes through unchanged: errors, NULLs, statuses.
    CUdriverProcAddressQueryResult st = 99;
    pfn = (void *)1;
    CHECK(resolve("cuGetProcAddress", &pfn, 11000, 0, &st) == CUDA_SUCCESS && pfn == NULL &&
              st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
          "self-lookup below 11030: NULL, status 2 (version not sufficient)");
    pfn = (void *)1;
    st = 99;
    CHECK(resolve("cuMemAlloc", &pfn, 3000, 0, &st) == CUDA_SUCCESS && pfn == NULL &&
              st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
          "cuMemAlloc at cudaVersion 3000: NULL, status 2 passes through");
    pfn = (void *)1;
    st = 99;
    CHECK(resolve("cuNoSuchFunction", &pfn, 13000, 0, &st) == CUDA_SUCCESS && pfn == NULL &&
              st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
          "an unknown symbol: CUDA_SUCCESS, NULL, status 1 (symbol not found) pass through");
    pfn = (void *)1;
    CHECK(resolve("cuMemAlloc", &pfn, 13020, 0, &st) == CUDA_ERROR_INVALID_VALUE && pfn == NULL,
          "a cudaVersion newer than the driver (13.2 on 13.0): CUDA_ERROR_INVALID_VALUE passes through");
    CHECK(resolve("cuMemAlloc", &pfn, 13000, 0x100, &st) == CUDA_ERROR_INVALID_VALUE,
          "unknown flags: the driver's CUDA_ERROR_INVALID_VALUE passes through");
    pfn = NULL;
    CHECK(resolve("cuMemFree", &pfn, 13000, 0, NULL) == CUDA_SUCCESS && pfn == expected("cuMemFree_v2"),
          "a NULL symbolStatus is passed on as NULL (and the lookup still substitutes)");

    // Each lookup reaches the driver's resolver exactly once: nothing answered from a cache,
    // nothing asked twice.
    unsigned long long before = procaddress_calls("cuMemFreeAsync");
    for (int i = 0; i < 10; i++)
        fn_of("cuMemFreeAsync", 13000, (cuuint64_t)(i % 3));
    CHECK(procaddress_calls("cuMemFreeAsync") == before + 10,
          "10 lookups = 10 calls of the driver's resolver");
}

// ---- allocations through the looked-up pointers ---------------------------------------------

static void bind_driver(void)
{
    GET(cu.init, "cuInit", 0);
    GET(cu.device_get, "cuDeviceGet", 0);
    GET(cu.retain, "cuDevicePrimaryCtxRetain", 0);
    GET(cu.set_current, "cuCtxSetCurrent", 0);
    GET(cu.ctx_create, "cuCtxCreate", 0);
    GET(cu.ctx_destroy, "cuCtxDestroy", 0);
    GET(cu.ctx_pop, "cuCtxPopCurrent", 0);
    GET(cu.reset, "cuDevicePrimaryCtxReset", 0);
    GET(cu.alloc, "cuMemAlloc", 0);
    GET(cu.free, "cuMemFree", 0);
    GET(cu.alloc_async, "cuMemAllocAsync", 0);
    GET(cu.free_async, "cuMemFreeAsync", 0);
    GET(cu.alloc_async_ptsz, "cuMemAllocAsync", PER_THREAD);
    GET(cu.free_async_ptsz, "cuMemFreeAsync", PER_THREAD);
    GET(cu.info, "cuMemGetInfo", 0);
    GET(cu.range, "cuMemGetAddressRange", 0);
    GET(cu.ipc, "cuIpcGetMemHandle", 0);
    GET(cu.stream_create, "cuStreamCreate", 0);
    GET(cu.stream_sync, "cuStreamSynchronize", 0);
    GET(cu.ctx_sync, "cuCtxSynchronize", 0);
    CUdevice dev;
    CUcontext ctx;
    CU_OK(cu.init(0));
    CU_OK(cu.device_get(&dev, 0));
    CU_OK(cu.retain(&ctx, dev));
    CU_OK(cu.set_current(ctx));
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

// Slots of live blocks with a pattern each, replaced at random: every pattern must survive the
// other blocks' frees and reuses.
static void churn(void)
{
    enum { SLOTS = 64 };
    const int ITER = on ? 4000 : 1000;  // uncached, the fake driver is slow
    CUdeviceptr p[SLOTS] = {0};
    size_t size[SLOTS];
    uint64_t seed[SLOTS];
    CUstream s;
    CU_OK(cu.stream_create(&s, 0));
    unsigned long long allocs0 = device_allocs();
    int intact = 1;
    for (int i = 0; i < ITER; i++) {
        int k = (int)(next_rand() % SLOTS);
        int async = k % 3;  // 0: cuMemAlloc, 1: cuMemAllocAsync on s, 2: per-thread stream
        if (p[k]) {
            intact &= ptest_verify((void *)(uintptr_t)p[k], size[k], seed[k]);
            CU_OK(async == 0   ? cu.free(p[k])
                  : async == 1 ? cu.free_async(p[k], s)
                               : cu.free_async_ptsz(p[k], NULL));
        }
        size[k] = next_rand() % 4 ? 1 + next_rand() % (64 << 10) : 1 + next_rand() % (4 * MiB);
        seed[k] = next_rand();
        CU_OK(async == 0   ? cu.alloc(&p[k], size[k])
              : async == 1 ? cu.alloc_async(&p[k], size[k], s)
                           : cu.alloc_async_ptsz(&p[k], size[k], NULL));
        ptest_fill((void *)(uintptr_t)p[k], size[k], seed[k]);
    }
    for (int k = 0; k < SLOTS; k++) {
        intact &= ptest_verify((void *)(uintptr_t)p[k], size[k], seed[k]);
        CU_OK(cu.free(p[k]));
    }
    CU_OK(cu.stream_sync(s));
    unsigned long long n = device_allocs() - allocs0;
    CHECK(intact, "%d allocations in 64 live slots (cuMemAlloc, cuMemAllocAsync, _ptsz): every "
          "pattern intact", ITER);
    if (on)
        CHECK(n * 20 < (unsigned long long)ITER, "cached: %llu device allocations for %d allocations", n, ITER);
    else
        CHECK(n == (unsigned long long)ITER, "not cached: %llu device allocations for %d allocations", n, ITER);
}

static void check_identity(void)
{
    ptest_api api = ptest_get_api();
    if (on)
        CHECK(api.empty_cache(0) == 0, "cache emptied: the next small blocks share a new segment");
    CUresult (*raw_range)(CUdeviceptr *, size_t *, CUdeviceptr);
    memcpy(&raw_range, &(void *){theirs("cuMemGetAddressRange_v2")}, sizeof(void *));
    CUdeviceptr a, b, seg = 0;
    size_t segsize = 0;
    CU_OK(cu.alloc(&a, 1000));
    CU_OK(cu.alloc(&b, 3000));
    CU_OK(raw_range(&seg, &segsize, b));
    CUdeviceptr base = 0;
    size_t size = 0;
    CU_OK(cu.range(&base, &size, b + 100));
    if (on)
        CHECK(seg != b && base == b && size >= 3000 && size < segsize,
              "cuMemGetAddressRange_v2 inside a block that starts %llu bytes into its %zu-byte "
              "segment answers the block (%#llx, %zu bytes)", b - seg, segsize, base, size);
    else
        CHECK(base == seg && size == segsize, "cuMemGetAddressRange_v2: the driver's answer");
    CHECK(cu.range(NULL, &size, b) == CUDA_SUCCESS && cu.range(&base, NULL, b) == CUDA_SUCCESS,
          "cuMemGetAddressRange_v2 accepts NULL for either output");

    CUipcMemHandle h;
    if (on) {
        CHECK(cu.ipc(&h, b) == CUDA_ERROR_INVALID_VALUE,
              "cuIpcGetMemHandle of a block not at the start of its segment: CUDA_ERROR_INVALID_VALUE");
        CHECK(cu.ipc(&h, a) == CUDA_SUCCESS && ipc_base(&h, NULL) == (void *)(uintptr_t)a,
              "cuIpcGetMemHandle of the block at the segment's start: the driver's handle");
    }
    CUdeviceptr big;
    CU_OK(cu.alloc(&big, 64 * MiB));  // oversize for the small pool: starts its own segment here
    CU_OK(cu.ipc(&h, big));
    CHECK(ipc_base(&h, NULL) == (void *)(uintptr_t)big,
          "cuIpcGetMemHandle of a block at the start of its segment: the driver's handle of it");

    size_t f, t, rf, rt;
    CU_OK(cu.free(big));
    CU_OK(cu.ctx_sync());
    CU_OK(cu.info(&f, &t));
    CUresult (*raw_info)(size_t *, size_t *);
    memcpy(&raw_info, &(void *){theirs("cuMemGetInfo_v2")}, sizeof(void *));
    CU_OK(raw_info(&rf, &rt));
    CHECK(t == rt && (on ? f > rf : f == rf),
          "cuMemGetInfo_v2: free %zu vs the driver's %zu (%s)", f, rf,
          on ? "our cached bytes count as free" : "untouched");

    CU_OK(cu.free(a));
    CU_OK(cu.free(b));
    if (on) {
        CHECK(cu.free(b) == CUDA_ERROR_INVALID_VALUE,
              "a double cuMemFree_v2 of our block: CUDA_ERROR_INVALID_VALUE, nothing else happens");
    }
    int on_stack;
    CUresult (*raw_free)(CUdeviceptr);
    memcpy(&raw_free, &(void *){theirs("cuMemFree_v2")}, sizeof(void *));
    CHECK(cu.free((CUdeviceptr)(uintptr_t)&on_stack) == raw_free((CUdeviceptr)(uintptr_t)&on_stack),
          "cuMemFree_v2 of a pointer nobody allocated: the driver's own code");
    CHECK(cu.alloc(NULL, 16) == CUDA_ERROR_INVALID_VALUE, "cuMemAlloc_v2(NULL, 16): the driver's answer");
}

static void check_oom(void)
{
    CUdeviceptr p;
    CHECK(cu.alloc(&p, (size_t)64 << 30) == CUDA_ERROR_OUT_OF_MEMORY,
          "64 GiB on a 1 GiB device: CUDA_ERROR_OUT_OF_MEMORY (a CUresult, not cudaError_t)");
}

// A context of the program's own: its allocations are not ours to serve, and destroying it
// leaves the pools alone. Resetting the primary context drops them.
static void check_contexts(void)
{
    ptest_api api = ptest_get_api();
    CUdeviceptr keep;
    CU_OK(cu.alloc(&keep, 4096));
    CUdevice dev;
    CUcontext mine, popped;
    CU_OK(cu.device_get(&dev, 0));
    CU_OK(cu.ctx_create(&mine, 0, dev));
    unsigned long long n0 = device_allocs();
    CUdeviceptr p;
    CU_OK(cu.alloc(&p, 4096));
    CHECK(device_allocs() == n0 + 1, "cuMemAlloc_v2 in a context created by the program goes to the driver");
    CU_OK(cu.free(p));
    CU_OK(cu.ctx_destroy(mine));
    (void)popped;
    if (on)
        CHECK(ptest_stats(&api, 0).allocation[CCI_POOL_ALL].current == 1,
              "destroying the program's own context leaves our pools alone");
    CU_OK(cu.free(keep));
    CU_OK(cu.alloc(&keep, 4096));
    unsigned long long frees0 = device_frees();
    CU_OK(cu.reset(dev));
    if (on) {
        // Without a libcudart, cci_get_stats cannot tell a device without an allocator from no
        // device at all and fails: both mean the pools are gone.
        cci_stats s;
        memset(&s, 0, sizeof s);
        s.size = sizeof s;
        CHECK((api.get_stats(0, &s) == -1 || s.reserved_bytes[CCI_POOL_ALL].current == 0) &&
                  device_frees() > frees0,
              "cuDevicePrimaryCtxReset_v2: the device's segments were given back first (%llu "
              "cuMemFree_v2) and its pools dropped", device_frees() - frees0);
    }
    CUcontext ctx;
    CU_OK(cu.retain(&ctx, dev));
    CU_OK(cu.set_current(ctx));
    CU_OK(cu.alloc(&p, 4096));
    ptest_fill((void *)(uintptr_t)p, 4096, 7);
    CHECK(ptest_verify((void *)(uintptr_t)p, 4096, 7), "allocations work again after the reset");
    CU_OK(cu.free(p));
}

int main(int argc, char **argv)
{
    on = !(argc > 1 && strcmp(argv[1], "untouched") == 0);
    find_resolver();
    check_lookups();
    bind_driver();
    churn();
    check_identity();
    check_oom();
    check_contexts();
    return 0;
}
