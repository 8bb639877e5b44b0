// SPDX-License-Identifier: MIT
/*
 * Device attributes of the fake driver, as a pitched allocation needs them.
 * Measured on an H200 (driver 580): TEXTURE_ALIGNMENT 512, TEXTURE_PITCH_ALIGNMENT
 * 32, MAX_PITCH 2^31 - 1, and every cuMemAllocPitch_v2 pitch was the width
 * rounded up to TEXTURE_ALIGNMENT. FAKECUDA_TEXTURE_ALIGNMENT (a power of two)
 * changes the texture alignment, so a test can tell a layer that asks the
 * driver from one that assumes 512.
 */
#include <stdlib.h>

#include "fake_internal.h"

size_t fake_texture_alignment(void)
{
    static size_t cached;
    if (!cached) {
        const char *v = getenv("FAKECUDA_TEXTURE_ALIGNMENT");
        unsigned long a = v ? strtoul(v, NULL, 10) : 0;
        cached = (a && !(a & (a - 1))) ? a : 512;
    }
    return cached;
}

FC_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    ENTER();
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= g_ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    switch ((int)attrib) {
    case 11:  /* CU_DEVICE_ATTRIBUTE_MAX_PITCH */
        *pi = 2147483647;
        return CUDA_SUCCESS;
    case 14:  /* CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT */
        *pi = (int)fake_texture_alignment();
        return CUDA_SUCCESS;
    case 51:  /* CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT */
        *pi = 32;
        return CUDA_SUCCESS;
    case 102: /* CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
        /* FAKECUDA_VMM_SUPPORTED=0: a device without the virtual-memory API (some vGPUs and
         * older boards), where the layer's default falls back to ordinary segments. */
        *pi = !(getenv("FAKECUDA_VMM_SUPPORTED") && getenv("FAKECUDA_VMM_SUPPORTED")[0] == '0');
        return CUDA_SUCCESS;
    case 103: /* CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED; a test turns it off */
        *pi = !getenv("FAKECUDA_NO_FD_HANDLES");
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}
