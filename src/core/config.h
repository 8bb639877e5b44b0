// SPDX-License-Identifier: MIT
// The allocator configuration: one struct, one parser for the PYTORCH_CUDA_ALLOC_CONF grammar.
#ifndef CCI_CONFIG_H
#define CCI_CONFIG_H

#include <stddef.h>
#include <stdint.h>

// PyTorch keeps one roundup_power2_divisions entry per power-of-two interval from 1 MiB up to
// 64 GiB (index = log2(size) - 20, clamped to [0, 15]); we keep the same table.
#define CCI_ROUNDUP_INTERVALS 16

/// The CUDA API levels the preload intercepts (intercept_level). The runtime level hooks
/// cudaMalloc & co. where the program binds them to a shared libcudart; the driver level wraps
/// cuMemAlloc_v2 & co. as every cudart copy (static ones included) finds them.
enum { CCI_LEVEL_RUNTIME = 1, CCI_LEVEL_DRIVER = 2, CCI_LEVEL_BOTH = 3 };

typedef struct cci_config {
    size_t max_split_size;           ///< bytes; SIZE_MAX = no limit (default)
    size_t max_non_split_rounding;   ///< bytes; default 20 MiB
    unsigned roundup_divisions[CCI_ROUNDUP_INTERVALS]; ///< 0 or 1 = plain 512-byte rounding
    double gc_threshold;             ///< garbage_collection_threshold in (0,1); 0 = off
    double memory_fraction;          ///< per_process_memory_fraction in (0,1]; 0 = no cap
    int backend_async;               ///< backend:cudaMallocAsync: we step aside (pass-through)
    int expandable_segments;         ///< PyTorch's expandable segments (needs the backend's VMM group)
    int compact_segments;            ///< our key: expandable segments that give free pages back;
                                     ///< -1 (default): unset, resolved per device (cci_config_resolve)
    int release_lock_on_cudamalloc;  ///< accepted; segments are still reserved under the allocator lock
    int immediate_reuse;             ///< our key: reuse a freed block at once (single-stream programs)
    int memgetinfo_cached_as_free;   ///< our key: cudaMemGetInfo counts our cached-free bytes as free; default 1
    int intercept_level;             ///< our key: CCI_LEVEL_* bits, never 0; default CCI_LEVEL_BOTH
    long long fence_slack_mb;        ///< our key: MiB the pool may grow instead of waiting for or
                                     ///< ordering a fence; 0 (default): none (docs/reuse-modes.md)
    size_t large_segment_size;       ///< segment for 1-10 MiB requests; default 20 MiB (PyTorch's kLargeBuffer)
    int throw_on_cudamalloc_oom;     ///< refuse a new segment the device is predicted to lack, without asking it
    // The pinned host cache's keys (PyTorch's names; the preload's host_cache.c honours them).
    int pinned_use_cuda_host_register;    ///< pin with malloc + cudaHostRegister
    unsigned pinned_num_register_threads; ///< threads that fault in a large buffer's pages; default 1
    int pinned_use_background_threads;    ///< a thread of ours finds freed buffers' fences passed
    size_t pinned_reserve_segment_size;   ///< bytes pinned up front for small requests; 0 = none
    int pinned_free_catch_all;            ///< accepted (our frees never throw)
} cci_config;

void cci_config_default(cci_config *c);

/// Settles an unset compact_segments (-1) for a device: compact segments (1) where it offers the
/// virtual-memory API (`vmm`) and expandable_segments:True was not asked for, ordinary ones (0)
/// otherwise. A given value is kept. Compact is the default because it reserved 1.007-1.03x of
/// what was allocated, 5-12 % under PyTorch's expandable segments (docs/reuse-modes.md).
void cci_config_resolve(cci_config *c, int vmm);

/// The intercept_level values by name, indexed by CCI_LEVEL_* (shared by parser and printer).
extern const char *const cci__level_names[4];

// Parses a `key:value,key:value` string over the defaults already in *c; on error *c is unchanged.
// Returns 0 when the whole string is valid. On the first error returns -1 and writes one line
// (no trailing newline) into err: the variable name, the key, the problem and the accepted form.
// Keys that are accepted but not honoured add a one-line notice through `warn` (may be NULL) and
// do not make the parse fail.
int cci_config_parse(cci_config *c, const char *str, const char *varname, char *err, size_t errlen,
                     void (*warn)(const char *line, void *ud), void *ud);

// Writes the effective configuration in the same grammar (canonical form, every key).
// Returns the length that the full string needs (like snprintf).
int cci_config_format(const cci_config *c, char *buf, size_t len);

#endif
