// SPDX-License-Identifier: MIT
// The life of the layer in one place: what happens at load, at the first CUDA call, around
// fork() and at exit, and in which order. The other files provide the steps; only this file
// decides when they run.
//
// Nothing but applying CCI_LOG happens at load time: the preload is inherited by every child
// process (shells, compilers, nvidia-smi), and a library constructor that touched CUDA or printed
// a configuration error would do so in all of them. The first CUDA call through us starts the
// layer once (settings.h says when the rest of the environment is read).
#include <pthread.h>
#include <stdatomic.h>

#include "backend_cuda.h"
#include "callsites.h"
#include "captures.h"
#include "context_fences.h"
#include "fence.h"
#include "fence_watcher.h"
#include "host_cache.h"
#include "ipc.h"
#include "program_vmm.h"
#include "intercept_runtime.h"
#include "levels.h"
#include "log.h"
#include "observers.h"
#include "real.h"
#include "reporting.h"
#include "settings.h"
#include "start.h"
#include "state.h"
#include "stream_registry.h"
#include "stream_rule.h"
#include "streams.h"
#include "trace_record.h"

// ---- load ---------------------------------------------------------------------------------

// Messages of the very first resolution steps (which may run before start-up) already follow
// CCI_LOG. A bad value is only reported at start-up, so processes that never use CUDA stay silent.
__attribute__((constructor)) static void at_load(void)
{
    cci_settings_read_log_level();
}

// ---- fork ---------------------------------------------------------------------------------
//
// Registered once, at start-up, only when the layer is active (a pass-through layer holds
// nothing a child could inherit half-changed).
//
// prepare: take the create lock and every allocator lock, so that no thread is half-way through
//   a change when the address space is copied.
// parent:  release them, in the opposite order.
// child:   the forking thread is the only thread; locks held by parent threads that do not exist
//   here are re-initialised, not released. Order:
//   1. state:    forget the inherited allocators (their segments belong to the parent's context;
//                no CUDA call) and start with empty pools;
//   2. levels:   the per-level counts start over with those pools, and the runtime level asks
//                for the current device again (CUDA may not work in the child);
//   3. backend:  forget the parent's primary contexts;
//   4. streams:  forget the parent's stream table;
//   5. report:   free the inherited timelines (they observed the allocators dropped in 1, which is
//                why 1 comes first) and close the dump pipe (the dumper thread did not survive);
//   5b. call sites: forget the parent's live blocks (CCI_STACKS);
//   6. trace:    stop recording without writing (the file and buffers are the parent's).
//   7. CUDA IPC: forget the parent's exports and imports, close the child's copies of their
//                connections (they would keep the parent's imports open in the exporters' eyes).
//   Last because nothing before it records events: dropping allocators emits none.

static void fork_prepare(void)
{
    cci__state_atfork_prepare();
}

static void fork_parent(void)
{
    cci__state_atfork_parent();
}

static void fork_child(void)
{
    cci__state_atfork_child();
    cci_pl_levels_atfork_child();
    cci_pl_runtime_atfork_child();
    cci_cuda_backend_atfork_child();
    cci_streams_atfork_child();
    cci_stream_registry_atfork_child();
    cci_rule_atfork_child();
    cci_cuda_fence_atfork_child();
    cci_fence_watcher_atfork_child();
    cci_pl_report_atfork_child();
    cci_callsites_atfork_child();
    cci_trace_fork_child();
    cci_pvmm_atfork_child();
    cci_serve_ipc_atfork_child();
}

// ---- start-up (first CUDA call) ------------------------------------------------------------
//
// 1. report a bad CCI_LOG (read at load, reported only now);
// 2. resolve the real runtime (later steps log through it and the decision may need it);
// 3. decide the mode from the settings (logs a refused configuration once);
// 4. when active: register the fork handlers, start reporting (dump signal, rank), start the
//    trace; in this order so that a fork during 4 already finds consistent handlers, and the
//    trace header records the configuration decided in 3;
// 5. publish the mode last: a thread that sees ACTIVE finds everything above done.

static pthread_once_t start_once = PTHREAD_ONCE_INIT;

static void start(void)
{
    const cci_settings *s = cci_settings_get();
    if (s->bad_log[0])
        cci_log(CCI_LOG_WARNING, "CCI_LOG=%s is not one of error, warning, info, debug; ignored", s->bad_log);
    if (s->bad_thread_cache[0])
        cci_log(CCI_LOG_WARNING, "CCI_THREAD_CACHE=%s is not 0 or 1; the per-thread caches stay on",
                s->bad_thread_cache);
    if (s->bad_fence_watcher[0])
        cci_log(CCI_LOG_WARNING, "CCI_FENCE_WATCHER=%s is not 0 or 1; the fence watcher stays on",
                s->bad_fence_watcher);
    if (s->bad_context_fences[0])
        cci_log(CCI_LOG_WARNING, "CCI_CONTEXT_FENCES=%s is not 0 or 1; context fences stay on",
                s->bad_context_fences);
    if (s->bad_reuse_orders[0])
        cci_log(CCI_LOG_WARNING, "CCI_REUSE_ORDERS=%s is not 0 or 1; orders at reuse stay on",
                s->bad_reuse_orders);
    if (s->bad_keep_mappings[0])
        cci_log(CCI_LOG_WARNING, "CCI_KEEP_MAPPINGS=%s is not 0 or 1; the program's own mappings stay "
                "kept for reuse", s->bad_keep_mappings);
    if (s->bad_debug_unsafe[0])
        cci_log(CCI_LOG_WARNING, "CCI_DEBUG_UNSAFE=%s is not a comma-separated list of no-fences, "
                "no-stream-rule; ignored", s->bad_debug_unsafe);
    else if (s->debug_unsafe)
        cci_log(CCI_LOG_WARNING, "CCI_DEBUG_UNSAFE is set: test-only, freed blocks may be reused "
                "while queued work still uses them");
    (void)cci_real_rt();
    int mode = cci__state_decide_mode(s);
    if (mode == CCI_MODE_ACTIVE) {
        cci_capture_note_driver();
        cci_context_fences_start(s->context_fences);
        cci_host_cache_start(s);
        cci_pvmm_start(s);
        pthread_atfork(fork_prepare, fork_parent, fork_child);
        cci_callsites_start(s);   // before any allocator exists: report_attach adds its observer
        cci_pl_report_start(s);
        // Observers attach before the mode is published, so every allocator has them from its
        // first allocation: the timeline and call sites first, then the trace (serve/state.c adds the
        // address map last).
        cci_serve_observe_allocators(cci_pl_report_attach);
        cci_serve_observe_allocators(cci_pl_trace_attach);
        cci_serve_observe_oom(cci_pl_report_oom);
        if (cci__stacks_depth)
            cci_serve_observe_allocations(cci__callsites_record);
        cci_trace_set_rank(s->rank);
        if (s->trace_too_long)
            cci_log(CCI_LOG_ERROR, "CCI_TRACE is longer than %zu bytes; not recording", sizeof s->trace_pattern - 1);
        else if (s->trace_pattern[0])
            cci_trace_start(s->trace_pattern, cci_state_config_string_raw());  // a bad path is logged; the program goes on
    }
    cci__state_publish_mode(mode);
}

void cci_preload_start(void)
{
    pthread_once(&start_once, start);
}

// ---- exit ---------------------------------------------------------------------------------
//
// One destructor, run by exit() after the program's atexit handlers (so a late cudaFree of the
// program's is still served and counted). CUDA is already torn down here: every step reads
// host-side data only and frees no per-device state (state.h: other threads may still run).
// Once per process: a fork child runs its own. Order:
//   1. stop the trace: joins the writer thread and closes the file, so the trace is complete
//      whatever a later step does (the steps below record no events);
//   2. the exit report (CCI_REPORT, stderr by default);
//   3. the per-level line (CCI_LOG=info), then
//   4. one summary line per device (CCI_LOG=info);
//   5. the stream rule the run ended under, fences and host waits, then what the fences and the
//      VMM calls cost the host, from the statistics (CCI_LOG=info).
//   2-4 keep the order these lines have always had on stderr.

__attribute__((destructor)) static void at_exit(void)
{
    static _Atomic int done;
    if (atomic_exchange(&done, 1))
        return;
    cci_trace_stop();
    if (atomic_load(&cci__mode) != CCI_MODE_ACTIVE || (!cci_state_used() && !cci_host_cache_used() && !cci_pvmm_used()))
        return;
    cci_pl_report_exit();
    cci_pl_levels_summary();
    cci_pl_exit_summary();
    cci_rule_log_exit();
    cci_fence_watcher_stop();  // normally stopped before CUDA was torn down (its atexit handler)
    cci_pl_exit_costs();
}
