// SPDX-License-Identifier: MIT
// Where observers attach to serving. Serving never names an observer: the exit report, the call
// sites and the trace recorder (observe/, src/trace) register here at start-up (lifecycle.c),
// before the mode is published, and serving calls whatever is registered. Like the core's
// allocator observers (cci_allocator_add_observer), an observer sees what happened; it decides
// nothing.
#ifndef CCI_PRELOAD_OBSERVERS_H
#define CCI_PRELOAD_OBSERVERS_H

#include <stddef.h>
#include <stdint.h>

#include "allocator.h"
#include "export.h"

/// A new allocator, before its first allocation (its observers go on before any event).
typedef void (*cci_allocator_observer)(int device, cci_allocator *a);
/// An allocation that failed for want of device memory; no allocator lock is held.
typedef void (*cci_oom_observer)(int device, size_t requested);
/// A successful allocation, on the fast path.
typedef void (*cci_alloc_observer)(int device, uintptr_t addr, size_t size);

/// Up to CCI_SERVE_MAX_OBSERVERS functions told of every new allocator, in the order attached.
/// 0, or -1 when the table is full. Start-up only (no allocator exists yet).
#define CCI_SERVE_MAX_OBSERVERS 4
int cci_serve_observe_allocators(cci_allocator_observer fn);
/// The one function told of an out-of-memory failure (NULL: none). Start-up only.
void cci_serve_observe_oom(cci_oom_observer fn);
/// The one function told of every successful allocation (NULL: none). Start-up only.
void cci_serve_observe_allocations(cci_alloc_observer fn);

/// For serving: the allocation observer, read on the fast path (one load and a branch when none).
extern cci_alloc_observer cci__serve_on_alloc CCI_HIDDEN;
static inline void cci_serve_tell_alloc(int device, uintptr_t addr, size_t size)
{
    cci_alloc_observer fn = cci__serve_on_alloc;
    if (__builtin_expect(fn != NULL, 0))
        fn(device, addr, size);
}
/// For serving: tells every allocator observer, in order; then an out-of-memory failure.
void cci_serve_tell_allocator(int device, cci_allocator *a);
void cci_serve_tell_oom(int device, size_t requested);

#endif
