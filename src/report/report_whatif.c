// SPDX-License-Identifier: MIT
// The sections the measured advice adds to each form of the report: the what-if table (the run's
// own history replayed under other configurations; the preload measures it, see report.h).
// Each printer calls one function of this file, so the three forms stay in step.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_impl.h"

// Rows shown in the text and HTML tables besides the current one: enough to compare the best
// few, short enough to read. JSON lists every replayed configuration.
#define SHOWN 8

static double mib(uint64_t b) { return (double)b / (double)CCI_MIB; }

// Signed percentage with one decimal, by integer arithmetic (a host program's LC_NUMERIC must not
// turn the point into a comma): "-12.3", "+4.0".
static const char *pct(uint64_t now, uint64_t base, char *buf, size_t len)
{
    if (!base) {
        snprintf(buf, len, "-");
        return buf;
    }
    int neg = now < base;
    uint64_t d = neg ? base - now : now - base;
    unsigned long long tenths = (unsigned long long)((d * 1000 + base / 2) / base);
    snprintf(buf, len, "%c%llu.%llu", neg ? '-' : '+', tenths / 10, tenths % 10);
    return buf;
}

// "1.23": seconds with two decimals, locale-proof.
static const char *secs(double s, char *buf, size_t len)
{
    unsigned long long c = (unsigned long long)(s * 100.0 + 0.5);
    snprintf(buf, len, "%llu.%02llu", c / 100, c % 100);
    return buf;
}

double cci__run_seconds(const cci_report_device *d)
{
    if (d->clock != CCI_TIMELINE_CLOCK_MONOTONIC || d->nsamples < 2)
        return 0.0;
    return (double)(d->samples[d->nsamples - 1].t - d->samples[0].t) / 1e6;
}

void cci__whatif_tuner_row(const cci_report_whatif_row *r, cci_tuner_row *t)
{
    int keys = *r->conf ? 1 : 0;
    for (const char *p = r->conf; *p; p++)
        keys += *p == ',';
    *t = (cci_tuner_row){.conf = r->conf, .nkeys = keys, .num_ooms = r->num_ooms, .peak_reserved = r->peak_reserved,
                         .calls = r->calls};
}

const cci_report_whatif_row *cci__whatif_recommended(const cci_report_device *d)
{
    const cci_report_whatif *w = &d->whatif;
    cci_tuner_row *t = w->measured ? malloc((w->nrows + 1) * sizeof *t) : NULL;
    if (!t)
        return &w->current;
    cci__whatif_tuner_row(&w->current, &t[0]);
    for (size_t i = 0; i < w->nrows; i++)
        cci__whatif_tuner_row(&w->rows[i], &t[i + 1]);
    size_t k = cci_tuner_choose(t, w->nrows + 1, 0, cci__run_seconds(d));
    free(t);
    return k == 0 ? &w->current : &w->rows[k - 1];
}

// ---- text ----------------------------------------------------------------------------------

// "12.3": the estimated call time in milliseconds, one decimal, locale-proof.
static const char *call_ms(const cci_report_whatif_row *r, char *buf, size_t len)
{
    cci_tuner_row t;
    cci__whatif_tuner_row(r, &t);
    unsigned long long tenths = (unsigned long long)(cci_tuner_call_us(&t.calls) / 100.0 + 0.5);
    snprintf(buf, len, "%llu.%llu", tenths / 10, tenths % 10);
    return buf;
}

static unsigned long long call_count(const cci_report_whatif_row *r)
{
    cci_tuner_row t;
    cci__whatif_tuner_row(r, &t);
    return (unsigned long long)cci_tuner_call_count(&t.calls);
}

static void text_row(cci_sb *b, const cci_report_whatif *w, const cci_report_whatif_row *r, int current,
                     const cci_report_whatif_row *rec)
{
    char p[32], q[40], ms[32];
    snprintf(q, sizeof q, "%s %%", pct(r->peak_reserved, w->current.peak_reserved, p, sizeof p));
    cci__sb_printf(b, "  %17.1f  %10s  %13llu  %12llu  %12s  %4llu  %s%s%s\n", mib(r->peak_reserved),
                   current ? "current" : q, (unsigned long long)r->num_device_alloc, call_count(r),
                   call_ms(r, ms, sizeof ms), (unsigned long long)r->num_ooms, *r->conf ? r->conf : "(defaults)",
                   current ? "  <- this run's setting" : "", r == rec ? "  <- recommended" : "");
}

// The rule the recommendation follows, in the tuner's words.
static void rule_line(cci_sb *b, const cci_report_device *d)
{
    char rule[1024];
    cci_tuner_rule_text(rule, sizeof rule, cci__run_seconds(d), "this run's setting");
    // Wrapped at 100 columns between words, as the advice is.
    size_t col = 3;
    cci__sb_puts(b, "  (");
    for (const char *p = rule; *p;) {
        size_t w = cci_tuner_word_len(p);
        if (col > 3 && col + 1 + w > 100) {
            cci__sb_puts(b, "\n   ");
            col = 3;
        } else if (col > 3) {
            cci__sb_putc(b, ' ', 1);
            col++;
        }
        char word[256];
        snprintf(word, sizeof word, "%.*s", (int)(w < 255 ? w : 255), p);
        cci__sb_puts(b, word);
        col += w;
        p += w;
        while (*p == ' ')
            p++;
    }
    cci__sb_puts(b, ")\n");
}

void cci__whatif_text(cci_sb *b, const cci_report_device *d)
{
    const cci_report_whatif *w = &d->whatif;
    if (!w->measured) {
        if (*w->note)
            cci__sb_printf(b, "\nWhat-ifs, device %d: not measured: %s\n", d->device, w->note);
        return;
    }
    char s1[24], s2[24];
    cci__sb_printf(b, "\nWhat-ifs, device %d: this run's %llu allocation events replayed under %zu of %zu "
                   "configurations in %s s (bound %s s)%s:\n",
                   d->device, (unsigned long long)w->events, w->replayed, w->planned, secs(w->seconds, s1, sizeof s1),
                   secs(w->bound_seconds, s2, sizeof s2), w->replayed < w->planned ? ", cut short by the bound" : "");
    if (w->events_dropped)
        cci__sb_printf(b, "  (history cap of %llu events reached: the last %llu events are not replayed)\n",
                       (unsigned long long)w->history_cap, (unsigned long long)w->events_dropped);
    cci__sb_puts(b, "  peak reserved MiB  vs current  device allocs  device calls  est. call ms  OOMs  CCI_ALLOC_CONF\n");
    const cci_report_whatif_row *rec = cci__whatif_recommended(d);
    int current_shown = 0, rec_shown = rec == &w->current;
    for (size_t i = 0; i < w->nrows && i < SHOWN; i++) {
        if (!current_shown && w->rows[i].peak_reserved >= w->current.peak_reserved) {
            text_row(b, w, &w->current, 1, rec);
            current_shown = 1;
        }
        text_row(b, w, &w->rows[i], 0, rec);
        rec_shown |= &w->rows[i] == rec;
    }
    if (!current_shown)
        text_row(b, w, &w->current, 1, rec);
    if (!rec_shown)
        text_row(b, w, rec, 0, rec);
    rule_line(b, d);
}

// ---- JSON ----------------------------------------------------------------------------------

static void json_row(cci_sb *b, const cci_report_whatif *w, const cci_report_whatif_row *r)
{
    cci__sb_puts(b, "{\"conf\": ");
    cci__sb_json_str(b, r->conf);
    cci__sb_printf(b, ", \"peak_reserved_bytes\": %llu, \"peak_allocated_bytes\": %llu, \"num_device_alloc\": %llu, "
                   "\"num_ooms\": %llu, \"delta\": %lld, \"device_calls\": %llu, \"estimated_call_ms\": ",
                   (unsigned long long)r->peak_reserved, (unsigned long long)r->peak_allocated,
                   (unsigned long long)r->num_device_alloc, (unsigned long long)r->num_ooms,
                   (long long)r->peak_reserved - (long long)w->current.peak_reserved, call_count(r));
    char ms[32];
    cci__sb_printf(b, "%s}", call_ms(r, ms, sizeof ms));
}

/// `"what_if": [...], "what_if_replay": {...}` (with a trailing ",\n    "): the replayed
/// configurations, ranked (delta = peak reserved minus the current one's, bytes), and how the
/// replay went.
void cci__whatif_json(cci_sb *b, const cci_report_device *d)
{
    const cci_report_whatif *w = &d->whatif;
    cci__sb_puts(b, "\"what_if\": [");
    for (size_t i = 0; w->measured && i < w->nrows; i++) {
        cci__sb_puts(b, i ? ",\n      " : "\n      ");
        json_row(b, w, &w->rows[i]);
    }
    cci__sb_puts(b, w->measured && w->nrows ? "\n    ],\n    " : "],\n    ");
    char s1[24], s2[24];
    cci__sb_printf(b, "\"what_if_replay\": {\"measured\": %s, \"note\": ", w->measured ? "true" : "false");
    cci__sb_json_str(b, w->note);
    cci__sb_printf(b, ", \"events\": %llu, \"events_dropped\": %llu, \"history_cap\": %llu, \"capacity_bytes\": %llu, "
                   "\"seconds\": %s, \"bound_seconds\": %s, \"configurations_planned\": %zu, "
                   "\"configurations_replayed\": %zu, \"current\": ",
                   (unsigned long long)w->events, (unsigned long long)w->events_dropped,
                   (unsigned long long)w->history_cap, (unsigned long long)w->capacity,
                   secs(w->seconds, s1, sizeof s1), secs(w->bound_seconds, s2, sizeof s2), w->planned, w->replayed);
    if (w->measured)
        json_row(b, w, &w->current);
    else
        cci__sb_puts(b, "null");
    cci__sb_puts(b, ", \"recommended\": ");
    if (w->measured)
        json_row(b, w, cci__whatif_recommended(d));
    else
        cci__sb_puts(b, "null");
    char rule[1024];
    cci_tuner_rule_text(rule, sizeof rule, cci__run_seconds(d), "this run's setting");
    cci__sb_puts(b, ", \"rule\": ");
    cci__sb_json_str(b, w->measured ? rule : "");
    cci__sb_puts(b, "},\n    ");
}

// ---- HTML ----------------------------------------------------------------------------------

static void html_row(cci_sb *b, const cci_report_whatif *w, const cci_report_whatif_row *r, int current,
                     const cci_report_whatif_row *rec)
{
    char p[32], ms[32];
    cci__sb_printf(b, "<tr%s><td><code>", current ? " class=\"current\"" : "");
    cci__sb_html(b, *r->conf ? r->conf : "(defaults)");
    cci__sb_printf(b, "</code>%s%s</td><td>%.1f</td><td>%s</td><td>%llu</td><td>%llu</td><td>%s</td><td>%llu</td></tr>\n",
                   current ? " (this run)" : "", r == rec ? " (recommended)" : "", mib(r->peak_reserved),
                   current ? "current" : pct(r->peak_reserved, w->current.peak_reserved, p, sizeof p),
                   (unsigned long long)r->num_device_alloc, call_count(r), call_ms(r, ms, sizeof ms),
                   (unsigned long long)r->num_ooms);
}

void cci__whatif_html(cci_sb *b, const cci_report_device *d)
{
    const cci_report_whatif *w = &d->whatif;
    if (!w->measured) {
        if (*w->note) {
            cci__sb_printf(b, "<h3>What-ifs</h3>\n<p class=\"proc\" id=\"whatif-%d\">Not measured: ", d->device);
            cci__sb_html(b, w->note);
            cci__sb_puts(b, "</p>\n");
        }
        return;
    }
    char s1[24], s2[24];
    cci__sb_printf(b, "<h3>What-ifs: this run replayed under other settings</h3>\n<p class=\"proc\">%llu allocation "
                   "events replayed under %zu of %zu configurations in %s s (bound %s s)%s.</p>\n",
                   (unsigned long long)w->events, w->replayed, w->planned, secs(w->seconds, s1, sizeof s1),
                   secs(w->bound_seconds, s2, sizeof s2), w->replayed < w->planned ? ", cut short by the bound" : "");
    cci__sb_printf(b, "<table class=\"whatif\" id=\"whatif-%d\"><tr><th>CCI_ALLOC_CONF</th><th>peak reserved MiB</th>"
                   "<th>vs current %%</th><th>device allocs</th><th>device calls</th><th>est. call ms</th><th>OOMs</th></tr>\n",
                   d->device);
    const cci_report_whatif_row *rec = cci__whatif_recommended(d);
    int current_shown = 0, rec_shown = rec == &w->current;
    for (size_t i = 0; i < w->nrows && i < SHOWN; i++) {
        if (!current_shown && w->rows[i].peak_reserved >= w->current.peak_reserved) {
            html_row(b, w, &w->current, 1, rec);
            current_shown = 1;
        }
        html_row(b, w, &w->rows[i], 0, rec);
        rec_shown |= &w->rows[i] == rec;
    }
    if (!current_shown)
        html_row(b, w, &w->current, 1, rec);
    if (!rec_shown)
        html_row(b, w, rec, 0, rec);
    cci__sb_puts(b, "</table>\n<p class=\"proc\">");
    char rule[1024];
    cci_tuner_rule_text(rule, sizeof rule, cci__run_seconds(d), "this run's setting");
    cci__sb_html(b, rule);
    cci__sb_puts(b, "</p>\n");
}
