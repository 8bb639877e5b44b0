// SPDX-License-Identifier: MIT
// The one reader of the environment. Every CCI_* and PYTORCH_* variable the layer honours (and the
// RANK / LOCAL_RANK of a torchrun job) is read here, once, into one cci_settings that the rest of
// the preload receives; no other file of src/ or preload/ reads the environment.
//
// When: CCI_LOG at load time (the first resolution steps already log); everything else on the
// first need, which is the first CUDA call through us or the first lookup the dlsym hook or the
// resolver answers, whichever comes first. A program that sets PYTORCH_CUDA_ALLOC_CONF before
// its first CUDA call is honoured as PyTorch would honour it; later changes are not seen.
//
// Reading prints nothing and starts no CUDA (the lookups that trigger it run inside cudart's
// initialisation or a library constructor). What was wrong with a value is kept in the struct;
// the module that uses the value reports it once, at initialisation.
#ifndef CCI_PRELOAD_SETTINGS_H
#define CCI_PRELOAD_SETTINGS_H

#include "config.h"
#include "log.h"

enum { CCI_SETTINGS_MAX_NOTICES = 8, CCI_SETTINGS_MAX_STACKS = 64 };

typedef struct cci_settings {
    // CCI_LOG=error|warning|info|debug
    int log_level;                  ///< a cci_log_level, or -1 when unset or bad
    char bad_log[64];               ///< the refused value, "" when none

    int disabled;                   ///< CCI_DISABLE set and not "0": pure pass-through

    // CCI_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF: parsed once.
    const char *conf_var;           ///< the variable it came from (CCI_ALLOC_CONF when none)
    int conf_set;                   ///< one of them was set
    char conf_text[256];            ///< its value as written (reports name the setting so)
    cci_config config;              ///< defaults plus the string; valid when config_ok
    int config_ok;
    char config_error[512];         ///< why it did not parse
    int nnotices;                   ///< warnings the parse gave (deprecated keys...), in order
    char notices[CCI_SETTINGS_MAX_NOTICES][256];

    // CCI_REPORT=PATH|-|off, CCI_REPORT_FORMAT=text|json|html
    char report_pattern[1024];      ///< "" = stderr
    int report_off;
    int report_too_long;            ///< CCI_REPORT did not fit: reporting to stderr
    char report_format[16];         ///< "" = by the file name
    char bad_report_format[64];

    // CCI_DUMP_SIGNAL=USR1|USR2|RTMIN[+n]|RTMAX[-n]|a number of those|none
    int dump_signal;                ///< 0 = no live dump
    char bad_dump_signal[64];       ///< a refused value: live dumps are then off

    char trace_pattern[4096];       ///< CCI_TRACE; "" = no recording
    int trace_too_long;             ///< CCI_TRACE did not fit: no recording

    // CCI_STACKS=N: record N frames of each allocation's call site (0 or unset: off)
    int stacks;                     ///< 0..CCI_SETTINGS_MAX_STACKS
    char bad_stacks[64];            ///< a refused value: call sites stay off

    int rank;                       ///< RANK, else LOCAL_RANK (plain decimal); -1 when neither

    // The exit-time what-ifs (history.h). CCI_HISTORY_MAX=N events kept per device (0 = no
    // history, no what-ifs); CCI_WHATIF_SECONDS=S wall-clock bound of the replay (0 = none run).
    uint64_t history_max;           ///< default CCI_HISTORY_DEFAULT_MAX (history.h)
    double whatif_seconds;          ///< default 2
    char bad_whatif[64];            ///< a refused value of either, "" when none (defaults kept)
    // CCI_DEBUG_UNSAFE=no-fences|no-stream-rule (comma-separated): a TEST-ONLY knob that makes the
    // layer UNSAFE on purpose, so that the hazard tests can prove they detect early reuse without
    // the fence (fenced frees and freed pinned host buffers become reusable at once) or without
    // the stream rule (the process never leaves the ordered rule and never synchronises at the
    // switch). Never set it otherwise.
    // CCI_THREAD_CACHE=0 turns the per-thread caches off (src/core/tcache.h); 1 or unset: on.
    int thread_cache;
    char bad_thread_cache[64];      ///< a refused value ("" when none): the caches stay on
    // CCI_FENCE_WATCHER=0 keeps the fences' looks on the program's threads (fence_watcher.c);
    // 1 or unset: a thread of ours makes them where they are dear.
    int fence_watcher;
    char bad_fence_watcher[64];     ///< a refused value ("" when none): the watcher stays on
    // CCI_CONTEXT_FENCES=0 keeps fences on each stream (context_fences.h); 1 or unset: one event
    // for every stream of a device where the driver has it.
    int context_fences;
    char bad_context_fences[64];    ///< a refused value ("" when none): they stay on
    // CCI_REUSE_ORDERS=0 fences every batch of frees as before (fence_order.c, "order at reuse");
    // 1 or unset: where no side stream is busy, a free joins the pool at once and the next
    // allocation orders the device's later work after its earlier work.
    int reuse_orders;
    char bad_reuse_orders[64];      ///< a refused value ("" when none): they stay on
    unsigned debug_unsafe;          ///< CCI_DEBUG_UNSAFE_* bits
    char bad_debug_unsafe[64];      ///< a refused value ("" when none): the knob is then off
    // CCI_PINNED_CACHE=0 passes pinned host memory calls through (serve/host_cache.c); 1 or
    // unset: the pinned host cache serves them.
    int pinned_cache;
    char bad_pinned_cache[64];      ///< a refused value ("" when none): the cache stays on
    // CCI_KEEP_MAPPINGS=0 passes the program's own virtual-memory allocations straight through
    // (serve/program_vmm.h); 1 or unset: torn-down ones are kept for reuse.
    int keep_mappings;
    char bad_keep_mappings[64];     ///< a refused value ("" when none): they stay kept
} cci_settings;

enum {
    CCI_DEBUG_UNSAFE_NO_FENCES = 1u << 0,
    CCI_DEBUG_UNSAFE_NO_STREAM_RULE = 1u << 1,
};

/// The settings of this process, read on the first call (thread-safe, lock-free afterwards).
const cci_settings *cci_settings_get(void);

/// Applies CCI_LOG at load time: the one part read before the first need.
void cci_settings_read_log_level(void);

/// Fills `s` from `lookup` (the process environment in the library; a table in the tests). No
/// message, no CUDA.
void cci_settings_read(cci_settings *s, const char *(*lookup)(const char *name));

/// CCI_DUMP_SIGNAL's grammar: the signal, 0 for none/off/0, or -1 when refused. Only signals no
/// program relies on are accepted: SIGUSR1, SIGUSR2 and the real-time range SIGRTMIN..SIGRTMAX,
/// by name (with or without SIG, any case, RTMIN+n / RTMAX-n) or by number. Unset or empty:
/// SIGUSR1.
int cci_settings_parse_dump_signal(const char *value);

#endif
