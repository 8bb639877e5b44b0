// SPDX-License-Identifier: MIT
// What VMM memory must keep doing under the preload, on two fake devices; one
// scenario per run, named by argv[1]:
//   attributes    cudaPointerGetAttributes / cuPointerGetAttribute on a block's start and an
//                 interior pointer name the right device and type (run in every mode: ordinary,
//                 expandable_segments:True, compact_segments:True);
//   peer-runtime  cudaDeviceEnablePeerAccess reaches device 0's existing mappings and the ones
//   peer-driver   it maps later (growth); the same through cuCtxEnablePeerAccess.
#include "fake_cuda_driver.h"

#include "ptest.h"

#define MiB ((size_t)1 << 20)

static int vmm_mode;  // expandable_segments:True or compact_segments:True is configured

static void attributes_of(void *p, size_t n, int dev)
{
    int in_vmm = fakecu_vmm_access(dev, p, n) >= 0;
    CHECK(in_vmm == vmm_mode, "device %d, %zu-byte block: %s", dev, n,
          in_vmm ? "in a VMM mapping" : "in a cuMemAlloc segment");
    const char *at[2] = {"start", "interior"};
    char *q[2] = {p, (char *)p + n - 4096};
    for (int i = 0; i < 2; i++) {
        struct cudaPointerAttributes a;
        CUDA_OK(cudaPointerGetAttributes(&a, q[i]));
        CHECK(a.type == cudaMemoryTypeDevice && a.device == dev && a.devicePointer == q[i] && !a.hostPointer,
              "device %d, %zu-byte block, %s: type device (%d), device %d", dev, n, at[i], (int)a.type, a.device);
        int ordinal = -1;
        CU_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)(uintptr_t)q[i]));
        CHECK(ordinal == dev, "cuPointerGetAttribute's device ordinal is %d", ordinal);
    }
}

static void attributes(void)
{
    void *p[2][2];
    size_t sizes[2] = {4096, 3 * MiB + 512};
    for (int d = 0; d < 2; d++) {
        CUDA_OK(cudaSetDevice(d));
        for (int k = 0; k < 2; k++) {
            CUDA_OK(cudaMalloc(&p[d][k], sizes[k]));
            ptest_fill(p[d][k], sizes[k], (uint64_t)(d * 2 + k));
        }
    }
    CUDA_OK(cudaSetDevice(0));  // asked from device 0 about both devices' blocks
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 2; k++)
            attributes_of(p[d][k], sizes[k], d);
    static char host[64];
    struct cudaPointerAttributes a;
    CUDA_OK(cudaPointerGetAttributes(&a, host));
    CHECK(a.type == cudaMemoryTypeUnregistered && a.hostPointer == host,
          "host memory: cudaSuccess, type unregistered (%d)", (int)a.type);
    unsigned type = 0;
    CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)host) ==
              CUDA_ERROR_INVALID_VALUE, "host memory: cuPointerGetAttribute answers CUDA_ERROR_INVALID_VALUE");
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 2; k++) {
            CHECK(ptest_verify(p[d][k], sizes[k], (uint64_t)(d * 2 + k)), "device %d block %d intact", d, k);
            CUDA_OK(cudaFree(p[d][k]));
        }
}

// Device 1 reads and writes device 0's memory only where every page was granted to it.
static int peer_access(const void *p, size_t n)
{
    return fakecu_vmm_access(1, p, n) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

static void enable_peer(int driver_api)
{
    CUDA_OK(cudaSetDevice(1));
    if (driver_api) {
        CUcontext c0 = NULL, c1 = NULL;
        CU_OK(cuDevicePrimaryCtxRetain(&c0, 0));
        CU_OK(cuDevicePrimaryCtxRetain(&c1, 1));
        CU_OK(cuCtxPushCurrent_v2(c1));
        CU_OK(cuCtxEnablePeerAccess(c0, 0));
        CUcontext popped;
        CU_OK(cuCtxPopCurrent_v2(&popped));
    } else {
        int can = 0;
        CUDA_OK(cudaDeviceCanAccessPeer(&can, 1, 0));
        CHECK(can == 1, "device 1 can access device 0");
        CUDA_OK(cudaDeviceEnablePeerAccess(0, 0));
        CHECK(cudaDeviceEnablePeerAccess(0, 0) == cudaErrorPeerAccessAlreadyEnabled,
              "enabling twice answers cudaErrorPeerAccessAlreadyEnabled");
        (void)cudaGetLastError();
    }
    CHECK(fakecu_peer_enabled(1, 0), "peer access from device 1 to device 0 is on (%s)",
          driver_api ? "cuCtxEnablePeerAccess" : "cudaDeviceEnablePeerAccess");
    CUDA_OK(cudaSetDevice(0));
}

static void peer(int driver_api)
{
    CUDA_OK(cudaSetDevice(0));
    void *old = NULL;
    CUDA_OK(cudaMalloc(&old, 6 * MiB));
    ptest_fill(old, 6 * MiB, 1);
    CHECK(fakecu_vmm_access(0, old, 6 * MiB) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
          "device 0 may use its own block");
    CHECK(!peer_access(old, 6 * MiB), "before peer access, device 0's mapping is not accessible from device 1");
    ptest_api api = ptest_get_api();
    uint64_t access0 = ptest_stats(&api, 0).vmm_set_access_calls;
    enable_peer(driver_api);
    CHECK(peer_access(old, 6 * MiB), "the existing mapping is now accessible from device 1");
    uint64_t granted = ptest_stats(&api, 0).vmm_set_access_calls - access0;
    CHECK(granted >= 1, "the grant's cuMemSetAccess calls are device 0's costs (%llu)", (unsigned long long)granted);
    CU_OK(fakecu_device_write(1, (char *)old + 4096, NULL, 0x5c, 4096));
    CHECK(((unsigned char *)old)[4096] == 0x5c, "device 1 wrote into device 0's existing block");
    // Growth: pages mapped after the grant get it as well.
    size_t mapped = 0;
    struct fakecu_vmm_stats s;
    fakecu_vmm_get_stats(&s);
    mapped = s.mapped_bytes;
    void *grown = NULL;
    CUDA_OK(cudaMalloc(&grown, 90 * MiB));
    fakecu_vmm_get_stats(&s);
    CHECK(s.mapped_bytes > mapped, "the second block mapped new pages (%zu -> %zu bytes)", mapped, s.mapped_bytes);
    CHECK(peer_access(grown, 90 * MiB), "the future mapping is accessible from device 1");
    CU_OK(fakecu_device_write(1, grown, NULL, 0x6d, MiB));
    CHECK(((unsigned char *)grown)[MiB - 1] == 0x6d, "device 1 wrote into device 0's new block");
    CUDA_OK(cudaFree(grown));
    CUDA_OK(cudaFree(old));
    fakecu_vmm_get_stats(&s);
    CHECK(s.faults_unmapped == 0 && s.faults_no_access == 0, "no device fault recorded");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("usage: %s attributes|peer-runtime|peer-driver\n", argv[0]);
        return 2;
    }
    ptest_api api = ptest_get_api();
    CHECK(api.is_active() == 1, "the preload is active (%s)", api.config_string());
    vmm_mode = strstr(api.config_string(), "expandable_segments:True") ||
               strstr(api.config_string(), "compact_segments:True");
    if (!strcmp(argv[1], "attributes"))
        attributes();
    else if (!strcmp(argv[1], "peer-runtime"))
        peer(0);
    else if (!strcmp(argv[1], "peer-driver"))
        peer(1);
    else {
        printf("unknown scenario %s\n", argv[1]);
        return 2;
    }
    return 0;
}
