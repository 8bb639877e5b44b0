// SPDX-License-Identifier: MIT
// Where the preload's reports are produced from host-side data (no CUDA call).
#ifndef CCI_PRELOAD_REPORT_HOOK_H
#define CCI_PRELOAD_REPORT_HOOK_H

#include <stddef.h>
#include <stdint.h>

/// Writes the report of every device we manage to `fd`. 0, or -1 on a write error.
/// For now a plain-text summary; the report module replaces the body.
int cci_preload_write_report(int fd);

/// "1.5 MiB": bytes in the largest binary unit that keeps the number >= 1.
const char *cci_pl_fmt_bytes(char *buf, size_t len, uint64_t bytes);

#endif
