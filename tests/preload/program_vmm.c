// SPDX-License-Identifier: MIT
// The program's own virtual-memory allocations under the preload (serve/program_vmm.c): buffers
// made with cuMemCreate + cuMemAddressReserve + cuMemMap and torn down with cuMemUnmap +
// cuMemAddressFree + cuMemRelease are kept whole and handed back. One scenario per run, named by
// argv[1]. The fake driver's VMM statistics show which calls reached it; every scenario checks the
// bytes of every live buffer (two buffers alive at once never share pages) and ends with
// cci_empty_cache, after which nothing of the program's may be left at the driver.
//   xla       XLA's order, steps of five buffers: only the first step reaches the driver, and
//             the retain + release and address range of each free none of it
//   nccl      NCCL's orders: the handle released right after the map; retain + release at free
//   exported  a handle exported to another process is never handed out again
//   mismatch  a kept handle mapped elsewhere, a kept reservation given another handle, a second
//             mapping over a unit's range, a retained buffer unmapped: each settled, the program
//             sees the native answers
//   bound     growing sizes: what is kept never takes what the driver holds past 1.5 times the
//             program's own peak
//   oom       a cuMemCreate out of memory gives back every kept buffer and is retried
//   peers     XLA's access loop (one cuMemSetAccess per device, two devices): granted once only
#include "fake_cuda_driver.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ptest.h"

#define MiB ((size_t)1 << 20)

static ptest_api api;

typedef struct buffer {
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    size_t size;
} buffer;

static struct fakecu_vmm_stats vstats(void)
{
    struct fakecu_vmm_stats s;
    fakecu_vmm_get_stats(&s);
    return s;
}

static CUmemAllocationProp prop_of(int handle_types)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    p.requestedHandleTypes = (CUmemAllocationHandleType)handle_types;
    return p;
}

static void grant(CUdeviceptr va, size_t size)
{
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = 0;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU_OK(cuMemSetAccess(va, size, &d, 1));
}

// XLA's order: create, reserve, map, access; filled with `seed`.
static buffer make(size_t size, uint64_t seed, int handle_types)
{
    buffer b = {.size = size};
    CUmemAllocationProp p = prop_of(handle_types);
    CU_OK(cuMemCreate(&b.h, size, &p, 0));
    CU_OK(cuMemAddressReserve(&b.va, size, 0, 0, 0));
    CU_OK(cuMemMap(b.va, size, 0, b.h, 0));
    grant(b.va, size);
    ptest_fill((void *)(uintptr_t)b.va, size, seed);
    return b;
}

static void unmake(buffer b, uint64_t seed)
{
    CHECK(ptest_verify((void *)(uintptr_t)b.va, b.size, seed), "buffer %#llx (%zu MiB) intact before its free",
          (unsigned long long)b.va, b.size / MiB);
    CU_OK(cuMemUnmap(b.va, b.size));
    CU_OK(cuMemAddressFree(b.va, b.size));
    CU_OK(cuMemRelease(b.h));
}

// After cci_empty_cache nothing the program made is left at the driver.
static void check_all_given_back(void)
{
    CHECK(api.empty_cache(0) == 0, "cci_empty_cache(0)");
    struct fakecu_vmm_stats s = vstats();
    CHECK(s.handles == 0 && s.mapped_bytes == 0 && s.reserved_bytes == 0,
          "after cci_empty_cache the driver holds nothing of the program's (%zu handles, %zu mapped, "
          "%zu reserved bytes)", s.handles, s.mapped_bytes, s.reserved_bytes);
    CHECK(s.faults_unmapped == 0 && s.faults_no_access == 0, "no device fault");
}

static void grant_to(CUdeviceptr va, size_t size, int device)
{
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = device;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU_OK(cuMemSetAccess(va, size, &d, 1));
}

static void peers(void)
{
    CUmemAllocationProp p = prop_of(0);
    for (int step = 0; step < 10; step++) {
        buffer b[3];
        for (int i = 0; i < 3; i++) {
            b[i].size = (size_t)(i + 1) * 2 * MiB;
            CU_OK(cuMemCreate(&b[i].h, b[i].size, &p, 0));
            CU_OK(cuMemAddressReserve(&b[i].va, b[i].size, 0, 0, 0));
            CU_OK(cuMemMap(b[i].va, b[i].size, 0, b[i].h, 0));
            for (int dev = 0; dev < 2; dev++)
                grant_to(b[i].va, b[i].size, dev);
            CHECK(fakecu_vmm_access(1, (void *)(uintptr_t)b[i].va, b[i].size) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                  "device 1 may read and write buffer %d", i);
            ptest_fill((void *)(uintptr_t)b[i].va, b[i].size, (uint64_t)(step * 3 + i));
        }
        for (int i = 0; i < 3; i++)
            unmake(b[i], (uint64_t)(step * 3 + i));
    }
    struct fakecu_vmm_stats s = vstats();
    CHECK(s.creates == 3 && s.set_access_calls == 6,
          "each device granted once per buffer: %llu cuMemCreate, %llu cuMemSetAccess (3 and 6)", s.creates,
          s.set_access_calls);
    check_all_given_back();
}

// XLA's free: the handle retained by address and released, the range asked, then the teardown.
static void xla_free(buffer b, uint64_t seed)
{
    CUmemGenericAllocationHandle h;
    CU_OK(cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)b.va));
    CHECK(h == b.h, "cuMemRetainAllocationHandle gives the mapping's handle");
    CU_OK(cuMemRelease(h));
    CUdeviceptr base = 0;
    size_t size = 0;
    CU_OK(cuMemGetAddressRange_v2(&base, &size, b.va + b.size / 2));
    CHECK(base == b.va && size == b.size, "cuMemGetAddressRange gives the whole mapping (%#llx, %zu)",
          (unsigned long long)base, size);
    unmake(b, seed);
}

static void xla(void)
{
    const size_t sizes[5] = {2 * MiB, 4 * MiB, 2 * MiB, 8 * MiB, 6 * MiB};
    enum { STEPS = 40 };
    for (int step = 0; step < STEPS; step++) {
        buffer b[5];
        for (int i = 0; i < 5; i++)
            b[i] = make(sizes[i], (uint64_t)(step * 5 + i), 0);
        for (int i = 0; i < 5; i++)
            xla_free(b[i], (uint64_t)(step * 5 + i));
    }
    struct fakecu_vmm_stats s = vstats();
    CHECK(s.creates == 5 && s.maps == 5 && s.set_access_calls == 5,
          "only the first step reached the driver: %llu cuMemCreate, %llu cuMemMap, %llu cuMemSetAccess (5 each)",
          s.creates, s.maps, s.set_access_calls);
    CHECK(s.retains == 0 && s.releases == 0, "no retain or release reached the driver (%llu, %llu)", s.retains,
          s.releases);
    cci_stats st = ptest_stats(&api, 0);
    CHECK(st.program_vmm_creates == 5 * STEPS && st.program_vmm_reused == 5 * (STEPS - 1),
          "statistics: %llu creates, %llu answered with a kept buffer", (unsigned long long)st.program_vmm_creates,
          (unsigned long long)st.program_vmm_reused);
    CHECK(st.program_vmm_kept_bytes.current == 22 * (int64_t)MiB && st.program_vmm_held_bytes.current == 0 &&
              st.program_vmm_held_bytes.peak == 22 * (int64_t)MiB,
          "22 MiB kept, none held now, 22 MiB held at the peak (%lld, %lld, %lld)",
          (long long)st.program_vmm_kept_bytes.current, (long long)st.program_vmm_held_bytes.current,
          (long long)st.program_vmm_held_bytes.peak);
    char path[] = "/tmp/cci-program-vmm-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "a temporary file");
    close(fd);
    CHECK(api.dump_report(path) == 0, "cci_dump_report");
    FILE *f = fopen(path, "r");
    static char text[1 << 16];
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = 0;
    if (f)
        fclose(f);
    unlink(path);
    CHECK(strstr(text, "cuMemCreate calls: 200, 195 answered with a kept buffer"),
          "the report's section counts them");
    // The same figures in the HTML report, a section of its own.
    char html[] = "/tmp/cci-program-vmm-XXXXXX.html";
    fd = mkstemps(html, 5);
    CHECK(fd >= 0, "a temporary .html file");
    close(fd);
    CHECK(api.dump_report(html) == 0, "cci_dump_report (HTML)");
    f = fopen(html, "r");
    n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = 0;
    if (f)
        fclose(f);
    unlink(html);
    CHECK(strstr(text, "<section class=\"process\" id=\"program_vmm\">") &&
              strstr(text, "answered with a kept buffer</td><td>195</td>"),
          "the HTML report has the section and its counts");
    CHECK(api.empty_cache(-1) == -1 && ptest_stats(&api, 0).program_vmm_kept_bytes.current == 22 * (int64_t)MiB,
          "cci_empty_cache(-1) is refused and gives nothing back");
    check_all_given_back();
}

static void nccl(void)
{
    CUmemAllocationProp p = prop_of(0);
    for (int round = 0; round < 3; round++) {
        // Released right after the map; torn down with unmap + free.
        buffer a = {.size = 4 * MiB};
        CU_OK(cuMemCreate(&a.h, a.size, &p, 0));
        CU_OK(cuMemAddressReserve(&a.va, a.size, 0, 0, 0));
        CU_OK(cuMemMap(a.va, a.size, 0, a.h, 0));
        CU_OK(cuMemRelease(a.h));
        grant(a.va, a.size);
        ptest_fill((void *)(uintptr_t)a.va, a.size, 100 + round);
        // Kept to the end; freed with retain, release, unmap, release, free.
        buffer b = make(6 * MiB, 200 + round, 0);
        CHECK(ptest_verify((void *)(uintptr_t)a.va, a.size, 100 + round), "the first buffer intact");
        CU_OK(cuMemUnmap(a.va, a.size));
        CU_OK(cuMemAddressFree(a.va, a.size));
        CUmemGenericAllocationHandle h;
        CU_OK(cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)(b.va + MiB)));
        CHECK(h == b.h, "cuMemRetainAllocationHandle gives the mapping's handle");
        CU_OK(cuMemRelease(h));
        CHECK(ptest_verify((void *)(uintptr_t)b.va, b.size, 200 + round), "the second buffer intact");
        CU_OK(cuMemUnmap(b.va, b.size));
        CU_OK(cuMemRelease(b.h));
        CU_OK(cuMemAddressFree(b.va, b.size));
        // A kept buffer is no mapping: the driver would say so.
        CHECK(cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)b.va) == CUDA_ERROR_INVALID_VALUE,
              "retaining a torn-down buffer's handle fails as natively");
        CHECK(cuMemRelease(b.h) == CUDA_ERROR_INVALID_VALUE, "releasing it twice fails as natively");
    }
    struct fakecu_vmm_stats s = vstats();
    CHECK(s.creates == 2, "two cuMemCreate calls reached the driver in three rounds (%llu)", s.creates);
    check_all_given_back();
}

static void exported(void)
{
    buffer a = make(4 * MiB, 1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    int fd = -1;
    CU_OK(cuMemExportToShareableHandle(&fd, a.h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    // The other process's view of the pages: the exported descriptor mapped here.
    void *other = mmap(NULL, a.size, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(other != MAP_FAILED, "the exported descriptor maps");
    unmake(a, 1);
    buffer b = make(4 * MiB, 2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CHECK(vstats().creates == 2, "the next buffer of that shape is a new one (%llu cuMemCreate)", vstats().creates);
    CHECK(ptest_verify(other, a.size, 1), "the other process's pages still hold their bytes");
    unmake(b, 2);
    munmap(other, a.size);
    close(fd);
    cci_stats st = ptest_stats(&api, 0);
    CHECK(st.program_vmm_reused == 0, "nothing exported was reused (%llu)", (unsigned long long)st.program_vmm_reused);
    check_all_given_back();
}

static void mismatch(void)
{
    CUmemAllocationProp p = prop_of(0);
    unmake(make(4 * MiB, 1, 0), 1);  // kept: 4 MiB
    // The kept handle taken back, but mapped in a reservation of another size.
    buffer a = {.size = 4 * MiB};
    CU_OK(cuMemCreate(&a.h, a.size, &p, 0));
    CUdeviceptr big;
    CU_OK(cuMemAddressReserve(&big, 8 * MiB, 0, 0, 0));
    CU_OK(cuMemMap(big + 4 * MiB, a.size, 0, a.h, 0));
    grant(big + 4 * MiB, a.size);
    ptest_fill((void *)(uintptr_t)(big + 4 * MiB), a.size, 2);
    CHECK(vstats().creates == 1 && vstats().mapped_bytes == 4 * MiB,
          "the kept handle served, its old mapping undone (%llu creates, %zu bytes mapped)", vstats().creates,
          vstats().mapped_bytes);
    // A second handle in the first half, the whole range unmapped at once.
    buffer c = {.size = 4 * MiB};
    CU_OK(cuMemCreate(&c.h, c.size, &p, 0));
    CU_OK(cuMemMap(big, c.size, 0, c.h, 0));
    grant(big, c.size);
    ptest_fill((void *)(uintptr_t)big, c.size, 3);
    CHECK(ptest_verify((void *)(uintptr_t)(big + 4 * MiB), a.size, 2), "the other half intact");
    CU_OK(cuMemUnmap(big, 8 * MiB));
    CU_OK(cuMemRelease(a.h));
    CU_OK(cuMemRelease(c.h));
    CU_OK(cuMemAddressFree(big, 8 * MiB));
    // A kept reservation taken back and given another handle after the program's own unmap.
    unmake(make(2 * MiB, 4, 0), 4);
    buffer d = make(2 * MiB, 5, 0);  // the kept one again
    CU_OK(cuMemUnmap(d.va, d.size));
    CUmemGenericAllocationHandle e;
    CU_OK(cuMemCreate(&e, d.size, &p, 0));
    CU_OK(cuMemMap(d.va, d.size, 0, e, 0));
    grant(d.va, d.size);
    ptest_fill((void *)(uintptr_t)d.va, d.size, 6);
    CU_OK(cuMemRelease(d.h));
    CHECK(ptest_verify((void *)(uintptr_t)d.va, d.size, 6), "the new handle's bytes at the old address");
    CU_OK(cuMemUnmap(d.va, d.size));
    CU_OK(cuMemRelease(e));
    CU_OK(cuMemAddressFree(d.va, d.size));
    // A lent reference (a retain answered by us) made real when its buffer is settled: the
    // program's two releases reach the driver and both succeed, a third fails.
    buffer g = make(2 * MiB, 8, 0);
    CUmemGenericAllocationHandle gh;
    CU_OK(cuMemRetainAllocationHandle(&gh, (void *)(uintptr_t)g.va));
    CU_OK(cuMemUnmap(g.va, g.size));
    CHECK(cuMemGetAddressRange_v2(NULL, NULL, g.va) != CUDA_SUCCESS, "an unmapped buffer has no address range");
    CU_OK(cuMemRelease(gh));
    CU_OK(cuMemRelease(g.h));
    CHECK(cuMemRelease(g.h) != CUDA_SUCCESS, "a third release fails");
    CU_OK(cuMemAddressFree(g.va, g.size));
    // A unit's reservation freed while still mapped: refused, as natively.
    buffer f = make(2 * MiB, 7, 0);
    CHECK(cuMemAddressFree(f.va, f.size) != CUDA_SUCCESS, "freeing a mapped reservation fails");
    unmake(f, 7);
    check_all_given_back();
}

static void bound(void)
{
    size_t peak = 0;
    for (size_t mib = 2; mib <= 20; mib += 2) {
        buffer b = make(mib * MiB, mib, 0);
        struct fakecu_vmm_stats s = vstats();
        CHECK(s.physical_bytes <= (mib + peak / 2) * MiB, "at %zu MiB held the driver has %zu MiB: no more than "
              "the new buffer and half the program's peak before it (%zu MiB)", mib, s.physical_bytes / MiB, peak);
        unmake(b, mib);
        peak = mib;
    }
    // Back down: kept buffers go once what the driver holds would pass 1.5 times the 20 MiB peak.
    for (size_t mib = 2; mib <= 10; mib += 2) {
        buffer b = make(mib * MiB, mib, 0);
        struct fakecu_vmm_stats s = vstats();
        CHECK(s.physical_bytes <= (peak + peak / 2) * MiB, "%zu MiB held, %zu MiB at the driver, peak %zu MiB", mib,
              s.physical_bytes / MiB, peak);
        unmake(b, mib);
    }
    CHECK(ptest_stats(&api, 0).program_vmm_given_back > 0, "kept buffers were given back");
    check_all_given_back();
}

static void oom(void)
{
    buffer b[3];
    for (int i = 0; i < 3; i++)
        b[i] = make(4 * MiB, (uint64_t)i, 0);
    for (int i = 0; i < 3; i++)
        unmake(b[i], (uint64_t)i);
    CHECK(fakecu_vmm_fail_at("cuMemCreate", 1) == 0, "the next cuMemCreate fails");
    buffer c = make(2 * MiB, 9, 0);  // not a kept shape: the driver's answer is out of memory
    cci_stats st = ptest_stats(&api, 0);
    CHECK(st.program_vmm_given_back == 3 && st.program_vmm_kept_bytes.current == 0,
          "the three kept buffers given back before the retry (%llu)", (unsigned long long)st.program_vmm_given_back);
    unmake(c, 9);
    check_all_given_back();
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        printf("usage: %s xla|nccl|exported|mismatch|bound|oom|peers\n", argv[0]);
        return 2;
    }
    api = ptest_get_api();
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaFree(0));  // the layer starts with the first runtime call
    CHECK(api.is_active(), "the layer is active");
    struct {
        const char *name;
        void (*fn)(void);
    } scenarios[] = {{"xla", xla}, {"nccl", nccl}, {"exported", exported}, {"mismatch", mismatch},
                     {"bound", bound}, {"oom", oom}, {"peers", peers}};
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (!strcmp(argv[1], scenarios[i].name)) {
            scenarios[i].fn();
            printf("PASS: %s\n", argv[1]);
            return 0;
        }
    printf("unknown scenario %s\n", argv[1]);
    return 2;
}
