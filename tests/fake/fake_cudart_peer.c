// SPDX-License-Identifier: MIT
/*
 * The fake runtime's peer access and pointer attributes, over the fake
 * driver's (fake_pointer.c), reached through the runtime's driver table like
 * every other call of fake_cudart.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fake_cudart_internal.h"

#include <stdint.h>
#include <string.h>

static cudaError_t check_device(int dev)
{
    int n = 0;
    D.cuDeviceGetCount(&n);
    return dev < 0 || dev >= n || dev >= RT_MAX_DEVICES ? cudaErrorInvalidDevice : cudaSuccess;
}

RT_API cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)
{
    if (!canAccessPeer)
        return fcrt_ret(cudaErrorInvalidValue);
    cudaError_t e = fcrt_enter(NULL);
    if (e)
        return fcrt_ret(e);
    return fcrt_ret_drv(D.cuDeviceCanAccessPeer(canAccessPeer, device, peerDevice));
}

/* cudaDevice{Enable,Disable}PeerAccess: whether the current device may access
 * peerDevice's memory from now on: the driver's peer access from the current
 * context to the peer's primary one. */
static cudaError_t peer_call(int peerDevice, int enable, unsigned int flags)
{
    cudaError_t e = fcrt_enter(NULL);
    if (e || (e = check_device(peerDevice)))
        return fcrt_ret(e);
    CUcontext peer = NULL;
    if ((e = fcrt_primary(peerDevice, &peer)))
        return fcrt_ret(e);
    return fcrt_ret_drv(enable ? D.cuCtxEnablePeerAccess(peer, flags) : D.cuCtxDisablePeerAccess(peer));
}

RT_API cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
    return peer_call(peerDevice, 1, flags);
}

RT_API cudaError_t cudaDeviceDisablePeerAccess(int peerDevice)
{
    return peer_call(peerDevice, 0, 0);
}

RT_API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    if (!attributes)
        return fcrt_ret(cudaErrorInvalidValue);
    cudaError_t e = fcrt_enter(NULL);
    if (e)
        return fcrt_ret(e);
    unsigned type = 0;
    int ordinal = -2;
    CUdeviceptr dptr = 0;
    CUpointer_attribute which[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                    CU_POINTER_ATTRIBUTE_DEVICE_POINTER};
    void *data[3] = {&type, &ordinal, &dptr};
    CUresult r = D.cuPointerGetAttributes(3, which, data, (CUdeviceptr)(uintptr_t)ptr);
    if (r)
        return fcrt_ret_drv(r);
    memset(attributes, 0, sizeof *attributes);
    if (type == CU_MEMORYTYPE_DEVICE) {
        attributes->type = cudaMemoryTypeDevice;
        attributes->device = ordinal;
        attributes->devicePointer = (void *)(uintptr_t)dptr;
    } else if (type == CU_MEMORYTYPE_HOST) {  // pinned: mapped at the same address (unified addressing)
        attributes->type = cudaMemoryTypeHost;
        attributes->device = ordinal;
        attributes->devicePointer = (void *)(uintptr_t)dptr;
        attributes->hostPointer = (void *)ptr;
    } else {  // unknown to the driver: the runtime calls it unregistered host memory
        attributes->type = cudaMemoryTypeUnregistered;
        attributes->device = -2;
        attributes->hostPointer = (void *)ptr;
    }
    return cudaSuccess;
}
