# SPDX-License-Identifier: MIT
"""The opt-in C API of include/ccinterpose.h, looked up in THIS process with ctypes.

Nothing here loads libccinterpose: a library loaded late (dlopen) could not catch the allocations
the program made before, so only a preloaded copy counts. dlopen(NULL) searches the process's
global scope, where LD_PRELOAD puts the library; without it every lookup fails and the API is
"not active".
"""
import ctypes
import functools

# Must match CCI_STATS_VERSION and the field order of `cci_stats` in include/ccinterpose.h (the
# 'python' test suite compares them). The library copies min(our size, its size) bytes, so an
# older or newer library still fills what both know.
STATS_VERSION = 8
POOLS = ('all', 'small_pool', 'large_pool')
POOLED_STATS = ('allocation', 'segment', 'active', 'inactive_split', 'allocated_bytes',
                'reserved_bytes', 'active_bytes', 'inactive_split_bytes', 'requested_bytes')
SINGLE_STATS = ('oversize_allocations', 'oversize_segments')
COUNTERS = (
    'num_alloc_retries', 'num_ooms', 'num_sync_all_streams', 'num_device_alloc', 'num_device_free',
    'max_split_size', 'largest_free_block', 'device_capacity',
    # version 2, 3
    'num_fence_records', 'num_fence_waits', 'num_fence_catch_ups',
    # version 4: what the device's calls cost (ours alone)
    'fence_record_calls', 'fence_record_events', 'fence_record_ns',
    'fence_query_calls', 'fence_query_events', 'fence_query_ns',
    'fence_wait_calls', 'fence_wait_events', 'fence_wait_ns',
    'fence_order_calls', 'fence_order_ns',
    'fence_catch_up_calls', 'fence_catch_up_events', 'fence_catch_up_ns',
    'fence_barrier_records', 'fence_context_records', 'fence_stream_queries',
    'fence_stream_idle_answers', 'fence_sweeps', 'fence_shared_event_queries',
    'fence_looks_put_off', 'fence_orders_made', 'fence_orders_covered', 'fence_orders_refused',
    'fence_orders_behind', 'fence_order_stream_waits', 'fence_order_skips',
    'fence_context_orders', 'fence_watcher_rounds', 'fence_watcher_stream_queries',
    'fence_watcher_looks_ahead', 'fence_watched_answers',
    'vmm_create_calls', 'vmm_create_ns', 'vmm_map_calls', 'vmm_map_ns',
    'vmm_set_access_calls', 'vmm_set_access_ns', 'vmm_unmap_calls', 'vmm_unmap_ns',
    'vmm_release_calls', 'vmm_release_ns',
    # version 5: the fence budget (fence_slack_mb), then LATER below
    'num_fence_slack_grows', 'fence_slack_bytes',
)
# Appended after COUNTERS, in the struct's order: (name, 'stat' for a cci_stat, 'u64').
LATER = (
    # version 5: managed memory and other memory pools, passed to CUDA and counted
    ('managed_allocations', 'stat'), ('managed_bytes', 'stat'),
    ('pool_allocations', 'stat'), ('pool_bytes', 'stat'),
    ('pool_reserved_bytes', 'u64'), ('pool_reserved_high', 'u64'),
    ('pool_used_bytes', 'u64'), ('pool_used_high', 'u64'),
    # version 5: the pinned host cache, the whole process's
    ('pinned_buffers', 'stat'), ('pinned_in_use_bytes', 'stat'), ('pinned_cached_bytes', 'stat'),
    ('pinned_reserved_bytes', 'stat'), ('pinned_hits', 'u64'), ('pinned_misses', 'u64'),
    ('pinned_host_allocs', 'u64'), ('pinned_host_frees', 'u64'), ('pinned_register_ns', 'u64'),
    ('pinned_fence_records', 'u64'), ('pinned_unfenced_frees', 'u64'),
    ('pinned_reserve_segment_bytes', 'u64'), ('pinned_background_reclaims', 'u64'),
    # version 6: the allocator lock's share, and why the thread caches declined
    ('num_locked_allocs', 'u64'), ('num_locked_frees', 'u64'), ('tc_declined_credit', 'u64'),
    ('tc_declined_kept_wait', 'u64'), ('tc_declined_busy', 'u64'), ('tc_declined_keep_full', 'u64'),
    # version 7: the program's own virtual-memory allocations, kept for reuse
    ('program_vmm_held_bytes', 'stat'), ('program_vmm_kept_bytes', 'stat'),
    ('program_vmm_creates', 'u64'), ('program_vmm_create_bytes', 'u64'), ('program_vmm_reused', 'u64'),
    ('program_vmm_reused_bytes', 'u64'), ('program_vmm_given_back', 'u64'),
    # version 8: orders at reuse, the whole process's
    ('fence_reuse_frees', 'u64'), ('fence_reuse_orders', 'u64'), ('fence_reuse_refused', 'u64'),
    ('fence_reuse_order_ns', 'u64'),
)
STAT_PARTS = ('current', 'peak', 'allocated', 'freed')


class Stat(ctypes.Structure):
    _fields_ = [(part, ctypes.c_int64) for part in STAT_PARTS]


class Stats(ctypes.Structure):
    _fields_ = ([('size', ctypes.c_uint32), ('version', ctypes.c_uint32)]
                + [(name, Stat * len(POOLS)) for name in POOLED_STATS]
                + [(name, Stat) for name in SINGLE_STATS]
                + [(name, ctypes.c_uint64) for name in COUNTERS]
                + [(name, Stat if kind == 'stat' else ctypes.c_uint64) for name, kind in LATER])


_FUNCTIONS = {
    'cci_is_active': (ctypes.c_int, []),
    'cci_get_stats': (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(Stats)]),
    'cci_empty_cache': (ctypes.c_int, [ctypes.c_int]),
    'cci_config_string': (ctypes.c_char_p, []),
    'cci_dump_report': (ctypes.c_int, [ctypes.c_char_p]),
}


@functools.lru_cache(maxsize=None)
def lookup():
    """The API's functions by name when the preload is in this process, else None.

    Cached: what a process preloaded is fixed once it runs (exec starts a new interpreter).
    """
    try:
        process = ctypes.CDLL(None)
    except OSError:
        return None
    found = {}
    for name, (restype, argtypes) in _FUNCTIONS.items():
        try:
            fn = getattr(process, name)
        except AttributeError:
            return None  # all five or none: a partial set is not our library
        fn.restype, fn.argtypes = restype, argtypes
        found[name] = fn
    return found
