// SPDX-License-Identifier: MIT
// The holders and leak sections (report_holders.c), shared by the text, JSON, HTML and OOM printers.
#ifndef CCI_REPORT_HOLDERS_H
#define CCI_REPORT_HOLDERS_H

#include "report_impl.h"

/// "Top holders at peak reserved" (text); nothing when call sites are off.
void cci__holders_text(cci_sb *b, const cci_report_device *d);
/// "Leak or cache": what the program still holds apart from the cache, and by whom (text).
void cci__leaks_text(cci_sb *b, const cci_report_device *d);
/// At most `top` call sites of h, one line each plus their frames, under `indent`.
void cci__holders_list_text(cci_sb *b, const cci_report_holders *h, size_t top, const char *indent, int ages);
/// The "holders" and "leaks" members of a device object, each line ending in ",\n".
void cci__holders_json(cci_sb *b, const cci_report_device *d);
/// The leak table and the holder tables (HTML).
void cci__holders_html(cci_sb *b, const cci_report_device *d);
/// The innermost frame of the live block at addr (for hover titles), or NULL when unknown.
const char *cci__block_site_frame(const cci_report_device *d, uintptr_t addr);

#endif
