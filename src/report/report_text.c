// SPDX-License-Identifier: MIT
// The text report: memory_summary()'s table, so PyTorch users read it at once, then the
// fragmentation figures, the free-block histogram, a map of the largest segments and the advice.
// Nothing here varies between runs of the same workload except the process line at the top.
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "report_holders.h"
#include "report_impl.h"

#define INNER 75          // memory_summary()'s table is 75 characters between its borders
#define LABEL_W 23
#define CELL_W 12
#define BAR_W 50
#define MAP_SEGMENTS 8
#define WRAP 96

static void rule(cci_sb *b, char c)
{
    cci__sb_putc(b, '|', 1);
    cci__sb_putc(b, c, INNER);
    cci__sb_puts(b, "|\n");
}

static void centered(cci_sb *b, const char *s, size_t width)
{
    size_t n = strlen(s);
    size_t left = n < width ? (width - n) / 2 : 0;
    cci__sb_putc(b, ' ', left);
    cci__sb_puts(b, s);
    cci__sb_putc(b, ' ', n + left < width ? width - n - left : 0);
}

static void cell(cci_sb *b, const cci_stat_row *r, int64_t v)
{
    char h[24];
    if (r->bytes)
        cci__human(v, h, sizeof h);
    else
        snprintf(h, sizeof h, "%lld", (long long)v);
    cci__sb_printf(b, " %*s |", CELL_W - 2, h);
}

static void stat_line(cci_sb *b, const char *label, const cci_stat_row *r, const cci_stat *st)
{
    cci__sb_printf(b, "| %-*s|", LABEL_W - 1, label);
    cell(b, r, st->current);
    cell(b, r, st->peak);
    cell(b, r, st->allocated);
    cell(b, r, st->freed);
    cci__sb_putc(b, '\n', 1);
}

static void summary_table(cci_sb *b, const cci_report_device *d)
{
    char line[96];
    rule(b, '=');
    snprintf(line, sizeof line, "libccinterpose memory summary, device ID %d", d->device);
    cci__sb_putc(b, '|', 1);
    centered(b, line, INNER);
    cci__sb_puts(b, "|\n");
    rule(b, '-');
    snprintf(line, sizeof line, "CUDA OOMs: %llu", (unsigned long long)d->stats.num_ooms);
    cci__sb_putc(b, '|', 1);
    centered(b, line, 36);
    cci__sb_putc(b, '|', 1);
    snprintf(line, sizeof line, "cudaMalloc retries: %llu", (unsigned long long)d->stats.num_alloc_retries);
    centered(b, line, INNER - 37);
    cci__sb_puts(b, "|\n");
    rule(b, '=');
    cci__sb_printf(b, "|%-*s|", LABEL_W, "        Metric");
    static const char *const heads[] = {"Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"};
    for (int i = 0; i < 4; i++) {
        centered(b, heads[i], CELL_W);
        cci__sb_putc(b, '|', 1);
    }
    cci__sb_putc(b, '\n', 1);
    for (size_t i = 0; i < cci__stat_nrows; i++) {
        const cci_stat_row *r = &cci__stat_rows[i];
        rule(b, '-');
        stat_line(b, r->label, r, cci__stat_at(&d->stats, r, CCI_POOL_ALL));
        if (r->per_pool) {
            stat_line(b, "      from large pool", r, cci__stat_at(&d->stats, r, CCI_POOL_LARGE));
            stat_line(b, "      from small pool", r, cci__stat_at(&d->stats, r, CCI_POOL_SMALL));
        }
    }
    rule(b, '=');
}

// ---- fragmentation ---------------------------------------------------------------------------

static void histogram(cci_sb *b, const cci_report_frag *f, const char *when)
{
    cci__sb_printf(b, "\nFree block sizes %s:\n", when);
    int lo = -1, hi = -1;
    uint64_t most = 0;
    for (int k = 0; k < CCI_REPORT_HIST_BUCKETS; k++) {
        if (!f->hist_count[k])
            continue;
        if (lo < 0)
            lo = k;
        hi = k;
        if (f->hist_bytes[k] > most)
            most = f->hist_bytes[k];
    }
    if (lo < 0) {
        cci__sb_puts(b, "  (no free blocks)\n");
        return;
    }
    for (int k = lo; k <= hi; k++) {
        char h1[16], h2[16], h3[16], range[40];
        cci__human((int64_t)1 << k, h1, sizeof h1);
        cci__human(k < 62 ? (int64_t)1 << (k + 1) : INT64_MAX, h2, sizeof h2);
        snprintf(range, sizeof range, "[%s, %s)", h1, h2);
        size_t bar = most ? (size_t)((f->hist_bytes[k] * 40 + most - 1) / most) : 0;
        cci__sb_printf(b, "  %-24s %6llu block%s %11s", range, (unsigned long long)f->hist_count[k],
                       f->hist_count[k] == 1 ? " " : "s", cci__human((int64_t)f->hist_bytes[k], h3, sizeof h3));
        if (bar) {
            cci__sb_putc(b, ' ', 2);
            cci__sb_putc(b, '#', bar);
        }
        cci__sb_putc(b, '\n', 1);
    }
}

// Each column of the bar covers size/BAR_W bytes and shows the state holding most of them.
static void segment_bar(cci_sb *b, const cci_segment_desc *sd)
{
    static const char marks[4] = {'.', '#', '~', ' '};  // ' ': unmapped address space (VMM)
    size_t j = 0;
    for (uint64_t c = 0; c < BAR_W; c++) {
        uint64_t lo = sd->addr + sd->size * c / BAR_W, hi = sd->addr + sd->size * (c + 1) / BAR_W;
        uint64_t by[4] = {0, 0, 0, 0};
        while (j < sd->nblocks && sd->blocks[j].addr + sd->blocks[j].size <= lo)
            j++;
        for (size_t k = j; k < sd->nblocks && sd->blocks[k].addr < hi; k++) {
            uint64_t s = sd->blocks[k].addr > lo ? sd->blocks[k].addr : lo;
            uint64_t e = sd->blocks[k].addr + sd->blocks[k].size;
            e = e < hi ? e : hi;
            int st = sd->blocks[k].state;
            by[st >= 0 && st <= CCI_REPORT_BLOCK_UNMAPPED ? st : 0] += e > s ? e - s : 0;
        }
        int best = 1;  // ties go to allocated, then waiting, so small live blocks stay visible
        if (by[2] > by[best])
            best = 2;
        if (by[0] > by[best])
            best = 0;
        if (by[3] > by[best])
            best = 3;
        cci__sb_putc(b, marks[best], 1);
    }
}

static void segment_map(cci_sb *b, const cci_layout *l, const char *when)
{
    size_t idx[MAP_SEGMENTS];
    size_t n = cci__largest_segments(l, idx, MAP_SEGMENTS);
    cci__sb_printf(b, "\nLargest segments %s (%zu of %zu; '#' allocated, '.' free, '~' waiting):\n", when, n,
                   l->nsegments);
    for (size_t i = 0; i < n; i++) {
        const cci_segment_desc *sd = &l->segments[idx[i]];
        uint64_t used = 0, free_b = 0, unmapped = 0;
        for (size_t k = 0; k < sd->nblocks; k++) {
            if (sd->blocks[k].state == 0)
                free_b += sd->blocks[k].size;
            else if (sd->blocks[k].state == CCI_REPORT_BLOCK_UNMAPPED)
                unmapped += sd->blocks[k].size;
            else
                used += sd->blocks[k].size;
        }
        char h1[16], h2[16], h3[16];
        cci__sb_printf(b, "  %2zu. %10s %-5s |", i + 1, cci__human((int64_t)sd->size, h1, sizeof h1),
                       sd->small_pool ? "small" : "large");
        segment_bar(b, sd);
        cci__sb_printf(b, "| %s used, %s free, %zu block%s", cci__human((int64_t)used, h2, sizeof h2),
                       cci__human((int64_t)free_b, h3, sizeof h3), sd->nblocks, sd->nblocks == 1 ? "" : "s");
        if (unmapped) {
            char h4[16];
            cci__sb_printf(b, ", %s unmapped (' ')", cci__human((int64_t)unmapped, h4, sizeof h4));
        }
        if (sd->stream)
            cci__sb_printf(b, ", stream %#llx", (unsigned long long)sd->stream);
        cci__sb_putc(b, '\n', 1);
    }
}

// Greedy word wrap, so advice paragraphs stay readable in a terminal and in a log file.
static void wrapped(cci_sb *b, const char *first, const char *indent, const char *text)
{
    cci__sb_puts(b, first);
    size_t col = strlen(first), ind = strlen(indent);
    int first_word = 1;
    for (const char *p = text; *p;) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        const char *w = p;
        p += cci_tuner_word_len(p);  // a number keeps its unit on its line
        size_t len = (size_t)(p - w);
        if (!first_word && col + 1 + len > WRAP) {
            cci__sb_putc(b, '\n', 1);
            cci__sb_puts(b, indent);
            col = ind;
        } else if (!first_word) {
            cci__sb_putc(b, ' ', 1);
            col++;
        }
        cci__sb_printf(b, "%.*s", (int)len, w);
        col += len;
        first_word = 0;
    }
    cci__sb_putc(b, '\n', 1);
}

static void fragmentation(cci_sb *b, const cci_report_device *d)
{
    char title[48];
    snprintf(title, sizeof title, "Fragmentation, device %d", d->device);
    cci__sb_printf(b, "\n%-46s %16s %16s\n", title, "at peak reserved", cci__when(d));
    for (size_t i = 0; i < cci__frag_nrows; i++) {
        char v[2][24];
        const cci_frag_row *r = &cci__frag_rows[i];
        cci__sb_printf(b, "  %-44s %16s %16s\n", r->label, cci__frag_value(&d->frag_peak, r, v[0], sizeof v[0]),
                       cci__frag_value(&d->frag_now, r, v[1], sizeof v[1]));
    }
    if (!d->have_peak)
        cci__sb_puts(b, "  (no layout at peak reserved: peak tracking was off)\n");
    if (d->have_peak) {
        histogram(b, &d->frag_peak, "at peak reserved");
        segment_map(b, &d->peak, "at peak reserved");
    }
    histogram(b, &d->frag_now, cci__when(d));
    segment_map(b, &d->now, cci__when(d));
    if (d->have_timeline && d->misses.count) {
        char h1[16], h2[16], h3[16];
        cci__sb_printf(b, "\nFragmentation misses: %llu request(s) of %s to %s needed a new segment (%s in all)\n"
                       "  although the pool's cached free memory added up to the request.\n",
                       (unsigned long long)d->misses.count, cci__human((int64_t)d->misses.min_request, h2, sizeof h2),
                       cci__human((int64_t)d->misses.max_request, h3, sizeof h3),
                       cci__human((int64_t)d->misses.segment_bytes, h1, sizeof h1));
    }
}

void cci__report_text(cci_sb *b, const cci_report_snapshot *s)
{
    cci__sb_printf(b, "libccinterpose report: program %s, pid %ld, rank %d, host %s, %s%s\n", s->program, s->pid,
                   s->rank, s->host, s->time_utc,
                   s->ndevices && s->devices[0].live ? " (live dump: the program was still running)" : "");
    if (s->ndevices && *s->devices[0].device_kind)
        cci__sb_printf(b, "Device: %s\n", s->devices[0].device_kind);
    cci__sb_putc(b, '\n', 1);
    for (int i = 0; i < s->ndevices; i++) {
        const cci_report_device *d = &s->devices[i];
        if (i)
            cci__sb_putc(b, '\n', 1);
        summary_table(b, d);
        char h[16];
        char conf[2 * sizeof d->config];
        size_t o = 0;
        // ", " between keys lets the line wrap; the grammar ignores the space, so it still pastes.
        for (const char *c = d->config; *c && o + 3 < sizeof conf; c++) {
            conf[o++] = *c;
            if (*c == ',')
                conf[o++] = ' ';
        }
        conf[o] = '\0';
        wrapped(b, "Configuration: ", "  ", conf);
        cci__sb_printf(b, "Device capacity: %s%s%s\n",
                       d->stats.device_capacity ? cci__human((int64_t)d->stats.device_capacity, h, sizeof h)
                                                : "unknown",
                       *d->device_kind ? ", of a " : "", d->device_kind);
        // Managed memory is CUDA's (never cached): its own line, only for programs that made some.
        if (d->stats.managed_allocations.allocated) {
            char now[16], peak[16];
            cci__sb_printf(b, "Managed memory (passed to CUDA, never cached): %lld allocation%s, %lld live "
                           "(%s), peak %s\n", (long long)d->stats.managed_allocations.allocated,
                           d->stats.managed_allocations.allocated == 1 ? "" : "s",
                           (long long)d->stats.managed_allocations.current,
                           cci__human(d->stats.managed_bytes.current, now, sizeof now),
                           cci__human(d->stats.managed_bytes.peak, peak, sizeof peak));
        }
        // Likewise for allocations from the program's own memory pools, with those pools' figures.
        if (d->stats.pool_allocations.allocated) {
            char now[16], peak[16], res[16], res_high[16], used[16], used_high[16];
            const cci_stats *st = &d->stats;
            cci__sb_printf(b, "Other memory pools (passed to CUDA, never cached): %lld allocation%s, %lld live (%s), "
                           "peak %s; the pools hold %s (high %s) and use %s (high %s)\n",
                           (long long)st->pool_allocations.allocated, st->pool_allocations.allocated == 1 ? "" : "s",
                           (long long)st->pool_allocations.current, cci__human(st->pool_bytes.current, now, sizeof now),
                           cci__human(st->pool_bytes.peak, peak, sizeof peak),
                           cci__human((int64_t)st->pool_reserved_bytes, res, sizeof res),
                           cci__human((int64_t)st->pool_reserved_high, res_high, sizeof res_high),
                           cci__human((int64_t)st->pool_used_bytes, used, sizeof used),
                           cci__human((int64_t)st->pool_used_high, used_high, sizeof used_high));
        }
        // Only programs that used fenced frees get the line, so every other report reads as before.
        if (d->stats.num_fence_records) {
            cci__sb_printf(b, "Fenced frees: %llu fence%s recorded, the host waited for %llu",
                           (unsigned long long)d->stats.num_fence_records, d->stats.num_fence_records == 1 ? "" : "s",
                           (unsigned long long)d->stats.num_fence_waits);
            if (d->stats.num_fence_catch_ups)  // (backends that keep one order outstanding)
                cci__sb_printf(b, " and %llu time%s for the GPU to reach its last order",
                               (unsigned long long)d->stats.num_fence_catch_ups,
                               d->stats.num_fence_catch_ups == 1 ? "" : "s");
            cci__sb_printf(b, "\n");
            // The host time the backend measured (none on a simulated device): on CUDA the
            // fences of the whole process, every device's.
            const cci_stats *st = &d->stats;
            if (st->fence_record_ns || st->fence_query_ns || st->fence_wait_ns)
                cci__sb_printf(b, "  Host time in fences (the process's): %llu records %.1f ms, %llu queries "
                               "%.1f ms, %llu waits blocked %.1f ms\n", (unsigned long long)st->fence_record_calls,
                               st->fence_record_ns / 1e6, (unsigned long long)st->fence_query_calls,
                               st->fence_query_ns / 1e6, (unsigned long long)st->fence_wait_calls,
                               st->fence_wait_ns / 1e6);
        }
        fragmentation(b, d);
        cci__vmm_text(b, d);
        cci__whatif_text(b, d);
        cci__holders_text(b, d);
        cci__leaks_text(b, d);
        cci__sb_printf(b, "\nAdvice, device %d:\n", d->device);
        for (size_t k = 0; k < d->nadvice; k++)
            wrapped(b, "  * ", "    ", d->advice[k].text);
    }
    cci__process_text(b, s);
}
