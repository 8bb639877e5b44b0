// SPDX-License-Identifier: MIT
// Pitched and 3-D allocations, managed memory and other pools' allocations (serve_shapes.h). The pitch is computed here, once, for both
// levels; the memory is an ordinary block of pitch x rows bytes, freed through cudaFree or
// cuMemFree_v2 like any other.
#include "serve_shapes.h"

#include <stdint.h>

#include "device_attrs.h"
#include "outside.h"

size_t cci_serve_pitched_bytes(int device, size_t width, size_t rows, size_t *pitch)
{
    if (width == 0 || rows == 0)
        return 0;
    size_t align = cci_cuda_pitch_alignment(device);
    if (align == 0 || width > SIZE_MAX - (align - 1))
        return 0;
    size_t p = (width + align - 1) & ~(align - 1);
    if (rows > SIZE_MAX / p)
        return 0;
    *pitch = p;
    return p * rows;
}

void cci_serve_passed_managed(int device, uintptr_t addr, size_t bytes)
{
    cci_outside_note_managed(device, addr, bytes);
}

void cci_serve_passed_free(uintptr_t addr)
{
    cci_outside_forget(addr);
}

int cci_serve_pool_is_default(int device, void *pool)
{
    return pool && pool == cci_cuda_default_pool(device);
}

void cci_serve_passed_pool(int device, uintptr_t addr, size_t bytes, void *pool)
{
    cci_outside_note_pool(device, addr, bytes, pool);
}
