// SPDX-License-Identifier: MIT
// On a GPU, for scripts/gpu-reach.sh: pitched, managed and pool allocations through the runtime
// and the driver.
//   reach_check results  the pitch of cudaMallocPitch, cudaMalloc3D and cuMemAllocPitch_v2 for a
//                        set of widths, the codes of bad arguments, and a checksum of a pattern
//                        written with cudaMemset2D and read back with cudaMemcpy2D, then managed
//                        memory and allocations from the default and from a created memory pool
//                        (codes, data, the created pool's figures): the output must be the same
//                        natively and under the preload.
//   reach_check bench N  ns per pair of N cudaMallocPitch/cudaFree pairs and of N cudaMalloc/
//                        cudaFree pairs of the same bytes (one line each).
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int results(void)
{
    size_t widths[] = {1, 31, 100, 511, 512, 513, 1000, 4097, 100000};
    unsigned long long sum = 0;
    unsigned char *host = (unsigned char *)malloc(100000 * 7);
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        size_t w = widths[i], pitch = 0;
        void *p = NULL;
        cudaError_t rc = cudaMallocPitch(&p, &pitch, w, 7);
        printf("cudaMallocPitch %zu x 7: rc %d pitch %zu\n", w, (int)rc, pitch);
        if (rc == cudaSuccess) {
            cudaMemset2D(p, pitch, (int)(i + 1), w, 7);
            cudaMemcpy2D(host, w, p, pitch, w, 7, cudaMemcpyDeviceToHost);
            for (size_t k = 0; k < w * 7; k++)
                sum = sum * 31 + host[k];
            cudaFree(p);
        }
        cudaPitchedPtr pp;
        memset(&pp, 0, sizeof pp);
        rc = cudaMalloc3D(&pp, make_cudaExtent(w, 3, 2));
        printf("cudaMalloc3D %zu x 3 x 2: rc %d pitch %zu xsize %zu ysize %zu\n", w, (int)rc, pp.pitch, pp.xsize, pp.ysize);
        if (rc == cudaSuccess)
            cudaFree(pp.ptr);
        for (unsigned e = 2; e <= 16; e *= 2) {
            CUdeviceptr d = 0;
            size_t dp = 0;
            CUresult r = cuMemAllocPitch(&d, &dp, w, 5, e);
            printf("cuMemAllocPitch %zu x 5 element %u: rc %d pitch %zu\n", w, e, (int)r, dp);
            if (r == CUDA_SUCCESS)
                cuMemFree(d);
        }
    }
    void *p = (void *)1;
    size_t pitch = 7;
    cudaError_t rc = cudaMallocPitch(&p, &pitch, 0, 3);
    printf("cudaMallocPitch 0 x 3: rc %d pitch %zu null %d\n", (int)rc, pitch, p == NULL);
    CUdeviceptr d;
    printf("cuMemAllocPitch 0 x 3: rc %d\n", (int)cuMemAllocPitch(&d, &pitch, 0, 3, 4));
    printf("cuMemAllocPitch element 3: rc %d\n", (int)cuMemAllocPitch(&d, &pitch, 64, 3, 3));
    // Managed memory (passed through): written by the host, read back.
    unsigned char *m = NULL;
    printf("cudaMallocManaged: rc %d\n", (int)cudaMallocManaged((void **)&m, 1 << 20, cudaMemAttachGlobal));
    if (m) {
        for (int k = 0; k < (1 << 20); k++)
            m[k] = (unsigned char)(k * 7);
        cudaMemset(m, 3, 4096);
        cudaDeviceSynchronize();
        for (int k = 0; k < (1 << 20); k++)
            sum = sum * 31 + m[k];
        printf("cudaFree(managed): rc %d\n", (int)cudaFree(m));
    }
    // Memory pools: the default one (served like cudaMallocAsync) and one of the program's own
    // (passed through; its figures must read the same as natively).
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaMemPool_t dflt, own;
    cudaDeviceGetDefaultMemPool(&dflt, 0);
    cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    printf("cudaMemPoolCreate: rc %d\n", (int)cudaMemPoolCreate(&own, &props));
    void *a = NULL, *b = NULL;
    printf("default pool: rc %d\n", (int)cudaMallocFromPoolAsync(&a, 3 << 20, dflt, s));
    printf("own pool: rc %d\n", (int)cudaMallocFromPoolAsync(&b, 5 << 20, own, s));
    cudaMemsetAsync(a, 1, 3 << 20, s);
    cudaMemsetAsync(b, 2, 5 << 20, s);
    cudaMemcpyAsync(host, a, 4096, cudaMemcpyDeviceToHost, s);
    cudaMemcpyAsync(host + 4096, b, 4096, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    for (int k = 0; k < 8192; k++)
        sum = sum * 31 + host[k];
    unsigned long long used = 0;
    cudaMemPoolGetAttribute(own, cudaMemPoolAttrUsedMemCurrent, &used);
    printf("own pool used: %llu\n", used);
    cudaFreeAsync(a, s);
    cudaFreeAsync(b, s);
    cudaStreamSynchronize(s);
    cudaMemPoolGetAttribute(own, cudaMemPoolAttrUsedMemCurrent, &used);
    printf("own pool used after the frees: %llu\n", used);
    CUdeviceptr none;
    printf("cuMemAllocFromPoolAsync(NULL pool): rc %d\n", (int)cuMemAllocFromPoolAsync(&none, 64, NULL, (CUstream)s));
    cudaMemPoolDestroy(own);
    cudaStreamDestroy(s);
    printf("checksum %llx\n", sum);
    free(host);
    return 0;
}

static int bench(int n)
{
    size_t w = 1000, h = 64, pitch = 0;
    void *p;
    cudaMallocPitch(&p, &pitch, w, h);  // warm up, and the bytes a plain pair asks for
    cudaFree(p);
    double t0 = now_ns();
    for (int i = 0; i < n; i++) {
        cudaMallocPitch(&p, &pitch, w, h);
        cudaFree(p);
    }
    double t1 = now_ns();
    for (int i = 0; i < n; i++) {
        cudaMalloc(&p, pitch * h);
        cudaFree(p);
    }
    double t2 = now_ns();
    printf("pitched pair ns %.0f\nplain pair ns %.0f\n", (t1 - t0) / n, (t2 - t1) / n);
    return 0;
}

int main(int argc, char **argv)
{
    cudaFree(0);
    if (argc > 1 && !strcmp(argv[1], "bench"))
        return bench(argc > 2 ? atoi(argv[2]) : 20000);
    return results();
}
