// SPDX-License-Identifier: MIT
// Interception levels: the intercept_level key read early (from the settings), the forwarding mark, and counters.
#include "levels.h"

#include <stdatomic.h>

#include "log.h"
#include "settings.h"

_Thread_local int cci__forwarding __attribute__((tls_model("initial-exec")));

static _Atomic int levels = -1;
static _Atomic uint64_t served[2];  // [0] runtime level, [1] driver level

void cci_pl_levels_atfork_child(void)
{
    atomic_store(&served[0], 0);
    atomic_store(&served[1], 0);
}

// The decision state.c makes at the first CUDA call, from the same settings, without its side
// effects: the lookups that ask (the dlsym hook, the resolver) run inside cudart's
// initialisation or a library constructor, where starting CUDA or printing would be out of
// place. A configuration error is reported once, by state.c; here it only means "touch nothing".
static int read_levels(void)
{
    const cci_settings *s = cci_settings_get();
    if (s->disabled || !s->config_ok || s->config.backend_async)
        return 0;
    return s->config.intercept_level;
}

int cci_pl_levels(void)
{
    int v = atomic_load_explicit(&levels, memory_order_acquire);
    if (__builtin_expect(v >= 0, 1))
        return v;
    v = read_levels();
    atomic_store_explicit(&levels, v, memory_order_release);  // the same value from every thread
    return v;
}

void cci_pl_count(int level)
{
    atomic_fetch_add_explicit(&served[level == CCI_LEVEL_DRIVER], 1, memory_order_relaxed);
}

void cci_pl_level_counts(uint64_t *runtime, uint64_t *driver)
{
    if (runtime)
        *runtime = atomic_load_explicit(&served[0], memory_order_relaxed);
    if (driver)
        *driver = atomic_load_explicit(&served[1], memory_order_relaxed);
}

void cci_pl_levels_summary(void)
{
    uint64_t rt, drv;
    cci_pl_level_counts(&rt, &drv);
    cci_log(CCI_LOG_INFO, "allocations served: %llu at runtime level (cudaMalloc...), %llu at "
            "driver level (cuMemAlloc_v2...)", (unsigned long long)rt, (unsigned long long)drv);
}
