// SPDX-License-Identifier: MIT
// What mapping K pages of the device's granularity costs the driver, by how the physical memory is
// cut: K handles of one page each (compact mode's pages) or one handle of K pages mapped whole
// (expandable segments' 20 MiB pages are ten). Each shape: create, map, one cuMemSetAccess over
// the K pages, then unmap and release, timed on the host; with the GPU idle and with a kernel
// running on another stream (what a training step looks like to the driver). A third shape, one
// handle mapped as K slices (cuMemMap at an offset), would let pages move without a handle each;
// CUDA 13.0 refuses a nonzero offset (CUDA_ERROR_NOT_SUPPORTED, H200, 2026-11-29), which the
// probe checks first and reports. Prints one line per (state, shape, K): median microseconds of
// each call kind over R repetitions.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                              \
    do {                                                                                   \
        CUresult r_ = (x);                                                                 \
        if (r_ != CUDA_SUCCESS) {                                                          \
            fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, (int)r_);          \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

__global__ void spin(volatile int *stop, long long max_cycles)
{
    long long t0 = clock64();
    while (!*stop && clock64() - t0 < max_cycles) {
    }
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp);
    return v[n / 2];
}

enum { R = 15, MAXK = 128 };
static size_t page;
static CUmemAllocationProp prop;
static CUmemAccessDesc acc;

enum shape { PAGES, WHOLE };
static const char *const shape_name[] = {"handle per page", "one handle, whole"};

static void one(enum shape s, int k, double *t_create, double *t_map, double *t_access, double *t_unmap,
                double *t_release)
{
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, k * page, 0, 0, 0));
    CUmemGenericAllocationHandle h[MAXK];
    int nh = s == PAGES ? k : 1;
    double t = now_us();
    for (int i = 0; i < nh; i++)
        CK(cuMemCreate(&h[i], s == PAGES ? page : k * page, &prop, 0));
    *t_create = now_us() - t;
    t = now_us();
    if (s == WHOLE)
        CK(cuMemMap(va, k * page, 0, h[0], 0));
    else
        for (int i = 0; i < k; i++)
            CK(cuMemMap(va + i * page, page, 0, h[i], 0));
    *t_map = now_us() - t;
    t = now_us();
    CK(cuMemSetAccess(va, k * page, &acc, 1));
    *t_access = now_us() - t;
    t = now_us();
    if (s == WHOLE)
        CK(cuMemUnmap(va, k * page));
    else
        for (int i = 0; i < k; i++)
            CK(cuMemUnmap(va + i * page, page));
    *t_unmap = now_us() - t;
    t = now_us();
    for (int i = 0; i < nh; i++)
        CK(cuMemRelease(h[i]));
    *t_release = now_us() - t;
    CK(cuMemAddressFree(va, k * page));
}

// Whether the driver maps part of a handle (offset nonzero): the CUresult of the attempt.
static CUresult slice_map(void)
{
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, 2 * page, 0, 0, 0));
    CUmemGenericAllocationHandle h;
    CK(cuMemCreate(&h, 2 * page, &prop, 0));
    CUresult r = cuMemMap(va, page, page, h, 0);
    if (r == CUDA_SUCCESS)
        CK(cuMemUnmap(va, page));
    CK(cuMemRelease(h));
    CK(cuMemAddressFree(va, 2 * page));
    return r;
}

int main(void)
{
    cudaSetDevice(0);
    cudaFree(0);
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CK(cuMemGetAllocationGranularity(&page, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    memset(&acc, 0, sizeof acc);
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    int *stop;
    cudaHostAlloc((void **)&stop, sizeof *stop, cudaHostAllocMapped);
    cudaStream_t busy;
    cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking);
    printf("page %zu KiB; a slice of a handle mapped at an offset: CUresult %d\n", page >> 10, (int)slice_map());
    printf("%-5s %-20s %4s %10s %10s %10s %10s %10s\n", "gpu", "shape", "K", "create", "map", "access",
           "unmap", "release");
    const int ks[] = {1, 10, 100};
    for (int state = 0; state < 2; state++) {
        *stop = 0;
        for (int si = 0; si < 2; si++)
            for (int ki = 0; ki < 3; ki++) {
                double c[R], m[R], a[R], u[R], rl[R];
                for (int r = 0; r < R; r++) {
                    // ~50 ms of a running kernel: a call that waited for it would show it
                    if (state)
                        spin<<<1, 1, 0, busy>>>(stop, 100000000LL);
                    one((enum shape)si, ks[ki], &c[r], &m[r], &a[r], &u[r], &rl[r]);
                }
                printf("%-5s %-20s %4d %10.1f %10.1f %10.1f %10.1f %10.1f\n", state ? "busy" : "idle",
                       shape_name[si], ks[ki], median(c, R), median(m, R), median(a, R), median(u, R),
                       median(rl, R));
            }
        *stop = 1;
        cudaDeviceSynchronize();
        *stop = 0;
    }
    return 0;
}
