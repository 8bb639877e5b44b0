// SPDX-License-Identifier: MIT
// Device attributes the serving layer needs, asked of the real driver once per device.
#ifndef CCI_PRELOAD_DEVICE_ATTRS_H
#define CCI_PRELOAD_DEVICE_ATTRS_H

#include <stddef.h>

/// The alignment of the pitch the driver gives a pitched allocation on `device`: its
/// CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT (512 B on an H200 with driver 580, where every
/// cuMemAllocPitch_v2 / cudaMallocPitch pitch measured was the width rounded up to 512, while
/// TEXTURE_PITCH_ALIGNMENT answered 32). 0 when the driver cannot tell (the caller then passes
/// the call to CUDA). Cached per device after the first answer.
size_t cci_cuda_pitch_alignment(int device);

/// The device's default memory pool (cuDeviceGetDefaultMemPool, the pool cudaMallocAsync draws
/// from unless the program set another), NULL when the driver cannot tell. Cached per device.
void *cci_cuda_default_pool(int device);

#endif
