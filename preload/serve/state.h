// SPDX-License-Identifier: MIT
// Process-wide state of the preload: whether we manage memory, the configuration, and one
// allocator per device.
//
// Lifetime of per-device state (the allocator in cci__alloc[d], and the report timeline that
// observes it): created once, on the device's first allocation, and then NEVER freed while the
// process runs. Other threads read these pointers without a lock (the live-report dumper, the
// hooks of every thread, the OOM report) and may hold them for as long as they like.
//   - cudaDeviceReset / cuDevicePrimaryCtxReset / cuCtxDestroy of the primary context reset the
//     allocator IN PLACE (cci_allocator_reset, under the allocator's own lock): its segments go
//     back, its pools and statistics start over, the pointer stays valid. A reader that raced
//     the reset sees either the state before or the empty state after, never freed memory.
//   - The only place where they are freed is the fork child handler (lifecycle.c), where the
//     forking thread is the only thread.
//   - Exit frees nothing (other threads may still run while destructors do).
#ifndef CCI_PRELOAD_STATE_H
#define CCI_PRELOAD_STATE_H

#include <stdatomic.h>

#include "allocator.h"
#include "backend_cuda.h"
#include "config.h"
#include "export.h"
#include "settings.h"
#include "start.h"

enum { CCI_MODE_UNINIT = 0, CCI_MODE_PASSTHROUGH = 1, CCI_MODE_ACTIVE = 2 };

// Declared hidden, as the library defines them (export.h, CCI_HIDDEN).
extern _Atomic int cci__mode CCI_HIDDEN;
extern cci_config cci__cfg CCI_HIDDEN;
extern _Atomic(cci_allocator *) cci__alloc[CCI_PL_MAX_DEVICES] CCI_HIDDEN;

cci_allocator *cci__state_allocator_create(int device);

// For lifecycle.c: the start-up decision (logs what the settings refused), publishing it, and
// the fork handlers of the allocators.
int cci__state_decide_mode(const cci_settings *s);
void cci__state_publish_mode(int mode);
void cci__state_atfork_prepare(void);
void cci__state_atfork_parent(void);
void cci__state_atfork_child(void);

/// 1 when we manage memory; runs the one-time start-up on the first call (start.h).
static inline int cci_state_active(void)
{
    int m = atomic_load_explicit(&cci__mode, memory_order_acquire);
    if (__builtin_expect(m == CCI_MODE_UNINIT, 0)) {
        cci_preload_start();
        m = atomic_load_explicit(&cci__mode, memory_order_acquire);
    }
    return m == CCI_MODE_ACTIVE;
}

/// The effective configuration (valid once cci_state_active() returned 1).
static inline const cci_config *cci_state_config(void) { return &cci__cfg; }

/// The allocator of `device`, created on first use; NULL for an ordinal we do not manage or
/// when the host is out of memory.
static inline cci_allocator *cci_state_allocator(int device)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return NULL;
    cci_allocator *a = atomic_load_explicit(&cci__alloc[device], memory_order_acquire);
    return __builtin_expect(a != NULL, 1) ? a : cci__state_allocator_create(device);
}

/// While the process has exactly one allocator: that one; NULL before the first and from the
/// second on (until a fork child starts over). See cci_serve_release for why a free asks it.
extern _Atomic(cci_allocator *) cci__sole_alloc CCI_HIDDEN;
static inline cci_allocator *cci_state_sole_allocator(void)
{
    return atomic_load_explicit(&cci__sole_alloc, memory_order_acquire);
}

/// The allocator of `device` if it exists; never creates one.
static inline cci_allocator *cci_state_allocator_peek(int device)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return NULL;
    return atomic_load_explicit(&cci__alloc[device], memory_order_acquire);
}

/// Calls fn with a copy of the statistics of every device that has an allocator, in device order
/// (the exit lines print from these).
void cci_state_each_stats(void (*fn)(int device, const cci_stats *s, void *arg), void *arg);
/// The event counts (stats_list.h's CCI_STAT_COUNTERS) summed over every device into *out; its
/// other fields are left as they are.
void cci_state_sum_counters(cci_stats *out);

/// 1 when memory went through one of our allocators since start (or fork).
int cci_state_used(void);

/// One past the highest device ordinal that ever had an allocator (since start or fork).
int cci_state_device_bound(void);

/// Gives every segment of `device` back and empties its allocator in place (cudaDeviceReset).
/// The allocator object stays (see the lifetime rule above): other threads still allocating on
/// the device, or dumping a report, meet an empty allocator, never freed memory. Pointers they
/// got before the reset are no longer ours.
void cci_state_drop_device(int device);

/// The effective configuration string as decided so far, without starting anything (start-up).
const char *cci_state_config_string_raw(void);
/// The effective configuration in CCI_ALLOC_CONF grammar; "" when inactive.
const char *cci_state_config_string(void);

#endif
