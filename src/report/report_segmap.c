// SPDX-License-Identifier: MIT
// The HTML segment map: one row per segment, drawn to scale so that a 20 MiB segment looks
// smaller than a 1 GiB one, and every block with a hover title (an SVG <title>, so no script).
//
// Scale: when the segments shown differ by at most SCALE_LINEAR_MAX times, widths are linear
// (the full width is the largest segment). Beyond that a linear map would shrink the small
// segments to a pixel, so widths follow log(size) instead; the map says which scale it uses, and
// each row writes its size and its share of the largest segment.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report_holders.h"
#include "report_segmap.h"

#define MAP_ROWS 32
#define MAP_W 860
#define MAP_LABEL 150
#define MAP_NOTE 110
#define ROW_H 16
#define SCALE_LINEAR_MAX 32.0
#define LOG_MIN_SHARE 0.08    ///< the smallest segment's width on the log scale, of MAP_W
#define BLOCKS_ONE_BY_ONE 512 ///< segments with more blocks draw runs of one state as one rectangle

void cci__svg_num(cci_sb *b, double v)
{
    // One decimal by integer arithmetic: SVG needs a point whatever the host program's locale says.
    long long t = (long long)(v * 10.0 + (v < 0 ? -0.5 : 0.5));
    if (t < 0) {
        cci__sb_putc(b, '-', 1);
        t = -t;
    }
    cci__sb_printf(b, "%lld.%lld", t / 10, t % 10);
}

const char *cci__block_colour(int state)
{
    return state == 1 ? CCI_HTML_ALLOCATED : state == 2 ? CCI_HTML_WAITING : state == 3 ? CCI_HTML_UNMAPPED
                                                                                        : CCI_HTML_FREE;
}

static const char *state_class(int st)
{
    return st == 1 ? "allocated" : st == 2 ? "waiting" : st == 3 ? "unmapped" : "free";
}

static const char *state_words(int st)
{
    return st == 1 ? "allocated" : st == 2 ? "freed, waiting for a stream"
         : st == 3 ? "unmapped hole of an expandable (VMM) segment: address space without memory"
                   : "free (cached)";
}

static double row_width(uint64_t size, uint64_t smallest, uint64_t largest, int log_scale)
{
    if (!log_scale)
        return (double)MAP_W * (double)size / (double)largest;
    double span = log((double)largest / (double)smallest);
    return (double)MAP_W * (LOG_MIN_SHARE + (1.0 - LOG_MIN_SHARE) * log((double)size / (double)smallest) / span);
}

// One rectangle for blocks [k, e) of the segment, with its hover title.
static void block_rect(cci_sb *b, const cci_report_device *d, const cci_segment_desc *sd, size_t k, size_t e,
                       double x0, double scale, int y, int with_sites)
{
    const cci_block_desc *first = &sd->blocks[k];
    uint64_t bytes = 0, requested = 0;
    for (size_t i = k; i < e; i++) {
        bytes += sd->blocks[i].size;
        requested += sd->blocks[i].requested;
    }
    double x = x0 + (double)(first->addr - sd->addr) * scale, w = (double)bytes * scale;
    char hs[16], hr[16];
    cci__sb_printf(b, "<rect class=\"%s\" x=\"", state_class(first->state));
    cci__svg_num(b, x);
    cci__sb_printf(b, "\" y=\"%d\" width=\"", y);
    cci__svg_num(b, w < 1.0 ? 1.0 : w);
    cci__sb_printf(b, "\" height=\"%d\" fill=\"%s\" stroke=\"#fff\" stroke-width=\"0.5\"><title>", ROW_H - 3,
                   cci__block_colour(first->state));
    if (e - k == 1) {
        cci__sb_printf(b, "%s, %s", state_words(first->state), cci__human((int64_t)bytes, hs, sizeof hs));
        if (first->state == 1 || first->requested)
            cci__sb_printf(b, " (requested %s)", cci__human((int64_t)requested, hr, sizeof hr));
        cci__sb_printf(b, " at %#llx", (unsigned long long)first->addr);
        const char *frame = with_sites && first->state == 1 ? cci__block_site_frame(d, first->addr) : NULL;
        if (frame) {
            cci__sb_puts(b, "\nallocated at ");
            cci__sb_html(b, frame);
        }
    } else {
        cci__sb_printf(b, "%zu blocks, %s, %s", e - k, state_words(first->state),
                       cci__human((int64_t)bytes, hs, sizeof hs));
        if (first->state == 1)
            cci__sb_printf(b, " (requested %s)", cci__human((int64_t)requested, hr, sizeof hr));
    }
    cci__sb_puts(b, "</title></rect>\n");
}

void cci__segment_map_html(cci_sb *b, const cci_report_device *d, const cci_layout *l, const char *id,
                           int with_sites)
{
    size_t idx[MAP_ROWS];
    size_t n = cci__largest_segments(l, idx, MAP_ROWS);
    uint64_t largest = n ? l->segments[idx[0]].size : 1, smallest = n ? l->segments[idx[n - 1]].size : 1;
    largest = largest ? largest : 1;
    smallest = smallest ? smallest : 1;
    int log_scale = (double)largest / (double)smallest > SCALE_LINEAR_MAX;
    char hl[16];
    cci__sb_printf(b, "<p class=\"proc scale\" id=\"%s-scale-%d\" data-scale=\"%s\">", id, d->device,
                   log_scale ? "log" : "linear");
    if (log_scale)
        cci__sb_printf(b, "Widths follow log(size): the segments differ by more than %.0f times. Each row "
                       "writes its size and its share of the largest (%s).</p>\n",
                       SCALE_LINEAR_MAX, cci__human((int64_t)largest, hl, sizeof hl));
    else
        cci__sb_printf(b, "Drawn to scale: the full width is %s, the largest segment.</p>\n",
                       cci__human((int64_t)largest, hl, sizeof hl));
    int h = (int)(n ? n : 1) * ROW_H + 4, w = MAP_LABEL + MAP_W + MAP_NOTE;
    cci__sb_printf(b, "<svg class=\"segmap\" id=\"%s-%d\" data-scale=\"%s\" xmlns=\"http://www.w3.org/2000/svg\" "
                   "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\">\n", id, d->device, log_scale ? "log" : "linear",
                   w, h, w, h);
    if (n == 0)
        cci__sb_printf(b, "<text x=\"4\" y=\"%d\">no segments</text>\n", ROW_H - 4);
    for (size_t i = 0; i < n; i++) {
        const cci_segment_desc *sd = &l->segments[idx[i]];
        int y = (int)i * ROW_H + 2;
        double rw = row_width(sd->size ? sd->size : 1, smallest, largest, log_scale);
        double scale = rw / (double)(sd->size ? sd->size : 1);
        char hs[16];
        cci__sb_printf(b, "<text x=\"4\" y=\"%d\">%s %s</text>\n", y + ROW_H - 5,
                       cci__human((int64_t)sd->size, hs, sizeof hs), sd->small_pool ? "small" : "large");
        // The segment's outline, so its extent shows even where its blocks are thin.
        cci__sb_printf(b, "<rect class=\"segment\" x=\"%d\" y=\"%d\" width=\"", MAP_LABEL, y);
        cci__svg_num(b, rw < 1.0 ? 1.0 : rw);
        cci__sb_printf(b, "\" height=\"%d\" fill=\"none\" stroke=\"#718096\" stroke-width=\"0.5\"/>\n", ROW_H - 3);
        for (size_t k = 0; k < sd->nblocks;) {
            size_t e = k + 1;
            if (sd->nblocks > BLOCKS_ONE_BY_ONE)
                while (e < sd->nblocks && sd->blocks[e].state == sd->blocks[k].state)
                    e++;
            block_rect(b, d, sd, k, e, MAP_LABEL, scale, y, with_sites);
            k = e;
        }
        double share = 100.0 * (double)sd->size / (double)largest;
        cci__sb_printf(b, "<text class=\"share\" x=\"");
        cci__svg_num(b, MAP_LABEL + rw + 6);
        cci__sb_printf(b, "\" y=\"%d\">", y + ROW_H - 5);
        if (share >= 10.0)
            cci__sb_printf(b, "%d", (int)(share + 0.5));
        else
            cci__svg_num(b, share);
        cci__sb_puts(b, "%</text>\n");
    }
    cci__sb_puts(b, "</svg>\n");
    if (l->nsegments > n)
        cci__sb_printf(b, "<p class=\"proc\">The %zu largest of %zu segments.</p>\n", n, l->nsegments);
}
