// SPDX-License-Identifier: MIT
// What the virtual-memory modes (expandable_segments:True, compact_segments:True) asked of the
// device: every call the allocator made on the contract's VMM group, counted in the core, so the
// same figures come out of a replay on the simulated device and out of a run on a GPU. The calls,
// not bytes, are what such a mode costs: on an H100 one cuMemSetAccess or cuMemUnmap costs tens of
// microseconds whatever it spans (../shared/reference/vmm-and-streams-facts.md).
#ifndef CCI_VMM_COUNTS_H
#define CCI_VMM_COUNTS_H

#include <stdint.h>

typedef struct cci_allocator cci_allocator;

typedef struct cci_vmm_counts {
    int mode;                  ///< 0: ordinary segments (every count 0); 1: expandable; 2: compact
    uint64_t va_reserves;      ///< address ranges reserved (one per expandable segment)
    uint64_t va_frees;
    uint64_t page_creates;     ///< page_create calls: each a cuMemCreate unless the backend pools
    uint64_t page_releases;    ///< page_release calls
    uint64_t maps;             ///< map calls, one per page (the driver maps one handle per call)
    uint64_t unmaps;           ///< unmap calls, one per run of adjacent pages
    uint64_t unmapped_pages;   ///< pages those calls covered
    uint64_t set_access;       ///< set_access calls, one per run mapped in one go
    uint64_t pool_hits;        ///< pages mapped again from the allocator's own page pool
    uint64_t reclaims;         ///< compact mode: growths that first gave free pages back
    uint64_t syncs;            ///< device synchronisations that preceded unmaps
    uint64_t pool_pages;       ///< pages in the allocator's pool now (unmapped, not released)
    uint64_t pool_bytes;
    uint64_t pool_bytes_peak;
    uint64_t pool_limit;       ///< the pool's bound in bytes now (compact mode; 0 otherwise)
    uint64_t slack;            ///< compact mode: free mapped bytes kept before a growth unmaps
    uint64_t free_at_peak_max; ///< compact mode: most free mapped bytes when reserved set a new peak
    // Compact mode's reclaims without a device sync (appended: older readers see the same layout).
    uint64_t deferred_unmaps;  ///< reclaims that moved pages of the requesting stream at once and
                               ///< unmapped their old addresses later, once a fence had passed
    uint64_t stream_waits;     ///< fence waits for victims of another stream (instead of a sync)
    uint64_t retiring_bytes;   ///< old mappings now waiting for their fence: mapped, not reserved
    // Compact mode's churn (appended likewise).
    uint64_t churn_raises;     ///< growths that raised the churn ceiling instead of moving pages,
                               ///< because moves had been seen to circulate on a repeating workload
    uint64_t churn_slack;      ///< what they raised: reserved may reach the allocated peak + slack +
                               ///< churn_slack without a reclaim (bounded)
} cci_vmm_counts;

/// Fills *out (lock taken inside). 0, or -1 when the allocator runs ordinary segments (*out is
/// then zeroed, mode 0).
int cci_alloc_vmm_counts(cci_allocator *a, cci_vmm_counts *out);

/// Microseconds the counted calls would take on an H100 (driver 580, CUDA 13, 2 MiB pages, one
/// thread, idle device): an estimate of driver time, not a measurement. Synchronisations and
/// address reservations are left out (their cost depends on queued work, or was not measured).
double cci_vmm_estimated_us(const cci_vmm_counts *c);

#endif
