// SPDX-License-Identifier: MIT
// The JSON report: every statistic under its torch.cuda.memory_stats() key, so scripts written for
// PyTorch read ours unchanged, then the fragmentation figures, both layouts, the timeline and the
// advice. Numbers are integers (bytes) except the ratio; addresses fit a double exactly (< 2^53).
#include <stdio.h>

#include "report_holders.h"
#include "report_impl.h"
#include "stats_list.h"

static void key(cci_sb *b, int *first, const char *k)
{
    cci__sb_puts(b, *first ? "\n      " : ",\n      ");
    *first = 0;
    cci__sb_json_str(b, k);
    cci__sb_puts(b, ": ");
}

// The event counts, from the core's one list: memory_stats() keys go under "stats" (whose key set is
// exactly PyTorch's), ours alone under "counters".
#define COUNTER(field, torch) {#field, offsetof(cci_stats, field), torch},
static const struct {
    const char *key;
    size_t offset;
    int torch;
} counters[] = {CCI_STAT_COUNTERS(COUNTER)};
#undef COUNTER

static uint64_t counter_at(const cci_stats *st, size_t i)
{
    return *(const uint64_t *)((const char *)st + counters[i].offset);
}

static void own_counters(cci_sb *b, const cci_stats *st)
{
    cci__sb_puts(b, "{");
    int first = 1;
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        if (counters[i].torch)
            continue;
        cci__sb_printf(b, "%s\"%s\": %llu", first ? "" : ", ", counters[i].key,
                       (unsigned long long)counter_at(st, i));
        first = 0;
    }
    cci__sb_puts(b, "}");
}

// What the device's calls cost the host, from the core's list (CCI_STAT_COSTS): the device's own
// under "costs", those the backend counts for the whole process (the CUDA fences: the same in
// every device's entry) under "process_costs".
#define COST(field, scope) {#field, offsetof(cci_stats, field), scope},
static const struct {
    const char *key;
    size_t offset;
    int scope;
} costs[] = {CCI_STAT_COSTS(COST)};
#undef COST

static void costs_of_scope(cci_sb *b, const cci_stats *st, int scope)
{
    cci__sb_puts(b, "{");
    int first = 1;
    for (size_t i = 0; i < sizeof costs / sizeof costs[0]; i++) {
        if (costs[i].scope != scope)
            continue;
        cci__sb_printf(b, "%s\"%s\": %llu", first ? "" : ", ", costs[i].key,
                       (unsigned long long)*(const uint64_t *)((const char *)st + costs[i].offset));
        first = 0;
    }
    cci__sb_puts(b, "}");
}

static void stats(cci_sb *b, const cci_stats *st)
{
    static const char *const fields[] = {"current", "peak", "allocated", "freed"};
    int first = 1;
    char k[96];
    cci__sb_puts(b, "{");
    for (size_t i = 0; i < cci__stat_nrows; i++) {
        const cci_stat_row *r = &cci__stat_rows[i];
        for (int p = 0; p < (r->per_pool ? CCI_POOL_KINDS : 1); p++) {
            const cci_stat *v = cci__stat_at(st, r, p);
            const int64_t vals[4] = {v->current, v->peak, v->allocated, v->freed};
            for (int f = 0; f < 4; f++) {
                if (r->per_pool)
                    snprintf(k, sizeof k, "%s.%s.%s", r->key, cci__pool_keys[p], fields[f]);
                else
                    snprintf(k, sizeof k, "%s.%s", r->key, fields[f]);
                key(b, &first, k);
                cci__sb_printf(b, "%lld", (long long)vals[f]);
            }
        }
    }
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        if (!counters[i].torch)
            continue;
        key(b, &first, counters[i].key);
        cci__sb_printf(b, "%llu", (unsigned long long)counter_at(st, i));
    }
    // PyTorch stores "no limit" as SIZE_MAX in a signed 64-bit field, which Python sees as -1.
    key(b, &first, "max_split_size");
    cci__sb_printf(b, "%lld", st->max_split_size == UINT64_MAX ? -1LL : (long long)st->max_split_size);
    cci__sb_puts(b, "\n    }");
}

static void frag(cci_sb *b, const cci_report_frag *f)
{
    if (!f->valid) {
        cci__sb_puts(b, "null");
        return;
    }
    cci__sb_puts(b, "{");
    for (size_t i = 0; i < cci__frag_nrows; i++) {
        const cci_frag_row *r = &cci__frag_rows[i];
        const char *p = (const char *)f + r->offset;
        cci__sb_printf(b, "%s\"%s\": ", i ? ", " : "", r->key);
        if (r->kind == CCI_FIG_RATIO) {
            // Integer arithmetic, not %f: a host program's LC_NUMERIC could turn the point into a comma.
            double v = *(const double *)p;
            unsigned long long micro = (unsigned long long)((v < 0 ? 0 : v > 1 ? 1 : v) * 1e6 + 0.5);
            cci__sb_printf(b, "%llu.%06llu", micro / 1000000, micro % 1000000);
        } else {
            cci__sb_printf(b, "%llu", (unsigned long long)*(const uint64_t *)p);
        }
    }
    cci__sb_puts(b, ",\n        \"free_block_histogram\": [");
    int first = 1;
    for (int k = 0; k < CCI_REPORT_HIST_BUCKETS; k++) {
        if (!f->hist_count[k])
            continue;
        cci__sb_printf(b, "%s{\"min\": %llu, \"count\": %llu, \"bytes\": %llu}", first ? "" : ", ",
                       1ULL << k, (unsigned long long)f->hist_count[k], (unsigned long long)f->hist_bytes[k]);
        first = 0;
    }
    cci__sb_puts(b, "]}");
}

static void layout(cci_sb *b, const cci_layout *l, int have)
{
    if (!have) {
        cci__sb_puts(b, "null");
        return;
    }
    cci__sb_puts(b, "[");
    for (size_t i = 0; i < l->nsegments; i++) {
        const cci_segment_desc *sd = &l->segments[i];
        cci__sb_printf(b, "%s\n        {\"address\": %llu, \"size\": %llu, \"stream\": %llu, \"pool\": \"%s\", "
                       "\"blocks\": [",
                       i ? "," : "", (unsigned long long)sd->addr, (unsigned long long)sd->size,
                       (unsigned long long)sd->stream, sd->small_pool ? "small" : "large");
        for (size_t k = 0; k < sd->nblocks; k++) {
            const cci_block_desc *bd = &sd->blocks[k];
            cci__sb_printf(b, "%s[%llu, %llu, %d, %llu]", k ? ", " : "", (unsigned long long)(bd->addr - sd->addr),
                           (unsigned long long)bd->size, bd->state, (unsigned long long)bd->requested);
        }
        cci__sb_puts(b, "]}");
    }
    cci__sb_puts(b, l->nsegments ? "\n      ]" : "]");
}

// Memory handed out past the pools (managed memory, other pools' allocations and those pools'
// figures), from the core's lists (CCI_STAT_OUTSIDE, CCI_STAT_OUTSIDE_FIGURES).
static void outside(cci_sb *b, const cci_stats *st)
{
    cci__sb_puts(b, "{");
    int first = 1;
#define OUTSIDE(field)                                                                             \
    cci__sb_printf(b, "%s\"" #field "\": {\"current\": %lld, \"peak\": %lld, \"allocated\": %lld, "     \
                   "\"freed\": %lld}", first ? "" : ", ", (long long)st->field.current,                \
                   (long long)st->field.peak, (long long)st->field.allocated, (long long)st->field.freed); \
    first = 0;
    CCI_STAT_OUTSIDE(OUTSIDE)
#undef OUTSIDE
#define FIGURE(field) cci__sb_printf(b, ", \"" #field "\": %llu", (unsigned long long)st->field);
    CCI_STAT_OUTSIDE_FIGURES(FIGURE)
#undef FIGURE
    cci__sb_puts(b, "}");
}

static void device(cci_sb *b, const cci_report_device *d)
{
    cci__sb_printf(b, "  {\n    \"device\": %d,\n    \"config\": ", d->device);
    cci__sb_json_str(b, d->config);
    cci__sb_puts(b, ",\n    \"stats\": ");
    stats(b, &d->stats);
    cci__sb_puts(b, ",\n    \"counters\": ");
    own_counters(b, &d->stats);
    cci__sb_puts(b, ",\n    \"costs\": ");
    costs_of_scope(b, &d->stats, CCI_COST_DEVICE);
    cci__sb_puts(b, ",\n    \"process_costs\": ");
    costs_of_scope(b, &d->stats, CCI_COST_PROCESS);
    cci__sb_puts(b, ",\n    \"outside\": ");
    outside(b, &d->stats);
    cci__sb_printf(b, ",\n    \"largest_free_block\": %llu,\n    \"device_capacity\": %llu,\n",
                   (unsigned long long)d->stats.largest_free_block, (unsigned long long)d->stats.device_capacity);
    // "" on a CUDA device; what the device is otherwise (a simulated one), as the text says it.
    cci__sb_printf(b, "    \"simulated_device\": %s,\n    \"device_kind\": ", *d->device_kind ? "true" : "false");
    cci__sb_json_str(b, d->device_kind);
    cci__sb_puts(b, ",\n");
    cci__sb_puts(b, "    \"fragmentation\": {\n      \"at_peak\": ");
    frag(b, &d->frag_peak);
    cci__sb_puts(b, ",\n      \"at_exit\": ");
    frag(b, &d->frag_now);
    const cci_report_misses *m = &d->misses;
    cci__sb_printf(b, ",\n      \"misses\": {\"count\": %llu, \"segment_bytes\": %llu, \"min_request\": %llu, "
                   "\"max_request\": %llu, \"large_count\": %llu, \"large_segment_bytes\": %llu, "
                   "\"large_min_request\": %llu}\n    },\n",
                   (unsigned long long)m->count, (unsigned long long)m->segment_bytes,
                   (unsigned long long)m->min_request, (unsigned long long)m->max_request,
                   (unsigned long long)m->large_count, (unsigned long long)m->large_segment_bytes,
                   (unsigned long long)m->large_min_request);
    cci__sb_puts(b, "    \"segments\": {\n      \"block_fields\": [\"offset\", \"size\", \"state\", \"requested\"],\n"
                    "      \"block_states\": [\"free\", \"allocated\", \"waiting\", \"unmapped\"],\n      \"at_peak\": ");
    layout(b, &d->peak, d->have_peak);
    cci__sb_puts(b, ",\n      \"at_exit\": ");
    layout(b, &d->now, 1);
    cci__sb_printf(b, "\n    },\n    \"timeline\": {\"clock\": \"%s\", "
                   "\"fields\": [\"t\", \"allocated\", \"reserved\", \"allocated_max\", \"reserved_max\"], "
                   "\"samples\": [",
                   d->clock == CCI_TIMELINE_CLOCK_EVENTS ? "events" : "us");
    for (size_t i = 0; i < d->nsamples; i++) {
        const cci_timeline_sample *t = &d->samples[i];
        cci__sb_printf(b, "%s[%llu, %llu, %llu, %llu, %llu]", i ? (i % 4 ? ", " : ",\n      ") : "",
                       (unsigned long long)t->t, (unsigned long long)t->allocated, (unsigned long long)t->reserved,
                       (unsigned long long)t->allocated_max, (unsigned long long)t->reserved_max);
    }
    cci__sb_puts(b, "]},\n");
    cci__holders_json(b, d);
    cci__sb_puts(b, "    ");
    cci__whatif_json(b, d);
    cci__vmm_json(b, d);
    cci__sb_puts(b, "\"advice\": [");
    for (size_t k = 0; k < d->nadvice; k++) {
        cci__sb_printf(b, "%s\n      {\"rule\": ", k ? "," : "");
        cci__sb_json_str(b, d->advice[k].rule);
        cci__sb_puts(b, ", \"text\": ");
        cci__sb_json_str(b, d->advice[k].text);
        cci__sb_puts(b, "}");
    }
    cci__sb_puts(b, d->nadvice ? "\n    ]\n  }" : "]\n  }");
}

void cci__report_json(cci_sb *b, const cci_report_snapshot *s)
{
    cci__sb_puts(b, "{\n  \"report\": \"libccinterpose\",\n  \"version\": 1,\n  \"process\": {\"program\": ");
    cci__sb_json_str(b, s->program);
    cci__sb_printf(b, ", \"pid\": %ld, \"rank\": %d, \"host\": ", s->pid, s->rank);
    cci__sb_json_str(b, s->host);
    cci__sb_puts(b, ", \"time_utc\": ");
    cci__sb_json_str(b, s->time_utc);
    // "live": a dump while the program ran; its "at_exit" figures are those at the time of the dump.
    cci__sb_printf(b, ", \"taken\": \"%s\"", s->ndevices && s->devices[0].live ? "live" : "exit");
    cci__sb_puts(b, "},\n  \"devices\": [\n");
    for (int i = 0; i < s->ndevices; i++) {
        device(b, &s->devices[i]);
        cci__sb_puts(b, i + 1 < s->ndevices ? ",\n" : "\n");
    }
    cci__sb_puts(b, "  ]");
    cci__process_json(b, s);
    cci__sb_puts(b, "\n}\n");
}
