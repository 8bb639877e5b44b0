// SPDX-License-Identifier: MIT
// On a GPU, for scripts/gpu-reach.sh: pitched allocations through the runtime and the driver.
//   reach_check results  the pitch of cudaMallocPitch, cudaMalloc3D and cuMemAllocPitch_v2 for a
//                        set of widths, the codes of bad arguments, and a checksum of a pattern
//                        written with cudaMemset2D and read back with cudaMemcpy2D: the output
//                        must be the same natively and under the preload.
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
