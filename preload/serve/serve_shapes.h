// SPDX-License-Identifier: MIT
// The shapes of allocations other than a plain byte count, decided once for both API levels:
// pitched (cudaMallocPitch, cuMemAllocPitch_v2) and 3-D (cudaMalloc3D) linear memory.
#ifndef CCI_PRELOAD_SERVE_SHAPES_H
#define CCI_PRELOAD_SERVE_SHAPES_H

#include <stddef.h>
#include <stdint.h>

/// The bytes of a pitched allocation of `rows` rows of `width` bytes on `device`, with the pitch
/// the driver would choose written to *pitch (width rounded up to the device's pitch alignment).
/// The block is then served like any allocation of that many bytes. 0 when the call must go to
/// CUDA as it is: no width or rows (CUDA's own answer for those), the alignment unknown, or a
/// size that overflows.
size_t cci_serve_pitched_bytes(int device, size_t width, size_t rows, size_t *pitch);

/// Managed memory is never cached: CUDA made it (cudaMallocManaged, cuMemAllocManaged) and it is
/// only counted, on `device`, for the statistics (managed_allocations, managed_bytes).
void cci_serve_passed_managed(int device, uintptr_t addr, size_t bytes);
/// 1 when an allocation from `pool` on `device` is served like cudaMallocAsync: the pool is the
/// device's default pool. Any other pool's allocations are CUDA's (the program chose that pool
/// for its own properties: limits, sharing, access) and only counted.
int cci_serve_pool_is_default(int device, void *pool);
/// The default pool's figures with ours (intercept_shapes.h): where `pool` is the default pool of
/// a device we serve, adds our figure for `attr` (reserved or used bytes, current or peak) to
/// *value (CUDA's own, a cuuint64_t); resets our peaks after CUDA reset one of the pool's high
/// marks; empties our cache after CUDA trimmed the pool to `keep` 0. Anything else: no change.
void cci_serve_default_pool_add(void *pool, int attr, void *value);
void cci_serve_default_pool_set(void *pool, int attr);
void cci_serve_default_pool_trim(void *pool, size_t keep);
/// An allocation CUDA made from another pool, counted on `device` (-1: not counted).
void cci_serve_passed_pool(int device, uintptr_t addr, size_t bytes, void *pool);
/// CUDA's own free of `addr` succeeded (a pointer not ours): managed memory's counts follow it.
void cci_serve_passed_free(uintptr_t addr);

#endif
