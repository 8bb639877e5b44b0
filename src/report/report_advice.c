// SPDX-License-Identifier: MIT
// Plain-language advice derived from a device's figures. Each rule names the figure it rests on,
// so a reader can check the claim against the table above it; thresholds are deliberately
// conservative, because advice that fires on every run is noise.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

// Paragraphs are built in a growable buffer: no advice is ever cut, however long the numbers
// and configuration strings in it. A paragraph the host has no memory for is left out.
static void add_sb(cci_report_device *d, const char *rule, cci_sb *b)
{
    char *text = NULL;
    size_t len = 0;
    if (cci__sb_finish(b, &text, &len) != 0)
        return;
    if (d->nadvice >= CCI_REPORT_MAX_ADVICE) {
        free(text);
        return;
    }
    cci_report_advice *a = &d->advice[d->nadvice++];
    snprintf(a->rule, sizeof a->rule, "%s", rule);
    a->text = text;
}

static void add(cci_report_device *d, const char *rule, const char *fmt, ...)
{
    cci_sb b = {0};
    va_list ap;
    va_start(ap, fmt);
    cci__sb_vprintf(&b, fmt, ap);
    va_end(ap);
    add_sb(d, rule, &b);
}

void cci__advice_clear(cci_report_device *d)
{
    for (size_t k = 0; k < d->nadvice; k++) {
        free(d->advice[k].text);
        d->advice[k].text = NULL;
    }
    d->nadvice = 0;
}

// ---- replayed figures ---------------------------------------------------------------------

static const cci_report_whatif *measured(const cci_report_device *d)
{
    return d->whatif.measured ? &d->whatif : NULL;
}

// A replayed configuration is advice only when it peaks lower than the current one without
// failing more often.
static int is_lower(const cci_report_whatif *w, const cci_report_whatif_row *r)
{
    return r->num_ooms <= w->current.num_ooms && r->peak_reserved < w->current.peak_reserved;
}

static const cci_report_whatif_row *find_conf(const cci_report_whatif *w, const char *conf)
{
    for (size_t i = 0; i < w->nrows; i++)
        if (!strcmp(w->rows[i].conf, conf))
            return &w->rows[i];
    return NULL;
}

static double mib(uint64_t b) { return (double)b / (double)CCI_MIB; }

// 1 when an earlier paragraph of this device already named `conf` as a setting (followed by a
// non-key character): each distinct suggestion is spelled out once, later ones point back to it.
static int stated(const cci_report_device *d, const char *conf)
{
    size_t n = strlen(conf);
    for (size_t k = 0; n && k < d->nadvice; k++)
        for (const char *p = d->advice[k].text; p && (p = strstr(p, conf)) != NULL; p += n)
            if (!(p[n] >= '0' && p[n] <= '9') && p[n] != '.' && p[n] != '_')
                return 1;
    return 0;
}

// "`conf` would have peaked at X MiB instead of Y MiB (−Z %)": the one phrasing of a measured
// gain (the tuner's), or "`conf` (above)" when an earlier paragraph gave it already.
static void gain(cci_sb *b, const cci_report_device *d, const cci_report_whatif_row *r)
{
    const cci_report_whatif *w = &d->whatif;
    const char *name = *r->conf ? r->conf : "the defaults (CCI_ALLOC_CONF unset: compact segments)";
    cci__sb_puts(b, name);
    if (stated(d, name)) {
        cci__sb_puts(b, " (above)");
        return;
    }
    cci_tuner_row rec, ref;
    cci__whatif_tuner_row(r, &rec);
    cci__whatif_tuner_row(&w->current, &ref);
    char text[96];
    cci_tuner_gain_text(text, sizeof text, &rec, &ref);
    cci__sb_printf(b, " would have peaked at %s", text);
}

// One sentence for rules that name a cause, not a setting: what the tuner recommends.
static void best_clause(cci_sb *b, const cci_report_device *d)
{
    const cci_report_whatif_row *r = cci__whatif_recommended(d);
    if (r != &d->whatif.current) {
        cci__sb_puts(b, " Replayed: ");
        gain(b, d, r);
        cci__sb_puts(b, ".");
    } else {
        cci__sb_printf(b, " Replayed: no configuration of the grid does better than the current one under the "
                          "tuner's rule (%.1f MiB peak reserved).",
                       mib(d->whatif.current.peak_reserved));
    }
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

static unsigned long long mib_limit(const cci_report_misses *m) { return m->large_min_request / CCI_MIB; }

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
    char conf[64];
    snprintf(conf, sizeof conf, "max_split_size_mb:%llu", (unsigned long long)mib_limit(m));
    const cci_report_whatif *w = measured(d);
    const cci_report_whatif_row *r = w ? find_conf(w, conf) : NULL;
    if (w && !(r && is_lower(w, r)))
        return;  // measured, and not lower (or not measured in time): no advice to give
    cci_sb b = {0};
    cci__sb_printf(&b,
                   "Try %s. %llu request(s) of %s or more needed a new segment (%s in all) although the "
                   "pool's cached free memory added up to the request (fragmentation misses above 20 MiB = "
                   "%llu): large cached blocks had been split by smaller requests. With the limit, blocks of "
                   "%llu MiB and more are never split and stay whole for requests of their size.",
                   conf, (unsigned long long)m->large_count, cci__human((int64_t)m->large_min_request, h1, sizeof h1),
                   cci__human((int64_t)m->large_segment_bytes, h2, sizeof h2), (unsigned long long)m->large_count,
                   (unsigned long long)mib);
    if (r) {
        cci__sb_puts(&b, " Replayed: ");
        gain(&b, d, r);
        cci__sb_puts(&b, ".");
    } else {
        cci__sb_puts(&b, " A split limit can also raise the peak (unsplittable blocks serve fewer requests): "
                         "record a trace (CCI_TRACE) and compare with `ccreplay --conf` or `--sweep` before "
                         "adopting it.");
    }
    add_sb(d, "max_split_size", &b);
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
    const cci_report_whatif *w = measured(d);
    const cci_report_whatif_row *nolimit = w ? find_conf(w, "") : NULL;
    if (w && !(nolimit && is_lower(w, nolimit)))
        return;  // measured: dropping the limit does not help, and nothing else here is measured
    char h1[16];
    cci_sb b = {0};
    cci__sb_printf(&b,
                   "%s, %s sat free in blocks of max_split_size_mb:%llu or more (free in blocks >= "
                   "max_split_size; oversize_segments.peak = %lld). Such a block serves only a request at most "
                   "max_non_split_rounding_mb smaller than itself, so most requests pass it by.",
                   d->frag_peak.valid ? "At peak reserved" : cci__When(d),
                   cci__human((int64_t)f->oversize_free, h1, sizeof h1), (unsigned long long)(st->max_split_size / CCI_MIB),
                   (long long)st->oversize_segments.peak);
    if (nolimit) {
        cci__sb_puts(&b, " Dropping the limit: ");
        gain(&b, d, nolimit);
        cci__sb_puts(&b, ".");
    } else {
        cci__sb_puts(&b, " Raise max_non_split_rounding_mb or the limit, or drop the limit; `ccreplay --sweep` on "
                         "a recorded trace compares the choices.");
    }
    add_sb(d, "oversize_idle", &b);
}

// The segment kinds as the what-if grid spells them (sweep.c): the default ("", compact segments
// where the device offers the virtual-memory API), PyTorch's expandable segments, and ordinary
// ones, one key away. A kind is named only when it is not the one in effect (vmm_mode differs).
static const char *const vmm_modes[] = {"", "expandable_segments:True"};
static const char *const segment_kinds[] = {"", "expandable_segments:True", "compact_segments:False"};

// The paragraph's cure when nothing was replayed, by the mode in effect (vmm_counts.h: 0 ordinary,
// 1 expandable, 2 compact): never the mode that already runs.
static const char *waste_cure(int mode)
{
    if (mode == 2)
        return " Compact segments are in effect (the default where the device offers the virtual-memory "
               "API). The alternatives are PyTorch's "
               "expandable_segments:True and ordinary segments (compact_segments:False): record a trace "
               "(CCI_TRACE) and run `ccreplay --sweep` on it to measure them and find the setting with the "
               "lowest peak.";
    if (mode == 1)
        return " PyTorch's expandable segments are in effect; compact segments (ours, the default where the "
               "device offers the virtual-memory API: drop expandable_segments:True) give free pages back. "
               "Record a trace (CCI_TRACE) and run `ccreplay --sweep` on it to measure them and find the setting "
               "with the lowest peak.";
    return " Segments on the virtual-memory API are the usual cure: compact segments (ours, the default where "
           "the device offers that API: drop compact_segments:False) or expandable_segments:True (PyTorch's). "
           "Record a trace (CCI_TRACE) and run `ccreplay --sweep` on it to measure them and find the setting "
           "with the lowest peak.";
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
    cci_sb b = {0};
    cci__sb_printf(&b, "At peak, %s was reserved but only %s allocated (%s, %.0f %% of reserved, unused%s).",
                   cci__human((int64_t)res, h1, sizeof h1), cci__human((int64_t)alloc, h2, sizeof h2),
                   cci__human((int64_t)waste, h3, sizeof h3), 100.0 * share(waste, res),
                   exact ? "" : "; peaks of two counters, possibly from different moments");
    const cci_report_whatif *w = measured(d);
    if (!w) {
        cci__sb_puts(&b, waste_cure(d->vmm_calls.mode));
        add_sb(d, "peak_waste", &b);
        return;
    }
    // The tuner's choice first; a lower virtual-memory mode it passed over is named with the reason.
    best_clause(&b, d);
    const cci_report_whatif_row *rec = cci__whatif_recommended(d);
    for (size_t m = 0; m < sizeof vmm_modes / sizeof vmm_modes[0]; m++) {
        const cci_report_whatif_row *r = find_conf(w, vmm_modes[m]);
        if (!r || r == rec || r->calls.vmm_mode == w->current.calls.vmm_mode || !is_lower(w, r) ||
            r->peak_reserved >= rec->peak_reserved)
            continue;
        cci_tuner_row tr, tc;
        cci__whatif_tuner_row(r, &tr);
        cci__whatif_tuner_row(&w->current, &tc);
        if (cci_tuner_call_us(&tr.calls) - cci_tuner_call_us(&tc.calls) <= cci_tuner_allowance_us(cci__run_seconds(d)))
            continue;  // passed over for a gain too small to matter, not for its calls
        cci__sb_puts(&b, " Passed over by the rule for its device calls: ");
        gain(&b, d, r);
        cci__sb_puts(&b, ".");
    }
    add_sb(d, "peak_waste", &b);
}

static void rule_fragmentation(cci_report_device *d)
{
    const cci_report_frag *f = d->frag_peak.valid ? &d->frag_peak : &d->frag_now;
    if (f->free_blocks < 2 || f->ratio < FRAG_RATIO || share(f->cached_free, f->reserved) < WASTE_SHARE ||
        f->cached_free < WASTE_MIN_BYTES)
        return;
    char h1[16], h2[16];
    cci_sb b = {0};
    cci__sb_printf(&b,
                   "Fragmentation ratio %s is %.2f: %s free in %llu blocks, the largest only %s. Any larger "
                   "request needs a new segment. Short-lived allocations between long-lived ones cause this; "
                   "allocating long-lived buffers first keeps the holes together.",
                   d->frag_peak.valid ? "at peak" : cci__when(d), f->ratio,
                   cci__human((int64_t)f->cached_free, h1, sizeof h1), (unsigned long long)f->free_blocks,
                   cci__human((int64_t)f->largest_free, h2, sizeof h2));
    if (measured(d))
        best_clause(&b, d);
    add_sb(d, "fragmentation", &b);
}

static void rule_pending(cci_report_device *d)
{
    const cci_report_frag *f = &d->frag_peak;
    if (!f->valid || share(f->pending, f->reserved) < PENDING_SHARE || f->pending < WASTE_MIN_BYTES)
        return;
    char h[16];
    cci_sb b = {0};
    cci__sb_printf(&b,
                   "At peak, %s had been freed but was still waiting on another stream (active minus allocated "
                   "memory). A block freed while another stream may still use it waits for a fence recorded on "
                   "those streams (docs/reuse-modes.md) and is reusable once the GPU has passed it; freeing on "
                   "the allocating stream makes it reusable at once.",
                   cci__human((int64_t)f->pending, h, sizeof h));
    if (measured(d))
        best_clause(&b, d);
    add_sb(d, "pending", &b);
}

static void rule_churn(cci_report_device *d)
{
    const cci_stats *st = &d->stats;
    uint64_t peak_segs = (uint64_t)st->segment[CCI_POOL_ALL].peak;
    if (st->num_device_free < CHURN_MIN_FREES || st->num_device_alloc < 4 * (peak_segs ? peak_segs : 1))
        return;
    cci_sb b = {0};
    // In the virtual-memory modes a device allocation is a growth mapped with cuMemMap and a free
    // an unmap: driver calls the host waits for, but no device synchronisation as cudaFree's.
    if (d->vmm_calls.mode)
        cci__sb_printf(&b,
                       "%llu growths (num_device_alloc) and %llu give-backs (num_device_free) of virtual-memory "
                       "pages for a peak of %llu segments: cached sizes churn, and each is a driver call the "
                       "host waits for (cuMemMap / cuMemUnmap, tens of microseconds each). Calls to "
                       "empty_cache(), a low garbage_collection_threshold or allocation retries give back "
                       "pages that are soon needed again.",
                       (unsigned long long)st->num_device_alloc, (unsigned long long)st->num_device_free,
                       (unsigned long long)peak_segs);
    else
        cci__sb_printf(&b,
                       "%llu device allocations (num_device_alloc) and %llu device frees (num_device_free) for "
                       "a peak of %llu segments: cached sizes churn, and every cudaMalloc/cudaFree synchronises "
                       "the device. Calls to empty_cache(), a low garbage_collection_threshold or allocation "
                       "retries release segments that are soon needed again.",
                       (unsigned long long)st->num_device_alloc, (unsigned long long)st->num_device_free,
                       (unsigned long long)peak_segs);
    if (measured(d))
        best_clause(&b, d);
    add_sb(d, "churn", &b);
}

// The measured advice itself: the tuner's recommendation (the rule `ccreplay --sweep` applies,
// tuner.h) with what it costs, or that the current setting is already the best of the grid.
static void rule_whatif(cci_report_device *d)
{
    const cci_report_whatif *w = measured(d);
    if (!w)
        return;
    const cci_report_whatif_row *rec = cci__whatif_recommended(d);
    cci_tuner_row tr, tc;
    cci__whatif_tuner_row(rec, &tr);
    cci__whatif_tuner_row(&w->current, &tc);
    char text[2048];
    cci_tuner_recommendation_text(text, sizeof text, rec == &w->current ? &tc : &tr, &tc, "this run's setting",
                                  cci__run_seconds(d));
    cci_sb b = {0};
    cci__sb_printf(&b, "Replaying this run's %llu allocation events under %zu configurations (%.2f s), by the rule "
                       "`ccreplay --sweep` applies (under the what-if table): recommended: %s",
                   (unsigned long long)w->events, w->replayed, w->seconds, text);
    // The other segment kinds, each in the one phrasing, so that the default's user sees what
    // ordinary and PyTorch's segments would have cost, not a repeat of the mode in effect.
    int kinds = 0;
    for (size_t k = 0; k < sizeof segment_kinds / sizeof segment_kinds[0]; k++) {
        const cci_report_whatif_row *r = find_conf(w, segment_kinds[k]);
        if (!r || r == rec || r->calls.vmm_mode == w->current.calls.vmm_mode)
            continue;
        cci__sb_puts(&b, kinds++ ? "; " : " Other segment kinds, replayed: ");
        gain(&b, d, r);
    }
    if (kinds)
        cci__sb_puts(&b, ".");
    if (w->replayed < w->planned)
        cci__sb_printf(&b, " Only %zu of %zu configurations were replayed within the %.1f s bound "
                           "(CCI_WHATIF_SECONDS); `ccreplay --sweep` on a recorded trace measures them all.",
                       w->replayed, w->planned, w->bound_seconds);
    if (w->events_dropped)
        cci__sb_printf(&b, " The history stopped at its cap of %llu events (CCI_HISTORY_MAX): %llu later events "
                           "are not in the replay, so these figures cover the start of the run only.",
                       (unsigned long long)w->history_cap, (unsigned long long)w->events_dropped);
    add_sb(d, "what_if", &b);
}

size_t cci_report_whatif_candidates(const cci_report_device *d, char (*confs)[192], size_t max)
{
    size_t n = 0;
    const cci_report_misses *m = &d->misses;
    if (n < max && m->large_count && mib_limit(m) > SPLIT_FLOOR_MIB)
        snprintf(confs[n++], 192, "max_split_size_mb:%llu", mib_limit(m));
    return n;
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
    cci__advice_clear(d);
    if (d->stats.num_device_alloc == 0) {
        add(d, "idle", "No device memory was requested through libccinterpose on this device.");
        return;
    }
    rule_failures(d);
    rule_whatif(d);
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
