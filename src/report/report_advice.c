// SPDX-License-Identifier: MIT
// Plain-language advice derived from a device's figures. Each rule names the figure it rests on,
// so a reader can check the claim against the table above it; thresholds are deliberately
// conservative, because advice that fires on every run is noise.
#include <stdarg.h>
#include <stdio.h>

#include "report_impl.h"

// Reserved memory that sits unallocated at the peak, as a share of reserved, before we call it
// waste worth acting on. Real training runs measured 12-16 % with the native policy; the ones
// where expandable segments saved a gigabyte were at 16 %.
#define WASTE_SHARE 0.15
#define WASTE_MIN_BYTES (8 * CCI_MIB)
// PyTorch rejects max_split_size_mb at or below its 20 MiB large-buffer size.
#define SPLIT_FLOOR_MIB 20
#define FRAG_RATIO 0.5
#define PENDING_SHARE 0.10
#define CHURN_MIN_FREES 8

static void add(cci_report_device *d, const char *rule, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void add(cci_report_device *d, const char *rule, const char *fmt, ...)
{
    if (d->nadvice >= CCI_REPORT_MAX_ADVICE)
        return;
    cci_report_advice *a = &d->advice[d->nadvice++];
    snprintf(a->rule, sizeof a->rule, "%s", rule);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->text, sizeof a->text, fmt, ap);
    va_end(ap);
}

static double share(uint64_t part, uint64_t whole) { return whole ? (double)part / (double)whole : 0.0; }

// The moment of peak reserved memory: the recorded layout when there is one, otherwise the two
// peaks from the counters (which may come from different moments, so they overstate the waste).
static void peak_pair(const cci_report_device *d, uint64_t *reserved, uint64_t *allocated, int *exact)
{
    *exact = d->frag_peak.valid;
    if (*exact) {
        *reserved = d->frag_peak.reserved;
        *allocated = d->frag_peak.allocated;
    } else {
        *reserved = (uint64_t)d->stats.reserved_bytes[CCI_POOL_ALL].peak;
        *allocated = (uint64_t)d->stats.allocated_bytes[CCI_POOL_ALL].peak;
    }
}

static void rule_failures(cci_report_device *d)
{
    const cci_stats *st = &d->stats;
    if (st->num_ooms)
        add(d, "oom",
            "%llu allocation(s) failed after every retry (num_ooms = %llu). The out-of-memory "
            "message on stderr names each request; the advice below says where reserved memory went.",
            (unsigned long long)st->num_ooms, (unsigned long long)st->num_ooms);
    if (st->num_alloc_retries)
        add(d, "retries",
            "%llu allocation(s) had to be retried after every cached segment was given back to the "
            "device (num_alloc_retries = %llu): the program runs close to the device limit, and each "
            "retry synchronises the device.",
            (unsigned long long)st->num_alloc_retries, (unsigned long long)st->num_alloc_retries);
}

static void rule_split(cci_report_device *d)
{
    const cci_report_misses *m = &d->misses;
    char h1[16], h2[16];
    // The smallest request that missed sets the limit: blocks of its size and up then stay whole
    // for requests like it, while everything smaller keeps splitting the rest.
    uint64_t mib = m->large_min_request / CCI_MIB;
    if (m->large_count == 0 || mib <= SPLIT_FLOOR_MIB)
        return;
    if (d->stats.max_split_size != UINT64_MAX && d->stats.max_split_size / CCI_MIB <= mib)
        return;  // a limit at least this strict is already set
    add(d, "max_split_size",
        "Try max_split_size_mb:%llu. %llu request(s) of %s or more needed a new segment (%s in all) "
        "although the pool's cached free memory added up to the request (fragmentation misses above "
        "20 MiB = %llu): large cached blocks had been split by smaller requests. With the limit, blocks "
        "of %llu MiB and more are never split and stay whole for requests of their size. A split "
        "limit can also raise the peak (unsplittable blocks serve fewer requests): record a trace "
        "(CCI_TRACE) and compare with `ccreplay --conf` or `--sweep` before adopting it.",
        (unsigned long long)mib, (unsigned long long)m->large_count,
        cci__human((int64_t)m->large_min_request, h1, sizeof h1),
        cci__human((int64_t)m->large_segment_bytes, h2, sizeof h2), (unsigned long long)m->large_count,
        (unsigned long long)mib);
}

static void rule_unused_limit(cci_report_device *d)
{
    const cci_stats *st = &d->stats;
    if (st->max_split_size == UINT64_MAX || st->allocation[CCI_POOL_ALL].allocated == 0 ||
        st->oversize_allocations.allocated != 0)
        return;
    add(d, "unused_limit",
        "max_split_size_mb:%llu is set but no request reached it (oversize_allocations.allocated = 0): "
        "the limit changes nothing for this program.",
        (unsigned long long)(st->max_split_size / CCI_MIB));
}

static void rule_oversize_idle(cci_report_device *d)
{
    const cci_report_frag *f = d->frag_peak.valid ? &d->frag_peak : &d->frag_now;
    const cci_stats *st = &d->stats;
    if (st->max_split_size == UINT64_MAX || share(f->oversize_free, f->reserved) < WASTE_SHARE ||
        f->oversize_free < WASTE_MIN_BYTES)
        return;
    char h1[16];
    add(d, "oversize_idle",
        "%s, %s sat free in blocks of max_split_size_mb:%llu or more (free in blocks >= max_split_size; "
        "oversize_segments.peak = %lld). Such a block serves only a request at most "
        "max_non_split_rounding_mb smaller than itself, so most requests pass it by. Raise "
        "max_non_split_rounding_mb or the limit, or drop the limit; `ccreplay --sweep` on a recorded "
        "trace compares the choices.",
        d->frag_peak.valid ? "At peak reserved" : "At exit", cci__human((int64_t)f->oversize_free, h1, sizeof h1),
        (unsigned long long)(st->max_split_size / CCI_MIB), (long long)st->oversize_segments.peak);
}

static void rule_waste(cci_report_device *d)
{
    uint64_t res, alloc;
    int exact;
    peak_pair(d, &res, &alloc, &exact);
    uint64_t waste = res > alloc ? res - alloc : 0;
    if (share(waste, res) < WASTE_SHARE || waste < WASTE_MIN_BYTES)
        return;
    char h1[16], h2[16], h3[16];
    add(d, "peak_waste",
        "At peak, %s was reserved but only %s allocated (%s, %.0f %% of reserved, unused%s). "
        "expandable_segments:True is the usual cure, but libccinterpose %s; until it does, record a "
        "trace and run `ccreplay --sweep` on it to find the setting with the lowest peak.",
        cci__human((int64_t)res, h1, sizeof h1), cci__human((int64_t)alloc, h2, sizeof h2),
        cci__human((int64_t)waste, h3, sizeof h3), 100.0 * share(waste, res),
        exact ? "" : "; peaks of two counters, possibly from different moments",
        d->expandable_requested ? "does not honour the expandable_segments:True you set yet"
                                : "does not honour it yet");
}

static void rule_fragmentation(cci_report_device *d)
{
    const cci_report_frag *f = d->frag_peak.valid ? &d->frag_peak : &d->frag_now;
    if (f->free_blocks < 2 || f->ratio < FRAG_RATIO || share(f->cached_free, f->reserved) < WASTE_SHARE ||
        f->cached_free < WASTE_MIN_BYTES)
        return;
    char h1[16], h2[16];
    add(d, "fragmentation",
        "Fragmentation ratio %s is %.2f: %s free in %llu blocks, the largest only %s. Any larger "
        "request needs a new segment. Short-lived allocations between long-lived ones cause this; "
        "allocating long-lived buffers first keeps the holes together.",
        d->frag_peak.valid ? "at peak" : "at exit", f->ratio, cci__human((int64_t)f->cached_free, h1, sizeof h1),
        (unsigned long long)f->free_blocks, cci__human((int64_t)f->largest_free, h2, sizeof h2));
}

static void rule_pending(cci_report_device *d)
{
    const cci_report_frag *f = &d->frag_peak;
    if (!f->valid || share(f->pending, f->reserved) < PENDING_SHARE || f->pending < WASTE_MIN_BYTES)
        return;
    char h[16];
    add(d, "pending",
        "At peak, %s had been freed but was still waiting on another stream (active minus allocated "
        "memory). Frees from a stream other than the block's own are held until the device "
        "synchronises; freeing on the allocating stream makes them reusable at once.",
        cci__human((int64_t)f->pending, h, sizeof h));
}

static void rule_churn(cci_report_device *d)
{
    const cci_stats *st = &d->stats;
    uint64_t peak_segs = (uint64_t)st->segment[CCI_POOL_ALL].peak;
    if (st->num_device_free < CHURN_MIN_FREES || st->num_device_alloc < 4 * (peak_segs ? peak_segs : 1))
        return;
    add(d, "churn",
        "%llu device allocations (num_device_alloc) and %llu device frees (num_device_free) for a peak "
        "of %llu segments: cached sizes churn, and every cudaMalloc/cudaFree synchronises the device. "
        "Calls to empty_cache(), a low garbage_collection_threshold or allocation retries release "
        "segments that are soon needed again.",
        (unsigned long long)st->num_device_alloc, (unsigned long long)st->num_device_free,
        (unsigned long long)peak_segs);
}

static void rule_healthy(cci_report_device *d)
{
    uint64_t res, alloc;
    int exact;
    peak_pair(d, &res, &alloc, &exact);
    char h1[16], h2[16];
    add(d, "healthy",
        "Looks healthy: at peak %s of %s reserved was allocated (%.0f %%), with no out-of-memory "
        "errors or retries and no fragmentation worth acting on.",
        cci__human((int64_t)alloc, h1, sizeof h1), cci__human((int64_t)res, h2, sizeof h2),
        100.0 * share(alloc, res));
}

void cci__advice_compute(cci_report_device *d)
{
    d->nadvice = 0;
    if (d->stats.num_device_alloc == 0) {
        add(d, "idle", "No device memory was requested through libccinterpose on this device.");
        return;
    }
    rule_failures(d);
    rule_split(d);
    rule_oversize_idle(d);
    rule_waste(d);
    rule_fragmentation(d);
    rule_pending(d);
    rule_churn(d);
    rule_unused_limit(d);
    if (d->nadvice == 0)
        rule_healthy(d);
}
