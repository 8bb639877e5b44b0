// SPDX-License-Identifier: MIT
// The preload on the virtual-memory backend (expandable_segments:True or compact_segments:True in
// CCI_ALLOC_CONF, set by meson): one scenario per run, named by argv[1]. The fake driver's VMM
// statistics show what the backend did; every scenario but the negative control ends by checking
// that the fake's device never touched an unmapped or inaccessible page.
#include "fake_cuda_driver.h"

#include <sys/wait.h>

#include "ptest.h"

#define MiB ((size_t)1 << 20)

static ptest_api api;
static size_t gran;  // FAKECUDA_VMM_GRANULARITY as the fake applies it (2 MiB by default)
static int compact;  // compact_segments:True (else expandable_segments:True)

static struct fakecu_vmm_stats vstats(void)
{
    struct fakecu_vmm_stats s;
    fakecu_vmm_get_stats(&s);
    return s;
}

static void check_no_fault(void)
{
    struct fakecu_vmm_stats s = vstats();
    CHECK(s.faults_unmapped == 0 && s.faults_no_access == 0,
          "no device fault recorded (%llu unmapped, %llu no access)", s.faults_unmapped, s.faults_no_access);
}

static void *alloc_filled(size_t n, uint64_t seed)
{
    void *p;
    CUDA_OK(cudaMalloc(&p, n));
    ptest_fill(p, n, seed);
    return p;
}

// Served from VMM segments, pages of the queried granularity, access set once per growth.
static void serve(void)
{
    unsigned long long allocs = fakecuda_device_allocs();
    void *p[12];
    for (int i = 0; i < 12; i++)
        p[i] = alloc_filled((size_t)(i + 1) * 3 * MiB / 2 + 512 * (size_t)i, (uint64_t)i);
    struct fakecu_vmm_stats s = vstats();
    CHECK(fakecuda_device_allocs() == allocs, "no cuMemAlloc segment: every block is in a VMM segment");
    CHECK(s.creates > 0 && s.maps > 0 && s.mapped_bytes > 0, "pages created (%llu) and mapped (%llu, %zu bytes)",
          s.creates, s.maps, s.mapped_bytes);
    CHECK(s.mapped_bytes % gran == 0 && s.reserved_bytes % gran == 0,
          "mappings and ranges are multiples of the %zu-byte granularity", gran);
    if (compact)
        CHECK((s.maps - s.unmaps) * gran == s.mapped_bytes, "compact mode maps pages of exactly the granularity");
    // A growth by many pages: one cuMemSetAccess for all of them.
    void *wide = alloc_filled(90 * MiB, 12);
    struct fakecu_vmm_stats w = vstats();
    CHECK(w.maps - s.maps >= 2 && w.set_access_calls - s.set_access_calls == 1,
          "access granted per range, not per page (1 call for %llu new mappings)", w.maps - s.maps);
    CUDA_OK(cudaFree(wide));
    s = vstats();
    cci_stats st = ptest_stats(&api, 0);
    CHECK((size_t)st.reserved_bytes[CCI_POOL_ALL].current == s.mapped_bytes,
          "reserved bytes (%lld) are the mapped bytes", (long long)st.reserved_bytes[CCI_POOL_ALL].current);
    for (int i = 0; i < 12; i++) {
        CHECK(ptest_verify(p[i], (size_t)(i + 1) * 3 * MiB / 2 + 512 * (size_t)i, (uint64_t)i), "block %d intact", i);
        CU_OK(fakecu_device_write(0, p[i], NULL, 0x11, 4096));  // the device may write it too
        CUDA_OK(cudaFree(p[i]));
    }
    // The driver level answers for the block, not the mapping or the range.
    void *q = alloc_filled(3 * MiB, 99);
    CUdeviceptr base = 0;
    size_t size = 0;
    CU_OK(cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)(uintptr_t)q + 100));
    CHECK(base == (CUdeviceptr)(uintptr_t)q && size >= 3 * MiB && size < 4 * MiB,
          "cuMemGetAddressRange_v2 inside a VMM block names the block (%zu bytes)", size);
    CUDA_OK(cudaFree(q));
}

// One range per (stream, pool) that grows: mapped bytes rise, address space does not. Each block
// is larger than a page of either mode, so each allocation finds too little at the segment's end.
#define GROWTH_SIZE(i) ((size_t)(21 + (i)) * MiB)
static void growth(void)
{
    void *p[20];
    size_t ranges = 0, mapped = 0;
    for (int i = 0; i < 20; i++) {
        p[i] = alloc_filled(GROWTH_SIZE(i), (uint64_t)i + 7);
        struct fakecu_vmm_stats s = vstats();
        if (i == 0)
            ranges = s.reserved_bytes;
        CHECK(s.reserved_bytes == ranges && s.mapped_bytes > mapped,
              "allocation %d: the segment grew to %zu mapped bytes in the same range", i, s.mapped_bytes);
        mapped = s.mapped_bytes;
    }
    for (int i = 0; i < 20; i++)
        CHECK(ptest_verify(p[i], GROWTH_SIZE(i), (uint64_t)i + 7), "block %d intact after growth", i);
    for (int i = 0; i < 20; i++)
        CUDA_OK(cudaFree(p[i]));
}

// empty_cache unmaps every free page and gives the pooled ones back for real.
static void empty_cache(void)
{
    void *keep = alloc_filled(MiB, 1);
    for (int round = 0; round < 3; round++) {
        void *p[16];
        for (int i = 0; i < 16; i++)
            p[i] = alloc_filled((size_t)(i + 1) * 2 * MiB, (uint64_t)i);
        for (int i = 0; i < 16; i++)
            CUDA_OK(cudaFree(p[i]));
        CHECK(api.empty_cache(0) == 0, "round %d: cci_empty_cache", round);
        struct fakecu_vmm_stats s = vstats();
        cci_stats st = ptest_stats(&api, 0);
        CHECK(s.mapped_bytes <= (compact ? gran : 20 * MiB) && s.mapped_bytes == (size_t)st.reserved_bytes[CCI_POOL_ALL].current,
              "round %d: only the live block's page stays mapped (%zu bytes)", round, s.mapped_bytes);
        CHECK(fakecu_vmm_physical_bytes(0) == s.mapped_bytes,
              "round %d: no page kept in a pool after empty_cache (%zu physical bytes)", round,
              fakecu_vmm_physical_bytes(0));
    }
    CHECK(ptest_verify(keep, MiB, 1), "the live block survived three empty_cache calls");
    CUDA_OK(cudaFree(keep));
}

// Compact mode gives free pages back when it must grow; the allocator's pool and the backend's
// (at most capacity/64) keep them and map them again instead of creating new ones.
static void pool(size_t capacity)
{
    size_t bound = capacity / 64;
    void *big = alloc_filled(200 * MiB, 3);
    void *small = alloc_filled(4 * MiB, 4);
    CUDA_OK(cudaFree(big));
    CUDA_OK(cudaDeviceSynchronize());
    struct fakecu_vmm_stats before = vstats();
    void *next = alloc_filled(240 * MiB, 5);  // must grow: the 200 free MiB are given back first
    struct fakecu_vmm_stats after = vstats();
    size_t pages = 240 * MiB / gran;
    // Unmapped at once, or (compact mode's move on the growth's own stream) mapped again with the
    // old mapping left until its fence has passed: then more is mapped than is reserved.
    CHECK(after.unmaps > before.unmaps ||
              after.mapped_bytes > (size_t)ptest_stats(&api, 0).reserved_bytes[CCI_POOL_ALL].current,
          "the growth gave the free pages back first");
    CHECK(after.releases == before.releases, "no page released: the growth mapped every moved page again");
    // Compact mode unmaps only what the growth needs (plus part of its slack) and keeps those
    // pages in the allocator's own pool; what overflows it is released into the backend's pool,
    // which serves its share too. So more than the backend pool's pages come back.
    CHECK(after.creates - before.creates < pages - bound / gran,
          "%zu of the %zu new pages were created: more than the backend pool's %zu came from the pools",
          (size_t)(after.creates - before.creates), pages, bound / gran);
    CHECK(fakecu_vmm_physical_bytes(0) <= after.mapped_bytes + bound,
          "device memory beyond the mappings stays within the pool's bound");
    CHECK(ptest_verify(small, 4 * MiB, 4) && ptest_verify(next, 240 * MiB, 5), "both live blocks intact");
    CUDA_OK(cudaFree(next));
    CUDA_OK(cudaFree(small));
}

// The number after `key` in the file at `path` (a report the preload just wrote); -1 when absent.
static long long report_figure(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        printf("FAIL: no report at %s\n", path);
        exit(1);
    }
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *at = strstr(text, key);
    return at ? strtoll(at + strlen(key), NULL, 10) : -1;
}

// The report shows the pages the backend keeps in its pool. Compact mode pools pages when it
// gives free ones back before a growth: free every other block of a run (more free than the
// slack, but no hole wide enough for the next request), then ask for a block that must grow.
// The fake's own books say how many pages exist without a mapping: that is the pool (the
// backend's and the allocator's together).
static void pool_report(void)
{
    void *p[20];
    for (int i = 0; i < 20; i++)
        p[i] = alloc_filled(4 * MiB, (uint64_t)i);
    for (int i = 0; i < 20; i += 2)
        CUDA_OK(cudaFree(p[i]));
    CUDA_OK(cudaDeviceSynchronize());
    void *grown = alloc_filled(6 * MiB, 40);
    struct fakecu_vmm_stats s = vstats();
    // Pages that exist but are not reserved: old mappings waiting for their fence are not.
    (void)s;
    size_t unmapped_bytes = fakecu_vmm_physical_bytes(0) - (size_t)ptest_stats(&api, 0).reserved_bytes[CCI_POOL_ALL].current;
    long long pooled = (long long)(unmapped_bytes / gran);
    CHECK(pooled > 0 && unmapped_bytes % gran == 0,
          "the fake holds %lld pages that exist without a mapping (the backend's pool)", pooled);
    char json[64], text[64], html[64];
    snprintf(json, sizeof json, "/tmp/cci-vmm-pool-%ld.json", (long)getpid());
    snprintf(text, sizeof text, "/tmp/cci-vmm-pool-%ld.txt", (long)getpid());
    snprintf(html, sizeof html, "/tmp/cci-vmm-pool-%ld.html", (long)getpid());
    CHECK(api.dump_report(json) == 0 && api.dump_report(text) == 0 && api.dump_report(html) == 0,
          "reports written (JSON, text, HTML)");
    long long jp = report_figure(json, "\"pooled_pages\": "), jb = report_figure(json, "\"pooled_bytes\": ");
    long long tp = report_figure(text, "page pool now ");
    long long hp = report_figure(html, "<span class=\"pooled-pages\">");
    CHECK(jp == pooled && jb == (long long)unmapped_bytes, "JSON: pooled_pages %lld, pooled_bytes %lld", jp, jb);
    CHECK(tp == pooled, "text: \"page pool now %lld pages pooled\"", tp);
    CHECK(hp == pooled, "HTML: page pool now %lld pages", hp);
    CHECK(report_figure(json, "\"unmapped_holes\": ") >= 0, "JSON: the holes figure sits beside it");
    // The growth moved free pages of its own stream at once (no device sync): the report says so,
    // in the same figure in JSON and text.
    long long jd = report_figure(json, "\"deferred_unmaps\": "), js = report_figure(json, "\"syncs\": ");
    long long td = report_figure(text, "VMM retirements  ");
    CHECK(jd >= 1 && js == 0, "JSON: %lld reclaim(s) unmapped the old addresses after a fence, %lld syncs", jd, js);
    CHECK(td == jd, "text: \"VMM retirements %lld reclaims moved pages at once\" (JSON %lld)", td, jd);
    unlink(json);
    unlink(text);
    unlink(html);
    // empty_cache drains the pool; the report follows.
    CUDA_OK(cudaFree(grown));
    for (int i = 1; i < 20; i += 2)
        CUDA_OK(cudaFree(p[i]));
    CHECK(api.empty_cache(0) == 0, "cci_empty_cache");
    CHECK(api.dump_report(json) == 0, "report written after empty_cache");
    jp = report_figure(json, "\"pooled_pages\": ");
    CHECK(jp == 0 && fakecu_vmm_physical_bytes(0) == 0, "after empty_cache the report shows %lld pooled pages", jp);
    unlink(json);
}

// Out of memory inside a reservation: cudaErrorMemoryAllocation, then recovery.
static void oom(void)
{
    void *p[64];
    int n = 0;
    cudaError_t e = cudaSuccess;
    while (n < 64 && (e = cudaMalloc(&p[n], 8 * MiB)) == cudaSuccess)
        ptest_fill(p[n], 8 * MiB, (uint64_t)n), n++;
    CHECK(e == cudaErrorMemoryAllocation && n >= 4, "cudaMalloc answered cudaErrorMemoryAllocation after %d blocks", n);
    for (int i = 0; i < n; i++)
        CHECK(ptest_verify(p[i], 8 * MiB, (uint64_t)i), "block %d intact after the failure", i);
    for (int i = 0; i < n; i++)
        CUDA_OK(cudaFree(p[i]));
    void *big;
    CUDA_OK(cudaMalloc(&big, (size_t)(n - 1) * 8 * MiB));
    ptest_fill(big, (size_t)(n - 1) * 8 * MiB, 42);
    CHECK(ptest_verify(big, (size_t)(n - 1) * 8 * MiB, 42), "recovered: one block of %d MiB fits again", (n - 1) * 8);
    CUDA_OK(cudaFree(big));
}

// Two devices: each device's pages on that device, access for its own device.
static void two_devices(void)
{
    void *p[2];
    for (int d = 0; d < 2; d++) {
        CUDA_OK(cudaSetDevice(d));
        p[d] = alloc_filled(6 * MiB, (uint64_t)d + 10);
        CU_OK(fakecu_device_write(d, p[d], NULL, 0x22, 4096));
        memset(p[d], 0, 4096);
        ptest_fill(p[d], 6 * MiB, (uint64_t)d + 10);
    }
    CHECK(fakecu_vmm_physical_bytes(0) > 0 && fakecu_vmm_physical_bytes(1) > 0, "pages created on both devices");
    for (int d = 0; d < 2; d++) {
        CUDA_OK(cudaSetDevice(d));
        CHECK(ptest_verify(p[d], 6 * MiB, (uint64_t)d + 10), "device %d block intact", d);
        CUDA_OK(cudaFree(p[d]));
        CHECK(api.empty_cache(d) == 0 && fakecu_vmm_physical_bytes(d) == 0, "device %d: empty_cache frees all", d);
    }
    CUDA_OK(cudaSetDevice(0));
}

// fork: the child forgets the parent's pages without calling CUDA and builds its own.
static void forked(void)
{
    void *p = alloc_filled(10 * MiB, 77);
    void *q = alloc_filled(3 * MiB, 78);
    CUDA_OK(cudaFree(q));  // a cached block and (compact mode) a page in the pool stay behind
    struct fakecu_vmm_stats before = vstats();
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct fakecu_vmm_stats s = vstats();
        CHECK(s.unmaps == before.unmaps && s.releases == before.releases,
              "child: nothing of the parent's was unmapped or released");
        cci_stats st = ptest_stats(&api, 0);
        CHECK(st.reserved_bytes[CCI_POOL_ALL].current == 0, "child: statistics start from zero");
        void *c = alloc_filled(5 * MiB, 79);
        CHECK(vstats().maps > s.maps && ptest_verify(c, 5 * MiB, 79), "child: served from a VMM segment of its own");
        CUDA_OK(cudaFree(c));
        check_no_fault();
        exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child exited with 0");
    CHECK(ptest_verify(p, 10 * MiB, 77), "parent: its block is intact");
    CUDA_OK(cudaFree(p));
    CHECK(api.empty_cache(0) == 0 && vstats().mapped_bytes == 0, "parent: empty_cache unmaps everything");
}

// Exit with live VMM blocks and cached pages: the destructor makes no CUDA call.
static void exit_live(void)
{
    for (int i = 0; i < 6; i++)
        (void)alloc_filled((size_t)(i + 1) * MiB, (uint64_t)i);
    void *q = alloc_filled(30 * MiB, 9);
    CUDA_OK(cudaFree(q));
}

// cudaDeviceReset: the core unmaps and releases its pages and ranges, the backend its pool, all
// before the reset, so the reset itself finds nothing of ours to destroy.
static void reset(void)
{
    void *live = alloc_filled(12 * MiB, 1);
    void *q = alloc_filled(30 * MiB, 2);
    CUDA_OK(cudaFree(q));
    (void)live;  // a live block at a reset is the program's loss, as with cudaMalloc
    CUDA_OK(cudaDeviceReset());
    struct fakecu_vmm_stats s = vstats();
    CHECK(s.mapped_bytes == 0 && s.reserved_bytes == 0 && fakecu_vmm_physical_bytes(0) == 0,
          "after the reset nothing is mapped, reserved or kept in a pool");
    CHECK(s.reset_destroyed == 0, "the reset found no page of ours left to destroy");
    void *again = alloc_filled(5 * MiB, 3);
    CHECK(ptest_verify(again, 5 * MiB, 3) && vstats().mapped_bytes > 0, "after the reset, VMM segments serve again");
    CUDA_OK(cudaFree(again));
}

// IPC handles of VMM memory are ours (tests/preload/ipc.c opens them in another process): both
// levels make one without a word, for the block's start and for a pointer inside it alike.
static void ipc(void)
{
    void *p = alloc_filled(4 * MiB, 5);
    cudaIpcMemHandle_t h, inner;
    ptest_capture c = ptest_stderr_begin();
    cudaError_t e = cudaIpcGetMemHandle(&h, p);
    cudaError_t e2 = cudaIpcGetMemHandle(&inner, (char *)p + 4096);
    int lines = ptest_stderr_end(&c, "", NULL, 0);
    CHECK(e == cudaSuccess && e2 == cudaSuccess && lines == 0, "cudaIpcGetMemHandle exports quietly (%d, %d, %d lines)",
          (int)e, (int)e2, lines);
    CHECK(!memcmp(&h, &inner, sizeof h), "a pointer inside the block names the same export");
    CUipcMemHandle dh;
    CUresult r = cuIpcGetMemHandle(&dh, (CUdeviceptr)(uintptr_t)p);
    CHECK(r == CUDA_SUCCESS && !memcmp(&dh, &h, sizeof h), "cuIpcGetMemHandle names the same export (%d)", (int)r);
    CHECK(ptest_verify(p, 4 * MiB, 5), "the block is untouched");
    CUDA_OK(cudaFree(p));
}

// A delayed device write to a freed block: empty_cache must wait for it before unmapping (safe),
// while an unmap behind the preload's back is caught by the fake (control).
static void delayed_write(int control)
{
    void *p = alloc_filled(MiB, 1);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreate(&s));
    CU_OK(fakecu_memset_async((CUdeviceptr)(uintptr_t)p, 0x5a, MiB, (CUstream)s, 300000));
    if (control) {
        // Exactly the mapping that holds p (compact mode: one page of the granularity each).
        CU_OK(cuMemUnmap((CUdeviceptr)((uintptr_t)p & ~(uintptr_t)(gran - 1)), gran));
        CUDA_OK(cudaStreamSynchronize(s));
        struct fakecu_vmm_stats v = vstats();
        CHECK(v.faults_unmapped == 1, "control: the delayed write into a page unmapped under it was caught");
        _exit(0);  // the allocator's books no longer match the device: leave without tearing down
    }
    CUDA_OK(cudaFree(p));
    CHECK(api.empty_cache(0) == 0, "empty_cache with the write still queued");
    CHECK(vstats().mapped_bytes == 0, "the page was unmapped once the write had finished");
    CUDA_OK(cudaStreamDestroy(s));
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("usage: %s scenario\n", argv[0]);
        return 2;
    }
    api = ptest_get_api();
    CHECK(api.is_active() == 1, "the preload is active");
    compact = strstr(api.config_string(), "compact_segments:True") != NULL;
    CHECK(compact || strstr(api.config_string(), "expandable_segments:True"), "a VMM mode is configured");
    const char *g = getenv("FAKECUDA_VMM_GRANULARITY");
    gran = g ? (size_t)strtoull(g, NULL, 10) << (strchr(g, 'M') ? 20 : 0) : 2 * MiB;
    const char *cap = getenv("FAKECUDA_CAPACITY");
    size_t capacity = cap ? (size_t)strtoull(cap, NULL, 10) << (strchr(cap, 'G') ? 30 : 20) : (size_t)1 << 30;
    const char *sc = argv[1];
    if (!strcmp(sc, "serve"))
        serve();
    else if (!strcmp(sc, "growth"))
        growth();
    else if (!strcmp(sc, "empty-cache"))
        empty_cache();
    else if (!strcmp(sc, "pool"))
        pool(capacity);
    else if (!strcmp(sc, "pool-report"))
        pool_report();
    else if (!strcmp(sc, "oom"))
        oom();
    else if (!strcmp(sc, "two-devices"))
        two_devices();
    else if (!strcmp(sc, "fork"))
        forked();
    else if (!strcmp(sc, "exit"))
        exit_live();
    else if (!strcmp(sc, "reset"))
        reset();
    else if (!strcmp(sc, "ipc"))
        ipc();
    else if (!strcmp(sc, "delayed-write"))
        delayed_write(0);
    else if (!strcmp(sc, "fault-control"))
        delayed_write(1);
    else {
        printf("unknown scenario %s\n", sc);
        return 2;
    }
    check_no_fault();
    return 0;
}
