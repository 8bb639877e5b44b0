// SPDX-License-Identifier: MIT
// Interception levels: the intercept_level key read early, the forwarding mark, and counters.
#include "levels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "state.h"

_Thread_local int cci__forwarding __attribute__((tls_model("initial-exec")));

static _Atomic int levels = -1;
static _Atomic uint64_t served[2];  // [0] runtime level, [1] driver level

// A fork child starts with empty pools (state.c); its counts start over with them.
static void levels_atfork_child(void)
{
    atomic_store(&served[0], 0);
    atomic_store(&served[1], 0);
}

// The decision state.c makes at the first CUDA call, made here without its side effects: the
// lookups that ask (the dlsym hook, the resolver) run inside cudart's initialisation or a library
// constructor, where starting CUDA or printing would be out of place. A configuration error is
// reported once, by state.c; here it only means "touch nothing".
static int read_levels(void)
{
    if (cci_state_disabled_by_env())
        return 0;
    const char *var;
    const char *conf = cci_state_conf_env(&var);
    cci_config c;
    cci_config_default(&c);
    if (conf && cci_config_parse(&c, conf, NULL, NULL, 0, NULL, NULL) != 0)
        return 0;
    return c.backend_async ? 0 : c.intercept_level;
}

int cci_pl_levels(void)
{
    int v = atomic_load_explicit(&levels, memory_order_acquire);
    if (__builtin_expect(v >= 0, 1))
        return v;
    v = read_levels();
    int expected = -1;
    if (atomic_compare_exchange_strong(&levels, &expected, v))
        pthread_atfork(NULL, NULL, levels_atfork_child);
    else
        v = expected;
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

// With CCI_LOG=info: which level caught the program (host-side counters only; CUDA is gone here).
__attribute__((destructor)) static void levels_summary(void)
{
    if (atomic_load(&cci__mode) != CCI_MODE_ACTIVE || !cci_state_used())
        return;
    uint64_t rt, drv;
    cci_pl_level_counts(&rt, &drv);
    cci_log(CCI_LOG_INFO, "allocations served: %llu at runtime level (cudaMalloc...), %llu at "
            "driver level (cuMemAlloc_v2...)", (unsigned long long)rt, (unsigned long long)drv);
}
