// SPDX-License-Identifier: MIT
// Process-wide state of the preload: whether we manage memory, the configuration, and one
// allocator per device.
#ifndef CCI_PRELOAD_STATE_H
#define CCI_PRELOAD_STATE_H

#include <stdatomic.h>

#include "allocator.h"
#include "backend_cuda.h"
#include "config.h"

enum { CCI_MODE_UNINIT = 0, CCI_MODE_PASSTHROUGH = 1, CCI_MODE_ACTIVE = 2 };

extern _Atomic int cci__mode;
extern cci_config cci__cfg;
extern _Atomic(cci_allocator *) cci__alloc[CCI_PL_MAX_DEVICES];

void cci__state_init(void);
cci_allocator *cci__state_allocator_create(int device);

/// 1 when we manage memory; runs the one-time initialisation on the first call.
static inline int cci_state_active(void)
{
    int m = atomic_load_explicit(&cci__mode, memory_order_acquire);
    if (__builtin_expect(m == CCI_MODE_UNINIT, 0)) {
        cci__state_init();
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

/// The allocator of `device` if it exists; never creates one.
static inline cci_allocator *cci_state_allocator_peek(int device)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return NULL;
    return atomic_load_explicit(&cci__alloc[device], memory_order_acquire);
}

/// 1 when memory went through one of our allocators since start (or fork).
int cci_state_used(void);

/// One past the highest device ordinal that ever had an allocator (since start or fork).
int cci_state_device_bound(void);

/// Gives every segment of `device` back and forgets its allocator (cudaDeviceReset). Not safe
/// against other threads still allocating on that device, exactly as the reset itself is not.
void cci_state_drop_device(int device);

/// 1 when CCI_DISABLE asks for pure pass-through.
int cci_state_disabled_by_env(void);
/// The configuration string and the variable it came from: CCI_ALLOC_CONF, else
/// PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF (the name newer PyTorch releases read).
/// NULL when none is set.
const char *cci_state_conf_env(const char **var);

/// The effective configuration in CCI_ALLOC_CONF grammar; "" when inactive.
const char *cci_state_config_string(void);

#endif
