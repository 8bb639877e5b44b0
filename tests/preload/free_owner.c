// SPDX-License-Identifier: MIT
// Frees find their allocator through the address map, asking no other allocator, on two fake
// devices; the scan of every allocator stays as the fallback.
//
//   free_owner map|scan
//
// Run with CCI_LOG=debug: a free whose owner the map cannot name says so in one debug line
// ("cannot name its owner") before it asks each device's allocator in turn. "map": the map is
// in use, and a device-1 block freed by a thread whose last allocation was on device 0 goes to
// device 1's allocator without that line (no allocator but the owner is asked); memory that is
// not ours goes to the real cudaFree, also without it. "scan": CCI_STACKS and CCI_TRACE take
// the allocators' observer slots before the map's, so the map is incomplete: the same frees
// must give the same answers, each through the scan (one line each): the fallback works, and
// the line the "map" run must not print is real.
#include "fake_cuda_driver.h"

#include "ptest.h"

#define MiB ((size_t)1 << 20)
#define SCAN_LINE "cannot name its owner"

static int scanning;

// The number of scan lines a free printed, checked against what the mode expects.
static void expect_scans(int lines, const char *what)
{
    CHECK(lines == (scanning ? 1 : 0), "%s: %d scan line(s) (%s)", what, lines,
          scanning ? "the map is incomplete: the fallback asks every allocator" : "the map answered");
}

static int compare_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "map") && strcmp(argv[1], "scan"))) {
        fprintf(stderr, "usage: free_owner map|scan\n");
        return 2;
    }
    scanning = strcmp(argv[1], "scan") == 0;
    ptest_api api = ptest_get_api();
    CHECK(api.is_active() == 1, "the preload is active");

    // Four 5 MiB blocks on device 1 share one 20 MiB segment; the second starts 5 MiB into it,
    // so its 2 MiB chunk lies wholly inside the segment and no other segment can touch it.
    CUDA_OK(cudaSetDevice(1));
    uintptr_t b[4];
    for (int i = 0; i < 4; i++)
        CUDA_OK(cudaMalloc((void **)&b[i], 5 * MiB));
    qsort(b, 4, sizeof b[0], compare_ptr);
    CHECK(b[1] == b[0] + 5 * MiB && b[3] == b[0] + 15 * MiB, "device 1: four blocks in a row in one segment");

    // This thread's last allocation is on device 0, and device 0 is current.
    CUDA_OK(cudaSetDevice(0));
    void *zero;
    CUDA_OK(cudaMalloc(&zero, 4096));
    unsigned long long device_frees = fakecuda_device_frees();
    ptest_capture cap = ptest_stderr_begin();
    cudaError_t rc = cudaFree((void *)b[1]);
    int lines = ptest_stderr_end(&cap, SCAN_LINE, NULL, 0);
    CHECK(rc == cudaSuccess && fakecuda_device_frees() == device_frees,
          "a device-1 block freed after a device-0 allocation stays cached");
    CHECK(ptest_stats(&api, 1).allocation[CCI_POOL_ALL].current == 3 &&
              ptest_stats(&api, 0).allocation[CCI_POOL_ALL].current == 1,
          "device 1's allocator took it back, device 0's still holds its block");
    expect_scans(lines, "device-1 free");

    // Not ours, in no chunk of ours: a stack address goes straight to the real cudaFree, whose
    // error the program gets.
    char on_stack[64];
    cap = ptest_stderr_begin();
    rc = cudaFree(on_stack);
    lines = ptest_stderr_end(&cap, SCAN_LINE, NULL, 0);
    CHECK(rc == cudaErrorInvalidValue, "a stack address: the real cudaFree's invalid-value error");
    expect_scans(lines, "stack address");

    // Not ours, allocated by CUDA itself (the fake driver, bypassing the preload): the real
    // cudaFree frees it. Its chunk may hold one of our segments, so whether the map names a
    // device or not is layout; only the answer is checked.
    CUresult (*real_alloc)(CUdeviceptr *, size_t);
    memcpy(&real_alloc, &(void *){ptest_real_driver("cuMemAlloc_v2")}, sizeof real_alloc);
    CUdeviceptr theirs;
    CHECK(real_alloc(&theirs, 3 * MiB) == CUDA_SUCCESS, "CUDA's own allocation, outside our pools");
    device_frees = fakecuda_device_frees();
    CHECK(cudaFree((void *)(uintptr_t)theirs) == cudaSuccess && fakecuda_device_frees() == device_frees + 1,
          "CUDA's own allocation goes to the real cudaFree, which frees it");

    // The other frees, for the statistics: everything back.
    for (int i = 0; i < 4; i++)
        if (i != 1)
            CUDA_OK(cudaFree((void *)b[i]));
    CUDA_OK(cudaFree(zero));
    CHECK(ptest_stats(&api, 0).allocation[CCI_POOL_ALL].current == 0 &&
              ptest_stats(&api, 1).allocation[CCI_POOL_ALL].current == 0,
          "no block left on either device");
    return 0;
}
