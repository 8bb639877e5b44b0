// SPDX-License-Identifier: MIT
/*
 * Pointer attributes and peer access in the fake libcuda.so.1.
 *
 * Pointer attributes answer from the fake's own books: the cuMemAlloc table
 * (fake_cuda.c; interior pointers included) and the VMM mappings
 * (fake_vmm.c). A cached-allocator block is an interior pointer of one of
 * those, which is exactly what a caching layer must keep answering for.
 *
 * Peer access is a table of enabled (device, peer) pairs under g_lock. It
 * matters to the VMM tests through what a program does with it: the fake
 * grants nothing by itself to VMM mappings (cuMemSetAccess does), so a test
 * can see whether the preload re-granted access after the program enabled
 * peer access.
 */
#include "fake_internal.h"
#include "fake_vmm.h"

/* g_peer[d] bit p: device d may access device p's cuMemAlloc memory. */
static uint32_t g_peer[FC_MAX_DEVICES];

/* ------------------------------------------------------------------ */
/* Pointer attributes                                                  */

struct pointer_info {
    int dev;
    bool vmm; /* in a VMM mapping rather than a cuMemAlloc allocation */
    bool host; /* pinned host memory (fake_host.c) */
    uintptr_t base;
    size_t size;
};

static bool pointer_lookup(uintptr_t p, struct pointer_info *out)
{
    pthread_mutex_lock(&g_lock);
    struct alloc *a = alloc_containing_locked(p);
    if (a)
        *out = (struct pointer_info){.dev = a->dev, .vmm = false, .base = a->base, .size = a->size};
    pthread_mutex_unlock(&g_lock);
    if (a)
        return true;
    if (fc_host_range_of(p, &out->dev, &out->base, &out->size)) {
        out->vmm = false;
        out->host = true;
        return true;
    }
    out->vmm = true;
    out->host = false;
    return fc_vmm_mapping_of(p, &out->dev, &out->base, &out->size);
}

static CUresult attribute_of(const struct pointer_info *pi, CUpointer_attribute attr, void *data, uintptr_t p)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        /* A VMM mapping is made for a device, not inside a context: no
         * context to name. A cuMemAlloc allocation lives in its device's
         * primary context (the only kind the fake's tests allocate in). */
        *(CUcontext *)data = pi->vmm || pi->host ? NULL : &g_dev[pi->dev].primary;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = pi->host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = (CUdeviceptr)p;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (!pi->host)
            return CUDA_ERROR_INVALID_VALUE; /* device memory: no host address to give */
        *(void **)data = (void *)p;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(int *)data = 0; /* the fake does not tell managed allocations apart */
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = pi->dev;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = (CUdeviceptr)pi->base;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = pi->size;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(int *)data = 1;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* The zero an unknown pointer gets from cuPointerGetAttributes, in the
 * attribute's own width. */
static void attribute_default(CUpointer_attribute attr, void *data)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = NULL; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: *(void **)data = NULL; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = -2; break; /* no device */
    default: *(int *)data = 0; break;
    }
}

FC_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    ENTER();
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    struct pointer_info pi;
    if (!pointer_lookup((uintptr_t)ptr, &pi))
        return CUDA_ERROR_INVALID_VALUE;
    return attribute_of(&pi, attribute, data, (uintptr_t)ptr);
}

FC_API CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data,
                                       CUdeviceptr ptr)
{
    ENTER();
    if (!numAttributes || !attributes || !data)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < numAttributes; i++)
        if (!data[i])
            return CUDA_ERROR_INVALID_VALUE;
    struct pointer_info pi;
    bool known = pointer_lookup((uintptr_t)ptr, &pi);
    for (unsigned i = 0; i < numAttributes; i++) {
        if (!known) {
            attribute_default(attributes[i], data[i]);
            continue;
        }
        CUresult r = attribute_of(&pi, attributes[i], data[i], (uintptr_t)ptr);
        if (r == CUDA_ERROR_INVALID_VALUE)
            attribute_default(attributes[i], data[i]); /* "no such value" is a NULL here, not an error */
        else if (r)
            return r;
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Peer access                                                         */

FC_API CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    ENTER();
    if (!canAccessPeer)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= g_ndev || peerDev < 0 || peerDev >= g_ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    *canAccessPeer = dev != peerDev;
    return CUDA_SUCCESS;
}

/* The current context's device and the peer context's, checked. */
static CUresult peer_pair(CUcontext peer, int *dev, int *pdev)
{
    CUresult r = need_ctx(dev);
    if (r)
        return r;
    if (!peer || !valid_ctx_locked(peer) || peer->dead)
        return CUDA_ERROR_INVALID_CONTEXT;
    *pdev = peer->dev;
    return *pdev == *dev ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

FC_API CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    ENTER();
    if (Flags)
        return CUDA_ERROR_INVALID_VALUE;
    int dev = 0, pdev = 0;
    pthread_mutex_lock(&g_lock);
    CUresult r = peer_pair(peerContext, &dev, &pdev);
    if (!r && (g_peer[dev] >> pdev & 1))
        r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    if (!r)
        g_peer[dev] |= 1u << pdev;
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
    ENTER();
    int dev = 0, pdev = 0;
    pthread_mutex_lock(&g_lock);
    CUresult r = peer_pair(peerContext, &dev, &pdev);
    if (!r && !(g_peer[dev] >> pdev & 1))
        r = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    if (!r)
        g_peer[dev] &= ~(1u << pdev);
    pthread_mutex_unlock(&g_lock);
    return r;
}

void fc_peer_device_reset(int dev)
{
    if (dev < 0 || dev >= FC_MAX_DEVICES)
        return;
    g_peer[dev] = 0;
    for (int d = 0; d < FC_MAX_DEVICES; d++)
        g_peer[d] &= ~(1u << dev);
}

FC_API int fakecu_peer_enabled(int dev, int peer)
{
    if (dev < 0 || dev >= FC_MAX_DEVICES || peer < 0 || peer >= FC_MAX_DEVICES)
        return 0;
    pthread_mutex_lock(&g_lock);
    int on = (int)(g_peer[dev] >> peer & 1);
    pthread_mutex_unlock(&g_lock);
    return on;
}
