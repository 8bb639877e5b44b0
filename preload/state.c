// SPDX-License-Identifier: MIT
// Lazy start-up, configuration and the per-device allocators.
//
// Nothing but reading CCI_LOG happens at load time: the preload is inherited by every child
// process (shells, compilers, nvidia-smi), and a library constructor that touched CUDA or printed
// a configuration error would do so in all of them. The first CUDA call through us runs
// state_init once; the rest of the environment is read then, so a program that sets
// PYTORCH_CUDA_ALLOC_CONF before its first CUDA call is honoured as PyTorch would honour it.
#include "state.h"

#include "reporting.h"
#include "trace_record.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "real.h"
#include "streams.h"

_Atomic int cci__mode;
cci_config cci__cfg;
_Atomic(cci_allocator *) cci__alloc[CCI_PL_MAX_DEVICES];

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int device_bound;
static _Atomic int used;  // an allocator was created since start (or fork)
static char config_string[1024];

// CCI_LOG is the one variable read at load time: messages from the very first resolution steps
// (which may run before state_init) must already follow it. A bad value is only reported at the
// first CUDA call, so processes that never use CUDA stay silent.
static char bad_log_value[64];  // a copy: the program may change its environment meanwhile

__attribute__((constructor)) static void read_log_level(void)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    const char *v = getenv("CCI_LOG");
    if (!v || !*v)
        return;
    for (int i = 0; i < 4; i++) {
        if (strcmp(v, names[i]) == 0) {
            cci_log_set_level((cci_log_level)i);
            return;
        }
    }
    snprintf(bad_log_value, sizeof bad_log_value, "%s", v);
}

static void config_notice(const char *line, void *ud)
{
    cci_log(CCI_LOG_WARNING, "%s", line);
}

int cci_state_disabled_by_env(void)
{
    const char *off = getenv("CCI_DISABLE");
    return off && *off && strcmp(off, "0") != 0;
}

const char *cci_state_conf_env(const char **var)
{
    static const char *const names[] = {"CCI_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v) {
            *var = names[i];
            return v;
        }
    }
    *var = names[0];
    return NULL;
}

static int decide_mode(void)
{
    if (cci_state_disabled_by_env())
        return CCI_MODE_PASSTHROUGH;

    cci_config_default(&cci__cfg);
    const char *var;
    const char *conf = cci_state_conf_env(&var);
    char err[512];
    if (conf && cci_config_parse(&cci__cfg, conf, var, err, sizeof err, config_notice, NULL) != 0) {
        cci_log(CCI_LOG_ERROR, "%s; libccinterpose disabled (pass-through)", err);
        return CCI_MODE_PASSTHROUGH;
    }
    if (cci__cfg.backend_async) {
        cci_log(CCI_LOG_INFO, "%s selects backend:cudaMallocAsync: CUDA's own pool serves "
                "allocations, libccinterpose passes through", var);
        return CCI_MODE_PASSTHROUGH;
    }
    if (cci_real_drv_load() != 0 || cci_cuda_backend_init() != 0)
        return CCI_MODE_PASSTHROUGH;
    cci_config_format(&cci__cfg, config_string, sizeof config_string);
    cci_log(CCI_LOG_INFO, "active: %s", config_string);
    return CCI_MODE_ACTIVE;
}

// A fork child inherits the parent's allocators, whose segments belong to the parent's CUDA
// context: forget them without any CUDA call (the memory is not the child's to free) and start
// over with empty pools and statistics. The create lock may have been held by a parent thread
// that does not exist here.
static void atfork_prepare(void)
{
    pthread_mutex_lock(&create_lock);
    for (int d = 0; d < CCI_PL_MAX_DEVICES; d++) {
        cci_allocator *a = atomic_load(&cci__alloc[d]);
        if (a)
            cci_allocator_fork_prepare(a);
    }
}

static void atfork_parent(void)
{
    for (int d = 0; d < CCI_PL_MAX_DEVICES; d++) {
        cci_allocator *a = atomic_load(&cci__alloc[d]);
        if (a)
            cci_allocator_fork_parent(a);
    }
    pthread_mutex_unlock(&create_lock);
}

static void atfork_child(void)
{
    pthread_mutex_init(&create_lock, NULL);
    for (int d = 0; d < CCI_PL_MAX_DEVICES; d++) {
        cci_allocator *a = atomic_exchange(&cci__alloc[d], NULL);
        if (a)
            cci_allocator_fork_child(a);
    }
    atomic_store(&device_bound, 0);
    atomic_store(&used, 0);
    cci_cuda_backend_atfork_child();
    cci_streams_atfork_child();
    cci_pl_report_atfork_child();
    cci_trace_fork_child();
}

static void state_init(void)
{
    if (bad_log_value[0])
        cci_log(CCI_LOG_WARNING, "CCI_LOG=%s is not one of error, warning, info, debug; ignored",
                bad_log_value);
    (void)cci_real_rt();
    int mode = decide_mode();
    if (mode == CCI_MODE_ACTIVE) {
        pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
        cci_pl_report_start();
        const char *trace = getenv("CCI_TRACE");
        if (trace && *trace)
            cci_trace_start(trace, config_string);  // a bad path is logged; the program goes on
    }
    atomic_store_explicit(&cci__mode, mode, memory_order_release);
}

void cci__state_init(void)
{
    pthread_once(&init_once, state_init);
}

// Records this allocator's events when CCI_TRACE asked for it (a no-op otherwise).
static void attach_trace(cci_allocator *a)
{
    if (!cci_trace_active())
        return;
    cci_stats st = {.size = sizeof st};
    cci_alloc_stats(a, &st);
    cci_trace_attach(a, (size_t)st.device_capacity);
}

cci_allocator *cci__state_allocator_create(int device)
{
    pthread_mutex_lock(&create_lock);
    cci_allocator *a = atomic_load_explicit(&cci__alloc[device], memory_order_relaxed);
    if (!a) {
        a = cci_allocator_create(device, &cci__cfg, cci_cuda_backend());
        if (a) {
            cci_pl_report_attach(device, a);
            attach_trace(a);
            // The bound first: a free that can see this allocator must also search it.
            if (device >= atomic_load(&device_bound))
                atomic_store(&device_bound, device + 1);
            atomic_store(&used, 1);
            atomic_store_explicit(&cci__alloc[device], a, memory_order_release);
        } else {
            cci_log(CCI_LOG_WARNING, "device %d: no host memory for an allocator; passing through",
                    device);
        }
    }
    pthread_mutex_unlock(&create_lock);
    return a;
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
    pthread_mutex_lock(&create_lock);
    cci_allocator *a = atomic_exchange(&cci__alloc[device], NULL);
    pthread_mutex_unlock(&create_lock);
    if (a)
        cci_allocator_destroy(a, 1);
    cci_cuda_backend_drop_device(device);
}

const char *cci_state_config_string(void)
{
    return cci_state_active() ? config_string : "";
}
