/* SPDX-License-Identifier: MIT */
/**
 * @file ccinterpose.h
 * Opt-in API of libccinterpose for programs that want to read the allocator's statistics,
 * empty its cache or print its report while running under `LD_PRELOAD=libccinterpose.so`.
 *
 * Statistics carry the names and meanings of PyTorch's `torch.cuda.memory_stats()`.
 */
#ifndef CCINTERPOSE_H
#define CCINTERPOSE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CCI_STATS_VERSION 1

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
} cci_stats;

/** 1 when the preload is loaded and managing memory, 0 otherwise. */
int cci_is_active(void);
/** Fills *out for `device`. Returns 0, or -1 when inactive or the device is unknown. Set out->size first. */
int cci_get_stats(int device, cci_stats *out);
/** Gives every whole cached segment of `device` back to the driver. Returns 0 or -1. */
int cci_empty_cache(int device);
/** The effective configuration in CCI_ALLOC_CONF grammar; "" when inactive. */
const char *cci_config_string(void);
/** Writes the report (format from the extension: .txt, .json, .html) to `path`, NULL = stderr. 0 or -1. */
int cci_dump_report(const char *path);

#ifdef __cplusplus
}
#endif
#endif
