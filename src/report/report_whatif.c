// SPDX-License-Identifier: MIT
// The sections the measured advice adds to each form of the report: the what-if table (the run's
// own history replayed under other configurations; the preload measures it, see report.h).
// Each printer calls one function of this file, so the three forms stay in step.
#include <stdio.h>
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

// ---- text ----------------------------------------------------------------------------------

static void text_row(cci_sb *b, const cci_report_whatif *w, const cci_report_whatif_row *r, int current)
{
    char p[32], q[40];
    snprintf(q, sizeof q, "%s %%", pct(r->peak_reserved, w->current.peak_reserved, p, sizeof p));
    cci__sb_printf(b, "  %17.1f  %10s  %13llu  %4llu  %s%s\n", mib(r->peak_reserved), current ? "current" : q,
                   (unsigned long long)r->num_device_alloc, (unsigned long long)r->num_ooms,
                   *r->conf ? r->conf : "(defaults)", current ? "  <- this run's setting" : "");
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
    cci__sb_puts(b, "  peak reserved MiB  vs current  device allocs  OOMs  CCI_ALLOC_CONF\n");
    int current_shown = 0;
    for (size_t i = 0; i < w->nrows && i < SHOWN; i++) {
        if (!current_shown && w->rows[i].peak_reserved >= w->current.peak_reserved) {
            text_row(b, w, &w->current, 1);
            current_shown = 1;
        }
        text_row(b, w, &w->rows[i], 0);
    }
    if (!current_shown)
        text_row(b, w, &w->current, 1);
}

// ---- JSON ----------------------------------------------------------------------------------

static void json_row(cci_sb *b, const cci_report_whatif *w, const cci_report_whatif_row *r)
{
    cci__sb_puts(b, "{\"conf\": ");
    cci__sb_json_str(b, r->conf);
    cci__sb_printf(b, ", \"peak_reserved_bytes\": %llu, \"peak_allocated_bytes\": %llu, \"num_device_alloc\": %llu, "
                   "\"num_ooms\": %llu, \"delta\": %lld}",
                   (unsigned long long)r->peak_reserved, (unsigned long long)r->peak_allocated,
                   (unsigned long long)r->num_device_alloc, (unsigned long long)r->num_ooms,
                   (long long)r->peak_reserved - (long long)w->current.peak_reserved);
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
    cci__sb_puts(b, "},\n    ");
}

// ---- HTML ----------------------------------------------------------------------------------

static void html_row(cci_sb *b, const cci_report_whatif *w, const cci_report_whatif_row *r, int current)
{
    char p[32];
    cci__sb_printf(b, "<tr%s><td><code>", current ? " class=\"current\"" : "");
    cci__sb_html(b, *r->conf ? r->conf : "(defaults)");
    cci__sb_printf(b, "</code>%s</td><td>%.1f</td><td>%s</td><td>%llu</td><td>%llu</td></tr>\n",
                   current ? " (this run)" : "", mib(r->peak_reserved),
                   current ? "current" : pct(r->peak_reserved, w->current.peak_reserved, p, sizeof p),
                   (unsigned long long)r->num_device_alloc, (unsigned long long)r->num_ooms);
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
                   "<th>vs current %%</th><th>device allocs</th><th>OOMs</th></tr>\n", d->device);
    int current_shown = 0;
    for (size_t i = 0; i < w->nrows && i < SHOWN; i++) {
        if (!current_shown && w->rows[i].peak_reserved >= w->current.peak_reserved) {
            html_row(b, w, &w->current, 1);
            current_shown = 1;
        }
        html_row(b, w, &w->rows[i], 0);
    }
    if (!current_shown)
        html_row(b, w, &w->current, 1);
    cci__sb_puts(b, "</table>\n");
}
