// SPDX-License-Identifier: MIT
// Interception levels: the intercept_level key read early (from the settings), and the counters.
#include "levels.h"

#include <stdatomic.h>

#include "log.h"
#include "program_vmm.h"
#include "settings.h"
#include "state.h"

static _Atomic int levels = -1;
// Allocations served, [0] runtime level, [1] driver level. Counted on every allocation by every
// thread: one shared counter would be a cache line all threads write, so each thread counts in a
// shard of its own (threads beyond SERVED_SHARDS share) and readers add the shards up.
// my_shard: 1 + the thread's number (0: not counted yet).
#define SERVED_SHARDS 64
static struct {
    _Atomic uint64_t n[2];
    char pad[64 - 2 * sizeof(uint64_t)];
} served[SERVED_SHARDS] __attribute__((aligned(64)));
static _Atomic unsigned next_shard;
static _Thread_local unsigned my_shard __attribute__((tls_model("initial-exec")));
// The thread's own shard once it has one (its first SERVED_SHARDS threads); NULL for a thread not
// counted yet and for the later threads, which share shards and count with an atomic add.
_Thread_local _Atomic uint64_t *cci__my_served __attribute__((tls_model("initial-exec")));

_Atomic int cci__serving = -1;

void cci_pl_levels_atfork_child(void)
{
    for (int i = 0; i < SERVED_SHARDS; i++) {
        atomic_store(&served[i].n[0], 0);
        atomic_store(&served[i].n[1], 0);
    }
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

// The gate's first answers, until the layer's mode is decided. A level that is off answers 0
// without starting anything (a driver wrapper called with only the runtime level on must not
// start CUDA, as before). Once cci_state_active() has decided the mode, the answer for every
// level is published: from then on the gate is one load (cci_pl_serving).
int cci__pl_serving_slow(int level)
{
    int levels_on = cci_pl_levels();
    if (!(levels_on & level))
        return 0;
    int active = cci_state_active();
    // cci_state_active() returns before the decision only inside the start-up itself; then
    // nothing is published, and the next call asks again.
    if (atomic_load_explicit(&cci__mode, memory_order_acquire) != CCI_MODE_UNINIT)
        atomic_store_explicit(&cci__serving, active ? levels_on : 0, memory_order_relaxed);
    return active;
}

// The first call of a thread: it takes the next shard. The first SERVED_SHARDS threads own theirs
// (cci__my_served: a plain increment, no locked instruction, is enough); later threads share
// shards and keep counting here, with the atomic add.
void cci__pl_count_slow(int level)
{
    if (!my_shard) {
        my_shard = 1 + atomic_fetch_add_explicit(&next_shard, 1, memory_order_relaxed);
        if (my_shard <= SERVED_SHARDS) {
            cci__my_served = served[my_shard - 1].n;
            cci_pl_count(level);
            return;
        }
    }
    atomic_fetch_add_explicit(&served[(my_shard - 1) % SERVED_SHARDS].n[level == CCI_LEVEL_DRIVER], 1,
                              memory_order_relaxed);
}

void cci_pl_level_counts(uint64_t *runtime, uint64_t *driver)
{
    uint64_t n[2] = {0, 0};
    for (int i = 0; i < SERVED_SHARDS; i++)
        for (int l = 0; l < 2; l++)
            n[l] += atomic_load_explicit(&served[i].n[l], memory_order_relaxed);
    if (runtime)
        *runtime = n[0];
    if (driver)
        *driver = n[1];
}

void cci_pl_levels_summary(void)
{
    uint64_t rt, drv;
    cci_pl_level_counts(&rt, &drv);
    cci_log(CCI_LOG_INFO, "allocations served: %llu at runtime level (cudaMalloc...), %llu at "
            "driver level (cuMemAlloc_v2...)", (unsigned long long)rt, (unsigned long long)drv);
    // Where threads allocate at once, the lock's share is what limits them (tcache.h).
    cci_stats t;
    cci_state_sum_counters(&t);
    cci_log(CCI_LOG_INFO, "under the allocator's lock: %llu allocations and %llu frees; the thread "
            "caches sent there %llu operations short of credit under a peak, %llu allocations "
            "while their kept frees waited for fences, %llu operations that found another "
            "thread's locked section in their way, %llu fenced frees their kept batches had no "
            "room for", (unsigned long long)t.num_locked_allocs, (unsigned long long)t.num_locked_frees,
            (unsigned long long)t.tc_declined_credit, (unsigned long long)t.tc_declined_kept_wait,
            (unsigned long long)t.tc_declined_busy, (unsigned long long)t.tc_declined_keep_full);
    if (cci_pvmm_used()) {
        cci_stats v;
        cci_pvmm_stats(-1, &v);
        cci_log(CCI_LOG_INFO, "the program's own virtual-memory allocations: %llu cuMemCreate (%.1f MiB), %llu "
                "answered with a kept buffer (%.1f %% of the bytes), %llu kept buffers given back, %.1f MiB "
                "kept at the peak", (unsigned long long)v.program_vmm_creates,
                (double)v.program_vmm_create_bytes / 1048576.0, (unsigned long long)v.program_vmm_reused,
                v.program_vmm_create_bytes ? 100.0 * (double)v.program_vmm_reused_bytes /
                                                 (double)v.program_vmm_create_bytes : 0.0,
                (unsigned long long)v.program_vmm_given_back, (double)v.program_vmm_kept_bytes.peak / 1048576.0);
    }
}
