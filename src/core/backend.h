// SPDX-License-Identifier: MIT
// The device contract: everything the allocator core knows about memory.
//
// The core never includes a CUDA header. It reaches device memory only through these primitives,
// so the same policy code runs on a GPU (preload/), on the simulated device (tests, benchmarks,
// replay) and on anything else that can hand out address ranges.
#ifndef CCI_BACKEND_H
#define CCI_BACKEND_H

#include <stddef.h>
#include <stdint.h>

enum {
    CCI_OK = 0,
    CCI_EOOM = -1,      ///< the device has no room for this segment (or a cap says no)
    CCI_EBACKEND = -2,  ///< any other device failure; the backend keeps its own error code
    CCI_EINVAL = -3,    ///< a pointer that is not the start of a live block of ours
    CCI_ENOTOURS = -4,  ///< a pointer outside every segment of this allocator
};

typedef struct cci_backend_ops {
    /// Reserve `size` bytes (a multiple of 512) on `device`. On success returns CCI_OK and the
    /// segment's start in *addr; the backend owns nothing about it afterwards except the memory.
    /// Returns CCI_EOOM when the device is full, CCI_EBACKEND for other failures. Called without
    /// the allocator lock held only when `release_lock_on_cudamalloc` is set; otherwise under it.
    int (*reserve)(void *ctx, int device, size_t size, uintptr_t *addr);
    /// Return a segment obtained from reserve, with its exact size. CCI_OK or CCI_EBACKEND.
    int (*release)(void *ctx, int device, uintptr_t addr, size_t size);
    /// Total bytes of the device; 0 when unknown (the core then treats capacity as unlimited).
    size_t (*capacity)(void *ctx, int device);
    /// Block until every piece of work queued on the device before this call has finished, so
    /// that blocks freed before it can be handed to a new owner. Never called with the allocator
    /// lock held. NULL when nothing runs asynchronously (the simulated device).
    int (*synchronize)(void *ctx, int device);
} cci_backend_ops;

typedef struct cci_backend {
    const cci_backend_ops *ops;
    void *ctx;
} cci_backend;

// ---- the simulated device (backend_sim.c) ---------------------------------------------------
// Hands out 2 MiB-aligned addresses from a private address range, enforcing `capacity` bytes of
// reservations. No memory is touched, so a "GPU" of any size costs nothing.
typedef struct cci_sim_device cci_sim_device;

cci_sim_device *cci_sim_create(size_t capacity);
void cci_sim_destroy(cci_sim_device *sim);
cci_backend cci_sim_backend(cci_sim_device *sim);
/// Fault injection for tests: the n-th reserve call from now (1 = the next) fails with CCI_EOOM.
/// 0 disarms.
void cci_sim_fail_reserve_at(cci_sim_device *sim, uint64_t n);
/// Bytes currently reserved on the simulated device, and number of live segments.
size_t cci_sim_reserved(const cci_sim_device *sim);
size_t cci_sim_segments(const cci_sim_device *sim);

#endif
