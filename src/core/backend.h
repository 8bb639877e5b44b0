// SPDX-License-Identifier: MIT
// The device contract: everything the allocator core knows about memory.
//
// The core never includes a CUDA header. It reaches device memory only through these primitives,
// so the same policy code runs on a GPU (preload/), on the simulated device (tests, benchmarks,
// replay) and on anything else that can hand out address ranges.
#ifndef CCI_BACKEND_H
#define CCI_BACKEND_H

#include <stddef.h>
#include <stdint.h>

enum {
    CCI_OK = 0,
    CCI_EOOM = -1,      ///< the device has no room for this segment (or a cap says no)
    CCI_EBACKEND = -2,  ///< any other device failure; the backend keeps its own error code
    CCI_EINVAL = -3,    ///< a pointer that is not the start of a live block of ours
    CCI_ENOTOURS = -4,  ///< a pointer outside every segment of this allocator
};

/// What a backend can do beyond whole segments. The core asks before it uses a group: a backend
/// that leaves a group out (NULL pointer, flag clear) still runs every mode that does not need it.
enum cci_backend_caps {
    CCI_CAP_VMM = 1u << 0,     ///< `vmm` is set: address ranges and physical pages mapped into them
    CCI_CAP_FENCES = 1u << 1,  ///< `fence` is set: stream-ordered fences instead of device syncs
};

/// A fence: an opaque handle the backend hands out; 0 is never a valid fence.
typedef uint64_t cci_fence;
/// fence_ops.poll's "not found out" (neither passed nor known to be pending).
#define CCI_FENCE_PUT_OFF 2
/// The stream key that stands for "every stream of the device" in fence_ops.record.
#define CCI_STREAM_ALL UINT64_MAX

/// (a) Virtual memory. Address ranges are reserved without memory; physical pages of the device's
/// granularity are created, mapped into a range, given access, unmapped and released. A page can
/// be mapped at more than one address (that is how pages are pooled and stitched). Sizes and
/// addresses are multiples of granularity(). Every call but granularity returns CCI_OK, CCI_EOOM
/// (page_create only: the device has no room) or CCI_EBACKEND.
typedef struct cci_backend_vmm_ops {
    /// The page size every other call works in; queried from the device, never assumed.
    size_t (*granularity)(void *ctx, int device);
    /// Reserves `size` bytes of address space (no memory), aligned to `align` (0 = granularity).
    int (*va_reserve)(void *ctx, int device, size_t size, size_t align, uintptr_t *va);
    /// Gives a range from va_reserve back, whole; nothing may still be mapped in it.
    int (*va_free)(void *ctx, int device, uintptr_t va, size_t size);
    /// Creates one physical page of `size` bytes (a multiple of granularity) and returns its handle.
    int (*page_create)(void *ctx, int device, size_t size, uint64_t *page);
    /// Releases a page; legal while it is still mapped (the memory goes with the last mapping).
    int (*page_release)(void *ctx, int device, uint64_t page);
    /// Maps the whole of `page` (`size` bytes) at `va` inside a reserved range. No access yet.
    int (*map)(void *ctx, int device, uintptr_t va, size_t size, uint64_t page);
    /// Unmaps exactly one earlier mapping or a run of adjacent mappings covering [va, va+size).
    /// The caller guarantees no queued work can still touch the range (its fence has passed).
    int (*unmap)(void *ctx, int device, uintptr_t va, size_t size);
    /// Gives the device read/write access to [va, va+size), which may span many mappings: one
    /// call per range, not per page (the API charges per call, not per page).
    int (*set_access)(void *ctx, int device, uintptr_t va, size_t size);
    /// Optional (may be NULL): a backend may keep released pages to hand them out again from
    /// page_create; this gives every page it keeps back to the device. Called by empty_cache and
    /// the last retry before an out-of-memory, after their pages were released.
    void (*drain)(void *ctx, int device);
    /// Optional (may be NULL): how many released pages the backend keeps now for page_create to
    /// hand out again, and their bytes. Device memory that reserved (= mapped) does not count,
    /// shown by the reports. Host bookkeeping only, never a call into the device, so it also
    /// answers after the device is gone (exit). CCI_OK, or CCI_EBACKEND for a device it does not
    /// know.
    int (*pooled)(void *ctx, int device, size_t *pages, size_t *bytes);
} cci_backend_vmm_ops;

/// (b) Fences. A fence recorded for `stream` passes once every piece of work that was queued
/// before the record and may touch memory last used on `stream` has finished; the backend decides
/// which of the program's streams that covers (CCI_STREAM_ALL: all of them). Fences are cheap to
/// record and to query; only wait() blocks, and never with the allocator lock held.
typedef struct cci_backend_fence_ops {
    /// CCI_OK and *out, or CCI_EBACKEND (the core then falls back to synchronize).
    int (*record)(void *ctx, int device, uint64_t stream, cci_fence *out);
    /// 1 when the fence has passed, 0 when work before it is still queued, CCI_EBACKEND on error.
    int (*query)(void *ctx, int device, cci_fence f);
    /// Blocks until the fence has passed. CCI_OK or CCI_EBACKEND.
    int (*wait)(void *ctx, int device, cci_fence f);
    /// Forgets a fence (passed or not); its handle may be handed out again.
    void (*release)(void *ctx, int device, cci_fence f);
    /// Optional (NULL: 1): how many stream events one record makes now, the cost of a fence. The
    /// core records extra fences (on a poor fit) only where they are cheap.
    unsigned (*width)(void *ctx, int device);
    /// Optional (NULL: query): the same question asked in passing (the core's periodic tick),
    /// where not knowing costs only a later reuse. Returns as query does, or CCI_FENCE_PUT_OFF:
    /// the backend did not find out, because finding out costs more than it is worth now. It
    /// must answer in full again within a bounded time, so that nothing stays pending for ever.
    int (*poll)(void *ctx, int device, cci_fence f);
    /// Optional (NULL: unknown, taken as busy): how many of the program's streams that a fence
    /// covers beyond the device's own order (non-blocking streams) had work still queued when the
    /// backend last looked. 0 means a fence passes once the device's ordered work has reached it,
    /// so waiting for a recent one stalls only the host, never behind another stream's work. Where
    /// fences are dear (width), the core then waits for a closer fit rather than split a poor one.
    unsigned (*busy)(void *ctx, int device);
    /// Optional (NULL: never): 1 when the record of `f` by itself orders every use of memory
    /// queued after it after every use queued before it (on CUDA: no stream outside the legacy
    /// stream's implicit synchronisation could touch the memory, so the legacy event is a barrier
    /// for all later work), or when an `order` given since covers `f` (a backend's order may
    /// cover every fence recorded before it). Blocks freed before such a fence may go to a new
    /// owner at once: asked when a batch is closed and before a pending batch is queried. It says
    /// nothing about the fence having PASSED: old work may still run, so a page is still
    /// unmapped only once a fence has passed (query, wait).
    int (*orders)(void *ctx, int device, cci_fence f);
    /// Optional (NULL: never): asked instead of a wait when a pending batch is wanted for reuse
    /// (never for unmapping): 1 when the backend has just made every use of memory queued from
    /// now on ordered after every use queued before `f` was recorded, without blocking the host
    /// (on CUDA: the legacy stream waits for the busy non-blocking streams, at most
    /// CCI_FENCE_ORDER_MAX_BUSY of them, and every non-blocking stream for the legacy stream), so
    /// the blocks freed before `f` and before every older fence may go to new owners at once, as
    /// after `orders`. 0 when it cannot now (the core then waits). Like `orders`, it says
    /// nothing about the fence having PASSED. CCI_ORDER_BEHIND when it could, but only after the
    /// device has reached the backend's last order (it keeps one outstanding at a time): the core
    /// then calls `catch_up` and asks again.
    int (*order)(void *ctx, int device, cci_fence f);
    /// Optional (NULL: CCI_ORDER_BEHIND is taken as 0): blocks until the device has reached the
    /// point of the backend's last `order`, a wait shorter than one for a newer fence. Never with
    /// the allocator lock held. CCI_OK, or CCI_EBACKEND (the core then waits for the fence).
    int (*catch_up)(void *ctx, int device);
    /// Optional (NULL: never): an order at reuse instead of a fence per batch of frees. Asked with
    /// `now` 0 at a fenced free: 1 when the backend can order every later use of memory after
    /// every earlier one cheaply now (on CUDA: no stream busy beside the device's own order), so
    /// that the block may join the free set at once; the core then asks with `now` 1 before it
    /// hands any block to a new owner. With `now` 1: 1 when every use of memory queued from now on
    /// is ordered after every use queued before the call (an order just made, or none needed
    /// since the last), without blocking the host; 0 when it could not, and the core then waits
    /// for a fence of its own. Like `orders`, it says nothing about old work having PASSED.
    int (*reuse_order)(void *ctx, int device, int now);
} cci_backend_fence_ops;

/// fence_ops.order's "after a catch_up" (see there).
#define CCI_ORDER_BEHIND 2
/// The most busy streams the CUDA backend's order sweeps; with more it refuses and the core
/// waits (preload/cuda/fence_order.c says why). Replay models the same bound (ccreplay --fenced-order).
#define CCI_FENCE_ORDER_MAX_BUSY 4

struct cci_stats;  // include/ccinterpose.h

/// The device contract, version 2: whole segments (always), plus the optional groups above.
typedef struct cci_backend_ops {
    /// Reserve `size` bytes (a multiple of 512) on `device`. On success returns CCI_OK and the
    /// segment's start in *addr; the backend owns nothing about it afterwards except the memory.
    /// Returns CCI_EOOM when the device is full, CCI_EBACKEND for other failures. Called without
    /// the allocator lock held only when `release_lock_on_cudamalloc` is set; otherwise under it.
    int (*reserve)(void *ctx, int device, size_t size, uintptr_t *addr);
    /// Return a segment obtained from reserve, with its exact size. CCI_OK or CCI_EBACKEND.
    int (*release)(void *ctx, int device, uintptr_t addr, size_t size);
    /// Total bytes of the device; 0 when unknown (the core then treats capacity as unlimited).
    size_t (*capacity)(void *ctx, int device);
    /// Block until every piece of work queued on the device before this call has finished, so
    /// that blocks freed before it can be handed to a new owner. Never called with the allocator
    /// lock held. NULL when nothing runs asynchronously (the simulated device).
    int (*synchronize)(void *ctx, int device);
    /// CCI_CAP_* flags: which of the groups below are implemented.
    unsigned caps;
    const cci_backend_vmm_ops *vmm;      ///< NULL unless caps has CCI_CAP_VMM
    const cci_backend_fence_ops *fence;  ///< NULL unless caps has CCI_CAP_FENCES
    /// Optional (NULL: every cost 0): what the device's calls have cost the host so far, as the
    /// backend counts them, written into the cost fields of *out (stats_list.h, CCI_STAT_COSTS:
    /// fence_*, vmm_*) and no other. The core counts none of them and asks each time it copies
    /// the statistics, with the allocator lock held. Host bookkeeping only, never a driver call,
    /// so it also answers after the device is gone (exit). A figure the backend cannot tell per
    /// device (the list marks it CCI_COST_PROCESS) is its figure for the whole process.
    void (*costs)(void *ctx, int device, struct cci_stats *out);
    /// Optional (NULL: never predicted): the bytes the device could still hand out now, as its
    /// driver tells, for throw_on_cudamalloc_oom's prediction; SIZE_MAX when it cannot tell.
    /// Called with the allocator lock held, only when that key is set and a segment is wanted.
    size_t (*available)(void *ctx, int device);
    /// Optional (NULL: all 0): the memory the backend's device handed out past the pools, as the
    /// layer that passed it through counted it, into the CCI_STAT_OUTSIDE fields of *out and no
    /// other (stats_list.h). Asked with the costs, under the same rules.
    void (*outside)(void *ctx, int device, struct cci_stats *out);
} cci_backend_ops;

typedef struct cci_backend {
    const cci_backend_ops *ops;
    void *ctx;
} cci_backend;

/// The backend's costs into a copy of the statistics (the core's own leave them 0).
static inline void cci_backend_costs(cci_backend be, int device, struct cci_stats *out)
{
    if (be.ops->costs)
        be.ops->costs(be.ctx, device, out);
    if (be.ops->outside)  // (the copy's other backend-owned fields)
        be.ops->outside(be.ctx, device, out);
}

// ---- the simulated device (backend_sim.c) ---------------------------------------------------
// Hands out 2 MiB-aligned addresses from a private address range, enforcing `capacity` bytes of
// reservations. No memory is touched, so a "GPU" of any size costs nothing.
typedef struct cci_sim_device cci_sim_device;

cci_sim_device *cci_sim_create(size_t capacity);
void cci_sim_destroy(cci_sim_device *sim);
cci_backend cci_sim_backend(cci_sim_device *sim);
/// Fault injection for tests: the n-th reserve call from now (1 = the next) fails with CCI_EOOM.
/// 0 disarms.
void cci_sim_fail_reserve_at(cci_sim_device *sim, uint64_t n);
/// Bytes currently reserved on the simulated device, and number of live segments.
size_t cci_sim_reserved(const cci_sim_device *sim);
size_t cci_sim_segments(const cci_sim_device *sim);

// The simulated device's fences (backend_sim_fence.c) are deterministic. The device keeps a logical
// clock that advances at every fence record; a fence passes once its stream (every stream, for
// CCI_STREAM_ALL) has completed up to its record. By itself the device completes work `lag` records
// behind the host: lag 0 (the default) passes every fence at once, so runs without a lag behave as
// with immediate completion. A wait makes the device catch up with that fence.
void cci_sim_set_fence_lag(cci_sim_device *sim, uint64_t lag);
/// Completes everything recorded so far on `stream` (CCI_STREAM_ALL: on every stream).
void cci_sim_complete(cci_sim_device *sim, uint64_t stream);
/// The stream events one fence costs, as the simulated backend reports it (fence_ops.width):
/// models a program with that many streams, where the core asks the fences less (default 1).
void cci_sim_set_fence_width(cci_sim_device *sim, unsigned streams);
/// Of those streams, how many the simulated backend reports busy (fence_ops.busy): 0 (the
/// default) models idle side streams (PyTorch's stream pool on one GPU), more models streams that
/// always have work in flight (NCCL's under DDP).
void cci_sim_set_fence_busy(cci_sim_device *sim, unsigned streams);
/// Whether fences recorded from now on order all later work at once (fence_ops.orders).
void cci_sim_set_fence_orders(cci_sim_device *sim, int orders);
/// Whether a wait for reuse is answered by fence_ops.order (1) instead of a wait, as the CUDA
/// backend does when every non-blocking stream is idle; counted apart from the waits.
void cci_sim_set_fence_order(cci_sim_device *sim, int order);
/// Whether a fenced free may skip its fence while no stream is modelled busy, the next block
/// handed out then ordered (fence_ops.reuse_order), as the CUDA backend does; the next `n` orders
/// at reuse are refused (tests of the core's fallback); what the orders at reuse did so far.
void cci_sim_set_reuse_order(cci_sim_device *sim, int on);
void cci_sim_refuse_reuse_orders(cci_sim_device *sim, uint64_t n);
void cci_sim_reuse_counts(const cci_sim_device *sim, uint64_t *frees, uint64_t *orders, uint64_t *refused);
/// Waits for reuse answered by fence_ops.order (cci_sim_set_fence_order) so far. With a fence
/// width above CCI_FENCE_ORDER_MAX_BUSY the simulated backend keeps one order outstanding, as the
/// CUDA backend does: an order is answered CCI_ORDER_BEHIND until the device has reached the last.
uint64_t cci_sim_fence_orders_made(const cci_sim_device *sim);
/// fence_ops.catch_up calls that made the simulated device catch up with the last order.
uint64_t cci_sim_fence_catch_ups(const cci_sim_device *sim);
/// Fence queries the core made (fence_ops.query), for tests and replay.
uint64_t cci_sim_fence_queries(const cci_sim_device *sim);
/// Fences recorded, waits that had to make the device catch up, fences not yet released.
void cci_sim_fence_counts(const cci_sim_device *sim, uint64_t *records, uint64_t *waits, uint64_t *live);
// ---- the simulated device's virtual-memory group (sim_vmm.c) --------------------------------
// Page-accurate: address ranges without memory, physical pages counted against the capacity
// together with ordinary segments, and mappings checked the way the driver checks them. Misuse
// (a mapping over a mapped page, an unmap that does not cover whole mappings exactly, access on
// unmapped bytes, freeing a range that still has pages mapped) fails with CCI_EBACKEND and is
// counted in `errors`, its reason in `last_error`.
typedef struct cci_sim_vmm_stats {
    size_t granularity;
    size_t va_ranges;       ///< address ranges reserved now
    size_t pages;           ///< physical pages whose memory exists now
    size_t physical_bytes;  ///< their bytes (counted against the capacity)
    size_t mappings;
    size_t mapped_bytes;
    uint64_t page_creates, page_releases, maps, unmaps, set_access_calls, va_reserves;  ///< calls
    uint64_t errors;        ///< calls the simulation refused as misuse
    char last_error[160];
} cci_sim_vmm_stats;

void cci_sim_vmm_stats_get(cci_sim_device *sim, cci_sim_vmm_stats *out);
/// Sets the page granularity (a power of two >= 512; default 2 MiB) before any VMM call; -1 after.
int cci_sim_set_granularity(cci_sim_device *sim, size_t granularity);
/// 1 when every byte of [va, va+size) is mapped and accessible, else 0.
int cci_sim_vmm_accessible(cci_sim_device *sim, uintptr_t va, size_t size);

#endif
