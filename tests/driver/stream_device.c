// SPDX-License-Identifier: MIT
// cuMemAllocAsync draws from "the memory pool current to the stream's device", whichever context
// is current: a stream of device 1 used while device 0's primary context is current must get
// device 1's memory (the driver's, then: our pool of device 0 is the wrong one), and a stream
// whose device matches the current context is still served from our pool. Two fake devices.
#include "fake_cuda_driver.h"
#include "ptest.h"

#define MiB ((size_t)1 << 20)

static int device_of(CUdeviceptr p)
{
    int ord = -1;
    CU_OK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
    return ord;
}

// Bytes our allocator of `device` has handed out and not had back (0 before it exists).
static int64_t ours(const ptest_api *api, int device)
{
    cci_stats st = {.size = sizeof st};
    return api->get_stats(device, &st) == 0 ? st.allocated_bytes[CCI_POOL_ALL].current : 0;
}

// cuMemAllocAsync(size, s) with `ctx` current: the pointer's device and whether our pool of
// `ctx`'s device served it (its allocated bytes grew by `size`).
static CUdeviceptr alloc_on(const ptest_api *api, CUcontext ctx, int ctx_dev, CUstream s, size_t size,
                            int *served)
{
    CU_OK(cuCtxSetCurrent(ctx));
    int64_t before = ours(api, ctx_dev);
    CUdeviceptr p = 0;
    CU_OK(cuMemAllocAsync(&p, size, s));
    *served = ours(api, ctx_dev) - before == (int64_t)size;
    return p;
}

int main(void)
{
    ptest_api api = ptest_get_api();
    CU_OK(cuInit(0));
    CUcontext c0, c1;
    CU_OK(cuDevicePrimaryCtxRetain(&c0, 0));
    CU_OK(cuDevicePrimaryCtxRetain(&c1, 1));
    CHECK(api.is_active() == 1, "the preload is active (%s)", api.config_string());

    CUstream s0, s1;
    CU_OK(cuCtxSetCurrent(c1));
    CU_OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CU_OK(cuCtxSetCurrent(c0));
    CU_OK(cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));

    int served;
    CUdeviceptr p = alloc_on(&api, c1, 1, s1, 3 * MiB, &served);
    CHECK(device_of(p) == 1 && served, "stream of device 1, device 1 current: our pool of device 1");
    CU_OK(cuMemFreeAsync(p, s1));

    p = alloc_on(&api, c0, 0, s1, 3 * MiB, &served);
    CHECK(device_of(p) == 1, "stream of device 1, device 0 current: device 1's memory (device %d)",
          device_of(p));
    CHECK(!served, "... and not from our pool of device 0");
    CU_OK(cuMemFreeAsync(p, s1));

    p = alloc_on(&api, c0, 0, s0, 3 * MiB, &served);
    CHECK(device_of(p) == 0 && served, "stream of device 0, device 0 current: our pool of device 0");
    CU_OK(cuMemFreeAsync(p, s0));

    p = alloc_on(&api, c1, 1, NULL, 3 * MiB, &served);
    CHECK(device_of(p) == 1 && served, "legacy stream, device 1 current: our pool of device 1");
    CU_OK(cuMemFreeAsync(p, NULL));

    // A destroyed stream's handle may come back for another device's stream: asked again.
    CU_OK(cuCtxSetCurrent(c1));
    CU_OK(cuStreamSynchronize(s1));
    CU_OK(cuStreamDestroy_v2(s1));
    CU_OK(cuCtxSetCurrent(c0));
    CUstream s2;
    CU_OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    p = alloc_on(&api, c0, 0, s2, 3 * MiB, &served);
    CHECK(device_of(p) == 0 && served, "a new stream of device 0 (handle %s): our pool of device 0",
          s2 == s1 ? "reused" : "new");
    CU_OK(cuMemFreeAsync(p, s2));
    CU_OK(cuStreamSynchronize(s2));
    CU_OK(cuStreamDestroy_v2(s2));
    CU_OK(cuStreamSynchronize(s0));
    CU_OK(cuStreamDestroy_v2(s0));
    printf("ok: all\n");
    return 0;
}
