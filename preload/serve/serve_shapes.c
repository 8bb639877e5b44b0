// SPDX-License-Identifier: MIT
// Pitched and 3-D allocations, managed memory and other pools' allocations (serve_shapes.h). The pitch is computed here, once, for both
// levels; the memory is an ordinary block of pitch x rows bytes, freed through cudaFree or
// cuMemFree_v2 like any other.
#include "serve_shapes.h"

#include <stdint.h>

#include "allocator.h"
#include "cuda_abi.h"
#include "device_attrs.h"
#include "outside.h"
#include "state.h"

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

// The allocator of the device whose default pool `pool` is, among those we serve; NULL for any
// other pool.
static cci_allocator *default_pool_allocator(void *pool)
{
    if (!cci_state_active())
        return NULL;
    for (int d = 0; d < CCI_PL_MAX_DEVICES; d++) {
        cci_allocator *a = cci_state_allocator_peek(d);
        if (a && cci_serve_pool_is_default(d, pool))
            return a;
    }
    return NULL;
}

void cci_serve_default_pool_add(void *pool, int attr, void *value)
{
    if (attr < CCI_MEMPOOL_ATTR_RESERVED_MEM_CURRENT || attr > CCI_MEMPOOL_ATTR_USED_MEM_HIGH)
        return;
    cci_allocator *a = default_pool_allocator(pool);
    if (!a)
        return;
    cci_stats s = {.size = sizeof s, .version = CCI_STATS_VERSION};
    cci_alloc_stats(a, &s);
    const cci_stat *st = attr <= CCI_MEMPOOL_ATTR_RESERVED_MEM_HIGH ? &s.reserved_bytes[CCI_POOL_ALL]
                                                                    : &s.allocated_bytes[CCI_POOL_ALL];
    int high = attr == CCI_MEMPOOL_ATTR_RESERVED_MEM_HIGH || attr == CCI_MEMPOOL_ATTR_USED_MEM_HIGH;
    int64_t ours = high ? st->peak : st->current;
    // (A sum of two peaks: CUDA's own share of the pool stays near zero while we serve it.)
    *(uint64_t *)value += ours > 0 ? (uint64_t)ours : 0;
}

void cci_serve_default_pool_set(void *pool, int attr)
{
    if (attr != CCI_MEMPOOL_ATTR_RESERVED_MEM_HIGH && attr != CCI_MEMPOOL_ATTR_USED_MEM_HIGH)
        return;
    cci_allocator *a = default_pool_allocator(pool);
    if (a)
        cci_alloc_reset_peaks(a);  // every peak: PyTorch resets both marks together
}

void cci_serve_default_pool_trim(void *pool, size_t keep)
{
    cci_allocator *a = keep == 0 ? default_pool_allocator(pool) : NULL;
    if (a)
        cci_alloc_empty_cache(a);
}
