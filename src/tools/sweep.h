// SPDX-License-Identifier: MIT
// The configuration tuner behind `ccreplay --sweep`: replays one trace under a fixed grid of
// configurations in parallel and ranks them.
#ifndef CCI_SWEEP_H
#define CCI_SWEEP_H

#include <stddef.h>
#include <stdio.h>

#include "replay.h"
#include "report.h"
#include "tuner.h"

/// Runs the grid on `jobs` threads (>= 1) and prints the ranked table and the recommendation
/// (cci_tuner_choose against the default, scaled by the trace's duration) to `out`, or with `json`
/// one JSON object: {"trace", "events", "capacity_bytes", "duration_us", "rule", "recommended":
/// ROW, "results": [ROW, ...] in rank order}, each ROW {"conf", "peak_reserved_bytes",
/// "peak_allocated_bytes", "num_device_alloc", "num_ooms", "device_calls", "estimated_call_us"}
/// ("conf": "" is the default). The output depends only on the trace and `capacity`
/// (0 = unlimited), never on `jobs` or timing.
/// 0, or -1 with one line in err (host out of memory).
int cci_sweep(const cci_trace *t, const char *name, size_t capacity, int jobs, int json, FILE *out, char *err,
              size_t errlen);

/// The device calls of one replay, as the tuner weighs them.
void cci_sweep_tuner_calls(const cci_replay_result *r, cci_tuner_calls *c);

// ---- the grid as a library: what the preload's exit-time what-ifs use --------------------------

typedef enum cci_sweep_row_state {
    CCI_SWEEP_SKIPPED,  ///< not started before the time bound
    CCI_SWEEP_DONE,     ///< replayed to the end
    CCI_SWEEP_CUT,      ///< started but stopped by the time bound (figures are lower bounds)
} cci_sweep_row_state;

typedef struct cci_sweep_row {
    char conf[192];          ///< CCI_ALLOC_CONF grammar; "" = the defaults
    int nkeys;               ///< keys in conf (fewer is simpler advice)
    int is_baseline;         ///< the plan's baseline configuration (also when it equals a grid entry)
    cci_sweep_row_state state;
    cci_replay_result res;
} cci_sweep_row;

/// One replayed row as the report's what-if table shows it (the exit report and its tests alike).
void cci_sweep_whatif_row(cci_report_whatif_row *d, const cci_sweep_row *s);

typedef struct cci_sweep_plan {
    size_t capacity;              ///< device bytes (0 = unlimited; the gc entries need a capacity)
    int jobs;                     ///< threads (>= 1)
    const cci_config *baseline;   ///< the configuration the program ran with, or NULL
    const char *baseline_conf;    ///< how its user wrote it (shown as its conf; NULL = "")
    const char *const *extra;     ///< more configurations to measure (CCI_ALLOC_CONF grammar)
    size_t nextra;                ///< entries that do not parse, or repeat a grid entry, are skipped
    double seconds;               ///< wall-clock bound for the whole plan; 0 = none
} cci_sweep_plan;

typedef struct cci_sweep_outcome {
    cci_sweep_row *rows;   ///< baseline first, then the extras, then the grid (simplest first)
    size_t n;
    size_t done;           ///< rows in state CCI_SWEEP_DONE
    int cut_short;         ///< the time bound stopped the plan before every row was replayed
    double seconds;        ///< wall-clock time taken
} cci_sweep_outcome;

/// Replays the trace under the baseline, the extras and the sweep's grid, on plan->jobs threads,
/// in that order, so that a time bound cuts the least important rows. The rows are listed in
/// that order, not ranked. 0, or -1 with one line in err (host out of memory).
int cci_sweep_measure(const cci_trace *t, const cci_sweep_plan *plan, cci_sweep_outcome *out, char *err,
                      size_t errlen);
void cci_sweep_outcome_free(cci_sweep_outcome *o);

#endif
