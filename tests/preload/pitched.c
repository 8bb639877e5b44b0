// SPDX-License-Identifier: MIT
// Pitched and 3-D allocations: cudaMallocPitch, cudaMalloc3D and cuMemAllocPitch_v2 (called
// directly, and through cuGetProcAddress and dlsym as a static cudart finds it). Run with the
// preload ("served": the pairs come from the cache, the device sees at most a few segments) and
// without it ("native": every call reaches the fake driver); both runs check the same pitches,
// contents and error codes, so a difference from native fails one of them. The fake's texture
// alignment is set by FAKECUDA_TEXTURE_ALIGNMENT, so a layer that assumed 512 would be caught.
#include "fake_cuda_driver.h"
#include "ptest.h"

typedef CUresult (*pitch_fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);

static size_t align_of_device(void)
{
    const char *v = getenv("FAKECUDA_TEXTURE_ALIGNMENT");
    return v ? strtoul(v, NULL, 10) : 512;
}

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

int main(int argc, char **argv)
{
    int served = argc > 1 && strcmp(argv[1], "served") == 0;
    size_t align = align_of_device();
    CUDA_OK(cudaFree(NULL));  // the runtime starts and makes the primary context current
    fakecuda_reset_counters();
    enum { PAIRS = 40 };
    for (int i = 0; i < PAIRS; i++) {
        void *p = NULL;
        size_t pitch = 0, width = 100 + 37 * (size_t)i, height = 3 + (size_t)i % 5;
        CUDA_OK(cudaMallocPitch(&p, &pitch, width, height));
        if (pitch != round_up(width, align)) {
            printf("FAIL: cudaMallocPitch width %zu: pitch %zu, the driver gives %zu\n", width, pitch,
                   round_up(width, align));
            return 1;
        }
        ptest_fill(p, pitch * height, (uint64_t)i);
        if (!ptest_verify(p, pitch * height, (uint64_t)i))
            return 2;
        CUDA_OK(cudaFree(p));

        struct cudaPitchedPtr pp;
        struct cudaExtent e = {width, height, 2};
        CUDA_OK(cudaMalloc3D(&pp, e));
        CHECK(pp.pitch == round_up(width, align) && pp.xsize == width && pp.ysize == height && pp.ptr,
              "cudaMalloc3D %zu x %zu x 2: pitch %zu", width, height, pp.pitch);
        ptest_fill(pp.ptr, pp.pitch * height * 2, (uint64_t)i);
        CUDA_OK(cudaFree(pp.ptr));

        CUdeviceptr d = 0;
        CU_OK(cuMemAllocPitch_v2(&d, &pitch, width, height, 8));
        CHECK(pitch == round_up(width, align), "cuMemAllocPitch_v2 width %zu: pitch %zu", width, pitch);
        ptest_fill((void *)(uintptr_t)d, pitch * height, (uint64_t)i);
        CU_OK(cuMemFree_v2(d));
    }
    unsigned long long allocs = fakecuda_device_allocs();
    printf("%d triples of pitched allocations made %llu device allocations\n", PAIRS, allocs);
    if (served)
        CHECK(allocs <= 3, "the pitched allocations were served from the cache");
    else
        CHECK(allocs == 3 * PAIRS, "every pitched allocation reached the device");

    // As a static cudart finds the driver: cuGetProcAddress_v2, and dlsym on libcuda.
    CUdriverProcAddressQueryResult st;
    pitch_fn by_proc = NULL, by_dlsym = NULL;
    CU_OK(cuGetProcAddress_v2("cuMemAllocPitch", (void **)&by_proc, 13000, 0, &st));
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib != NULL, "libcuda.so.1 is loaded");
    *(void **)&by_dlsym = dlsym(lib, "cuMemAllocPitch_v2");
    fakecuda_reset_counters();
    for (int i = 0; i < 10; i++) {
        CUdeviceptr d = 0;
        size_t pitch = 0;
        CU_OK((i % 2 ? by_proc : by_dlsym)(&d, &pitch, 4097, 2, 16));
        CHECK(pitch == round_up(4097, align), "looked-up cuMemAllocPitch: pitch %zu", pitch);
        CU_OK(cuMemFree_v2(d));
    }
    allocs = fakecuda_device_allocs();
    CHECK(served ? allocs <= 1 : allocs == 10, "looked-up entry points: %llu device allocations", allocs);

    // Bad arguments get CUDA's own codes; zero sizes CUDA's own answers.
    CUdeviceptr d = 0;
    size_t pitch = 7;
    CHECK(cuMemAllocPitch_v2(&d, &pitch, 64, 3, 3) == CUDA_ERROR_INVALID_VALUE, "element size 3");
    CHECK(cuMemAllocPitch_v2(&d, &pitch, 64, 3, 32) == CUDA_ERROR_INVALID_VALUE, "element size 32");
    CHECK(cuMemAllocPitch_v2(&d, &pitch, 0, 3, 4) == CUDA_ERROR_INVALID_VALUE, "width 0 (driver)");
    CHECK(cuMemAllocPitch_v2(&d, &pitch, 64, 0, 4) == CUDA_ERROR_INVALID_VALUE, "height 0 (driver)");
    CHECK(cuMemAllocPitch_v2(&d, NULL, 64, 3, 4) == CUDA_ERROR_INVALID_VALUE, "no pitch pointer");
    void *p = (void *)1;
    CHECK(cudaMallocPitch(&p, &pitch, 0, 3) == cudaSuccess && p == NULL && pitch == 0,
          "width 0 (runtime): success, NULL, pitch 0");
    CHECK(cudaMallocPitch(NULL, &pitch, 64, 3) == cudaErrorInvalidValue, "no pointer (runtime)");
    CHECK(cudaMallocPitch(&p, &pitch, (size_t)1 << 40, (size_t)1 << 30) == cudaErrorMemoryAllocation,
          "too large: out of memory");
    CHECK(cudaGetLastError() == cudaErrorMemoryAllocation, "and the runtime's error state says so");
    return 0;
}
