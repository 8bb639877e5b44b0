// SPDX-License-Identifier: MIT
// The two interception levels: which are on, which one a call belongs to, and what each served.
//
// Runtime level: cudaMalloc & co. (hooks_runtime.c), reached when a program binds them to a shared
// libcudart. Driver level: cuMemAlloc_v2 & co. (hooks_driver.c), reached by every cudart copy,
// static ones included, through our cuGetProcAddress or dlsym. Both serve from one allocator per
// device, so a block may be freed at either level whichever level allocated it.
#ifndef CCI_PRELOAD_LEVELS_H
#define CCI_PRELOAD_LEVELS_H

#include "export.h"
#include <stdatomic.h>
#include <stdint.h>

#include "config.h"
#include "forwarding.h"

/// CCI_LEVEL_* bits of the levels that serve allocations; 0 when libccinterpose is off
/// (CCI_DISABLE, a configuration that does not parse, backend:cudaMallocAsync). Taken from the
/// settings (settings.h), without any CUDA call or message, so that the dlsym hook and the
/// resolver can ask it from any context.
int cci_pl_levels(void);

/// The hooks' gate, one load on the fast path: the CCI_LEVEL_* bits of the levels
/// that serve now, i.e. cci_pl_levels() once the layer is active (cci_state_active()), 0 when it
/// passes through; -1 until that is decided. Both answers are final for the process (the mode
/// is decided once, the settings are read once), so one relaxed load per call is enough.
/// Declared hidden, as the library defines it (export.h, CCI_HIDDEN): an extern declaration
/// keeps default visibility otherwise, and each load went through the GOT, two instructions.
extern _Atomic int cci__serving CCI_HIDDEN;
int cci__pl_serving_slow(int level);

/// 1 when an allocation call of `level` (CCI_LEVEL_RUNTIME or CCI_LEVEL_DRIVER) is ours to
/// handle: the level is on and the layer active. Starts the layer on the first call of a level
/// that is on (never for a level that is off, as before: such a call starts nothing).
static inline int cci_pl_serving(int level)
{
    int v = atomic_load_explicit(&cci__serving, memory_order_relaxed);
    if (__builtin_expect(v >= 0, 1))
        return (v & level) != 0;
    return cci__pl_serving_slow(level);
}

/// Counts one allocation served at `level` (CCI_LEVEL_RUNTIME or CCI_LEVEL_DRIVER). Inline on
/// the fast path: a thread that owns a shard (levels.c) finds its two counters through one
/// thread-local pointer and bumps one with a plain (not locked) increment.
extern _Thread_local _Atomic uint64_t *cci__my_served __attribute__((tls_model("initial-exec")));
void cci__pl_count_slow(int level);
static inline void cci_pl_count(int level)
{
    _Atomic uint64_t *n = cci__my_served;
    if (__builtin_expect(n == NULL, 0)) {
        cci__pl_count_slow(level);
        return;
    }
    n += level == CCI_LEVEL_DRIVER;
    atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + 1, memory_order_relaxed);
}

/// Allocations served at each level since start (or fork). Either pointer may be NULL. For the
/// report: how a program reached us (a static-cudart program shows 0 at runtime level).
void cci_pl_level_counts(uint64_t *runtime, uint64_t *driver);

/// Fork child (lifecycle.c): the counts start over with the child's empty pools.
void cci_pl_levels_atfork_child(void);

/// At exit, with CCI_LOG=info: which level caught the program (host-side counters only).
void cci_pl_levels_summary(void);

#endif
