// SPDX-License-Identifier: MIT
// The HTML segment map (report_segmap.c) and what the HTML printer shares with it.
#ifndef CCI_REPORT_SEGMAP_H
#define CCI_REPORT_SEGMAP_H

#include "report_impl.h"

// Block colours, shared by the segment maps, the legend and the timeline (allocated bytes).
#define CCI_HTML_ALLOCATED "#2b6cb0"
#define CCI_HTML_FREE "#f2c14e"
#define CCI_HTML_WAITING "#9f7aea"
#define CCI_HTML_UNMAPPED "#e2e8f0"
#define CCI_HTML_RESERVED "#c53030"

/// A number with one decimal and a point, whatever the locale (SVG coordinates).
void cci__svg_num(cci_sb *b, double v);
/// The fill of a block state (0 free, 1 allocated, 2 waiting, 3 unmapped).
const char *cci__block_colour(int state);
/// The segments of l to scale, one row each, largest first, each block with a hover title; with
/// with_sites, an allocated block's title names its call site's innermost frame (CCI_STACKS).
/// id: the SVG's id stem ("segmap-peak").
void cci__segment_map_html(cci_sb *b, const cci_report_device *d, const cci_layout *l, const char *id,
                           int with_sites);

#endif
