// SPDX-License-Identifier: MIT
// The sections the preload fills for the whole process, after the snapshot is taken: the pinned
// host cache, and the program's own virtual-memory allocations kept for reuse (summed over the
// devices). Text, JSON and HTML, walked through the core's lists (stats_list.h), so a new
// statistic of either appears here without a change to this file.
#include "report_impl.h"

#include <stddef.h>
#include <stdio.h>

#include "stats_list.h"

typedef struct family {
    const char *key, *label;
    int bytes;
    size_t offset;
} family;

typedef struct count {
    const char *key, *label;
    size_t offset;
} count;

typedef struct section {
    const char *json_key;
    const char *title;
    const family *families;
    size_t nfamilies;
    const count *counts;
    size_t ncounts;
} section;

#define FAMILY(f, label, bytes) {#f, label, bytes, offsetof(cci_stats, f)},
#define COUNT(f, label) {#f, label, offsetof(cci_stats, f)},
static const family pinned_families[] = {CCI_STAT_PINNED_FAMILIES(FAMILY)};
static const count pinned_counts[] = {CCI_STAT_PINNED_COUNTS(COUNT)};
static const family pvmm_families[] = {CCI_STAT_PROGRAM_VMM_FAMILIES(FAMILY)};
static const count pvmm_counts[] = {CCI_STAT_PROGRAM_VMM_COUNTS(COUNT)};
#undef FAMILY
#undef COUNT
#define N(a) (sizeof a / sizeof a[0])
static const section pinned = {"pinned_host", "Pinned host memory (the whole process)", pinned_families, N(pinned_families), pinned_counts, N(pinned_counts)};
static const section pvmm = {"program_vmm", "The program's own virtual-memory allocations (every device)",
                              pvmm_families, N(pvmm_families), pvmm_counts, N(pvmm_counts)};

static const cci_stat *family_of(const cci_stats *st, const family *f)
{
    return (const cci_stat *)((const char *)st + f->offset);
}

static uint64_t count_of(const cci_stats *st, const count *c)
{
    return *(const uint64_t *)((const char *)st + c->offset);
}

static const char *value(int bytes, int64_t v, char *buf, size_t len)
{
    if (bytes)
        return cci__human(v, buf, len);
    snprintf(buf, len, "%lld", (long long)v);
    return buf;
}

static void families_text(cci_sb *b, const section *sec, const cci_stats *st)
{
    for (size_t i = 0; i < sec->nfamilies; i++) {
        const family *f = &sec->families[i];
        const cci_stat *v = family_of(st, f);
        char now[24], peak[24];
        cci__sb_printf(b, "  %-24s %10s now, peak %10s\n", f->label, value(f->bytes, v->current, now, sizeof now),
                       value(f->bytes, v->peak, peak, sizeof peak));
    }
}

static void section_json(cci_sb *b, const section *sec, const cci_stats *st)
{
    cci__sb_printf(b, ",\n  \"%s\": {", sec->json_key);
    for (size_t i = 0; i < sec->nfamilies; i++) {
        const cci_stat *f = family_of(st, &sec->families[i]);
        cci__sb_printf(b, "%s\"%s\": {\"current\": %lld, \"peak\": %lld, \"allocated\": %lld, \"freed\": %lld}",
                       i ? ",\n    " : "\n    ", sec->families[i].key, (long long)f->current, (long long)f->peak,
                       (long long)f->allocated, (long long)f->freed);
    }
    for (size_t i = 0; i < sec->ncounts; i++)
        cci__sb_printf(b, ",\n    \"%s\": %llu", sec->counts[i].key,
                       (unsigned long long)count_of(st, &sec->counts[i]));
    cci__sb_puts(b, "\n  }");
}

static double share(uint64_t part, uint64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

void cci__process_text(cci_sb *b, const cci_report_snapshot *s)
{
    if (s->has_pinned) {
        const cci_stats *st = &s->pinned;
        cci__sb_printf(b, "\nPinned host memory (cudaHostAlloc and the like; the whole process):\n");
        families_text(b, &pinned, st);
        uint64_t asked = st->pinned_hits + st->pinned_misses;
        cci__sb_printf(b, "  Allocations: %llu, %llu reused from the cache (%.0f %%), %llu newly pinned; "
                       "%.1f ms spent pinning\n",
                       (unsigned long long)asked, (unsigned long long)st->pinned_hits, share(st->pinned_hits, asked),
                       (unsigned long long)st->pinned_misses, st->pinned_register_ns / 1e6);
        cci__sb_printf(b, "  Frees: %llu behind a fence, %llu given straight back; %llu buffers given back "
                       "to CUDA\n",
                       (unsigned long long)st->pinned_fence_records, (unsigned long long)st->pinned_unfenced_frees,
                       (unsigned long long)st->pinned_host_frees);
    }
    if (s->has_program_vmm) {
        const cci_stats *st = &s->program_vmm;
        cci__sb_printf(b, "\nThe program's own virtual-memory allocations (cuMemCreate + cuMemMap; every "
                       "device):\n");
        families_text(b, &pvmm, st);
        cci__sb_printf(b, "  cuMemCreate calls: %llu, %llu answered with a kept buffer (%.1f %% of the bytes); "
                       "%llu kept buffers given back to CUDA\n",
                       (unsigned long long)st->program_vmm_creates, (unsigned long long)st->program_vmm_reused,
                       share(st->program_vmm_reused_bytes, st->program_vmm_create_bytes),
                       (unsigned long long)st->program_vmm_given_back);
    }
}

void cci__process_json(cci_sb *b, const cci_report_snapshot *s)
{
    if (s->has_pinned)
        section_json(b, &pinned, &s->pinned);
    if (s->has_program_vmm)
        section_json(b, &pvmm, &s->program_vmm);
}

// One section as a table of its families (now, peak) and one of its counts.
static void section_html(cci_sb *b, const section *sec, const cci_stats *st)
{
    cci__sb_printf(b, "<section class=\"process\" id=\"%s\">\n<h2>", sec->json_key);
    cci__sb_html(b, sec->title);
    cci__sb_puts(b, "</h2>\n<div class=\"tables\"><div><table><thead><tr><th class=\"l\">Figure</th><th>Now</th>"
                    "<th>Peak</th></tr></thead><tbody>\n");
    for (size_t i = 0; i < sec->nfamilies; i++) {
        const family *f = &sec->families[i];
        const cci_stat *v = family_of(st, f);
        char now[24], peak[24];
        cci__sb_printf(b, "<tr><td class=\"l\">%s</td><td>%s</td><td>%s</td></tr>\n", f->label,
                       value(f->bytes, v->current, now, sizeof now), value(f->bytes, v->peak, peak, sizeof peak));
    }
    cci__sb_puts(b, "</tbody></table></div><div><table><thead><tr><th class=\"l\">Count</th><th>Value</th></tr>"
                    "</thead><tbody>\n");
    for (size_t i = 0; i < sec->ncounts; i++)
        cci__sb_printf(b, "<tr><td class=\"l\">%s</td><td>%llu</td></tr>\n", sec->counts[i].label,
                       (unsigned long long)count_of(st, &sec->counts[i]));
    cci__sb_puts(b, "</tbody></table></div></div>\n</section>\n");
}

void cci__process_html(cci_sb *b, const cci_report_snapshot *s)
{
    if (s->has_pinned)
        section_html(b, &pinned, &s->pinned);
    if (s->has_program_vmm)
        section_html(b, &pvmm, &s->program_vmm);
}
