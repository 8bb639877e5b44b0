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

/* 2: num_fence_records and num_fence_waits appended. 3: num_fence_catch_ups appended.
   4: the driver calls' costs appended (fence_* and vmm_*). 5: the fence budget's growths,
   managed memory, the allocations from other memory pools and the pinned host cache appended.
   6: the allocator lock's share of allocations and frees, and why the thread caches declined.
   7: the program's own virtual-memory allocations. 8: orders at reuse. */
#define CCI_STATS_VERSION 8

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
    /* Version 4: what the device's calls cost the host, as the device backend counts them (ours
       alone; PyTorch has no such keys). `_ns` fields are host nanoseconds. Under the preload the
       fence_* figures are counted for the whole PROCESS (a fence covers every device's streams):
       every device reports the same. The vmm_* figures are the device's own. A simulated device
       reports the calls it counts and no time. */
    uint64_t fence_record_calls;   /**< fence records asked of the backend (failed ones too) */
    uint64_t fence_record_events;  /**< events they recorded (one per device, or a context event each) */
    uint64_t fence_record_ns;
    uint64_t fence_query_calls;    /**< fence queries and polls that asked the device (not those
                                        answered from, or left to, the fence watcher's looks) */
    uint64_t fence_query_events;   /**< events those asked the driver about */
    uint64_t fence_query_ns;       /**< time in them, the looks at non-blocking streams included */
    uint64_t fence_wait_calls;     /**< fence waits (not answered from the watcher's looks) */
    uint64_t fence_wait_events;    /**< events the host blocked on in them */
    uint64_t fence_wait_ns;        /**< time the host was blocked in them */
    uint64_t fence_order_calls;    /**< fence orders decided (made, refused or behind; not covered) */
    uint64_t fence_order_ns;       /**< time in them */
    uint64_t fence_catch_up_calls; /**< catch-ups: waits for the GPU to reach the last order */
    uint64_t fence_catch_up_events; /**< of those, the ones that had an order's event to wait for */
    uint64_t fence_catch_up_ns;    /**< time the host was blocked in them */
    uint64_t fence_barrier_records; /**< records whose event orders all later work (a barrier) */
    uint64_t fence_context_records; /**< records made of context events (every stream at once) */
    uint64_t fence_stream_queries; /**< questions to non-blocking streams (looks, orders, census) */
    uint64_t fence_stream_idle_answers; /**< of those, streams found idle */
    uint64_t fence_sweeps;         /**< sweep events recorded on busy non-blocking streams */
    uint64_t fence_shared_event_queries; /**< sweep and destroyed-stream events asked */
    uint64_t fence_looks_put_off;  /**< looks at the streams asked in passing and put off */
    uint64_t fence_orders_made;    /**< orders given on the GPU instead of a host wait */
    uint64_t fence_orders_covered; /**< orders answered by an earlier one (no driver call) */
    uint64_t fence_orders_refused; /**< orders refused (the host waited) */
    uint64_t fence_orders_behind;  /**< orders answered behind the last one (a catch-up first) */
    uint64_t fence_order_stream_waits; /**< stream waits the orders queued */
    uint64_t fence_order_skips;    /**< streams an order did not ask (found idle since) */
    uint64_t fence_context_orders; /**< orders made of a context event and a context wait */
    uint64_t fence_watcher_rounds; /**< the fence watcher's looks that found every fence up to theirs passed */
    uint64_t fence_watcher_stream_queries; /**< of fence_stream_queries, the watcher's */
    uint64_t fence_watcher_looks_ahead; /**< the watcher's looks ahead (idle streams covered early) */
    uint64_t fence_watched_answers; /**< fence queries and waits answered from the watcher's looks */
    uint64_t vmm_create_calls;     /**< cuMemCreate */
    uint64_t vmm_create_ns;
    uint64_t vmm_map_calls;        /**< cuMemMap */
    uint64_t vmm_map_ns;
    uint64_t vmm_set_access_calls; /**< cuMemSetAccess */
    uint64_t vmm_set_access_ns;
    uint64_t vmm_unmap_calls;      /**< cuMemUnmap */
    uint64_t vmm_unmap_ns;
    uint64_t vmm_release_calls;    /**< cuMemRelease */
    uint64_t vmm_release_ns;
    /* Version 5: the fence budget's growths, */
    uint64_t num_fence_slack_grows; /**< times the pool grew on the fence budget (fence_slack_mb)
                                         instead of the host waiting for, or ordering, a fence */
    uint64_t fence_slack_bytes;    /**< bytes those growths reserved */
    /* managed memory (cudaMallocManaged, cuMemAllocManaged), which is never cached:
       passed to CUDA and counted here (ours alone; PyTorch has no such keys). Counted by the
       device backend, so reset_peak_stats does not touch these peaks. */
    cci_stat managed_allocations;  /**< live managed allocations */
    cci_stat managed_bytes;        /**< their bytes, as requested */
    /* and allocations from memory pools other than the device's default pool
       (cudaMallocFromPoolAsync, cuMemAllocFromPoolAsync), passed to CUDA and counted like managed
       memory, and those pools' own figures (cudaMemPoolGetAttribute), summed over the pools the
       program allocated from on this device, as last read (after each such allocation or free). */
    cci_stat pool_allocations;     /**< live allocations from other pools */
    cci_stat pool_bytes;           /**< their bytes, as requested */
    uint64_t pool_reserved_bytes;  /**< the pools' ReservedMemCurrent */
    uint64_t pool_reserved_high;   /**< the pools' ReservedMemHigh */
    uint64_t pool_used_bytes;      /**< the pools' UsedMemCurrent */
    uint64_t pool_used_high;       /**< the pools' UsedMemHigh */
    /* and the pinned host cache (cudaHostAlloc & co.), counted for the whole PROCESS
       (pinned memory belongs to no device): every device reports the same. */
    cci_stat pinned_buffers;        /**< pinned buffers handed out to the program */
    cci_stat pinned_in_use_bytes;   /**< their bytes (size classes: powers of two) */
    cci_stat pinned_cached_bytes;   /**< freed buffers kept for reuse (their fences pending or passed) */
    cci_stat pinned_reserved_bytes; /**< pinned bytes held from CUDA (the reserve segment whole) */
    uint64_t pinned_hits;           /**< allocations served from a freed buffer */
    uint64_t pinned_misses;         /**< allocations that pinned new memory (or carved the segment) */
    uint64_t pinned_host_allocs;    /**< pinnings asked of CUDA (cudaHostAlloc or malloc + register) */
    uint64_t pinned_host_frees;     /**< pinned buffers given back to CUDA */
    uint64_t pinned_register_ns;    /**< host time spent pinning (allocating or registering), ns */
    uint64_t pinned_fence_records;  /**< fences recorded at frees */
    uint64_t pinned_unfenced_frees; /**< frees given straight back to CUDA: no fence could be recorded */
    uint64_t pinned_reserve_segment_bytes; /**< the reserve segment's size (0: none held) */
    uint64_t pinned_background_reclaims; /**< freed buffers the background thread found passed */
    /* Version 6: allocations and frees served under the allocator's lock (the rest were served by
       their thread's cache, without it), and why a thread's cache sent an operation there. */
    uint64_t num_locked_allocs;     /**< allocations served under the lock */
    uint64_t num_locked_frees;      /**< frees (of blocks of ours) made under the lock */
    uint64_t tc_declined_credit;    /**< operations whose change the thread's credit under a peak
                                         did not cover */
    uint64_t tc_declined_kept_wait; /**< allocations while the thread's kept fenced frees were all
                                         behind pending fences */
    uint64_t tc_declined_busy;      /**< operations that found the cache stopped by another
                                         thread's locked section longer than a short spin */
    uint64_t tc_declined_keep_full; /**< small fenced frees the thread could not keep (its batches
                                         at their bounds, or a fence record failed) */
    /* Version 7: the program's own virtual-memory allocations on the device (cuMemCreate +
       cuMemAddressReserve + cuMemMap, as XLA makes every buffer), kept whole for reuse when the
       program tears them down (CCI_KEEP_MAPPINGS; docs/interception-levels.md). */
    cci_stat program_vmm_held_bytes;   /**< bytes of the handles the program holds */
    cci_stat program_vmm_kept_bytes;   /**< torn-down buffers kept for reuse */
    uint64_t program_vmm_creates;      /**< cuMemCreate calls for device memory */
    uint64_t program_vmm_create_bytes; /**< their bytes */
    uint64_t program_vmm_reused;       /**< of them answered with a kept buffer */
    uint64_t program_vmm_reused_bytes; /**< their bytes */
    uint64_t program_vmm_given_back;   /**< kept buffers given back to CUDA (room for a new one,
                                            out of memory, cci_empty_cache, a device reset) */
    /* Version 8: orders at reuse (docs/reuse-modes.md, "Orders at reuse"), for the whole PROCESS
       like the other fence_* figures. */
    uint64_t fence_reuse_frees;    /**< frees that joined the pool at once, their fence skipped */
    uint64_t fence_reuse_orders;   /**< orders made before such a block went to a new owner */
    uint64_t fence_reuse_refused;  /**< orders refused there (the allocation waited for a fence) */
    uint64_t fence_reuse_order_ns; /**< host time in those orders */
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
