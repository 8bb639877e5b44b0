// SPDX-License-Identifier: MIT
// The preload's side of the reports: a timeline per device, the exit report, the live dump on a
// signal, the out-of-memory block, and cci_dump_report. The report contents live in src/report*.
#ifndef CCI_PRELOAD_REPORTING_H
#define CCI_PRELOAD_REPORTING_H

#include <stddef.h>

#include "allocator.h"
#include "settings.h"

/// Takes CCI_REPORT, CCI_REPORT_FORMAT, CCI_DUMP_SIGNAL and the rank from the settings (logging
/// a refused value once), and installs the dump signal. Called once, at the first CUDA call,
/// when the layer is active (lifecycle.c).
void cci_pl_report_start(const cci_settings *settings);
/// Attaches the timeline (and peak tracking) to a new allocator before its first allocation.
void cci_pl_report_attach(int device, cci_allocator *a);
/// Attaches the trace recorder to a new allocator when CCI_TRACE records (after the timeline).
void cci_pl_trace_attach(int device, cci_allocator *a);
/// Writes the out-of-memory block on stderr. No allocator lock may be held.
void cci_pl_report_oom(int device, size_t requested);
/// Writes the full report now: `path` NULL = the configured destination (CCI_REPORT, else
/// stderr). 0, or -1 on error.
int cci_pl_report_dump(const char *path);
/// Frees the timelines of a fork child's inherited allocators (after state's child handler).
void cci_pl_report_atfork_child(void);
/// The exit report to the configured destination, unless CCI_REPORT=off (exit sequence).
void cci_pl_report_exit(void);
/// One summary line per device at CCI_LOG=info (exit_summary.c; exit sequence).
void cci_pl_exit_summary(void);
/// At exit (CCI_LOG=info): what the fences and the VMM calls cost the host, printed from the
/// statistics of every device (cuda/fence.h, cuda/vmm.h say what each line holds).
void cci_pl_exit_costs(void);

#endif
