// SPDX-License-Identifier: MIT
// The mode decision, the configuration in effect and the per-device allocators. When each of
// these runs (start-up, fork, exit) is decided in lifecycle.c; what the environment says comes
// from settings.c.
#include "state.h"
#include "host_cache.h"
#include "program_vmm.h"

#include <pthread.h>
#include <stdio.h>

#include "addr_map.h"
#include "log.h"
#include "real.h"
#include "observers.h"

#include "allocator_reset.h"
#include "stats_list.h"

_Atomic int cci__mode;
cci_config cci__cfg;
_Atomic(cci_allocator *) cci__alloc[CCI_PL_MAX_DEVICES];
_Atomic(cci_allocator *) cci__sole_alloc;
static int allocators;  // created since start (or fork); the create lock

static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int device_bound;
static _Atomic int used;  // an allocator was created since start (or fork)
static char config_string[1024];

int cci__state_decide_mode(const cci_settings *s)
{
    if (s->disabled)
        return CCI_MODE_PASSTHROUGH;
    for (int i = 0; i < s->nnotices; i++)
        cci_log(CCI_LOG_WARNING, "%s", s->notices[i]);
    if (!s->config_ok) {
        cci_log(CCI_LOG_ERROR, "%s; libccinterpose disabled (pass-through)", s->config_error);
        return CCI_MODE_PASSTHROUGH;
    }
    cci__cfg = s->config;
    if (cci__cfg.backend_async) {
        cci_log(CCI_LOG_INFO, "%s selects backend:cudaMallocAsync: CUDA's own pool serves "
                "allocations, libccinterpose passes through", s->conf_var);
        return CCI_MODE_PASSTHROUGH;
    }
    if (cci_real_drv_load() != 0 || cci_cuda_backend_init() != 0)
        return CCI_MODE_PASSTHROUGH;
    cci_config_format(&cci__cfg, config_string, sizeof config_string);
    cci_log(CCI_LOG_INFO, "active: %s", config_string);
    return CCI_MODE_ACTIVE;
}

void cci__state_publish_mode(int mode)
{
    atomic_store_explicit(&cci__mode, mode, memory_order_release);
}

// ---- fork --------------------------------------------------------------------------------

// Nothing of ours may be half-changed when the address space is copied: the create lock and
// every allocator lock are held across fork() in the parent.
void cci__state_atfork_prepare(void)
{
    pthread_mutex_lock(&create_lock);
    for (int d = 0; d < CCI_PL_MAX_DEVICES; d++) {
        cci_allocator *a = atomic_load(&cci__alloc[d]);
        if (a)
            cci_allocator_fork_prepare(a);
    }
}

void cci__state_atfork_parent(void)
{
    for (int d = 0; d < CCI_PL_MAX_DEVICES; d++) {
        cci_allocator *a = atomic_load(&cci__alloc[d]);
        if (a)
            cci_allocator_fork_parent(a);
    }
    pthread_mutex_unlock(&create_lock);
}

// A fork child inherits the parent's allocators, whose segments belong to the parent's CUDA
// context: forget them without any CUDA call (the memory is not the child's to free) and start
// over with empty pools and statistics. The child has one thread, so freeing them here is the
// one place where per-device state may end (see the lifetime rule in state.h).
void cci__state_atfork_child(void)
{
    pthread_mutex_init(&create_lock, NULL);
    for (int d = 0; d < CCI_PL_MAX_DEVICES; d++) {
        cci_allocator *a = atomic_exchange(&cci__alloc[d], NULL);
        if (a)
            cci_allocator_fork_child(a);
    }
    atomic_store(&device_bound, 0);
    atomic_store(&used, 0);
    atomic_store(&cci__sole_alloc, NULL);
    allocators = 0;
}

// ---- allocators ---------------------------------------------------------------------------

cci_allocator *cci__state_allocator_create(int device)
{
    pthread_mutex_lock(&create_lock);
    cci_allocator *a = atomic_load_explicit(&cci__alloc[device], memory_order_relaxed);
    if (!a) {
        a = cci_allocator_create(device, &cci__cfg, cci_cuda_backend());
        if (a) {
            cci_serve_tell_allocator(device, a);  // the report, the trace (observers.h)
            cci_addr_map_attach(a);  // last: the observers above keep their slots
            cci_allocator_thread_cache(a, cci_settings_get()->thread_cache);
            // The bound first: a free that can see this allocator must also search it.
            if (device >= atomic_load(&device_bound))
                atomic_store(&device_bound, device + 1);
            atomic_store(&used, 1);
            // Before the allocator is published: a free of one of its blocks happens after its
            // allocation, hence after this store, and so never takes the other one for the
            // sole owner (release here, acquire in cci_state_sole_allocator).
            atomic_store_explicit(&cci__sole_alloc, ++allocators == 1 ? a : NULL, memory_order_release);
            atomic_store_explicit(&cci__alloc[device], a, memory_order_release);
        } else {
            cci_log(CCI_LOG_WARNING, "device %d: no host memory for an allocator; passing through",
                    device);
        }
    }
    pthread_mutex_unlock(&create_lock);
    return a;
}

void cci_state_each_stats(void (*fn)(int device, const cci_stats *s, void *arg), void *arg)
{
    for (int d = 0, end = cci_state_device_bound(); d < end; d++) {
        cci_allocator *a = cci_state_allocator_peek(d);
        if (!a)
            continue;
        cci_stats s = {.size = sizeof s, .version = CCI_STATS_VERSION};
        cci_alloc_stats(a, &s);
        fn(d, &s, arg);
    }
}

static void add_counters(int device, const cci_stats *s, void *arg)
{
    (void)device;
    cci_stats *sum = arg;
#define ADD_COUNTER(field, torch) sum->field += s->field;
    CCI_STAT_COUNTERS(ADD_COUNTER)
#undef ADD_COUNTER
}

void cci_state_sum_counters(cci_stats *out)
{
#define ZERO_COUNTER(field, torch) out->field = 0;
    CCI_STAT_COUNTERS(ZERO_COUNTER)
#undef ZERO_COUNTER
    cci_state_each_stats(add_counters, out);
}

int cci_state_used(void)
{
    return atomic_load(&used);
}

int cci_state_device_bound(void)
{
    return atomic_load_explicit(&device_bound, memory_order_acquire);
}

void cci_state_drop_device(int device)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return;
    // Reset in place, never freed: the dumper thread or another thread may hold this pointer.
    cci_allocator *a = cci_state_allocator_peek(device);
    if (a)
        cci_allocator_reset(a, 1);
    cci_host_cache_drop_device(device);  // pinned host memory of its context goes with it too
    cci_pvmm_drop_device(device);        // and the program's own mappings, made real first
    cci_cuda_backend_drop_device(device);
}

const char *cci_state_config_string_raw(void)
{
    return config_string;
}

const char *cci_state_config_string(void)
{
    return cci_state_active() ? config_string : "";
}
