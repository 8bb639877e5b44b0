// SPDX-License-Identifier: MIT
// Shared by the report_*.c files only: the output buffer, the one byte humaniser, and the one
// table of statistics that every printer walks.
#ifndef CCI_REPORT_IMPL_H
#define CCI_REPORT_IMPL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "report.h"

// A growable string. On host out-of-memory it stops growing and remembers the failure, so the
// printers need no error checks on every line; cci__sb_finish reports it once.
typedef struct cci_sb {
    char *buf;
    size_t len, cap;
    int failed;
} cci_sb;

void cci__sb_printf(cci_sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cci__sb_vprintf(cci_sb *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
void cci__sb_puts(cci_sb *b, const char *s);
void cci__sb_putc(cci_sb *b, char c, size_t n);
/// JSON string literal, quotes included.
void cci__sb_json_str(cci_sb *b, const char *s);
/// Text with <, >, &, " escaped for HTML.
void cci__sb_html(cci_sb *b, const char *s);
/// 0 and the buffer, or -1 (buffer freed).
int cci__sb_finish(cci_sb *b, char **out, size_t *len);

/// "512 B", "4.0 KiB", "1.5 GiB": binary units, one decimal from KiB up. buf >= 16 bytes.
const char *cci__human(int64_t bytes, char *buf, size_t buflen);

// ---- the statistics table -------------------------------------------------------------------
// One row per torch.cuda.memory_stats() family; the text table, the JSON keys and the HTML table
// all come from here, in this order (memory_summary()'s order).
typedef struct cci_stat_row {
    const char *key;      ///< memory_stats() key stem
    const char *label;    ///< memory_summary() row title
    size_t offset;        ///< of the cci_stat (array) inside cci_stats
    int per_pool;         ///< 1: an array indexed by CCI_POOL_*
    int bytes;            ///< 1: humanise as bytes
} cci_stat_row;

extern const cci_stat_row cci__stat_rows[];
extern const size_t cci__stat_nrows;
extern const char *const cci__pool_keys[CCI_POOL_KINDS];   ///< "all", "small_pool", "large_pool"

static inline const cci_stat *cci__stat_at(const cci_stats *st, const cci_stat_row *r, int pool)
{
    return (const cci_stat *)((const char *)st + r->offset) + (r->per_pool ? pool : 0);
}

/// The fragmentation figures, in the order every printer shows them.
typedef enum { CCI_FIG_BYTES, CCI_FIG_COUNT, CCI_FIG_RATIO } cci_fig_kind;
typedef struct cci_frag_row {
    const char *key;      ///< JSON key
    const char *label;    ///< text and HTML label
    size_t offset;        ///< of the uint64_t (or the double, for CCI_FIG_RATIO) in cci_report_frag
    cci_fig_kind kind;
} cci_frag_row;

extern const cci_frag_row cci__frag_rows[];
extern const size_t cci__frag_nrows;

/// One figure as text: humanised bytes, a count, or the ratio with two decimals; "-" if !f->valid.
const char *cci__frag_value(const cci_report_frag *f, const cci_frag_row *r, char *buf, size_t buflen);

// ---- the individual printers ------------------------------------------------------------------
void cci__report_text(cci_sb *b, const cci_report_snapshot *s);
void cci__report_json(cci_sb *b, const cci_report_snapshot *s);
void cci__report_html(cci_sb *b, const cci_report_snapshot *s);

/// The what-if sections (report_whatif.c) and the expandable-segment ones (report_vmm.c), one
/// call per form.
void cci__whatif_text(cci_sb *b, const cci_report_device *d);
void cci__vmm_text(cci_sb *b, const cci_report_device *d);
/// The sections the preload fills for the whole process (report_process.c): the pinned host cache
/// and the program's own virtual-memory allocations; nothing for a section the snapshot lacks.
void cci__process_text(cci_sb *b, const cci_report_snapshot *s);
/// The same as JSON members `"pinned_host": {...}`, `"program_vmm": {...}`, each with its leading ",\n".
void cci__process_json(cci_sb *b, const cci_report_snapshot *s);
/// The same as HTML sections, id "pinned_host" and "program_vmm".
void cci__process_html(cci_sb *b, const cci_report_snapshot *s);
void cci__whatif_json(cci_sb *b, const cci_report_device *d);
void cci__whatif_html(cci_sb *b, const cci_report_device *d);
void cci__vmm_json(cci_sb *b, const cci_report_device *d);
void cci__vmm_html(cci_sb *b, const cci_report_device *d);

// ---- analysis ---------------------------------------------------------------------------------
void cci__frag_compute(const cci_layout *l, cci_report_frag *f);
void cci__advice_compute(cci_report_device *d);
/// Frees the advice texts (before recomputing them, and with the device).
void cci__advice_clear(cci_report_device *d);
/// "`conf` would have peaked at X MiB instead of Y MiB (−Z %)", the one phrasing of a replayed gain.
/// When the "now" figures were taken: "at exit", or "at the time of the dump" for a live dump.
static inline const char *cci__when(const cci_report_device *d)
{
    return d->live ? "at the time of the dump" : "at exit";
}
static inline const char *cci__When(const cci_report_device *d)
{
    return d->live ? "At the time of the dump" : "At exit";
}
/// The run's duration in seconds from the device's timeline (first to last sample, monotonic clock);
/// 0 when unknown. The tuner's scale for call costs.
double cci__run_seconds(const cci_report_device *d);
/// The tuner's choice among the what-if rows and the current setting (tuner.h), against the
/// current one: &w->current when nothing beats it or the host has no memory to compare.
const cci_report_whatif_row *cci__whatif_recommended(const cci_report_device *d);
/// The tuner's view of one what-if row.
void cci__whatif_tuner_row(const cci_report_whatif_row *r, cci_tuner_row *t);
/// Timeline copy for the snapshot: malloc'ed samples, or NULL / 0 when empty.
int cci__timeline_copy(cci_report_timeline *t, cci_timeline_sample **samples, size_t *n,
                       cci_timeline_clock *clock, cci_report_misses *misses);
/// One device's share of a snapshot (layouts, stats, timeline copy, config); derived figures are
/// left to the caller. 0 or -1; cci__device_free either way.
int cci__device_take(cci_report_device *d, cci_allocator *a, cci_report_timeline *tl);
void cci__device_free(cci_report_device *d);
/// Indices of the largest segments of l (by size, then address), at most max of them.
size_t cci__largest_segments(const cci_layout *l, size_t *idx, size_t max);

#define CCI_MIB ((uint64_t)1 << 20)
/// cci_block_desc.state of the address space of an expandable segment with no memory behind it
/// (the core's BLOCK_UNMAPPED): never free, never reserved.
#define CCI_REPORT_BLOCK_UNMAPPED 3

#endif
