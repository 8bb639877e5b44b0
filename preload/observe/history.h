// SPDX-License-Identifier: MIT
// The program's allocation history, kept in memory for the exit-time what-ifs: an allocator
// observer appends one 16-byte record per allocation, free and OOM event (segment events are
// left out: the replay derives segments from the policy). Memory: CCI_HISTORY_MAX records
// (default 4 Mi events = 64 MiB per device) of address space are reserved at attach and filled
// page by page as the program runs, so a short run costs what it records. Past the cap the
// history stops and counts the events it dropped; the report says so. The observer never
// allocates, locks or blocks: it runs under the allocator lock.
//
// At exit (and on the first OOM of a device) the history is turned into a cci_trace and replayed
// under the sweep's grid (src/tools/sweep.h) on a few threads, bounded by CCI_WHATIF_SECONDS of
// wall clock; the program's own threads are not involved (off the hot path).
#ifndef CCI_PRELOAD_HISTORY_H
#define CCI_PRELOAD_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "allocator.h"
#include "report.h"

#define CCI_HISTORY_DEFAULT_MAX ((uint64_t)4 << 20)
#define CCI_WHATIF_DEFAULT_SECONDS 2.0

typedef struct cci_history cci_history;

/// Starts recording `a`'s events (device capacity in bytes, 0 unknown). NULL when max_events is 0,
/// on host out of memory, or when `a` has no free observer slot (logged).
cci_history *cci_history_attach(cci_allocator *a, uint64_t max_events, uint64_t capacity);
/// Only in a fork child, where the observed allocator was dropped (the child is single-threaded).
void cci_history_destroy(cci_history *h);

/// Replays the history recorded so far under the configuration `a` runs with (its user's spelling
/// `conf_text`), the advice's candidate configurations and the sweep's grid, in at most `seconds`
/// of wall clock on `jobs` threads, at `capacity` bytes (0 = unlimited), and fills *w.
/// Never fails: problems end up in w->note.
void cci_history_measure(cci_history *h, cci_allocator *a, const char *conf_text, const char (*extra)[192],
                         size_t nextra, uint64_t capacity, double seconds, int jobs, cci_report_whatif *w);

/// For the out-of-memory block: the one setting that replay of the history up to now, at the
/// device capacity, says would have avoided the failure, or that none of the grid would. "" when
/// not measured. Written into buf.
void cci_history_oom_line(cci_history *h, cci_allocator *a, const char *conf_text, double seconds, int jobs,
                          char *buf, size_t len);

#endif
