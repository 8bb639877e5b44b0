// SPDX-License-Identifier: MIT
// Device attributes asked of the real driver once per device (device_attrs.h).
#include "device_attrs.h"

#include <stdatomic.h>

#include "real.h"
#include "cuda_context.h"

// CUDA's numbering of CUdevice_attribute (cuda.h): the texture base alignment.
enum { CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT = 14 };

// 0 = not asked yet (or unanswered: asked again next time, a cheap driver query).
static _Atomic size_t pitch_alignment[CCI_PL_MAX_DEVICES];

size_t cci_cuda_pitch_alignment(int device)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return 0;
    size_t a = atomic_load_explicit(&pitch_alignment[device], memory_order_relaxed);
    if (a)
        return a;
    const cci_real_driver *drv = cci_real_drv();
    CUdevice dev;
    int value = 0;
    if (!drv->cuDeviceGetAttribute || drv->cuDeviceGet(&dev, device) != CUDA_SUCCESS ||
        drv->cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, dev) != CUDA_SUCCESS)
        return 0;
    // Only a power of two makes a pitch the driver could have chosen.
    if (value <= 0 || (value & (value - 1)))
        return 0;
    atomic_store_explicit(&pitch_alignment[device], (size_t)value, memory_order_relaxed);
    return (size_t)value;
}

static _Atomic(void *) default_pool[CCI_PL_MAX_DEVICES];

void *cci_cuda_default_pool(int device)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return NULL;
    void *p = atomic_load_explicit(&default_pool[device], memory_order_relaxed);
    if (p)
        return p;
    const cci_real_driver *drv = cci_real_drv();
    CUdevice dev;
    CUmemoryPool pool = NULL;
    if (!drv->cuDeviceGetDefaultMemPool || drv->cuDeviceGet(&dev, device) != CUDA_SUCCESS ||
        drv->cuDeviceGetDefaultMemPool(&pool, dev) != CUDA_SUCCESS)
        return NULL;
    atomic_store_explicit(&default_pool[device], (void *)pool, memory_order_relaxed);
    return pool;
}
