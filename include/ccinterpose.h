/* SPDX-License-Identifier: MIT */
/**
 * @file ccinterpose.h
 * Opt-in API of libccinterpose for programs that want to read the allocator's statistics,
 * empty its cache or print its report while running under `LD_PRELOAD=libccinterpose.so`
 * (or the `ccinterpose` launcher).
 *
 * Statistics carry the names and meanings of PyTorch's `torch.cuda.memory_stats()`.
 *
 * Programs do not link libccinterpose: compile with `pkg-config --cflags ccinterpose` and nothing
 * else. With GCC and Clang the five functions below are weak references, reached through
 * `static inline` wrappers of the same names: under the preload they call the library; without
 * it the program still loads and the API answers "not active" (0, -1 or ""). Taking a function's
 * address gives the wrapper, which is always callable.
 *
 * The preload answers only if the dynamic linker can bind the reference, which needs
 * position-independent code (the compilers' default on current distributions). An executable
 * built with `-fno-pic -no-pie` gets its weak references resolved to null at link time and sees
 * the API as "not active" even under the preload. Define `CCI_NO_WEAK` before including this
 * header to get plain declarations instead (the program must then run under the preload, or link
 * it, to load at all).
 */
#ifndef CCINTERPOSE_H
#define CCINTERPOSE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: num_fence_records and num_fence_waits appended. 3: num_fence_catch_ups appended. */
#define CCI_STATS_VERSION 3

/** One counter: current value, its peak, and running totals of increases and decreases. */
typedef struct cci_stat {
    int64_t current;   /**< value now */
    int64_t peak;      /**< highest value seen (since start or the last peak reset) */
    int64_t allocated; /**< sum of all increases */
    int64_t freed;     /**< sum of all decreases */
} cci_stat;

/** Index into the per-pool arrays, as PyTorch's `.all`, `.small_pool`, `.large_pool`. */
enum { CCI_POOL_ALL = 0, CCI_POOL_SMALL = 1, CCI_POOL_LARGE = 2, CCI_POOL_KINDS = 3 };

/** Statistics of one device. `size` and `version` let the struct grow without breaking callers. */
typedef struct cci_stats {
    uint32_t size;    /**< sizeof(cci_stats) as the library knows it */
    uint32_t version; /**< CCI_STATS_VERSION */
    cci_stat allocation[CCI_POOL_KINDS];           /**< live blocks handed out */
    cci_stat segment[CCI_POOL_KINDS];              /**< device allocations held */
    cci_stat active[CCI_POOL_KINDS];               /**< allocated blocks + freed blocks not yet reusable */
    cci_stat inactive_split[CCI_POOL_KINDS];       /**< free blocks that are part of a split segment */
    cci_stat allocated_bytes[CCI_POOL_KINDS];
    cci_stat reserved_bytes[CCI_POOL_KINDS];
    cci_stat active_bytes[CCI_POOL_KINDS];
    cci_stat inactive_split_bytes[CCI_POOL_KINDS];
    cci_stat requested_bytes[CCI_POOL_KINDS];      /**< bytes the program asked for, before rounding */
    cci_stat oversize_allocations;                 /**< blocks >= max_split_size handed out */
    cci_stat oversize_segments;                    /**< segments >= max_split_size held */
    uint64_t num_alloc_retries;    /**< allocations that succeeded only after freeing every cached segment */
    uint64_t num_ooms;             /**< allocations that finally failed */
    uint64_t num_sync_all_streams; /**< device synchronisations to make deferred frees reusable */
    uint64_t num_device_alloc;     /**< segment allocations asked of the device */
    uint64_t num_device_free;      /**< segments given back to the device */
    uint64_t max_split_size;       /**< configured limit in bytes; UINT64_MAX when unlimited */
    uint64_t largest_free_block;   /**< largest cached free block, bytes */
    uint64_t device_capacity;      /**< total device memory, bytes (0 when unknown) */
    /* Version 2. Fields are only ever appended, so older callers keep their layout. */
    uint64_t num_fence_records;    /**< fences recorded for batches of fenced frees */
    uint64_t num_fence_waits;      /**< times the host waited for a fence rather than grow the pool */
    /* Version 3. */
    uint64_t num_fence_catch_ups;  /**< times the host waited for the GPU to reach an earlier order
                                        before ordering a fence instead of waiting for it */
} cci_stats;

/* The library defines these itself (CCI_BUILDING_PRELOAD), so it gets plain declarations: a
   weak declaration in the defining file would make the exported definitions weak too, and the
   wrappers below would collide with the definitions' names. */
#if !defined(CCI_BUILDING_PRELOAD) && !defined(CCI_NO_WEAK) && (defined(__GNUC__) || defined(__clang__))
#define CCI_API_OPTIONAL 1
#define CCI_API_WEAK __attribute__((weak))
#else
#define CCI_API_OPTIONAL 0
#define CCI_API_WEAK
#endif

/** 1 when the preload is loaded and managing memory, 0 otherwise. */
CCI_API_WEAK int cci_is_active(void);
/** Fills *out for `device`. Returns 0, or -1 when inactive or the device is unknown. Set out->size first. */
CCI_API_WEAK int cci_get_stats(int device, cci_stats *out);
/** Gives every whole cached segment of `device` back to the driver. Returns 0 or -1. */
CCI_API_WEAK int cci_empty_cache(int device);
/** The effective configuration in CCI_ALLOC_CONF grammar; "" when inactive. */
CCI_API_WEAK const char *cci_config_string(void);
/** Writes the report (format from the extension: .txt, .json, .html) to `path`, NULL = stderr. 0 or -1. */
CCI_API_WEAK int cci_dump_report(const char *path);

#if CCI_API_OPTIONAL
/* Each wrapper calls the library when the dynamic linker bound the weak reference (the preload is
   loaded), and otherwise gives the "not active" answer documented above. They must come before
   the macros, so that their bodies name the library's functions, not themselves. */
static inline int cci_opt_is_active(void)
{
    return cci_is_active ? cci_is_active() : 0;
}
static inline int cci_opt_get_stats(int device, cci_stats *out)
{
    return cci_get_stats ? cci_get_stats(device, out) : -1;
}
static inline int cci_opt_empty_cache(int device)
{
    return cci_empty_cache ? cci_empty_cache(device) : -1;
}
static inline const char *cci_opt_config_string(void)
{
    return cci_config_string ? cci_config_string() : "";
}
static inline int cci_opt_dump_report(const char *path)
{
    return cci_dump_report ? cci_dump_report(path) : -1;
}
/* Object-like, so that a call, a function pointer and `&cci_get_stats` all reach the wrapper. */
#define cci_is_active cci_opt_is_active
#define cci_get_stats cci_opt_get_stats
#define cci_empty_cache cci_opt_empty_cache
#define cci_config_string cci_opt_config_string
#define cci_dump_report cci_opt_dump_report
#endif

#ifdef __cplusplus
}
#endif
#endif
