// SPDX-License-Identifier: MIT
// The pinned host cache (preload/serve/host_cache.c) under the fake CUDA. Modes:
//   reuse       a freed buffer comes back for its size class and flags only, through all four
//               allocation calls; the questions (flags, device pointer, attributes) answer as for
//               the real buffer; the statistics count it; cci_empty_cache gives it back.
//   hazard      a slow copy from a pinned buffer is queued on a non-blocking stream, the buffer
//               freed and a new one of its size allocated and written by the CPU: the copy must
//               see the old data. `hazard control` (CCI_DEBUG_UNSAFE=no-fences) expects the
//               corruption: it proves the test sees the hazard the fence prevents.
//   reserve     pinned_reserve_segment_size_mb: small requests carved from one pinning; a carved
//               buffer (not an allocation's start) answers flags, device pointer and attributes.
//   register    pinned_use_cuda_host_register (+ threads): pinned by malloc + register.
//   background  pinned_use_background_threads: the hazard holds, and a passed buffer comes back.
//   off         CCI_PINNED_CACHE=0: every allocation pins anew.
//   reset       cudaDeviceReset frees the pinned memory of the device's context: a cached buffer
//               is never handed out after it, and one the program held is not cached at its free.
//   report      a program that pins and never allocates device memory: the JSON report has the
//               "pinned_host" section.
//   exit-report runs `report` again as a new process with CCI_REPORT set, and reads its exit
//               report: printed for a program that only pins, with the section, the cache given
//               back.
#include "fake_cuda_driver.h"
#include "ptest.h"

#include <sys/wait.h>

#define N ((size_t)1 << 20)

static ptest_api api;

static cci_stats stats(void)
{
    return ptest_stats(&api, 0);
}

static void check_questions(void *p, unsigned want_flags, const char *what)
{
    unsigned flags = 99;
    CUDA_OK(cudaHostGetFlags(&flags, p));
    CHECK(flags == want_flags, "%s: cudaHostGetFlags says %u, want %u", what, flags, want_flags);
    CU_OK(cuMemHostGetFlags(&flags, p));
    CHECK(flags == want_flags, "%s: cuMemHostGetFlags says %u", what, flags);
    void *d = NULL;
    CUDA_OK(cudaHostGetDevicePointer(&d, p, 0));
    CHECK(d == p, "%s: device pointer %p is the host address %p", what, d, p);
    CUdeviceptr cd = 0;
    CU_OK(cuMemHostGetDevicePointer_v2(&cd, p, 0));
    CHECK((void *)(uintptr_t)cd == p, "%s: driver device pointer", what);
    struct cudaPointerAttributes at;
    CUDA_OK(cudaPointerGetAttributes(&at, p));
    CHECK(at.type == cudaMemoryTypeHost && at.hostPointer == p && at.devicePointer == p,
          "%s: attributes say pinned host memory at its own address (type %d)", what, (int)at.type);
}

static void run_reuse(void)
{
    unsigned long long pins0 = fakecu_host_pins();
    void *a, *b, *c, *m;
    CUDA_OK(cudaHostAlloc(&a, 3000, cudaHostAllocDefault));
    CHECK(fakecu_host_registered(a) == -1, "by default a buffer is allocated, not registered");
    check_questions(a, 0, "fresh buffer");
    CUDA_OK(cudaFreeHost(a));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMallocHost(&b, 4096));  // the same power-of-two class as 3000
    CHECK(b == a, "a freed buffer whose fence passed comes back for its class (%p, %p)", a, b);
    check_questions(b, 0, "reused buffer");
    CUDA_OK(cudaHostAlloc(&m, 4000, cudaHostAllocMapped));
    CHECK(m != b, "another flag set never gets the buffer");
    CUDA_OK(cudaFreeHost(b));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaHostAlloc(&c, 4000, cudaHostAllocPortable));
    CHECK(c != b, "a portable request does not get a default buffer");
    CUDA_OK(cudaFreeHost(c));
    CUDA_OK(cudaFreeHost(m));
    CUDA_OK(cudaDeviceSynchronize());
    void *d1, *d2;  // the driver's calls share the buffers
    CU_OK(cuMemAllocHost_v2(&d1, 2500));
    CHECK(d1 == b, "cuMemAllocHost_v2 gets the runtime's freed buffer");
    CU_OK(cuMemHostAlloc(&d2, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
    CHECK(d2 == m, "cuMemHostAlloc(DEVICEMAP) gets the mapped buffer");
    check_questions(d2, cudaHostAllocMapped, "mapped buffer");
    CU_OK(cuMemFreeHost(d1));
    CUDA_OK(cudaFreeHost(d2));
    CHECK(fakecu_host_pins() - pins0 == 3, "three pinnings for three (class, flags) pairs: %llu",
          fakecu_host_pins() - pins0);
    cci_stats s = stats();
    CHECK(s.version == CCI_STATS_VERSION && s.pinned_hits == 3 && s.pinned_misses == 3 &&
              s.pinned_buffers.current == 0 && s.pinned_buffers.peak == 2 &&
              s.pinned_cached_bytes.current == 3 * 4096 && s.pinned_reserved_bytes.current == 3 * 4096 &&
              s.pinned_fence_records == 6 && s.pinned_host_allocs == 3,
          "statistics: hits %llu misses %llu fences %llu cached %lld peak buffers %lld",
          (unsigned long long)s.pinned_hits, (unsigned long long)s.pinned_misses,
          (unsigned long long)s.pinned_fence_records, (long long)s.pinned_cached_bytes.current,
          (long long)s.pinned_buffers.peak);
    CHECK(s.pinned_background_reclaims == 0, "no background thread by default");
    unsigned long long unpins0 = fakecu_host_unpins();
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(api.empty_cache(0) == 0, "cci_empty_cache");
    s = stats();
    CHECK(fakecu_host_unpins() - unpins0 == 3 && s.pinned_reserved_bytes.current == 0 &&
              s.pinned_host_frees == 3,
          "empty_cache gives the three buffers back (%llu)", fakecu_host_unpins() - unpins0);
    void *again;
    CUDA_OK(cudaHostAlloc(&again, 100, 0));
    CUDA_OK(cudaFreeHost(again));  // left cached: the exit gives it back
    CHECK(cudaFreeHost(again) != cudaSuccess, "a second free of a cached buffer is refused");
}

// One round of the hazard: returns 1 when the copy saw the old data.
// settle_ms: a pause after the free, so a background thread has its chance to reclaim early.
static int hazard_round(cudaStream_t s, void *dev, int expect_reuse, long settle_ms)
{
    void *a, *b;
    CUDA_OK(cudaHostAlloc(&a, N, 0));
    memset(a, 0xAA, N);
    fakecuda_delayed_copy(dev, a, N, s, 100000);
    CUDA_OK(cudaFreeHost(a));  // the copy is still queued
    if (settle_ms)
        ptest_sleep_ms(settle_ms);
    CUDA_OK(cudaHostAlloc(&b, N, 0));
    if (expect_reuse)
        CHECK(b == a, "control: without the fence the buffer comes back at once");
    else
        CHECK(b != a, "a buffer a queued copy still reads is not handed out again");
    memset(b, 0x55, N);  // the new owner writes with the CPU
    CUDA_OK(cudaDeviceSynchronize());
    int intact = ptest_all_bytes(dev, N, 0xAA);
    CUDA_OK(cudaFreeHost(b));
    return intact;
}

static void run_hazard(int control)
{
    cudaStream_t s = ptest_stream(cudaStreamNonBlocking);
    void *dev;
    CUDA_OK(cudaMalloc(&dev, N));
    int intact = hazard_round(s, dev, control, 0);
    if (control) {
        CHECK(!intact, "control: the queued copy read the new owner's bytes (the hazard)");
    } else {
        CHECK(intact, "the queued copy read the old data");
        // Once the copy ran, the buffer is reused.
        void *c;
        CUDA_OK(cudaHostAlloc(&c, N, 0));
        cci_stats st = stats();
        CHECK(st.pinned_hits >= 1, "after the fence passed the buffer is reused (hits %llu)",
              (unsigned long long)st.pinned_hits);
        CUDA_OK(cudaFreeHost(c));
    }
    CUDA_OK(cudaFree(dev));
    CUDA_OK(cudaStreamDestroy(s));
}

static void run_reserve(void)
{
    unsigned long long pins0 = fakecu_host_pins();
    void *p[3];
    for (int i = 0; i < 3; i++)
        CUDA_OK(cudaHostAlloc(&p[i], 1000, 0));
    CHECK(fakecu_host_pins() - pins0 == 1, "three small buffers, one pinning (the segment)");
    CHECK((char *)p[1] - (char *)p[0] == 1024 && (char *)p[2] - (char *)p[1] == 1024,
          "carved end to end in their class size");
    check_questions(p[1], 0, "carved buffer");
    void *big, *mapped;
    CUDA_OK(cudaHostAlloc(&big, 2u << 20, 0));
    CUDA_OK(cudaHostAlloc(&mapped, 1000, cudaHostAllocMapped));
    CHECK(fakecu_host_pins() - pins0 == 3, "large and flagged requests are pinned on their own");
    cci_stats s = stats();
    CHECK(s.pinned_reserve_segment_bytes == (4u << 20) &&
              s.pinned_reserved_bytes.current == (4 << 20) + (2 << 20) + 1024,
          "the segment is held whole (%lld)", (long long)s.pinned_reserved_bytes.current);
    for (int i = 0; i < 3; i++)
        CUDA_OK(cudaFreeHost(p[i]));
    CUDA_OK(cudaFreeHost(big));
    CUDA_OK(cudaFreeHost(mapped));
    CUDA_OK(cudaDeviceSynchronize());
    void *q, *r;
    CUDA_OK(cudaMallocHost(&q, 800));
    CHECK(q == p[0], "a carved buffer is reused like any other");
    unsigned long long unpins1 = fakecu_host_unpins();
    api.empty_cache(0);  // q still in use: the carved buffers stay, the others go
    CHECK(fakecu_host_unpins() - unpins1 == 2, "with a carved buffer in use only the others go back");
    CUDA_OK(cudaMallocHost(&r, 800));
    CHECK(r == p[1], "the carved buffers stay cached while the segment is held");
    CUDA_OK(cudaFreeHost(r));
    CUDA_OK(cudaFreeHost(q));
    CUDA_OK(cudaDeviceSynchronize());
    unsigned long long unpins0 = fakecu_host_unpins();
    api.empty_cache(0);
    CHECK(fakecu_host_unpins() - unpins0 == 1 && stats().pinned_reserve_segment_bytes == 0 &&
              stats().pinned_reserved_bytes.current == 0,
          "empty_cache gives back the segment once nothing carved is in use (%llu)",
          fakecu_host_unpins() - unpins0);
}

static void run_register(void)
{
    void *p, *q;
    CUDA_OK(cudaHostAlloc(&p, 20u << 20, cudaHostAllocPortable));
    memset(p, 1, 20u << 20);
    unsigned flags = 0;
    CUDA_OK(cudaHostGetFlags(&flags, p));
    CHECK(flags == cudaHostAllocPortable, "a registered buffer answers the flags it was asked with");
    CHECK(fakecu_host_registered(p) == 100, "the buffer is registered memory, every page faulted in "
          "before the registration (%d %%)", fakecu_host_registered(p));
    struct cudaPointerAttributes at;
    CUDA_OK(cudaPointerGetAttributes(&at, p));
    CHECK(at.type == cudaMemoryTypeHost, "registered memory is pinned host memory");
    CUDA_OK(cudaFreeHost(p));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaHostAlloc(&q, 17u << 20, cudaHostAllocPortable));
    CHECK(q == p, "a registered buffer is reused");
    CUDA_OK(cudaFreeHost(q));
    CUDA_OK(cudaDeviceSynchronize());
    unsigned long long unpins0 = fakecu_host_unpins();
    api.empty_cache(0);
    CHECK(fakecu_host_unpins() - unpins0 == 1, "empty_cache unregisters it");
}

static void run_background(void)
{
    cudaStream_t s = ptest_stream(cudaStreamNonBlocking);
    void *dev;
    CUDA_OK(cudaMalloc(&dev, N));
    CHECK(hazard_round(s, dev, 0, 20), "background: the queued copy read the old data");
    void *c = NULL;
    int reused = 0;
    for (int i = 0; i < 200 && !reused; i++) {  // the thread finds the fences passed
        CUDA_OK(cudaHostAlloc(&c, N, 0));
        reused = stats().pinned_hits > 0;
        CUDA_OK(cudaFreeHost(c));
        ptest_sleep_ms(5);
    }
    CHECK(reused, "background: a buffer whose fence passed comes back");
    CHECK(stats().pinned_background_reclaims > 0, "the background thread found the fences passed (%llu)",
          (unsigned long long)stats().pinned_background_reclaims);
    CUDA_OK(cudaFree(dev));
    CUDA_OK(cudaStreamDestroy(s));
}

static void run_off(void)
{
    unsigned long long pins0 = fakecu_host_pins();
    for (int i = 0; i < 3; i++) {
        void *p;
        CUDA_OK(cudaHostAlloc(&p, 4096, 0));
        CUDA_OK(cudaFreeHost(p));
    }
    CHECK(fakecu_host_pins() - pins0 == 3 && stats().pinned_misses == 0,
          "CCI_PINNED_CACHE=0: every allocation pins anew");
}

static void run_reset(void)
{
    void *cached, *held, *fresh, *fresh2;
    CUDA_OK(cudaHostAlloc(&cached, 8192, 0));
    CUDA_OK(cudaHostAlloc(&held, 8192, 0));
    CUDA_OK(cudaFreeHost(cached));
    CUDA_OK(cudaDeviceSynchronize());
    unsigned long long pins0 = fakecu_host_pins();
    CUDA_OK(cudaDeviceReset());  // the fake frees both, as CUDA does with the context
    CUDA_OK(cudaFreeHost(held));  // the program's late free of memory the reset took
    CUDA_OK(cudaHostAlloc(&fresh, 8192, 0));
    CUDA_OK(cudaHostAlloc(&fresh2, 8192, 0));
    CHECK(fakecu_host_pins() - pins0 == 2, "after the reset both allocations pin anew (%llu)",
          fakecu_host_pins() - pins0);
    memset(fresh, 1, 8192);  // memory of our own again (ASan would see a reused dead buffer)
    memset(fresh2, 2, 8192);
    cci_stats s = stats();
    CHECK(s.pinned_reserved_bytes.current == 2 * 8192 && s.pinned_cached_bytes.current == 0,
          "the reset's buffers leave the statistics (held %lld)", (long long)s.pinned_reserved_bytes.current);
    CUDA_OK(cudaFreeHost(fresh));
    CUDA_OK(cudaFreeHost(fresh2));
}

// The whole file at `path` into buf (NUL-terminated); its length.
static size_t read_text(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "%s readable", path);
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n;
}

static void run_report(void)
{
    void *a, *b;
    CUDA_OK(cudaHostAlloc(&a, 5000, 0));
    CUDA_OK(cudaFreeHost(a));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaHostAlloc(&b, 8000, 0));
    CHECK(a == b, "the fence covers a device the program only copies on (held for the fence)");
    CUDA_OK(cudaFreeHost(b));
    char path[256];
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/pinned-report-%ld.json", dir && *dir ? dir : "/tmp", (long)getpid());
    CHECK(api.dump_report(path) == 0, "report written to %s", path);
    static char text[1 << 16];
    read_text(path, text, sizeof text);
    remove(path);
    CHECK(strstr(text, "\"pinned_host\": {") && strstr(text, "\"pinned_hits\": 1,") &&
              strstr(text, "\"pinned_reserved_bytes\": {\"current\": 8192,"),
          "the JSON report carries the pinned host cache's section");
}

static void run_exit_report(const char *self)
{
    char path[256];
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/pinned-exit-%ld.txt", dir && *dir ? dir : "/tmp", (long)getpid());
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        setenv("CCI_REPORT", path, 1);
        execl(self, self, "report", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the pinning program ran");
    static char text[1 << 16];
    read_text(path, text, sizeof text);
    remove(path);
    CHECK(strstr(text, "Pinned host memory (cudaHostAlloc") &&
              strstr(text, "Allocations: 2, 1 reused from the cache (50 %), 1 newly pinned") &&
              strstr(text, "Frees: 2 behind a fence, 0 given straight back; 1 buffers given back"),
          "the exit report has the pinned section, the cache given back at exit");
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "reuse";
    api = ptest_get_api();
    CHECK(api.is_active() == 1, "the preload is active (%s)", api.config_string());
    if (!strcmp(mode, "reuse"))
        run_reuse();
    else if (!strcmp(mode, "hazard"))
        run_hazard(argc > 2 && !strcmp(argv[2], "control"));
    else if (!strcmp(mode, "reserve"))
        run_reserve();
    else if (!strcmp(mode, "register"))
        run_register();
    else if (!strcmp(mode, "background"))
        run_background();
    else if (!strcmp(mode, "off"))
        run_off();
    else if (!strcmp(mode, "report"))
        run_report();
    else if (!strcmp(mode, "reset"))
        run_reset();
    else if (!strcmp(mode, "exit-report"))
        run_exit_report(argv[0]);
    else
        CHECK(0, "unknown mode %s", mode);
    printf("pinned %s: ok\n", mode);
    return 0;
}
