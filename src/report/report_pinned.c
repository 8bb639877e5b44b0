// SPDX-License-Identifier: MIT
// The pinned host cache's section of the report: text and JSON, from the snapshot's copy of the
// pinned_* statistics (the preload's, for the whole process), walked through the core's lists
// (stats_list.h) so a new pinned statistic appears here without a change to this file.
#include "report_impl.h"

#include <stddef.h>
#include <stdio.h>

#include "stats_list.h"

#define FAMILY(f, label, bytes) {#f, label, bytes, offsetof(cci_stats, f)},
static const struct {
    const char *key, *label;
    int bytes;
    size_t offset;
} families[] = {CCI_STAT_PINNED_FAMILIES(FAMILY)};
#undef FAMILY

#define COUNT(f, label) {#f, label, offsetof(cci_stats, f)},
static const struct {
    const char *key, *label;
    size_t offset;
} counts[] = {CCI_STAT_PINNED_COUNTS(COUNT)};
#undef COUNT

#define NFAMILIES (sizeof families / sizeof families[0])
#define NCOUNTS (sizeof counts / sizeof counts[0])

static const cci_stat *family_of(const cci_stats *st, size_t i)
{
    return (const cci_stat *)((const char *)st + families[i].offset);
}

static uint64_t count_of(const cci_stats *st, size_t i)
{
    return *(const uint64_t *)((const char *)st + counts[i].offset);
}

static const char *value(int bytes, int64_t v, char *buf, size_t len)
{
    if (bytes)
        return cci__human(v, buf, len);
    snprintf(buf, len, "%lld", (long long)v);
    return buf;
}

void cci__pinned_text(cci_sb *b, const cci_report_snapshot *s)
{
    if (!s->has_pinned)
        return;
    const cci_stats *st = &s->pinned;
    cci__sb_printf(b, "\nPinned host memory (cudaHostAlloc and the like; the whole process):\n");
    for (size_t i = 0; i < NFAMILIES; i++) {
        const cci_stat *f = family_of(st, i);
        char now[24], peak[24];
        cci__sb_printf(b, "  %-24s %10s now, peak %10s\n", families[i].label,
                       value(families[i].bytes, f->current, now, sizeof now),
                       value(families[i].bytes, f->peak, peak, sizeof peak));
    }
    uint64_t asked = st->pinned_hits + st->pinned_misses;
    cci__sb_printf(b, "  Allocations: %llu, %llu reused from the cache (%.0f %%), %llu newly pinned; "
                   "%.1f ms spent pinning\n",
                   (unsigned long long)asked, (unsigned long long)st->pinned_hits,
                   asked ? 100.0 * (double)st->pinned_hits / (double)asked : 0.0,
                   (unsigned long long)st->pinned_misses, st->pinned_register_ns / 1e6);
    cci__sb_printf(b, "  Frees: %llu behind a fence, %llu given straight back; %llu buffers given back "
                   "to CUDA\n",
                   (unsigned long long)st->pinned_fence_records, (unsigned long long)st->pinned_unfenced_frees,
                   (unsigned long long)st->pinned_host_frees);
}

void cci__pinned_json(cci_sb *b, const cci_report_snapshot *s)
{
    if (!s->has_pinned)
        return;
    const cci_stats *st = &s->pinned;
    cci__sb_puts(b, ",\n  \"pinned_host\": {");
    for (size_t i = 0; i < NFAMILIES; i++) {
        const cci_stat *f = family_of(st, i);
        cci__sb_printf(b, "%s\"%s\": {\"current\": %lld, \"peak\": %lld, \"allocated\": %lld, \"freed\": %lld}",
                       i ? ",\n    " : "\n    ", families[i].key, (long long)f->current, (long long)f->peak,
                       (long long)f->allocated, (long long)f->freed);
    }
    for (size_t i = 0; i < NCOUNTS; i++)
        cci__sb_printf(b, ",\n    \"%s\": %llu", counts[i].key, (unsigned long long)count_of(st, i));
    cci__sb_puts(b, "\n  }");
}
