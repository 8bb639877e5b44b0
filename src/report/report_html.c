// SPDX-License-Identifier: MIT
// The HTML report: one self-contained file (inline CSS and SVG, no script, no font, no network)
// that opens anywhere, including on a cluster node's scratch disk copied to a laptop.
#include <stdio.h>
#include <string.h>

#include "report_holders.h"
#include "report_segmap.h"

#define C_ALLOCATED CCI_HTML_ALLOCATED
#define C_FREE CCI_HTML_FREE
#define C_WAITING CCI_HTML_WAITING
#define C_UNMAPPED CCI_HTML_UNMAPPED
#define C_RESERVED CCI_HTML_RESERVED

#define TL_W 1000
#define TL_H 260
#define TL_LEFT 90
#define TL_BOTTOM 30

static const char *const css =
    "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;margin:24px;"
    "color:#1a202c;background:#fff;max-width:1150px}"
    "h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 6px;border-bottom:2px solid #cbd5e0}"
    "h3{font-size:15px;margin:18px 0 6px}h4{font-size:13px;margin:10px 0 4px;color:#4a5568}"
    ".tables{display:flex;flex-wrap:wrap;gap:32px;align-items:flex-start}th.l{text-align:left}.proc{color:#4a5568;font-size:13px;margin:0}"
    "table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #cbd5e0;padding:2px 10px;"
    "text-align:right;font-variant-numeric:tabular-nums}th{background:#edf2f7}td.l{text-align:left}"
    "tr.sub td{color:#4a5568}tr.sub td.l{padding-left:26px}tr.top td{border-top:2px solid #a0aec0}"
    ".counts{font-size:14px;margin:6px 0}.legend span{display:inline-block;margin-right:16px;font-size:13px}"
    ".sw{display:inline-block;width:12px;height:12px;vertical-align:-1px;margin-right:4px;border:1px solid #718096}"
    "ul.advice li{margin:6px 0;max-width:950px}code{background:#edf2f7;padding:1px 4px;word-break:break-all}"
    "svg text{font-family:inherit;font-size:11px;fill:#2d3748}"
    // The configuration wraps between its keys only: a token such as immediate_reuse:False is
    // never cut, whatever the width (tests/report/test_html.py checks 1400 and 800 px).
    "p.conf{line-height:1.7}p.conf code.tok{white-space:nowrap;word-break:keep-all;margin-right:2px}"
    // A narrow window scales the drawings down (they have a viewBox) and lets a wide table
    // scroll inside its own box rather than run past the page over its neighbours.
    "svg{max-width:100%;height:auto}.tables>div{max-width:100%;overflow-x:auto}"
    "table.whatif,table.vmm,table.leaks,table.holders{display:block;max-width:100%;overflow-x:auto}";

#define num cci__svg_num

static void summary(cci_sb *b, const cci_report_device *d)
{
    static const char *const pools[] = {NULL, "from small pool", "from large pool"};
    cci__sb_printf(b, "<table class=\"summary\" id=\"summary-%d\"><thead><tr><th class=\"l\">Metric</th><th>Cur Usage</th>"
                   "<th>Peak Usage</th><th>Tot Alloc</th><th>Tot Freed</th></tr></thead><tbody>\n", d->device);
    for (size_t i = 0; i < cci__stat_nrows; i++) {
        const cci_stat_row *r = &cci__stat_rows[i];
        const int order[] = {CCI_POOL_ALL, CCI_POOL_LARGE, CCI_POOL_SMALL};
        for (int k = 0; k < (r->per_pool ? 3 : 1); k++) {
            const cci_stat *st = cci__stat_at(&d->stats, r, order[k]);
            cci__sb_printf(b, "<tr class=\"%s\"><td class=\"l\">%s</td>", k ? "sub" : "top",
                           k ? pools[order[k]] : r->label);
            const int64_t v[4] = {st->current, st->peak, st->allocated, st->freed};
            for (int c = 0; c < 4; c++) {
                char h[24];
                if (r->bytes)
                    cci__human(v[c], h, sizeof h);
                else
                    snprintf(h, sizeof h, "%lld", (long long)v[c]);
                cci__sb_printf(b, "<td>%s</td>", h);
            }
            cci__sb_puts(b, "</tr>\n");
        }
    }
    cci__sb_puts(b, "</tbody></table>\n");
}

static void frag_table(cci_sb *b, const cci_report_device *d)
{
    cci__sb_printf(b, "<table class=\"frag\" id=\"frag-%d\"><thead><tr><th class=\"l\">Figure</th><th>At peak reserved</th>"
                   "<th>%s</th></tr></thead><tbody>\n", d->device, cci__When(d));
    for (size_t i = 0; i < cci__frag_nrows; i++) {
        char v[2][24];
        const cci_frag_row *r = &cci__frag_rows[i];
        cci__sb_puts(b, "<tr><td class=\"l\">");
        cci__sb_html(b, r->label);
        cci__sb_printf(b, "</td><td>%s</td><td>%s</td></tr>\n", cci__frag_value(&d->frag_peak, r, v[0], sizeof v[0]),
                       cci__frag_value(&d->frag_now, r, v[1], sizeof v[1]));
    }
    cci__sb_puts(b, "</tbody></table>\n");
}

// A step line through the samples: each value holds until the next sample, and at each sample
// the line also reaches the interval's maximum, so peaks hidden by merged samples still show.
static void series(cci_sb *b, const cci_report_device *d, int reserved, uint64_t t0, double xs, double ys,
                   const char *colour)
{
    int base = TL_H - TL_BOTTOM;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0)
            cci__sb_printf(b, "<polygon class=\"%s-area\" fill=\"%s\" fill-opacity=\"0.12\" stroke=\"none\" "
                           "points=\"", reserved ? "reserved" : "allocated", colour);
        else
            cci__sb_printf(b, "<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                           "stroke-linejoin=\"round\" points=\"", reserved ? "reserved" : "allocated", colour);
        if (pass == 0) {
            num(b, TL_LEFT);
            cci__sb_printf(b, ",%d ", base);
        }
        double prev = 0;
        for (size_t i = 0; i < d->nsamples; i++) {
            const cci_timeline_sample *s = &d->samples[i];
            double x = TL_LEFT + (double)(s->t - t0) * xs;
            double v = (double)(reserved ? s->reserved : s->allocated) * ys;
            double m = (double)(reserved ? s->reserved_max : s->allocated_max) * ys;
            const double ys3[3] = {prev, m, v};
            for (int k = i ? 0 : 1; k < 3; k++) {
                if (k && ys3[k] == ys3[k - 1] && i)
                    continue;
                num(b, x);
                cci__sb_putc(b, ',', 1);
                num(b, base - ys3[k]);
                cci__sb_putc(b, ' ', 1);
            }
            prev = v;
        }
        if (pass == 0 && d->nsamples) {
            num(b, TL_LEFT + (double)(d->samples[d->nsamples - 1].t - t0) * xs);
            cci__sb_printf(b, ",%d", base);
        }
        cci__sb_puts(b, "\"/>\n");
    }
}

// A grid step of 1, 2, 2.5 or 5 times a power of ten in the largest binary unit that fits, so
// that at most six gridlines carry round labels (250.0 MiB, not 763.0 MiB).
static uint64_t nice_step(uint64_t most)
{
    uint64_t unit = 1;
    while (unit <= most / 1024)
        unit *= 1024;
    double raw = (double)most / (double)unit / 6.0, mag = 1.0;
    while (mag * 10.0 <= raw)
        mag *= 10.0;
    while (mag > raw && mag > 0.01)
        mag /= 10.0;
    static const double mult[] = {1.0, 2.0, 2.5, 5.0, 10.0};
    double step = 10.0 * mag;
    for (size_t i = 0; i < sizeof mult / sizeof mult[0]; i++) {
        if (mult[i] * mag >= raw) {
            step = mult[i] * mag;
            break;
        }
    }
    uint64_t s = (uint64_t)(step * (double)unit + 0.5);
    return s ? s : 1;
}

static void timeline(cci_sb *b, const cci_report_device *d)
{
    if (!d->have_timeline || d->nsamples == 0) {
        cci__sb_printf(b, "<p class=\"proc\" id=\"timeline-%d\">No timeline was recorded.</p>\n", d->device);
        return;
    }
    uint64_t t0 = d->samples[0].t, t1 = d->samples[d->nsamples - 1].t, most = 1;
    for (size_t i = 0; i < d->nsamples; i++)
        most = d->samples[i].reserved_max > most ? d->samples[i].reserved_max : most;
    uint64_t step = nice_step(most), top = (most + step - 1) / step * step;
    int ticks = (int)(top / step);
    int plot_w = TL_W - TL_LEFT - 10, plot_h = TL_H - TL_BOTTOM - 10;
    double xs = (double)plot_w / (double)(t1 > t0 ? t1 - t0 : 1), ys = (double)plot_h / (double)top;
    int base = TL_H - TL_BOTTOM;
    cci__sb_printf(b, "<svg class=\"timeline\" id=\"timeline-%d\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
                   "height=\"%d\" viewBox=\"0 0 %d %d\">\n", d->device, TL_W, TL_H, TL_W, TL_H);
    for (int g = 0; g <= ticks; g++) {
        char h[16];
        int y = base - plot_h * g / ticks;
        cci__sb_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#e2e8f0\"/>"
                       "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n", TL_LEFT, y, TL_LEFT + plot_w, y,
                       TL_LEFT - 6, y + 4, cci__human((int64_t)(step * (uint64_t)g), h, sizeof h));
    }
    int events = d->clock == CCI_TIMELINE_CLOCK_EVENTS;
    for (int g = 0; g <= 4; g++) {
        uint64_t t = (t1 - t0) * (uint64_t)g / 4;
        int x = TL_LEFT + plot_w * g / 4;
        cci__sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", x, base + 16);
        if (events)
            cci__sb_printf(b, "%llu", (unsigned long long)t);
        else
            cci__sb_printf(b, "%llu.%03llu s", (unsigned long long)(t / 1000000), (unsigned long long)(t / 1000 % 1000));
        cci__sb_puts(b, "</text>\n");
    }
    cci__sb_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#4a5568\"/>\n", TL_LEFT, base,
                   TL_LEFT + plot_w, base);
    series(b, d, 1, t0, xs, ys, C_RESERVED);
    series(b, d, 0, t0, xs, ys, C_ALLOCATED);
    cci__sb_puts(b, "</svg>\n");
    cci__sb_printf(b, "<div class=\"legend\"><span><i class=\"sw\" style=\"background:%s\"></i>reserved</span>"
                   "<span><i class=\"sw\" style=\"background:%s\"></i>allocated</span><span>x axis: %s; "
                   "spikes show the highest value between two samples (%zu samples)</span></div>\n",
                   C_RESERVED, C_ALLOCATED, events ? "allocator events" : "seconds since start", d->nsamples);
}

// Advice marks commands with backquotes, as Markdown does; here they become <code>.
static void advice_html(cci_sb *b, const char *text)
{
    char piece[2] = {0, 0};
    int in_code = 0;
    for (const char *p = text; *p; p++) {
        if (*p == '`') {
            cci__sb_puts(b, in_code ? "</code>" : "<code>");
            in_code = !in_code;
            continue;
        }
        piece[0] = *p;
        cci__sb_html(b, piece);
    }
    if (in_code)
        cci__sb_puts(b, "</code>");
}

// One <code class="tok"> per key (and per element of a bracketed list), its comma kept, with a
// space between tokens: the only places a line may break. Pasted back, the spaces are ignored by
// the grammar.
static void config_tokens(cci_sb *b, const char *conf)
{
    char tok[256];
    for (const char *p = conf; *p;) {
        size_t n = strcspn(p, ",");
        if (p[n] == ',')
            n++;
        size_t k = n < sizeof tok - 1 ? n : sizeof tok - 1;
        memcpy(tok, p, k);
        tok[k] = 0;
        cci__sb_puts(b, p == conf ? "<code class=\"tok\">" : " <code class=\"tok\">");
        cci__sb_html(b, tok);
        cci__sb_puts(b, "</code>");
        p += n;
    }
}

static void device(cci_sb *b, const cci_report_device *d)
{
    char h[16];
    cci__sb_printf(b, "<section class=\"device\" id=\"device-%d\">\n<h2>Device %d</h2>\n", d->device, d->device);
    cci__sb_printf(b, "<p class=\"counts\">CUDA OOMs: %llu | cudaMalloc retries: %llu | device capacity: %s",
                   (unsigned long long)d->stats.num_ooms, (unsigned long long)d->stats.num_alloc_retries,
                   d->stats.device_capacity ? cci__human((int64_t)d->stats.device_capacity, h, sizeof h) : "unknown");
    if (*d->device_kind) {
        cci__sb_printf(b, " | <span class=\"simulated\" id=\"device-kind-%d\">", d->device);
        cci__sb_html(b, d->device_kind);
        cci__sb_puts(b, "</span>");
    }
    cci__sb_puts(b, "</p>\n");
    cci__sb_printf(b, "<h3>Advice</h3>\n<ul class=\"advice\" id=\"advice-%d\">\n", d->device);
    for (size_t k = 0; k < d->nadvice; k++) {
        cci__sb_printf(b, "<li data-rule=\"%s\">", d->advice[k].rule);
        advice_html(b, d->advice[k].text);
        cci__sb_puts(b, "</li>\n");
    }
    cci__sb_puts(b, "</ul>\n");
    cci__whatif_html(b, d);
    cci__sb_puts(b, "<h3>Allocated and reserved bytes over time</h3>\n");
    timeline(b, d);
    cci__vmm_html(b, d);
    cci__sb_printf(b, "<h3>Segments at peak reserved and %s</h3>\n"
                   "<div class=\"legend\"><span><i class=\"sw\" style=\"background:%s\"></i>allocated</span>"
                   "<span><i class=\"sw\" style=\"background:%s\"></i>free (cached)</span>"
                   "<span><i class=\"sw\" style=\"background:%s\"></i>freed, waiting for a stream</span>"
                   "<span><i class=\"sw\" style=\"background:%s\"></i>unmapped (expandable segment)</span>"
                   "<span>one row per segment, largest first; hover a block for its size, state%s</span></div>\n",
                   cci__when(d), C_ALLOCATED, C_FREE, C_WAITING, C_UNMAPPED,
                   d->stacks ? (d->live ? " and call site (at the time of the dump)" : " and call site (at exit)") : "");
    cci__sb_puts(b, "<h4>At peak reserved</h4>\n");
    if (d->have_peak)
        cci__segment_map_html(b, d, &d->peak, "segmap-peak", 0);
    else
        cci__sb_printf(b, "<p class=\"proc\" id=\"segmap-peak-%d\">Not recorded (peak tracking was off).</p>\n",
                       d->device);
    cci__sb_printf(b, "<h4>%s</h4>\n", cci__When(d));
    cci__segment_map_html(b, d, &d->now, "segmap-exit", 1);
    cci__holders_html(b, d);
    cci__sb_puts(b, "<div class=\"tables\"><div><h3>Fragmentation</h3>\n");
    frag_table(b, d);
    cci__sb_puts(b, "</div><div><h3>Memory summary</h3>\n");
    summary(b, d);
    cci__sb_puts(b, "</div></div>\n");
    cci__sb_printf(b, "<h3>Configuration</h3>\n<p class=\"conf\" id=\"conf-%d\">", d->device);
    config_tokens(b, d->config);
    cci__sb_puts(b, "</p>\n</section>\n");
}

void cci__report_html(cci_sb *b, const cci_report_snapshot *s)
{
    cci__sb_puts(b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                    "<title>libccinterpose memory report</title>\n<style>");
    cci__sb_puts(b, css);
    cci__sb_puts(b, "</style></head>\n<body>\n<h1>libccinterpose memory report</h1>\n<p class=\"proc\" id=\"process\">");
    cci__sb_puts(b, "program ");
    cci__sb_html(b, s->program);
    cci__sb_printf(b, ", pid %ld, rank %d, host ", s->pid, s->rank);
    cci__sb_html(b, s->host);
    cci__sb_printf(b, ", %s%s</p>\n", s->time_utc,
                   s->ndevices && s->devices[0].live ? " (live dump: the program was still running)" : "");
    for (int i = 0; i < s->ndevices; i++)
        device(b, &s->devices[i]);
    if (s->ndevices == 0)
        cci__sb_puts(b, "<p>No device was in use.</p>\n");
    cci__process_html(b, s);
    cci__sb_puts(b, "</body></html>\n");
}
